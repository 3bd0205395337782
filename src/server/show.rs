//! Keys and sources in log lines: bytes shown as text where they are text.

pub fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

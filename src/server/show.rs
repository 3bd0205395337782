//! Keys and sources in log lines: bytes shown as text where they are text.

pub fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `, now held by 'a', 'b'` for the holders a release let in, or nothing.
pub fn now_held_by(next: &[super::table::Holder]) -> String {
    if next.is_empty() {
        return String::new();
    }
    let names: Vec<String> = next
        .iter()
        .map(|h| format!("'{}'", show(&h.source)))
        .collect();
    format!(", now held by {}", names.join(", "))
}

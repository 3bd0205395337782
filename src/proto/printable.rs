//! Bytes from the network (keys, sources, a foreign reply) as text for a
//! log line or an error message.

use std::fmt::Write;

/// Text as is; control characters, backslashes and bytes that are not
/// UTF-8 escaped (`\r`, `\n`, `\\`, `\x1b`), so a key cannot forge a log
/// line or drive the terminal.
pub(crate) fn printable(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\r' => out.push_str("\\r"),
                '\n' => out.push_str("\\n"),
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => escape(&mut out, c.encode_utf8(&mut [0; 4]).as_bytes()),
                c => out.push(c),
            }
        }
        escape(&mut out, chunk.invalid());
    }
    out
}

fn escape(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        let _ = write!(out, "\\x{b:02x}");
    }
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn text_stays_and_the_rest_is_escaped() {
        assert_eq!(printable(b"-ERR x\r\n\x1b[31m"), "-ERR x\\r\\n\\x1b[31m");
        assert_eq!(printable("déploi/prod".as_bytes()), "déploi/prod");
        assert_eq!(printable(b"a\\b\xff\x00"), "a\\\\b\\xff\\x00");
        assert_eq!(printable("\u{85}".as_bytes()), "\\xc2\\x85");
    }
}

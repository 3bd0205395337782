//! Tiny raw clients for the manager protocol and the metrics endpoint.

use std::io::{Read, Write};
use std::net::SocketAddr;

use super::serve::connect;

/// A plain HTTP/1.1 GET: the status line and the body.
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = connect(addr);
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// `u32 n` then n × (`u8 len`, bytes): the body of RSET and RSBS.
pub(crate) fn names(names: &[&[u8]]) -> Vec<u8> {
    let mut out = (names.len() as u32).to_le_bytes().to_vec();
    for n in names {
        out.push(n.len() as u8);
        out.extend_from_slice(n);
    }
    out
}

/// The value of an unlabelled sample in Prometheus text.
pub(crate) fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {name} in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

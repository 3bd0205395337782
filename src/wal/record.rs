//! Record framing: `length:u32le | crc32c:u32le | payload`, no I/O.
//!
//! The checksum covers the four length bytes and the payload, so a flipped
//! bit in either is caught. Payloads:
//!
//! - Grant   `[1][keyLen][key][sourceLen][source][peerLen][peer][since_ms:u64le]`
//! - Release `[2][keyLen][key]`

/// Header bytes before each payload.
pub const HEADER: usize = 8;
/// No valid payload is longer (3 fields of at most 255 bytes, tag, time).
pub const MAX_PAYLOAD: usize = 1 + 3 * 256 + 8;

const TAG_GRANT: u8 = 1;
const TAG_RELEASE: u8 = 2;

/// One change to the table of held keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// `key` is now held by `source` (connected from `peer`, as text).
    Grant {
        key: Vec<u8>,
        source: Vec<u8>,
        peer: Vec<u8>,
        since_ms: u64,
    },
    /// `key` is free.
    Release { key: Vec<u8> },
}

impl Record {
    pub fn key(&self) -> &[u8] {
        match self {
            Record::Grant { key, .. } | Record::Release { key } => key,
        }
    }

    /// Appends the framed record to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; HEADER]);
        match self {
            Record::Grant {
                key,
                source,
                peer,
                since_ms,
            } => {
                out.push(TAG_GRANT);
                for field in [key, source, peer] {
                    let field = &field[..field.len().min(255)];
                    out.push(field.len() as u8);
                    out.extend_from_slice(field);
                }
                out.extend_from_slice(&since_ms.to_le_bytes());
            }
            Record::Release { key } => {
                let key = &key[..key.len().min(255)];
                out.push(TAG_RELEASE);
                out.push(key.len() as u8);
                out.extend_from_slice(key);
            }
        }
        let len = (out.len() - start - HEADER) as u32;
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
        let crc = checksum(&out[start..start + 4], &out[start + HEADER..]);
        out[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }
}

fn checksum(len: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(len), payload)
}

/// What is at one offset of a log.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// A whole, valid record and its framed length.
    Record(Record, usize),
    /// The buffer ends inside a record (or is empty): a torn tail.
    Incomplete,
    /// A whole record that is not valid.
    Corrupt(&'static str),
}

/// Decodes the record at the start of `buf`.
pub fn decode(buf: &[u8]) -> Next {
    if buf.len() < HEADER {
        return Next::Incomplete;
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().unwrap()) as usize;
    if len == 0 || len > MAX_PAYLOAD {
        return Next::Corrupt("impossible record length");
    }
    let Some(payload) = buf.get(HEADER..HEADER + len) else {
        return Next::Incomplete;
    };
    let crc = u32::from_le_bytes(buf[4..8].try_into().unwrap());
    if checksum(&buf[0..4], payload) != crc {
        return Next::Corrupt("checksum mismatch");
    }
    match parse(payload) {
        Some(record) => Next::Record(record, HEADER + len),
        None => Next::Corrupt("unreadable payload"),
    }
}

fn parse(payload: &[u8]) -> Option<Record> {
    let (&tag, rest) = payload.split_first()?;
    let mut cur = rest;
    let mut field = || -> Option<Vec<u8>> {
        let (&n, rest) = cur.split_first()?;
        let bytes = rest.get(..n as usize)?.to_vec();
        cur = &rest[n as usize..];
        Some(bytes)
    };
    let record = match tag {
        TAG_GRANT => {
            let key = field()?;
            let source = field()?;
            let peer = field()?;
            let since: [u8; 8] = cur.try_into().ok()?;
            Record::Grant {
                key,
                source,
                peer,
                since_ms: u64::from_le_bytes(since),
            }
        }
        TAG_RELEASE => {
            let key = field()?;
            if !cur.is_empty() {
                return None;
            }
            Record::Release { key }
        }
        _ => return None,
    };
    if record.key().is_empty() {
        return None;
    }
    Some(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn grant() -> Record {
        Record::Grant {
            key: b"deploy/prod".to_vec(),
            source: b"ci-7".to_vec(),
            peer: b"127.0.0.1:5000".to_vec(),
            since_ms: 1_700_000_000_123,
        }
    }

    #[test]
    fn roundtrip_and_every_cut_is_incomplete() {
        for r in [grant(), Record::Release { key: b"k".to_vec() }] {
            let bytes = r.encode();
            assert_eq!(decode(&bytes), Next::Record(r.clone(), bytes.len()));
            for cut in 0..bytes.len() {
                assert_eq!(decode(&bytes[..cut]), Next::Incomplete, "cut {cut}");
            }
        }
    }

    #[test]
    fn every_flipped_byte_is_caught() {
        let bytes = grant().encode();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            // Followed by plenty of bytes, so a grown length is still whole.
            b.extend_from_slice(&[0x55; 2 * MAX_PAYLOAD]);
            assert!(matches!(decode(&b), Next::Corrupt(_)), "flip at {i}");
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode(&bytes);
        }
    }
}

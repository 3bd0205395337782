//! Znode paths, Curator-compatible node names and the data each node carries.
//! Pure: no I/O, so every rule here is unit-tested.

use std::time::{SystemTime, UNIX_EPOCH};

/// The lock name Curator's `InterProcessMutex` uses; every queue node
/// contains it, followed by the 10-digit sequence number.
pub const LOCK_NAME: &str = "lock-";

/// Why a key cannot be a znode path under the root (`None` when it can).
pub fn key_problem(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some("the key is empty".into());
    }
    if key.starts_with('/') || key.ends_with('/') {
        return Some("a ZooKeeper key must not start or end with '/'".into());
    }
    for segment in key.split('/') {
        if segment.is_empty() {
            return Some("a ZooKeeper key must not contain an empty segment ('//')".into());
        }
        if segment == "." || segment == ".." {
            return Some(format!("'{segment}' is not allowed as a znode name"));
        }
        if let Some(c) = segment.chars().find(|&c| forbidden_char(c)) {
            return Some(format!(
                "the character U+{:04X} is not allowed in a znode name",
                c as u32
            ));
        }
        if segment.starts_with("_c_") || sequence_of(segment).is_some() {
            return Some(format!(
                "'{segment}' looks like a lock queue node name, which lc-cli reserves"
            ));
        }
    }
    None
}

/// The characters ZooKeeper refuses in a path (`PathUtils.validatePath`).
fn forbidden_char(c: char) -> bool {
    let u = c as u32;
    u <= 0x1f || (0x7f..=0x9f).contains(&u) || (0xd800..=0xf8ff).contains(&u) || u >= 0xfff0
}

/// `ROOT/KEY`: the lock node whose children are the queue.
pub fn lock_dir(root: &str, key: &str) -> String {
    format!("{root}/{key}")
}

/// `_c_<uuid>-lock-`: the unique prefix of a new queue node, as Curator
/// names them, so a node created just before a connection loss can be found
/// again by this prefix.
pub fn new_prefix() -> String {
    format!("_c_{}-{LOCK_NAME}", uuid::Uuid::new_v4())
}

/// The sequence number of a queue node (the digits after the last `lock-`),
/// or None for a child that is not a queue node.
pub fn sequence_of(name: &str) -> Option<u64> {
    let at = name.rfind(LOCK_NAME)?;
    let digits = &name[at + LOCK_NAME.len()..];
    if digits.len() < 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The queue: the queue nodes among `children`, in the order they are
/// served (sequence number, then name, so every client agrees on ties).
pub fn queue(children: Vec<String>) -> Vec<String> {
    let mut nodes: Vec<(u64, String)> = children
        .into_iter()
        .filter_map(|c| sequence_of(&c).map(|s| (s, c)))
        .collect();
    nodes.sort();
    nodes.into_iter().map(|(_, c)| c).collect()
}

/// The name of the persistent node that keeps a detached hold: a fresh
/// Curator-style prefix with the same sequence digits as the ephemeral node
/// it replaces, so it keeps that node's place at the head of the queue.
pub fn detached_name(ephemeral: &str) -> Option<String> {
    let at = ephemeral.rfind(LOCK_NAME)?;
    sequence_of(ephemeral)?;
    Some(format!(
        "{}{}",
        new_prefix(),
        &ephemeral[at + LOCK_NAME.len()..]
    ))
}

/// Whether a node waits/holds for a live session or keeps a detached hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Ephemeral: waiting, or held while its lc-cli runs.
    Queue,
    /// Persistent: held after `lock KEY` without a command, until `unlock`.
    Detached,
}

/// What lc-cli writes into each of its nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeData {
    pub mode: Mode,
    /// Milliseconds since the epoch: arrival for a queue node, the moment
    /// the hold was taken for a detached one.
    pub since_ms: u64,
    pub pid: u32,
    /// Last, so it may contain anything.
    pub source: String,
}

const MAGIC: &str = "lc-cli 1\n";

impl NodeData {
    pub fn new(mode: Mode, source: &str) -> Self {
        NodeData {
            mode,
            since_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            pid: std::process::id(),
            source: source.to_string(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mode = match self.mode {
            Mode::Queue => "queue",
            Mode::Detached => "detached",
        };
        format!(
            "{MAGIC}mode={mode}\nsince={}\npid={}\nsource={}",
            self.since_ms, self.pid, self.source
        )
        .into_bytes()
    }

    /// None for data lc-cli did not write (a Curator client's node).
    pub fn decode(data: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(data).ok()?;
        let mut rest = text.strip_prefix(MAGIC)?;
        let mut out = NodeData {
            mode: Mode::Queue,
            since_ms: 0,
            pid: 0,
            source: String::new(),
        };
        loop {
            if let Some(source) = rest.strip_prefix("source=") {
                out.source = source.to_string();
                return Some(out);
            }
            let (line, tail) = rest.split_once('\n')?;
            rest = tail;
            match line.split_once('=')? {
                ("mode", "queue") => out.mode = Mode::Queue,
                ("mode", "detached") => out.mode = Mode::Detached,
                ("since", v) => out.since_ms = v.parse().ok()?,
                ("pid", v) => out.pid = v.parse().ok()?,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(key_problem("deploy/prod"), None);
        assert_eq!(key_problem("a.b/c-d_e"), None);
        for bad in [
            "",
            "/a",
            "a/",
            "a//b",
            ".",
            "a/./b",
            "a/..",
            "a\0b",
            "a\nb",
            "x/_c_1-lock-0000000001",
            "lock-0000000012",
        ] {
            assert!(key_problem(bad).is_some(), "{bad:?} accepted");
        }
    }

    #[test]
    fn sequences_and_order() {
        assert_eq!(sequence_of("_c_ab-lock-0000000012"), Some(12));
        assert_eq!(sequence_of("lock-0000000003"), Some(3));
        assert_eq!(sequence_of("_c_ab-lock-12"), None);
        assert_eq!(sequence_of("prod"), None);
        assert_eq!(sequence_of("lock-step"), None);
        let q = queue(vec![
            "_c_b-lock-0000000010".into(),
            "prod".into(),
            "_c_a-lock-0000000009".into(),
            "_c_c-lock-0000000100".into(),
        ]);
        assert_eq!(
            q,
            [
                "_c_a-lock-0000000009",
                "_c_b-lock-0000000010",
                "_c_c-lock-0000000100"
            ]
        );
    }

    #[test]
    fn detached_keeps_the_place() {
        let d = detached_name("_c_x-lock-0000000042").unwrap();
        assert!(d.starts_with("_c_") && d.ends_with("-lock-0000000042"));
        assert_ne!(d, "_c_x-lock-0000000042");
        assert_eq!(sequence_of(&d), Some(42));
        let p = new_prefix();
        assert!(p.starts_with("_c_") && p.ends_with("-lock-") && p.len() == 3 + 36 + 6);
    }

    #[test]
    fn data_round_trip() {
        for source in ["host1", "", "a\nsource=b", "ünï"] {
            let d = NodeData::new(Mode::Detached, source);
            assert_eq!(NodeData::decode(&d.encode()), Some(d));
        }
        assert_eq!(NodeData::decode(b"127.0.0.1"), None);
    }
}

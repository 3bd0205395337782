//! Znode paths, Curator-compatible node names and the data each node carries.
//! Pure: no I/O, so every rule here is unit-tested.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::backend::fields::FieldList;

/// What a queue node stands for, told by the lock name in it (each followed
/// by the 10-digit sequence number), as Curator's recipes name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NodeKind {
    /// `lock-`: `InterProcessMutex` (lc-cli's exclusive lock on a key no
    /// read-write lock uses; the acquirers' mutex of a semaphore).
    Mutex,
    /// `__WRIT__`: the write lock of `InterProcessReadWriteLock`.
    Write,
    /// `__READ__`: its read lock (lc-cli's `--shared`).
    Read,
    /// `lease-`: a lease of `InterProcessSemaphoreV2`.
    Lease,
}

impl NodeKind {
    const ALL: [NodeKind; 4] = [
        NodeKind::Mutex,
        NodeKind::Write,
        NodeKind::Read,
        NodeKind::Lease,
    ];

    pub(super) fn lock_name(self) -> &'static str {
        match self {
            NodeKind::Mutex => "lock-",
            NodeKind::Write => "__WRIT__",
            NodeKind::Read => "__READ__",
            NodeKind::Lease => "lease-",
        }
    }

    /// Whether a node of this kind excludes everyone (a writer).
    pub(super) fn is_writer(self) -> bool {
        matches!(self, NodeKind::Mutex | NodeKind::Write)
    }
}

/// The children of a semaphore's znode (`InterProcessSemaphoreV2`): the
/// mutex its acquirers queue on, and the leases.
pub(super) const SEMAPHORE_LOCKS: &str = "locks";
pub(super) const SEMAPHORE_LEASES: &str = "leases";

/// The children lc-cli keeps beside a key's queue for deploy queues (the
/// mark, the markers) start with this: `_c_`, which no key segment may
/// start with (`key_problem`), and no lock name, so neither lc-cli nor a
/// Curator recipe takes them for contenders (Curator sorts a child without
/// its lock name by its whole name: after every sequence number, since `_`
/// sorts after the digits).
pub(super) const EXTRA_PREFIX: &str = "_c_lc-";

/// The key's mark (`--order`): a persistent child of the lock node whose
/// data is the highest order whose command ended with status 0, in decimal.
pub(super) const MARK: &str = "_c_lc-mark";

/// Whether a child of a lock node is one of lc-cli's extra nodes.
pub(super) fn is_extra(child: &str) -> bool {
    child.starts_with(EXTRA_PREFIX)
}

/// What a marker tells the node it is aimed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Marker {
    /// A newer `--newest` request deleted the waiting node: it is superseded.
    Superseded,
    /// A newer `--cancel-running` request asks the holder to stop.
    Cancel,
}

/// The marker aimed at the queue node `node` (its unique part and sequence,
/// without its lock name): `_c_lc-superseded-<uuid>-0000000012`.
pub(super) fn marker(kind: Marker, node: &str) -> Option<String> {
    let (k, _) = parse(node)?;
    let at = node.rfind(k.lock_name())?;
    let unique = node[..at].strip_prefix("_c_").unwrap_or(&node[..at]);
    let digits = &node[at + k.lock_name().len()..];
    let what = match kind {
        Marker::Superseded => "superseded",
        Marker::Cancel => "cancel",
    };
    Some(format!("{EXTRA_PREFIX}{what}-{unique}{digits}"))
}

/// A mark node's value (None: not a number, as if there were none).
pub(super) fn parse_mark(data: &[u8]) -> Option<u64> {
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}

/// Why a key cannot be a znode path under the root (`None` when it can).
pub(super) fn key_problem(key: &str) -> Option<String> {
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
pub(super) fn lock_dir(root: &str, key: &str) -> String {
    format!("{root}/{key}")
}

/// `_c_<uuid>-<lock name>`: the unique prefix of a new queue node, as
/// Curator names them, so a node created just before a connection loss can
/// be found again by this prefix.
pub(super) fn new_prefix(kind: NodeKind) -> String {
    format!("_c_{}-{}", uuid::Uuid::new_v4(), kind.lock_name())
}

/// A queue node's kind and sequence number (the digits after its lock
/// name), or None for a child that is not a queue node.
pub(super) fn parse(name: &str) -> Option<(NodeKind, u64)> {
    NodeKind::ALL.into_iter().find_map(|kind| {
        let at = name.rfind(kind.lock_name())?;
        let digits = &name[at + kind.lock_name().len()..];
        if digits.len() < 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((kind, digits.parse().ok()?))
    })
}

/// The sequence number of a queue node, or None for another child.
pub(super) fn sequence_of(name: &str) -> Option<u64> {
    parse(name).map(|(_, seq)| seq)
}

/// The queue: the queue nodes among `children`, in the order they are
/// served (sequence number, then name, so every client agrees on ties).
pub(super) fn queue(children: Vec<String>) -> Vec<String> {
    let mut nodes: Vec<(u64, String)> = children
        .into_iter()
        .filter_map(|c| sequence_of(&c).map(|s| (s, c)))
        .collect();
    nodes.sort();
    nodes.into_iter().map(|(_, c)| c).collect()
}

/// Whether the queue nodes among `children` are a read-write lock's, so an
/// exclusive request joins as its writer (`__WRIT__`), not as a mutex.
pub(super) fn read_write_in_use(children: &[String]) -> bool {
    children
        .iter()
        .any(|c| matches!(parse(c), Some((NodeKind::Read | NodeKind::Write, _))))
}

/// Whether `children` of a key's znode are a semaphore's.
pub(super) fn semaphore_parts(children: &[String]) -> bool {
    children
        .iter()
        .any(|c| c == SEMAPHORE_LOCKS || c == SEMAPHORE_LEASES)
}

/// Where a node of the queue `kinds` (in order) stands: it holds, or it
/// waits, watching one node. A writer holds when first and watches the node
/// just ahead of it; a reader holds when no writer is ahead of it and
/// watches the nearest writer ahead (Curator's reader watches the first
/// one: the same grant, but the nearest wakes only readers it lets in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Turn {
    Holds,
    /// The index of the node to watch, and how many stand between us and
    /// the grant (0: next).
    Waits {
        watch: usize,
        ahead: usize,
    },
}

pub(super) fn turn(kinds: &[NodeKind], ours: usize) -> Turn {
    if kinds[ours].is_writer() {
        return match ours {
            0 => Turn::Holds,
            i => Turn::Waits {
                watch: i - 1,
                ahead: i - 1,
            },
        };
    }
    match kinds[..ours].iter().rposition(|k| k.is_writer()) {
        None => Turn::Holds,
        Some(w) => Turn::Waits { watch: w, ahead: w },
    }
}

/// The name of the persistent node that keeps a detached hold: a fresh
/// Curator-style prefix of the same kind with the same sequence digits as
/// the ephemeral node it replaces, so it keeps that node's place.
pub(super) fn detached_name(ephemeral: &str) -> Option<String> {
    let (kind, _) = parse(ephemeral)?;
    let at = ephemeral.rfind(kind.lock_name())?;
    Some(format!(
        "{}{}",
        new_prefix(kind),
        &ephemeral[at + kind.lock_name().len()..]
    ))
}

/// Whether a node waits/holds for a live session or keeps a detached hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Ephemeral: waiting, or held while its lc-cli runs.
    Queue,
    /// Persistent: held after `lock KEY` without a command, until `unlock`.
    Detached,
}

/// What lc-cli writes into each of its nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodeData {
    pub mode: Mode,
    /// Milliseconds since the epoch: arrival for a queue node, the moment
    /// the hold was taken for a detached one.
    pub since_ms: u64,
    pub pid: u32,
    /// The N of a `--limit N` request (its semaphore's lease count).
    pub limit: Option<u32>,
    /// A detached hold on a TTL node (`--expire`): its deadline, ms since
    /// the epoch (the server deletes the node once it is that old, at its
    /// next check).
    pub expires_ms: Option<u64>,
    /// The request's field list (`--note`, `--order`, `--newest`,
    /// `--cancel-running`), as lines before `source=`; empty for a request
    /// without fields, whose data is then what it always was.
    pub fields: FieldList,
    /// Last, so it may contain anything.
    pub source: String,
}

const MAGIC: &str = "lc-cli 1\n";

impl NodeData {
    pub(super) fn new(mode: Mode, source: &str) -> Self {
        NodeData {
            mode,
            since_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            pid: std::process::id(),
            limit: None,
            expires_ms: None,
            fields: FieldList::default(),
            source: source.to_string(),
        }
    }

    /// With the request's field list (as `Extras::encode` wrote it).
    pub(super) fn with_fields(mut self, list: &str) -> Self {
        self.fields = FieldList::parse(list.as_bytes()).unwrap_or_default();
        self
    }

    pub(super) fn with_limit(mut self, limit: Option<u32>) -> Self {
        self.limit = limit;
        self
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mode = match self.mode {
            Mode::Queue => "queue",
            Mode::Detached => "detached",
        };
        let mut limit = match self.limit {
            Some(n) => format!("limit={n}\n"),
            None => String::new(),
        };
        if let Some(at) = self.expires_ms {
            limit.push_str(&format!("expires={at}\n"));
        }
        format!(
            "{MAGIC}mode={mode}\nsince={}\npid={}\n{limit}{}source={}",
            self.since_ms, self.pid, self.fields, self.source
        )
        .into_bytes()
    }

    /// None for data lc-cli did not write (a Curator client's node).
    pub(super) fn decode(data: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(data).ok()?;
        let mut rest = text.strip_prefix(MAGIC)?;
        let mut out = NodeData {
            mode: Mode::Queue,
            since_ms: 0,
            pid: 0,
            limit: None,
            expires_ms: None,
            fields: FieldList::default(),
            source: String::new(),
        };
        // The lines that are not the node's own: the request's fields.
        let mut fields = String::new();
        loop {
            if let Some(source) = rest.strip_prefix("source=") {
                out.source = source.to_string();
                out.fields = FieldList::parse(fields.as_bytes()).unwrap_or_default();
                return Some(out);
            }
            let (line, tail) = rest.split_once('\n')?;
            rest = tail;
            match line.split_once('=')? {
                ("mode", "queue") => out.mode = Mode::Queue,
                ("mode", "detached") => out.mode = Mode::Detached,
                ("since", v) => out.since_ms = v.parse().ok()?,
                ("pid", v) => out.pid = v.parse().ok()?,
                ("limit", v) => out.limit = Some(v.parse().ok()?),
                ("expires", v) => out.expires_ms = Some(v.parse().ok()?),
                _ => {
                    fields.push_str(line);
                    fields.push('\n');
                }
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
        let p = new_prefix(NodeKind::Mutex);
        assert!(p.starts_with("_c_") && p.ends_with("-lock-") && p.len() == 3 + 36 + 6);
        let d = detached_name("_c_x-__READ__0000000007").unwrap();
        assert!(d.ends_with("-__READ__0000000007"), "{d}");
        assert!(detached_name("_c_x-lease-0000000003")
            .unwrap()
            .ends_with("-lease-0000000003"));
    }

    #[test]
    fn kinds_and_turns() {
        assert_eq!(parse("_c_a-__READ__0000000004"), Some((NodeKind::Read, 4)));
        assert_eq!(parse("_c_a-__WRIT__0000000005"), Some((NodeKind::Write, 5)));
        assert_eq!(parse("_c_a-lease-0000000006"), Some((NodeKind::Lease, 6)));
        assert_eq!(parse("locks"), None);
        use NodeKind::*;
        // Readers at the head hold together; a writer waits for all ahead.
        let q = [Read, Read, Write, Read, Read, Mutex, Read];
        assert_eq!(turn(&q, 0), Turn::Holds);
        assert_eq!(turn(&q, 1), Turn::Holds);
        assert_eq!(turn(&q, 2), Turn::Waits { watch: 1, ahead: 1 });
        // Readers behind a writer wait for it, not for the readers ahead.
        assert_eq!(turn(&q, 3), Turn::Waits { watch: 2, ahead: 2 });
        assert_eq!(turn(&q, 4), Turn::Waits { watch: 2, ahead: 2 });
        assert_eq!(turn(&q, 6), Turn::Waits { watch: 5, ahead: 5 });
        assert_eq!(turn(&[Write], 0), Turn::Holds);
        assert!(read_write_in_use(&["_c_a-__READ__0000000004".into()]));
        assert!(!read_write_in_use(&["_c_a-lock-0000000004".into()]));
        assert!(semaphore_parts(&["leases".into()]));
    }

    #[test]
    fn data_round_trip() {
        for source in ["host1", "", "a\nsource=b", "ünï"] {
            let d = NodeData::new(Mode::Detached, source);
            assert_eq!(NodeData::decode(&d.encode()), Some(d));
        }
        let d = NodeData::new(Mode::Queue, "h").with_limit(Some(3));
        assert_eq!(NodeData::decode(&d.encode()).unwrap().limit, Some(3));
        assert_eq!(NodeData::decode(b"127.0.0.1"), None);
        let d = NodeData::new(Mode::Queue, "ci").with_fields("note=a%0Ab\norder=7\nnewest=1\n");
        let text = String::from_utf8(d.encode()).unwrap();
        assert!(
            text.contains("\nnote=a%0Ab\norder=7\nnewest=1\nsource=ci"),
            "{text}"
        );
        let back = NodeData::decode(text.as_bytes()).unwrap();
        assert_eq!(back.fields.get("order"), Some("7"));
        assert_eq!(back.fields.get("note"), Some("a\nb"));
        assert_eq!(back, d);
        // Without fields, the data is what it always was.
        let plain = String::from_utf8(NodeData::new(Mode::Queue, "h").encode()).unwrap();
        assert!(plain.ends_with("\nsource=h"));
        assert!(!plain.contains("order"));
    }

    #[test]
    fn markers_are_no_contenders() {
        let node = "_c_0f8fad5b-d9cb-469f-a165-70867728950e-lock-0000000012";
        let m = marker(Marker::Superseded, node).unwrap();
        assert_eq!(
            m,
            "_c_lc-superseded-0f8fad5b-d9cb-469f-a165-70867728950e-0000000012"
        );
        let c = marker(Marker::Cancel, "_c_x-__WRIT__0000000003").unwrap();
        assert_eq!(c, "_c_lc-cancel-x-0000000003");
        for extra in [m.as_str(), c.as_str(), MARK] {
            assert!(is_extra(extra));
            assert_eq!(parse(extra), None, "{extra}");
            assert!(!extra.contains("lock-") && !extra.contains("__READ__"));
            assert!(!extra.contains("__WRIT__") && !extra.contains("lease-"));
            // Curator sorts it by its whole name: after every sequence.
            assert!(extra > "9999999999");
            assert!(key_problem(extra).is_some());
        }
        assert_eq!(parse_mark(b"42"), Some(42));
        assert_eq!(parse_mark(b"x"), None);
    }
}

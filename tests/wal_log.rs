//! The write-ahead log module in-process: torn tails at every offset, flipped
//! bytes, compaction under a long load and a crash injected mid-compaction.
//! (The same behaviour through the real binary is in `wal_server.rs`.)

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use common::wal::record_starts;
use lc_cli::mode::LockMode;
use lc_cli::wal::{Held, Options, Record, Wal, WalError};

fn grant(key: &str, source: &str) -> Record {
    Record::Grant {
        key: key.as_bytes().to_vec(),
        source: source.as_bytes().to_vec(),
        peer: b"127.0.0.1:1234".to_vec(),
        since_ms: 1_700_000_000_000,
        token: 7,
        session: false,
        mode: LockMode::Exclusive,
        expires_ms: None,
        ownership: Default::default(),
    }
}

fn release(key: &str) -> Record {
    Record::Release {
        key: key.as_bytes().to_vec(),
        token: Some(7),
    }
}

/// A shared hold of `key` under `token`.
fn shared(key: &str, source: &str, token: u64) -> Record {
    let mut r = grant(key, source);
    if let Record::Grant { token: t, mode, .. } = &mut r {
        (*t, *mode) = (token, LockMode::Shared);
    }
    r
}

fn keys(held: &[Held]) -> Vec<(String, String)> {
    held.iter()
        .map(|h| {
            (
                String::from_utf8_lossy(&h.key).into_owned(),
                String::from_utf8_lossy(&h.source).into_owned(),
            )
        })
        .collect()
}

fn open(path: &Path) -> Result<(Wal, Vec<Held>), WalError> {
    Wal::open(path, Options::default()).map(|(w, h, _)| (w, h))
}

/// Writes records through a Wal and returns the file's bytes and the start
/// offset of every record.
fn build(path: &Path, records: &[Record]) -> (Vec<u8>, Vec<usize>) {
    let (wal, _) = open(path).unwrap();
    for r in records {
        let _ = wal.append(r);
        wal.sync().unwrap();
    }
    drop(wal);
    let bytes = std::fs::read(path).unwrap();
    let starts = record_starts(&bytes);
    (bytes, starts)
}

fn sample() -> Vec<Record> {
    vec![
        grant("a", "s1"),
        grant("b", "s2"),
        release("a"),
        grant("c", "s3"),
        grant("a", "s4"),
        release("b"),
        grant("d", "s5"),
    ]
}

#[test]
fn a_torn_last_record_is_cut_at_every_offset() {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full.wal");
    let (bytes, starts) = build(&full, &sample());
    let last = *starts.last().unwrap();
    let (_, held) = open(&full).unwrap();
    assert_eq!(
        keys(&held),
        [("a", "s4"), ("c", "s3"), ("d", "s5")].map(|(k, s)| (k.into(), s.into()))
    );
    for cut in last..bytes.len() {
        let path = dir.path().join(format!("cut{cut}.wal"));
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let (wal, held, recovery) = Wal::open(&path, Options::default()).unwrap();
        // Every earlier record kept, the torn one (a grant of d) dropped.
        assert_eq!(
            keys(&held),
            [("a", "s4"), ("c", "s3")].map(|(k, s)| (k.into(), s.into())),
            "cut at {cut}"
        );
        assert_eq!(recovery.records as usize, starts.len() - 1, "cut at {cut}");
        assert_eq!(recovery.torn.is_some(), cut > last, "cut at {cut}");
        drop(wal);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len() as usize,
            last,
            "cut at {cut}: file not truncated"
        );
        // And the cut log takes appends and reopens cleanly.
        let (wal, _) = open(&path).unwrap();
        let _ = wal.append(&grant("e", "s6"));
        wal.sync().unwrap();
        drop(wal);
        let (_, held) = open(&path).unwrap();
        assert_eq!(held.len(), 3, "cut at {cut}");
    }
}

#[test]
fn a_zeroed_tail_is_torn_not_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("z.wal");
    let (mut bytes, starts) = build(&path, &sample());
    bytes.extend_from_slice(&[0; 300]);
    std::fs::write(&path, &bytes).unwrap();
    let (_, held, recovery) = Wal::open(&path, Options::default()).unwrap();
    assert_eq!(held.len(), 3);
    assert_eq!(recovery.records as usize, starts.len());
}

#[test]
fn a_flipped_byte_in_an_earlier_record_refuses_with_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.wal");
    let mut records = sample();
    // Plenty behind the damaged records, so a damaged length still lands
    // inside the file.
    for i in 0..40 {
        records.push(grant(&format!("pad{i}"), "p"));
    }
    let (bytes, starts) = build(&path, &records);
    for (r, &start) in starts.iter().enumerate().take(sample().len()) {
        let end = starts[r + 1];
        for at in start..end {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x5a;
            let p = dir.path().join("damaged.wal");
            std::fs::write(&p, &damaged).unwrap();
            match open(&p) {
                Err(WalError::Corrupt { offset, path, .. }) => {
                    assert_eq!(offset as usize, start, "flip at {at}");
                    assert_eq!(path, p);
                }
                Err(e) => panic!("flip at {at}: {e}"),
                Ok(_) => panic!("flip at {at} (record {r}) not caught"),
            }
            // Refusing must not have touched the file.
            assert_eq!(std::fs::read(&p).unwrap(), damaged);
        }
    }
}

#[test]
fn compaction_keeps_the_log_small_under_endless_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.wal");
    let options = Options::default();
    let (wal, _, _) = Wal::open(&path, options.clone()).unwrap();
    // Two long-lived holders, and 100,000 lock/unlock cycles on a few keys.
    let _ = wal.append(&grant("keep1", "alpha"));
    let _ = wal.append(&grant("keep2", "beta"));
    let mut largest = 0;
    for i in 0..100_000u32 {
        let key = format!("hot{}", i % 4);
        let _ = wal.append(&grant(&key, "worker"));
        let _ = wal.append(&release(&key));
        if i % 1000 == 999 {
            wal.sync().unwrap();
            largest = largest.max(std::fs::metadata(&path).unwrap().len());
        }
    }
    wal.sync().unwrap();
    let stats = wal.stats();
    drop(wal);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(stats.compactions > 0, "{stats:?}");
    // 100,000 cycles are several MiB uncompacted.
    assert!(
        largest < 2 * options.compact_min + 64 * 1024,
        "log grew to {largest} bytes"
    );
    assert!(
        len < 2 * options.compact_min + 64 * 1024,
        "log is {len} bytes"
    );
    assert_eq!(stats.grants, 100_002);
    let (_, held) = open(&path).unwrap();
    assert_eq!(
        keys(&held),
        [("keep1", "alpha"), ("keep2", "beta")].map(|(k, s)| (k.into(), s.into()))
    );
}

#[test]
fn a_crash_between_temp_file_and_rename_leaves_the_old_log() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("x.wal");
    let options = Options {
        compact_min: 4096,
        ..Options::default()
    };
    let (wal, _, _) = Wal::open(&path, options.clone()).unwrap();
    let _ = wal.append(&grant("k1", "alpha"));
    let _ = wal.append(&grant("k2", "beta"));
    let _ = wal.append(&grant("gone", "gamma"));
    let _ = wal.append(&release("gone"));
    wal.sync().unwrap();
    let before = std::fs::read(&path).unwrap();
    options.crash_before_rename.store(true, Ordering::SeqCst);
    // Cycle until a compaction starts and "crashes" (bounded).
    let mut crashed = false;
    for i in 0..10_000 {
        let _ = wal.append(&grant("hot", "w"));
        let _ = wal.append(&release("hot"));
        if wal.sync().is_err() {
            crashed = true;
            break;
        }
        assert!(i < 9_999, "no compaction was attempted");
    }
    assert!(crashed);
    let temp = dir.path().join("x.wal.compact");
    assert!(
        temp.exists(),
        "the temp file of the compaction should be left behind"
    );
    let after_crash = std::fs::read(&path).unwrap();
    assert!(after_crash.starts_with(&before), "old log damaged");
    drop(wal);
    let (wal, held, recovery) = Wal::open(&path, Options::default()).unwrap();
    assert!(recovery.stale_temp);
    assert!(!temp.exists());
    assert_eq!(
        keys(&held),
        [("k1", "alpha"), ("k2", "beta")].map(|(k, s)| (k.into(), s.into()))
    );
    // And it compacts for real afterwards.
    for _ in 0..2000 {
        let _ = wal.append(&grant("hot", "w"));
        let _ = wal.append(&release("hot"));
    }
    wal.sync().unwrap();
    assert!(wal.stats().compactions > 0);
    drop(wal);
    let (_, held) = open(&path).unwrap();
    assert_eq!(held.len(), 2);
}

#[test]
fn concurrent_appends_share_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.wal");
    let (wal, _) = open(&path).unwrap();
    let wal = std::sync::Arc::new(wal);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..32 {
            let wal = wal.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..50 {
                    let key = format!("k{t}");
                    wal.append(&grant(&key, "s")).wait().await.unwrap();
                    wal.append(&release(&key)).wait().await.unwrap();
                    let _ = i;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let stats = wal.stats();
    assert_eq!(stats.grants, 32 * 50);
    assert!(
        stats.syncs < stats.grants + stats.releases,
        "no sync was shared: {stats:?}"
    );
}

/// The bytes of a log as the release before the header wrote it: records
/// from byte 0.
fn headerless(records: &[Record]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for r in records {
        r.encode_into(&mut bytes);
    }
    bytes
}

#[test]
fn a_new_log_starts_with_its_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.wal");
    let (wal, held) = open(&path).unwrap();
    assert!(held.is_empty());
    drop(wal);
    assert_eq!(std::fs::read(&path).unwrap(), lc_cli::wal::file::header());
    // A header cut short by a crash at creation is a new log too.
    std::fs::write(&path, &lc_cli::wal::file::header()[..5]).unwrap();
    let (wal, held) = open(&path).unwrap();
    let _ = wal.append(&grant("k", "s"));
    wal.sync().unwrap();
    drop(wal);
    assert!(held.is_empty());
    let (_, held) = open(&path).unwrap();
    assert_eq!(keys(&held), [("k".to_string(), "s".to_string())]);
}

#[test]
fn a_second_open_of_one_log_is_refused_with_the_pid() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.wal");
    let (first, _) = open(&path).unwrap();
    let _ = first.append(&grant("k", "s"));
    first.sync().unwrap();
    let before = std::fs::read(&path).unwrap();
    match open(&path) {
        Err(WalError::Locked { pid, lock, .. }) => {
            assert_eq!(pid, Some(std::process::id()));
            assert_eq!(lock, dir.path().join("one.wal.lock"));
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a second writer was let in"),
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the refused open wrote"
    );
    drop(first);
    let (_, held) = open(&path).unwrap();
    assert_eq!(held.len(), 1);
    // Compaction renames a new file over the log: the lock still holds.
    let options = Options {
        compact_min: 1024,
        ..Options::default()
    };
    let (wal, _, _) = Wal::open(&path, options).unwrap();
    for _ in 0..200 {
        let _ = wal.append(&grant("hot", "w"));
        let _ = wal.append(&release("hot"));
    }
    wal.sync().unwrap();
    assert!(wal.stats().compactions > 0);
    assert!(matches!(open(&path), Err(WalError::Locked { .. })));
}

#[test]
fn a_file_that_is_not_a_log_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("text", b"# my notes\nnot a lock log at all\n".to_vec()),
        ("zeros", vec![0u8; 64]),
        ("almost", b"LCCLIWAX\x01\0\0\0".to_vec()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        match open(&path) {
            Err(e @ WalError::Foreign { .. }) => {
                assert!(e.to_string().contains("not an lc-cli log"), "{e}")
            }
            Err(e) => panic!("{name}: {e}"),
            Ok(_) => panic!("{name}: parsed as a log"),
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{name} changed");
    }
}

#[test]
fn a_log_of_a_newer_format_is_refused_with_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v9.wal");
    let mut bytes = b"LCCLIWAL".to_vec();
    bytes.extend_from_slice(&9u32.to_le_bytes());
    bytes.extend_from_slice(&headerless(&[grant("k", "s")]));
    std::fs::write(&path, &bytes).unwrap();
    match open(&path) {
        Err(e @ WalError::Version { version: 9, .. }) => {
            assert!(e.to_string().contains("version 9"), "{e}")
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a newer format was parsed"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

/// A log of the previous release (records from byte 0, no header) keeps its
/// held keys: it is rewritten with a header and its live holders.
#[test]
fn a_headerless_log_is_migrated_with_its_holders() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.wal");
    let mut bytes = headerless(&sample());
    // With a torn tail, as a crash leaves it.
    bytes.extend_from_slice(&headerless(&[grant("torn", "t")])[..9]);
    std::fs::write(&path, &bytes).unwrap();
    let (wal, held, recovery) = Wal::open(&path, Options::default()).unwrap();
    assert!(recovery.migrated);
    let expected = [("a", "s4"), ("c", "s3"), ("d", "s5")].map(|(k, s)| (k.into(), s.into()));
    assert_eq!(keys(&held), expected);
    let _ = wal.append(&release("c"));
    wal.sync().unwrap();
    drop(wal);
    let now = std::fs::read(&path).unwrap();
    assert!(now.starts_with(&lc_cli::wal::file::header()));
    let (_, held, recovery) = Wal::open(&path, Options::default()).unwrap();
    assert!(!recovery.migrated);
    assert_eq!(keys(&held), [expected[0].clone(), expected[2].clone()]);
    // A headerless log with a damaged record is still refused, offset named.
    let mut damaged = headerless(&sample());
    let second = headerless(&sample()[..1]).len();
    damaged[second + 9] ^= 0x40;
    std::fs::write(&path, &damaged).unwrap();
    match Wal::open(&path, Options::default()) {
        Err(WalError::Corrupt { offset, .. }) => assert_eq!(offset as usize, second),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("damage not caught"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), damaged);
}

/// Several holds of one key (shared, or `--limit N`): each is released by
/// its token, and those left come back after a reopen and after the
/// compactions of a long load.
#[test]
fn the_holds_of_a_shared_key_are_kept_and_released_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.wal");
    let options = Options {
        compact_min: 4096,
        ..Options::default()
    };
    let (wal, _, _) = Wal::open(&path, options.clone()).unwrap();
    for (source, token) in [("r1", 1), ("r2", 2), ("r3", 3)] {
        let _ = wal.append(&shared("k", source, token));
    }
    let _ = wal.append(&Record::Release {
        key: b"k".to_vec(),
        token: Some(2),
    });
    wal.sync().unwrap();
    // Enough traffic on another key for compactions to happen (bounded).
    for i in 0..5_000u64 {
        let _ = wal.append(&shared("hot", "w", 100 + i));
        let _ = wal.append(&Record::Release {
            key: b"hot".to_vec(),
            token: Some(100 + i),
        });
        if i % 100 == 0 {
            wal.sync().unwrap();
        }
    }
    wal.sync().unwrap();
    assert!(wal.stats().compactions > 0, "no compaction happened");
    drop(wal);
    let (_, held) = open(&path).unwrap();
    let got: Vec<(String, u64, LockMode)> = held
        .iter()
        .map(|h| {
            (
                String::from_utf8_lossy(&h.key).into_owned(),
                h.token,
                h.mode,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("k".to_string(), 1, LockMode::Shared),
            ("k".to_string(), 3, LockMode::Shared)
        ]
    );
}

/// A record as lc-cli wrote it before modes: `payload` framed by hand.
fn framed(payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len), payload);
    let mut out = len.to_vec();
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// A log of format version 2 (the release before shared locks: a grant is
/// the key's only holder, a release ends it) keeps its holders, now
/// exclusive holds, and gets this build's header before anything is
/// appended.
#[test]
fn a_version_2_log_is_upgraded_with_its_holders() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.wal");
    let v2_grant = |key: &[u8], token: u64| {
        let mut p = vec![3, key.len() as u8];
        p.extend_from_slice(key);
        p.extend_from_slice(&[1, b's', 1, b'p']);
        p.extend_from_slice(&5u64.to_le_bytes());
        p.extend_from_slice(&token.to_le_bytes());
        p.push(1);
        framed(&p)
    };
    let mut bytes = b"LCCLIWAL".to_vec();
    bytes.extend_from_slice(&2u32.to_le_bytes());
    bytes.extend(v2_grant(b"a", 10));
    bytes.extend(v2_grant(b"b", 11));
    bytes.extend(framed(&[2, 1, b'a']));
    bytes.extend(v2_grant(b"b", 12));
    std::fs::write(&path, &bytes).unwrap();
    let (wal, held, recovery) = Wal::open(&path, Options::default()).unwrap();
    assert_eq!(recovery.upgraded, Some(2));
    let got: Vec<(Vec<u8>, u64, bool, LockMode)> = held
        .iter()
        .map(|h| (h.key.clone(), h.token, h.session, h.mode))
        .collect();
    assert_eq!(got, [(b"b".to_vec(), 12, true, LockMode::Exclusive)]);
    drop(wal);
    assert!(std::fs::read(&path)
        .unwrap()
        .starts_with(&lc_cli::wal::file::header()));
}

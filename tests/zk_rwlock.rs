//! `zk://HOSTS/PATH?recipe=rwlock`: every exclusive lock is Curator's
//! `InterProcessReadWriteLock` writer (`__WRIT__`), so a Curator reader on
//! the same path waits for lc-cli's writer even on an empty key, and lc-cli
//! waits for a Curator writer. Checked with the real Curator peer, from the
//! commands' own logged start and end times; the default recipe still makes
//! an `InterProcessMutex` node, and an unknown recipe is a usage error.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::curator::{self, Recipe};
use common::redis::until_exists;
use common::spans::{self, Kids};
use common::zk::Zk;
use common::*;

const TRIALS: usize = 3;

/// lc-cli with `recipe=rwlock` (and a 2 s session) on root `/s`.
fn lc_rw(zk: &Zk, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--server")
        .arg(format!("{}?session-timeout=2s&recipe=rwlock", zk.url("/s")))
        .args(["--connect-timeout", "10s"])
        .args(args);
    cmd.env_remove("LC_SERVER").env_remove("LC_SOURCE");
    cmd
}

/// A command that logs its start, holds until `gate` exists, then 0.3 s
/// more, and logs its end.
fn gated(log: &Path, tag: &str, gate: &Path) -> String {
    let log = log.display();
    format!(
        "echo start {tag} $(date +%s%N) >> {log}; ({}); sleep 0.3; echo end {tag} $(date +%s%N) >> {log}",
        until_exists(gate)
    )
}

/// The children of `dir` but lc-cli's extra nodes (`_c_lc-`: the mark,
/// history entries).
fn queue_nodes(zk: &Zk, dir: &str) -> Vec<String> {
    zk.children(dir)
        .into_iter()
        .filter(|n| !n.starts_with("_c_lc-"))
        .collect()
}

fn started(log: &Path, tag: &str) -> bool {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains(&format!("start {tag} "))
}

/// Reads the peer's `waiting` line: it is connected and about to ask.
fn peer_waiting(child: &mut std::process::Child) {
    use std::io::BufRead;
    let out = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "waiting");
}

/// lc-cli's writer holds an empty key first; a Curator reader that queues
/// while it runs starts only after lc-cli's command ended.
#[test]
fn a_curator_reader_waits_for_an_lc_cli_writer_on_an_empty_key() {
    let zk = Zk::start();
    let hosts = zk.hosts();
    let mut margins = Vec::new();
    for trial in 0..TRIALS {
        let tmp = tempfile::tempdir().unwrap();
        let (log, gate) = (tmp.path().join("log"), tmp.path().join("gate"));
        let key = format!("w{trial}");
        let dir = format!("/s/{key}");
        let script = gated(&log, "lw", &gate);
        let mut kids = Kids(vec![lc_rw(
            &zk,
            &["lock", &key, "--source", "lw", "-c", &script],
        )
        .stdout(Stdio::null())
        .spawn()
        .unwrap()]);
        assert!(wait_until(Duration::from_secs(20), || started(&log, "lw")));
        // The queue's nodes (not the hold's history entry, `_c_lc-history-`).
        let nodes = queue_nodes(&zk, &dir);
        assert!(
            nodes.len() == 1 && nodes[0].contains("-__WRIT__"),
            "lc-cli's writer is not a Curator writer node: {nodes:?}"
        );
        let mut reader = curator::peer(&hosts, &dir, Recipe::Read, 200, &log, "jr");
        peer_waiting(&mut reader);
        kids.0.push(reader);
        assert!(
            wait_until(Duration::from_secs(20), || zk
                .children(&dir)
                .iter()
                .any(|n| n.contains("-__READ__"))),
            "the Curator reader did not queue"
        );
        spans::note(&log, "arrive", "jr");
        // Long enough for a wrongly granted reader to have said so.
        std::thread::sleep(Duration::from_millis(700));
        std::fs::write(&gate, "").unwrap();
        kids.all_succeed(Duration::from_secs(60));
        let spans = spans::read(&log);
        let (w, r) = (spans::by_tag(&spans, "lw"), spans::by_tag(&spans, "jr"));
        assert!(r.arrive < w.end, "the reader came too late: {spans:#?}");
        assert!(
            r.start >= w.end,
            "the Curator reader ran beside lc-cli's writer: {spans:#?}"
        );
        margins.push((r.start - w.end) as f64 / 1e6);
    }
    eprintln!("Curator reader started after lc-cli's writer ended by {margins:.1?} ms");
}

/// A Curator writer holds first; lc-cli's `-x` (recipe=rwlock) queues as a
/// writer and starts only after the Curator writer ended.
#[test]
fn lc_cli_waits_for_a_curator_writer() {
    let zk = Zk::start();
    let hosts = zk.hosts();
    let mut margins = Vec::new();
    for trial in 0..TRIALS {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("log");
        let key = format!("c{trial}");
        let dir = format!("/s/{key}");
        let mut writer = curator::peer(&hosts, &dir, Recipe::Write, 2000, &log, "jw");
        peer_waiting(&mut writer);
        let mut kids = Kids(vec![writer]);
        assert!(wait_until(Duration::from_secs(20), || started(&log, "jw")));
        let (_, mut cmd) = spans::contender(&|a| lc_rw(&zk, a), &log, &["-x"], &key, "lw", 0.3);
        kids.0.push(cmd.stdout(Stdio::null()).spawn().unwrap());
        assert!(
            wait_until(Duration::from_secs(20), || zk
                .children(&dir)
                .iter()
                .filter(|n| n.contains("-__WRIT__"))
                .count()
                == 2),
            "lc-cli did not queue as a writer: {:?}",
            zk.children(&dir)
        );
        spans::note(&log, "arrive", "lw");
        kids.all_succeed(Duration::from_secs(60));
        let spans = spans::read(&log);
        let (j, l) = (spans::by_tag(&spans, "jw"), spans::by_tag(&spans, "lw"));
        assert!(l.arrive < j.end, "lc-cli came too late: {spans:#?}");
        assert!(
            l.start >= j.end,
            "lc-cli ran beside the Curator writer: {spans:#?}"
        );
        margins.push((l.start - j.end) as f64 / 1e6);
    }
    eprintln!("lc-cli's writer started after the Curator writer ended by {margins:.1?} ms");
}

/// Without `recipe=`, an exclusive lock on an empty key is still an
/// `InterProcessMutex` node; `recipe=mutex` says so explicitly; an unknown
/// recipe is refused with one line and the usage status.
#[test]
fn the_default_recipe_is_the_mutex_and_unknown_ones_are_refused() {
    let zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let (log, gate) = (tmp.path().join("log"), tmp.path().join("gate"));
    for (tag, url) in [
        ("d", zk.url("/s")),
        ("m", format!("{}?recipe=mutex", zk.url("/s"))),
    ] {
        let script = gated(&log, tag, &gate);
        let mut kids = Kids(vec![Command::new(BIN)
            .args(["--server", &url, "lock", tag, "-c", &script])
            .stdout(Stdio::null())
            .spawn()
            .unwrap()]);
        assert!(wait_until(Duration::from_secs(20), || started(&log, tag)));
        let nodes = queue_nodes(&zk, &format!("/s/{tag}"));
        assert!(
            nodes.len() == 1 && nodes[0].contains("-lock-"),
            "{tag}: {nodes:?}"
        );
        std::fs::write(&gate, "").unwrap();
        kids.all_succeed(Duration::from_secs(20));
        std::fs::remove_file(&gate).unwrap();
    }
    let url = format!("{}?recipe=readwrite", zk.url("/s"));
    let err = expect_error_line(
        Command::new(BIN).args(["--server", &url, "lock", "k", "true"]),
        64,
    );
    assert!(
        err.starts_with("lc-cli: ")
            && err.contains("'readwrite' is not a recipe (use mutex or rwlock)"),
        "{err}"
    );
}

//! lc-cli's end (src/teardown.rs): its memory is left to a helper that
//! shares it, holds no descriptor and dies with lc-cli, so the parent's wait
//! does not include the unmapping. Seen from a subreaper, as an orphan is.

use crate::common;

use std::time::{Duration, Instant};

use common::*;

/// The orphans reparented to this process (a subreaper) that end within
/// `limit`: their command names (from /proc, while zombies) and how each
/// ended (`waitpid`'s status).
fn reap_orphans(limit: Duration) -> Vec<(String, i32)> {
    let mut ended = Vec::new();
    let start = Instant::now();
    while start.elapsed() < limit {
        let children =
            std::fs::read_to_string(format!("/proc/self/task/{}/children", std::process::id()))
                .unwrap_or_default();
        // The test harness's own threads start no processes: every child
        // here came to us from lc-cli.
        for pid in children
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let Some((head, rest)) = stat.rsplit_once(") ") else {
                continue;
            };
            if !rest.starts_with('Z') {
                continue;
            }
            let name = head.split_once(" (").map_or("", |(_, n)| n).to_string();
            let mut status = 0;
            // SAFETY: waitpid on a zombie child of ours.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                ended.push((name, status));
            }
        }
        if ended.len() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    ended
}

#[test]
fn the_helper_that_unmaps_lc_cli_dies_with_it_and_holds_nothing() {
    let server = Server::start();
    // SAFETY: this test runs in a process of its own (nextest).
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    for trial in 0..3 {
        // The output is read to its end: a helper still holding stdout would
        // hold this up until it died.
        let out = server
            .lc(&["lock", "exit-helper", "--", "echo", "done"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "trial {trial}: {out:?}");
        assert_eq!(out.stdout, b"done\n", "trial {trial}");
        let orphans = reap_orphans(Duration::from_secs(2));
        // The guardian (gone before lc-cli, a zombie it did not reap) and
        // the helper, named as the binary.
        let helper: Vec<_> = orphans
            .iter()
            .filter(|(name, _)| name != "lc-cli-guardian")
            .collect();
        assert_eq!(helper.len(), 1, "trial {trial}: orphans {orphans:?}");
        let (name, status) = helper[0];
        assert_eq!(name, "lc-cli", "trial {trial}");
        // SIGKILL, or 0 when it first ran after lc-cli had gone.
        let killed = libc::WIFSIGNALED(*status) && libc::WTERMSIG(*status) == libc::SIGKILL;
        let gone_first = libc::WIFEXITED(*status) && libc::WEXITSTATUS(*status) == 0;
        assert!(
            killed || gone_first,
            "trial {trial}: the helper ended with status {status:#x}"
        );
    }
    // A second lc-cli inside the first: the outer one, a subreaper of its
    // command's group, reaps the inner one's helper and ends as usual.
    let out = server
        .lc(&[
            "lock",
            "exit-outer",
            "--",
            BIN,
            "--server",
            &server.addr.to_string(),
            "lock",
            "exit-inner",
            "--",
            "echo",
            "inner",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout, b"inner\n");
}

//! PostgreSQL with real faults (issue 27, items 1 and 5): the holder's
//! lc-cli killed with SIGKILL while its command takes a second to stop; the
//! next holder, already waiting, starts only after that command ended (the
//! guardian keeps the session's socket open until the command's group is
//! gone), read from the commands' own logged times. And a refused
//! connection is tried again within --connect-timeout, as on every backend.

use crate::common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::pg::PgServer;
use common::redis::free_port;
use common::timeline::{alive, OnTerm, Timeline};
use common::{expect_error_line, lc_at, wait_until};

const TRIALS: usize = 5;
const LIMIT: Duration = Duration::from_secs(30);

fn finish(child: Child) -> (Option<i32>, String) {
    common::finish_within(LIMIT, child)
}

#[test]
fn a_killed_holders_key_outlives_its_command() {
    let pg = PgServer::start();
    let mut margins = Vec::new();
    for trial in 0..TRIALS {
        let dir = tempfile::tempdir().unwrap();
        let tl = Timeline::new(dir.path());
        let key = format!("killed{trial}");
        // A second of cleanup on SIGTERM, then it logs its end.
        let a_script = tl.holder("a", OnTerm::CleansUpFor(Duration::from_secs(1)));
        let mut a = pg
            .lc(&["lock", &key, "-c", &a_script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(
            wait_until(LIMIT, || tl.start_of("a").is_some()),
            "{}",
            tl.text()
        );
        let (_, a_pid) = tl.start_of("a").unwrap();
        let b = pg
            .lc(&["lock", &key, "-c", &tl.one_shot("b")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        assert!(
            wait_until(LIMIT, || pg.waiters(&key) == 1),
            "trial {trial}: the second holder never queued"
        );
        a.kill().unwrap();
        a.wait().unwrap();
        let (b_code, b_err) = finish(b);
        assert_eq!(b_code, Some(0), "trial {trial}: {b_err}");
        let text = tl.text();
        let a_end = tl.end_of("a").unwrap_or_else(|| {
            panic!("trial {trial}: the orphaned command never logged its end:\n{text}")
        });
        let (b_start, _) = tl.start_of("b").unwrap();
        assert!(
            a_end < b_start,
            "trial {trial}: the next holder started {:.1} ms before the killed holder's command ended:\n{text}",
            (a_end - b_start) as f64 / 1e6
        );
        assert!(
            !alive(a_pid),
            "trial {trial}: the orphaned command lives on"
        );
        margins.push((b_start - a_end) as f64 / 1e6);
    }
    let shown: Vec<String> = margins.iter().map(|m| format!("{m:.1}")).collect();
    eprintln!(
        "next holder's start after the orphan's end: {} ms",
        shown.join(", ")
    );
}

#[test]
fn a_server_that_comes_up_within_the_connect_timeout_is_reached() {
    let mut pg = PgServer::start();
    pg.kill();
    let client = pg
        .lc(&["--connect-timeout", "20s", "lock", "k", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    pg.restart();
    let (code, err) = finish(client);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn no_server_at_all_is_69_after_about_the_connect_timeout() {
    let url = format!("postgres://postgres:pw@127.0.0.1:{}/postgres", free_port());
    let started = Instant::now();
    let line = expect_error_line(
        &mut lc_at(
            &url,
            &["--connect-timeout", "1s", "lock", "k", "--", "true"],
        ),
        69,
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1),
        "gave up after {took:?}: {line}"
    );
    assert!(line.contains("attempts"), "{line}");
    eprintln!("no server: 69 after {took:?}: {line}");
}

//! `--limit N` on PostgreSQL (issue 26, item 4): at most N at once and
//! exactly N while enough wait, first come first served (several trials),
//! a slot of a SIGKILLed lc-cli freed by the server only once its command
//! ended, dead holders freed, disagreeing requests refused (78, one
//! line), trylock on a full set "held" (1), and `keys` and `reset` of the
//! slots. Read from the commands' own logged times.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::pg::PgServer;
use common::spans::{self, Kids};
use common::timeline::{alive, OnTerm, Timeline};
use common::*;

const LIMIT: Duration = Duration::from_secs(30);

/// Whether `tag`'s session is in line for a slot or holds one: it holds
/// or waits for an exclusive advisory lock (the turnstile, a slot; its
/// marker is shared), or, on a lock key (`-s`/`-x`), any advisory lock.
fn queued(pg: &PgServer, tag: &str, limited: bool) -> bool {
    let mode = if limited {
        "AND l.mode = 'ExclusiveLock'"
    } else {
        ""
    };
    let n = pg.sql(&format!(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.objsubid = 1 {mode} \
           AND a.application_name = 'lc-cli {tag}'"
    ));
    n.trim() != "0"
}

#[test]
fn limit_n_runs_n_at_once_in_arrival_order() {
    let pg = PgServer::start();
    let mut gaps = Vec::new();
    for _trial in 0..5 {
        let gap = spans::limit_n(&|args| pg.lc(args), |tag| queued(&pg, tag, true));
        gaps.push(format!("{gap:.1}"));
    }
    eprintln!(
        "limit 3, 6 contenders, 5 trials: never more than 3, in arrival order; longest hand-off per trial {} ms",
        gaps.join(", ")
    );
}

/// Two holders of `--limit 2`, one waiter: the lc-cli of the first holder
/// is SIGKILLed while its command takes a second to stop on SIGTERM; the
/// waiter starts only after that command ended (the guardian keeps the
/// session's socket until the command's group is gone), never before.
#[test]
fn a_killed_holders_slot_outlives_its_command() {
    let pg = PgServer::start();
    let mut margins = Vec::new();
    for trial in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let tl = Timeline::new(dir.path());
        let key = format!("killed{trial}");
        // A second of cleanup on SIGTERM, then it logs its end.
        let a_script = tl.holder("a", OnTerm::CleansUpFor(Duration::from_secs(1)));
        let mut a = pg
            .lc(&["lock", "--limit", "2", &key, "-c", &a_script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(wait_until(LIMIT, || tl.start_of("a").is_some()));
        let (_, a_pid) = tl.start_of("a").unwrap();
        let other = Kids(vec![pg
            .lc(&[
                "lock",
                "--limit",
                "2",
                &key,
                "-c",
                &tl.holder("o", OnTerm::LogAndExit),
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap()]);
        assert!(wait_until(LIMIT, || tl.start_of("o").is_some()));
        let b = pg
            .lc(&["lock", "--limit", "2", &key, "-c", &tl.one_shot("b")])
            .args(["--source", &format!("b{trial}")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        assert!(
            wait_until(LIMIT, || queued(&pg, &format!("b{trial}"), true)),
            "trial {trial}: the waiter never queued"
        );
        std::thread::sleep(Duration::from_millis(200));
        assert!(tl.start_of("b").is_none(), "a third holder ran");
        a.kill().unwrap();
        a.wait().unwrap();
        let (b_code, b_err) = finish_within(LIMIT, b);
        assert_eq!(b_code, Some(0), "trial {trial}: {b_err}");
        let text = tl.text();
        let a_end = tl
            .end_of("a")
            .unwrap_or_else(|| panic!("trial {trial}: the orphan never logged its end:\n{text}"));
        let (b_start, _) = tl.start_of("b").unwrap();
        assert!(
            a_end < b_start,
            "trial {trial}: the waiter started {:.1} ms before the killed holder's command ended:\n{text}",
            (a_end - b_start) as f64 / 1e6
        );
        assert!(!alive(a_pid), "trial {trial}: the orphan lives on");
        margins.push(format!("{:.1}", (b_start - a_end) as f64 / 1e6));
        // SIGTERM: lc-cli stops its command and waits for it.
        let mut other = other;
        let o = other.0.pop().unwrap();
        // SAFETY: kill(2) takes only integers: no memory of ours is involved.
        unsafe { libc::kill(o.id() as i32, libc::SIGTERM) };
        finish_within(LIMIT, o);
    }
    eprintln!(
        "waiter's start after the killed holder's command ended: {} ms",
        margins.join(", ")
    );
}

/// The shared scenario of every backend: SIGKILLed holders of a `--limit
/// 2` key and of a shared key, freed by the server with their sessions.
#[test]
fn dead_holders_are_freed_with_their_sessions() {
    let pg = PgServer::start();
    spans::dead_holders_freed(
        &|args| pg.lc(args),
        |key, tag| queued(&pg, tag, key == "dead-sem"),
        "PostgreSQL sessions",
    );
}

/// Two `lock --limit 2 m` holders, both listed by `keys`: the set is full.
fn full_set_of_two(pg: &PgServer) -> Kids {
    let holders = Kids(
        (0..2)
            .map(|_| {
                pg.lc(&["lock", "--limit", "2", "m", "sleep", "60"])
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    assert!(wait_until(LIMIT, || {
        let out = pg.lc(&["keys", "--json"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .matches("\"m\"")
            .count()
            == 2
    }));
    holders
}

/// On a `--limit 2` key: `-x`, `-s`, `wait -x` and `--limit 3` refused
/// with one line and 78, a `--limit 2` granted; on a shared key and on a
/// key a SQL client holds, `--limit 2` refused. trylock on a full set is
/// "held" (1).
#[test]
fn disagreeing_requests_are_refused_and_a_full_set_is_held() {
    let pg = PgServer::start();
    let holders = full_set_of_two(&pg);
    for args in [
        &["trylock", "--limit", "3", "m", "true"][..],
        &["lock", "--limit", "3", "m", "true"],
        &["lock", "m", "true"],
        &["lock", "-s", "m", "true"],
        &["trylock", "-x", "m", "true"],
        &["wait", "-x", "m"],
    ] {
        let err = expect_error_line(&mut pg.lc(args), 78);
        assert!(err.contains("--limit 2"), "{args:?}: {err}");
    }
    let err = expect_error_line(&mut pg.lc(&["trylock", "--limit", "2", "m", "true"]), 1);
    assert!(err.contains("held by"), "{err}");
    drop(holders);
    assert!(wait_until(LIMIT, || {
        pg.lc(&["trylock", "--limit", "2", "m", "true"])
            .status()
            .unwrap()
            .code()
            == Some(0)
    }));

    let reader = Kids(vec![pg
        .lc(&["lock", "-s", "r", "sleep", "30"])
        .spawn()
        .unwrap()]);
    assert!(wait_until(LIMIT, || pg.held("r")));
    let err = expect_error_line(&mut pg.lc(&["lock", "--limit", "2", "r", "true"]), 78);
    assert!(err.contains("as a lock"), "{err}");
    expect_status(&mut pg.lc(&["trylock", "-s", "r", "true"]), 0);
    drop(reader);

    // A SQL client's advisory lock on the key: refused too.
    let mut psql = pg
        .psql_cmd("SELECT pg_advisory_lock(hashtextextended('q', 0)); SELECT pg_sleep(30)")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(LIMIT, || pg.held("q")));
    let err = expect_error_line(&mut pg.lc(&["trylock", "--limit", "2", "q", "true"]), 78);
    assert!(err.contains("as a lock"), "{err}");
    let _ = psql.kill();
    let _ = psql.wait();
}

/// A refused request frees what it took (its lock, or its marker and N)
/// before lc-cli exits, not when the server later sees its session close:
/// the next request, started at once, finds only the holders (40 rounds,
/// each refusal followed at once by a trylock that must say "held").
#[test]
fn a_refused_request_leaves_nothing_behind_when_it_exits() {
    let pg = PgServer::start();
    let holders = full_set_of_two(&pg);
    let refused: [&[&str]; 4] = [
        &["lock", "m", "true"],
        &["trylock", "-s", "m", "true"],
        &["wait", "-x", "m"],
        &["trylock", "--limit", "3", "m", "true"],
    ];
    for round in 0..40 {
        let args = refused[round % refused.len()];
        expect_error_line(&mut pg.lc(args), 78);
        let err = expect_error_line(&mut pg.lc(&["trylock", "--limit", "2", "m", "true"]), 1);
        assert!(
            err.contains("held by"),
            "round {round}, after {args:?}: {err}"
        );
    }
    drop(holders);
}

/// `keys` lists each slot holder (MODE `limit 2`) with how many wait;
/// `reset --source` frees one slot (its command stopped, 75) and the next
/// in line takes it; `reset KEY` frees every slot.
#[test]
fn keys_and_resets_of_slots() {
    let pg = PgServer::start();
    let json = || -> Vec<serde_json::Value> {
        let out = pg.lc(&["keys", "--json"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|r: &serde_json::Value| r["key"] == "ksem")
            .collect()
    };
    let sources = || -> Vec<String> {
        let mut s: Vec<String> = json()
            .iter()
            .map(|r| r["source"].as_str().unwrap().to_string())
            .collect();
        s.sort();
        s
    };
    let mut kids = Kids(Vec::new());
    for tag in ["a", "b", "c"] {
        kids.0.push(
            pg.lc(&[
                "lock", "--limit", "2", "ksem", "--source", tag, "sleep", "60",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        );
        assert!(wait_until(LIMIT, || queued(&pg, tag, true)), "{tag}");
    }
    assert!(wait_until(LIMIT, || json().len() == 2
        && json().iter().all(|r| r["waiting"] == 1)));
    assert_eq!(sources(), ["a", "b"]);
    for r in json() {
        assert_eq!(r["mode"], "limit", "{r}");
        assert_eq!(r["limit"], 2, "{r}");
    }
    let table = String::from_utf8(pg.lc(&["keys"]).output().unwrap().stdout).unwrap();
    assert_eq!(table.matches("limit 2").count(), 2, "{table}");

    expect_status(&mut pg.lc(&["reset", "--source", "a"]), 0);
    let a = kids.0.remove(0);
    assert_eq!(finish_within(LIMIT, a).0, Some(75));
    assert!(
        wait_until(LIMIT, || sources() == ["b", "c"]),
        "{:?}",
        json()
    );

    expect_status(&mut pg.lc(&["reset", "ksem"]), 0);
    for c in kids.0.drain(..) {
        assert_eq!(finish_within(LIMIT, c).0, Some(75));
    }
    assert!(json().is_empty());
}

/// At a terminal a waiter's status line tells its place: two slot holders,
/// one waiter (the head), then a second waiter: one ahead of it.
#[test]
fn the_status_line_tells_the_place_in_line() {
    let pg = PgServer::start();
    let mut kids = Kids(Vec::new());
    for tag in ["h1", "h2", "w1"] {
        kids.0.push(
            pg.lc(&["lock", "--limit", "2", "p", "--source", tag, "sleep", "60"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        assert!(wait_until(LIMIT, || queued(&pg, tag, true)), "{tag}");
    }
    let (pty, mut second) =
        common::cli::Pty::spawn(pg.lc(&["lock", "--limit", "2", "p", "echo", "RAN"]));
    assert!(
        wait_until(LIMIT, || pty.output().contains(", 1 ahead")),
        "no place shown: {:?}",
        pty.output()
    );
    assert!(!pty.output().contains("RAN"));
    // The holders and the head go: the second waiter runs.
    drop(kids);
    assert_eq!(second.wait_for(LIMIT), Some(0));
    let out = pty.final_output(LIMIT);
    assert!(out.contains("RAN"), "{out:?}");
}

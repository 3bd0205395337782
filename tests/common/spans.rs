//! Contenders for a shared or limited key, and what their commands' own
//! logs say: each command appends `start TAG NS` and `end TAG NS` (`date
//! +%s%N`), the test `arrive TAG NS` once it saw TAG's request queued. The
//! checks read only those times.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::timeline::now_ns;

/// A `-c` script that logs its start (and its `LC_LOCK_TOKEN`), sleeps
/// `secs`, logs its end.
pub(crate) fn script(log: &Path, tag: &str, secs: f64) -> String {
    let log = log.display();
    format!(
        "echo start {tag} $(date +%s%N) >> {log}; echo token {tag} $LC_LOCK_TOKEN >> {log}; sleep {secs}; echo end {tag} $(date +%s%N) >> {log}"
    )
}

/// The `LC_LOCK_TOKEN`s in the order the commands started: each unique and
/// larger than the one granted before it.
pub(crate) fn assert_tokens_grow(log: &Path, spans: &[Span]) {
    assert_granted_in_order(log, &tags(spans));
}

/// The `LC_LOCK_TOKEN`s of `order`'s commands, each unique and larger than
/// the one before: the service granted them in that order (a grant's token
/// is the service's own count, unlike a command's start line, which a slow
/// fork can delay past the next grant's).
pub(crate) fn assert_granted_in_order(log: &Path, order: &[String]) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let token = |tag: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("token {tag} ")))
            .unwrap_or_else(|| panic!("no token for {tag}:\n{text}"))
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{tag}'s token is not a number:\n{text}"))
    };
    let tokens: Vec<u64> = order.iter().map(|tag| token(tag)).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens do not grow with each grant: {tokens:?} for {order:?}:\n{text}"
    );
}

pub(crate) fn note(log: &Path, what: &str, tag: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    // One write, so that a line cannot interleave with the commands' own
    // appends (a formatted `writeln!` writes piece by piece).
    f.write_all(format!("{what} {tag} {}\n", now_ns()).as_bytes())
        .unwrap();
}

/// Children killed when dropped (a failing test leaves none behind).
pub(crate) struct Kids(pub Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Kids {
    /// Every exit status, waiting at most `limit` in all.
    pub(crate) fn wait_all(&mut self, limit: Duration) -> Vec<Option<i32>> {
        let start = Instant::now();
        self.0
            .iter_mut()
            .map(|c| loop {
                if let Some(s) = c.try_wait().unwrap() {
                    break s.code();
                }
                assert!(
                    start.elapsed() < limit,
                    "a process did not finish in {limit:?}"
                );
                std::thread::sleep(Duration::from_millis(20));
            })
            .collect()
    }

    /// Waits at most `limit` in all for every process to exit 0.
    pub(crate) fn all_succeed(&mut self, limit: Duration) {
        let codes = self.wait_all(limit);
        assert!(codes.iter().all(|c| *c == Some(0)), "{codes:?}");
    }
}

/// lc-cli with the service's address in front of `args`.
pub(crate) type Lc<'a> = &'a dyn Fn(&[&str]) -> Command;

/// A contender `lock MODE... KEY --source TAG -c script(log, TAG, secs)`,
/// with its tag, for `arrive_in_order`.
pub(crate) fn contender(
    lc: Lc,
    log: &Path,
    mode: &[&str],
    key: &str,
    tag: &str,
    secs: f64,
) -> (String, Command) {
    let mut args = vec!["lock"];
    args.extend_from_slice(mode);
    let script = script(log, tag, secs);
    args.extend_from_slice(&[key, "--source", tag, "-c", &script]);
    (tag.to_string(), lc(&args))
}

/// Starts each command in turn, the next once `queued(tag)` says this one's
/// request is in line (or it already runs), noting its arrival.
pub(crate) fn arrive_in_order(
    log: &Path,
    cmds: Vec<(String, Command)>,
    queued: impl Fn(&str) -> bool,
) -> Kids {
    let mut kids = Kids(Vec::new());
    for (tag, mut cmd) in cmds {
        kids.0.push(
            cmd.stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let seen = super::wait_until(Duration::from_secs(20), || {
            queued(&tag)
                || std::fs::read_to_string(log)
                    .unwrap_or_default()
                    .contains(&format!("start {tag} "))
        });
        assert!(seen, "{tag} never queued");
        note(log, "arrive", &tag);
    }
    kids
}

#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub tag: String,
    pub arrive: i128,
    pub start: i128,
    pub end: i128,
}

/// Every contender's span, in the order they started.
pub(crate) fn read(log: &Path) -> Vec<Span> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut by: HashMap<String, [Option<i128>; 3]> = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 {
            continue;
        }
        let slot = match f[0] {
            "arrive" => 0,
            "start" => 1,
            "end" => 2,
            _ => continue,
        };
        by.entry(f[1].to_string()).or_default()[slot] = Some(f[2].parse().unwrap());
    }
    let mut spans: Vec<Span> = by
        .into_iter()
        .map(|(tag, [a, s, e])| {
            let start = s.unwrap_or_else(|| panic!("{tag} never started:\n{text}"));
            Span {
                arrive: a.unwrap_or(start).min(start),
                start,
                // Killed before it could say: as if it ran on.
                end: e.unwrap_or(i128::MAX),
                tag,
            }
        })
        .collect();
    spans.sort_by_key(|s| s.start);
    spans
}

pub(crate) fn tags(spans: &[Span]) -> Vec<String> {
    spans.iter().map(|s| s.tag.clone()).collect()
}

/// The most commands that ran at once.
pub(crate) fn max_overlap(spans: &[Span]) -> usize {
    let mut events: Vec<(i128, i32)> = Vec::new();
    for s in spans {
        events.push((s.start, 1));
        events.push((s.end, -1));
    }
    // An end at the same instant as a start comes first.
    events.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// The longest stretch (ms) during which fewer than `n` commands ran while
/// `n` or more had arrived and not ended: the slowest hand-off.
pub(crate) fn longest_shortfall_ms(spans: &[Span], n: usize) -> f64 {
    let mut times: Vec<i128> = spans
        .iter()
        .flat_map(|s| [s.arrive, s.start, s.end])
        .collect();
    times.sort();
    times.dedup();
    let (mut worst, mut since): (i128, Option<i128>) = (0, None);
    for w in times.windows(2) {
        let mid = (w[0] + w[1]) / 2;
        let running = spans
            .iter()
            .filter(|s| s.start <= mid && mid < s.end)
            .count();
        let present = spans
            .iter()
            .filter(|s| s.arrive <= mid && mid < s.end)
            .count();
        if present >= n && running < n {
            let from = *since.get_or_insert(w[0]);
            worst = worst.max(w[1] - from);
        } else {
            since = None;
        }
    }
    worst as f64 / 1e6
}

/// Whether two spans ran at the same time.
pub(crate) fn overlap(a: &Span, b: &Span) -> bool {
    a.start < b.end && b.start < a.end
}

pub(crate) fn by_tag<'a>(spans: &'a [Span], tag: &str) -> &'a Span {
    spans
        .iter()
        .find(|s| s.tag == tag)
        .unwrap_or_else(|| panic!("no span for {tag}"))
}

/// `keys` and the resets on a shared and a limited key, through `lc`
/// (lc-cli with the service's address): every holder listed with its mode
/// and N, `reset --source` frees only that source's hold (its command
/// stops, 75) and the next in line gets the slot, `reset KEY` frees every
/// holder and the waiter behind them runs.
pub(crate) fn keys_and_resets(lc: &dyn Fn(&[&str]) -> Command) {
    let json = || -> Vec<serde_json::Value> {
        let out = lc(&["keys", "--json"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let of = |rows: &[serde_json::Value], key: &str| -> Vec<serde_json::Value> {
        rows.iter().filter(|r| r["key"] == key).cloned().collect()
    };
    let mut kids = Kids(Vec::new());
    let spawn = |args: &[&str], kids: &mut Kids| {
        kids.0.push(
            lc(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
    };
    spawn(
        &[
            "lock", "--limit", "2", "ksem", "--source", "a", "sleep", "60",
        ],
        &mut kids,
    );
    assert!(super::wait_until(Duration::from_secs(10), || of(
        &json(),
        "ksem"
    )
    .len()
        == 1));
    super::expect_status(
        &mut lc(&["lock", "--limit", "2", "ksem", "--source", "b", "-q"]),
        0,
    );
    spawn(
        &[
            "lock", "--limit", "2", "ksem", "--source", "c", "sleep", "60",
        ],
        &mut kids,
    );
    assert!(super::wait_until(Duration::from_secs(10), || {
        of(&json(), "ksem")
            .first()
            .is_some_and(|r| r["waiting"] == 1)
    }));
    let rows = of(&json(), "ksem");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let mut sources: Vec<&str> = rows.iter().map(|r| r["source"].as_str().unwrap()).collect();
    sources.sort();
    assert_eq!(sources, ["a", "b"]);
    for r in &rows {
        assert_eq!(r["mode"], "limit", "{r}");
        assert_eq!(r["limit"], 2, "{r}");
        assert!(r["held_ms"].as_u64().is_some(), "{r}");
    }
    let table = String::from_utf8(lc(&["keys", "ksem"]).output().unwrap().stdout).unwrap();
    // MODE is the last column but where the service shows slots (SLOT,
    // issue 45) or tokens (TOKEN).
    let header = table.lines().next().unwrap();
    assert!(
        header.ends_with("MODE")
            || header.ends_with("MODE     TOKEN")
            || header.ends_with("MODE     SLOT  TOKEN")
            || header.ends_with("MODE     SLOT"),
        "{table}"
    );
    assert_eq!(table.matches("limit 2").count(), 2, "{table}");

    // reset --source a: a's command is stopped, c takes the slot.
    super::expect_status(&mut lc(&["reset", "--source", "a"]), 0);
    let a = kids.0.remove(0);
    let code = a.wait_with_output().unwrap().status.code();
    assert_eq!(code, Some(75), "a's command was not stopped");
    assert!(super::wait_until(Duration::from_secs(10), || {
        let mut s: Vec<String> = of(&json(), "ksem")
            .iter()
            .map(|r| r["source"].as_str().unwrap().to_string())
            .collect();
        s.sort();
        s == ["b", "c"]
    }));

    // Two readers hold, a writer waits: reset KEY frees both readers.
    spawn(
        &["lock", "-s", "krw", "--source", "r1", "sleep", "60"],
        &mut kids,
    );
    spawn(
        &["lock", "-s", "krw", "--source", "r2", "sleep", "60"],
        &mut kids,
    );
    assert!(super::wait_until(Duration::from_secs(10), || of(
        &json(),
        "krw"
    )
    .len()
        == 2));
    let rows = of(&json(), "krw");
    assert!(
        rows.iter()
            .all(|r| r["mode"] == "shared" && r["limit"].is_null()),
        "{rows:?}"
    );
    let mut writer = lc(&["lock", "krw", "--source", "w", "true"])
        .spawn()
        .unwrap();
    assert!(super::wait_until(Duration::from_secs(10), || {
        of(&json(), "krw")
            .first()
            .is_some_and(|r| r["waiting"] == 1)
    }));
    super::expect_status(&mut lc(&["reset", "krw"]), 0);
    assert!(super::wait_until(Duration::from_secs(10), || writer
        .try_wait()
        .unwrap()
        .is_some()));
    assert_eq!(writer.wait().unwrap().code(), Some(0));
    // unlock takes the kept lease.
    super::expect_status(&mut lc(&["unlock", "ksem"]), 0);
    assert!(super::wait_until(Duration::from_secs(10), || {
        of(&json(), "ksem").iter().all(|r| r["source"] == "c")
    }));
}

/// 2N contenders for `sem` with `--limit N` (N = 3), each queued
/// (`queued(tag)`) before the next comes: never more than N run, exactly N
/// while N or more are there (each hand-off well under the run time), in
/// the order they queued, with growing tokens. The longest hand-off, ms.
pub(crate) fn limit_n(lc: Lc, queued: impl Fn(&str) -> bool) -> f64 {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let n = 3;
    let cmds: Vec<_> = (0..2 * n)
        .map(|i| contender(lc, &log, &["--limit", "3"], "sem", &format!("c{i}"), 1.0))
        .collect();
    arrive_in_order(&log, cmds, queued).all_succeed(Duration::from_secs(60));
    let spans = read(&log);
    assert_eq!(max_overlap(&spans), n, "{spans:#?}");
    let gap = longest_shortfall_ms(&spans, n);
    assert!(
        gap < 400.0,
        "fewer than {n} ran for {gap} ms while {n} waited: {spans:#?}"
    );
    // First come, first served, judged by the grants' tokens: the commands'
    // own start lines may swap under load when two grants come within a
    // fork's time of each other (two holders ending together).
    let order: Vec<String> = (0..2 * n).map(|i| format!("c{i}")).collect();
    assert_granted_in_order(&log, &order);
    gap
}

/// r1 r2 w1 r3 r4 w2 r5 for `rw`, each queued (`queued(tag)`) before the
/// next comes, both spellings of each mode: checked by
/// `readers_and_writers_in_arrival_order`.
pub(crate) fn readers_and_writers(lc: Lc, queued: impl Fn(&str) -> bool) {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let plan = [
        ("r1", "-s"),
        ("r2", "-s"),
        ("w1", "-x"),
        ("r3", "-s"),
        ("r4", "--shared"),
        ("w2", "--exclusive"),
        ("r5", "-s"),
    ];
    let cmds: Vec<_> = plan
        .iter()
        .map(|(tag, m)| contender(lc, &log, &[m], "rw", tag, 0.8))
        .collect();
    arrive_in_order(&log, cmds, queued).all_succeed(Duration::from_secs(60));
    readers_and_writers_in_arrival_order(&read(&log));
}

/// For a `--limit 2` key and a shared one (`dead-sem`, `dead-rw`): two
/// holders, a waiter that cannot run beside them (`--limit 2`, `-x`); the
/// holders' lc-cli killed with SIGKILL, the waiter runs within 6 s, once
/// the service frees the dead holds (`freed_by`: a lease, a session).
/// `queued(key, tag)` says whether TAG's request for KEY is in line.
/// Returns, per key, how long after the kill the waiter started (s).
pub(crate) fn dead_holders_freed(
    lc: Lc,
    queued: impl Fn(&str, &str) -> bool,
    freed_by: &str,
) -> Vec<f64> {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let mut waited = Vec::new();
    for (mode, waiter_mode, key) in [
        (&["--limit", "2"][..], &["--limit", "2"][..], "dead-sem"),
        (&["-s"][..], &["-x"][..], "dead-rw"),
    ] {
        let holders: Vec<_> = (0..2)
            .map(|i| contender(lc, &log, mode, key, &format!("{key}-h{i}"), 120.0))
            .collect();
        let mut held = arrive_in_order(&log, holders, |tag| queued(key, tag));
        assert!(super::wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches(&format!("start {key}-h"))
                .count()
                == held.0.len()
        }));
        let waiter = vec![contender(
            lc,
            &log,
            waiter_mode,
            key,
            &format!("{key}-w"),
            0.1,
        )];
        let mut waiting = arrive_in_order(&log, waiter, |tag| queued(key, tag));
        std::thread::sleep(Duration::from_millis(300));
        assert!(!std::fs::read_to_string(&log)
            .unwrap()
            .contains(&format!("start {key}-w ")));
        let killed = now_ns();
        for h in &mut held.0 {
            h.kill().unwrap(); // SIGKILL of lc-cli: the service frees its hold
        }
        assert_eq!(waiting.wait_all(Duration::from_secs(20)), [Some(0)]);
        let spans = read(&log);
        let after = (by_tag(&spans, &format!("{key}-w")).start - killed) as f64 / 1e9;
        assert!(
            after < 6.0,
            "{key}: the waiter ran {after} s after the kill"
        );
        eprintln!("{key}: waiter ran {after:.2} s after SIGKILL of the holders ({freed_by})");
        waited.push(after);
    }
    waited
}

/// Each of `writers` ran alone: its span overlaps no other.
pub(crate) fn assert_alone(spans: &[Span], writers: &[&str]) {
    for w in writers {
        let ws = by_tag(spans, w);
        for other in spans {
            if other.tag != *w {
                assert!(
                    !overlap(ws, other),
                    "{w} overlapped {}: {spans:#?}",
                    other.tag
                );
            }
        }
    }
}

/// The spans of r1 r2 w1 r3 r4 w2 r5, arrived in that order: readers next
/// to each other share, a writer overlaps nobody, and each writer runs
/// after the readers ahead of it and before those behind it.
pub(crate) fn readers_and_writers_in_arrival_order(spans: &[Span]) {
    let s = |t| by_tag(spans, t);
    assert!(
        overlap(s("r1"), s("r2")),
        "readers did not share: {spans:#?}"
    );
    assert!(
        overlap(s("r3"), s("r4")),
        "readers did not share: {spans:#?}"
    );
    assert_alone(spans, &["w1", "w2"]);
    assert!(
        s("w1").start >= s("r2").end && s("w1").end <= s("r3").start,
        "{spans:#?}"
    );
    assert!(
        s("w2").start >= s("r4").end && s("w2").end <= s("r5").start,
        "{spans:#?}"
    );
}

/// Disagreeing requests, through `lc`: on a `--limit 2` key an exclusive,
/// a shared (also a kept one, without a command) and a `--limit 3`
/// request, and on a shared key a `--limit 2` one, are each refused with
/// one line and 78, while agreeing ones are granted.
pub(crate) fn refusals(lc: Lc) {
    let limit = Duration::from_secs(10);
    let holder = Kids(vec![lc(&["lock", "--limit", "2", "m", "sleep", "30"])
        .spawn()
        .unwrap()]);
    assert!(super::wait_until(limit, || {
        let out = lc(&["keys", "--json"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).contains("\"m\"")
    }));
    for args in [
        &["trylock", "--limit", "3", "m", "true"][..],
        &["lock", "m", "true"],
        &["lock", "-s", "m", "true"],
        &["wait", "-x", "m"],
        &["lock", "-s", "m"],
    ] {
        let err = super::expect_error_line(&mut lc(args), 78);
        assert!(err.contains("--limit 2"), "{args:?}: {err}");
    }
    super::expect_status(&mut lc(&["trylock", "--limit", "2", "m", "true"]), 0);
    drop(holder);
    let holder = Kids(vec![lc(&["lock", "-s", "r", "sleep", "30"])
        .spawn()
        .unwrap()]);
    assert!(super::wait_until(limit, || {
        lc(&["trylock", "r", "true"]).status().unwrap().code() == Some(1)
    }));
    let err = super::expect_error_line(&mut lc(&["lock", "--limit", "2", "r", "true"]), 78);
    assert!(err.contains("as a lock"), "{err}");
    super::expect_status(&mut lc(&["trylock", "-s", "r", "true"]), 0);
    drop(holder);
}

//! The deploy-queue scenarios of issue 44 (`--newest`, `--order`,
//! `--cancel-running`), one function each, that every backend's test file
//! (`tests/queue_*.rs`) runs against its real server through `lc` (lc-cli
//! with the service's address in front). Every judgement comes from the
//! commands' own logs (`start TAG NS`, `end TAG NS`, spans.rs) and from the
//! time each lc-cli was seen to exit, never from what lc-cli says of itself.

use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::spans::{self, Lc, Span};
use super::timeline::{last_seen_alive, now_ns};
use super::wait_until;

/// The exit statuses of the deploy-queue outcomes (src/exit.rs).
pub(crate) const SUPERSEDED: i32 = 79;
pub(crate) const OUTDATED: i32 = 80;
pub(crate) const CANCELLED: i32 = 81;

/// How long any one scenario may wait for a request or a command.
const LIMIT: Duration = Duration::from_secs(30);

/// Its exit status and the moment it was seen to exit, once it has.
type Exit = Arc<Mutex<Option<(Option<i32>, i128)>>>;

/// One lc-cli started by a scenario: when it was spawned, and its status and
/// the moment it was seen to exit (a thread waits for it), its stderr kept.
pub(crate) struct Request {
    pub tag: String,
    pub spawned: i128,
    pub pid: u32,
    exit: Exit,
    stderr: std::path::PathBuf,
}

impl Request {
    /// Starts `lc ARGS` with stderr to a file beside `log`.
    pub(crate) fn start(lc: Lc, log: &Path, tag: &str, args: &[&str]) -> Request {
        let stderr = log.with_file_name(format!("{tag}.stderr"));
        let mut cmd = lc(args);
        cmd.stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let spawned = now_ns();
        let mut child: Child = cmd.spawn().expect("start lc-cli");
        let pid = child.id();
        let exit = Arc::new(Mutex::new(None));
        let seen = exit.clone();
        std::thread::spawn(move || {
            let status = child.wait().ok().and_then(|s| s.code());
            *seen.lock().unwrap() = Some((status, now_ns()));
        });
        Request {
            tag: tag.to_string(),
            spawned,
            pid,
            exit,
            stderr,
        }
    }

    /// Its exit status and when it exited, waiting at most `limit`.
    pub(crate) fn wait(&self, limit: Duration) -> (Option<i32>, i128) {
        assert!(
            wait_until(limit, || self.exit.lock().unwrap().is_some()),
            "{} did not exit within {limit:?}; its stderr:\n{}",
            self.tag,
            self.stderr()
        );
        self.exit.lock().unwrap().unwrap()
    }

    /// Its status, waiting at most [`LIMIT`].
    pub(crate) fn status(&self) -> Option<i32> {
        self.wait(LIMIT).0
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if self.exit.lock().unwrap().is_none() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// `lock ARGS KEY --source TAG -c SCRIPT` where SCRIPT logs its start,
/// sleeps `secs` and logs its end (spans.rs's format), then exits `status`.
pub(crate) fn deploy(
    lc: Lc,
    log: &Path,
    key: &str,
    tag: &str,
    secs: f64,
    status: i32,
    args: &[&str],
) -> Request {
    let script = format!("{}; exit {status}", spans::script(log, tag, secs));
    let mut all: Vec<&str> = vec!["lock"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[key, "--source", tag, "-c", &script]);
    Request::start(lc, log, tag, &all)
}

/// True once `keys --waiters --json` lists a waiter of `key` whose source
/// is `tag`.
pub(crate) fn is_waiting(lc: Lc, key: &str, tag: &str) -> bool {
    let Ok(out) = lc(&["keys", "--waiters", "--json"]).output() else {
        return false;
    };
    String::from_utf8_lossy(&out.stdout).lines().any(|line| {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            return false;
        };
        v["key"] == key
            && v["waiters"]
                .as_array()
                .is_some_and(|w| w.iter().any(|w| w["source"] == tag))
    })
}

/// Waits until `tag` waits for `key` (or has started, or has exited).
pub(crate) fn until_waiting(lc: Lc, log: &Path, key: &str, r: &Request) {
    let ok = wait_until(LIMIT, || {
        r.exit.lock().unwrap().is_some() || started(log, &r.tag) || is_waiting(lc, key, &r.tag)
    });
    assert!(ok, "{} never joined the line of '{key}'", r.tag);
}

/// Whether TAG's command logged its start.
pub(crate) fn started(log: &Path, tag: &str) -> bool {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains(&format!("start {tag} "))
}

fn text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// Every command's span; none overlaps another.
pub(crate) fn alone(log: &Path) -> Vec<Span> {
    let spans = spans::read(log);
    assert!(
        spans::max_overlap(&spans) <= 1,
        "two commands ran at once:\n{}",
        text(log)
    );
    spans
}

/// 10 `--newest` requests, a holder then 9 started 50 ms apart (each once
/// the one before is in line): exactly the holder and the last request run;
/// the other 8 exit superseded, each within 200 ms of the spawn of the
/// request that superseded it; never two commands at once. Returns the
/// delays (ms) from each superseding spawn to the superseded exit.
pub(crate) fn newest_wins(lc: Lc, key: &str) -> Vec<f64> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let holder = deploy(lc, &log, key, "holder", 2.5, 0, &["--newest"]);
    assert!(
        wait_until(LIMIT, || started(&log, "holder")),
        "{}",
        holder.stderr()
    );
    let mut requests: Vec<Request> = Vec::new();
    for i in 0..9 {
        let r = deploy(lc, &log, key, &format!("r{i}"), 0.2, 0, &["--newest"]);
        let t = Instant::now();
        until_waiting(lc, &log, key, &r);
        requests.push(r);
        std::thread::sleep(Duration::from_millis(50).saturating_sub(t.elapsed()));
    }
    assert_eq!(holder.status(), Some(0), "{}", holder.stderr());
    let mut delays = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        let (status, at) = r.wait(LIMIT);
        if i == 8 {
            assert_eq!(status, Some(0), "the newest request: {}", r.stderr());
            continue;
        }
        assert_eq!(status, Some(SUPERSEDED), "r{i}: {}", r.stderr());
        assert!(
            r.stderr().contains("'r") && r.stderr().contains("superseded"),
            "r{i} does not name who superseded it: {}",
            r.stderr()
        );
        let delay = (at - requests[i + 1].spawned) as f64 / 1e6;
        assert!(
            (0.0..200.0).contains(&delay),
            "r{i} exited {delay:.1} ms after r{}'s spawn:\n{}",
            i + 1,
            text(&log)
        );
        delays.push(delay);
    }
    let spans = alone(&log);
    assert_eq!(spans::tags(&spans), ["holder", "r8"], "{}", text(&log));
    delays
}

/// Orders 5, 3, 7, 6 arriving in that order while order 4 holds and
/// succeeds (the key's mark already 4): 3 exits outdated at once; with
/// `--newest`, 5 and 6 are superseded (6 at once, by the waiting 7) and 7
/// runs; without, 5 runs, then 7, and 6 exits outdated at its turn. The
/// versions run only grow. `restart` (if any) restarts the service while 4
/// holds and the others wait.
pub(crate) fn orders(lc: Lc, key: &str, newest: bool, restart: Option<&mut dyn FnMut()>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let first = deploy(lc, &log, key, "v4-first", 0.0, 0, &["--order", "4"]);
    assert_eq!(first.status(), Some(0), "{}", first.stderr());
    assert_eq!(mark(lc, key), Some(4));
    let flag: &[&str] = if newest { &["--newest"] } else { &[] };
    let with = |order: &'static str| -> Vec<&str> {
        let mut a = vec!["--order", order];
        a.extend_from_slice(flag);
        a
    };
    let holder = deploy(lc, &log, key, "v4", 2.0, 0, &with("4"));
    assert!(
        wait_until(LIMIT, || started(&log, "v4")),
        "{}",
        holder.stderr()
    );
    let mut waiting = Vec::new();
    for order in ["5", "3", "7", "6"] {
        let r = deploy(lc, &log, key, &format!("v{order}"), 0.3, 0, &with(order));
        until_waiting(lc, &log, key, &r);
        waiting.push(r);
    }
    let [v5, v3, v7, v6] = &waiting[..] else {
        unreachable!()
    };
    let (status, v3_exit) = v3.wait(LIMIT);
    assert_eq!(status, Some(OUTDATED), "v3: {}", v3.stderr());
    if newest {
        // 6 leaves at its first listing (7 waits ahead of it), which may
        // still be under way when its node shows in line: done before the
        // restart, so a listing answered only after it cannot find 7
        // already holding (and 6 then outdated, rightly, by 7's mark).
        v6.wait(LIMIT);
    }
    if let Some(restart) = restart {
        restart();
    }
    assert_eq!(holder.status(), Some(0), "v4: {}", holder.stderr());
    assert_eq!(v7.status(), Some(0), "v7: {}", v7.stderr());
    if newest {
        assert_eq!(v5.status(), Some(SUPERSEDED), "v5: {}", v5.stderr());
        assert_eq!(v6.status(), Some(SUPERSEDED), "v6: {}", v6.stderr());
    } else {
        assert_eq!(v5.status(), Some(0), "v5: {}", v5.stderr());
        assert_eq!(v6.status(), Some(OUTDATED), "v6: {}", v6.stderr());
    }
    let spans = alone(&log);
    assert!(
        v3_exit < spans::by_tag(&spans, "v4").end,
        "v3 waited for the holder instead of exiting at once:\n{}",
        text(&log)
    );
    let versions: Vec<u64> = spans
        .iter()
        .map(|s| {
            s.tag
                .trim_start_matches('v')
                .trim_end_matches("-first")
                .parse()
                .unwrap()
        })
        .collect();
    assert!(
        versions.windows(2).all(|w| w[0] <= w[1]),
        "an older version ran after a newer one: {versions:?}\n{}",
        text(&log)
    );
    assert_eq!(*versions.last().unwrap(), 7, "{}", text(&log));
    assert_eq!(mark(lc, key), Some(7));
}

/// `lc-cli mark KEY`: the key's mark, None when it has none (status 1).
pub(crate) fn mark(lc: Lc, key: &str) -> Option<u64> {
    let out = lc(&["mark", key]).output().unwrap();
    match out.status.code() {
        Some(0) => Some(
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("a number"),
        ),
        Some(1) => None,
        other => panic!(
            "mark {key}: {other:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The mark: a failed run does not raise it, an equal order runs, a lower
/// one is outdated, `mark --clear` clears it; with `restart`, it survives a
/// restart of the service.
pub(crate) fn mark_rules(lc: Lc, key: &str, restart: Option<&mut dyn FnMut()>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let run = |tag: &str, order: &str, status: i32| {
        deploy(lc, &log, key, tag, 0.0, status, &["--order", order]).status()
    };
    assert_eq!(mark(lc, key), None);
    assert_eq!(run("a", "10", 0), Some(0));
    assert_eq!(mark(lc, key), Some(10));
    assert_eq!(run("b", "12", 3), Some(3), "a failed run passes its status");
    assert_eq!(mark(lc, key), Some(10), "a failed run raised the mark");
    assert_eq!(run("c", "10", 0), Some(0), "an equal order (a re-run) runs");
    assert_eq!(run("d", "9", 0), Some(OUTDATED));
    assert!(!started(&log, "d"), "an outdated request ran");
    if let Some(restart) = restart {
        restart();
        assert_eq!(
            mark(lc, key),
            Some(10),
            "the mark did not survive a restart"
        );
        assert_eq!(run("e", "9", 0), Some(OUTDATED));
    }
    let out = lc(&["mark", "--clear", key]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mark(lc, key), None);
    assert_eq!(run("f", "9", 0), Some(0), "the mark was cleared");
    let spans = alone(&log);
    assert_eq!(spans::tags(&spans), ["a", "b", "c", "f"], "{}", text(&log));
}

/// `--cancel-running` against a holder that took the key with it and whose
/// command ignores SIGTERM: the holder's command ends by SIGKILL after
/// `--kill-after 1s`, the holder exits 81 naming the newer run, and the
/// newer command starts only after the older one's end; `trials` times.
/// Returns the gaps (ms) from the older command last seen alive to the newer start.
pub(crate) fn cancel_running(lc: Lc, key: &str, trials: usize) -> Vec<f64> {
    let mut gaps = Vec::new();
    for trial in 0..trials {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let stubborn = format!(
            "trap '' TERM; echo start old $(date +%s%N) $$ >> {0}; echo pid $$ >> {0}; while :; do sleep 0.05; done",
            log.display()
        );
        let old = Request::start(
            lc,
            &log,
            "old",
            &[
                "lock",
                "--cancel-running",
                "--kill-after",
                "1s",
                key,
                "--source",
                "old",
                "-c",
                &stubborn,
            ],
        );
        assert!(
            wait_until(LIMIT, || started(&log, "old")),
            "{}",
            old.stderr()
        );
        let pid: i32 = text(&log)
            .lines()
            .find_map(|l| l.strip_prefix("pid "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The new command says, at its start, whether the old one still
        // exists (a zombie counts: its lc-cli reaps it before releasing).
        let check = format!(
            "kill -0 {pid} 2>/dev/null && echo overlap new >> {}; {}",
            log.display(),
            spans::script(&log, "new", 0.1)
        );
        let new = Request::start(
            lc,
            &log,
            "new",
            &[
                "lock",
                "--cancel-running",
                key,
                "--source",
                "new",
                "-c",
                &check,
            ],
        );
        // When the old command was last seen alive: a lower bound of its
        // end (the first look that finds it gone may come late).
        let end = last_seen_alive(pid, LIMIT).expect("the old command was never stopped");
        assert_eq!(
            old.status(),
            Some(CANCELLED),
            "trial {trial}: {}",
            old.stderr()
        );
        assert!(
            old.stderr().contains("'new'"),
            "trial {trial}: the cancelled run does not name the newer one: {}",
            old.stderr()
        );
        assert_eq!(new.status(), Some(0), "trial {trial}: {}", new.stderr());
        let start = spans::read(&log)
            .into_iter()
            .find(|s| s.tag == "new")
            .expect("the new command ran")
            .start;
        assert!(
            start > end,
            "trial {trial}: the new command started {:.1} ms before the old one was last seen alive:\n{}",
            (end - start) as f64 / 1e6,
            text(&log)
        );
        assert!(
            !text(&log).contains("overlap new"),
            "trial {trial}: the old command still existed when the new one started:\n{}",
            text(&log)
        );
        gaps.push((start - end) as f64 / 1e6);
    }
    gaps
}

/// A holder without `--cancel-running` is never stopped by a request with
/// it: the newer request waits for the holder's own end.
pub(crate) fn no_cancel_without_the_flag(lc: Lc, key: &str) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let old = deploy(lc, &log, key, "old", 1.5, 0, &[]);
    assert!(
        wait_until(LIMIT, || started(&log, "old")),
        "{}",
        old.stderr()
    );
    let new = deploy(lc, &log, key, "new", 0.1, 0, &["--cancel-running"]);
    assert_eq!(old.status(), Some(0), "{}", old.stderr());
    assert_eq!(new.status(), Some(0), "{}", new.stderr());
    let spans = alone(&log);
    assert_eq!(spans::tags(&spans), ["old", "new"]);
}

/// 10 pipelines with `--newest --order N` (N = 1..10, 100 ms apart) while
/// pipeline 0 holds, and `restart` in the middle: no request exits 69, the
/// versions run only grow, the newest (10) runs last, nothing overlaps.
pub(crate) fn pipelines_across_a_restart(lc: Lc, key: &str, restart: &mut dyn FnMut()) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let holder = deploy(lc, &log, key, "p0", 3.0, 0, &["--newest", "--order", "0"]);
    assert!(
        wait_until(LIMIT, || started(&log, "p0")),
        "{}",
        holder.stderr()
    );
    let mut pipelines = vec![holder];
    for n in 1..=10u32 {
        if n == 6 {
            restart();
        }
        let order = n.to_string();
        let r = deploy(
            lc,
            &log,
            key,
            &format!("p{n}"),
            0.2,
            0,
            &["--newest", "--order", &order],
        );
        std::thread::sleep(Duration::from_millis(100));
        pipelines.push(r);
    }
    for (n, p) in pipelines.iter().enumerate() {
        let status = p.status();
        // Outdated: a pipeline whose arrival the restart delayed until a
        // newer one had run (its order below the mark by then).
        assert!(
            matches!(status, Some(0 | SUPERSEDED | OUTDATED)),
            "p{n} exited {status:?}: {}",
            p.stderr()
        );
    }
    let spans = alone(&log);
    let versions: Vec<u32> = spans
        .iter()
        .map(|s| s.tag.trim_start_matches('p').parse().unwrap())
        .collect();
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "versions ran out of order: {versions:?}\n{}",
        text(&log)
    );
    assert_eq!(versions.last(), Some(&10), "{}", text(&log));
}

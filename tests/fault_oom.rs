//! lc-cli killed by the kernel's OOM killer, a real one, with no doubt
//! about the victim: a memory cgroup (v1) with a limit, lc-cli in it at
//! oom_score_adj 1000, every other process in it at 0 or less (its
//! command, its guardian, and a small process that allocates until the
//! cgroup's OOM kill counter moves), which makes lc-cli the kernel's pick
//! whatever the sizes (see `oom_kill`). The kernel kills every process
//! sharing lc-cli's memory; the guardian has memory of its own (checked
//! with kcmp before lc-cli is raised to 1000), so it lives on and stops the command (which ignores
//! SIGTERM) with SIGKILL after `--kill-after 1s`, before the built-in
//! server's reclaim grace hands the key to the waiter: the waiter's
//! command starts after the holder's has gone, every trial.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::cli::Guard;
use common::timeline::{alive, gone_at, now_ns, OnTerm, Timeline};
use common::{lc_at, wait_until, Serve};

const TRIALS: usize = 3;
const LIMIT: Duration = Duration::from_secs(30);
/// The cgroup's memory limit: room for lc-cli, its guardian and command.
const MEMORY_LIMIT: u64 = 64 << 20;

/// A memory cgroup of its own under this process's, removed when dropped
/// (once its processes are gone).
struct MemoryCgroup(PathBuf);

impl MemoryCgroup {
    fn new(name: &str) -> MemoryCgroup {
        let ours = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let path = ours
            .lines()
            .find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
                controllers
                    .split(',')
                    .any(|c| c == "memory")
                    .then_some(path)
            })
            .unwrap_or_else(|| panic!("no memory cgroup (v1) in /proc/self/cgroup:\n{ours}"));
        let dir = Path::new("/sys/fs/cgroup/memory")
            .join(path.trim_start_matches('/'))
            .join(name);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        std::fs::write(dir.join("memory.limit_in_bytes"), MEMORY_LIMIT.to_string()).unwrap();
        MemoryCgroup(dir)
    }

    /// `argv` run inside it, with this oom_score_adj.
    fn run(&self, oom_score_adj: i32, argv: &[&str]) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(
                r#"echo $$ > "$1" && echo "$2" > /proc/self/oom_score_adj && shift 2 && exec "$@""#,
            )
            .arg("sh")
            .arg(self.0.join("cgroup.procs"))
            .arg(oom_score_adj.to_string())
            .args(argv);
        cmd
    }
}

impl MemoryCgroup {
    /// Its OOM counters and usage, and each process's score, for a failure.
    fn report(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.0.join(f)).unwrap_or_default();
        let mut text = format!(
            "{} usage {} max {} failcnt {}",
            read("memory.oom_control").replace('\n', " "),
            read("memory.usage_in_bytes").trim(),
            read("memory.max_usage_in_bytes").trim(),
            read("memory.failcnt").trim()
        );
        for pid in read("cgroup.procs").split_whitespace() {
            let proc =
                |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default();
            let rss = proc("status")
                .lines()
                .find(|l| l.starts_with("VmRSS"))
                .unwrap_or_default()
                .to_string();
            text += &format!(
                "; {pid} {} adj {} score {} {rss}",
                proc("comm").trim(),
                proc("oom_score_adj").trim(),
                proc("oom_score").trim()
            );
        }
        text
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let empty = || {
            std::fs::read_to_string(self.0.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty())
        };
        wait_until(Duration::from_secs(10), empty);
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Allocates (and touches) 64 KiB at a time, at most 1 GiB, until the
/// cgroup's OOM kill counter (`oom_kill` in memory.oom_control) moves, then
/// exits at once, giving its memory back: after the kill it allocates at
/// most one more step. Prints the number of steps. (What lc-cli's death
/// frees is its anonymous pages, half a megabyte, and the command's trap
/// forks as the guardian's SIGTERM comes: should the cgroup run out again
/// before this process has seen the counter, the second kill takes it,
/// by far the largest process then, about 60 MB.) mawk (Debian's awk, priority required), not python3:
/// its few mapped pages keep its score far below lc-cli's (see
/// [`oom_kill`]).
fn hog(cgroup: &MemoryCgroup) -> Child {
    let program = r#"BEGIN {
        f = ARGV[1]; ARGV[1] = ""
        step = sprintf("%4096s", ""); step = step step; step = step step; step = step step; step = step step
        for (n = 0; n < 16384; n++) {
            seen = 0; killed = 0
            while ((getline line < f) > 0)
                if (line ~ /^oom_kill /) { seen = 1; split(line, w, " "); killed = w[2] + 0 > 0 }
            close(f)
            if (!seen) { print "no oom_kill counter in " f; exit 3 }
            if (killed) break
            chunks[n] = step n
        }
        print n
        exit 0
    }"#;
    let control = cgroup.0.join("memory.oom_control");
    cgroup
        .run(0, &["mawk", program, &control.display().to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mawk")
}

/// The allocating process started in `cgroup`, until lc-cli `a` is dead
/// (or the allocating process ended without that, or LIMIT): lc-cli's
/// status, when its end was seen, and what the allocating process said.
///
/// The victim is certain. The OOM killer picks the process of the cgroup
/// with the highest badness: its resident pages (anonymous and mapped
/// file pages), swap and page tables, plus oom_score_adj thousandths of
/// the cgroup's limit. lc-cli alone is at 1000: the whole limit on top of
/// its own pages. Every other process is at 0, and what it holds is
/// charged to the cgroup, under the limit, but for its mapped file pages:
/// it would need more of those than lc-cli holds in all to outscore it.
/// The allocating process maps few (mawk and libc, about 2 MB; lc-cli
/// about 7 MB, the guardian and the command 3 MB or less). (Lowering a
/// score below 0, which would rule them out outright, takes
/// CAP_SYS_RESOURCE, which a container's root may lack.)
fn oom_kill(cgroup: &MemoryCgroup, a: &mut Guard) -> (Option<i32>, i128, String) {
    let mut hog = hog(cgroup);
    let start = std::time::Instant::now();
    let mut code = None;
    let mut seen_at = now_ns();
    while start.elapsed() < LIMIT {
        if let Ok(Some(status)) = a.0.try_wait() {
            use std::os::unix::process::ExitStatusExt;
            code = status.code().or(status.signal().map(|s| 128 + s));
            seen_at = now_ns();
            break;
        }
        if matches!(hog.try_wait(), Ok(Some(_))) {
            // Ended without lc-cli's death: a last look, then the failure.
            std::thread::sleep(Duration::from_millis(100));
            if let Ok(Some(status)) = a.0.try_wait() {
                use std::os::unix::process::ExitStatusExt;
                code = status.code().or(status.signal().map(|s| 128 + s));
                seen_at = now_ns();
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // It ends by itself once the counter moved; killed past 5 s.
    let ended = wait_until(Duration::from_secs(5), || {
        matches!(hog.try_wait(), Ok(Some(_)))
    });
    if !ended {
        let _ = hog.kill();
    }
    let out = hog.wait_with_output().unwrap();
    let said = format!(
        "{:?} {} {}",
        out.status,
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    (code, seen_at, said)
}

/// The guardian of lc-cli `parent`: its comm, its parent.
fn guardian_of(parent: i32) -> Option<i32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let comm = std::fs::read(format!("/proc/{pid}/comm")).unwrap_or_default();
        let ppid = common::cli::proc_field(pid, 4);
        if comm == b"lc-cli-guardian\n" && ppid == Some(parent as i64) {
            return Some(pid);
        }
    }
    None
}

/// Whether two processes share their memory (kcmp(2), KCMP_VM); None if
/// one is gone. The OOM killer kills every process sharing its victim's
/// memory, and a write to one's oom_score_adj sets all of theirs.
fn share_memory(a: i32, b: i32) -> Option<bool> {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp takes only integers: no memory of ours is involved.
    let rc = unsafe { libc::syscall(libc::SYS_kcmp, a, b, KCMP_VM, 0, 0) };
    (rc >= 0).then_some(rc == 0)
}

fn oom_score_adj(pid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The processes of the cgroup other than `victim` whose oom_score_adj is
/// above 0 (the OOM killer could pick them before it): pid, comm, score.
fn other_candidates(cgroup: &MemoryCgroup, victim: i32) -> Vec<String> {
    let procs = std::fs::read_to_string(cgroup.0.join("cgroup.procs")).unwrap_or_default();
    procs
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter(|&pid| pid != victim)
        .filter_map(|pid| {
            let adj = oom_score_adj(pid)?;
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            (adj > 0).then(|| format!("{pid} {} adj {adj}", comm.trim()))
        })
        .collect()
}

#[test]
fn a_holder_killed_by_the_oom_killer_leaves_a_guardian_that_stops_its_command() {
    let server = Serve::new().args(&["--reclaim-grace", "3s"]).start();
    let url = server.url();
    for trial in 0..TRIALS {
        let cgroup = MemoryCgroup::new(&format!("lc-cli-oom-{}-{trial}", std::process::id()));
        let dir = tempfile::tempdir().unwrap();
        let tl = Timeline::new(dir.path());
        let key = format!("oom{trial}");
        // lc-cli starts at 0, as its command and its guardian then do
        // (inherited); lc-cli alone is raised to 1000 below.
        let script = tl.holder("a", OnTerm::LogAndGoOn);
        let mut a = Guard(
            cgroup
                .run(
                    0,
                    &[
                        common::BIN,
                        "--server",
                        &url,
                        "lock",
                        &key,
                        "--kill-after",
                        "1s",
                        "-c",
                        &script,
                    ],
                )
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        assert!(
            wait_until(LIMIT, || tl.start_of("a").is_some()),
            "trial {trial}: the holder never started"
        );
        let (_, a_pid) = tl.start_of("a").unwrap();
        let b_script = format!("{}; sleep 0.2", tl.one_shot("b"));
        let b = lc_at(&url, &["lock", &key, "--source", "b", "-c", &b_script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        server.wait_queued(&key, "b");
        // The guardian, once in memory of its own (at once, or after an
        // exec): the kernel's kill of lc-cli must not take it along.
        let mut guardian = None;
        let mut shared = None;
        assert!(
            wait_until(Duration::from_secs(5), || {
                guardian = guardian.or_else(|| guardian_of(a.pid()));
                shared = guardian.and_then(|g| share_memory(a.pid(), g));
                shared == Some(false)
            }),
            "trial {trial}: no guardian of lc-cli {} in memory of its own: guardian {guardian:?}, \
             shares lc-cli's memory: {shared:?}",
            a.pid()
        );
        let guardian = guardian.unwrap();
        // (Were the guardian still in lc-cli's memory, this would raise
        // its score too.)
        std::fs::write(format!("/proc/{}/oom_score_adj", a.pid()), "1000").unwrap();
        let others = other_candidates(&cgroup, a.pid());
        assert!(
            others.is_empty(),
            "trial {trial}: processes scored above 0 besides lc-cli: {others:?}"
        );
        let (a_code, killed_at, hog) = oom_kill(&cgroup, &mut a);
        let report = cgroup.report();
        assert_eq!(
            a_code,
            Some(128 + libc::SIGKILL),
            "trial {trial}: lc-cli was not OOM-killed; the allocating process: {hog}; the cgroup: {report}"
        );
        assert!(
            alive(guardian),
            "trial {trial}: the guardian went with lc-cli; the cgroup: {report}"
        );
        // Gone by the guardian's SIGKILL (it goes on after SIGTERM),
        // --kill-after on.
        let a_end = gone_at(a_pid, Duration::from_secs(10)).unwrap_or_else(|| {
            panic!(
                "trial {trial}: the holder's command lives on:\n{}",
                tl.text()
            )
        });
        let termed = tl.term_of("a").unwrap_or_else(|| {
            panic!(
                "trial {trial}: the holder's command was never sent SIGTERM:\n{}",
                tl.text()
            )
        });
        assert!(
            termed < a_end && tl.end_of("a").is_none(),
            "trial {trial}: not a SIGTERM then a SIGKILL:\n{}",
            tl.text()
        );
        let (b_code, b_err) = common::finish_within(LIMIT, b);
        assert_eq!(b_code, Some(0), "trial {trial}: {b_err}");
        let (b_start, _) = tl.start_of("b").unwrap();
        assert!(
            a_end < b_start,
            "trial {trial}: the waiter started {:.1} ms before the holder's command was gone:\n{}",
            (a_end - b_start) as f64 / 1e6,
            tl.text()
        );
        eprintln!(
            "trial {trial}: SIGTERM {:.0} ms after lc-cli's OOM kill was seen, command gone {:.0} ms after that, \
             waiter {:.0} ms after that (the allocating process: {hog})",
            (termed - killed_at) as f64 / 1e6,
            (a_end - termed) as f64 / 1e6,
            (b_start - a_end) as f64 / 1e6
        );
        assert!(
            wait_until(Duration::from_secs(10), || !alive(guardian)),
            "trial {trial}: the guardian stays after its group is gone"
        );
    }
}

/// A guardian is started by lc-cli only: the binary run by hand under the
/// guardian's name (argv[0] `lc-cli-guardian`), whatever the arguments, is
/// refused in one line (exit 2), not taken for a watch (which stops
/// process groups) nor for lc-cli. Arguments that harm nothing if taken
/// for lc-cli's own; no pid a watch could mean.
#[test]
fn a_guardian_line_lc_cli_did_not_write_is_refused() {
    use std::os::unix::process::CommandExt;
    for args in [
        &[][..],
        &["resume"],
        &["resume", "x", "-", "-", "-", "0", "-"],
        &["watch"],
        &["watch", "x", "-", "y"],
        &["--help"],
        &["ping", "--server", "127.0.0.1:1"],
    ] {
        let child = Command::new(common::BIN)
            .arg0("lc-cli-guardian")
            .args(args)
            .env_remove("LC_SERVER")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (code, err) = common::finish_within(Duration::from_secs(10), child);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

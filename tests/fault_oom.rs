//! lc-cli killed by the kernel's OOM killer, a real one: a memory cgroup
//! (v1) with a limit, lc-cli the victim in it (oom_score_adj 1000, every
//! other process 0), and a process that allocates until the kernel kills
//! lc-cli. The
//! kernel then also kills every process sharing lc-cli's memory; the
//! guardian, which starts in that memory, has left it by an exec once the
//! command ran 0.1 s (src/guardian/watch.rs), so it lives on and stops the
//! command (which ignores SIGTERM) with SIGKILL before the built-in
//! server's reclaim grace hands the key to the waiter: the waiter's command
//! starts after the holder's has gone, every trial.

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

/// Allocates (and touches) 64 KiB at a time, at most 1 GiB, until `pid`
/// is dead, then exits. The OOM killer's victim is whichever process of
/// the cgroup scores highest: lc-cli at 1000 scores its size plus the
/// cgroup's whole limit, more than this one can ever hold. Small steps, so
/// that what lc-cli's death frees is room enough for the last one (should
/// the kernel still kill again, this one is then the largest).
fn hog(cgroup: &MemoryCgroup, pid: i32) -> Child {
    let program = format!(
        "import os\n\
         chunks = []\n\
         def dead():\n\
         \x20   try:\n\
         \x20       stat = open('/proc/{pid}/stat').read()\n\
         \x20   except OSError:\n\
         \x20       return True\n\
         \x20   return stat.rsplit(') ', 1)[-1][:1] in ('Z', 'X')\n\
         for _ in range(16384):\n\
         \x20   if dead():\n\
         \x20       break\n\
         \x20   chunks.append(os.urandom(1) * (1 << 16))\n\
         print(len(chunks))\n"
    );
    cgroup
        .run(0, &["python3", "-c", &program])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python3")
}

/// Allocating processes started in `cgroup` one after another (at most
/// three, should one end without the OOM kill) until lc-cli `a` is dead:
/// its status, and the processes.
fn oom_kill(cgroup: &MemoryCgroup, a: &mut Guard) -> (Option<i32>, Vec<Child>) {
    let mut hogs: Vec<Child> = Vec::new();
    let start = std::time::Instant::now();
    while start.elapsed() < LIMIT {
        if let Ok(Some(status)) = a.0.try_wait() {
            use std::os::unix::process::ExitStatusExt;
            return (status.code().or(status.signal().map(|s| 128 + s)), hogs);
        }
        let last_ended = hogs
            .last_mut()
            .is_none_or(|h| matches!(h.try_wait(), Ok(Some(_))));
        if last_ended && hogs.len() < 3 {
            hogs.push(hog(cgroup, a.pid()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    (None, hogs)
}

/// The guardian of lc-cli `parent` (its comm, its parent), and its
/// command line.
fn guardian_of(parent: i32) -> Option<(i32, Vec<u8>)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let comm = std::fs::read(format!("/proc/{pid}/comm")).unwrap_or_default();
        let ppid = common::cli::proc_field(pid, 4);
        if comm == b"lc-cli-guardian\n" && ppid == Some(parent as i64) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            return Some((pid, cmdline));
        }
    }
    None
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
        let holder = tl.holder("a", OnTerm::Ignore);
        // The command gives its oom_score_adj back (root may): only lc-cli
        // and its guardian are likely victims, lc-cli the larger.
        let script = format!("echo 0 > /proc/self/oom_score_adj; {holder}");
        let a = Guard(
            cgroup
                .run(
                    1000,
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
        let b = lc_at(&url, &["lock", &key, "-c", &b_script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Past the guardian's exec: its own memory, its own command line.
        let mut guardian = None;
        assert!(
            wait_until(Duration::from_secs(5), || {
                guardian = guardian_of(a.pid());
                guardian
                    .as_ref()
                    .is_some_and(|(_, c)| c.starts_with(b"lc-cli-guardian\0resume\0"))
            }),
            "trial {trial}: no guardian of its own: {guardian:?}"
        );
        let (guardian, _) = guardian.unwrap();
        // Out of its memory, the guardian is lc-cli's size no more but
        // still of its score; as any process of 0 it is not the victim.
        // (Were it still in lc-cli's memory, this would set lc-cli's too.)
        std::fs::write(format!("/proc/{guardian}/oom_score_adj"), "0").unwrap();
        let mut a = a;
        let (a_code, hogs) = oom_kill(&cgroup, &mut a);
        let killed_at = now_ns();
        let report = cgroup.report();
        let hogs: Vec<String> = hogs
            .into_iter()
            .map(|mut hog| {
                let _ = hog.kill();
                let out = hog.wait_with_output().unwrap();
                format!(
                    "{:?} {} {}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout).trim(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            })
            .collect();
        assert_eq!(
            a_code,
            Some(128 + libc::SIGKILL),
            "trial {trial}: lc-cli was not OOM-killed; the allocating processes: {hogs:?}; the cgroup: {report}"
        );
        assert!(
            alive(guardian),
            "trial {trial}: the guardian went with lc-cli"
        );
        // Gone by the guardian's SIGKILL (it ignores SIGTERM), --kill-after on.
        let a_end = gone_at(a_pid, Duration::from_secs(10)).unwrap_or_else(|| {
            panic!(
                "trial {trial}: the holder's command lives on:\n{}",
                tl.text()
            )
        });
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
            "trial {trial}: command gone {:.0} ms after the OOM kill, waiter {:.0} ms after that",
            (a_end - killed_at) as f64 / 1e6,
            (b_start - a_end) as f64 / 1e6
        );
        assert!(
            wait_until(Duration::from_secs(10), || !alive(guardian)),
            "trial {trial}: the guardian stays after its group is gone"
        );
    }
}

/// The resumed guardian's command line is lc-cli's own: anything else
/// under that name is refused in one line, not taken for a watch.
#[test]
fn a_resume_line_lc_cli_did_not_write_is_refused() {
    use std::os::unix::process::CommandExt;
    for args in [
        &["resume"][..],
        &["resume", "1", "2", "3", "4", "2", "-"],
        &["resume", "x", "-", "-", "-", "0", "-"],
    ] {
        let out = Command::new(common::BIN)
            .arg0("lc-cli-guardian")
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("lc-cli-guardian: "), "{args:?}: {err}");
    }
}

//! lc-cli leaves nothing behind (issue 42, item 2): every process it starts
//! (the command, the guardian, any helper) is gone and reaped by lc-cli
//! itself by the time it exits. Under a parent that never reaps adopted
//! children (a child subreaper waiting only for each lc-cli's own pid),
//! anything that outlived an lc-cli, alive or a zombie, stays that
//! parent's child: after 100 `lc-cli lock k -- true` in a row, it has none.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const RUNS: usize = 100;
const LIMIT: Duration = Duration::from_secs(120);

/// Made a child subreaper, runs `sys.argv[2:]` `sys.argv[1]` times one
/// after another (stdin and stdout on /dev/null, stderr to a file), waiting
/// for that pid only; prints `status N CODE` for a run that did not exit
/// 0, then one `child PID STATE COMM` line per child left, then kills and
/// reaps those (bounded), so that nothing outlives the test.
const SUBREAPER: &str = r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    sys.exit("prctl: errno %d" % ctypes.get_errno())
runs, argv = int(sys.argv[1]), sys.argv[2:]
null = os.open("/dev/null", os.O_RDWR)
err = os.open(os.environ["REAPED_STDERR"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
for n in range(runs):
    pid = os.posix_spawn(argv[0], argv, os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, null, 0),
                                       (os.POSIX_SPAWN_DUP2, null, 1),
                                       (os.POSIX_SPAWN_DUP2, err, 2)])
    _, status = os.waitpid(pid, 0)
    if status != 0:
        print("status", n, status, flush=True)
def children():
    me = os.getpid()
    found = []
    for task in os.listdir("/proc/%d/task" % me):
        with open("/proc/%d/task/%s/children" % (me, task)) as f:
            found += [int(p) for p in f.read().split()]
    return found
def describe(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return "%d gone" % pid
    comm = stat[stat.index("(") + 1:stat.rindex(")")]
    return "%d %s %s" % (pid, stat[stat.rindex(")") + 2], comm)
for pid in children():
    print("child", describe(pid), flush=True)
for _ in range(100):
    left = children()
    if not left:
        break
    for pid in left:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    time.sleep(0.05)
"#;

#[test]
fn a_hundred_locks_in_a_row_leave_no_process_behind() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let stderr = dir.path().join("stderr");
    let addr = server.addr.to_string();
    let helper = Command::new("python3")
        .arg("-c")
        .arg(SUBREAPER)
        .arg(RUNS.to_string())
        .args([BIN, "--server", &addr, "lock", "k", "--", "true"])
        .env("REAPED_STDERR", &stderr)
        .env_remove("LC_SERVER")
        .env_remove("LC_SOURCE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python3");
    let pid = helper.id() as i32;
    let _kill = common::cli::KillOnDrop(pid);
    let ok = wait_until(LIMIT, || common::cli::is_dead(pid));
    assert!(ok, "the {RUNS} runs did not end within {LIMIT:?}");
    let out = helper.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lc_err = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(
        out.status.success(),
        "the helper failed ({:?}): {}{text}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let failed: Vec<&str> = text.lines().filter(|l| l.starts_with("status ")).collect();
    assert!(
        failed.is_empty(),
        "runs that did not exit 0 (run, wait status): {failed:?}\nlc-cli's stderr:\n{lc_err}"
    );
    let left: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("child "))
        .collect();
    // How many of each kind (state and comm), then the first few.
    let mut kinds = std::collections::BTreeMap::new();
    for l in &left {
        let kind = l.split_once(' ').map_or(*l, |(_, k)| k);
        *kinds.entry(kind).or_insert(0) += 1;
    }
    assert!(
        left.is_empty(),
        "{} processes outlived the {RUNS} lc-cli that started them, by state and comm: \
         {kinds:?}; the first (pid, state, comm):\n{}",
        left.len(),
        left[..left.len().min(10)].join("\n")
    );
}

//! The guardian honours `--kill-after` on every backend (issue 42): when
//! lc-cli is SIGKILLed while its command runs, the guardian sends the
//! command's group SIGTERM at once and SIGKILL only after the grace
//! (`--kill-after 1s` here, the service's lease far longer), never both at
//! once. The command logs when its SIGTERM came and ignores it; its end is
//! seen from outside. Times are the command's own and the test's clock.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::etcd::Etcd;
use common::pg::PgServer;
use common::redis::RedisServer;
use common::timeline::{gone_at, OnTerm, Timeline};
use common::zk::Zk;
use common::{lc_at, wait_until, Serve};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const TRIALS: usize = 3;
const GRACE: Duration = Duration::from_secs(1);
const LIMIT: Duration = Duration::from_secs(30);

type Lc<'a> = &'a dyn Fn(&[&str]) -> Command;

/// The gaps (ms) between each trial's SIGTERM, as its command logged it,
/// and the command's end (SIGKILL), seen from here every 2 ms.
fn grace_after_a_kill(lc: Lc) -> Vec<f64> {
    let mut gaps = Vec::new();
    for trial in 0..TRIALS {
        let dir = tempfile::tempdir().unwrap();
        let tl = Timeline::new(dir.path());
        let key = format!("grace{trial}");
        let mut a: Child = lc(&[
            "lock",
            &key,
            "--kill-after",
            "1s",
            "-c",
            &tl.holder("a", OnTerm::LogAndGoOn),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start lc-cli");
        assert!(
            wait_until(LIMIT, || tl.start_of("a").is_some()),
            "trial {trial}: the holder never started:\n{}",
            tl.text()
        );
        let (_, pid) = tl.start_of("a").unwrap();
        kill(Pid::from_raw(a.id() as i32), Signal::SIGKILL).unwrap();
        let _ = a.wait();
        assert!(
            wait_until(Duration::from_secs(10), || tl.term_of("a").is_some()),
            "trial {trial}: no SIGTERM reached the command after lc-cli's SIGKILL:\n{}",
            tl.text()
        );
        let term = tl.term_of("a").unwrap();
        let end = gone_at(pid, Duration::from_secs(10)).unwrap_or_else(|| {
            panic!(
                "trial {trial}: the command outlived its grace by 9 s:\n{}",
                tl.text()
            )
        });
        let gap = (end - term) as f64 / 1e6;
        // The SIGTERM is logged after it came (the trap runs once the
        // command's `sleep` ends), the end seen up to 2 ms late: a SIGKILL
        // sent with the SIGTERM would show a gap of a few milliseconds.
        assert!(
            gap >= GRACE.as_secs_f64() * 1e3 * 0.8,
            "trial {trial}: SIGKILL {gap:.1} ms after the SIGTERM, not after the 1 s grace:\n{}",
            tl.text()
        );
        assert!(
            gap <= GRACE.as_secs_f64() * 1e3 + 2000.0,
            "trial {trial}: SIGKILL {gap:.1} ms after the SIGTERM:\n{}",
            tl.text()
        );
        gaps.push(gap);
    }
    eprintln!("gaps from SIGTERM to the end: {gaps:.1?} ms");
    gaps
}

#[test]
fn builtin_server_guardian_waits_the_grace() {
    let server = Serve::new().args(&["--reclaim-grace", "10s"]).start();
    grace_after_a_kill(&|args: &[&str]| server.lc(args));
}

#[test]
fn redis_guardian_waits_the_grace() {
    let redis = RedisServer::start();
    let url = format!("{}?ttl=10s", redis.url());
    grace_after_a_kill(&|args: &[&str]| lc_at(&url, args));
}

#[test]
fn zookeeper_guardian_waits_the_grace() {
    // A tick of 500 ms lets the server take a 10 s session.
    let zk = Zk::start_with_tick(500);
    grace_after_a_kill(&|args: &[&str]| zk.lc_session("/grace", "10s", args));
}

#[test]
fn etcd_guardian_waits_the_grace() {
    let etcd = Etcd::start();
    grace_after_a_kill(&|args: &[&str]| etcd.lc("?ttl=10s", args));
}

#[test]
fn postgres_guardian_waits_the_grace() {
    let pg = PgServer::start();
    grace_after_a_kill(&|args: &[&str]| pg.lc(args));
}

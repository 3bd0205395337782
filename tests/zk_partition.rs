//! A ZooKeeper holder cut off from the server (its TCP path frozen by a
//! proxy: no bytes, connections left open) while a waiter keeps a direct
//! path: the holder's command must have ended before ZooKeeper expires the
//! session and the waiter's command starts. Checked from the commands' own
//! logged times, over several trials and two session timeouts, with a
//! command that exits on SIGTERM and one that ignores it (the SIGKILL
//! deadline must not wait for `--kill-after`).

use crate::common;

use common::lc_at;
use common::partition::{trial, trials};
use common::proxy::Proxy;
use common::timeline::OnTerm;
use common::zk::Zk;

/// Three trials at once (each with its own path and proxy), two whose
/// command exits on SIGTERM and one whose command ignores it.
fn partitions(session: &str) {
    // tickTime 300 ms: ZooKeeper allows sessions of 0.6 s to 6 s.
    let zk = Zk::start_with_tick(300);
    let kinds = [OnTerm::LogAndExit, OnTerm::LogAndExit, OnTerm::Ignore];
    trials(&format!("session {session}"), &kinds, |n, kind| {
        let root = format!("/p{n}");
        let proxy = Proxy::start(zk.port);
        let through_proxy = format!("zk://{}{root}?session-timeout={session}", proxy.addr());
        trial(
            &proxy,
            kind,
            |script| {
                let mut cmd = lc_at(&through_proxy, &["--connect-timeout", "10s"]);
                cmd.args(["lock", "k", "-c", script]);
                cmd
            },
            |script| zk.lc_session(&root, session, &["lock", "k", "-c", script]),
            || zk.queue(&format!("{root}/k")).len() == 2,
        )
    });
}
#[test]
fn frozen_holder_stops_before_its_session_can_expire_4s() {
    partitions("4s");
}

#[test]
fn frozen_holder_stops_before_its_session_can_expire_6s() {
    partitions("6s");
}

//! A waiter killed with SIGKILL while in line costs the key at most its
//! session: once its dead node is at the head of the queue, the next waiter
//! gets the key when ZooKeeper expires that session, never later (no stuck
//! key). The delay is measured from the commands' own logged times.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::spans;
use common::timeline::now_ns;
use common::zk::Zk;
use common::*;

/// The dead waiter's session timeout.
const SESSION: Duration = Duration::from_secs(2);

#[test]
fn a_waiter_killed_at_the_head_delays_the_next_by_at_most_its_session() {
    let zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let session = format!("{}s", SESSION.as_secs());
    let mut delays = Vec::new();
    for i in 0..5 {
        let key = format!("k{i}");
        let dir = format!("/w/{key}");
        // A kept hold, so both waiters queue behind it.
        expect_status(&mut zk.lc("/w", &["lock", &key, "-q"]), 0);
        let (dead, next) = (format!("dead{i}"), format!("next{i}"));
        let mut kids = spans::Kids(Vec::new());
        let dead_script = spans::script(&log, &dead, 0.0);
        kids.0.push(
            zk.lc_session("/w", &session, &["lock", &key, "-c", &dead_script])
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        zk.wait_queue_len(&dir, 2);
        let next_script = spans::script(&log, &next, 0.1);
        kids.0.push(
            zk.lc("/w", &["lock", &key, "-c", &next_script])
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        zk.wait_queue_len(&dir, 3);
        kids.0[0].kill().unwrap();
        kids.0[0].wait().unwrap();
        let killed = now_ns();
        // The dead waiter's node is now the head of the line.
        expect_status(&mut zk.lc("/w", &["unlock", &key]), 0);
        let freed = now_ns();
        let mut next_kid = spans::Kids(vec![kids.0.remove(1)]);
        let codes = next_kid.wait_all(SESSION * 10);
        assert_eq!(codes, vec![Some(0)], "{next}: the key stayed stuck");
        let spans = spans::read(&log);
        assert!(
            !spans.iter().any(|s| s.tag == dead),
            "{dead} ran after SIGKILL"
        );
        let start = spans::by_tag(&spans, &next).start;
        assert!(start > freed, "{next} ran while the key was held");
        let delay = Duration::from_nanos((start - freed) as u64);
        assert!(
            delay <= SESSION + Duration::from_secs(2),
            "{next} waited {delay:?} after the unlock for a dead waiter with a {SESSION:?} session"
        );
        assert!(zk.queue(&dir).is_empty());
        delays.push(((start - freed) as f64 / 1e6, (start - killed) as f64 / 1e6));
    }
    for (i, (after_unlock, after_kill)) in delays.iter().enumerate() {
        eprintln!(
            "trial {i}: the next waiter started {after_unlock:.0} ms after the unlock ({after_kill:.0} ms after the SIGKILL; session {SESSION:?})"
        );
    }
}

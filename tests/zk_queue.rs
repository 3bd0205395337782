//! The queue's promises through the real binary: FIFO, mutual exclusion,
//! and one release waking exactly one waiter.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::spans::Kids;
use common::zk::Zk;
use common::*;

/// 8 lc-cli processes, each started once the previous one's node exists,
/// run their commands in that order.
#[test]
fn fifo_across_eight_processes() {
    let zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let order = tmp.path().join("order");
    // A detached hold keeps everyone waiting until all are queued.
    expect_status(&mut zk.lc("/f", &["lock", "q"]), 0);
    let mut kids = Kids(Vec::new());
    for i in 0..8 {
        let script = format!("echo {i} >> '{}'", order.display());
        kids.0.push(
            zk.lc("/f", &["lock", "q", "-c", &script])
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        assert!(
            wait_until(Duration::from_secs(20), || zk.queue("/f/q").len() == i + 2),
            "waiter {i} did not queue"
        );
    }
    expect_status(&mut zk.lc("/f", &["unlock", "q"]), 0);
    kids.all_succeed(Duration::from_secs(60));
    let got = std::fs::read_to_string(&order).unwrap();
    let expected: String = (0..8).map(|i| format!("{i}\n")).collect();
    assert_eq!(got, expected);
    assert!(zk.queue("/f/q").is_empty());
}

/// 10 processes read-increment-write a counter file under the lock.
#[test]
fn mutual_exclusion_counter() {
    let zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let counter = tmp.path().join("counter");
    std::fs::write(&counter, "0\n").unwrap();
    let script = format!(
        "n=$(cat '{c}'); sleep 0.05; echo $((n + 1)) > '{c}'",
        c = counter.display()
    );
    let mut kids = Kids(Vec::new());
    for _ in 0..10 {
        kids.0.push(
            zk.lc("/m", &["lock", "counter", "-c", &script])
                .spawn()
                .unwrap(),
        );
    }
    kids.all_succeed(Duration::from_secs(90));
    assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "10");
    assert!(zk.queue("/m/counter").is_empty());
}

fn fired(m: &std::collections::HashMap<String, f64>) -> f64 {
    [
        "zk_sum_node_deleted_watch_count",
        "zk_sum_node_changed_watch_count",
        "zk_sum_node_created_watch_count",
        "zk_sum_node_children_watch_count",
    ]
    .iter()
    .map(|k| {
        m.get(*k)
            .copied()
            .unwrap_or_else(|| panic!("mntr has no {k}"))
    })
    .sum()
}

/// With 8 waiters queued, a release fires exactly one watch (the next
/// waiter's watch on its predecessor), and only that waiter gets the key.
#[test]
fn one_release_wakes_exactly_one_waiter() {
    let zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    expect_status(&mut zk.lc("/h", &["lock", "k"]), 0);
    let mut kids = Kids(Vec::new());
    for i in 0..8 {
        let mark = tmp.path().join(format!("ran{i}"));
        let script = format!("touch '{}'; sleep 30", mark.display());
        kids.0
            .push(zk.lc("/h", &["lock", "k", "-c", &script]).spawn().unwrap());
        assert!(wait_until(Duration::from_secs(20), || zk
            .queue("/h/k")
            .len()
            == i + 2));
    }
    // Each waiter watches its predecessor and its own node; none watches
    // the lock node itself.
    let by_path = zk.four("wchp");
    assert!(
        !by_path.lines().any(|l| l.trim() == "/h/k"),
        "someone watches the lock node:\n{by_path}"
    );
    let queue = zk.queue("/h/k");
    let holder = format!("/h/k/{}", queue[0]);
    let watchers_of_holder = watchers(&by_path, &holder);
    assert_eq!(watchers_of_holder, 1, "watches on the holder:\n{by_path}");
    for node in &queue[1..7] {
        // Its own session, and its successor.
        assert_eq!(
            watchers(&by_path, &format!("/h/k/{node}")),
            2,
            "{node}:\n{by_path}"
        );
    }

    let before = zk.mntr();
    expect_status(&mut zk.lc("/h", &["unlock", "k"]), 0);
    assert!(wait_until(Duration::from_secs(20), || tmp
        .path()
        .join("ran0")
        .exists()));
    // The one watch that woke waiter 0 has fired by now; a herd would fire
    // the others within moments of it.
    let mut seen = 1.0;
    assert!(
        holds_for(QUIET, || {
            seen = fired(&zk.mntr()) - fired(&before);
            seen == 1.0
        }),
        "watches fired by one release: {seen} (1 means no herd)"
    );
    for i in 1..8 {
        assert!(
            !tmp.path().join(format!("ran{i}")).exists(),
            "waiter {i} ran too"
        );
    }
    assert_eq!(zk.queue("/h/k").len(), 8, "the other 7 keep their places");
}

/// How many sessions watch `path` in `wchp` output (path line, then one
/// indented line per session).
fn watchers(wchp: &str, path: &str) -> usize {
    let mut lines = wchp.lines().skip_while(|l| l.trim() != path);
    if lines.next().is_none() {
        return 0;
    }
    lines
        .take_while(|l| l.starts_with(|c: char| c.is_whitespace()))
        .count()
}

/// The backend reports the number of nodes ahead while waiting, and a
/// cancelled wait leaves the queue before returning.
#[test]
fn progress_reports_the_place_and_cancel_withdraws() {
    use lc_cli::backend::{self, Acquired, BackendConfig, LockRequest, ServerUrl, WaitProgress};
    use std::sync::{Arc, Mutex};
    use tokio_util::sync::CancellationToken;

    let zk = Zk::start();
    expect_status(&mut zk.lc("/p", &["lock", "k"]), 0);
    let mut kids = Kids(Vec::new());
    for i in 0..2 {
        kids.0
            .push(zk.lc("/p", &["lock", "k", "--", "true"]).spawn().unwrap());
        assert!(wait_until(Duration::from_secs(20), || zk
            .queue("/p/k")
            .len()
            == i + 2));
    }
    let config = BackendConfig {
        access: Default::default(),
        server: format!("zk://{}/p", zk.hosts())
            .parse::<ServerUrl>()
            .unwrap()
            .server,
        session_timeout: Duration::from_secs(2),
        ttl: Duration::from_secs(30),
        queue_timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(10),
        verbose: false,
    };
    let seen: Arc<Mutex<Vec<WaitProgress>>> = Arc::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async {
        let b = backend::connect(&config).await.unwrap();
        let cancel = CancellationToken::new();
        let request = LockRequest {
            key: "k".into(),
            mode: lc_cli::backend::LockMode::Exclusive,
            source: "test".into(),
            nonblock: false,
            detached: false,
            expire: None,
            extras: Default::default(),
        };
        let progress = {
            let seen = seen.clone();
            let cancel = cancel.clone();
            move |p: WaitProgress| {
                seen.lock().unwrap().push(p);
                cancel.cancel();
            }
        };
        let r = b.acquire(&request, cancel, &progress).await;
        b.close().await;
        b.close().await; // safe twice
        r
    });
    assert!(matches!(result, Ok(Acquired::Cancelled)));
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        // Two waiters ahead; the holder is not counted (as on Redis).
        [WaitProgress { ahead: Some(2) }]
    );
    assert_eq!(zk.queue("/p/k").len(), 3, "the cancelled node is gone");
}

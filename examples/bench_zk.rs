//! Service work per handoff on the ZooKeeper backend, with 1, 16 and 64
//! waiters queued, against one private ZooKeeper in one run.
//!
//!     cargo run --release --example bench_zk [-- HANDOFFS]
//!
//! For each queue length N: a holder and N waiters (one session each, in
//! this process) queue on one key. Each measured handoff first tops the
//! queue up to N waiters, then takes `mntr` before and after the holder's
//! release (delete + close session) until the next waiter's acquire
//! returns: requests the server received (`zk_packets_received`, less the
//! `mntr` itself), watches it fired (the `zk_sum_node_*_watch_count`
//! summaries), and the wall time of the handoff. The seed's claim: the
//! figures do not grow with N. For contrast, the same run measures the naive
//! recipe the seed warns about (every waiter watches the lock node's
//! children), written directly on zookeeper-client.

// A part of the test suite's helper serves the benchmark: the rest is unused here.
#[allow(dead_code)]
#[path = "../tests/common/zk.rs"]
mod zk;

/// `zk.rs` can also build lc-cli commands; the benchmark does not.
pub const BIN: &str = "lc-cli";

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lc_cli::backend::{
    self, Acquired, Backend, BackendConfig, HeldLock, LockMode, LockRequest, ServerUrl,
    WaitProgress,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

type Holder = (Box<dyn Backend>, Box<dyn HeldLock>);

fn config(zk: &zk::Zk, root: &str) -> BackendConfig {
    BackendConfig {
        access: Default::default(),
        server: format!("zk://{}{root}", zk.hosts())
            .parse::<ServerUrl>()
            .unwrap()
            .server,
        // Long sessions: pings (every third of it) stay out of the counts.
        session_timeout: Duration::from_secs(40),
        ttl: Duration::from_secs(30),
        queue_timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(10),
        verbose: false,
    }
}

fn request_in(mode: LockMode) -> LockRequest {
    LockRequest {
        key: "bench".into(),
        mode,
        source: "bench".into(),
        nonblock: false,
        detached: false,
        expire: None,
        extras: Default::default(),
    }
}

/// Connects, queues, and returns once its node is in the queue; the
/// handle resolves when it holds the key.
async fn queue_one(config: &BackendConfig) -> JoinHandle<Holder> {
    queue_in(config, LockMode::Exclusive).await
}

async fn queue_in(config: &BackendConfig, mode: LockMode) -> JoinHandle<Holder> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let config = config.clone();
    let handle = tokio::spawn(async move {
        let b = backend::connect(&config).await.expect("connect");
        let tx = Mutex::new(Some(tx));
        let progress = move |_: WaitProgress| {
            if let Some(tx) = tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
        };
        match b
            .acquire(&request_in(mode), CancellationToken::new(), &progress)
            .await
        {
            Ok(Acquired::Held(h)) => (b, h),
            Ok(_) => panic!("not held"),
            Err(e) => panic!("acquire: {e}"),
        }
    });
    rx.await.expect("queued");
    handle
}

fn fired(m: &HashMap<String, f64>) -> f64 {
    [
        "zk_sum_node_deleted_watch_count",
        "zk_sum_node_changed_watch_count",
        "zk_sum_node_created_watch_count",
        "zk_sum_node_children_watch_count",
    ]
    .iter()
    .map(|k| m[*k])
    .sum()
}

struct Figures {
    requests: f64,
    notifications: f64,
    latency_median: Duration,
    latency_p90: Duration,
}

/// The measured handoffs so far: the server's work (from `mntr` before
/// and after each) and their wall times.
#[derive(Default)]
struct Tally {
    requests: f64,
    notifications: f64,
    latencies: Vec<Duration>,
}

impl Tally {
    fn add(&mut self, before: &HashMap<String, f64>, after: &HashMap<String, f64>, took: Duration) {
        // The second mntr is itself one received packet.
        self.requests += after["zk_packets_received"] - before["zk_packets_received"] - 1.0;
        self.notifications += fired(after) - fired(before);
        self.latencies.push(took);
    }

    /// Per handoff: the means of the work, the median and p90 time.
    fn figures(mut self) -> Figures {
        let handoffs = self.latencies.len();
        self.latencies.sort();
        Figures {
            requests: self.requests / handoffs as f64,
            notifications: self.notifications / handoffs as f64,
            latency_median: self.latencies[handoffs / 2],
            latency_p90: self.latencies[handoffs * 9 / 10],
        }
    }
}

/// Releases the key and closes the holder's session.
async fn release(mut holder: Holder) {
    holder.1.release().await.expect("release");
    holder.0.close().await;
}

/// Releases each waiter left in the queue once it is granted.
async fn drain(queue: VecDeque<JoinHandle<Holder>>) {
    for next in queue {
        release(next.await.unwrap()).await;
    }
}

async fn run(zk: &zk::Zk, waiters: usize, handoffs: usize) -> Figures {
    let config = config(zk, &format!("/bench{waiters}"));
    let mut holder = queue_one(&config).await.await.unwrap();
    let mut queue: VecDeque<JoinHandle<Holder>> = VecDeque::new();
    let mut tally = Tally::default();
    for _ in 0..handoffs {
        while queue.len() < waiters {
            queue.push_back(queue_one(&config).await);
        }
        // Let the newest waiter's watch registration land before counting.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let before = zk.mntr();
        let t = Instant::now();
        release(holder).await;
        holder = queue.pop_front().unwrap().await.unwrap();
        let took = t.elapsed();
        tally.add(&before, &zk.mntr(), took);
    }
    release(holder).await;
    drain(queue).await;
    tally.figures()
}

/// The shapes of issue 14: `--limit 4` (4 holders, each release grants the
/// next waiter) and `--shared` (a reader holds; the waiters alternate
/// writer, reader, writer...; each release grants the next one).
#[derive(Clone, Copy)]
enum Shape {
    Limit4,
    Shared,
}

async fn run_shape(zk: &zk::Zk, waiters: usize, handoffs: usize, shape: Shape) -> Figures {
    let name = match shape {
        Shape::Limit4 => "limit",
        Shape::Shared => "shared",
    };
    let config = config(zk, &format!("/bench-{name}{waiters}"));
    let mut next_mode = {
        let mut i = 0usize;
        move || {
            i += 1;
            match shape {
                Shape::Limit4 => LockMode::limit(4),
                Shape::Shared if !i.is_multiple_of(2) => LockMode::Shared,
                Shape::Shared => LockMode::Exclusive,
            }
        }
    };
    let slots = match shape {
        Shape::Limit4 => 4,
        Shape::Shared => 1,
    };
    let mut holders: VecDeque<Holder> = VecDeque::new();
    for _ in 0..slots {
        holders.push_back(queue_in(&config, next_mode()).await.await.unwrap());
    }
    let mut queue: VecDeque<JoinHandle<Holder>> = VecDeque::new();
    let mut tally = Tally::default();
    // Every cycle counts one waiter joining and one grant, and waits for
    // the work they trigger to settle: with --limit, the grant lets the
    // next acquirer take the mutex and create its lease, which with one
    // waiter happens when the next one joins instead.
    while queue.len() + 1 < waiters {
        queue.push_back(queue_in(&config, next_mode()).await);
    }
    for _ in 0..handoffs {
        let before = zk.mntr();
        while queue.len() < waiters {
            queue.push_back(queue_in(&config, next_mode()).await);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t = Instant::now();
        release(holders.pop_front().unwrap()).await;
        holders.push_back(queue.pop_front().unwrap().await.unwrap());
        let took = t.elapsed();
        tokio::time::sleep(Duration::from_millis(20)).await;
        tally.add(&before, &zk.mntr(), took);
    }
    for h in holders {
        release(h).await;
    }
    drain(queue).await;
    tally.figures()
}

/// The naive recipe: same nodes, but every waiter lists and watches the
/// lock node's children, so every change wakes every waiter.
mod herd {
    use super::*;
    use zookeeper_client as zkc;

    pub(crate) struct Held {
        client: zkc::Client,
        node: String,
    }

    impl Held {
        pub(crate) async fn release(self) {
            self.client.delete(&self.node, None).await.expect("delete");
            let mut state = self.client.state_watcher();
            drop(self.client);
            while !state.state().is_terminated() {
                state.changed().await;
            }
        }
    }

    pub(crate) async fn queue_one(hosts: &str, dir: &str) -> JoinHandle<Held> {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (hosts, dir) = (hosts.to_string(), dir.to_string());
        let handle = tokio::spawn(async move {
            let client = zkc::Client::connector()
                .with_session_timeout(Duration::from_secs(40))
                .connect(&hosts)
                .await
                .expect("connect");
            let container = zkc::CreateMode::Container.with_acls(zkc::Acls::anyone_all());
            client.mkdir(&dir, &container).await.expect("mkdir");
            let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
            let (_, seq) = client
                .create(
                    &prefix,
                    b"",
                    &zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all()),
                )
                .await
                .expect("create");
            let node = format!("{prefix}{seq}");
            let mut tx = Some(tx);
            loop {
                let (children, watch) = client.list_and_watch_children(&dir).await.expect("list");
                if let Some(tx) = tx.take() {
                    let _ = tx.send(());
                }
                let first = children
                    .iter()
                    .min_by_key(|c| c[c.rfind("lock-").unwrap() + 5..].to_string())
                    .map(|c| format!("{dir}/{c}"));
                if first.as_deref() == Some(node.as_str()) {
                    return Held { client, node };
                }
                watch.changed().await;
            }
        });
        rx.await.expect("queued");
        handle
    }
}

async fn run_herd(zk: &zk::Zk, waiters: usize, handoffs: usize) -> Figures {
    let dir = format!("/herd{waiters}/bench");
    let hosts = zk.hosts();
    let mut holder = herd::queue_one(&hosts, &dir).await.await.unwrap();
    let mut queue: VecDeque<JoinHandle<herd::Held>> = VecDeque::new();
    let mut tally = Tally::default();
    for _ in 0..handoffs {
        while queue.len() < waiters {
            queue.push_back(herd::queue_one(&hosts, &dir).await);
        }
        // Adding a waiter wakes the others too: let that settle first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = zk.mntr();
        let t = Instant::now();
        holder.release().await;
        holder = queue.pop_front().unwrap().await.unwrap();
        let took = t.elapsed();
        // The other waiters' re-lists land after the winner's: wait for them.
        tokio::time::sleep(Duration::from_millis(100)).await;
        tally.add(&before, &zk.mntr(), took);
    }
    holder.release().await;
    while let Some(next) = queue.pop_front() {
        next.await.unwrap().release().await;
    }
    tally.figures()
}

fn print_row(waiters: usize, f: &Figures, base: &Option<Figures>) {
    let ratio = base
        .as_ref()
        .map(|b| f.requests / b.requests)
        .unwrap_or(1.0);
    println!(
        "{waiters:>7} {:>14.2} {:>14.2} {:>10.2}ms {:>10.2}ms {:>8.3}x",
        f.requests,
        f.notifications,
        f.latency_median.as_secs_f64() * 1e3,
        f.latency_p90.as_secs_f64() * 1e3,
        ratio
    );
}

fn header(title: &str) {
    println!("{title}");
    println!(
        "{:>7} {:>14} {:>14} {:>12} {:>12} {:>9}",
        "waiters", "requests/hand", "watches/hand", "median", "p90", "vs 1"
    );
}

fn main() {
    let handoffs: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("HANDOFFS is a number"))
        .unwrap_or(50);
    let zk = zk::Zk::start_with_tick(2000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Warm up the JIT and the connection paths.
        run(&zk, 4, 20).await;
        header("lc-cli (each waiter watches its predecessor)");
        let mut base: Option<Figures> = None;
        for waiters in [1, 16, 64] {
            let f = run(&zk, waiters, handoffs).await;
            print_row(waiters, &f, &base);
            base.get_or_insert(f);
        }
        for (shape, title) in [
            (Shape::Limit4, "--limit 4 (Curator's semaphore: 4 holders, one grant per release; per cycle: one waiter joins, one grant)"),
            (Shape::Shared, "--shared (a reader holds; waiters alternate writer, reader; per cycle: one waiter joins, one grant)"),
        ] {
            header(title);
            let mut base: Option<Figures> = None;
            for waiters in [1, 16, 64] {
                let f = run_shape(&zk, waiters, handoffs, shape).await;
                print_row(waiters, &f, &base);
                base.get_or_insert(f);
            }
        }
        header("naive baseline (every waiter watches the lock node)");
        let mut base: Option<Figures> = None;
        for waiters in [1, 16, 64] {
            let f = run_herd(&zk, waiters, handoffs.min(20)).await;
            print_row(waiters, &f, &base);
            base.get_or_insert(f);
        }
    });
}

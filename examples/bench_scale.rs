//! The built-in server at scale (issue 24): memory per held key with a
//! million held keys, memory per queued waiter, a restart with a million
//! holds in its log, and `lc-cli keys --json` of a million keys.
//!
//!     cargo build --release && cargo run --release --example bench_scale
//!     ... -- --before OLD/lc-cli   # the same parts for another build too, interleaved
//!     ... -- --keys 100000 --only held|restart|keys|waiters
//!
//! `keys` also times TryLocks of a held key on other connections during one
//! more listing (every 5 ms: the median and longest wait for an answer),
//! to show whether the one-thread server serves others while it lists.
//!
//! Each figure against a baseline measured in the same run: the server's
//! RSS idle (and the bare bytes of the key names), its RSS before the
//! waiters came, a bare read of the log file, a `cat` of a file as large
//! as the listing. The server binary is `lc-cli` beside this example's
//! directory (`target/release/`), or those given with `--before`/`--after`.

mod bench_common;

use bench_common::{connect, frame, median, raise_fd_limit, rss, Proc};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use lc_cli::mode::LockMode;
use lc_cli::wal::{file, Held};

const SOURCE: &[u8] = b"bench-host";

struct Args {
    /// Holds in the restarted log.
    keys: usize,
    /// Holds taken live (by Lock requests: slower, about 4,000 a second
    /// on a loaded machine).
    held_keys: usize,
    waiters: usize,
    only: Option<String>,
    bins: Vec<(String, PathBuf)>,
    dir: PathBuf,
}

fn main() {
    let args = parse_args();
    raise_fd_limit(u64::MAX);
    std::fs::create_dir_all(&args.dir).unwrap();
    println!(
        "bench_scale: {} held keys, {} waiters; builds: {}; load average {}",
        args.keys,
        args.waiters,
        args.bins
            .iter()
            .map(|(l, p)| format!("{l} = {}", p.display()))
            .collect::<Vec<_>>()
            .join(", "),
        load()
    );
    let part = |name: &str| args.only.as_deref().is_none_or(|o| o == name);
    if part("waiters") {
        for (label, bin) in &args.bins {
            waiters(label, bin, args.waiters);
        }
    }
    if part("held") || part("keys") {
        for (label, bin) in &args.bins {
            held(label, bin, &args, part("keys"));
        }
    }
    if part("restart") {
        let log = args.dir.join("million.wal");
        write_log(&log, args.keys);
        for round in 0..2 {
            for (label, bin) in &args.bins {
                restart(label, bin, &log, &args.dir, args.keys, round);
            }
        }
        let _ = std::fs::remove_file(&log);
    }
    println!("load average at the end: {}", load());
}

fn parse_args() -> Args {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        argv.iter()
            .position(|a| a == name)
            .and_then(|i| argv.get(i + 1).cloned())
    };
    let here = std::env::current_exe().unwrap();
    // target/release/examples/bench_scale -> target/release/lc-cli
    let built = here.parent().unwrap().parent().unwrap().join("lc-cli");
    let mut bins = Vec::new();
    if let Some(b) = value("--before") {
        bins.push(("before".to_string(), PathBuf::from(b)));
    }
    let after = value("--after").map_or(built, PathBuf::from);
    bins.push(("after".to_string(), after));
    for (_, b) in &bins {
        assert!(
            b.exists(),
            "{} is missing: cargo build --release",
            b.display()
        );
    }
    Args {
        keys: value("--keys").map_or(1_000_000, |v| v.parse().unwrap()),
        held_keys: value("--held-keys")
            .or_else(|| value("--keys"))
            .map_or(1_000_000, |v| v.parse().unwrap()),
        waiters: value("--waiters").map_or(10_000, |v| v.parse().unwrap()),
        only: value("--only"),
        bins,
        dir: here.parent().unwrap().join("bench-scale"),
    }
}

/// CPU time (user + system) a running process has used, seconds: on a
/// loaded machine a better measure of the work than the wall time.
fn cpu_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY: sysconf takes an integer and reads no memory of ours.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// CPU time (user + system) of every child waited for so far, seconds.
fn children_cpu() -> f64 {
    // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage that the call fills.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn serve(bin: &Path, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .args(extra)
        .env_remove("DATA_PATH")
        .stderr(Stdio::null());
    Proc::start(cmd)
}

/// Closed with a reset, so a million connections leave no TIME_WAIT behind.
fn no_linger(s: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `l` is a live linger of the size passed, read during the call only.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn round_trip(addr: SocketAddr, request: &[u8]) -> u8 {
    let mut s = connect(addr);
    no_linger(&s);
    s.write_all(request).unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).expect("answer");
    b[0]
}

fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}/{i:07}")
}

/// Takes `n` kept holds (Lock, then the connection ends) on 16 threads.
fn hold_keys(addr: SocketAddr, prefix: &str, n: usize) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..16 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                let k = key(prefix, i);
                let got = round_trip(addr, &frame(1, k.as_bytes(), Some(SOURCE)));
                assert_eq!(got, b'+', "lock {k}");
            });
        }
    });
}

/// RSS once it has stopped growing.
fn settled_rss(pid: u32) -> u64 {
    let mut last = 0;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(200));
        let now = rss(pid);
        if now == last {
            break;
        }
        last = now;
    }
    rss(pid)
}

/// Held keys: RSS growth per key, against the server idle; then (`keys`)
/// `lc-cli keys --json` of them all against a `cat` of as many bytes.
fn held(label: &str, bin: &Path, args: &Args, keys: bool) {
    let n = args.held_keys;
    let server = serve(bin, &[]);
    // A few holds and releases first, so the runtime and allocator are warm.
    hold_keys(server.addr, "warm", 1000);
    for i in 0..1000 {
        round_trip(server.addr, &frame(2, key("warm", i).as_bytes(), None));
    }
    let idle = settled_rss(server.pid());
    let started = Instant::now();
    hold_keys(server.addr, "scale", n);
    let took = started.elapsed();
    let full = settled_rss(server.pid());
    let name_bytes = key("scale", 0).len();
    println!(
        "[{label}] held keys: {n} in {took:.1?} ({:.0}/s); RSS {:.1} MiB idle -> {:.1} MiB: {:.0} bytes per held key (key name {name_bytes} bytes, source {} bytes shared by all)",
        n as f64 / took.as_secs_f64(),
        idle as f64 / 1048576.0,
        full as f64 / 1048576.0,
        (full.saturating_sub(idle)) as f64 / n as f64,
        SOURCE.len()
    );
    if keys {
        listing(label, bin, server.addr, server.pid(), &args.dir, n);
    }
}

/// `lc-cli keys --json` to /dev/null and to a file, 3 times each, against
/// `cat` of the file it wrote (to /dev/null and to a file).
fn listing(label: &str, bin: &Path, addr: SocketAddr, pid: u32, dir: &Path, n: usize) {
    let out = dir.join(format!("keys-{label}.json"));
    let copy = dir.join("cat-copy.json");
    let server = format!("lc://{addr}");
    // The listing must come within the connect timeout (2 s by default):
    // given a minute here, so a slower build is timed rather than cut off.
    let keys = |to: Stdio| {
        let cpu = children_cpu();
        let t = Instant::now();
        let status = Command::new(bin)
            .args([
                "--server",
                &server,
                "--connect-timeout",
                "60s",
                "keys",
                "--json",
            ])
            .stdout(to)
            .status()
            .unwrap();
        assert!(status.success(), "keys --json");
        (t.elapsed(), children_cpu() - cpu)
    };
    let cat = |to: Stdio| {
        let t = Instant::now();
        let status = Command::new("cat").arg(&out).stdout(to).status().unwrap();
        assert!(status.success());
        t.elapsed()
    };
    let (mut null, mut file, mut cat_null, mut cat_file) = (vec![], vec![], vec![], vec![]);
    let (mut cpu_null, mut cpu_file) = (vec![], vec![]);
    let server_cpu = cpu_of(pid);
    for _ in 0..3 {
        let (t, c) = keys(File::create(&out).unwrap().into());
        file.push(t.as_secs_f64());
        cpu_file.push(c);
        let (t, c) = keys(Stdio::null());
        null.push(t.as_secs_f64());
        cpu_null.push(c);
        cat_null.push(cat(Stdio::null()).as_secs_f64());
        cat_file.push(cat(File::create(&copy).unwrap().into()).as_secs_f64());
    }
    // Another client meanwhile: a TryLock of a held key every 5 ms during
    // one more listing (to /dev/null), its longest wait for the answer.
    let probing = std::sync::atomic::AtomicBool::new(true);
    let held = key("scale", 0);
    let (waits, listed) = std::thread::scope(|s| {
        let probe = s.spawn(|| {
            let mut waits = Vec::new();
            while probing.load(Ordering::Relaxed) {
                let t = Instant::now();
                assert_eq!(
                    round_trip(addr, &frame(5, held.as_bytes(), Some(b"probe"))),
                    b'#'
                );
                waits.push(t.elapsed().as_secs_f64());
                std::thread::sleep(Duration::from_millis(5));
            }
            waits
        });
        let (listed, _) = keys(Stdio::null());
        probing.store(false, Ordering::Relaxed);
        (probe.join().unwrap(), listed)
    });
    let mut sorted = waits.clone();
    println!(
        "[{label}] during one more listing ({:.2} s): {} TryLocks of a held key on other connections, answered within {:.1} ms (median) / {:.1} ms (longest)",
        listed.as_secs_f64(),
        waits.len(),
        median(&mut sorted) * 1e3,
        waits.iter().cloned().fold(0.0, f64::max) * 1e3
    );
    let size = std::fs::metadata(&out).unwrap().len();
    let lines = std::fs::read_to_string(&out).unwrap().lines().count();
    assert_eq!(lines, n, "one line per held key");
    let (null, file) = (median(&mut null), median(&mut file));
    let (cat_null, cat_file) = (median(&mut cat_null), median(&mut cat_file));
    let server_cpu = (cpu_of(pid) - server_cpu) / 6.0;
    println!(
        "[{label}] keys --json of {n} keys ({:.1} MB): {null:.2} s to /dev/null, {file:.2} s to a file (medians of 3; CPU: client {:.2} s / {:.2} s, server {server_cpu:.2} s per listing); cat of that file {:.3} s / {:.3} s ({:.0}x / {:.0}x)",
        size as f64 / 1e6,
        median(&mut cpu_null),
        median(&mut cpu_file),
        cat_null,
        cat_file,
        null / cat_null,
        file / cat_file
    );
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&copy);
}

/// A log of `n` kept holds, as a server that granted them would have
/// written it (this build's format: the header, one Grant each).
fn write_log(path: &Path, n: usize) {
    let mut out = file::header().to_vec();
    let since = SystemTime::now();
    for i in 0..n {
        let held = Held {
            key: key("scale", i).into_bytes(),
            source: SOURCE.to_vec(),
            peer: format!("127.0.0.1:{}", 10_000 + i % 50_000).into_bytes(),
            since,
            token: 1_000_000 + i as u64,
            session: false,
            mode: LockMode::Exclusive,
            expires: None,
            ownership: Default::default(),
        };
        held.record().encode_into(&mut out);
    }
    std::fs::write(path, &out).unwrap();
}

/// Exec of `serve --data` on a log of `n` holds until the port answers a
/// TryLock of a held key with `#`, against a bare read of the log file.
fn restart(label: &str, bin: &Path, log: &Path, dir: &Path, n: usize, round: usize) {
    let data = dir.join(format!("restart-{label}.wal"));
    std::fs::copy(log, &data).unwrap();
    let t = Instant::now();
    let bytes = std::fs::read(&data).unwrap();
    let read = t.elapsed();
    drop(bytes);
    let t = Instant::now();
    let mut server = serve(bin, &["--data", data.to_str().unwrap()]);
    let banner = t.elapsed();
    let held = key("scale", n / 2);
    let answer = round_trip(server.addr, &frame(5, held.as_bytes(), Some(b"probe")));
    let serving = t.elapsed();
    let cpu = cpu_of(server.pid());
    assert_eq!(answer, b'#', "TryLock of a held key after the restart");
    let size = std::fs::metadata(&data).unwrap().len();
    let idle_rss = settled_rss(server.pid());
    println!(
        "[{label}] restart #{round} with {n} holds in a {:.1} MB log: serving (TryLock of '{held}' answered '#') {:.2} s after exec (banner {:.2} s, the server's CPU {cpu:.2} s); bare read of the log {:.3} s ({:.0}x); RSS then {:.1} MiB = {:.0} bytes per restored hold",
        size as f64 / 1e6,
        serving.as_secs_f64(),
        banner.as_secs_f64(),
        read.as_secs_f64(),
        serving.as_secs_f64() / read.as_secs_f64(),
        idle_rss as f64 / 1048576.0,
        idle_rss as f64 / n as f64
    );
    // SAFETY: kill(2) takes only integers: no memory of ours is involved.
    unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
    let _ = server.child.wait();
    let _ = std::fs::remove_file(&data);
    let _ = std::fs::remove_file(dir.join(format!("restart-{label}.wal.lock")));
}

/// `n` Lock requests that will wait, on `key_of(i)`; RSS per waiter once
/// they are all queued.
fn queue(server: &Proc, n: usize, key_of: impl Fn(usize) -> String) -> (Vec<TcpStream>, f64) {
    let before = settled_rss(server.pid());
    let conns: Vec<TcpStream> = (0..n)
        .map(|i| {
            let mut s = connect(server.addr);
            let source = format!("w{i}");
            s.write_all(&frame(1, key_of(i).as_bytes(), Some(source.as_bytes())))
                .unwrap();
            s
        })
        .collect();
    let after = settled_rss(server.pid());
    (conns, after.saturating_sub(before) as f64 / n as f64)
}

/// Queued waiters: 10,000 on one held key, and 10,000 on as many held
/// keys (one each), against the server's RSS just before they queued.
fn waiters(label: &str, bin: &Path, n: usize) {
    let server = serve(bin, &[]);
    assert_eq!(round_trip(server.addr, &frame(1, b"one", Some(b"h"))), b'+');
    // Warm-up: 200 waiters queued (and kept) first.
    let (warm, _) = queue(&server, 200, |_| "warm".into());
    let (one, per_one) = queue(&server, n, |_| "one".into());
    drop(one);
    std::thread::sleep(Duration::from_millis(500));
    hold_keys(server.addr, "spread", n);
    let (spread, per_spread) = queue(&server, n, |i| key("spread", i));
    println!(
        "[{label}] RSS per queued waiter: {per_one:.0} bytes ({n} on one key), {per_spread:.0} bytes ({n} on {n} held keys, one each); baseline: the server's RSS just before they queued"
    );
    drop(spread);
    drop(warm);
}

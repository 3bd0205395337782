//! Several keys at once (issue 45, item 3), on every backend against its
//! real server: 40 contenders, each asking for a random 2 or 3 of 5 keys
//! in a random order (seeded; the seed is printed), some with `-w 1s`,
//! some SIGKILLed mid-way (lc-cli and its command's group).
//!
//! Compressed in time: the 40 arrivals are spread over 8 s instead of
//! 60 s, and each command holds its keys 0.2 s (a killed contender's 20 s,
//! until it is killed). Judged from the commands' own logs only: every
//! contender ends within a bound (no deadlock), no key ever has two
//! holders, every command started holding all its keys (`LC_KEYS`, and
//! `LC_LOCK_TOKENS` naming each), and what the killed ones held is freed
//! (a lock of all five keys, `-w` bounded by the crash rules, succeeds).

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::spans::note;
use common::timeline::now_ns;

// No "/" in the names: etcd refuses it in a key (its queue is the prefix).
const KEYS: [&str; 5] = ["m-a", "m-b", "m-c", "m-d", "m-e"];
const CONTENDERS: usize = 40;
const SPREAD: Duration = Duration::from_secs(8);
/// Everything (arrivals, waits, crash rules) is over within this.
const LIMIT: Duration = Duration::from_secs(150);

/// A small seeded generator (xorshift64*), enough for picking keys.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Debug, Clone)]
struct Plan {
    tag: String,
    keys: Vec<&'static str>,
    wait_1s: bool,
    kill: bool,
    at: Duration,
}

fn plans(seed: u64) -> Vec<Plan> {
    let mut rng = Rng(seed | 1);
    (0..CONTENDERS)
        .map(|i| {
            let n = 2 + rng.below(2);
            let mut pool: Vec<&'static str> = KEYS.to_vec();
            let mut keys = Vec::new();
            for _ in 0..n {
                keys.push(pool.remove(rng.below(pool.len())));
            }
            let kill = i % 8 == 3;
            Plan {
                tag: format!("c{i}"),
                keys,
                wait_1s: !kill && rng.below(4) == 0,
                kill,
                at: SPREAD * i as u32 / CONTENDERS as u32,
            }
        })
        .collect()
}

/// The command: logs its start (with its keys and tokens and its group),
/// holds, logs its end.
fn script(log: &Path, tag: &str, secs: f64) -> String {
    let log = log.display();
    format!(
        "echo start {tag} $(date +%s%N) $$ \"$LC_KEYS\" \"$LC_LOCK_TOKENS\" >> {log}; sleep {secs}; echo end {tag} $(date +%s%N) >> {log}"
    )
}

fn args_of(plan: &Plan, log: &Path) -> Vec<String> {
    let mut args = vec!["lock".to_string()];
    if plan.wait_1s {
        args.extend(["-w".into(), "1s".into()]);
    }
    args.push(plan.keys[0].into());
    for k in &plan.keys[1..] {
        args.extend(["--and".into(), (*k).into()]);
    }
    let secs = if plan.kill { 20.0 } else { 0.2 };
    args.extend(["-c".into(), script(log, &plan.tag, secs)]);
    args
}

struct Started {
    ns: i128,
    pgid: i32,
    keys: String,
    tokens: String,
}

fn starts(log: &Path) -> HashMap<String, Started> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut w = l.splitn(6, ' ');
            (w.next()? == "start").then_some(())?;
            let tag = w.next()?.to_string();
            let ns = w.next()?.parse().ok()?;
            let pgid = w.next()?.parse().ok()?;
            let keys = w.next()?.trim_matches('"').to_string();
            let tokens = w.next().unwrap_or("").trim_matches('"').to_string();
            Some((
                tag,
                Started {
                    ns,
                    pgid,
                    keys,
                    tokens,
                },
            ))
        })
        .collect()
}

fn ends(log: &Path, what: &str) -> HashMap<String, i128> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            (w.next()? == what).then_some(())?;
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect()
}

/// Runs the whole contention against one backend; `lc` makes an lc-cli
/// command with that backend's `--server`; `tokens`: whether the backend
/// gives fencing tokens.
fn contend(label: &str, lc: &dyn Fn(&[&str]) -> Command, tokens: bool) {
    let seed = std::env::var("FLEET_MULTI_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now_ns() as u64);
    eprintln!("fleet_multi {label}: seed {seed} (FLEET_MULTI_SEED={seed} to repeat)");
    let plans = plans(seed);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let began = Instant::now();
    let mut kids: Vec<Option<Child>> = (0..plans.len()).map(|_| None).collect();
    let mut status: Vec<Option<i32>> = vec![None; plans.len()];
    let mut killed = vec![false; plans.len()];
    let mut done = 0;
    while done < plans.len() {
        assert!(
            began.elapsed() < LIMIT,
            "{label} (seed {seed}): {} of {} contenders still running after {LIMIT:?}: a deadlock or a wait without bound; log:\n{}",
            plans.len() - done,
            plans.len(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let started = starts(&log);
        for (i, plan) in plans.iter().enumerate() {
            if kids[i].is_none() && status[i].is_none() && began.elapsed() >= plan.at {
                let args = args_of(plan, &log);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let child = lc(&args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                kids[i] = Some(child);
            }
            let Some(child) = kids[i].as_mut() else {
                continue;
            };
            if plan.kill && !killed[i] {
                if let Some(s) = started.get(&plan.tag) {
                    // Mid-way: lc-cli and its command's whole group.
                    let _ = child.kill();
                    // SAFETY: kill(2) with a process-group id and a signal.
                    unsafe { libc::kill(-s.pgid, libc::SIGKILL) };
                    note(&log, "killed", &plan.tag);
                    killed[i] = true;
                }
            }
            if let Ok(Some(st)) = child.try_wait() {
                status[i] = Some(st.code().unwrap_or(-1));
                kids[i] = None;
                done += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let started = starts(&log);
    let ended = ends(&log, "end");
    let killed_at = ends(&log, "killed");
    // Every contender that waited without -w ran; with -w 1s it ran or
    // timed out (1); a killed one was killed.
    for (i, plan) in plans.iter().enumerate() {
        let st = status[i];
        match (plan.kill, plan.wait_1s) {
            (true, _) => assert!(
                killed[i],
                "{label} seed {seed}: {} was never started, so never killed:\n{text}",
                plan.tag
            ),
            (false, false) => assert_eq!(
                st,
                Some(0),
                "{label} seed {seed}: {} ({:?}) ended {st:?}:\n{text}",
                plan.tag,
                plan.keys
            ),
            (false, true) => assert!(
                matches!(st, Some(0) | Some(1)),
                "{label} seed {seed}: {} with -w 1s ended {st:?}:\n{text}",
                plan.tag
            ),
        }
    }
    // Every command held all its keys, and each key's holders never overlap.
    let mut spans: HashMap<&str, Vec<(i128, i128, &str)>> = HashMap::new();
    for plan in &plans {
        let Some(s) = started.get(&plan.tag) else {
            continue;
        };
        assert_eq!(
            s.keys,
            plan.keys.join(","),
            "{label} seed {seed}: {}'s LC_KEYS:\n{text}",
            plan.tag
        );
        if tokens || !s.tokens.is_empty() {
            let named: Vec<&str> = s
                .tokens
                .split(',')
                .filter_map(|t| t.rsplit_once('=').map(|(k, _)| k))
                .collect();
            assert_eq!(
                named, plan.keys,
                "{label} seed {seed}: {}'s LC_LOCK_TOKENS:\n{text}",
                plan.tag
            );
        }
        let end = ended
            .get(&plan.tag)
            .or_else(|| killed_at.get(&plan.tag))
            .copied()
            .unwrap_or_else(|| {
                panic!(
                    "{label} seed {seed}: {} started and never ended:\n{text}",
                    plan.tag
                )
            });
        for k in &plan.keys {
            spans.entry(k).or_default().push((s.ns, end, &plan.tag));
        }
    }
    let ran = started.len();
    for (key, list) in &mut spans {
        list.sort();
        for w in list.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "{label} seed {seed}: '{key}' had two holders: {} until {} and {} from {}:\n{text}",
                w[0].2,
                w[0].1,
                w[1].2,
                w[1].0
            );
        }
    }
    assert!(
        ran >= CONTENDERS / 2,
        "{label} seed {seed}: only {ran} commands ran:\n{text}"
    );
    // What the killed ones held is freed (after the crash rules): all five
    // keys at once, bounded.
    let all: BTreeSet<&str> = KEYS.iter().copied().collect();
    let mut args = vec!["lock", "-w", "60s", KEYS[0]];
    for k in &KEYS[1..] {
        args.extend(["--and", k]);
    }
    args.extend(["--", "true"]);
    let (code, err) = common::finish_within(
        Duration::from_secs(90),
        lc(&args).stderr(Stdio::piped()).spawn().unwrap(),
    );
    assert_eq!(
        code,
        Some(0),
        "{label} seed {seed}: all of {all:?} were not free after the crash rules: {err}"
    );
    eprintln!(
        "fleet_multi {label}: seed {seed}: {ran} commands ran, {} timed out (-w 1s), {} killed, {:.1} s",
        status.iter().filter(|s| **s == Some(1)).count(),
        killed.iter().filter(|k| **k).count(),
        began.elapsed().as_secs_f64()
    );
}

#[test]
fn builtin_server() {
    let server = common::Server::start();
    contend("built-in", &|args| server.lc(args), true);
}

#[test]
fn redis() {
    let redis = common::redis::RedisServer::start();
    let url = format!("{}?ttl=3s", redis.url());
    contend("redis", &|args| common::lc_at(&url, args), false);
}

#[test]
fn etcd() {
    let etcd = common::etcd::Etcd::start();
    contend("etcd", &|args| etcd.lc("?ttl=3s", args), false);
}

#[test]
fn zookeeper() {
    let zk = common::zk::Zk::start();
    contend("zookeeper", &|args| zk.lc("/fleet", args), false);
}

#[test]
fn postgresql() {
    let pg = common::pg::PgServer::start();
    contend("postgresql", &|args| pg.lc(args), false);
}

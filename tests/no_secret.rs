//! No password is ever printed: every backend's failure paths (nothing
//! listening, a refused password, an address that does not parse, a bad
//! LC_SERVER) and its normal output (`-v`, `keys`, `keys --json`, the
//! hints that repeat the address) are run with a known password, and the
//! password is searched for in stdout and stderr of each run. The built-in
//! server's token (`serve --token-file`) is such a password, in the
//! address, LC_TOKEN_FILE, and the server's own `-v` log.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::etcd::Etcd;
use common::pg::PgServer;
use common::redis::{free_port, RedisServer};
use common::zk::Zk;
use common::{Serve, BIN};

/// The password every address below carries (or the environment does).
const PW: &str = "Never-Print-Me-9931";

/// Every subcommand that talks to a service, `-v` where it has a say.
const RUNS: &[&[&str]] = &[
    &["-v", "lock", "-w", "300ms", "k", "--", "true"],
    &["-v", "lock", "-n", "k", "--", "true"],
    &["-v", "trylock", "k", "--", "true"],
    &["-v", "wait", "-w", "300ms", "k"],
    &["unlock", "k"],
    &["reset", "k"],
    &["reset", "--source", "s"],
    &["keys"],
    &["keys", "--json"],
    &["ping"],
    &["ping", "--json"],
];

/// Runs every subcommand against `server` (as `--server`, and once as
/// LC_SERVER), returns how many runs there were; panics naming the first
/// run whose output held the password.
fn check(server: &str, env: &[(&str, &str)]) -> usize {
    let mut n = 0;
    for args in RUNS {
        for via_env in [false, true] {
            let mut cmd = Command::new(BIN);
            cmd.env_remove("LC_SERVER")
                .env_remove("REDISCLI_AUTH")
                .env_remove("PGPASSWORD")
                .env_remove("ETCDCTL_USER")
                .env_remove("ETCDCTL_PASSWORD")
                .env_remove("LC_ZK_PASSWORD")
                .env_remove("LC_TOKEN")
                .env_remove("LC_TOKEN_FILE")
                .envs(env.iter().copied())
                .stdin(Stdio::null());
            if via_env {
                cmd.env("LC_SERVER", server);
            } else {
                cmd.args(["--server", server]);
            }
            cmd.args(["--connect-timeout", "300ms"]).args(*args);
            let out = cmd.output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                !text.contains(PW),
                "{server} {args:?} (LC_SERVER: {via_env}) printed the password:\n{text}"
            );
            n += 1;
        }
    }
    n
}

#[test]
fn no_address_that_fails_to_parse_shows_its_password() {
    let mut runs = 0;
    for bad in [
        format!("redis://u:{PW}@127.0.0.1:notaport"),
        format!("redis://u:{PW}@127.0.0.1/notadb"),
        format!("redis://u:{PW}@127.0.0.1?tll=3s"),
        format!("redis://u:{PW}@127.0.0.1?ttl=forever"),
        format!("redis://u:{PW}@127.0.0.1?ttl"),
        format!("redis://u:{PW}@127.0.0.1?cacert=/x"),
        format!("rediss://u:{PW}@127.0.0.1?cert=/x"),
        format!("rediss://u:{PW}@,/0"),
        format!("zk://u:{PW}@127.0.0.1:1/a?ttl=1s"),
        format!("zk://:{PW}@127.0.0.1:1/a"),
        format!("etcd://u:{PW}@127.0.0.1:x"),
        format!("etcd://u:{PW}@127.0.0.1?queue-timeout=1s"),
        format!("postgres://u:{PW}@127.0.0.1:x/d"),
        format!("postgres://u:{PW}@127.0.0.1/d?ttl=1s"),
        format!("lc://u:{PW}@127.0.0.1:1"),
        format!("http://u:{PW}@127.0.0.1:1"),
        format!("redis://u:{PW}%zz@127.0.0.1"),
        format!("postgres://u:{PW}@127.0.0.1/d?sslmode=bogus"),
        format!("postgres://u:{PW}@127.0.0.1/d?sslmode=verify-full&sslrootcert=/nonexistent"),
        format!("etcd://u:{PW}@127.0.0.1?cacert=/nonexistent"),
        format!("rediss://u:{PW}@127.0.0.1?cacert=/nonexistent"),
    ] {
        runs += check(&bad, &[]);
    }
    eprintln!("{runs} runs");
}

#[test]
fn no_unreachable_service_shows_its_password() {
    let port = free_port();
    let mut runs = 0;
    for scheme in ["redis", "rediss", "zk", "etcd", "postgres"] {
        runs += check(&format!("{scheme}://u:{PW}@127.0.0.1:{port}/d"), &[]);
    }
    // From the environment, each backend's own variable.
    for (url, var) in [
        (format!("redis://127.0.0.1:{port}"), "REDISCLI_AUTH"),
        (format!("zk://u@127.0.0.1:{port}"), "LC_ZK_PASSWORD"),
        (format!("etcd://u@127.0.0.1:{port}"), "ETCDCTL_PASSWORD"),
        (format!("postgres://u@127.0.0.1:{port}/d"), "PGPASSWORD"),
    ] {
        runs += check(&url, &[(var, PW)]);
    }
    runs += check(
        &format!("etcd://127.0.0.1:{port}"),
        &[("ETCDCTL_USER", &format!("u:{PW}"))],
    );
    eprintln!("{runs} runs");
}

#[test]
fn no_refused_or_accepted_password_is_shown() {
    let mut runs = 0;
    // Redis: refused (wrong password), then accepted, with a key held so
    // that `keys`, `-n` and `trylock` have a holder to show.
    let redis = RedisServer::start_secured(true, &[], Some(PW));
    runs += check(&format!("redis://:{PW}x@{}", redis.addr()), &[]);
    let right = format!("redis://u:{PW}@{}", redis.addr());
    let _: String = redis.query(&[
        "ACL",
        "SETUSER",
        "u",
        "on",
        &format!(">{PW}"),
        "~*",
        "&*",
        "+@all",
    ]);
    runs += check(&right, &[]);
    let held = Command::new(BIN)
        .args(["--server", &right, "lock", "k"])
        .env_remove("LC_SERVER")
        .output()
        .unwrap();
    assert!(held.status.success(), "{held:?}");
    runs += check(&right, &[]);
    runs += check(
        &format!("redis://u@{}", redis.addr()),
        &[("REDISCLI_AUTH", PW)],
    );

    // ZooKeeper: a node held with the digest identity; the wrong one is
    // refused its reset.
    let zk = Zk::start();
    let zk_url = format!("zk://ops:{PW}@{}/p?session-timeout=2s", zk.hosts());
    let held = Command::new(BIN)
        .args(["--server", &zk_url, "lock", "k"])
        .env_remove("LC_SERVER")
        .output()
        .unwrap();
    assert!(held.status.success(), "{held:?}");
    runs += check(&format!("zk://ops:{PW}x@{}/p", zk.hosts()), &[]);
    runs += check(&zk_url, &[]);

    // etcd with authentication on: a wrong and a right password.
    let etcd = Etcd::start();
    etcd.enable_auth(PW);
    runs += check(&format!("etcd://root:{PW}x@{}", etcd.endpoint()), &[]);
    runs += check(&format!("etcd://root:{PW}@{}", etcd.endpoint()), &[]);
    runs += check(
        &format!("etcd://{}", etcd.endpoint()),
        &[("ETCDCTL_USER", "root"), ("ETCDCTL_PASSWORD", PW)],
    );

    // PostgreSQL: its server has another password, so ours is refused.
    let pg = PgServer::start();
    runs += check(
        &format!("postgres://postgres:{PW}@127.0.0.1:{}/postgres", pg.port),
        &[],
    );
    eprintln!("{runs} runs");
    std::thread::sleep(Duration::from_millis(10));
}

#[test]
fn no_token_of_the_built_in_server_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    // An identity on the admin's line; the lock token has none (its
    // identity is its fingerprint): neither is the token.
    std::fs::write(
        &file,
        format!(
            "{PW} admin name=ops\n{PW}-lock lock\n\
             {PW}-quota lock name=q keys=held,k/* held=2 waits=1\n"
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let s = Serve::new().args(&["--token-file", file]).start();
    let right = format!("lc://:{PW}@{}", s.addr);
    // A key held, so that `-n`, `trylock` and `wait` have a holder.
    let held = Command::new(BIN)
        .args(["--server", &right, "lock", "held"])
        .env_remove("LC_SERVER")
        .output()
        .unwrap();
    assert!(held.status.success(), "{held:?}");
    let mut runs = check(&format!("lc://:{PW}x@{}", s.addr), &[]);
    runs += check(&right, &[]);
    let only_token = dir.path().join("mine");
    std::fs::write(&only_token, format!("{PW}\n")).unwrap();
    runs += check(
        &s.addr.to_string(),
        &[("LC_TOKEN_FILE", only_token.to_str().unwrap())],
    );
    // As a lock token too: its listing shows the holder's identity, not
    // the token, nor the fencing token of a hold not its own.
    runs += check(&format!("lc://:{PW}-lock@{}", s.addr), &[]);
    let log = s.log();
    assert!(!log.contains(PW), "the server printed the token:\n{log}");
    assert!(log.contains("as 'ops'"), "{log}");
    let listed = Command::new(BIN)
        .args([
            "--server",
            &format!("lc://:{PW}-lock@{}", s.addr),
            "keys",
            "--json",
        ])
        .env_remove("LC_SERVER")
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("\"ident\":\"ops\""), "{listed}");
    assert!(listed.contains("\"token\":null"), "{listed}");
    assert!(!listed.contains(PW), "{listed}");
    // A token with quotas: each refusal (outside its keys=, over its
    // waits=, over its held=) is one line naming the identity's limit,
    // never the token, and the log names the identity. (A server of its
    // own: the log's refusal lines are rate-limited per address.)
    let s = Serve::new().args(&["--token-file", file]).start();
    let q = format!("lc://:{PW}-quota@{}", s.addr);
    let held = Command::new(BIN)
        .args([
            "--server",
            &format!("lc://:{PW}@{}", s.addr),
            "lock",
            "held",
        ])
        .env_remove("LC_SERVER")
        .output()
        .unwrap();
    assert!(held.status.success(), "{held:?}");
    let lc_q = |args: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.args(["--server", &q, "--connect-timeout", "1s"])
            .args(args)
            .env_remove("LC_SERVER");
        cmd
    };
    let ok = lc_q(&["lock", "k/a"]).output().unwrap();
    assert!(ok.status.success(), "{ok:?}");
    let mut waiter = lc_q(&["lock", "-w", "30s", "held", "--", "true"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    s.wait_for("queue 'held'", 1, std::time::Duration::from_secs(10));
    for (args, says) in [
        (
            &["lock", "other", "--", "true"][..],
            "token 'q' may use only keys matching held,k/*",
        ),
        (
            &["lock", "-w", "30s", "held", "--", "true"],
            "token 'q' has 1 requests waiting",
        ),
        (&["lock", "k/b"], ""),
        (
            &["lock", "k/c", "--", "true"],
            "token 'q' holds 2 keys, its quota",
        ),
    ] {
        let out = lc_q(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains(PW), "{args:?} printed the token: {err}");
        match says {
            "" => assert!(out.status.success(), "{args:?}: {err}"),
            _ => {
                assert_eq!(out.status.code(), Some(76), "{args:?}: {err}");
                assert!(
                    err.contains(says) && err.lines().count() == 1,
                    "{args:?}: {err}"
                );
            }
        }
        runs += 1;
    }
    let _ = waiter.kill();
    let _ = waiter.wait();
    let log = s.log();
    assert!(!log.contains(PW), "the server printed the token:\n{log}");
    for line in [
        "refused: token 'q' may use",
        "refused: token 'q' has 1",
        "refused: token 'q' holds 2",
    ] {
        assert!(log.contains(&format!("as 'q': {line}")), "{line}:\n{log}");
    }
    eprintln!("{runs} runs");
}

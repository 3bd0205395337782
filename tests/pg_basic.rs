//! The PostgreSQL backend through the real binary against a real server:
//! trylock and -w, psql and lc-cli excluding each other, the token, keys
//! and reset, the refusals, and the connection errors.

use crate::common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::pg::{PgServer, PASSWORD};
use common::*;

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_holder(pg: &PgServer, key: &str, secs: &str) -> Kill {
    let child = pg
        .lc(&["lock", key, "--", "sleep", secs])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || pg.held(key)),
        "holder never held {key}"
    );
    Kill(child)
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn trylock_and_w_on_a_held_key_and_the_wait_leaves_the_queue() {
    let pg = PgServer::start();
    let _holder = spawn_holder(&pg, "job", "30");
    let out = expect_status(&mut pg.lc(&["trylock", "job", "--", "true"]), 1);
    assert!(text(&out).contains("failed to get lock"), "{}", text(&out));
    let started = Instant::now();
    let out = expect_status(&mut pg.lc(&["lock", "-w", "0.5s", "job", "--", "true"]), 1);
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert!(text(&out).contains("timeout"), "{}", text(&out));
    // The withdrawn waiter is out of the server's queue once lc-cli has said so.
    assert_eq!(pg.waiters("job"), 0);
    // A free key is taken at once by both.
    expect_status(&mut pg.lc(&["trylock", "other", "--", "true"]), 0);
    expect_status(&mut pg.lc(&["lock", "-w", "1s", "other", "--", "true"]), 0);
}

#[test]
fn psql_and_lc_cli_exclude_each_other() {
    let pg = PgServer::start();
    // psql holds deploy/prod for 2 s: lc-cli waits for it.
    let mut psql = pg.psql_cmd(
        "select pg_advisory_lock(hashtextextended('deploy/prod', 0)); select pg_sleep(2);",
    );
    let psql = Kill(psql.stdout(Stdio::null()).spawn().unwrap());
    assert!(wait_until(Duration::from_secs(10), || pg.held("deploy/prod")));
    let held_at = Instant::now();
    expect_status(&mut pg.lc(&["trylock", "deploy/prod", "--", "true"]), 1);
    expect_status(&mut pg.lc(&["lock", "deploy/prod", "--", "true"]), 0);
    assert!(
        held_at.elapsed() >= Duration::from_millis(1500),
        "lc-cli got the key while psql held it"
    );
    drop(psql);
    // The reverse: lc-cli holds, psql's try fails, then succeeds after.
    let mut holder = spawn_holder(&pg, "deploy/prod", "2");
    let try_sql = "select pg_try_advisory_lock(hashtextextended('deploy/prod', 0))";
    assert_eq!(pg.sql(try_sql), "f");
    let status = holder.0.wait().unwrap();
    assert!(status.success());
    assert_eq!(pg.sql(try_sql), "t");
}

#[test]
fn token_grows_and_keys_and_reset_name_and_end_the_holder() {
    let pg = PgServer::start();
    let token = |key: &str| -> u64 {
        let out = expect_status(
            &mut pg.lc(&["lock", key, "--", "sh", "-c", "echo $LC_LOCK_TOKEN"]),
            0,
        );
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let (a, b, c) = (token("t1"), token("t2"), token("t1"));
    assert!(a < b && b < c, "{a} {b} {c}");

    let mut holder = Kill(
        pg.lc(&[
            "lock",
            "--source",
            "ci-7",
            "deploy/prod",
            "--",
            "sleep",
            "30",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    );
    assert!(wait_until(Duration::from_secs(10), || pg.held("deploy/prod")));
    // Named by lc-cli's table once the grant is recorded.
    assert!(wait_until(Duration::from_secs(5), || {
        let out = expect_status(&mut pg.lc(&["keys"]), 0);
        let t = text(&out);
        t.contains("deploy/prod") && t.contains("ci-7")
    }));
    // A key only psql held shows by its lock id.
    let _psql = Kill(
        pg.psql_cmd("select pg_advisory_lock(42); select pg_sleep(30);")
            .spawn()
            .unwrap(),
    );
    assert!(wait_until(Duration::from_secs(5), || {
        text(&expect_status(&mut pg.lc(&["keys"]), 0)).contains("id:42")
    }));

    let out = expect_status(&mut pg.lc(&["reset", "deploy/prod"]), 0);
    assert!(
        text(&out).contains("released 'deploy/prod'"),
        "{}",
        text(&out)
    );
    let start = Instant::now();
    let status = loop {
        if let Some(s) = holder.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the reset holder kept running"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(75));
    assert!(!pg.held("deploy/prod"));
}

#[test]
fn reset_without_the_privilege_says_what_is_missing() {
    let pg = PgServer::start();
    pg.sql("create role weak login password 'weakpw'");
    let _holder = spawn_holder(&pg, "k", "30");
    let weak = format!("postgres://weak:weakpw@127.0.0.1:{}/postgres", pg.port);
    let out = expect_status(
        std::process::Command::new(BIN).args(["--server", &weak, "reset", "k"]),
        76,
    );
    let t = text(&out);
    assert!(
        t.contains("pg_signal_backend") && !t.contains("weakpw"),
        "{t}"
    );
    assert!(pg.held("k"));
}

/// A hold without a command is a row of `lc_cli.kept` (no session keeps
/// the advisory lock), until `unlock`; a shared one is refused (76).
#[test]
fn detached_holds_are_kept_rows_until_unlock() {
    let pg = PgServer::start();
    expect_status(&mut pg.lc(&["lock", "k"]), 0);
    assert!(!pg.held("k"));
    expect_status(&mut pg.lc(&["trylock", "k", "--", "true"]), 1);
    expect_status(&mut pg.lc(&["unlock", "k"]), 0);
    expect_status(&mut pg.lc(&["unlock", "k"]), 1);
    expect_status(&mut pg.lc(&["trylock", "k", "--", "true"]), 0);
    let out = expect_status(&mut pg.lc(&["lock", "-s", "k"]), 76);
    assert!(text(&out).contains("exclusive"), "{}", text(&out));
    expect_status(&mut pg.lc(&["trylock", "k", "--", "true"]), 0);
}

#[test]
fn connection_errors_are_one_line_with_their_status_and_no_password() {
    let mut pg = PgServer::start();
    let port = pg.port;
    let run = |url: &str, code: i32| -> String {
        let out = expect_status(
            std::process::Command::new(BIN)
                .args(["-v", "--server", url, "lock", "k", "--", "true"])
                .env_remove("PGPASSWORD"),
            code,
        );
        let t = text(&out);
        assert_eq!(t.trim().lines().count(), 1, "{t}");
        t
    };
    let t = run(
        &format!("postgres://postgres:wrong-pw-77@127.0.0.1:{port}/postgres"),
        76,
    );
    assert!(
        t.contains("authentication failed") && !t.contains("wrong-pw-77"),
        "{t}"
    );
    assert!(t.contains("postgres://postgres:***@"), "{t}");
    let t = run(
        &format!("postgres://postgres:{PASSWORD}@127.0.0.1:{port}/nosuchdb"),
        76,
    );
    assert!(
        t.contains("nosuchdb") && t.contains("does not exist") && !t.contains(PASSWORD),
        "{t}"
    );
    let t = run(
        &format!("postgresql://postgres@127.0.0.1:{port}/postgres"),
        76,
    );
    assert!(t.contains("PGPASSWORD"), "{t}");
    // The password from PGPASSWORD works, and is never shown either.
    let out = expect_status(
        std::process::Command::new(BIN)
            .args([
                "-v",
                "--server",
                &format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            ])
            .args(["lock", "k", "--", "true"])
            .env("PGPASSWORD", PASSWORD),
        0,
    );
    assert!(!text(&out).contains(PASSWORD));
    pg.kill();
    let t = run(
        &format!("postgres://postgres:{PASSWORD}@127.0.0.1:{port}/postgres"),
        69,
    );
    assert!(t.contains("cannot reach") && !t.contains(PASSWORD), "{t}");
    // A refused address (clap's message, and LC_SERVER's) masks it too.
    let bad = format!("postgres://postgres:{PASSWORD}@127.0.0.1:{port}/postgres?ttl=3s");
    let out = expect_status(
        std::process::Command::new(BIN).args(["--server", &bad, "keys"]),
        64,
    );
    let e = text(&out);
    assert!(e.contains("keepalive") && !e.contains(PASSWORD), "{e}");
    let out = expect_status(
        std::process::Command::new(BIN)
            .arg("keys")
            .env("LC_SERVER", &bad),
        64,
    );
    let e = text(&out);
    assert!(e.contains("keepalive") && !e.contains(PASSWORD), "{e}");
}

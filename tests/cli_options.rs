//! The shape of the command line (issue 11, items 2, 3, 5, 6): options live
//! on the subcommands that use them, backend tuning in the server address,
//! the command after KEY with or without `--`.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::redis::RedisServer;
use common::*;

fn lc() -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("LC_SERVER").env_remove("LC_SOURCE");
    cmd
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn lock_key_double_dash_with_nothing_after_is_a_usage_error_and_takes_nothing() {
    let server = Server::start();
    for args in [&["lock", "k", "--"][..], &["trylock", "k", "--"]] {
        let out = expect_status(&mut server.lc(args), 64);
        assert!(stderr_of(&out).contains("no command after '--'"), "{out:?}");
    }
    // Nothing was taken: the key is free.
    expect_status(&mut server.lc(&["trylock", "k", "--", "true"]), 0);
    expect_status(&mut server.lc(&["unlock", "k"]), 1);
}

#[test]
fn a_detached_hold_says_how_to_release_it_unless_quiet() {
    let server = Server::start();
    let addr = server.addr.to_string();
    let out = expect_status(lc().args(["lock", "held"]).env("LC_SERVER", &addr), 0);
    assert_eq!(
        stderr_of(&out),
        "'held' is held until 'lc-cli unlock held'\n"
    );
    // Named with --server: the line names it too, and the command works.
    let out = expect_status(&mut server.lc(&["lock", "other"]), 0);
    let line = stderr_of(&out);
    let unlock = format!("lc-cli --server {addr} unlock other");
    assert_eq!(line, format!("'other' is held until '{unlock}'\n"));
    let words: Vec<&str> = unlock.split(' ').collect();
    expect_status(lc().args(&words[1..]), 0);
    let out = expect_status(&mut server.lc(&["lock", "-q", "quiet"]), 0);
    assert_eq!(stderr_of(&out), "");
    expect_status(&mut server.lc(&["unlock", "quiet"]), 0);
    expect_status(&mut server.lc(&["unlock", "held"]), 0);
}

#[test]
fn the_command_needs_no_double_dash_and_keeps_its_options() {
    let server = Server::start();
    let out = expect_status(
        &mut server.lc(&["lock", "k", "-w", "5", "printf", "%s-%s", "-w", "--"]),
        0,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "-w---");
    let out = expect_status(
        &mut server.lc(&["trylock", "k", "sh", "-c", "echo $0", "x"]),
        0,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "x\n");
    // `--` still works.
    let out = expect_status(&mut server.lc(&["lock", "k", "--", "echo", "-n", "a"]), 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a");
}

#[test]
fn trylock_has_no_wait_option_and_server_has_no_short_s() {
    let server = Server::start();
    expect_status(&mut server.lc(&["trylock", "-w", "3", "k", "true"]), 64);
    let addr = server.addr.to_string();
    expect_status(lc().args(["-s", &addr, "keys"]), 64);
    expect_status(lc().args(["keys", "-s", &addr]), 64);
}

#[test]
fn a_negative_duration_is_refused_as_such() {
    for args in [
        &["lock", "k", "-w", "-1", "true"][..],
        &["wait", "k", "-w", "-1"],
    ] {
        let out = expect_status(lc().args(args), 64);
        let err = stderr_of(&out);
        assert!(err.contains("a duration is not negative"), "{err}");
        assert!(!err.contains("-- -1"), "{err}");
    }
}

#[test]
fn serve_and_completions_never_read_lc_server_nor_show_service_options() {
    for bad in ["zk://", "nonsense://x", "h:notaport"] {
        let out = expect_status(lc().args(["completions", "bash"]).env("LC_SERVER", bad), 0);
        assert!(!out.stdout.is_empty());
        let mut serve = lc()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("LC_SERVER", bad)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(serve.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let _ = serve.kill();
        let _ = serve.wait();
        assert!(
            line.starts_with("listening on "),
            "serve with LC_SERVER={bad}: {line:?}"
        );
        // Commands that use it still refuse it, naming it.
        let out = expect_status(lc().args(["keys"]).env("LC_SERVER", bad), 64);
        assert!(stderr_of(&out).contains("LC_SERVER"), "{out:?}");
    }
    for sub in ["serve", "completions"] {
        let out = expect_status(lc().args([sub, "--help"]), 0);
        let help = String::from_utf8_lossy(&out.stdout);
        for flag in [
            "--server",
            "--connect-timeout",
            "--ttl",
            "--session-timeout",
            "--queue-timeout",
            "-s,",
        ] {
            assert!(!help.contains(flag), "{sub} --help shows {flag}:\n{help}");
        }
    }
    let out = expect_status(lc().args(["--server", "h:1", "completions", "bash"]), 64);
    assert!(stderr_of(&out).contains("--server is not an option of 'completions'"));
}

#[test]
fn service_options_go_before_or_after_the_subcommand() {
    let server = Server::start();
    let addr = server.addr.to_string();
    expect_status(lc().args(["lock", "--server", &addr, "a"]), 0);
    expect_status(lc().args(["--server", &addr, "unlock", "a"]), 0);
    // The subcommand's own wins; LC_SERVER is the fallback.
    expect_status(
        lc().args([
            "--server",
            "127.0.0.1:1",
            "trylock",
            "--server",
            &addr,
            "a",
            "true",
        ]),
        0,
    );
    expect_status(
        lc().args(["trylock", "a", "true"]).env("LC_SERVER", &addr),
        0,
    );
    expect_status(
        lc().args(["unlock", "--connect-timeout", "1s", "a"])
            .env("LC_SERVER", &addr),
        1,
    );
}

#[test]
fn unknown_address_parameters_are_refused_naming_the_known_ones() {
    let cases = [
        ("redis://127.0.0.1:1/0?tll=3s", "ttl, queue-timeout"),
        ("zk://127.0.0.1:1/x?ttl=3s", "session-timeout"),
        ("127.0.0.1:1?ttl=3s", "manager"),
    ];
    for (url, known) in cases {
        let out = expect_status(lc().args(["keys", "--server", url]), 64);
        let err = stderr_of(&out);
        assert!(err.contains(known), "{url}: {err}");
    }
}

/// The Redis lease, as PTTL reads it while a command holds the key.
fn lease_while_held(r: &RedisServer, key: &str, args: &[&str]) -> (i64, String) {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let script = format!("touch '{}'; sleep 30", gate.display());
    let mut cmd = lc();
    cmd.args(args)
        .args(["lock", key, "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut holder = cli::Guard(cmd.spawn().unwrap());
    assert!(wait_until(Duration::from_secs(10), || gate.exists()));
    let pttl: i64 = r.query(&["PTTL", &RedisServer::lock_key(key)]);
    cli::signal(holder.pid(), libc::SIGTERM);
    let out = holder.0.wait_with_output_hack();
    (pttl, out)
}

trait WaitHack {
    fn wait_with_output_hack(&mut self) -> String;
}

impl WaitHack for std::process::Child {
    fn wait_with_output_hack(&mut self) -> String {
        use std::io::Read;
        let _ = self.wait();
        let mut err = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        err
    }
}

#[test]
fn the_redis_lease_comes_from_the_address_or_the_deprecated_flag() {
    let r = RedisServer::start();
    let url = format!("redis://{}/0?ttl=4s", r.addr());
    let (pttl, err) = lease_while_held(&r, "a", &["--server", &url]);
    assert!(pttl > 0 && pttl <= 4000, "PTTL {pttl} with ?ttl=4s");
    assert!(!err.contains("deprecated"), "{err}");
    let (pttl, _) = lease_while_held(&r, "b", &["--server", &r.url()]);
    assert!(pttl > 4000, "PTTL {pttl} with the default lease");
    let (pttl, err) = lease_while_held(&r, "c", &["--server", &r.url(), "--ttl", "3s"]);
    assert!(pttl > 0 && pttl <= 3000, "PTTL {pttl} with --ttl 3s");
    assert!(
        err.contains("--ttl is deprecated: put it in the server address"),
        "{err}"
    );
}

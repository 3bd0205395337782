//! `lock`, `trylock`, `unlock`, `wait`, `reset`: statuses, queueing and
//! errors, with the real binary against a real `lc-cli serve`.

use crate::common;

use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::cli::*;
use common::*;

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_commands_status_is_passed_through() {
    let server = Server::start();
    for code in [0, 3, 255] {
        expect_status(
            &mut server.lc(&["lock", "st", "--", "sh", "-c", &format!("exit {code}")]),
            code,
        );
    }
    // Died of a signal: 128+N.
    expect_status(
        &mut server.lc(&["lock", "st", "--", "sh", "-c", "kill -USR1 $$"]),
        128 + libc::SIGUSR1,
    );
    expect_status(
        &mut server.lc(&["lock", "st", "-c", "kill -KILL $$"]),
        128 + libc::SIGKILL,
    );
    // And the key is free after each.
    expect_status(&mut server.lc(&["trylock", "st", "--", "true"]), 0);
}

#[test]
fn the_command_gets_the_key_in_its_environment() {
    let server = Server::start();
    let out = expect_status(
        &mut server.lc(&["lock", "env/key", "--", "sh", "-c", "echo \"$LC_KEY\""]),
        0,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "env/key\n");
    // The built-in server's fencing token, not one inherited from an outer
    // lc-cli.
    let out = expect_status(
        server
            .lc(&[
                "lock",
                "env/key",
                "--",
                "sh",
                "-c",
                "echo \"[$LC_LOCK_TOKEN]\"",
            ])
            .env("LC_LOCK_TOKEN", "99"),
        0,
    );
    let token = String::from_utf8_lossy(&out.stdout).into_owned();
    let token: u64 = token
        .trim()
        .trim_matches(['[', ']'])
        .parse()
        .expect("a number");
    assert!(token > 99, "{token}");
}

#[test]
fn not_found_is_127_and_not_executable_is_126_and_the_key_is_free() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let out = expect_status(
        &mut server.lc(&["lock", "spawn", "--", "/nonexistent/command"]),
        127,
    );
    let err = stderr_of(&out);
    assert!(
        err.contains("'spawn'") && err.contains(&server.addr.to_string()),
        "{err}"
    );
    expect_status(&mut server.lc(&["trylock", "spawn", "--", "true"]), 0);

    let script = dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    expect_status(server.lc(&["lock", "spawn", "--"]).arg(&script), 126);
    expect_status(&mut server.lc(&["trylock", "spawn", "--", "true"]), 0);
}

#[test]
fn conflict_status_for_nonblock_and_timeout_and_e_changes_it() {
    let server = Server::start();
    expect_status(&mut server.lc(&["lock", "--source", "holder", "busy"]), 0);
    expect_status(&mut server.lc(&["trylock", "busy", "--", "true"]), 1);
    expect_status(&mut server.lc(&["lock", "-n", "busy", "--", "true"]), 1);
    expect_status(
        &mut server.lc(&["lock", "-n", "-E", "42", "busy", "--", "true"]),
        42,
    );
    // -w 0 tries once, as in flock.
    expect_status(
        &mut server.lc(&["lock", "-w", "0", "-E", "9", "busy", "--", "true"]),
        9,
    );
    let out = expect_status(
        &mut server.lc(&[
            "lock", "--source", "timed", "-w", "0.3", "busy", "--", "true",
        ]),
        1,
    );
    // Not a terminal: no status line, one line that says why.
    let err = stderr_of(&out);
    assert!(!err.contains('\r'), "{err:?}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.contains("timeout after 0.3"), "{err:?}");
    expect_status(
        &mut server.lc(&["lock", "-w", "200ms", "-E", "3", "busy", "--", "true"]),
        3,
    );
    // The timed-out request left the queue: the server says so, and after
    // the unlock the key is free, not granted to a ghost.
    assert!(
        wait_until(Duration::from_secs(5), || server
            .logged(&["withdraw 'busy'", "source 'timed'"])),
        "{}",
        server.log()
    );
    expect_status(&mut server.lc(&["unlock", "busy"]), 0);
    expect_status(&mut server.lc(&["trylock", "busy", "--", "true"]), 0);
}

#[test]
fn lock_without_a_command_holds_until_unlock_from_another_process() {
    let server = Server::start();
    expect_status(&mut server.lc(&["lock", "hold"]), 0);
    expect_status(&mut server.lc(&["trylock", "hold", "--", "true"]), 1);
    expect_status(&mut server.lc(&["unlock", "hold"]), 0);
    expect_status(&mut server.lc(&["trylock", "hold", "--", "true"]), 0);
    // Not held: unlock says so with status 1.
    let out = expect_status(&mut server.lc(&["unlock", "hold"]), 1);
    assert!(stderr_of(&out).contains("'hold'"), "{}", stderr_of(&out));
}

#[test]
fn wait_returns_when_the_key_is_free() {
    let server = Server::start();
    expect_status(&mut server.lc(&["wait", "-w", "0.1", "free"]), 0);
    expect_status(&mut server.lc(&["lock", "wt"]), 0);
    expect_status(&mut server.lc(&["wait", "-w", "0.2", "wt"]), 1);
    expect_status(&mut server.lc(&["wait", "-w", "0.2", "-E", "7", "wt"]), 7);
    let mut waiter = Guard(
        server
            .lc(&["wait", "--source", "waiter", "wt"])
            .spawn()
            .unwrap(),
    );
    server.wait_queued("wt", "waiter");
    assert_eq!(
        waiter.0.try_wait().unwrap(),
        None,
        "wait returned while held"
    );
    expect_status(&mut server.lc(&["unlock", "wt"]), 0);
    assert_eq!(waiter.wait_for(Duration::from_secs(10)), Some(0));
    // wait took it in turn and gave it back.
    expect_status(&mut server.lc(&["trylock", "wt", "--", "true"]), 0);
}

#[test]
fn reset_by_key_and_by_source() {
    let server = Server::start();
    expect_status(&mut server.lc(&["lock", "r1"]), 0);
    expect_status(&mut server.lc(&["lock", "r2"]), 0);
    expect_status(&mut server.lc(&["reset", "r1", "r2"]), 0);
    expect_status(&mut server.lc(&["trylock", "r1", "--", "true"]), 0);
    expect_status(&mut server.lc(&["trylock", "r2", "--", "true"]), 0);

    expect_status(&mut server.lc(&["lock", "--source", "dead-host", "r3"]), 0);
    expect_status(&mut server.lc(&["lock", "--source", "dead-host", "r4"]), 0);
    expect_status(&mut server.lc(&["lock", "--source", "other-host", "r5"]), 0);
    // A waiter of the dead host is withdrawn, and says so.
    let mut waiter = Guard(
        server
            .lc(&["lock", "--source", "dead-host", "r3", "--", "true"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    server.wait_queued("r3", "dead-host");
    expect_status(&mut server.lc(&["reset", "--source", "dead-host"]), 0);
    assert_eq!(waiter.wait_for(Duration::from_secs(10)), Some(76));
    let mut err = String::new();
    std::io::Read::read_to_string(waiter.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("'r3'") && err.contains("withdrawn"), "{err}");
    expect_status(&mut server.lc(&["trylock", "r3", "--", "true"]), 0);
    expect_status(&mut server.lc(&["trylock", "r4", "--", "true"]), 0);
    expect_status(&mut server.lc(&["trylock", "r5", "--", "true"]), 1);

    // reset never takes the source from LC_SOURCE.
    expect_status(server.lc(&["reset"]).env("LC_SOURCE", "other-host"), 64);
    expect_status(&mut server.lc(&["trylock", "r5", "--", "true"]), 1);
}

#[test]
fn a_bad_key_is_refused_before_any_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let long = "k".repeat(128);
    for key in ["", long.as_str()] {
        for args in [
            vec!["lock", key, "--", "true"],
            vec!["lock", key],
            vec!["trylock", key, "--", "true"],
            vec!["wait", key],
            vec!["unlock", key],
            vec!["reset", key],
        ] {
            let mut cmd = std::process::Command::new(BIN);
            cmd.arg("--server").arg(&addr).args(&args);
            let out = expect_status(&mut cmd, 64);
            let err = stderr_of(&out);
            assert!(err.contains(&addr), "no server named: {err}");
            assert_eq!(err.lines().count(), 1, "not one line: {err}");
        }
    }
    assert!(
        listener.accept().is_err(),
        "lc-cli connected although the key was invalid"
    );
    // 127 bytes is fine.
    let server = Server::start();
    expect_status(&mut server.lc(&["lock", &"k".repeat(127), "--", "true"]), 0);
}

#[test]
fn an_unreachable_server_fails_after_the_connect_timeout_with_its_own_status() {
    // Port 1: nothing here binds it (a port freed by a listener of this
    // test could be taken by another test's server meanwhile).
    let addr = "127.0.0.1:1".to_string();
    for args in [
        vec!["lock", "unreach", "--", "true"],
        vec!["trylock", "unreach", "--", "true"],
        vec!["unlock", "unreach"],
        vec!["reset", "unreach"],
    ] {
        let mut cmd = std::process::Command::new(BIN);
        cmd.arg("--server")
            .arg(&addr)
            .args(["--connect-timeout", "300ms"])
            .args(&args);
        let started = Instant::now();
        let out = expect_status(&mut cmd, 69);
        // Refused connections are retried until the timeout, not longer.
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(2),
            "took {took:?}"
        );
        let err = stderr_of(&out);
        assert!(err.contains("'unreach'") && err.contains(&addr), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn a_release_that_cannot_reach_the_server_names_the_reset_command() {
    let server = Server::start();
    let pid = server.child.id();
    let out = expect_status(
        &mut server.lc(&[
            "lock",
            "gone",
            "--",
            "sh",
            "-c",
            &format!("kill {pid}; sleep 0.2"),
        ]),
        74,
    );
    let err = stderr_of(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("lc-cli --server {} reset gone", server.addr)),
        "{err}"
    );
}

#[test]
fn verbose_says_how_long_the_wait_took_and_what_runs() {
    let server = Server::start();
    let out = expect_status(&mut server.lc(&["-v", "lock", "vk", "--", "true"]), 0);
    let err = stderr_of(&out);
    assert!(
        err.contains("getting lock 'vk'") && err.contains("seconds"),
        "{err}"
    );
    assert!(err.contains("executing true"), "{err}");
}

#[test]
fn waiters_are_served_in_arrival_order() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let order = dir.path().join("order");
    expect_status(&mut server.lc(&["lock", "--source", "holder", "fifo"]), 0);
    let mut waiters = Vec::new();
    for i in 0..8 {
        let source = format!("w{i}");
        let script = format!("echo {i} >> '{}'", order.display());
        waiters.push(Guard(
            server
                .lc(&["lock", "--source", &source, "fifo", "-c", &script])
                .spawn()
                .unwrap(),
        ));
        // Known order: the next starts only once this one is queued.
        server.wait_queued("fifo", &source);
    }
    expect_status(&mut server.lc(&["unlock", "fifo"]), 0);
    for w in &mut waiters {
        assert_eq!(w.wait_for(Duration::from_secs(20)), Some(0));
    }
    let got = std::fs::read_to_string(&order).unwrap();
    let want: String = (0..8).map(|i| format!("{i}\n")).collect();
    assert_eq!(got, want);
}

#[test]
fn ten_processes_increment_a_counter_without_losing_an_update() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    std::fs::write(&counter, "0\n").unwrap();
    let script = format!(
        "n=$(cat '{c}'); sleep 0.02; echo $((n+1)) > '{c}'",
        c = counter.display()
    );
    let mut workers: Vec<Guard> = (0..10)
        .map(|_| {
            Guard(
                server
                    .lc(&["lock", "counter", "-c", &script])
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    for w in &mut workers {
        assert_eq!(w.wait_for(Duration::from_secs(30)), Some(0));
    }
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "10\n");
}

#[test]
fn a_server_that_goes_away_while_we_wait_is_an_error_naming_key_and_server() {
    let server = Server::start();
    expect_status(&mut server.lc(&["lock", "--source", "holder", "away"]), 0);
    let mut waiter = Guard(
        server
            .lc(&["lock", "--source", "w", "away", "--", "true"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    server.wait_queued("away", "w");
    let mut server = server;
    server.kill();
    assert_eq!(waiter.wait_for(Duration::from_secs(10)), Some(69));
    let mut err = String::new();
    std::io::Read::read_to_string(waiter.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(
        err.contains("'away'") && err.contains(&server.addr.to_string()),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A listener on 127.0.0.1 whose accept queue is full, so that a further
/// connect hangs (its SYNs are dropped) until the client gives up.
fn black_hole() -> (std::os::fd::OwnedFd, Vec<std::net::TcpStream>, String) {
    use std::os::fd::FromRawFd;
    // SAFETY: a socket this function creates and owns; the sockaddrs passed are live, zero-initialised plain data of the lengths given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as _;
        addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(
            libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len),
            0
        );
        assert_eq!(libc::listen(fd, 0), 0);
        let mut bound: libc::sockaddr_in = std::mem::zeroed();
        let mut blen = len;
        libc::getsockname(fd, &mut bound as *mut _ as *mut libc::sockaddr, &mut blen);
        let port = u16::from_be(bound.sin_port);
        let addr = format!("127.0.0.1:{port}");
        // Fill the queue: connections that are never accepted.
        let mut fillers = Vec::new();
        for _ in 0..4 {
            match std::net::TcpStream::connect_timeout(
                &addr.parse().unwrap(),
                Duration::from_millis(300),
            ) {
                Ok(s) => fillers.push(s),
                Err(_) => break,
            }
        }
        (owned, fillers, addr)
    }
}

#[test]
fn a_server_that_never_accepts_fails_after_the_connect_timeout() {
    let (_listener, _fillers, addr) = black_hole();
    let mut cmd = std::process::Command::new(BIN);
    // -w bounds the test should the connection be accepted after all.
    cmd.arg("--server")
        .arg(&addr)
        .args(["lock", "-w", "4", "hole", "--", "true"]);
    let started = Instant::now();
    let out = expect_status(&mut cmd, 69);
    let took = started.elapsed();
    // The default connect timeout is 2 s; generous bound for a loaded machine.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let err = stderr_of(&out);
    assert!(err.contains("'hole'") && err.contains(&addr), "{err}");
}

#[test]
fn a_release_is_retried_until_the_server_is_back() {
    let mut server = Server::start();
    let addr = server.addr;
    let pid = server.child.id();
    let mut lc = Guard(
        server
            .lc(&[
                "lock",
                "back",
                "--",
                "sh",
                "-c",
                &format!("kill {pid}; exit 4"),
            ])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert!(wait_until(Duration::from_secs(10), || matches!(
        server.child.try_wait(),
        Ok(Some(_))
    )));
    // Down long enough for the release to fail and be retried at least once.
    std::thread::sleep(Duration::from_millis(500));
    // The same address again (the new server has forgotten the key: its
    // `#` to the Release means free, which is what the release wants).
    // (Its manager anywhere: the lock port + 1 may be anyone's by now.)
    let _again = Serve::new()
        .listen(&addr.to_string())
        .args(&["--manager", "127.0.0.1:0"])
        .start();
    // The command's own status: the release went through in the end.
    assert_eq!(lc.wait_for(Duration::from_secs(15)), Some(4));
}

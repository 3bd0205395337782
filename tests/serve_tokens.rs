//! `serve --token-file` on a non-loopback address of this machine (the
//! first of `hostname -I`), with the real binary on both sides: no token
//! and a wrong token end in one line and 76; a `lock` token locks, tries,
//! waits and releases its own holds but may not reset or release another
//! token's; an `admin` token may; a reference client's classic frame gets
//! `-` and a close, logged once per peer address; SIGHUP rotates the tokens
//! while the holds stay; tokens over TLS (`lcs://:TOKEN@`); and no token is
//! ever printed, by a client or by the server, with `-v` on both; a token
//! given to a server without tokens, or to one that does not know Hello
//! (the reference mode), changes nothing.

use crate::common;

use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use common::tls::TestCa;
use common::{expect_error_line, host_ip, lc_at, Serve, Server};

const ADMIN: &str = "admin-Tok3n-never-printed-0001";
const LOCK: &str = "lock-Tok3n-never-printed-0002";
const OTHER: &str = "other-Tok3n-never-printed-0003";
const ROTATED: &str = "rotated-Tok3n-never-printed-04";

/// A token file in a temp dir (kept alive by the caller).
fn token_file(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap().to_string();
    (dir, path)
}

fn team_file() -> (tempfile::TempDir, String) {
    token_file(&format!(
        "# the team's tokens\n{ADMIN} admin\n{LOCK}\n{OTHER} lock\n"
    ))
}

fn token_server(file: &str, extra: &[&str]) -> Server {
    Serve::new()
        .listen(&format!("{}:0", host_ip()))
        .args(&["--token-file", file])
        .args(extra)
        .start()
}

/// `lc-cli -v --server ADDR ARGS` with LC_TOKEN set to `token` (none: unset).
fn lc(s: &Server, token: Option<&str>, args: &[&str]) -> Command {
    common::lc_with_token(&s.addr.to_string(), "500ms", token, args)
}

/// Neither a client's output nor the server's log holds any token.
fn no_token_in(what: &str, text: &str) {
    common::assert_hides(what, text, &[ADMIN, LOCK, OTHER, ROTATED]);
}

/// Runs `cmd`: its status; its output must hold no token.
fn run(cmd: &mut Command, expected: i32) -> String {
    common::run_hiding(cmd, expected, &[ADMIN, LOCK, OTHER, ROTATED])
}

/// Fails with 76 in one line containing `needle`, no token in it.
fn refused(cmd: &mut Command, needle: &str) -> String {
    let line = expect_error_line(cmd, 76);
    no_token_in("a refusal", &line);
    assert!(line.contains(needle), "{line}");
    line
}

#[test]
fn no_token_or_a_wrong_one_is_76_in_one_line() {
    let (_dir, file) = team_file();
    let s = token_server(&file, &[]);
    for args in [
        &["trylock", "k", "--", "true"][..],
        &["lock", "-w", "1s", "k", "--", "true"],
        &["lock", "kept"],
        &["unlock", "k"],
        &["reset", "k"],
        &["ping"],
    ] {
        let line = refused(&mut lc(&s, None, args), "LC_TOKEN");
        assert!(line.contains("takes only clients with a token"), "{line}");
        refused(
            &mut lc(&s, Some("wrong-token-0123456789abcdef"), args),
            "the server refused the token: it is not one of its tokens",
        );
    }
    // LC_TOKEN_FILE (its first line) and the address carry it too.
    let (_d, mine) = token_file(&format!("{LOCK}\nignored\n"));
    run(
        lc(&s, None, &["trylock", "f", "--", "true"]).env("LC_TOKEN_FILE", &mine),
        0,
    );
    // The token is lc-cli's credential, never the command's.
    let env = run(
        lc(&s, Some(LOCK), &["trylock", "f", "--", "env"]).env("LC_TOKEN_FILE", &mine),
        0,
    );
    assert!(env.contains("LC_KEY=f"), "{env}");
    no_token_in("the command's environment", &env);
    assert!(!env.contains("LC_TOKEN"), "{env}");
    let url = format!("lc://:{LOCK}@{}", s.addr);
    let out = run(&mut lc_at(&url, &["ping"]), 0);
    assert!(out.contains(&format!("lc://:***@{}", s.addr)), "{out}");
    assert!(out.contains("token accepted (role lock)"), "{out}");
    no_token_in("the server", &s.log());
}

#[test]
fn a_lock_token_locks_and_releases_its_own_holds_only() {
    let (_dir, file) = team_file();
    let s = token_server(&file, &[]);
    let out = run(&mut lc(&s, Some(LOCK), &["ping"]), 0);
    assert!(out.contains("token accepted (role lock)"), "{out}");
    run(&mut lc(&s, Some(LOCK), &["lock", "k", "--", "true"]), 0);
    run(&mut lc(&s, Some(LOCK), &["trylock", "t", "--", "true"]), 0);
    run(&mut lc(&s, Some(LOCK), &["wait", "-w", "1s", "k"]), 0);
    // A kept hold: its own token releases it, another lock token may not.
    run(&mut lc(&s, Some(LOCK), &["lock", "kept"]), 0);
    run(
        &mut lc(&s, Some(LOCK), &["trylock", "kept", "--", "true"]),
        1,
    );
    refused(
        &mut lc(&s, Some(OTHER), &["unlock", "kept"]),
        "token role 'lock' may release only the holds of its own token; an admin token can",
    );
    run(&mut lc(&s, Some(LOCK), &["unlock", "kept"]), 0);
    run(&mut lc(&s, Some(LOCK), &["unlock", "kept"]), 1);
    // Resets are an admin's.
    run(&mut lc(&s, Some(OTHER), &["lock", "theirs"]), 0);
    for args in [&["reset", "theirs"][..], &["reset", "--source", "x"]] {
        refused(
            &mut lc(&s, Some(LOCK), args),
            "token role 'lock' may not reset; an admin token can",
        );
    }
    run(
        &mut lc(&s, Some(LOCK), &["trylock", "theirs", "--", "true"]),
        1,
    );
    let out = run(&mut lc(&s, Some(ADMIN), &["ping"]), 0);
    assert!(out.contains("token accepted (role admin)"), "{out}");
    run(&mut lc(&s, Some(ADMIN), &["reset", "theirs"]), 0);
    run(
        &mut lc(&s, Some(LOCK), &["trylock", "theirs", "--", "true"]),
        0,
    );
    run(&mut lc(&s, Some(OTHER), &["lock", "theirs"]), 0);
    run(&mut lc(&s, Some(ADMIN), &["unlock", "theirs"]), 0);
    run(
        &mut lc(&s, Some(ADMIN), &["reset", "--source", "nobody"]),
        0,
    );
    assert!(s.logged(&["refused: token role 'lock' may not reset"]));
    no_token_in("the server", &s.log());
}

#[test]
fn a_classic_frame_first_gets_minus_and_a_close_logged_once_per_peer() {
    let (_dir, file) = team_file();
    let s = token_server(&file, &[]);
    for _ in 0..3 {
        let mut c = s.connect();
        c.write_all(&common::frame(common::action::LOCK, b"k", Some(b"ref")))
            .unwrap();
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).unwrap();
        assert_eq!(answer, b"-", "{:?}", String::from_utf8_lossy(&answer));
    }
    // A Hello with a token and the request behind it, in one write.
    let mut c = s.connect();
    let mut frames = vec![16, 0, LOCK.len() as u8];
    frames.extend_from_slice(LOCK.as_bytes());
    frames.extend(common::frame(common::action::TRY, b"raw", Some(b"r")));
    c.write_all(&frames).unwrap();
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let mut want = vec![b'*', version.len() as u8];
    want.extend_from_slice(version.as_bytes());
    want.extend_from_slice(b"\x04lock+");
    assert_eq!(answer, want);
    // The classic refusals: one line for the three.
    s.wait_for("before a Hello with a token", 1, Duration::from_secs(5));
    std::thread::sleep(common::QUIET);
    assert_eq!(s.count("before a Hello with a token"), 1, "{}", s.log());
    assert!(!s.logged(&["grant 'k'"]), "{}", s.log());
    assert!(s.logged(&["grant 'raw'"]), "{}", s.log());
}

#[test]
fn sighup_rotates_the_tokens_and_the_holds_stay() {
    let (dir, file) = team_file();
    let s = token_server(&file, &[]);
    run(&mut lc(&s, Some(LOCK), &["lock", "kept"]), 0);
    let mut holder = lc(&s, Some(LOCK), &["lock", "held", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    s.wait_for("grant 'held'", 1, Duration::from_secs(10));
    std::fs::write(dir.path().join("tokens"), format!("{ROTATED} admin\n")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let private = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(dir.path().join("tokens"), private).unwrap();
    }
    // SAFETY: kill(2) takes only integers: no memory of ours is involved.
    unsafe { libc::kill(s.pid(), libc::SIGHUP) };
    s.wait_for("SIGHUP: ", 1, Duration::from_secs(5));
    assert!(
        s.logged(&["read again: 1 token(s): 1 admin, 0 lock"]),
        "{}",
        s.log()
    );
    refused(
        &mut lc(&s, Some(LOCK), &["trylock", "k", "--", "true"]),
        "the server refused the token",
    );
    // The holds stay: the session's connection, opened with the old token,
    // is not cut, and the kept hold is still held.
    run(
        &mut lc(&s, Some(ROTATED), &["trylock", "held", "--", "true"]),
        1,
    );
    run(
        &mut lc(&s, Some(ROTATED), &["trylock", "kept", "--", "true"]),
        1,
    );
    assert!(holder.try_wait().unwrap().is_none());
    // A file that does not parse leaves the tokens as they were.
    std::fs::write(dir.path().join("tokens"), format!("{ROTATED} root\n")).unwrap();
    // SAFETY: kill(2) takes only integers: no memory of ours is involved.
    unsafe { libc::kill(s.pid(), libc::SIGHUP) };
    s.wait_for("SIGHUP: ", 2, Duration::from_secs(5));
    assert!(
        s.logged(&[
            "line 1: the word after the token is not a role",
            "still using the 1 token(s)"
        ]),
        "{}",
        s.log()
    );
    run(&mut lc(&s, Some(ROTATED), &["reset", "held"]), 0);
    let _ = holder.kill();
    let _ = holder.wait();
    // A reload checks the file's rights again, as the start does (whose
    // warning is the first such line).
    use std::os::unix::fs::PermissionsExt;
    let path = dir.path().join("tokens");
    assert!(
        !s.logged(&["SIGHUP: ", "can be read by other users"]),
        "{}",
        s.log()
    );
    std::fs::write(&path, format!("{ROTATED} admin\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    // SAFETY: kill(2) takes only integers: no memory of ours is involved.
    unsafe { libc::kill(s.pid(), libc::SIGHUP) };
    s.wait_for(
        "can be read by other users (mode 644)",
        2,
        Duration::from_secs(5),
    );
    assert!(
        s.logged(&["warning: SIGHUP: ", "chmod o-rwx it"]),
        "{}",
        s.log()
    );
    no_token_in("the server", &s.log());
}

#[test]
fn tokens_over_tls() {
    let ca = TestCa::for_ips(&[&host_ip()]);
    let (_dir, file) = team_file();
    let (cert, key) = (ca.file("server.pem"), ca.file("server.key"));
    let s = token_server(&file, &["--tls-cert", &cert, "--tls-key", &key]);
    let url = |token: &str| format!("lcs://{token}{}?cacert={}", s.addr, ca.file("ca.pem"));
    let out = run(&mut lc_at(&url(&format!(":{LOCK}@")), &["-v", "ping"]), 0);
    assert!(out.contains("TLS, token accepted (role lock)"), "{out}");
    assert!(out.contains(&format!("lcs://:***@{}", s.addr)), "{out}");
    run(
        &mut lc_at(
            &url(&format!(":{LOCK}@")),
            &["-v", "lock", "k", "--", "true"],
        ),
        0,
    );
    refused(
        lc_at(&url(""), &["-v", "trylock", "k", "--", "true"]).env_remove("LC_TOKEN"),
        "LC_TOKEN",
    );
    refused(
        &mut lc_at(&url(&format!(":{LOCK}@")), &["reset", "k"]),
        "token role 'lock' may not reset",
    );
    // A reload warns again of the certificate that expires within the week.
    // SAFETY: kill(2) takes only integers: no memory of ours is involved.
    unsafe { libc::kill(s.pid(), libc::SIGHUP) };
    s.wait_for(
        "warning: SIGHUP: the certificate",
        1,
        Duration::from_secs(5),
    );
    assert!(
        s.logged(&["SIGHUP: the certificate", &cert, "expires at"]),
        "{}",
        s.log()
    );
    no_token_in("the server", &s.log());
}

#[test]
fn the_manager_port_is_off_with_tokens_unless_asked_for() {
    let (_dir, file) = team_file();
    let s = token_server(&file, &[]);
    assert_eq!(s.manager.port(), 0);
    // The start-up line (stderr) may come in after the banner (stdout).
    s.wait_for("(clients: ", 1, Duration::from_secs(5));
    let log = s.log();
    assert!(log.contains("manager off"), "{log}");
    assert!(
        log.contains("a token of the token file in LC_TOKEN"),
        "{log}"
    );
    let m = Serve::new()
        .listen(&format!("{}:0", host_ip()))
        .args(&["--token-file", &file, "--manager", "127.0.0.1:0"])
        .start();
    assert_ne!(m.manager.port(), 0);
    m.wait_for("(clients: ", 1, Duration::from_secs(5));
    assert!(
        m.logged(&["warning: the manager port", "takes no token"]),
        "{}",
        m.log()
    );
    // A bad file stops the server at start-up, the token not quoted.
    let (_d, bad) = token_file(&format!("{LOCK} superuser\n"));
    let out = Command::new(common::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--token-file", &bad])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("line 1: the word after the token is not a role"),
        "{err}"
    );
    no_token_in("serve", &err);
    let out = Command::new(common::BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            "/nonexistent/tokens",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the token file"));
}

#[test]
fn a_token_for_a_server_without_tokens_changes_nothing() {
    // lc-cli serve without --token-file: the token is not checked.
    let plain = Serve::new().listen(&format!("{}:0", host_ip())).start();
    let out = run(&mut lc(&plain, Some(LOCK), &["ping"]), 0);
    assert!(
        out.contains("token not checked (the server takes none)"),
        "{out}"
    );
    run(&mut lc(&plain, Some(LOCK), &["lock", "k", "--", "true"]), 0);
    run(&mut lc(&plain, Some(LOCK), &["lock", "kept"]), 0);
    run(&mut lc(&plain, None, &["unlock", "kept"]), 0);
    // A server that does not know Hello (the reference's `-`): asked again
    // without it, and the lock works as before.
    let reference = Serve::new()
        .env("LC_CLI_SERVE_AS_REFERENCE", "1")
        .listen(&format!("{}:0", host_ip()))
        .start();
    run(
        &mut lc(&reference, Some(LOCK), &["lock", "k", "--", "true"]),
        0,
    );
    run(
        &mut lc(&reference, Some(LOCK), &["trylock", "t", "--", "true"]),
        0,
    );
    run(&mut lc(&reference, Some(LOCK), &["lock", "kept"]), 0);
    run(
        &mut lc(&reference, Some(LOCK), &["trylock", "kept", "--", "true"]),
        1,
    );
    run(&mut lc(&reference, Some(LOCK), &["unlock", "kept"]), 0);
    let out = run(&mut lc(&reference, Some(LOCK), &["ping"]), 0);
    assert!(out.contains("not lc-cli serve"), "{out}");
    no_token_in("the servers", &(plain.log() + &reference.log()));
}

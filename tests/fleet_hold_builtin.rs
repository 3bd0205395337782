//! `--hold-at-least` on the built-in server (issue 45, item 1;
//! docs/fleet-jobs.md, docs/backends/builtin.md): the server turns the
//! command's session hold into a kept hold that expires, in one step (the
//! Hello feature `keep`). Three skewed "hosts" under libfaketime run once
//! per tick (`fleet_hold::once_per_tick`, which also clears a window with
//! `unlock`); the kept hold shows in `keys` as kept with its deadline, is
//! cleared by `unlock` and `reset`, frees itself at its deadline, and
//! survives a SIGKILL and restart of a server with `--data`.

use crate::common;

use std::time::Duration;

use common::hold::*;
use common::*;

#[test]
fn once_per_tick() {
    let server = Serve::new().start();
    crate::fleet_hold::once_per_tick(&|args: &[&str]| server.lc(args));
    assert!(
        server.logged(&["session hold of 'job'", "kept until", "(--hold-at-least)"]),
        "{}",
        server.log()
    );
}

/// The kept window shows in `keys` (kept, with a deadline about the
/// window after the grant), keeps others out, and is cleared by `unlock`
/// and by `reset`; a short one frees itself.
#[test]
fn kept_window_shows_and_clears() {
    let server = Serve::new().port_pair().start();
    let url = server.url();
    let lc = |args: &[&str]| lc_at(&url, args);
    let before = now_ms();
    run_with_window(&lc, "k", "60s");
    let after = now_ms();
    let e = entry(&lc, "k").expect("held after the command");
    assert_eq!(e["kept"], true, "{e}");
    let at = expires_ms(&e);
    // No later than 60 s after the run, no earlier than 60 s after its
    // start minus the command's run (the window counts from the grant).
    assert!(at <= after + 60_000 + 1, "{e}");
    assert!(at >= before + 60_000 - 10_000, "{e}");
    expect_status(&mut lc(&["trylock", "k", "--", "true"]), 1);
    expect_status(&mut lc(&["unlock", "k"]), 0);
    assert!(entry(&lc, "k").is_none());
    expect_status(&mut lc(&["trylock", "k", "--", "true"]), 0);

    run_with_window(&lc, "r", "60s");
    expect_status(&mut lc(&["trylock", "r", "--", "true"]), 1);
    expect_status(&mut lc(&["reset", "r"]), 0);
    assert!(entry(&lc, "r").is_none());
    expect_status(&mut lc(&["trylock", "r", "--", "true"]), 0);

    // A short window: held just after, free once it is over.
    run_with_window(&lc, "short", "3s");
    expect_status(&mut lc(&["trylock", "short", "--", "true"]), 1);
    taken_within(&lc, "short", FREED_WITHIN);
    server.wait_for("kept hold of 'short'", 1, Duration::from_secs(10));
    assert!(
        server.logged(&["kept hold of 'short'", "expired at its deadline"]),
        "{}",
        server.log()
    );
    // A command that outlasts its window releases at its end as usual.
    expect_status(
        &mut lc(&[
            "trylock",
            "--hold-at-least",
            "1ms",
            "long",
            "--",
            "sleep",
            "0.2",
        ]),
        0,
    );
    assert!(entry(&lc, "long").is_none());
}

/// With `--data`, the kept window survives a SIGKILL of the server: restored
/// with the same deadline, still keeping others out, cleared by `unlock`;
/// a shorter one frees itself at its deadline after the restart.
#[test]
fn kept_window_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("locks.wal");
    let data = data.to_str().unwrap().to_string();
    let serve = Serve::new().args(&["--data", &data]);
    let mut server = serve.clone().port_pair().start();
    let listen = server.addr.to_string();
    let url = server.url();
    let lc = |args: &[&str]| lc_at(&url, args);

    run_with_window(&lc, "k", "60s");
    run_with_window(&lc, "k2", "4s");
    let at = expires_ms(&entry(&lc, "k").unwrap());
    let at2 = expires_ms(&entry(&lc, "k2").unwrap());
    server.kill();
    server = serve.clone().listen(&listen).restart();
    server.wait_for("restored 'k' ", 1, Duration::from_secs(10));
    assert!(
        server.logged(&["restored 'k' ", "expires at"]),
        "{}",
        server.log()
    );
    let e = entry(&lc, "k").expect("still held after the restart");
    assert_eq!(e["kept"], true, "{e}");
    assert!((expires_ms(&e) - at).abs() <= 1, "{e} vs {at}");
    expect_status(&mut lc(&["trylock", "k", "--", "true"]), 1);
    expect_status(&mut lc(&["unlock", "k"]), 0);
    expect_status(&mut lc(&["trylock", "k", "--", "true"]), 0);

    // k2: restored with its deadline (or, if the restart took longer than
    // its window, freed at start-up), then free.
    if let Some(e) = entry(&lc, "k2") {
        assert!((expires_ms(&e) - at2).abs() <= 1, "{e} vs {at2}");
    }
    taken_within(&lc, "k2", FREED_WITHIN);
    assert!(now_ms() >= at2 - 50, "k2 taken before its deadline");
    drop(server);
}

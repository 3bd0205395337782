//! Signals: to lc-cli while the command runs (forwarded to its whole process
//! group), while it waits (withdrawn from the queue), and SIGKILL of lc-cli
//! (the command gets SIGTERM).

use crate::common;

use std::os::unix::process::CommandExt;
use std::time::Duration;

use common::cli::*;
use common::*;

#[test]
fn sigterm_reaches_child_and_grandchild_and_its_status_is_ours() {
    let server = Server::start();
    let (_dir, [child_pid, grandchild_pid]) = temp_files(["child", "grandchild"]);
    let script = format!(
        "sleep 300 & echo $! > '{g}'; echo $$ > '{c}'; wait",
        g = grandchild_pid.display(),
        c = child_pid.display()
    );
    let mut lc = Guard(server.lc(&["lock", "term", "-c", &script]).spawn().unwrap());
    let (child, grandchild) = (read_pid(&child_pid), read_pid(&grandchild_pid));
    signal(lc.pid(), libc::SIGTERM);
    // sh dies of it, so lc-cli ends with 128+15.
    assert_eq!(lc.wait_for(Duration::from_secs(10)), Some(143));
    assert!(is_dead(child), "the child survived");
    assert!(
        wait_until(Duration::from_secs(5), || is_dead(grandchild)),
        "the grandchild (not the group leader) did not get the signal"
    );
    expect_status(&mut server.lc(&["trylock", "term", "--", "true"]), 0);
}

#[test]
fn a_child_that_handles_the_signal_gives_its_own_status() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let script = format!(
        "trap 'exit 5' TERM; touch '{}'; while :; do sleep 0.05; done",
        ready.display()
    );
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        let _ = std::fs::remove_file(&ready);
        let script = script.replace(
            "TERM",
            match sig {
                libc::SIGTERM => "TERM",
                libc::SIGHUP => "HUP",
                _ => "INT",
            },
        );
        let mut lc = Guard(
            server
                .lc(&["lock", "handled", "-c", &script])
                .spawn()
                .unwrap(),
        );
        assert!(wait_until(Duration::from_secs(10), || ready.exists()));
        signal(lc.pid(), sig);
        assert_eq!(
            lc.wait_for(Duration::from_secs(10)),
            Some(5),
            "signal {sig}"
        );
        expect_status(&mut server.lc(&["trylock", "handled", "--", "true"]), 0);
    }
}

#[test]
fn usr1_usr2_and_winch_are_forwarded_too() {
    let server = Server::start();
    let (_dir, [ready, seen]) = temp_files(["ready", "seen"]);
    let script = format!(
        "trap 'echo USR1 >> {s}' USR1; trap 'echo USR2 >> {s}' USR2; trap 'echo WINCH >> {s}; exit 0' WINCH; \
         touch '{r}'; while :; do sleep 0.05; done",
        s = seen.display(),
        r = ready.display()
    );
    let mut lc = Guard(server.lc(&["lock", "usr", "-c", &script]).spawn().unwrap());
    assert!(wait_until(Duration::from_secs(10), || ready.exists()));
    let seen_has = |what: &str| {
        std::fs::read_to_string(&seen)
            .map(|s| s.contains(what))
            .unwrap_or(false)
    };
    signal(lc.pid(), libc::SIGUSR1);
    assert!(wait_until(Duration::from_secs(5), || seen_has("USR1")));
    signal(lc.pid(), libc::SIGUSR2);
    assert!(wait_until(Duration::from_secs(5), || seen_has("USR2")));
    signal(lc.pid(), libc::SIGWINCH);
    assert_eq!(lc.wait_for(Duration::from_secs(10)), Some(0));
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "USR1\nUSR2\nWINCH\n"
    );
}

#[test]
fn sigint_while_waiting_withdraws_and_the_next_waiter_gets_the_key() {
    let server = Server::start();
    let (_dir, [ran_a, ran_b]) = temp_files(["a", "b"]);
    expect_status(&mut server.lc(&["lock", "--source", "holder", "sig"]), 0);
    let touch = |p: &std::path::Path| format!("touch '{}'", p.display());
    let mut a = Guard(
        server
            .lc(&["lock", "--source", "a", "sig", "-c", &touch(&ran_a)])
            .spawn()
            .unwrap(),
    );
    server.wait_queued("sig", "a");
    let mut b = Guard(
        server
            .lc(&["lock", "--source", "b", "sig", "-c", &touch(&ran_b)])
            .spawn()
            .unwrap(),
    );
    server.wait_queued("sig", "b");
    signal(a.pid(), libc::SIGINT);
    assert_eq!(
        a.wait_for(Duration::from_secs(10)),
        Some(128 + libc::SIGINT)
    );
    assert!(
        wait_until(Duration::from_secs(5), || server
            .logged(&["withdraw 'sig'", "source 'a'"])),
        "{}",
        server.log()
    );
    expect_status(&mut server.lc(&["unlock", "sig"]), 0);
    assert_eq!(b.wait_for(Duration::from_secs(10)), Some(0));
    assert!(ran_b.exists());
    assert!(!ran_a.exists(), "the withdrawn waiter ran its command");
    expect_status(&mut server.lc(&["trylock", "sig", "--", "true"]), 0);
}

#[test]
fn sigterm_while_waiting_exits_143_without_running_anything() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    expect_status(&mut server.lc(&["lock", "--source", "holder", "sigw"]), 0);
    let mut a = Guard(
        server
            .lc(&[
                "lock",
                "--source",
                "a",
                "sigw",
                "-c",
                &format!("touch '{}'", ran.display()),
            ])
            .spawn()
            .unwrap(),
    );
    server.wait_queued("sigw", "a");
    signal(a.pid(), libc::SIGTERM);
    assert_eq!(a.wait_for(Duration::from_secs(10)), Some(143));
    expect_status(&mut server.lc(&["unlock", "sigw"]), 0);
    expect_status(&mut server.lc(&["trylock", "sigw", "--", "true"]), 0);
    assert!(!ran.exists());
}

#[test]
fn sigkill_of_lc_cli_sends_sigterm_to_the_child() {
    let server = Server::start();
    let (_dir, [ready, got]) = temp_files(["ready", "got"]);
    let script = format!(
        "trap 'echo TERM > \"{g}\"; exit 0' TERM; echo $$ > '{r}'; while :; do sleep 0.05; done",
        g = got.display(),
        r = ready.display()
    );
    let mut lc = Guard(
        server
            .lc(&["lock", "killed", "-c", &script])
            .spawn()
            .unwrap(),
    );
    let child = read_pid(&ready);
    signal(lc.pid(), libc::SIGKILL);
    assert_eq!(
        lc.wait_for(Duration::from_secs(10)),
        Some(128 + libc::SIGKILL)
    );
    assert!(
        wait_until(Duration::from_secs(10), || got.exists()),
        "the child never got SIGTERM"
    );
    assert!(wait_until(Duration::from_secs(10), || is_dead(child)));
    // Nobody released it: the operator's reset does.
    expect_status(&mut server.lc(&["trylock", "killed", "--", "true"]), 1);
    expect_status(&mut server.lc(&["reset", "killed"]), 0);
    expect_status(&mut server.lc(&["trylock", "killed", "--", "true"]), 0);
}

#[test]
fn sigtstp_stops_the_command_then_lc_cli_and_sigcont_resumes_both() {
    let server = Server::start();
    let (_dir, [pid_file, go, done]) = temp_files(["pid", "go", "done"]);
    let script = format!(
        "echo $$ > '{p}'; while [ ! -e '{g}' ]; do sleep 0.05; done; touch '{d}'",
        p = pid_file.display(),
        g = go.display(),
        d = done.display()
    );
    // In a process group of its own, whose parent (this test) is in
    // another group of the session: not an orphaned group, whose stops the
    // kernel discards, however the test runner was started.
    let mut lc = Guard(
        server
            .lc(&["lock", "tstp", "-c", &script])
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let child = read_pid(&pid_file);
    signal(lc.pid(), libc::SIGTSTP);
    assert_both_stopped(child, lc.pid(), String::new);
    std::fs::write(&go, "").unwrap();
    assert!(
        holds_for(QUIET, || !done.exists()),
        "the command ran on while stopped"
    );
    signal(lc.pid(), libc::SIGCONT);
    assert_eq!(lc.wait_for(Duration::from_secs(10)), Some(0));
    assert!(done.exists());
    expect_status(&mut server.lc(&["trylock", "tstp", "--", "true"]), 0);
}

/// A shell waits in `vfork` for a child until that child calls `exec`
/// (dash does so for every command): a SIGTSTP that stops the child before
/// its `exec` leaves the shell in uninterruptible sleep, never stopped, so
/// lc-cli must not wait for the command's stop to stop itself (it did, and
/// the job never stopped: seen in CI with `while ...; do sleep 0.05; done`).
/// Here the window is held open: the vfork child waits for a file.
#[test]
fn sigtstp_stops_lc_cli_too_when_the_command_waits_in_vfork() {
    let server = Server::start();
    let (dir, [pid_file, go]) = temp_files(["pid", "go"]);
    let source = dir.path().join("vfork_wait.c");
    std::fs::write(
        &source,
        r#"#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "w");
    fprintf(f, "%d\n", getpid());
    fclose(f);
    if (vfork() == 0) {
        while (access(argv[2], F_OK) != 0) usleep(20000);
        _exit(0);
    }
    return 0;
}
"#,
    )
    .unwrap();
    let program = dir.path().join("vfork_wait");
    let built = std::process::Command::new("cc")
        .arg("-o")
        .arg(&program)
        .arg(&source)
        .status()
        .expect("cc (gcc) to build the test program");
    assert!(built.success(), "cc failed");
    let (program, pid_arg, go_arg) = (
        program.display().to_string(),
        pid_file.display().to_string(),
        go.display().to_string(),
    );
    let mut lc = Guard(
        server
            .lc(&["lock", "vfork", "--", &program, &pid_arg, &go_arg])
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let command = read_pid(&pid_file);
    assert!(
        wait_until(Duration::from_secs(10), || proc_state(command) == Some('D')),
        "the command never waited in vfork: {:?}",
        proc_state(command)
    );
    signal(lc.pid(), libc::SIGTSTP);
    assert!(
        wait_until(Duration::from_secs(10), || proc_state(lc.pid())
            == Some('T')),
        "lc-cli did not stop: lc-cli {:?}, command {:?}",
        proc_state(lc.pid()),
        proc_state(command)
    );
    // The vfork child is what stopped; the shell-like parent still waits.
    let children = std::fs::read_to_string(format!("/proc/{command}/task/{command}/children"))
        .unwrap_or_default();
    let child: i32 = children.trim().parse().expect("the vfork child");
    assert_eq!(proc_state(child), Some('T'));
    assert_eq!(proc_state(command), Some('D'));
    std::fs::write(&go, "").unwrap();
    signal(lc.pid(), libc::SIGCONT);
    assert_eq!(lc.wait_for(Duration::from_secs(10)), Some(0));
    expect_status(&mut server.lc(&["trylock", "vfork", "--", "true"]), 0);
}

/// Issue 11, item 10: the status a parent reads is "killed by N", after the
/// release, when the command died of N or N stopped the wait; a status that
/// is only a number stays a number; SIGQUIT leaves no core file of lc-cli.
#[test]
fn lc_cli_dies_of_the_signal_its_command_died_of() {
    use std::os::unix::process::ExitStatusExt;
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    for (sig, name) in [
        (libc::SIGINT, "INT"),
        (libc::SIGUSR1, "USR1"),
        (libc::SIGQUIT, "QUIT"),
    ] {
        let status = server
            .lc(&["lock", "die", "-c", &format!("kill -{name} $$")])
            .current_dir(dir.path())
            .status()
            .unwrap();
        assert_eq!(status.signal(), Some(sig), "{name}: {status:?}");
        assert!(!status.core_dumped(), "{name}: lc-cli dumped core");
        // Released before dying.
        expect_status(&mut server.lc(&["trylock", "die", "true"]), 0);
    }
    let cores: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(cores.is_empty(), "{cores:?}");
    // Exit 130 is a status, not a signal.
    let status = server
        .lc(&["lock", "die", "-c", "exit 130"])
        .status()
        .unwrap();
    assert_eq!((status.code(), status.signal()), (Some(130), None));
}

#[test]
fn a_signal_that_stops_the_wait_kills_lc_cli_with_it() {
    use std::os::unix::process::ExitStatusExt;
    let server = Server::start();
    expect_status(&mut server.lc(&["lock", "--source", "holder", "w"]), 0);
    let mut waiter = server
        .lc(&[
            "lock",
            "--source",
            "waiter",
            "w",
            "touch",
            "/nonexistent/ran",
        ])
        .spawn()
        .unwrap();
    server.wait_queued("w", "waiter");
    signal(waiter.id() as i32, libc::SIGTERM);
    let status = waiter.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    assert!(
        wait_until(Duration::from_secs(10), || server.logged(&["withdraw 'w'"])),
        "{}",
        server.log()
    );
}

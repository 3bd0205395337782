//! A frozen lc-cli under libfaketime (issue 42, item 3): lc-cli run with
//! libfaketime preloaded (`FAKETIME="+0 x1"`, the clock as it is, and
//! `"+0 x2"`, twice as fast) holds a key of the built-in server
//! (`--reclaim-grace 3s`) and is stopped with SIGSTOP for 6 s while a
//! second lc-cli, without libfaketime, waits for the key. Whatever clock
//! lc-cli's own code reads, the guardian must stop the holder's command
//! before the server hands the key on: its logged end comes before the
//! waiter's logged start, every trial. (The guardian once read libc's
//! clock in lc-cli's memory, libfaketime's clock with it, and the two
//! commands overlapped in 7 of 9 trials with x1.)
//! Who ran when is read from the commands' own logged times, on the real
//! clock: the holder's command drops libfaketime before it logs anything.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::timeline::{alive, gone_at, now_ns, OnTerm, Timeline};
use common::{wait_until, Serve, Server};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const TRIALS: usize = 5;
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
/// How long the holder's lc-cli is stopped: twice the server's reclaim
/// grace (3 s).
const FROZEN: Duration = Duration::from_secs(6);
const LIMIT: Duration = Duration::from_secs(30);

fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lc-cli")
}

/// [`TRIALS`] frozen holders under libfaketime with `faketime` (its
/// `FAKETIME`), each trial's margin (ms) from the holder command's end to
/// the waiter's start printed; fails on an overlap (after all the trials,
/// counting them) or a holder's command that lives on.
fn frozen_under_faketime(faketime: &str) {
    assert!(
        std::path::Path::new(FAKETIME_LIB).exists(),
        "{FAKETIME_LIB} missing: install Debian's libfaketime package"
    );
    let server: Server = Serve::new().args(&["--reclaim-grace", "3s"]).start();
    let mut margins = Vec::new();
    let mut timelines = Vec::new();
    for trial in 0..TRIALS {
        let dir = tempfile::tempdir().unwrap();
        let tl = Timeline::new(dir.path());
        let key = format!("faked{trial}");
        // The command leaves libfaketime at once: a shell of its own (same
        // pid, same process group) whose `date` reads the real clock, as
        // the waiter's does.
        let script = dir.path().join("holder.sh");
        std::fs::write(&script, tl.holder("a", OnTerm::LogAndExit)).unwrap();
        let holder = format!("unset LD_PRELOAD FAKETIME; exec sh {}", script.display());
        let mut a_cmd = server.lc(&["lock", &key, "--source", "a", "-c", &holder]);
        a_cmd
            .env("LD_PRELOAD", FAKETIME_LIB)
            .env("FAKETIME", faketime);
        let a = spawn(a_cmd);
        assert!(
            wait_until(LIMIT, || tl.start_of("a").is_some()),
            "trial {trial}: the holder never started:\n{}",
            tl.text()
        );
        let (_, a_pid) = tl.start_of("a").unwrap();
        let b_script = format!("{}; sleep 0.2", tl.one_shot("b"));
        let b = spawn(server.lc(&["lock", &key, "--source", "b", "-c", &b_script]));
        server.wait_queued(&key, "b");
        let lc_a = Pid::from_raw(a.id() as i32);
        kill(lc_a, Signal::SIGSTOP).unwrap();
        // Frozen for FROZEN whatever happens meanwhile; the holder's
        // command watched all along, for when it is first seen gone (a
        // SIGKILL leaves no logged end).
        let frozen = Instant::now();
        let mut seen_gone = None;
        while frozen.elapsed() < FROZEN {
            if seen_gone.is_none() && !alive(a_pid) {
                seen_gone = Some(now_ns());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        kill(lc_a, Signal::SIGCONT).unwrap();
        let seen_gone = seen_gone.or_else(|| gone_at(a_pid, LIMIT));
        let (a_code, a_err) = common::finish_within(LIMIT, a);
        let (b_code, b_err) = common::finish_within(LIMIT, b);
        let text = tl.text();
        let seen_gone = seen_gone
            .unwrap_or_else(|| panic!("trial {trial}: the holder's command lives on:\n{text}"));
        // Its logged end, or if it logged none (killed), an upper bound:
        // when it was first seen gone.
        let (a_end, how) = match tl.end_of("a") {
            Some(end) => (end, "logged its end"),
            None => (seen_gone, "was seen gone (no end logged)"),
        };
        let (b_start, _) = tl
            .start_of("b")
            .unwrap_or_else(|| panic!("trial {trial}: the waiter never ran: {b_err}\n{text}"));
        assert_eq!(b_code, Some(0), "trial {trial}: {b_err}");
        let margin = (b_start - a_end) as f64 / 1e6;
        let line = format!(
            "trial {trial}: the waiter started {margin:.1} ms after the holder's command {how} \
             (holder's lc-cli {a_code:?}: {})",
            a_err.trim().replace('\n', " | ")
        );
        eprintln!("{line}");
        margins.push(margin);
        timelines.push(format!("{line}\n{text}"));
    }
    let overlaps: Vec<String> = margins
        .iter()
        .zip(&timelines)
        .enumerate()
        .filter(|(_, (m, _))| **m <= 0.0)
        .map(|(_, (_, text))| text.clone())
        .collect();
    assert!(
        overlaps.is_empty(),
        "FAKETIME={faketime:?}: the waiter's command started before the frozen holder's ended in {} of {TRIALS} trials:\n{}",
        overlaps.len(),
        overlaps.join("\n")
    );
}

#[test]
fn a_frozen_holder_under_libfaketime_at_the_real_rate() {
    frozen_under_faketime("+0 x1");
}

#[test]
fn a_frozen_holder_under_libfaketime_twice_as_fast() {
    frozen_under_faketime("+0 x2");
}

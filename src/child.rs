//! Running the command: spawning it in its own process group, forwarding
//! signals to that group, job control at a terminal, stopping it by policy,
//! and turning its end into our exit status.
//!
//! The child is reaped with `waitpid(WUNTRACED)` on each SIGCHLD, so its stops
//! are seen too (tokio's `Child::wait` cannot see them): when Ctrl-Z stops it,
//! lc-cli takes the terminal back and stops itself, and when `fg` continues
//! lc-cli it gives the terminal back to the child's group and continues it.
//!
//! The command is over when its whole process group is, as with flock(1),
//! whose lock a background job inherits: lc-cli is a child subreaper, so the
//! group's orphans (`sleep 3 &` of a shell that exited) are reparented to it
//! and reaped (`waitpid(-pgid)`), and the supervision ends only when the
//! group is empty (`killpg(pgid, 0)` fails with ESRCH). Until then signals
//! still go to the group and a stop (a lost lock) applies to all of it. The
//! status is the main command's. A process that leaves the group
//! (`setsid`, a daemon) escapes: it does not keep the key.

use std::ffi::OsString;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::exit::ExitCode;
use crate::signals::{Signals, FORWARDED};
use crate::spawn::Spawn;
use crate::terminal::{self, Terminal};

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChildEnd {
    Exited(i32),
    Signalled(i32),
}

impl ChildEnd {
    pub(crate) fn exit_code(self) -> ExitCode {
        match self {
            ChildEnd::Exited(code) => ExitCode::Raw(code),
            ChildEnd::Signalled(sig) => ExitCode::Signal(sig),
        }
    }
}

/// Why the command could not start, and the status that says so.
pub(crate) struct SpawnError {
    pub code: ExitCode,
    pub reason: String,
}

pub(crate) struct Running<'t> {
    /// The child's pid, which is also its process group id.
    pid: Pid,
    terminal: Option<&'t Terminal>,
    /// How the main command ended.
    ended: Option<ChildEnd>,
    /// No process is left in the group: its id may be reused from now on.
    group_gone: bool,
    /// lc-cli got SIGTSTP and passed it on to the command, at this time;
    /// with [`STOP_LOOK`], whether the command is frozen without stopping.
    passed_on_stop: Option<Instant>,
    /// The command was seen in uninterruptible sleep at the last look.
    seen_frozen: bool,
    /// At the last [`VFORK_LOOK`], the command was seen waiting in `vfork`
    /// for a child of its that is stopped.
    seen_stuck: bool,
}

/// The errno the child reports when lc-cli died before the command could
/// start (`exec` itself never fails with it), so the parent side can name
/// the cause; the child cannot build a message (no allocation between
/// clone and exec, `spawn`).
const PARENT_GONE: i32 = libc::ESRCH;

/// How often, once the main command ended, lc-cli looks whether its group
/// is empty: a member that is not our child ends without a SIGCHLD to us.
const GROUP_POLL: Duration = Duration::from_millis(50);

/// After passing SIGTSTP on, how often lc-cli looks at a command that has
/// not stopped yet, and until when: a shell waiting in `vfork` for a child
/// that the stop caught before its `exec` (dash does this for every
/// command) sits in uninterruptible sleep and cannot stop until that child
/// runs again, so no stop of it is ever reported; seen so at two looks in a
/// row, the job is as stopped as it gets and lc-cli stops too. A command
/// that ignores SIGTSTP runs on, and so does lc-cli.
const STOP_LOOK: Duration = Duration::from_millis(100);
const STOP_LOOK_FOR: Duration = Duration::from_secs(5);

/// While the command's group has the terminal, how often lc-cli looks
/// whether Ctrl-Z caught the command in `vfork`: SIGTSTP then reaches only
/// that group, so lc-cli is not told; the vfork child stops before its
/// `exec`, and the command, waiting for it in uninterruptible sleep, never
/// stops, so no stop of lc-cli's child is reported either. Seen so at two
/// looks in a row (the command in `D`, a child of it in `T`), lc-cli stops
/// itself and its group as Ctrl-Z would have, and continues the command
/// once continued. (A vfork child stopped on purpose by someone with
/// SIGSTOP before its `exec` looks the same; that is rare enough.)
const VFORK_LOOK: Duration = Duration::from_millis(200);

/// Starts `argv` in its own process group with `env` added. At a terminal
/// where lc-cli is in the foreground, the child's group becomes the
/// foreground group (the child does it itself before exec, so it never reads
/// the terminal from the background). Signals must already be caught
/// ([`Signals::install`]), or SIGCHLD could be missed.
/// What the command never inherits from lc-cli's environment.
const CLEARED: &[&str] = &[
    "LC_LOCK_TOKEN",
    "LC_LOCK_TOKENS",
    "LC_KEYS",
    "LC_TOKEN",
    "LC_TOKEN_FILE",
];

pub(crate) fn spawn<'t>(
    argv: &[OsString],
    env: &[(String, String)],
    terminal: Option<&'t Terminal>,
    announce: Option<RawFd>,
) -> Result<Running<'t>, SpawnError> {
    // The group's orphans become our children, so we can reap them and know
    // when the group is empty. Process-wide, and harmless to repeat.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let tty = terminal
        .filter(|t| t.we_are_foreground())
        .map(|t| t.raw_fd());
    // A token inherited from an outer lc-cli would fence with the wrong
    // lock; the team server's token is lc-cli's credential, not the
    // command's (a deploy script's log or a `set -x` would show it).
    let started = Spawn::new(argv, env, CLEARED).and_then(|mut spawn| {
        spawn.tty = tty;
        spawn.announce = announce;
        spawn.parent_gone = PARENT_GONE;
        spawn.start()
    });
    let pid = started.map_err(|e| {
        if let (Some(t), Some(_)) = (terminal, tty) {
            // The child may have taken the terminal before exec failed.
            let _ = t.give_to(nix::unistd::getpgrp());
        }
        if e.raw_os_error() == Some(PARENT_GONE) {
            return SpawnError {
                code: ExitCode::CannotExecute,
                reason: "lc-cli exited before the command started".into(),
            };
        }
        match e.kind() {
            io::ErrorKind::NotFound => SpawnError {
                code: ExitCode::NotFound,
                reason: "command not found".into(),
            },
            _ => SpawnError {
                code: ExitCode::CannotExecute,
                reason: format!("cannot execute: {e}"),
            },
        }
    })?;
    if let (Some(t), Some(_)) = (terminal, tty) {
        // Also from this side, in case the child's own attempt failed.
        let _ = t.give_to(pid);
    }
    Ok(Running {
        pid,
        terminal,
        ended: None,
        group_gone: false,
        passed_on_stop: None,
        seen_frozen: false,
        seen_stuck: false,
    })
}

impl Running<'_> {
    /// The command's process group (its pid).
    pub(crate) fn pgid(&self) -> Pid {
        self.pid
    }

    /// Forwards signals and follows the child's stops until it has ended and
    /// its process group is empty; returns how the child ended.
    /// Cancel-safe: nothing is lost when dropped between signals.
    pub(crate) async fn supervise(&mut self, signals: &mut Signals) -> Result<ChildEnd> {
        loop {
            if let (Some(end), true) = (self.ended, self.group_gone) {
                return Ok(end);
            }
            tokio::select! {
                sig = signals.recv() => self.handle(sig)?,
                _ = tokio::time::sleep(GROUP_POLL), if self.ended.is_some() => self.reap()?,
                _ = tokio::time::sleep(STOP_LOOK), if self.passed_on_stop.is_some() => {
                    self.look_at_stop()
                }
                _ = tokio::time::sleep(VFORK_LOOK), if self.watches_vfork() => {
                    self.look_at_vfork()
                }
            }
        }
    }

    /// SIGTERM to the group (unless `term` is false: someone sent it
    /// already), then SIGKILL after `grace`; waits for the end of the child
    /// and of every process left in its group.
    pub(crate) async fn stop(
        &mut self,
        signals: &mut Signals,
        grace: Duration,
        term: bool,
    ) -> Result<ChildEnd> {
        if term {
            self.signal_group(Signal::SIGTERM);
        }
        self.signal_group(Signal::SIGCONT);
        if let Ok(end) = tokio::time::timeout(grace, self.supervise(signals)).await {
            return end;
        }
        self.signal_group(Signal::SIGKILL);
        self.supervise(signals).await
    }

    fn handle(&mut self, sig: i32) -> Result<()> {
        match sig {
            libc::SIGCHLD => self.reap(),
            libc::SIGCONT => {
                self.resume();
                Ok(())
            }
            libc::SIGTSTP => {
                // Stop the command first; lc-cli follows once it has stopped.
                self.passed_on_stop = Some(Instant::now());
                self.seen_frozen = false;
                self.signal_group(Signal::SIGTSTP);
                Ok(())
            }
            sig if FORWARDED.contains(&sig) => {
                if let Ok(sig) = Signal::try_from(sig) {
                    self.signal_group(sig);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Collects every state change in the child's group since the last
    /// SIGCHLD: the child's own (its end, its stops) and the ends of the
    /// group's orphans; then, once the child has ended, whether anyone is
    /// left in the group.
    fn reap(&mut self) -> Result<()> {
        if self.group_gone {
            return Ok(());
        }
        while self.ended.is_none() {
            match waitpid(
                self.pid,
                Some(WaitPidFlag::WUNTRACED | WaitPidFlag::WNOHANG),
            ) {
                Ok(WaitStatus::Exited(_, code)) => self.end(ChildEnd::Exited(code)),
                Ok(WaitStatus::Signaled(_, sig, _)) => self.end(ChildEnd::Signalled(sig as i32)),
                Ok(WaitStatus::Stopped(_, sig)) => self.stopped(sig),
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) => {}
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e).context("waiting for the command"),
            }
        }
        // The group's orphans, reparented to us: reaped, nothing more (the
        // child itself, should it have ended just now, is not lost).
        let group = Pid::from_raw(-self.pid.as_raw());
        loop {
            match waitpid(group, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                Ok(WaitStatus::Exited(pid, code)) if pid == self.pid => {
                    self.end(ChildEnd::Exited(code))
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == self.pid => {
                    self.end(ChildEnd::Signalled(sig as i32))
                }
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => return Err(e).context("waiting for the command's group"),
            }
        }
        // Zombies of the group that are ours are reaped by now; one that is
        // not ours has a live parent in the group.
        if self.ended.is_some() && killpg(self.pid, None) == Err(Errno::ESRCH) {
            self.group_gone = true;
        }
        Ok(())
    }

    fn end(&mut self, end: ChildEnd) {
        self.ended = Some(end);
        if let Some(t) = self.terminal {
            t.take_back_from(self.pid);
        }
    }

    /// The child stopped. A terminal stop (Ctrl-Z, or reading the terminal
    /// from the background) stops lc-cli too, so the shell sees the job
    /// stopped; once continued, the child is continued.
    fn stopped(&mut self, sig: Signal) {
        if self.passed_on_stop.take().is_some() && sig == Signal::SIGTSTP {
            // lc-cli was told to stop and passed it on: now it stops too.
            return self.follow_stop();
        }
        let Some(t) = self.terminal else { return };
        if !matches!(sig, Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU) {
            return; // stopped on purpose by someone: theirs to continue
        }
        if sig != Signal::SIGTSTP && t.we_are_foreground() {
            // It used the terminal from the background, but we have the
            // terminal now (a shell's `fg` of a running job sends no
            // SIGCONT): hand it on instead of stopping.
            self.resume();
            return;
        }
        self.stop_as_ctrl_z(t);
    }

    /// Ctrl-Z reached only the child's group: stop ours as it would have
    /// without us (the rest of a pipeline, a shell without job control);
    /// once continued, continue the child.
    fn stop_as_ctrl_z(&mut self, t: &Terminal) {
        t.take_back_from(self.pid);
        terminal::stop_self(true);
        // Here we were continued (or never stopped: an orphaned group).
        self.resume();
    }

    /// Whether to look for the command stuck in `vfork` (see
    /// [`VFORK_LOOK`]): only while it runs at a terminal and no passed-on
    /// SIGTSTP is being followed already.
    fn watches_vfork(&self) -> bool {
        self.terminal.is_some() && self.ended.is_none() && self.passed_on_stop.is_none()
    }

    fn look_at_vfork(&mut self) {
        let Some(t) = self.terminal else { return };
        let stuck = t.foreground() == Some(self.pid)
            && proc_state(self.pid) == Some('D')
            && has_stopped_child(self.pid);
        if !stuck {
            self.seen_stuck = false;
        } else if std::mem::replace(&mut self.seen_stuck, true) {
            self.seen_stuck = false;
            self.stop_as_ctrl_z(t);
        }
    }

    /// Stops lc-cli after its command (see [`STOP_LOOK`]); once continued,
    /// continues the command.
    fn follow_stop(&mut self) {
        if let Some(t) = self.terminal {
            t.take_back_from(self.pid);
        }
        terminal::stop_self(false);
        self.resume();
    }

    /// A passed-on SIGTSTP not followed by the command's stop yet.
    fn look_at_stop(&mut self) {
        let Some(since) = self.passed_on_stop else {
            return;
        };
        let frozen = proc_state(self.pid) == Some('D');
        if frozen && std::mem::replace(&mut self.seen_frozen, true) {
            self.passed_on_stop = None;
            self.follow_stop();
        } else if !frozen {
            self.seen_frozen = false;
            if since.elapsed() >= STOP_LOOK_FOR {
                self.passed_on_stop = None;
            }
        }
    }

    /// lc-cli was continued: hand the terminal back if we have it, and
    /// continue the child's group.
    fn resume(&mut self) {
        if let Some(t) = self.terminal {
            if t.we_are_foreground() {
                let _ = t.give_to(self.pid);
            }
        }
        self.signal_group(Signal::SIGCONT);
    }

    fn signal_group(&self, sig: Signal) {
        if self.group_gone {
            return; // its group id may belong to someone else by now
        }
        // The child alone, if its group could not be signalled: only while
        // it is not reaped, so its pid cannot belong to anyone else.
        if killpg(self.pid, sig).is_err() && self.ended.is_none() {
            let _ = kill(self.pid, sig);
        }
    }
}

/// A process's state letter (proc(5): `R`, `S`, `D`, `T`, ...).
fn proc_state(pid: Pid) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].chars().next()
}

/// Whether a child of `pid` is stopped (state `T`).
fn has_stopped_child(pid: Pid) -> bool {
    let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) else {
        return false;
    };
    children
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .any(|c| proc_state(Pid::from_raw(c)) == Some('T'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(script: &str) -> Vec<OsString> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    #[test]
    fn ends_statuses_and_stop_escalates_to_sigkill() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut signals = Signals::install().unwrap();
            let mut c = spawn(&argv("exit 3"), &[], None, None).ok().unwrap();
            assert_eq!(
                c.supervise(&mut signals).await.unwrap(),
                ChildEnd::Exited(3)
            );
            let mut c = spawn(&argv("kill -USR2 $$"), &[], None, None).ok().unwrap();
            assert_eq!(
                c.supervise(&mut signals).await.unwrap(),
                ChildEnd::Signalled(libc::SIGUSR2)
            );
            // Ignores SIGTERM: killed after the grace.
            let mut c = spawn(
                &argv("trap '' TERM; while :; do sleep 0.05; done"),
                &[],
                None,
                None,
            )
            .ok()
            .unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            let started = std::time::Instant::now();
            let end = c
                .stop(&mut signals, Duration::from_millis(300), true)
                .await
                .unwrap();
            assert_eq!(end, ChildEnd::Signalled(libc::SIGKILL));
            assert!(started.elapsed() >= Duration::from_millis(300));
            // Obeys SIGTERM: ends at once with its own status.
            let mut c = spawn(
                &argv("trap 'exit 9' TERM; while :; do sleep 0.05; done"),
                &[],
                None,
                None,
            )
            .ok()
            .unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            let end = c
                .stop(&mut signals, Duration::from_secs(20), true)
                .await
                .unwrap();
            assert_eq!(end, ChildEnd::Exited(9));
            let err = spawn(&["/nonexistent/x".into()], &[], None, None)
                .err()
                .unwrap();
            assert_eq!(err.code, ExitCode::NotFound);
            let err = spawn(&["/".into()], &[], None, None).err().unwrap();
            assert_eq!(err.code, ExitCode::CannotExecute);
        });
    }
}

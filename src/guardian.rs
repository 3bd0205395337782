//! The guardian: a small process outside lc-cli's own that stops the
//! command's process group when lc-cli cannot.
//!
//! lc-cli renews its hold; if lc-cli is frozen (SIGSTOP, a debugger, swap)
//! its command would run on past the lease, beside the next holder. So at
//! each command lc-cli starts this process (the same binary, re-executed
//! with [`ENV`] set, in a process group of its own so no group signal or
//! terminal signal for lc-cli reaches it) and feeds it, over a pipe on its
//! stdin, the deadlines of the last confirmed renewal as absolute
//! `CLOCK_BOOTTIME` times. Past `term_at` with no newer word it sends
//! SIGTERM (and SIGCONT) to the command's group, past `kill_at` SIGKILL.
//! It looks at least every [`POLL`], so when the whole machine was paused
//! it acts within that of waking.
//!
//! If the pipe ends without lc-cli's goodbye (lc-cli was SIGKILLed), it
//! stops the group itself (SIGTERM now, SIGKILL after `--kill-after` or at
//! `kill_at`, whichever is first) and exits once no live process is left in
//! the group, or soon after the SIGKILL. A descriptor it was given (the
//! PostgreSQL connection, whose end frees the key) stays open until then,
//! so the key outlives its command.
//!
//! Lines on the pipe: `P PGID`, `E TERM_NS KILL_NS`, `S` (lc-cli is
//! stopping the group itself: no SIGTERM from here, only the SIGKILL at
//! `kill_at`), `G` (lc-cli ends normally: go).

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::backend::Expiry;

/// Set in the guardian's environment: `KILL_AFTER_MS KEPT_FD` (`-` for no
/// descriptor). Checked first thing in `main`.
pub const ENV: &str = "LC_CLI_GUARDIAN";

/// The longest the guardian sleeps between two looks at its deadlines.
pub const POLL: Duration = Duration::from_millis(50);

/// After its SIGKILL, how long an orphaned guardian waits for the group
/// to be reaped before it exits anyway (a zombie nobody reaps runs no code).
const AFTER_KILL: Duration = Duration::from_secs(2);

/// Now on `CLOCK_BOOTTIME`, in nanoseconds: a clock both processes read
/// alike, which also counts a suspended machine (the service's lease runs
/// on meanwhile).
pub fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct given.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An `Instant` as a `CLOCK_BOOTTIME` time: what is left of it from now.
fn on_boottime(at: Instant) -> u64 {
    boottime_ns() + at.saturating_duration_since(Instant::now()).as_nanos() as u64
}

/// lc-cli's side: the pipe to a running guardian.
pub struct Guardian {
    pipe: std::fs::File,
    sent: Option<Expiry>,
    dismissed: bool,
}

impl Guardian {
    /// Starts the guardian, not waiting for it to be ready (what it is told
    /// meanwhile waits in the pipe). `keep`: a descriptor it holds open
    /// until the command's group is gone.
    pub fn start(kill_after: Duration, keep: Option<BorrowedFd<'_>>) -> io::Result<Guardian> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills the two descriptors, which we then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just made by pipe2, owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // A stopped guardian must never block lc-cli: a full pipe drops a line.
        nix::fcntl::fcntl(
            &write,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )?;
        // The kept descriptor crosses exec as a copy without CLOEXEC, made
        // just for this spawn (no other process is started meanwhile) and
        // closed here right after.
        let kept: Option<OwnedFd> = match keep {
            Some(fd) => {
                let raw = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD(3))?;
                // SAFETY: F_DUPFD returned a new descriptor that we own.
                Some(unsafe { OwnedFd::from_raw_fd(raw) })
            }
            None => None,
        };
        let kept_arg = kept
            .as_ref()
            .map_or("-".to_string(), |fd| fd.as_raw_fd().to_string());
        let mut cmd = Command::new("/proc/self/exe");
        cmd.env_clear()
            .env(ENV, format!("{} {kept_arg}", kill_after.as_millis()))
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0);
        use std::os::unix::process::CommandExt;
        cmd.arg0("lc-cli-guardian");
        let child = cmd.spawn()?;
        drop(kept);
        // Reaped by whoever inherits it: lc-cli does not wait for it.
        drop(child);
        Ok(Guardian {
            pipe: std::fs::File::from(write),
            sent: None,
            dismissed: false,
        })
    }

    fn say(&mut self, line: &str) {
        // A guardian that died or is stopped cannot be helped from here.
        let _ = self.pipe.write_all(line.as_bytes());
    }

    /// The group to guard: the command's.
    pub fn guard(&mut self, pgid: Pid) {
        self.say(&format!("P {}\n", pgid.as_raw()));
    }

    /// The deadlines of the last confirmed word, sent when they changed.
    pub fn update(&mut self, expiry: Option<Expiry>) {
        let Some(e) = expiry else { return };
        if self.sent == Some(e) {
            return;
        }
        self.sent = Some(e);
        let line = format!("E {} {}\n", on_boottime(e.term_at), on_boottime(e.kill_at));
        self.say(&line);
    }

    /// lc-cli is stopping the group itself (a loss it noticed).
    pub fn stopping(&mut self) {
        self.say("S\n");
    }

    /// lc-cli is done with the command: the guardian goes.
    pub fn dismiss(mut self) {
        self.say("G\n");
        self.dismissed = true;
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        // Every way out of lc-cli that is not a kill says goodbye.
        if !self.dismissed {
            self.say("G\n");
        }
    }
}

/// The guardian's side: what it watches.
#[derive(Default)]
struct Watch {
    pgid: Option<Pid>,
    term_at: Option<u64>,
    kill_at: Option<u64>,
    termed: bool,
    killed_at: Option<Instant>,
    /// No live process left in the group: nothing more to signal (its id
    /// may be reused).
    gone: bool,
}

/// The guardian process: never returns.
pub fn main(spec: &str) -> ! {
    for sig in [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGQUIT,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
        Signal::SIGPIPE,
    ] {
        // SAFETY: SIG_IGN installs no handler.
        let _ = unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigIgn) };
    }
    let mut parts = spec.split(' ');
    let kill_after = parts
        .next()
        .and_then(|ms| ms.parse().ok())
        .map_or(Duration::from_secs(10), Duration::from_millis);
    // Held only to be closed when this process ends.
    let _kept: Option<OwnedFd> = parts
        .next()
        .and_then(|fd| fd.parse::<i32>().ok())
        // SAFETY: lc-cli passed this descriptor to us, for us alone.
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    let mut w = Watch::default();
    let stdin = io::stdin();
    let mut pending = Vec::new();
    let mut orphaned = false;
    loop {
        let now = boottime_ns();
        let next = [w.term_at.filter(|_| !w.termed), w.kill_at]
            .into_iter()
            .flatten()
            .filter(|&t| w.killed_at.is_none() && t > now)
            .min()
            .map_or(POLL, |t| Duration::from_nanos(t - now).min(POLL));
        if !orphaned {
            match read_lines(stdin.as_fd(), next, &mut pending) {
                Read::Lines(lines) => {
                    for line in lines {
                        if !w.take(&line) {
                            std::process::exit(0);
                        }
                    }
                }
                Read::Nothing => {}
                Read::Eof => {
                    orphaned = true;
                    w.orphaned(kill_after);
                }
            }
        } else {
            std::thread::sleep(next);
        }
        w.check_group(orphaned);
        if w.gone && orphaned {
            std::process::exit(0);
        }
        w.enforce();
        if let (true, Some(at)) = (orphaned, w.killed_at) {
            if at.elapsed() >= AFTER_KILL {
                std::process::exit(0);
            }
        }
    }
}

impl Watch {
    /// One line from lc-cli; false for its goodbye.
    fn take(&mut self, line: &str) -> bool {
        let mut f = line.split(' ');
        match f.next() {
            Some("P") => self.pgid = f.next().and_then(|p| p.parse().ok()).map(Pid::from_raw),
            Some("E") => {
                let t: Option<u64> = f.next().and_then(|v| v.parse().ok());
                let k: Option<u64> = f.next().and_then(|v| v.parse().ok());
                if let (Some(t), Some(k)) = (t, k) {
                    self.term_at = Some(t);
                    self.kill_at = Some(k);
                }
            }
            Some("S") => self.termed = true,
            Some("G") => return false,
            _ => {}
        }
        true
    }

    /// lc-cli is gone without a word: stop the group now.
    fn orphaned(&mut self, kill_after: Duration) {
        let by = boottime_ns() + kill_after.as_nanos() as u64;
        self.kill_at = Some(self.kill_at.map_or(by, |k| k.min(by)));
        self.term_at = Some(0);
        self.termed = false;
    }

    fn enforce(&mut self) {
        let Some(pgid) = self.pgid.filter(|_| !self.gone) else {
            return;
        };
        let now = boottime_ns();
        if !self.termed && self.term_at.is_some_and(|t| now >= t) {
            self.termed = true;
            let _ = killpg(pgid, Signal::SIGTERM);
            let _ = killpg(pgid, Signal::SIGCONT);
        }
        if self.killed_at.is_none() && self.kill_at.is_some_and(|k| now >= k) {
            self.killed_at = Some(Instant::now());
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }

    /// Whether anyone is left in the group. While lc-cli lives it reaps
    /// the group, so ESRCH tells; an orphaned group's zombies may wait for
    /// a reaper, so there only a live (not zombie) member counts.
    fn check_group(&mut self, orphaned: bool) {
        let Some(pgid) = self.pgid.filter(|_| !self.gone) else {
            // lc-cli died before it named the group: nothing to guard.
            self.gone |= orphaned && self.pgid.is_none();
            return;
        };
        self.gone = match killpg(pgid, None) {
            Err(Errno::ESRCH) => true,
            _ => orphaned && !live_member(pgid),
        };
    }
}

/// A process of group `pgid` that is not a zombie, from /proc.
fn live_member(pgid: Pid) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold anything, so
        // the fields are read after its last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next();
        let pgrp = f.nth(1).and_then(|p| p.parse::<i32>().ok());
        if pgrp == Some(pgid.as_raw()) && state != Some("Z") && state != Some("X") {
            return true;
        }
    }
    false
}

enum Read {
    Lines(Vec<String>),
    Nothing,
    Eof,
}

/// Waits up to `wait` for lc-cli's lines.
fn read_lines(fd: BorrowedFd<'_>, wait: Duration, pending: &mut Vec<u8>) -> Read {
    let ms = wait.as_millis().clamp(1, POLL.as_millis()) as i32;
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, valid for the call.
    if unsafe { libc::poll(&mut pfd, 1, ms) } <= 0 {
        return Read::Nothing;
    }
    let mut buf = [0u8; 512];
    match nix::unistd::read(fd, &mut buf) {
        Ok(0) => Read::Eof,
        Ok(n) => {
            pending.extend_from_slice(&buf[..n]);
            let mut lines = Vec::new();
            while let Some(at) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=at).collect();
                lines.push(String::from_utf8_lossy(&line[..at]).into_owned());
            }
            Read::Lines(lines)
        }
        Err(Errno::EINTR) | Err(Errno::EAGAIN) => Read::Nothing,
        Err(_) => Read::Eof,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> Watch {
        Watch::default()
    }

    #[test]
    fn lines_set_the_group_and_the_deadlines() {
        let mut w = watch();
        assert!(w.take("P 4242"));
        assert!(w.take("E 100 200"));
        assert_eq!(w.pgid, Some(Pid::from_raw(4242)));
        assert_eq!((w.term_at, w.kill_at), (Some(100), Some(200)));
        // A newer word moves both; a torn or unknown line changes nothing.
        assert!(w.take("E 300 400"));
        assert!(w.take("E 5"));
        assert!(w.take("X"));
        assert_eq!((w.term_at, w.kill_at), (Some(300), Some(400)));
        assert!(w.take("S"));
        assert!(w.termed);
        assert!(!w.take("G"));
    }

    #[test]
    fn an_orphan_is_stopped_now_and_killed_at_the_earlier_deadline() {
        let mut w = watch();
        w.take("S");
        let now = boottime_ns();
        let kill_at = now + 1_000_000_000;
        w.take(&format!("E {now} {kill_at}"));
        // --kill-after later than the hold's deadline: the deadline wins.
        w.orphaned(Duration::from_secs(10));
        assert_eq!(w.kill_at, Some(kill_at));
        assert_eq!(w.term_at, Some(0));
        assert!(!w.termed, "SIGTERM is sent again, now");
        // With no deadline (PostgreSQL), --kill-after from now.
        let mut w = watch();
        w.orphaned(Duration::from_millis(500));
        let k = w.kill_at.unwrap();
        assert!(k >= now + 500_000_000 && k < boottime_ns() + 600_000_000);
    }

    #[test]
    fn instants_become_boottime_deadlines() {
        let at = Instant::now() + Duration::from_secs(2);
        let left = on_boottime(at) as i128 - boottime_ns() as i128;
        assert!((1_900_000_000..=2_000_000_000).contains(&left), "{left}");
        // A deadline already past is now.
        let past = Instant::now() - Duration::from_millis(10);
        assert!(on_boottime(past) <= boottime_ns());
    }

    #[test]
    fn a_group_of_our_own_is_a_live_member() {
        let me = nix::unistd::getpgrp();
        assert!(live_member(me));
        assert!(!live_member(Pid::from_raw(i32::MAX - 1)));
    }
}

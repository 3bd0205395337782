//! The guardian: a small program of its own that stops the command's
//! process group when lc-cli cannot.
//!
//! lc-cli renews its hold; if lc-cli is frozen (SIGSTOP, a debugger, swap)
//! its command would run on past the lease, beside the next holder. So for
//! each command lc-cli starts this program and feeds it, over a socket, the
//! deadlines of the last confirmed renewal as absolute `CLOCK_BOOTTIME`
//! times. Past `term_at` with no newer word it sends SIGTERM (and SIGCONT)
//! to the command's group, past `kill_at` SIGKILL. The SIGTERM of a stop is
//! sent once, by lc-cli or the guardian, whoever claims it first (a flag in
//! a memfd page both map): a shell runs its `trap` once per SIGTERM it gets,
//! and a cleanup run twice may not end before the SIGKILL. The guardian's
//! claim waits [`TERM_HEAD_START`] past `term_at`, so a lc-cli awake at that
//! deadline makes the stop (and names its cause). It looks at least every
//! [`POLL`], so when the whole machine was paused it acts within that of
//! waking. If the socket ends without lc-cli's goodbye (lc-cli was killed,
//! by SIGKILL or the OOM killer), it stops the group itself: SIGTERM now
//! unless lc-cli sent it, SIGKILL after `--kill-after` or at `kill_at`,
//! whichever is first, and it exits once no live process is left in the
//! group. A descriptor it was handed (the PostgreSQL connection, whose end
//! frees the key) stays open until then, so the key outlives its command.
//!
//! # Its rules, in one place
//!
//! - **A program of its own.** lc-cli starts it as a fresh exec of its own
//!   binary (`/proc/self/exe`, through std's `Command`: posix_spawn, which
//!   execs at once), with `lc-cli-guardian` as its `argv[0]` and `watch
//!   SOCK_FD TERM_FD KILL_AFTER_NS` as its arguments; `main` hands such a
//!   start to [`run_if_asked`] before anything else. From its first
//!   instruction it has its own memory, allocator, thread-local storage and
//!   libc: a breakpoint, a preloaded library or an OOM kill in lc-cli does
//!   not reach it, and it may use std like any program.
//! - **What it inherits:** the socket and the claim's memfd (the only
//!   descriptors lc-cli passes without close-on-exec; it closes every other
//!   one above stderr at its start), stdin and stdout on /dev/null, lc-cli's
//!   stderr (for its one-line errors), lc-cli's environment (so a faked
//!   clock is faked alike on both sides, to within the few milliseconds
//!   between their starts).
//! - **Unreachable by lc-cli's signals:** a process group of its own (no
//!   terminal or group signal for lc-cli reaches it), every signal blocked,
//!   no parent-death signal (it must outlive lc-cli), named
//!   `lc-cli-guardian` (its comm, as `ps -e` and `pgrep` show it).
//! - **Started early:** lc-cli starts it before it connects, so its exec
//!   overlaps the connection and the lock's round trip; it learns the group
//!   (`P`) and the deadlines (`E`) afterwards.
//! - **Reaped by lc-cli:** lc-cli says goodbye as soon as the command's group
//!   is reaped, and waits for the guardian's exit before its own: no
//!   process lc-cli started outlives a lc-cli that was not killed.
//!
//! Lines on the socket: `C` (from the command itself, after it made its
//! group and before its exec: its pid, the group's id, comes in the
//! kernel's credentials, so a lc-cli frozen right after the spawn leaves
//! no command unguarded), `P PGID` (the same, from lc-cli), `E TERM_NS
//! KILL_NS` (sent before the command starts, and at each renewal), `K` (with the
//! descriptor to keep), `S` (lc-cli is stopping the group itself: no
//! SIGTERM from here, only the SIGKILL at `kill_at`), `G` (lc-cli is done
//! with the command: go).

mod socket;
mod watch;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::unistd::Pid;

use crate::backend::Expiry;

pub use watch::run_if_asked;

/// The longest the guardian sleeps between two looks at its deadlines.
pub const POLL: Duration = Duration::from_millis(50);

/// How long past `term_at` the guardian leaves the SIGTERM to lc-cli (at
/// most a quarter of the time from `term_at` to `kill_at`).
pub const TERM_HEAD_START: Duration = Duration::from_millis(100);

/// The guardian's SIGTERM deadline for lc-cli's `term_at` and `kill_at`.
fn guardian_term_at(term_at: u64, kill_at: u64) -> u64 {
    let head_start = (TERM_HEAD_START.as_nanos() as u64).min(kill_at.saturating_sub(term_at) / 4);
    term_at.saturating_add(head_start)
}

/// What `ps` shows for the guardian (15 bytes: the most comm holds), and
/// its `argv[0]`.
const NAME: &str = "lc-cli-guardian";

/// The guardian's first argument.
const WATCH: &str = "watch";

/// How long lc-cli waits for the guardian to go after its goodbye before
/// it kills it (a guardian stopped by someone else's SIGSTOP).
const GOODBYE: Duration = Duration::from_millis(500);

/// Now on `CLOCK_BOOTTIME`, in nanoseconds: a clock both processes read
/// alike, which also counts a suspended machine (the service's lease runs
/// on meanwhile).
pub(crate) fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct given, in this process's
    // own memory (the guardian is a program of its own).
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An `Instant` as a `CLOCK_BOOTTIME` time: what is left of it from now.
fn on_boottime(at: Instant) -> u64 {
    boottime_ns() + at.saturating_duration_since(Instant::now()).as_nanos() as u64
}

/// lc-cli's side: the socket to a running guardian, and the process to reap.
pub(crate) struct Guardian {
    child: Option<Child>,
    sock: UnixStream,
    term: TermClaim,
    sent: Option<Expiry>,
    gone: bool,
}

impl Guardian {
    /// Starts the guardian (see the module's comment): returns as soon as
    /// it is spawned, without waiting for its start-up.
    pub(crate) fn start(kill_after: Duration) -> io::Result<Guardian> {
        let (ours, theirs) = UnixStream::pair()?;
        // Every line the guardian reads carries its sender's pid: the
        // command's announcement (`C`) names its group that way.
        nix::sys::socket::setsockopt(&theirs, nix::sys::socket::sockopt::PassCred, &true)?;
        let (term, term_fd) = TermClaim::new()?;
        // A stopped guardian must never block lc-cli: a full socket drops a line.
        ours.set_nonblocking(true)?;
        // Copies without close-on-exec, the only descriptors the exec passes
        // on (`dup` does not copy the flag). lc-cli runs one thread here and
        // starts no other process meanwhile; they are closed right after.
        let sock_copy = nix::unistd::dup(theirs.as_fd())?;
        let term_copy = nix::unistd::dup(term_fd.as_fd())?;
        let child = Command::new("/proc/self/exe")
            .arg0(NAME)
            .arg(WATCH)
            .arg(sock_copy.as_raw_fd().to_string())
            .arg(term_copy.as_raw_fd().to_string())
            .arg(kill_after.as_nanos().to_string())
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()?;
        drop((sock_copy, term_copy, theirs, term_fd));
        Ok(Guardian {
            child: Some(child),
            sock: ours,
            term,
            sent: None,
            gone: false,
        })
    }

    fn say(&mut self, line: &str) {
        // A guardian that died or is stopped cannot be helped from here.
        let _ = socket::send(self.sock.as_fd(), line.as_bytes(), None);
    }

    /// The socket the command announces itself on before its exec
    /// (`spawn::Spawn::announce`).
    pub(crate) fn announce_fd(&self) -> std::os::fd::RawFd {
        self.sock.as_raw_fd()
    }

    /// A descriptor to hold open until the command's group is gone.
    pub(crate) fn keep(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        socket::send(self.sock.as_fd(), b"K\n", Some(fd))
    }

    /// The group to guard: the command's.
    pub(crate) fn guard(&mut self, pgid: Pid) {
        self.say(&format!("P {}\n", pgid.as_raw()));
    }

    /// The deadlines of the last confirmed word, sent when they changed.
    pub(crate) fn update(&mut self, expiry: Option<Expiry>) {
        let Some(e) = expiry else { return };
        if self.sent == Some(e) {
            return;
        }
        self.sent = Some(e);
        let line = format!("E {} {}\n", on_boottime(e.term_at), on_boottime(e.kill_at));
        self.say(&line);
    }

    /// lc-cli is stopping the group itself (a loss it noticed): true if
    /// the SIGTERM is still lc-cli's to send (the guardian did not send it
    /// already, and now will not).
    pub(crate) fn stopping(&mut self) -> bool {
        self.say("S\n");
        self.term.claim()
    }

    /// The guardian sent the SIGTERM of a stop (lc-cli, frozen, told it
    /// nothing newer in time): the command is being stopped by its hand.
    /// Asked before [`Guardian::stopping`], after which it is always true.
    pub(crate) fn stopped_the_command(&self) -> bool {
        self.term.taken()
    }

    /// True once the guardian's end of the socket is closed (it read to
    /// lc-cli's goodbye or died), waiting at most `limit`.
    fn closed_within(&self, limit: Duration) -> bool {
        use std::io::Read;
        let deadline = Instant::now() + limit;
        let mut buf = [0u8; 64];
        loop {
            match (&self.sock).read(&mut buf) {
                Ok(0) => return true,
                // The guardian writes nothing; an error is a closed end too.
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return true,
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let mut pfd = libc::pollfd {
                fd: self.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one pollfd of our own.
            unsafe { libc::poll(&mut pfd, 1, left.as_millis().max(1) as libc::c_int) };
        }
    }

    /// The command's group is reaped: the guardian has nothing left to
    /// guard and goes now, while lc-cli releases the key.
    pub(crate) fn go(&mut self) {
        if !self.gone {
            self.gone = true;
            self.say("G\n");
        }
    }
}

impl Drop for Guardian {
    /// Every way out of lc-cli that is not a kill says goodbye and reaps
    /// the guardian: it leaves no zombie behind.
    fn drop(&mut self) {
        self.go();
        let Some(mut child) = self.child.take() else {
            return;
        };
        // Its end of the socket closes as it exits (after its memory is
        // gone, right before the kernel reports the exit): so the wait
        // below is that of a process already ending. No end within
        // GOODBYE: it is stopped or stuck.
        if self.closed_within(GOODBYE) {
            let _ = child.wait();
            return;
        }
        // Stopped or stuck: it guards nothing any more (the group is gone).
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Who sends the SIGTERM of a stop: a flag in a memfd page that lc-cli and
/// the guardian both map shared, so they see one flag.
#[derive(Clone, Copy)]
struct TermClaim(&'static AtomicBool);

impl TermClaim {
    /// A fresh flag, and the memfd behind it.
    fn new() -> io::Result<(TermClaim, OwnedFd)> {
        // SAFETY: memfd_create on a name of our own; a descriptor it
        // returns is ours.
        let fd = unsafe {
            let fd = libc::memfd_create(c"lc-cli-term".as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(fd)
        };
        // SAFETY: ftruncate on our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), CLAIM_SIZE as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let claim = TermClaim::map(fd.as_fd())?;
        Ok((claim, fd))
    }

    /// The flag in `fd`'s first bytes.
    fn map(fd: BorrowedFd<'_>) -> io::Result<TermClaim> {
        // SAFETY: a fresh shared mapping, never unmapped (it lives as long
        // as the process), zeroed by the kernel: a false AtomicBool.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                CLAIM_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the page is valid and aligned for as long as the process
        // lives, and only ever accessed atomically.
        Ok(TermClaim(unsafe { &*(page as *const AtomicBool) }))
    }

    fn taken(self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// True for the first caller in either process, false from then on.
    fn claim(self) -> bool {
        !self.0.swap(true, Ordering::SeqCst)
    }
}

/// The claim's memfd is this long (any size would do: one flag).
const CLAIM_SIZE: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_stop_s_sigterm_is_claimed_once_in_either_mapping() {
        let (term, fd) = TermClaim::new().unwrap();
        // The guardian's mapping, of the same memfd.
        let again = TermClaim::map(fd.as_fd()).unwrap();
        assert!(!term.taken() && !again.taken());
        assert!(again.claim());
        assert!(!term.claim());
        assert!(term.taken());
    }
}

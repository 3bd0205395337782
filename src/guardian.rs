//! The guardian: a small process outside lc-cli's own that stops the
//! command's process group when lc-cli cannot.
//!
//! lc-cli renews its hold; if lc-cli is frozen (SIGSTOP, a debugger, swap)
//! its command would run on past the lease, beside the next holder. So for
//! each command lc-cli starts this process and feeds it, over a socket on
//! its side, the deadlines of the last confirmed renewal as absolute
//! `CLOCK_BOOTTIME` times. Past `term_at` with no newer word it sends
//! SIGTERM (and SIGCONT) to the command's group, past `kill_at` SIGKILL.
//! The SIGTERM of a stop is sent once, by lc-cli or the guardian, whoever
//! claims it first (a flag in a page both share): a shell runs its `trap`
//! once per SIGTERM it gets, and a cleanup run twice may not end before the
//! SIGKILL. The guardian's claim waits [`TERM_HEAD_START`] past `term_at`,
//! so a lc-cli awake at that deadline makes the stop (and names its cause).
//! It looks at least every [`POLL`], so when the whole machine was paused
//! it acts within that of waking.
//!
//! It is a process that shares lc-cli's memory, started right before the
//! command with `clone(CLONE_VM)` as posix_spawn starts its child (and as
//! `teardown` starts its helper): not a fork, whose copy of lc-cli's page
//! tables and the copy-on-write faults after it cost the lock path 0.26 to
//! 0.35 ms (BENCHMARKS.md), and not an exec at once, a second load of the
//! binary on the lock path.
//! Not a thread either: a process of its own, which a SIGSTOP, a debugger
//! or a SIGKILL of lc-cli does not reach, and which keeps the shared memory
//! alive when lc-cli is gone. Its code (`watch`) allocates nothing and makes
//! its system calls without libc (`sys`), since lc-cli's heap and errno are
//! its too; where `sys` has no such calls (other architectures than
//! x86-64) it is a copy of lc-cli instead, as the fork was.
//!
//! It puts itself in a process group of its own (no group signal or
//! terminal signal for lc-cli reaches it), starts with every signal
//! blocked, keeps only stderr, its socket and the claim's memfd (stdin and
//! stdout on /dev/null, every other descriptor closed) and names itself
//! `lc-cli-guardian` (its comm, as `ps -e` and `pgrep` show it; its
//! command line is lc-cli's, in the memory they share, until its exec).
//!
//! If the socket ends without lc-cli's goodbye (lc-cli was SIGKILLed), it
//! stops the group itself (SIGTERM now unless lc-cli sent it, SIGKILL after
//! `--kill-after` or at `kill_at`, whichever is first) and exits once no
//! live process is left in the group, or soon after the SIGKILL. A
//! descriptor it was given (the PostgreSQL connection, whose end frees the
//! key, passed with its `K` line) stays open until then, so the key
//! outlives its command. The OOM killer ends every process that shares
//! its victim's memory, so a command still running 0.1 s after its start
//! gets a guardian of its own memory (an exec of lc-cli's binary, see
//! `watch`): only a kill in that first 0.1 s takes the guardian along, and
//! the command then gets its parent-death SIGTERM alone.
//!
//! Lines on the socket: `P PGID`, `E TERM_NS KILL_NS`, `K` (with the
//! descriptor to keep), `S` (lc-cli is stopping the group itself: no
//! SIGTERM from here, only the SIGKILL at `kill_at`), `G` (lc-cli ends
//! normally: go).

mod socket;
mod sys;
mod watch;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::unistd::Pid;

use crate::backend::Expiry;

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

/// After its SIGKILL, how long an orphaned guardian waits for the group
/// to be reaped before it exits anyway (a zombie nobody reaps runs no code).
const AFTER_KILL: Duration = Duration::from_secs(2);

/// What `ps` shows for the guardian (15 bytes: the most comm holds).
const NAME: &std::ffi::CStr = c"lc-cli-guardian";

/// The guardian's stack: its deepest frame holds a 4 KiB directory buffer.
const STACK: usize = 64 * 1024;

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

/// lc-cli's side: the socket to a running guardian.
pub struct Guardian {
    sock: UnixStream,
    term: TermClaim,
    sent: Option<Expiry>,
    dismissed: bool,
}

impl Guardian {
    /// Starts the guardian (see the module's comment).
    pub fn start(kill_after: Duration) -> io::Result<Guardian> {
        let (ours, theirs) = UnixStream::pair()?;
        let (term, term_fd) = TermClaim::new()?;
        // A stopped guardian must never block lc-cli: a full socket drops a line.
        ours.set_nonblocking(true)?;
        // Never unmapped: the guardian may outlive every other user of
        // lc-cli's memory.
        let top = crate::spawn::Stack::new(STACK)?.leak();
        // Read by the guardian, never freed: lc-cli's memory may be its
        // only memory, and freeing is lc-cli's malloc's business.
        let start = Box::leak(Box::new(watch::Start {
            sock: theirs.as_raw_fd(),
            kill_after,
            term,
            term_fd: term_fd.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
        }));
        let flags = if sys::SHARES_MEMORY {
            libc::CLONE_VM
        } else {
            0
        };
        // Every signal blocked across the clone: the guardian starts with
        // all blocked, and none of lc-cli's handlers ever runs in it.
        let blocked = crate::spawn::BlockAll::new()?;
        // SAFETY: the guardian runs `watch::entry` on its own stack, reads
        // `start` and makes only `sys` calls. Not CLONE_FILES: its
        // descriptors are its own copy. Not CLONE_THREAD: lc-cli's exit or
        // stop must not take it along. SIGCHLD: an ordinary child to
        // whoever reaps it (lc-cli does not wait for it).
        let pid = unsafe {
            libc::clone(
                watch::entry,
                top,
                flags | libc::SIGCHLD,
                (start as *mut watch::Start).cast(),
            )
        };
        let error = io::Error::last_os_error();
        drop(blocked);
        if pid < 0 {
            return Err(error);
        }
        // The guardian has its copies of these, lc-cli needs them no more.
        drop((theirs, term_fd));
        Ok(Guardian {
            sock: ours,
            term,
            sent: None,
            dismissed: false,
        })
    }

    fn say(&mut self, line: &str) {
        // A guardian that died or is stopped cannot be helped from here.
        let _ = socket::send(self.sock.as_fd(), line.as_bytes(), None);
    }

    /// A descriptor to hold open until the command's group is gone.
    pub fn keep(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        socket::send(self.sock.as_fd(), b"K\n", Some(fd))
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

    /// lc-cli is stopping the group itself (a loss it noticed): true if
    /// the SIGTERM is still lc-cli's to send (the guardian did not send it
    /// already, and now will not).
    pub fn stopping(&mut self) -> bool {
        self.say("S\n");
        self.term.claim()
    }

    /// The guardian sent the SIGTERM of a stop (lc-cli, frozen, told it
    /// nothing newer in time): the command is being stopped by its hand.
    /// Asked before [`Guardian::stopping`], after which it is always true.
    pub fn stopped_the_command(&self) -> bool {
        self.term.taken()
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

/// Who sends the SIGTERM of a stop: a flag in a page mapped shared, so
/// lc-cli and the guardian see one flag, also where the guardian is a copy
/// of lc-cli or has left lc-cli's memory by an exec (the page is a memfd's,
/// which it maps again).
#[derive(Clone, Copy)]
struct TermClaim(&'static AtomicBool);

impl TermClaim {
    /// A fresh flag, and the memfd behind it (none on a kernel without
    /// memfd_create: then an anonymous page, and no exec for the guardian).
    fn new() -> io::Result<(TermClaim, Option<OwnedFd>)> {
        // SAFETY: memfd_create and ftruncate on a name and a descriptor
        // of our own; a descriptor it returns is ours.
        let fd = unsafe {
            let fd = libc::memfd_create(c"lc-cli-term".as_ptr(), libc::MFD_CLOEXEC);
            (fd >= 0).then(|| OwnedFd::from_raw_fd(fd))
        };
        let fd = fd.filter(|fd| {
            // SAFETY: as above.
            unsafe { libc::ftruncate(fd.as_raw_fd(), CLAIM_SIZE as libc::off_t) == 0 }
        });
        let claim = TermClaim::map(fd.as_ref().map(|fd| fd.as_fd()))?;
        Ok((claim, fd))
    }

    /// The flag in `fd`'s first bytes, or in a fresh anonymous page.
    fn map(fd: Option<BorrowedFd<'_>>) -> io::Result<TermClaim> {
        let (fd, anonymous) = match fd {
            Some(fd) => (fd.as_raw_fd(), 0),
            None => (-1, libc::MAP_ANONYMOUS),
        };
        // SAFETY: a fresh shared mapping, never unmapped (it lives as long
        // as either process), zeroed by the kernel: a false AtomicBool.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                CLAIM_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | anonymous,
                fd,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the page is valid and aligned for as long as the process lives.
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

/// lc-cli's binary started as a guardian that leaves lc-cli's memory
/// (`NAME RESUME ...`, see `watch`): watches on and never returns. Any
/// other command line returns at once.
///
/// # Safety
/// `argv` holds `argc` NUL-terminated strings, as C's `main` gets them.
pub unsafe fn resume_if_asked(argc: libc::c_int, argv: *const *const libc::c_char) {
    if argc < 2 || argv.is_null() {
        return;
    }
    // SAFETY: as the caller promises.
    let args = unsafe { std::slice::from_raw_parts(argv, argc as usize) };
    // SAFETY: each a NUL-terminated string, as the caller promises.
    let arg = |a: &*const libc::c_char| unsafe { std::ffi::CStr::from_ptr(*a) }.to_bytes();
    if arg(&args[0]) != NAME.to_bytes() || arg(&args[1]) != watch::RESUME.as_bytes() {
        return;
    }
    let args: Vec<&[u8]> = args[2..].iter().map(arg).collect();
    let code = match watch::Resumed::parse(&args) {
        Some(state) => {
            // The exec named it after the file (`exe`).
            sys::set_name(NAME);
            // SAFETY: the exec kept the claim's memfd at TERM_FD for this.
            let memfd = unsafe { BorrowedFd::borrow_raw(watch::TERM_FD) };
            // Without it, a flag of its own: a second SIGTERM is possible,
            // a command left unguarded is not.
            let term = TermClaim::map(Some(memfd)).or_else(|_| TermClaim::map(None));
            match term {
                Ok(term) => {
                    let kill_after = Duration::from_nanos(state.kill_after_ns);
                    watch::keep_watch(watch::SOCK_FD, state.watch(term), kill_after, None);
                    0
                }
                Err(e) => {
                    eprintln!("lc-cli-guardian: cannot go on watching: {e}");
                    1
                }
            }
        }
        None => {
            eprintln!("lc-cli-guardian: this is lc-cli's own process, not a command to run");
            2
        }
    };
    // SAFETY: _exit ends the process at once.
    unsafe { libc::_exit(code) }
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
        let fd = fd.expect("a memfd");
        // The guardian's mapping after its exec, of the same memfd.
        let again = TermClaim::map(Some(fd.as_fd())).unwrap();
        assert!(!term.taken() && !again.taken());
        assert!(again.claim());
        assert!(!term.claim());
        assert!(term.taken());
    }
}

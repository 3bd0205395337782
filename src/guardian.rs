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
//! It is a fork of lc-cli made first thing in `lock` (before the runtime
//! exists, so the copy has one thread and may run any code), not an exec: no second load of the binary on the lock path. The
//! copy puts itself in a process group of its own (no group signal or
//! terminal signal for lc-cli reaches it), ignores the terminal signals,
//! keeps only stderr and its socket (stdin and stdout on /dev/null, every
//! other descriptor closed) and names itself `lc-cli-guardian` (argv and
//! comm, as `ps` shows it). Until lc-cli names the command's group it
//! just waits.
//!
//! If the socket ends without lc-cli's goodbye (lc-cli was SIGKILLed), it
//! stops the group itself (SIGTERM now unless lc-cli sent it, SIGKILL after
//! `--kill-after` or at `kill_at`, whichever is first) and exits once no
//! live process is left in the group, or soon after the SIGKILL. A descriptor it was given (the
//! PostgreSQL connection, whose end frees the key, passed with its `K`
//! line since it did not exist at the fork) stays open until then, so the
//! key outlives its command.
//!
//! Lines on the socket: `P PGID`, `E TERM_NS KILL_NS`, `K` (with the
//! descriptor to keep), `S` (lc-cli is stopping the group itself: no
//! SIGTERM from here, only the SIGKILL at `kill_at`), `G` (lc-cli ends
//! normally: go).

mod socket;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
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
const NAME: &[u8] = b"lc-cli-guardian\0";

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
    /// Forks the guardian. Only while this process has one thread (a fork
    /// of a threaded process may run async-signal-safe code only): lc-cli
    /// calls it before it builds its runtime; otherwise it is an error.
    pub fn start(kill_after: Duration) -> io::Result<Guardian> {
        if !crate::threads::only_one() {
            return Err(io::Error::other(
                "it must be forked before lc-cli starts any thread",
            ));
        }
        let (ours, theirs) = UnixStream::pair()?;
        let term = TermClaim::new()?;
        // A stopped guardian must never block lc-cli: a full socket drops a line.
        ours.set_nonblocking(true)?;
        // SAFETY: one thread (checked above), so the copy may run any code;
        // it never returns from `guardian_main`.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                drop(ours);
                guardian_main(theirs.into(), kill_after, term)
            }
            // Reaped by whoever inherits it: lc-cli does not wait for it.
            _ => Ok(Guardian {
                sock: ours,
                term,
                sent: None,
                dismissed: false,
            }),
        }
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

/// Who sends the SIGTERM of a stop: a flag in an anonymous page mapped
/// shared before the fork, so lc-cli and the guardian see one flag.
#[derive(Clone, Copy)]
struct TermClaim(&'static AtomicBool);

impl TermClaim {
    fn new() -> io::Result<TermClaim> {
        // SAFETY: a fresh anonymous mapping, never unmapped (it lives as
        // long as either process), zeroed: a false AtomicBool.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<AtomicBool>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the page is valid, aligned and zeroed for as long as the process lives.
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

/// Fields of /proc/self/stat by index after the command name (0 is the
/// state, field 3 in proc(5)), as numbers.
fn proc_stat_fields(at: &[usize]) -> Option<Vec<usize>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name may hold anything: the fields are read after its last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    at.iter().map(|&i| fields.get(i)?.parse().ok()).collect()
}

/// The forked copy: settles itself, watches, and exits (never returning
/// into lc-cli's code, nor running its exit handlers).
fn guardian_main(sock: OwnedFd, kill_after: Duration, term: TermClaim) -> ! {
    // SAFETY: setpgid and signal with SIG_IGN install nothing of ours.
    unsafe {
        libc::setpgid(0, 0);
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
            let _ = nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigIgn);
        }
    }
    let sock = settle_descriptors(sock);
    name_self();
    keep_watch(sock.as_fd(), kill_after, term);
    // SAFETY: _exit ends the process at once.
    unsafe { libc::_exit(0) }
}

/// stdin and stdout on /dev/null, stderr kept, the socket as descriptor 3
/// and everything else lc-cli had open closed (as an exec's CLOEXEC would,
/// and more: nothing the caller passed in is held open by the guardian).
fn settle_descriptors(sock: OwnedFd) -> OwnedFd {
    let sock = sock.into_raw_fd();
    // SAFETY: plain descriptor calls on this process's own table; the
    // socket ends up at 3, owned by the returned value alone.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
        }
        if sock != 3 {
            libc::dup2(sock, 3);
        }
        if libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) != 0 {
            for fd in 4..1024 {
                libc::close(fd);
            }
        }
        OwnedFd::from_raw_fd(3)
    }
}

/// Names this process `lc-cli-guardian`: comm, and the argument strings
/// (what /proc/PID/cmdline and `ps` show), overwritten in place as
/// setproctitle(3) does.
fn name_self() {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, NAME.as_ptr(), 0, 0, 0) };
    // Fields 48 and 49 in proc(5): where the argument strings lie.
    let Some([start, end]) =
        proc_stat_fields(&[45, 46]).and_then(|f| <[usize; 2]>::try_from(f).ok())
    else {
        return;
    };
    if end <= start {
        return;
    }
    // SAFETY: [start, end) holds this process's argument strings, in its
    // own writable memory; nothing reads them from here on.
    let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) };
    area.fill(0);
    let n = NAME.len().min(area.len() - 1);
    area[..n].copy_from_slice(&NAME[..n]);
}

/// The guardian's side: what it watches.
struct Watch {
    pgid: Option<Pid>,
    term_at: Option<u64>,
    kill_at: Option<u64>,
    termed: bool,
    killed_at: Option<Instant>,
    /// The stop's SIGTERM is sent only if claimed here first.
    term: TermClaim,
    /// No live process left in the group: nothing more to signal (its id
    /// may be reused).
    gone: bool,
}

/// Watches until lc-cli's goodbye, or, orphaned, until the group is gone.
fn keep_watch(sock: BorrowedFd<'_>, kill_after: Duration, term: TermClaim) {
    let mut w = Watch::new(term);
    let mut pending = Vec::new();
    // Held only to be closed when this process ends.
    let mut kept: Option<OwnedFd> = None;
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
            // No group named yet (lc-cli still waits for the key): nothing
            // to look at until lc-cli speaks or goes.
            let wait = w.pgid.map(|_| next);
            match read_lines(sock, wait, &mut pending, &mut kept) {
                Read::Lines(lines) => {
                    for line in lines {
                        if !w.take(&line) {
                            return;
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
            return;
        }
        w.enforce();
        if let (true, Some(at)) = (orphaned, w.killed_at) {
            if at.elapsed() >= AFTER_KILL {
                return;
            }
        }
    }
}

impl Watch {
    fn new(term: TermClaim) -> Watch {
        Watch {
            pgid: None,
            term_at: None,
            kill_at: None,
            termed: false,
            killed_at: None,
            term,
            gone: false,
        }
    }

    /// One line from lc-cli; false for its goodbye.
    fn take(&mut self, line: &str) -> bool {
        let mut f = line.split(' ');
        match f.next() {
            Some("P") => self.pgid = f.next().and_then(|p| p.parse().ok()).map(Pid::from_raw),
            Some("E") => {
                let t: Option<u64> = f.next().and_then(|v| v.parse().ok());
                let k: Option<u64> = f.next().and_then(|v| v.parse().ok());
                if let (Some(t), Some(k)) = (t, k) {
                    self.term_at = Some(guardian_term_at(t, k));
                    self.kill_at = Some(k);
                }
            }
            Some("S") => self.termed = true,
            // Its descriptor was taken off the socket with it.
            Some("K") => {}
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
            if self.term.claim() {
                let _ = killpg(pgid, Signal::SIGTERM);
            }
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

/// Waits up to `wait` (None: until something comes) for lc-cli's lines;
/// a descriptor sent with them goes to `kept`.
fn read_lines(
    fd: BorrowedFd<'_>,
    wait: Option<Duration>,
    pending: &mut Vec<u8>,
    kept: &mut Option<OwnedFd>,
) -> Read {
    let ms = wait.map_or(-1, |w| w.as_millis().clamp(1, POLL.as_millis()) as i32);
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
    match socket::recv(fd, &mut buf) {
        Ok((0, _)) => Read::Eof,
        Ok((n, fd)) => {
            if fd.is_some() {
                *kept = fd;
            }
            pending.extend_from_slice(&buf[..n]);
            let mut lines = Vec::new();
            while let Some(at) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=at).collect();
                lines.push(String::from_utf8_lossy(&line[..at]).into_owned());
            }
            Read::Lines(lines)
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN)) => Read::Nothing,
        Err(_) => Read::Eof,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> Watch {
        Watch::new(TermClaim::new().unwrap())
    }

    #[test]
    fn lines_set_the_group_and_the_deadlines() {
        let mut w = watch();
        assert!(w.take("P 4242"));
        assert!(w.take("E 100 200"));
        assert_eq!(w.pgid, Some(Pid::from_raw(4242)));
        // lc-cli's own SIGTERM gets a head start: a quarter of the window here.
        assert_eq!((w.term_at, w.kill_at), (Some(125), Some(200)));
        assert_eq!(guardian_term_at(0, 10_000_000_000), 100_000_000);
        // A newer word moves both; a torn or unknown line changes nothing.
        assert!(w.take("E 300 400"));
        assert!(w.take("E 5"));
        assert!(w.take("X"));
        assert_eq!((w.term_at, w.kill_at), (Some(325), Some(400)));
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
        assert!(!w.termed, "SIGTERM now (unless lc-cli sent it already)");
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
    fn no_fork_once_threads_run() {
        // A thread alive meanwhile, whatever the harness runs on.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || rx.recv());
        let err = Guardian::start(Duration::from_secs(1)).err().unwrap();
        assert!(err.to_string().contains("before lc-cli starts any thread"));
        drop(tx);
        let _ = other.join();
    }

    #[test]
    fn a_group_of_our_own_is_a_live_member() {
        let me = nix::unistd::getpgrp();
        assert!(live_member(me));
        assert!(!live_member(Pid::from_raw(i32::MAX - 1)));
    }
}

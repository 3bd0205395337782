//! The guardian program: what runs in `lc-cli-guardian`, from `main` to
//! its exit. Its rules are the module `guardian`'s.

use std::ffi::OsString;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::{boottime_ns, guardian_term_at, socket, TermClaim, NAME, POLL, WATCH};

/// After its SIGKILL, how long an orphaned guardian waits for the group
/// to be reaped before it exits anyway (a zombie nobody reaps runs no code).
const AFTER_KILL: Duration = Duration::from_secs(2);

/// lc-cli's binary started as its guardian (`argv[0]` is `lc-cli-guardian`):
/// watches, and exits, never returning. Any other start returns at once.
pub fn run_if_asked() {
    let mut args = std::env::args_os();
    if args.next().is_none_or(|a| a != NAME) {
        return;
    }
    let args: Vec<OsString> = args.collect();
    let code = match Start::parse(&args) {
        Some(start) => start.run(),
        None => {
            eprintln!("{NAME}: this is lc-cli's own process, not a command to run");
            2
        }
    };
    std::process::exit(code)
}

/// What lc-cli hands the guardian on its command line.
#[derive(Debug, PartialEq)]
struct Start {
    sock: RawFd,
    term: RawFd,
    kill_after: Duration,
}

impl Start {
    /// `watch SOCK_FD TERM_FD KILL_AFTER_NS`, the descriptors open and of
    /// the kinds lc-cli passes (a socket, a memfd): anything else is not
    /// lc-cli's start, and is refused whole.
    fn parse(args: &[OsString]) -> Option<Start> {
        let [watch, sock, term, kill_after] = args else {
            return None;
        };
        let number = |a: &OsString| std::str::from_utf8(a.as_bytes()).ok()?.parse::<u64>().ok();
        let fd = |a: &OsString| {
            number(a)
                .and_then(|n| RawFd::try_from(n).ok())
                .filter(|&fd| fd > 2)
        };
        let start = Start {
            sock: fd(sock)?,
            term: fd(term)?,
            kill_after: Duration::from_nanos(number(kill_after)?),
        };
        (watch == WATCH
            && start.sock != start.term
            && kind_of(start.sock) == Some(libc::S_IFSOCK)
            && kind_of(start.term) == Some(libc::S_IFREG))
        .then_some(start)
    }

    fn run(self) -> i32 {
        settle(self.sock, self.term);
        // SAFETY: `parse` checked that lc-cli passed this descriptor open;
        // it is borrowed for the mapping only.
        let term = TermClaim::map(unsafe { BorrowedFd::borrow_raw(self.term) });
        match term {
            Ok(term) => {
                keep_watch(self.sock, Watch::new(term), self.kill_after);
                0
            }
            Err(e) => {
                eprintln!("{NAME}: cannot map the stop's flag: {e}");
                1
            }
        }
    }
}

/// The file type bits of an open descriptor, or none if it is not open.
fn kind_of(fd: RawFd) -> Option<libc::mode_t> {
    // SAFETY: fstat writes the struct given; a descriptor that is not open
    // is an error, not undefined.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some(st.st_mode & libc::S_IFMT)
    }
}

/// Its name (comm), every signal blocked, and every descriptor above
/// stderr closed but the two it was given: nothing the caller of lc-cli
/// passed in is held open by the guardian.
fn settle(sock: RawFd, term: RawFd) {
    // SAFETY: prctl with a NUL-terminated name of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"lc-cli-guardian".as_ptr()) };
    // SAFETY: plain sigset_t values; sigprocmask on this, the only thread.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
    }
    let open: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    for fd in open
        .into_iter()
        .filter(|&fd| fd > 2 && fd != sock && fd != term)
    {
        // SAFETY: a descriptor nothing in this process uses (the listing's
        // own is closed already, which makes this an EBADF).
        unsafe { libc::close(fd) };
    }
}

/// The lines lc-cli sent that are not yet whole.
#[derive(Default)]
struct Pending(Vec<u8>);

/// Watches until lc-cli's goodbye, or, orphaned, until the group is gone.
fn keep_watch(sock: RawFd, mut w: Watch, kill_after: Duration) {
    let mut pending = Pending::default();
    let mut orphaned = false;
    let mut buf = [0u8; 256];
    // lc-cli is the parent that started the guardian; whoever else writes
    // to the socket is the command, announcing itself.
    let lc_cli = nix::unistd::getppid().as_raw();
    loop {
        let now = boottime_ns();
        let next = [w.term_at.filter(|_| !w.termed), w.kill_at]
            .into_iter()
            .flatten()
            .filter(|&t| w.killed_at.is_none() && t > now)
            .min()
            .map_or(POLL, |t| Duration::from_nanos(t - now).min(POLL));
        // No group named yet (lc-cli is starting): nothing to look at
        // until lc-cli speaks or goes.
        let wait = if orphaned || w.pgid.is_some() {
            Some(next)
        } else {
            None
        };
        if !orphaned && readable(sock, wait) {
            match socket::recv(sock, &mut buf) {
                Ok((0, _)) => {
                    orphaned = true;
                    w.orphaned(kill_after);
                }
                Ok((n, extras)) => {
                    if let Some(fd) = extras.fd {
                        w.kept = Some(fd);
                    }
                    if extras.pid.is_some_and(|pid| pid != lc_cli) {
                        // The command's own bytes: only its `C`.
                        if buf[..n].starts_with(b"C\n") {
                            w.announced(extras.pid);
                        }
                    } else {
                        pending.0.extend_from_slice(&buf[..n]);
                        if !take_lines(&mut w, &mut pending) {
                            return;
                        }
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                    ) => {}
                Err(_) => {
                    orphaned = true;
                    w.orphaned(kill_after);
                }
            }
        } else if orphaned {
            std::thread::sleep(next);
        }
        w.check_group(orphaned);
        if w.gone && orphaned {
            return;
        }
        w.enforce();
        if let (true, Some(at)) = (orphaned, w.killed_at) {
            if boottime_ns().saturating_sub(at) >= AFTER_KILL.as_nanos() as u64 {
                return;
            }
        }
    }
}

/// Waits until `fd` is readable (or closed), at most `wait` (none: for
/// ever); true if it is.
fn readable(fd: RawFd, wait: Option<Duration>) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = wait.map_or(-1, |w| w.as_millis().clamp(1, 60_000) as libc::c_int);
    // SAFETY: poll on one pollfd of our own.
    unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
}

/// Hands each whole line to `w`, keeping the rest; false at lc-cli's
/// goodbye. A line longer than any of lc-cli's is dropped.
fn take_lines(w: &mut Watch, pending: &mut Pending) -> bool {
    while let Some(at) = pending.0.iter().position(|&b| b == b'\n') {
        let line: Vec<u8> = pending.0.drain(..=at).collect();
        if !w.take(&line[..at]) {
            return false;
        }
    }
    if pending.0.len() > 256 {
        pending.0.clear();
    }
    true
}

/// The guardian's side: what it watches.
struct Watch {
    pgid: Option<Pid>,
    term_at: Option<u64>,
    kill_at: Option<u64>,
    termed: bool,
    /// When the SIGKILL went, on `CLOCK_BOOTTIME`.
    killed_at: Option<u64>,
    /// The stop's SIGTERM is sent only if claimed here first.
    term: TermClaim,
    /// No live process left in the group: nothing more to signal (its id
    /// may be reused).
    gone: bool,
    /// Held only to be closed when this process ends (a PostgreSQL
    /// connection).
    kept: Option<OwnedFd>,
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
            kept: None,
        }
    }

    /// One line from lc-cli; false for its goodbye.
    fn take(&mut self, line: &[u8]) -> bool {
        let text = String::from_utf8_lossy(line);
        let mut f = text.split(' ');
        match f.next() {
            Some("P") => {
                self.pgid = f
                    .next()
                    .and_then(|p| p.parse::<i32>().ok())
                    .filter(|&p| p > 0)
                    .map(Pid::from_raw)
            }
            Some("E") => {
                let mut n = f.map(|n| n.parse::<u64>().ok());
                if let (Some(Some(t)), Some(Some(k)), None) = (n.next(), n.next(), n.next()) {
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

    /// The command announced itself (`C`) with its pid, which leads its group.
    fn announced(&mut self, pid: Option<i32>) {
        if let Some(pid) = pid.filter(|&p| p > 0) {
            self.pgid = Some(Pid::from_raw(pid));
        }
    }

    /// lc-cli is gone without a word: stop the group now, the SIGKILL
    /// after `kill_after` or at the hold's own deadline if that is sooner.
    fn orphaned(&mut self, kill_after: Duration) {
        let by = boottime_ns().saturating_add(kill_after.as_nanos() as u64);
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
            self.killed_at = Some(now);
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
            Err(nix::errno::Errno::ESRCH) => true,
            _ => orphaned && !live_member(pgid),
        };
    }
}

/// A process of group `pgid` that is not a zombie, from /proc (true when
/// /proc cannot be read: then the group is not called gone).
fn live_member(pgid: Pid) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .any(|pid| member_state(pid, pgid).is_some_and(|s| s != 'Z' && s != 'X'))
}

/// The state letter of process `pid` if it is in group `pgid`.
fn member_state(pid: u32, pgid: Pid) -> Option<char> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid pgrp ...": comm may hold anything, so the
    // fields are read after its last ')'.
    let rest = &stat[stat.iter().rposition(|&b| b == b')')? + 1..];
    let rest = String::from_utf8_lossy(rest);
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let pgrp: i32 = f.nth(1)?.parse().ok()?;
    (pgrp == pgid.as_raw()).then_some(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn watch() -> Watch {
        Watch::new(TermClaim::new().unwrap().0)
    }

    #[test]
    fn lines_set_the_group_and_the_deadlines() {
        let mut w = watch();
        assert!(w.take(b"P 4242"));
        assert!(w.take(b"E 100 200"));
        assert_eq!(w.pgid, Some(Pid::from_raw(4242)));
        // lc-cli's own SIGTERM gets a head start: a quarter of the window here.
        assert_eq!((w.term_at, w.kill_at), (Some(125), Some(200)));
        assert_eq!(guardian_term_at(0, 10_000_000_000), 100_000_000);
        // A newer word moves both; a torn or unknown line changes nothing.
        assert!(w.take(b"E 300 400"));
        assert!(w.take(b"E 5"));
        assert!(w.take(b"E 5 x"));
        assert!(w.take(b"E 5 6 7"));
        assert!(w.take(b"X"));
        assert_eq!((w.term_at, w.kill_at), (Some(325), Some(400)));
        assert!(w.take(b"S"));
        assert!(w.termed);
        assert!(!w.take(b"G"));
        // No group 0 or -1 (a kill of those reaches far more than the command).
        let mut w = watch();
        assert!(w.take(b"P 0") && w.take(b"P -1") && w.take(b"P 99999999999"));
        assert_eq!(w.pgid, None);
    }

    #[test]
    fn lines_are_taken_whole_across_reads() {
        let mut w = watch();
        let mut p = Pending::default();
        let mut feed = |w: &mut Watch, bytes: &[u8]| {
            p.0.extend_from_slice(bytes);
            take_lines(w, &mut p)
        };
        assert!(feed(&mut w, b"P 12"));
        assert_eq!(w.pgid, None, "not whole yet");
        assert!(feed(&mut w, b"3\nE 10 2"));
        assert_eq!(w.pgid, Some(Pid::from_raw(123)));
        assert!(feed(&mut w, b"0\nS\n"));
        assert_eq!((w.term_at, w.kill_at, w.termed), (Some(12), Some(20), true));
        assert!(!feed(&mut w, b"G\nP 9\n"), "the goodbye ends it");
        // A line longer than any of lc-cli's is dropped, not kept forever.
        let mut w = watch();
        let mut p = Pending(vec![b'x'; 300]);
        assert!(take_lines(&mut w, &mut p));
        assert!(p.0.is_empty());
    }

    #[test]
    fn an_orphan_is_stopped_now_and_killed_at_the_earlier_deadline() {
        let mut w = watch();
        w.take(b"S");
        let now = boottime_ns();
        let kill_at = now + 1_000_000_000;
        w.take(format!("E {now} {kill_at}").as_bytes());
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
    fn a_group_of_our_own_is_a_live_member() {
        let me = nix::unistd::getpgrp();
        assert!(live_member(me));
        assert!(!live_member(Pid::from_raw(i32::MAX - 1)));
        let state = member_state(std::process::id(), me).expect("this process is in its group");
        assert!(state.is_ascii_uppercase() && state != 'Z', "{state}");
    }

    #[test]
    fn only_lc_cli_s_start_is_taken() {
        let (sock, _other) = std::os::unix::net::UnixStream::pair().unwrap();
        let (_claim, memfd) = TermClaim::new().unwrap();
        let file = tempfile::tempfile().unwrap();
        let args = |a: &[String]| a.iter().map(OsString::from).collect::<Vec<_>>();
        let (s, t, f) = (
            sock.as_raw_fd().to_string(),
            memfd.as_raw_fd().to_string(),
            file.as_raw_fd().to_string(),
        );
        let w = WATCH.to_string();
        let ok = Start::parse(&args(&[w.clone(), s.clone(), t.clone(), "5".into()]));
        assert_eq!(
            ok,
            Some(Start {
                sock: sock.as_raw_fd(),
                term: memfd.as_raw_fd(),
                kill_after: Duration::from_nanos(5)
            })
        );
        for bad in [
            vec![w.clone(), s.clone(), t.clone()],
            vec!["resume".into(), s.clone(), t.clone(), "5".into()],
            vec![w.clone(), t.clone(), s.clone(), "5".into()],
            vec![w.clone(), f.clone(), t.clone(), "5".into()],
            vec![w.clone(), s.clone(), s.clone(), "5".into()],
            vec![w.clone(), "1".into(), t.clone(), "5".into()],
            vec![w.clone(), "999".into(), t.clone(), "5".into()],
            vec![w.clone(), s.clone(), t.clone(), "-5".into()],
        ] {
            assert_eq!(Start::parse(&args(&bad)), None, "{bad:?}");
        }
    }
}

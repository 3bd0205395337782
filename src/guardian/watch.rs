//! The guardian's own side: what runs in the guardian process, from its
//! entry to its exit.
//!
//! It starts in lc-cli's memory (see `guardian::start`), so everything here
//! keeps to three rules: no allocation (malloc's per-thread cache would be
//! lc-cli's), only [`sys`] calls (a libc wrapper's failure writes lc-cli's
//! errno), and no panic (the panic machinery does both): buffers live on
//! the guardian's stack, indexing is checked and arithmetic saturates.
//!
//! A command still running [`DETACH_AFTER`] after it was named gets a
//! guardian of its own memory: the guardian execs lc-cli's binary, which
//! resumes the watch (`resume`) with what it was watching on its command
//! line. Until then the kernel's OOM killer, which ends every process
//! sharing its victim's memory, would take the guardian along with lc-cli;
//! a command that ends sooner (`lock k -- true`) never pays for the exec.

use std::time::Duration;

use super::{boottime_ns, guardian_term_at, socket, sys, TermClaim, AFTER_KILL, NAME, POLL};

/// What lc-cli hands the guardian at its start; read, never freed.
pub(super) struct Start {
    pub sock: i32,
    pub kill_after: Duration,
    pub term: TermClaim,
    /// The memfd behind `term` (-1: none, and no exec).
    pub term_fd: i32,
}

/// How long a command runs before its guardian leaves lc-cli's memory.
const DETACH_AFTER: Duration = Duration::from_millis(100);

/// Where the guardian keeps its socket and the claim's memfd, across its exec.
pub(super) const SOCK_FD: i32 = 3;
pub(super) const TERM_FD: i32 = 4;

/// The first argument of lc-cli's binary run as a resumed guardian (after
/// `NAME` as the program name).
pub(super) const RESUME: &str = "resume";

/// The guardian process's entry (from `clone`): settles itself, watches,
/// and returns, upon which the clone ends it with `exit` (never lc-cli's
/// exit handlers).
pub(super) extern "C" fn entry(start: *mut libc::c_void) -> libc::c_int {
    // SAFETY: lc-cli leaked this `Start` for this guardian alone.
    let start = unsafe { &*(start as *const Start) };
    // Its own group: no group signal or terminal signal for lc-cli reaches
    // it (and lc-cli started it with every signal blocked).
    let _ = sys::setpgid_self();
    sys::set_name(NAME);
    let (sock, can_exec) = settle_descriptors(start.sock, start.term_fd);
    let detach = (can_exec && sys::SHARES_MEMORY).then_some(DETACH_AFTER);
    keep_watch(sock, Watch::new(start.term), start.kill_after, detach);
    0
}

/// stdin and stdout on /dev/null, stderr kept, the socket as descriptor
/// [`SOCK_FD`], the claim's memfd as [`TERM_FD`] (kept across an exec),
/// and every other descriptor lc-cli had open closed (in the guardian's
/// own table, copied at its start): nothing the caller passed in is held
/// open by the guardian. The socket's place, and whether the memfd has
/// its (if not, no exec). Out of descriptors (a copy of lc-cli's table
/// full to its limit) it keeps them all and watches where the socket is.
fn settle_descriptors(sock: i32, term_fd: i32) -> (i32, bool) {
    if let Ok(null) = sys::open(c"/dev/null", libc::O_RDWR) {
        let _ = sys::dup_to(null, 0);
        let _ = sys::dup_to(null, 1);
        if null > 2 {
            sys::close(null);
        }
    }
    // Copies above both places first: either may sit where the other goes.
    let Ok(copy) = sys::dup_above(sock, 10) else {
        return (sock, false);
    };
    let term_copy = (term_fd >= 0)
        .then(|| sys::dup_above(term_fd, 10).ok())
        .flatten();
    if sys::dup_to(copy, SOCK_FD).is_err() {
        return (copy, false);
    }
    let term_placed = term_copy.is_some_and(|fd| sys::dup_to(fd, TERM_FD).is_ok());
    sys::close_from(TERM_FD + i32::from(term_placed));
    (SOCK_FD, term_placed)
}

/// The lines lc-cli sent that are not yet whole.
struct Pending {
    buf: [u8; 256],
    len: usize,
}

/// Watches until lc-cli's goodbye, or, orphaned, until the group is gone;
/// `detach`: how long after the group is named to leave lc-cli's memory.
pub(super) fn keep_watch(sock: i32, mut w: Watch, kill_after: Duration, detach: Option<Duration>) {
    let mut pending = Pending {
        buf: [0; 256],
        len: 0,
    };
    let mut orphaned = false;
    let mut detach_at = None;
    loop {
        let now = boottime_ns();
        if let (Some(after), Some(_), None) = (detach, w.pgid, detach_at) {
            detach_at = Some(now.saturating_add(after.as_nanos() as u64));
        }
        if detach_at.is_some_and(|at| now >= at)
            && !orphaned
            && w.killed_at.is_none()
            && pending.len == 0
        {
            // Returns only if the exec failed: the watch goes on here.
            exec_resumed(&w, kill_after);
            detach_at = Some(u64::MAX);
        }
        let next = [w.term_at.filter(|_| !w.termed), w.kill_at]
            .into_iter()
            .flatten()
            .filter(|&t| w.killed_at.is_none() && t > now)
            .chain(detach_at.filter(|&t| t > now && t < u64::MAX))
            .min()
            .map_or(POLL, |t| Duration::from_nanos(t - now).min(POLL));
        if !orphaned {
            // No group named yet (lc-cli is starting the command): nothing
            // to look at until lc-cli speaks or goes.
            let wait = w.pgid.map(|_| next);
            if sys::wait_readable(Some(sock), wait) {
                match socket::recv(sock, &mut pending.buf[pending.len..]) {
                    Ok((0, _)) => {
                        orphaned = true;
                        w.orphaned(kill_after);
                    }
                    Ok((n, fd)) => {
                        if let Some(fd) = fd {
                            w.keep(fd);
                        }
                        pending.len += n;
                        if !take_lines(&mut w, &mut pending) {
                            return;
                        }
                    }
                    Err(libc::EINTR | libc::EAGAIN) => {}
                    Err(_) => {
                        orphaned = true;
                        w.orphaned(kill_after);
                    }
                }
            }
        } else {
            sys::wait_readable(None, Some(next));
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

/// Leaves lc-cli's memory: execs lc-cli's binary as `NAME RESUME` and
/// what is watched (see [`Resumed`]), every signal still blocked, the
/// socket and the claim's memfd at their places. Returns only if the exec
/// failed.
fn exec_resumed(w: &Watch, kill_after: Duration) {
    let state = Resumed {
        kill_after_ns: kill_after.as_nanos() as u64,
        pgid: w.pgid,
        term_at: w.term_at,
        kill_at: w.kill_at,
        termed: w.termed,
        kept: w.kept,
    };
    if let Some(fd) = w.kept {
        if sys::keep_on_exec(fd).is_err() {
            return;
        }
    }
    let mut args = Args::new();
    if !state.write(&mut args) {
        return;
    }
    let mut argv = [std::ptr::null::<libc::c_char>(); ARGS + 1];
    for (i, slot) in argv.iter_mut().take(args.count).enumerate() {
        *slot = args.buf.as_ptr().wrapping_add(args.starts[i]).cast();
    }
    // lc-cli's environment (a preloaded library, a faked clock), read in
    // the memory still shared: lc-cli changes none of it.
    // SAFETY: argv is null-terminated, its strings NUL-terminated in
    // `args`; environ is libc's, in the same shape.
    let _ = unsafe { sys::execve(c"/proc/self/exe", argv.as_ptr(), libc::environ.cast()) };
}

/// What a guardian carries across its exec, as the resumed one's arguments.
#[derive(Debug, PartialEq)]
pub(super) struct Resumed {
    pub kill_after_ns: u64,
    pub pgid: Option<i32>,
    pub term_at: Option<u64>,
    pub kill_at: Option<u64>,
    pub termed: bool,
    pub kept: Option<i32>,
}

/// The resumed guardian's argument strings: its name, [`RESUME`] and six.
const ARGS: usize = 8;

/// Argument strings built without allocating: NUL-terminated, one after
/// the other in `buf`.
struct Args {
    buf: [u8; 256],
    len: usize,
    starts: [usize; ARGS],
    count: usize,
}

impl Args {
    fn new() -> Args {
        Args {
            buf: [0; 256],
            len: 0,
            starts: [0; ARGS],
            count: 0,
        }
    }

    /// Adds one string; false when out of room.
    fn push(&mut self, parts: &[&[u8]]) -> bool {
        let Some(start) = self.starts.get_mut(self.count) else {
            return false;
        };
        *start = self.len;
        for part in parts {
            let Some(room) = self.buf.get_mut(self.len..self.len + part.len()) else {
                return false;
            };
            room.copy_from_slice(part);
            self.len += part.len();
        }
        // The NUL: the buffer is zeroed, so a byte of room is enough.
        if self.len >= self.buf.len() {
            return false;
        }
        self.len += 1;
        self.count += 1;
        true
    }

    /// A number, or `-` for none.
    fn push_number(&mut self, n: Option<u64>) -> bool {
        use std::fmt::Write;
        // core's formatting of an integer: digits into a buffer, no allocation.
        let mut digits = Digits([0; 20], 0);
        match n {
            None => self.push(&[b"-"]),
            Some(n) => write!(digits, "{n}").is_ok() && self.push(&[&digits.0[..digits.1]]),
        }
    }
}

/// A number's digits, written by `core::fmt` (20 bytes hold any u64).
struct Digits([u8; 20], usize);

impl std::fmt::Write for Digits {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = self
            .0
            .get_mut(self.1..self.1 + s.len())
            .ok_or(std::fmt::Error)?;
        room.copy_from_slice(s.as_bytes());
        self.1 += s.len();
        Ok(())
    }
}

impl Resumed {
    fn write(&self, args: &mut Args) -> bool {
        let positive = |v: Option<i32>| v.and_then(|v| u64::try_from(v).ok());
        args.push(&[NAME.to_bytes()])
            && args.push(&[RESUME.as_bytes()])
            && args.push_number(Some(self.kill_after_ns))
            && args.push_number(positive(self.pgid))
            && args.push_number(self.term_at)
            && args.push_number(self.kill_at)
            && args.push_number(Some(u64::from(self.termed)))
            && args.push_number(positive(self.kept))
    }

    /// From the six arguments after [`RESUME`].
    pub(super) fn parse(args: &[&[u8]]) -> Option<Resumed> {
        let [kill_after, pgid, term_at, kill_at, termed, kept] = args else {
            return None;
        };
        let maybe = |f: &[u8]| match f {
            b"-" => Some(None),
            f => number(f).map(Some),
        };
        let id = |f: &[u8]| match maybe(f)? {
            None => Some(None),
            Some(n) => i32::try_from(n).ok().map(Some),
        };
        Some(Resumed {
            kill_after_ns: number(kill_after)?,
            pgid: id(pgid)?,
            term_at: maybe(term_at)?,
            kill_at: maybe(kill_at)?,
            termed: match *termed {
                b"0" => false,
                b"1" => true,
                _ => return None,
            },
            kept: id(kept)?,
        })
    }

    /// The watch it was.
    pub(super) fn watch(&self, term: TermClaim) -> Watch {
        Watch {
            pgid: self.pgid,
            term_at: self.term_at,
            kill_at: self.kill_at,
            termed: self.termed,
            kept: self.kept,
            ..Watch::new(term)
        }
    }
}

/// Hands each whole line to `w`, keeping the rest; false at lc-cli's
/// goodbye. A line too long for the buffer (none of lc-cli's is) is dropped.
fn take_lines(w: &mut Watch, pending: &mut Pending) -> bool {
    let mut from = 0;
    while let Some(at) = pending.buf[from..pending.len]
        .iter()
        .position(|&b| b == b'\n')
    {
        if !w.take(&pending.buf[from..from + at]) {
            return false;
        }
        from += at + 1;
    }
    pending.buf.copy_within(from..pending.len, 0);
    pending.len -= from;
    if pending.len == pending.buf.len() {
        pending.len = 0;
    }
    true
}

/// The guardian's side: what it watches.
pub(super) struct Watch {
    pgid: Option<i32>,
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
    kept: Option<i32>,
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

    fn keep(&mut self, fd: i32) {
        if let Some(old) = self.kept.replace(fd) {
            sys::close(old);
        }
    }

    /// One line from lc-cli; false for its goodbye.
    fn take(&mut self, line: &[u8]) -> bool {
        let mut f = line.split(|&b| b == b' ');
        match f.next() {
            Some(b"P") => {
                self.pgid = f
                    .next()
                    .and_then(number)
                    .and_then(|p| i32::try_from(p).ok())
                    .filter(|&p| p > 0)
            }
            Some(b"E") => {
                if let (Some(t), Some(k)) = (f.next().and_then(number), f.next().and_then(number)) {
                    self.term_at = Some(guardian_term_at(t, k));
                    self.kill_at = Some(k);
                }
            }
            Some(b"S") => self.termed = true,
            // Its descriptor was taken off the socket with it.
            Some(b"K") => {}
            Some(b"G") => return false,
            _ => {}
        }
        true
    }

    /// lc-cli is gone without a word: stop the group now.
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
                let _ = sys::kill_group(pgid, libc::SIGTERM);
            }
            let _ = sys::kill_group(pgid, libc::SIGCONT);
        }
        if self.killed_at.is_none() && self.kill_at.is_some_and(|k| now >= k) {
            self.killed_at = Some(now);
            let _ = sys::kill_group(pgid, libc::SIGKILL);
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
        self.gone = match sys::kill_group(pgid, 0) {
            Err(libc::ESRCH) => true,
            _ => orphaned && !live_member(pgid),
        };
    }
}

/// A decimal number, all of `field`.
fn number(field: &[u8]) -> Option<u64> {
    if field.is_empty() {
        return None;
    }
    field.iter().try_fold(0u64, |n, &b| {
        let digit = (b as char).to_digit(10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// A directory entry's header in `getdents64`'s records: d_ino (8 bytes),
/// d_off (8), d_reclen (2), d_type (1), then the name.
const DIRENT_NAME: usize = 19;

/// Eight-byte aligned, as the records are.
#[repr(C, align(8))]
struct Records([u8; 4096]);

/// A process of group `pgid` that is not a zombie, from /proc (true when
/// /proc cannot be read: then the group is not called gone).
fn live_member(pgid: i32) -> bool {
    let Ok(dir) = sys::open(c"/proc", libc::O_RDONLY | libc::O_DIRECTORY) else {
        return true;
    };
    let mut records = Records([0; 4096]);
    let mut found = false;
    'dir: while let Ok(n @ 1..) = sys::getdents(dir, &mut records.0) {
        let mut at = 0;
        while let Some(head) = records.0.get(at..(at + DIRENT_NAME).min(n)) {
            if head.len() < DIRENT_NAME {
                break;
            }
            let reclen = usize::from(u16::from_ne_bytes([head[16], head[17]]));
            let Some(name) = records.0.get(at + DIRENT_NAME..at + reclen) else {
                break;
            };
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if member_state(name, pgid).is_some_and(|state| state != b'Z' && state != b'X') {
                found = true;
                break 'dir;
            }
            at += reclen;
        }
    }
    sys::close(dir);
    found
}

/// The state letter of process `pid` (a /proc entry's name) if it is in
/// group `pgid`.
fn member_state(pid: &[u8], pgid: i32) -> Option<u8> {
    if pid.is_empty() || pid.len() > 10 || !pid.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // "/proc/" PID "/stat" and a NUL, built without allocating.
    let mut path = [0u8; 32];
    let parts: [&[u8]; 3] = [b"/proc/", pid, b"/stat"];
    let mut len = 0;
    for part in parts {
        path.get_mut(len..len + part.len())?.copy_from_slice(part);
        len += part.len();
    }
    let path = std::ffi::CStr::from_bytes_until_nul(&path).ok()?;
    let fd = sys::open(path, libc::O_RDONLY).ok()?;
    // "pid (comm) state ppid pgrp ...": the first fields are enough.
    let mut stat = [0u8; 256];
    let n = sys::read(fd, &mut stat);
    sys::close(fd);
    let stat = stat.get(..n.ok()?)?;
    // comm may hold anything: the fields are read after its last ')'.
    let rest = &stat[stat.iter().rposition(|&b| b == b')')? + 1..];
    let mut f = rest.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let state = *f.next()?.first()?;
    let pgrp = f.nth(1).and_then(number)?;
    (pgrp == pgid as u64).then_some(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> Watch {
        Watch::new(TermClaim::new().unwrap().0)
    }

    #[test]
    fn lines_set_the_group_and_the_deadlines() {
        let mut w = watch();
        assert!(w.take(b"P 4242"));
        assert!(w.take(b"E 100 200"));
        assert_eq!(w.pgid, Some(4242));
        // lc-cli's own SIGTERM gets a head start: a quarter of the window here.
        assert_eq!((w.term_at, w.kill_at), (Some(125), Some(200)));
        assert_eq!(guardian_term_at(0, 10_000_000_000), 100_000_000);
        // A newer word moves both; a torn or unknown line changes nothing.
        assert!(w.take(b"E 300 400"));
        assert!(w.take(b"E 5"));
        assert!(w.take(b"E 5 x"));
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
        let mut p = Pending {
            buf: [0; 256],
            len: 0,
        };
        let mut feed = |w: &mut Watch, bytes: &[u8]| {
            p.buf[p.len..p.len + bytes.len()].copy_from_slice(bytes);
            p.len += bytes.len();
            take_lines(w, &mut p)
        };
        assert!(feed(&mut w, b"P 12"));
        assert_eq!(w.pgid, None, "not whole yet");
        assert!(feed(&mut w, b"3\nE 10 2"));
        assert_eq!(w.pgid, Some(123));
        assert!(feed(&mut w, b"0\nS\n"));
        assert_eq!((w.term_at, w.kill_at, w.termed), (Some(12), Some(20), true));
        assert!(!feed(&mut w, b"G\nP 9\n"), "the goodbye ends it");
        // A line longer than the buffer is dropped, not kept forever.
        let mut w = watch();
        let mut p = Pending {
            buf: [b'x'; 256],
            len: 256,
        };
        assert!(take_lines(&mut w, &mut p));
        assert_eq!(p.len, 0);
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
        let me = nix::unistd::getpgrp().as_raw();
        assert!(live_member(me));
        assert!(!live_member(i32::MAX - 1));
        assert_eq!(member_state(b"self", me), None, "only numbers");
        assert_eq!(member_state(b"12345678901", me), None);
        let pid = std::process::id().to_string();
        let state = member_state(pid.as_bytes(), me).expect("this process is in its group");
        assert!(
            state.is_ascii_uppercase() && state != b'Z',
            "{}",
            state as char
        );
    }

    #[test]
    fn what_is_watched_crosses_the_exec_whole() {
        let mut w = watch();
        let state = Resumed {
            kill_after_ns: 10_000_000_000,
            pgid: Some(4242),
            term_at: Some(u64::MAX - 1),
            kill_at: Some(0),
            termed: true,
            kept: None,
        };
        let mut args = Args::new();
        assert!(state.write(&mut args));
        let strings: Vec<&[u8]> = args.buf[..args.len]
            .split(|&b| b == 0)
            .take(args.count)
            .collect();
        assert_eq!(strings[..2], [b"lc-cli-guardian" as &[u8], b"resume"]);
        assert_eq!(
            strings[2..],
            [
                b"10000000000" as &[u8],
                b"4242",
                b"18446744073709551614",
                b"0",
                b"1",
                b"-"
            ]
        );
        assert_eq!(Resumed::parse(&strings[2..]), Some(state));
        // Anything else is refused, not half taken.
        assert_eq!(Resumed::parse(&strings[3..]), None);
        let mut bad = strings.clone();
        bad[6] = b"2";
        assert_eq!(Resumed::parse(&bad[2..]), None);
        bad[6] = b"1";
        bad[3] = b"4294967296";
        assert_eq!(Resumed::parse(&bad[2..]), None);
        w.take(b"P 7");
        assert_eq!(
            Resumed::parse(&strings[2..]).unwrap().watch(w.term).pgid,
            Some(4242)
        );
    }

    #[test]
    fn numbers_are_whole_fields() {
        assert_eq!(number(b"0"), Some(0));
        assert_eq!(number(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(number(b"18446744073709551616"), None);
        assert_eq!(number(b""), None);
        assert_eq!(number(b"12a"), None);
        assert_eq!(number(b"-1"), None);
    }
}

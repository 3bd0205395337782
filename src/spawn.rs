//! Starting the command the way glibc's posix_spawn does it: a child made
//! with `clone(CLONE_VM | CLONE_VFORK)` on a stack of its own, which shares
//! lc-cli's memory until its `exec` and runs only system calls meanwhile.
//! A `fork` (what `Command::pre_exec` forces) copies lc-cli's page tables
//! and makes every page it writes afterwards a copy-on-write fault; this
//! costs neither, and posix_spawn itself cannot set the parent-death signal
//! the command needs (see `child::spawn`).
//!
//! The child's side, between clone and exec: every handler lc-cli installed
//! back to the default (before any signal is let in: they are all blocked
//! across the clone, so none of lc-cli's handlers ever runs in the child),
//! SIGPIPE and SIGTTOU to the default (lc-cli ignores them; std's `Command`
//! resets SIGPIPE too), its own process group, the parent-death signal, the
//! check that lc-cli is still its parent, the terminal's foreground group,
//! an empty signal mask, then `execvpe` (the PATH search and the script
//! fallback of execvp(3), as `Command` and flock(1) have them). A failure
//! leaves its errno in the memory the two share, and the child exits 127.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::unistd::Pid;

/// What the child gets: everything is made before the clone, since the
/// child may not allocate.
pub(crate) struct Spawn {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    /// Made the foreground process group, if any.
    pub tty: Option<RawFd>,
    /// A socket the child announces itself on (`C`, its pid in the
    /// kernel's credentials), once it leads its own group and before its
    /// exec: the guardian's, so that no command ever runs that its guardian
    /// could not stop, whenever lc-cli freezes.
    pub announce: Option<RawFd>,
    /// The errno the child reports when lc-cli is no longer its parent.
    pub parent_gone: i32,
}

impl Spawn {
    /// `argv[0]` looked up in PATH, with lc-cli's environment minus
    /// `remove` and with `env` added (replacing same-named variables).
    pub(crate) fn new(
        argv: &[OsString],
        env: &[(String, String)],
        remove: &[&str],
    ) -> io::Result<Spawn> {
        let c = |s: &OsStr| {
            CString::new(s.as_bytes()).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "nul byte found in provided data",
                )
            })
        };
        let mut envp = Vec::new();
        for (key, value) in std::env::vars_os() {
            if remove.iter().any(|r| key == *r) || env.iter().any(|(k, _)| key == k.as_str()) {
                continue;
            }
            let mut entry = key;
            entry.push("=");
            entry.push(value);
            envp.push(c(&entry)?);
        }
        for (key, value) in env {
            envp.push(c(OsStr::new(&format!("{key}={value}")))?);
        }
        Ok(Spawn {
            program: c(&argv[0])?,
            argv: argv.iter().map(|a| c(a)).collect::<io::Result<_>>()?,
            envp,
            tty: None,
            announce: None,
            parent_gone: libc::ESRCH,
        })
    }

    /// Starts it; returns its pid (also its process group id) once it has
    /// exec'd, or the errno of what failed (the child is reaped then).
    pub(crate) fn start(&self) -> io::Result<Pid> {
        let mut argv: Vec<*const libc::c_char> = self.argv.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> = self.envp.iter().map(|e| e.as_ptr()).collect();
        envp.push(std::ptr::null());
        let shared = Shared {
            program: self.program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            tty: self.tty.unwrap_or(-1),
            announce: self.announce.unwrap_or(-1),
            parent: std::process::id() as libc::pid_t,
            parent_gone: self.parent_gone,
            error: AtomicI32::new(0),
        };
        // execvp's script fallback puts argc + 2 pointers on the stack, and
        // its PATH search a path of at most PATH_MAX + NAME_MAX bytes.
        let stack = Stack::new(64 * 1024 + (argv.len() + 2) * std::mem::size_of::<usize>())?;
        let blocked = BlockAll::new()?;
        // SAFETY: the child runs `child_main` on `stack`, sharing our memory
        // while we are suspended (CLONE_VFORK) until it execs or exits; it
        // reads `shared` (alive until clone returns, as are `argv`, `envp`
        // and `self`) and writes only its `error`.
        let pid = unsafe {
            libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                &shared as *const Shared as *mut libc::c_void,
            )
        };
        let clone_error = io::Error::last_os_error();
        drop(blocked);
        drop(stack);
        if pid < 0 {
            return Err(clone_error);
        }
        let pid = Pid::from_raw(pid);
        match shared.error.load(Ordering::SeqCst) {
            0 => Ok(pid),
            errno => {
                // It exited 127 right after saying why: not left a zombie.
                let _ = nix::sys::wait::waitpid(pid, None);
                Err(io::Error::from_raw_os_error(errno))
            }
        }
    }
}

/// What parent and child share across the clone.
struct Shared {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    tty: RawFd,
    announce: RawFd,
    parent: libc::pid_t,
    parent_gone: i32,
    error: AtomicI32,
}

/// The child, until exec. System calls only: no allocation, no lock, no
/// Rust runtime (it runs on lc-cli's thread-local storage and memory).
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Shared` that `start` keeps alive while we run.
    let shared = unsafe { &*(arg as *const Shared) };
    let fail = |errno: i32| -> libc::c_int {
        shared.error.store(errno.max(1), Ordering::SeqCst);
        // SAFETY: ends the child without running anything of lc-cli's.
        unsafe { libc::_exit(127) }
    };
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    // SAFETY: sigaction, setpgid, send, prctl, getppid, tcsetpgrp, sigprocmask and
    // execvpe are system calls (execvpe allocates on the stack only); every
    // pointer is to a live value of ours or of `shared`.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for sig in 1..=64 {
            let mut old: libc::sigaction = std::mem::zeroed();
            if sig == libc::SIGKILL
                || sig == libc::SIGSTOP
                || libc::sigaction(sig, std::ptr::null(), &mut old) != 0
            {
                continue;
            }
            let caught = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
            if caught || sig == libc::SIGPIPE || sig == libc::SIGTTOU {
                libc::sigaction(sig, &default, std::ptr::null_mut());
            }
        }
        if libc::setpgid(0, 0) != 0 {
            return fail(errno());
        }
        if shared.announce >= 0 {
            // Never blocks, never raises SIGPIPE; a lost line is a stopped
            // or dead guardian's.
            let line = b"C\n";
            libc::send(
                shared.announce,
                line.as_ptr().cast(),
                line.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            );
        }
        // If lc-cli dies (even by SIGKILL), the command is told; and if it
        // died before this line, the command must not run unsupervised.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
            return fail(errno());
        }
        if libc::getppid() != shared.parent {
            return fail(shared.parent_gone);
        }
        if shared.tty >= 0 {
            // SIGTTOU is still blocked, so this works from the background.
            libc::tcsetpgrp(shared.tty, libc::getpid());
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execvpe(shared.program, shared.argv, shared.envp);
        fail(errno())
    }
}

/// The child's stack: an anonymous mapping with a guard page below it.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

impl Stack {
    fn new(size: usize) -> io::Result<Stack> {
        let page = 4096;
        let len = size.div_ceil(page) * page + page;
        // SAFETY: a fresh private mapping, unmapped in drop; the lowest page
        // is made inaccessible so an overflow faults instead of writing ours.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            libc::mprotect(base, page, libc::PROT_NONE);
            Ok(Stack { base, len })
        }
    }

    /// Where the stack starts (it grows down), 16-byte aligned.
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which is page aligned.
        unsafe { self.base.add(self.len) }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: our own mapping, which the child no longer uses (it has
        // exec'd or exited when clone returns).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Every signal blocked on this thread until dropped: none of lc-cli's
/// handlers may run in the child, which shares its memory (and which
/// starts with them all blocked).
struct BlockAll {
    old: libc::sigset_t,
}

impl BlockAll {
    fn new() -> io::Result<BlockAll> {
        // SAFETY: plain sigset_t values and pthread_sigmask on this thread.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            match libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) {
                0 => Ok(BlockAll { old }),
                e => Err(io::Error::from_raw_os_error(e)),
            }
        }
    }
}

impl Drop for BlockAll {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::wait::{waitpid, WaitStatus};

    /// Runs `sh -c script` with `env`, waits for it; returns its pid.
    fn run(script: &str, env: &[(String, String)]) -> Pid {
        let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), script.into()];
        let pid = Spawn::new(&argv, env, &["LC_TEST_REMOVED"])
            .unwrap()
            .start()
            .unwrap();
        assert_eq!(waitpid(pid, None).unwrap(), WaitStatus::Exited(pid, 0));
        pid
    }

    #[test]
    fn environment_group_and_signal_state() {
        let dir = std::env::temp_dir().join(format!("lc-spawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out");
        std::env::set_var("LC_TEST_REMOVED", "x");
        std::env::set_var("LC_TEST_REPLACED", "old");
        let env = [("LC_TEST_REPLACED".to_string(), "new".to_string())];
        // The shell's own pid and group, the variables, and (read by an
        // exec'd grep) the mask and the ignored signals the command starts with.
        let script = format!(
            "echo $$ $(cut -d' ' -f5 /proc/$$/stat) ${{LC_TEST_REMOVED-unset}} $LC_TEST_REPLACED > {o}; exec grep -E '^Sig(Blk|Ign)' /proc/self/status >> {o}",
            o = out.display()
        );
        // SIGPIPE is ignored here (std's runtime does it), and every signal
        // is blocked across the clone: the command must start with neither.
        let pid = run(&script, &env);
        let text = std::fs::read_to_string(&out).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next().unwrap(), format!("{pid} {pid} unset new"));
        for line in lines {
            let (name, mask) = line.split_once(':').unwrap();
            let mask = u64::from_str_radix(mask.trim(), 16).unwrap();
            match name {
                "SigBlk" => assert_eq!(mask, 0, "{text}"),
                "SigIgn" => assert_eq!(mask & (1 << (libc::SIGPIPE - 1)), 0, "{text}"),
                _ => unreachable!(),
            }
        }
        std::env::remove_var("LC_TEST_REMOVED");
        std::env::remove_var("LC_TEST_REPLACED");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_child_announces_itself_before_its_exec() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        nix::sys::socket::setsockopt(&theirs, nix::sys::socket::sockopt::PassCred, &true).unwrap();
        let mut spawn = Spawn::new(&["true".into()], &[], &[]).unwrap();
        spawn.announce = Some(ours.as_raw_fd());
        let pid = spawn.start().unwrap();
        assert_eq!(waitpid(pid, None).unwrap(), WaitStatus::Exited(pid, 0));
        let mut line = [0u8; 2];
        theirs.read_exact(&mut line).unwrap();
        assert_eq!(&line, b"C\n");
        // A closed reader costs the child nothing (no SIGPIPE).
        drop(theirs);
        let pid = spawn.start().unwrap();
        assert_eq!(waitpid(pid, None).unwrap(), WaitStatus::Exited(pid, 0));
    }

    #[test]
    fn exec_failures_are_errno_values() {
        let start = |p: &str| Spawn::new(&[p.into()], &[], &[]).unwrap().start();
        assert_eq!(
            start("/nonexistent/x").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            start("lc-no-such-command").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(start("/").unwrap_err().raw_os_error(), Some(libc::EACCES));
        let nul = Spawn::new(&["a\0b".into()], &[], &[]).err().unwrap();
        assert_eq!(nul.kind(), io::ErrorKind::InvalidInput);
    }
}

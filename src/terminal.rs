//! The controlling terminal, for job control: while the command runs at a
//! terminal, its process group is the terminal's foreground group (so it can
//! read the terminal and Ctrl-C/Ctrl-Z reach it, and only it); lc-cli takes
//! the terminal back when the command stops or ends.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use nix::unistd::Pid;

pub struct Terminal {
    fd: OwnedFd,
}

impl Terminal {
    /// The controlling terminal, if lc-cli has one. SIGTTOU is ignored from
    /// then on, so that lc-cli can take the terminal back from a background
    /// group (a child resets it to the default before exec).
    pub fn open() -> Option<Terminal> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
            .open("/dev/tty")
            .ok()?;
        // SAFETY: setting a signal's disposition to SIG_IGN has no
        // preconditions.
        unsafe {
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        }
        Some(Terminal { fd: file.into() })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The terminal's foreground process group.
    pub fn foreground(&self) -> Option<Pid> {
        // SAFETY: tcgetpgrp only reads from a valid descriptor.
        let pgrp = unsafe { libc::tcgetpgrp(self.raw_fd()) };
        (pgrp > 0).then(|| Pid::from_raw(pgrp))
    }

    /// Whether lc-cli's own process group is in the foreground.
    pub fn we_are_foreground(&self) -> bool {
        self.foreground() == Some(nix::unistd::getpgrp())
    }

    /// Makes `pgrp` the foreground process group.
    pub fn give_to(&self, pgrp: Pid) -> io::Result<()> {
        // SAFETY: a plain ioctl on a descriptor we own.
        if unsafe { libc::tcsetpgrp(self.raw_fd(), pgrp.as_raw()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Takes the terminal back for lc-cli's group if `from` has it.
    pub fn take_back_from(&self, from: Pid) {
        if self.foreground() == Some(from) {
            let _ = self.give_to(nix::unistd::getpgrp());
        }
    }
}

/// Whether stderr is a terminal (the status line is drawn only then).
pub fn stderr_is_terminal() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(libc::STDERR_FILENO) == 1 }
}

/// Whether lc-cli is in the foreground of the terminal on stderr (a
/// background job must not draw over the shell's prompt).
pub fn stderr_is_foreground() -> bool {
    // SAFETY: tcgetpgrp only inspects the descriptor.
    let pgrp = unsafe { libc::tcgetpgrp(libc::STDERR_FILENO) };
    pgrp > 0 && pgrp == nix::unistd::getpgrp().as_raw()
}

/// The width of the terminal on stderr, if it says.
pub fn stderr_width() -> Option<usize> {
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize into the struct we pass.
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(size.ws_col as usize)
}

/// Stops lc-cli as SIGTSTP's default action would, although lc-cli catches
/// SIGTSTP (to pass it on to the command first). With `whole_group`, the rest
/// of lc-cli's process group stops too, as Ctrl-Z would have stopped it. The
/// kernel discards the stop for an orphaned group (nobody could continue it);
/// returns once continued.
pub fn stop_self(whole_group: bool) {
    // SAFETY: plain sigaction/kill calls on valid arguments; the caught
    // disposition is put back exactly as it was.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        let mut caught: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGTSTP, &default, &mut caught) != 0 {
            return;
        }
        if whole_group {
            libc::killpg(libc::getpgrp(), libc::SIGTSTP);
        } else {
            libc::kill(libc::getpid(), libc::SIGTSTP);
        }
        libc::sigaction(libc::SIGTSTP, &caught, std::ptr::null_mut());
    }
}

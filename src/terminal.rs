//! The controlling terminal, for job control: while the command runs at a
//! terminal, its process group is the terminal's foreground group (so it can
//! read the terminal and Ctrl-C/Ctrl-Z reach it, and only it); lc-cli takes
//! the terminal back when the command stops or ends.

use std::fs::OpenOptions;
use std::io::{self, IsTerminal};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use nix::sys::signal::{kill, killpg, sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::unistd::{getpgrp, getpid, tcgetpgrp, tcsetpgrp, Pid};

pub(crate) struct Terminal {
    fd: OwnedFd,
}

impl Terminal {
    /// The controlling terminal, if lc-cli has one. SIGTTOU is ignored from
    /// then on, so that lc-cli can take the terminal back from a background
    /// group (a child resets it to the default before exec).
    pub(crate) fn open() -> Option<Terminal> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
            .open("/dev/tty")
            .ok()?;
        set_disposition(Signal::SIGTTOU, SigHandler::SigIgn);
        Some(Terminal { fd: file.into() })
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The terminal's foreground process group.
    pub(crate) fn foreground(&self) -> Option<Pid> {
        tcgetpgrp(&self.fd).ok().filter(|p| p.as_raw() > 0)
    }

    /// Whether lc-cli's own process group is in the foreground.
    pub(crate) fn we_are_foreground(&self) -> bool {
        self.foreground() == Some(getpgrp())
    }

    /// Makes `pgrp` the foreground process group.
    pub(crate) fn give_to(&self, pgrp: Pid) -> io::Result<()> {
        tcsetpgrp(&self.fd, pgrp).map_err(io::Error::from)
    }

    /// Takes the terminal back for lc-cli's group if `from` has it.
    pub(crate) fn take_back_from(&self, from: Pid) {
        if self.foreground() == Some(from) {
            let _ = self.give_to(getpgrp());
        }
    }
}

/// Whether stderr is a terminal (the status line is drawn only then).
pub(crate) fn stderr_is_terminal() -> bool {
    io::stderr().is_terminal()
}

/// Whether lc-cli is in the foreground of the terminal on stderr (a
/// background job must not draw over the shell's prompt).
pub(crate) fn stderr_is_foreground() -> bool {
    tcgetpgrp(io::stderr()).is_ok_and(|p| p.as_raw() > 0 && p == getpgrp())
}

/// The width of the terminal on stderr, if it says.
pub(crate) fn stderr_width() -> Option<usize> {
    // nix has no safe wrapper for this ioctl.
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into the struct we pass, which
    // lives for the whole call; on error it writes nothing.
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(size.ws_col as usize)
}

/// Stops lc-cli as SIGTSTP's default action would, although lc-cli catches
/// SIGTSTP (to pass it on to the command first). With `whole_group`, the rest
/// of lc-cli's process group stops too, as Ctrl-Z would have stopped it. The
/// kernel discards the stop for an orphaned group (nobody could continue it);
/// returns once continued.
pub(crate) fn stop_self(whole_group: bool) {
    let Some(caught) = set_disposition(Signal::SIGTSTP, SigHandler::SigDfl) else {
        return;
    };
    let _ = if whole_group {
        killpg(getpgrp(), Signal::SIGTSTP)
    } else {
        kill(getpid(), Signal::SIGTSTP)
    };
    // SAFETY: puts back exactly the disposition that was in place (tokio's
    // handler), as `set_disposition` below explains.
    let _ = unsafe { sigaction(Signal::SIGTSTP, &caught) };
}

/// Sets `signal` to the default or to ignore; returns what was in place.
fn set_disposition(signal: Signal, handler: SigHandler) -> Option<SigAction> {
    debug_assert!(matches!(handler, SigHandler::SigDfl | SigHandler::SigIgn));
    let action = SigAction::new(handler, SaFlags::empty(), SigSet::empty());
    // SAFETY: installing SIG_DFL or SIG_IGN runs no code of ours in a signal
    // handler, so nothing here must be async-signal-safe.
    unsafe { sigaction(signal, &action) }.ok()
}

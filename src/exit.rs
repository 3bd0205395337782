//! Exit statuses: the only place in the crate that picks a number. A leaf:
//! it knows no other module of the crate.
//!
//! Status 1 means only "the lock was not taken" (flock's convention, and
//! changeable with `-E`). lc-cli's own failures use sysexits.h numbers so a
//! script can tell "someone else holds it" from "something is broken".

use std::fmt;

/// What lc-cli itself can end with (a child's status is passed through as is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    Success,
    /// The lock was not taken: held (with `-n`) or the wait timed out.
    Conflict,
    /// Bad command line or arguments (an empty or too long key, ...).
    Usage,
    /// Damaged input data: `serve --data` found a corrupt record in its log.
    DataErr,
    /// The lock service could not be reached, or went away while we waited.
    Unavailable,
    /// `serve --data`: another server has the log (its PID in the message).
    LogInUse,
    /// An internal error: a bug, or something the OS refused us.
    Software,
    /// The lock was released on our side but the service did not confirm it:
    /// the key may still be held and needs a reset.
    ReleaseFailed,
    /// A held lock was lost (session expired, lease lost, node deleted).
    LockLost,
    /// The service answered something we did not expect, or refused us.
    Protocol,
    /// The key is held or waited for in another mode (exclusive or shared
    /// against `--limit N`, or another N): refused, never granted.
    ModeConflict,
    /// The command could not be executed (found but not runnable).
    CannotExecute,
    /// The command was not found.
    NotFound,
    /// Killed or interrupted by signal N (128 + N).
    Signal(i32),
    /// A status passed through unchanged (the child's, or `-E N`).
    Raw(i32),
}

impl ExitCode {
    /// Every status lc-cli itself can end with but success, in numeric
    /// order: what the exit-status tables list.
    pub const OWN: [ExitCode; 12] = [
        ExitCode::Conflict,
        ExitCode::Usage,
        ExitCode::DataErr,
        ExitCode::Unavailable,
        ExitCode::Software,
        ExitCode::LogInUse,
        ExitCode::ReleaseFailed,
        ExitCode::LockLost,
        ExitCode::Protocol,
        ExitCode::ModeConflict,
        ExitCode::CannotExecute,
        ExitCode::NotFound,
    ];

    pub fn code(self) -> i32 {
        match self {
            ExitCode::Success => 0,
            ExitCode::Conflict => 1,
            ExitCode::Usage => 64,
            ExitCode::DataErr => 65,
            ExitCode::Unavailable => 69,
            ExitCode::Software => 70,
            ExitCode::LogInUse => 73,
            ExitCode::ReleaseFailed => 74,
            ExitCode::LockLost => 75,
            ExitCode::Protocol => 76,
            ExitCode::ModeConflict => 78,
            ExitCode::CannotExecute => 126,
            ExitCode::NotFound => 127,
            ExitCode::Signal(n) => 128 + n,
            ExitCode::Raw(n) => n,
        }
    }
}

/// An exit that is not a failure to report (a conflict, a child's status):
/// raised as an error so it unwinds through `?`, turned into the status by
/// `main` without printing anything more.
#[derive(Debug)]
pub struct SilentExit(pub ExitCode);

impl fmt::Display for SilentExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "exit with status {}", self.0.code())
    }
}

impl std::error::Error for SilentExit {}

/// A failure with a message and the status it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: ExitCode,
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

pub fn fail(code: ExitCode, message: impl Into<String>) -> anyhow::Error {
    Failure {
        code,
        message: message.into(),
    }
    .into()
}

/// Ends the process with the result of `run`. A status that stands for
/// signal N (the command died of it, or it stopped the wait) is re-raised on
/// lc-cli with the default disposition, after the release, so a parent sees
/// "killed by N" as with the bare command and a shell loop stops on Ctrl-C
/// (`$?` is still 128+N). Signals whose default is not to end a process
/// (job control, SIGCHLD, SIGWINCH...) leave 128+N as a plain status.
pub fn exit(result: anyhow::Result<ExitCode>) -> ! {
    let code = code_of(result);
    if let ExitCode::Signal(n) = code {
        die_of(n);
    }
    std::process::exit(code.code())
}

fn die_of(n: i32) {
    use nix::sys::signal::{self, SigHandler, SigSet, SigmaskHow, Signal};
    let Ok(sig) = Signal::try_from(n) else {
        return;
    };
    use Signal::*;
    if matches!(
        sig,
        SIGTSTP | SIGTTIN | SIGTTOU | SIGSTOP | SIGCONT | SIGCHLD | SIGURG | SIGWINCH
    ) {
        return;
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // The command's SIGQUIT or SIGSEGV must not leave a core file of lc-cli.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_CORE, &mut limit) == 0 {
            limit.rlim_cur = 0;
            libc::setrlimit(libc::RLIMIT_CORE, &limit);
        }
    }
    // SAFETY: SIG_DFL installs no handler of ours; nothing runs after this
    // but the raise.
    let _ = unsafe { signal::signal(sig, SigHandler::SigDfl) };
    let mut set = SigSet::empty();
    set.add(sig);
    let _ = signal::pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
    let _ = signal::raise(sig);
}

/// Turns the result of `run` into a status, printing one line for a failure.
pub fn status_of(result: anyhow::Result<ExitCode>) -> i32 {
    code_of(result).code()
}

fn code_of(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(err) => {
            if let Some(silent) = err.downcast_ref::<SilentExit>() {
                return silent.0;
            }
            // Every failure with a status of its own is a `Failure` (backend
            // errors become one at the `cmd` boundary); anything else is ours.
            let code = err
                .chain()
                .find_map(|e| e.downcast_ref::<Failure>().map(|f| f.code))
                .unwrap_or(ExitCode::Software);
            eprintln!("lc-cli: {}", one_line(&err));
            code
        }
    }
}

/// "context: cause: cause" on one line, as users of flock expect. A context
/// that ends in "on SERVER" loses that tail when a cause names the server
/// again, so the line says it once.
fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    for i in 0..parts.len() {
        let Some(at) = parts[i].rfind(" on ") else {
            continue;
        };
        let server = parts[i][at + 4..].to_string();
        if !server.is_empty() && parts[i + 1..].iter().any(|p| p.contains(&server)) {
            parts[i].truncate(at);
        }
    }
    parts.join(": ").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_stable_and_distinct() {
        let codes: Vec<i32> = std::iter::once(ExitCode::Success)
            .chain(ExitCode::OWN)
            .map(|c| c.code())
            .collect();
        assert_eq!(codes, [0, 1, 64, 65, 69, 70, 73, 74, 75, 76, 78, 126, 127]);
        let mut sorted = codes.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), codes.len());
        assert_eq!(ExitCode::Signal(15).code(), 143);
    }

    #[test]
    fn own_failures_never_use_the_conflict_status() {
        for c in [
            ExitCode::Usage,
            ExitCode::Unavailable,
            ExitCode::LogInUse,
            ExitCode::Software,
            ExitCode::ReleaseFailed,
            ExitCode::LockLost,
            ExitCode::Protocol,
            ExitCode::ModeConflict,
        ] {
            assert_ne!(c.code(), 1);
        }
    }

    #[test]
    fn silent_exit_keeps_its_code() {
        let err: anyhow::Error = SilentExit(ExitCode::Raw(3)).into();
        assert_eq!(status_of(Err(err)), 3);
    }

    #[test]
    fn the_server_is_named_once() {
        let err =
            fail(ExitCode::Unavailable, "cannot reach h:1: refused").context("lock 'k' on h:1");
        assert_eq!(one_line(&err), "lock 'k': cannot reach h:1: refused");
        let err = fail(ExitCode::Unavailable, "refused").context("lock 'k' on h:1");
        assert_eq!(one_line(&err), "lock 'k' on h:1: refused");
    }

    #[test]
    fn failure_code_found_through_context() {
        let err = fail(ExitCode::Unavailable, "cannot reach").context("lock k");
        assert_eq!(status_of(Err(err)), 69);
    }
}

#[cfg(test)]
mod leaf {
    /// exit.rs imports nothing else of the crate (issue 12: no circle with
    /// the backends, whose errors become statuses in `cmd`).
    #[test]
    fn exit_is_a_leaf() {
        let source = include_str!("exit.rs");
        let code = source.split("#[cfg(test)]").next().unwrap();
        assert!(
            !code.contains("crate::"),
            "exit.rs uses another module of the crate"
        );
    }
}

//! Exit statuses: the only place in the crate that picks a number, and the
//! one place each status's meaning is written ([`TABLE`]): `--help`
//! (`cli.rs`) and the man pages (`examples/gen_docs`) are generated from it,
//! and a test holds the README's table to it. A leaf: it knows no other
//! module of the crate.
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
    /// `--newest`: a newer request superseded this one while it waited.
    Superseded,
    /// `--order N` below the key's mark: an older version than one that
    /// already ran.
    Outdated,
    /// `--cancel-running`: a newer run stopped this one's command.
    Cancelled,
    /// The command could not be executed (found but not runnable).
    CannotExecute,
    /// The command was not found.
    NotFound,
    /// Killed or interrupted by signal N (128 + N).
    Signal(i32),
    /// A status passed through unchanged (the child's, or `-E N`).
    Raw(i32),
}

/// One row of the exit-status table.
#[derive(Debug, Clone, Copy)]
pub struct Status {
    pub code: ExitCode,
    /// A few words, as `--help` lists it.
    pub name: &'static str,
    /// What it means, in one line (the man pages' EXIT STATUS).
    pub meaning: &'static str,
}

const fn row(code: ExitCode, name: &'static str, meaning: &'static str) -> Status {
    Status {
        code,
        name,
        meaning,
    }
}

/// Every status lc-cli itself can end with but success, in numeric order:
/// what the exit-status tables list (with the command's own status and
/// 128+N, below).
pub const TABLE: [Status; 15] = [
    row(ExitCode::Conflict, "when the lock was not taken (-E changes it)", "the lock was not taken: held (with -n) or the wait timed out; -E N changes it; unlock of a key that was not held"),
    row(ExitCode::Usage, "usage", "usage: a bad option, an empty key or one over 127 bytes, an unknown server address parameter"),
    row(ExitCode::DataErr, "corrupt log (serve --data)", "serve --data: the log holds a corrupt record (the message names the file and byte offset), is not an lc-cli log, or is of a newer format; the server did not start"),
    row(ExitCode::Unavailable, "service unreachable", "the lock service could not be reached, or went away while waiting, or does not answer like a lock server, or (lc-cli serve) is at its connection limit"),
    row(ExitCode::Software, "internal error", "internal error"),
    row(ExitCode::LogInUse, "log in use (serve --data)", "serve --data: another lc-cli serve has the log (the message names the file and its PID); the server did not start"),
    row(ExitCode::ReleaseFailed, "release failed", "the release was not confirmed: the key may still be held; the message names the reset command that clears it"),
    row(ExitCode::LockLost, "lock lost", "the lock was lost while the command ran; the command was stopped"),
    row(ExitCode::Protocol, "refused or unexpected answer", "the service refused the request (a wrong or missing password, a lock node's ACL, a -s or --limit the backend cannot take) or answered something unexpected (another protocol on that port)"),
    row(ExitCode::ModeConflict, "the key is used in another mode or with another --limit", "KEY is held or waited for in another mode: as a lock (exclusive or shared) against --limit N, or with another N; refused, nothing was taken"),
    row(ExitCode::Superseded, "superseded (--newest; --superseded-exit-code changes it)", "--newest: a newer --newest request on KEY (or a waiting one with a higher --order) superseded this one while it waited; the command did not run; the line names it; --superseded-exit-code N changes the status"),
    row(ExitCode::Outdated, "outdated (--order; --outdated-exit-code changes it)", "--order N: KEY's mark (the highest order whose command ended with status 0) is above N, when the request came or when its turn came; the command did not run; --outdated-exit-code N changes the status"),
    row(ExitCode::Cancelled, "cancelled by a newer run (--cancel-running)", "--cancel-running: a newer --cancel-running request on KEY stopped this run's command (SIGTERM, --kill-after, SIGKILL); the line names it; KEY was released"),
    row(ExitCode::CannotExecute, "cannot execute", "the command could not be executed"),
    row(ExitCode::NotFound, "not found", "the command was not found"),
];

/// The row for the command's own status, passed through.
pub const PASSED_THROUGH: &str = "the command's";

/// The row for a signal, as the tables name it, and what it means.
pub const SIGNAL: &str = "128+N";
pub const SIGNAL_MEANING: &str = "the command died of signal N, or signal N stopped lc-cli while it waited: lc-cli releases the key, then kills itself with N (default disposition, no core file), so a parent sees it killed by N and a shell loop stops on Ctrl-C; signals that do not end a process (SIGTSTP, SIGWINCH...) stay a plain 128+N";

/// The exit statuses as `lc-cli --help` ends: generated from [`TABLE`].
pub fn help_text() -> String {
    let (first, rest) = TABLE.split_first().expect("a table");
    let rest: Vec<String> = rest
        .iter()
        .map(|s| format!("{} {}", s.code.code(), s.name))
        .collect();
    format!(
        "Exit status: the command's own; {} {}; {}, {SIGNAL} signal N \
         (lc-cli then kills itself with N after the release, so a parent sees it killed by N).",
        first.code.code(),
        first.name,
        rest.join(", ")
    )
}

impl ExitCode {
    /// What `code` means, from [`TABLE`] ("" for success, signals and
    /// statuses passed through).
    pub fn meaning(self) -> &'static str {
        TABLE
            .iter()
            .find(|s| s.code == self)
            .map_or("", |s| s.meaning)
    }

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
            ExitCode::Superseded => 79,
            ExitCode::Outdated => 80,
            ExitCode::Cancelled => 81,
            ExitCode::CannotExecute => 126,
            ExitCode::NotFound => 127,
            ExitCode::Signal(n) => 128 + n,
            ExitCode::Raw(n) => n,
        }
    }
}

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

/// Ends the process with `code`, the status of `run` ([`report`]). A
/// status that stands for signal N (the command died of it, or it stopped
/// the wait) is re-raised on lc-cli with the default disposition, after the
/// release, so a parent sees "killed by N" as with the bare command and a
/// shell loop stops on Ctrl-C (`$?` is still 128+N). Signals whose default
/// is not to end a process (job control, SIGCHLD, SIGWINCH...) leave 128+N
/// as a plain status.
pub fn end(code: ExitCode) -> ! {
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

/// Turns the result of `run` into a status, printing one line for a
/// failure. (An exit that is no failure, a conflict or the command's own
/// status, is an `Ok` status: nothing raises one as an error.)
pub fn report(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(err) => {
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
            .chain(TABLE.iter().map(|s| s.code))
            .map(|c| c.code())
            .collect();
        assert_eq!(
            codes,
            [0, 1, 64, 65, 69, 70, 73, 74, 75, 76, 78, 79, 80, 81, 126, 127]
        );
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
    fn every_status_has_a_name_and_a_meaning() {
        for s in TABLE {
            assert!(!s.name.is_empty() && !s.meaning.is_empty(), "{s:?}");
            assert!(!s.meaning.contains('\n'), "{s:?}");
            assert_eq!(s.code.meaning(), s.meaning);
        }
        assert_eq!(ExitCode::Success.meaning(), "");
    }

    #[test]
    fn help_lists_every_status_once() {
        let help = help_text();
        for s in TABLE {
            let entry = format!(" {} {}", s.code.code(), s.name);
            assert_eq!(help.matches(&entry).count(), 1, "{entry} in {help}");
        }
        assert!(help.contains("128+N signal N"), "{help}");
    }

    /// The README's exit-status table names the same statuses as [`TABLE`]
    /// (plus the command's own and 128+N), each once.
    #[test]
    fn the_readme_table_matches() {
        let readme = include_str!("../README.md");
        let table = readme
            .split("\n## Exit status\n")
            .nth(1)
            .expect("README has an Exit status section");
        let rows: Vec<&str> = table
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2) // the header and its rule
            .map(|l| l.trim_start_matches('|').split('|').next().unwrap().trim())
            .collect();
        let mut codes: Vec<i32> = Vec::new();
        let mut others: Vec<&str> = Vec::new();
        for r in &rows {
            match r.parse() {
                Ok(n) => codes.push(n),
                Err(_) => others.push(r),
            }
        }
        let ours: Vec<i32> = TABLE.iter().map(|s| s.code.code()).collect();
        assert_eq!(
            codes, ours,
            "README's numbered rows, in order, vs exit::TABLE"
        );
        assert_eq!(others, [PASSED_THROUGH, SIGNAL], "README's other rows");
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
        assert_eq!(report(Err(err)), ExitCode::Unavailable);
        assert_eq!(report(Ok(ExitCode::Raw(3))).code(), 3);
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

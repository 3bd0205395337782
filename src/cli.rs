//! The command line: clap types only, no logic. `cmd` turns them into plain
//! config before anything else sees them.
//!
//! Options live on the subcommands that use them: only the commands that
//! talk to a lock service have `--server` and `--connect-timeout`, and a
//! backend's tuning is part of its server address (`redis://h/0?ttl=30s`),
//! so `serve` and `completions` show only their own options. The one
//! thing read from elsewhere is `--server`'s help, rendered from the table
//! of backends (`backend::help`).

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

mod serve_args;
pub use serve_args::ServeArgs;

pub use crate::duration::parse_duration;

#[derive(Debug, Parser)]
#[command(
    name = "lc-cli",
    version,
    about = "A distributed flock(1): take a named lock from a lock service, run a command while holding it",
    // Generated from the one exit-status table.
    after_help = crate::exit::help_text()
)]
pub struct Cli {
    #[command(flatten)]
    pub top: TopArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// `lock` and `trylock` alone, the commands CI jobs run: `cmd::parse` tries
/// this first, since clap's parse was a third of the instructions of
/// `lc-cli lock k -- true`, more than half of it building every other
/// subcommand. Whatever it parses, [`Cli`] parses the same (a unit test in
/// `cmd` holds them equal).
#[derive(Debug, Parser)]
#[command(name = "lc-cli")]
pub struct RunCli {
    #[command(flatten)]
    pub top: TopArgs,

    #[command(subcommand)]
    pub command: RunCommand,
}

/// [`Command`]'s `lock` and `trylock`, as they are there.
#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends
    Lock(LockArgs),
    /// Take KEY only if it is free now, run COMMAND while holding it
    Trylock(RunArgs),
}

/// The options before the subcommand.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// The lock service, for the subcommands that talk to one (as their own
    /// --server, which wins)
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,

    /// Before the subcommand, as the subcommand's --connect-timeout
    #[arg(long, hide = true, value_parser = parse_duration, value_name = "DURATION")]
    pub connect_timeout: Option<Duration>,

    #[command(flatten)]
    pub deprecated: DeprecatedTuning,

    /// Say more: how long the wait took, what runs, each server event
    /// (global: before or after the subcommand)
    #[arg(long, short, global = true)]
    pub verbose: bool,
}

/// The tuning flags of earlier releases, now parameters of the server
/// address; still accepted before the subcommand, with a note.
#[derive(Debug, Args)]
pub struct DeprecatedTuning {
    #[arg(long, hide = true, value_parser = parse_duration, value_name = "DURATION")]
    pub session_timeout: Option<Duration>,

    #[arg(long, hide = true, value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Option<Duration>,

    #[arg(long, hide = true, value_parser = parse_duration, value_name = "DURATION")]
    pub queue_timeout: Option<Duration>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends
    Lock(LockArgs),
    /// Take KEY only if it is free now, run COMMAND while holding it
    Trylock(RunArgs),
    /// Release KEY (a hold left by `lock` without a command)
    Unlock(UnlockArgs),
    /// Wait until KEY is free: take it in turn and release it at once
    Wait(WaitArgs),
    /// Force-release keys (by key, or by the source that holds them)
    Reset(ResetArgs),
    /// List held keys: holder, since when, how many wait
    Keys(KeysArgs),
    /// Show KEY's mark (the highest --order that ended with status 0), or clear it
    Mark(MarkArgs),
    /// Show how KEY's last holds ended: who, why, when, with what status
    History(HistoryArgs),
    /// Say what the lock service is and whether a lock could be taken now
    Ping(PingArgs),
    /// Run the built-in lock server
    Serve(ServeArgs),
    /// Print a shell completion script: `source <(lc-cli completions bash)`
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// How to reach the lock service: on every subcommand that talks to one.
#[derive(Debug, Args)]
pub struct ServiceArgs {
    // Its help is rendered from the table of backends, where each scheme,
    // its parameters and its variables are said once.
    #[arg(
        long,
        value_name = "URL",
        help = crate::backend::help::server_help(),
        long_help = crate::backend::help::server_long_help()
    )]
    pub server: Option<String>,

    /// How long to keep trying to reach the service (name lookup included)
    /// [default: 2s]
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub connect_timeout: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// Do not wait: if KEY is held, exit with the conflict status at once
    #[arg(long, short = 'n', visible_alias = "no-wait")]
    pub nonblock: bool,

    /// Stop waiting after DURATION (30s, 5m, or seconds such as 2.5; 0: like -n)
    #[arg(long, short = 'w', visible_alias = "wait", value_parser = parse_duration, value_name = "DURATION", allow_hyphen_values = true)]
    pub timeout: Option<Duration>,

    #[command(flatten)]
    pub run: RunArgs,
}

/// What `lock` and `trylock` share: the key, the command, what to do when
/// the lock is not taken.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock's name (1 to 127 bytes)
    pub key: String,

    /// Exit status when the lock was not taken (held with -n, or timed
    /// out); one line on stderr then says so and, where the service knows
    /// it, names the holder, since when, and the reset command that clears
    /// it (without -v, unlike flock; -q silences it)
    #[arg(long, short = 'E', default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(i32).range(0..=255))]
    pub conflict_exit_code: i32,

    /// Run STRING through `sh -c`
    #[arg(
        long = "command",
        short = 'c',
        value_name = "STRING",
        conflicts_with = "command"
    )]
    pub shell_command: Option<String>,

    /// Grace between SIGTERM and SIGKILL when lc-cli must stop the command
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub kill_after: Duration,

    /// Without a command only: the kept hold frees itself DURATION after it
    /// is granted (the next waiter gets KEY), unless `unlock` or `reset`
    /// ends it first; not on ZooKeeper without
    /// `zookeeper.extendedTypesEnabled=true`
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub expire: Option<Duration>,

    /// No line on stderr for a conflict, a timeout, or a hold kept without a
    /// command
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Also hold KEY (repeatable): all the keys or none, taken in one
    /// global order (sorted by their bytes) so that no two requests
    /// deadlock; the command runs only while holding them all and gets
    /// every token in LC_LOCK_TOKENS (docs/several-keys.md); exclusive
    /// locks with a command only
    #[arg(long = "and", value_name = "KEY")]
    pub and: Vec<String>,

    #[command(flatten)]
    pub mode: ModeArgs,

    #[command(flatten)]
    pub source: SourceArg,

    #[command(flatten)]
    pub queue: QueueArgs,

    #[command(flatten)]
    pub service: ServiceArgs,

    /// The command to run while holding KEY, with its arguments and options
    /// (`--` before it is optional); without one, KEY stays held until
    /// `unlock` or `reset`
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,

    /// `--` was given with no command after it (set by `cmd::parse`).
    #[arg(skip)]
    pub empty_after_dashdash: bool,
}

/// A note, and the deploy-queue rules (docs/deploy-queues.md): for an
/// exclusive lock with a command.
#[derive(Debug, Args)]
#[command(next_help_heading = "Deploy queues")]
pub struct QueueArgs {
    /// Why this hold, shown to whoever lists KEY (`keys`, the "held by"
    /// line): 1 to 200 bytes of text, no control characters; notes are
    /// visible to every client that may list keys, so no secrets
    #[arg(long, env = "LC_NOTE", value_name = "TEXT")]
    pub note: Option<String>,

    /// Newest wins: while this request waits, a newer --newest request on
    /// KEY (or a waiting one with a higher --order) supersedes it; it then
    /// exits 79 without running COMMAND. Never touches the running holder;
    /// requests without --newest are neither superseded nor supersede
    #[arg(long)]
    pub newest: bool,

    /// The version this run deploys (a commit time, a pipeline id: it grows
    /// with the version, 0 to 2^63-1): KEY remembers the highest order
    /// whose COMMAND ended with status 0 (its mark, `lc-cli mark KEY`); a
    /// lower order exits 80 without running, when it comes and when its
    /// turn comes; an equal order (a re-run) runs
    #[arg(long, value_name = "N")]
    pub order: Option<u64>,

    /// Cancel-in-progress: a holder of KEY that took it with
    /// --cancel-running too is stopped (SIGTERM, --kill-after, SIGKILL;
    /// it exits 81) when this request comes, and this one gets KEY once its
    /// command has ended; a holder without it is never stopped
    #[arg(long)]
    pub cancel_running: bool,

    /// Exit status when superseded (79 by default; CI jobs often want 0)
    #[arg(long, visible_alias = "superseded-exit", value_name = "N", value_parser = clap::value_parser!(i32).range(0..=255))]
    pub superseded_exit_code: Option<i32>,

    /// Exit status when outdated (80 by default)
    #[arg(long, visible_alias = "outdated-exit", value_name = "N", value_parser = clap::value_parser!(i32).range(0..=255))]
    pub outdated_exit_code: Option<i32>,

    /// With a command only (issue 45): after COMMAND ends, KEY stays held
    /// until DURATION after the grant, as a kept hold that expires (`unlock`
    /// and `reset` clear it); a longer command releases at its end. Once
    /// per window on a fleet: docs/fleet-jobs.md. Not on PostgreSQL, nor
    /// ZooKeeper without TTL nodes (76)
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub hold_at_least: Option<Duration>,
}

/// How KEY is held: exclusive (the default), shared, or by at most N at once.
#[derive(Debug, Args)]
pub struct ModeArgs {
    /// A shared lock (as flock -s): held together with other shared
    /// holders, never with an exclusive one; in line with them, first come
    /// first served
    #[arg(long, short = 's', conflicts_with_all = ["exclusive", "limit"])]
    pub shared: bool,

    /// An exclusive lock (as flock -x): the default
    #[arg(long, short = 'x', conflicts_with = "limit")]
    pub exclusive: bool,

    /// A counting semaphore: at most N holders at once, first come first
    /// served (N = 1 is an exclusive lock); every holder and waiter of KEY
    /// must give the same N
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,

    /// A named pool: at most one holder per name, the command told its
    /// name in LC_SLOT (implies --limit with the count of names; a --limit
    /// that differs is refused)
    #[arg(long, value_name = "A,B,..", value_delimiter = ',', conflicts_with_all = ["shared", "exclusive"])]
    pub slots: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SourceArg {
    /// Who holds the lock, for `reset --source` (default: this host's name)
    #[arg(long, env = "LC_SOURCE", value_name = "NAME")]
    pub source: Option<String>,
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// The key to release: one held by `lc-cli lock KEY` without a command
    pub key: String,

    #[command(flatten)]
    pub service: ServiceArgs,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The key to wait for; it is taken in turn and released at once
    pub key: String,

    /// Stop waiting after DURATION
    #[arg(long, short = 'w', visible_alias = "wait", value_parser = parse_duration, value_name = "DURATION", allow_hyphen_values = true)]
    pub timeout: Option<Duration>,

    /// Exit status on timeout
    #[arg(long, short = 'E', default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(i32).range(0..=255))]
    pub conflict_exit_code: i32,

    /// No line on stderr for a timeout
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Why this wait, shown to whoever lists KEY's waiters and in the
    /// waiters' status line: 1 to 200 bytes of text, no control
    /// characters; visible to every client that may list keys, so no secrets
    #[arg(long, env = "LC_NOTE", value_name = "TEXT")]
    pub note: Option<String>,

    #[command(flatten)]
    pub mode: ModeArgs,

    #[command(flatten)]
    pub source: SourceArg,

    #[command(flatten)]
    pub service: ServiceArgs,
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    /// Keys to force-release
    #[arg(required_unless_present = "source", conflicts_with = "source")]
    pub keys: Vec<String>,

    /// Release every key held by these sources and withdraw their waiters
    /// (never taken from LC_SOURCE)
    #[arg(long, num_args = 1.., value_name = "SOURCE")]
    pub source: Vec<String>,

    #[command(flatten)]
    pub service: ServiceArgs,
}

#[derive(Debug, Args)]
pub struct KeysArgs {
    /// Only keys matching this glob (`*` and `?`)
    pub pattern: Option<String>,

    /// One JSON object per key, one per line
    #[arg(long)]
    pub json: bool,

    /// Order: by key, or by age (the oldest hold first: the stuck one)
    #[arg(long, value_enum, default_value = "key", value_name = "ORDER")]
    pub sort: KeysOrder,

    /// Also each waiter, in line order: its key, source, peer, since when
    /// it waits, mode (where the service knows them; with --json, a
    /// `waiters` array per key)
    #[arg(long)]
    pub waiters: bool,

    /// A live view, refreshed every --interval until Ctrl-C: at a terminal,
    /// only the lines that changed are redrawn; with --json, one object per
    /// change (held, released, waiting, waits, left, error)
    #[arg(long)]
    pub watch: bool,

    /// How often at most --watch lists the keys: every --interval where the
    /// service has no change feed, else when it tells a change
    #[arg(long, value_parser = parse_interval, value_name = "DURATION", default_value = "1s", requires = "watch")]
    pub interval: Duration,

    #[command(flatten)]
    pub service: ServiceArgs,
}

/// `--interval`: at least 100ms, so that a watch cannot become a load.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(100) {
        return Err(format!("{s} is below 100ms"));
    }
    Ok(d)
}

/// `lc-cli history KEY` (docs/history.md).
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The key whose last holds to show, newest first
    pub key: String,

    /// Show at most N holds (the service keeps at most its cap, 100 by default)
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub limit: u64,

    /// One JSON object per hold, one per line
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub service: ServiceArgs,
}

#[derive(Debug, Args)]
pub struct MarkArgs {
    /// The key whose mark to show (exit 1 when it has none)
    pub key: String,

    /// Clear the mark, so that any --order runs again (after a rollback)
    #[arg(long)]
    pub clear: bool,

    #[command(flatten)]
    pub service: ServiceArgs,
}

#[derive(Debug, Args)]
pub struct PingArgs {
    /// One JSON object instead of the line
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub service: ServiceArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeysOrder {
    Key,
    Age,
}

#[cfg(test)]
mod tests;

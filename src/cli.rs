//! The command line: clap types only, no logic. `cmd` turns them into plain
//! config before anything else sees them.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::backend::ServerSpec;

#[derive(Debug, Parser)]
#[command(
    name = "lc-cli",
    version,
    about = "A distributed flock(1): take a named lock from a lock service, run a command while holding it",
    after_help = "Exit status: the command's own; 1 when the lock was not taken (-E changes it); \
64 usage, 65 corrupt log (serve --data), 69 service unreachable, 70 internal error, 74 release failed, 75 lock lost, \
76 refused or unexpected answer, 126 cannot execute, 127 not found, 128+N signal N."
)]
pub struct Cli {
    /// The lock service: HOST:PORT or lc://HOST:PORT (built-in protocol),
    /// zk://HOST:PORT[,HOST:PORT...][/PATH], redis://HOST:PORT[,HOST:PORT...][/DB]
    #[arg(long, short = 's', global = true, env = "LC_SERVER", default_value = crate::backend::DEFAULT_SERVER, value_name = "URL")]
    pub server: ServerSpec,

    /// Say more: how long the wait took, what runs, each server event
    #[arg(long, short, global = true)]
    pub verbose: bool,

    /// How long to keep trying to reach the service (name lookup included)
    #[arg(long, global = true, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub connect_timeout: std::time::Duration,

    /// ZooKeeper session timeout: how long a dead holder keeps the lock
    #[arg(long, global = true, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub session_timeout: std::time::Duration,

    /// Redis lease on the lock key, renewed at a third of it while held
    #[arg(long, global = true, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: std::time::Duration,

    /// Redis: how long a dead waiter keeps its place in the queue
    #[arg(long, global = true, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub queue_timeout: std::time::Duration,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Wait in line for KEY, run COMMAND while holding it, release it when COMMAND ends
    Lock(LockArgs),
    /// Like `lock --nonblock`: take KEY only if it is free now
    Trylock(LockArgs),
    /// Release KEY (a hold left by `lock` without a command)
    Unlock(KeyArgs),
    /// Wait until KEY is free: take it in turn and release it at once
    Wait(WaitArgs),
    /// Force-release keys (by key, or by the source that holds them)
    Reset(ResetArgs),
    /// List held keys: holder, since when, how many wait
    Keys(KeysArgs),
    /// Run the built-in lock server
    Serve(ServeArgs),
    /// Print a shell completion script: `source <(lc-cli completions bash)`
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock's name (1 to 127 bytes)
    pub key: String,

    /// Do not wait: if KEY is held, exit with the conflict status at once
    #[arg(long, short = 'n', visible_alias = "no-wait")]
    pub nonblock: bool,

    /// Stop waiting after DURATION (30s, 5m, or seconds such as 2.5; 0: like -n)
    #[arg(long, short = 'w', visible_alias = "wait", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<std::time::Duration>,

    /// Exit status when the lock was not taken (held with -n, or timed out)
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
    pub kill_after: std::time::Duration,

    #[command(flatten)]
    pub source: SourceArg,

    /// The command to run while holding KEY; without one, KEY stays held
    /// until `unlock` or `reset`
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct SourceArg {
    /// Who holds the lock, for `reset --source` (default: this host's name)
    #[arg(long, env = "LC_SOURCE", value_name = "NAME")]
    pub source: Option<String>,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    pub key: String,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    pub key: String,

    /// Stop waiting after DURATION
    #[arg(long, short = 'w', visible_alias = "wait", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<std::time::Duration>,

    /// Exit status on timeout
    #[arg(long, short = 'E', default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(i32).range(0..=255))]
    pub conflict_exit_code: i32,

    #[command(flatten)]
    pub source: SourceArg,
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
}

#[derive(Debug, Args)]
pub struct KeysArgs {
    /// Only keys matching this glob (`*` and `?`)
    pub pattern: Option<String>,

    /// One JSON object per key, one per line
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (loopback by default; port 0 picks a free one)
    #[arg(
        long,
        short = 'l',
        env = "BIND_ADDRESS",
        default_value = "127.0.0.1:22119",
        value_name = "ADDR"
    )]
    pub listen: SocketAddr,

    /// Keep held keys in a write-ahead log at PATH, so they survive a restart
    #[arg(long, env = "DATA_PATH", value_name = "PATH")]
    pub data: Option<PathBuf>,

    /// How long a client may take to send its whole request
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub read_timeout: std::time::Duration,

    /// Address of the manager port (KEYS, RSET, RSBS, KEYX) [default: the listen port + 1]
    #[arg(long, value_name = "ADDR")]
    pub manager: Option<SocketAddr>,

    /// Serve Prometheus metrics over HTTP at ADDR/metrics (off by default)
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
}

/// `30s`, `5m`, `1h 30m`, or a bare number of seconds with fractions (`2.5`),
/// as flock takes it.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!("'{s}' is not a duration"));
        }
        return Ok(std::time::Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(s).map_err(|e| format!("'{s}' is not a duration: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2.5").unwrap().as_millis(), 2500);
        assert_eq!(parse_duration("30s").unwrap().as_secs(), 30);
        assert_eq!(parse_duration("5m").unwrap().as_secs(), 300);
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn command_after_double_dash() {
        let cli =
            Cli::try_parse_from(["lc-cli", "lock", "k", "-w", "3", "--", "ls", "-l"]).unwrap();
        let Command::Lock(args) = cli.command else {
            panic!()
        };
        assert_eq!(args.command, ["ls", "-l"]);
        assert_eq!(args.timeout.unwrap().as_secs(), 3);
    }
}

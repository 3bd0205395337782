//! One file per subcommand; `run` turns the parsed command line into plain
//! config and dispatches.

mod at_least;
pub(crate) mod completions;
pub(crate) mod history;
mod holder;
pub(crate) mod keys;
pub(crate) mod lock;
mod loss;
pub(crate) mod mark;
pub(crate) mod multi;
pub(crate) mod ping;
mod queue_options;
pub(crate) mod reset;
pub(crate) mod serve;
mod slots;
pub(crate) mod unlock;
pub(crate) mod wait;
mod waiting;

use std::ffi::OsString;
use std::time::Duration;

use anyhow::Result;
use clap::Parser;

use crate::backend::{
    Backend, BackendConfig, BackendError, ServerUrl, DEFAULT_CONNECT_TIMEOUT, DEFAULT_SERVER,
};
use crate::cli::{Cli, Command, DeprecatedTuning, RunCli, RunCommand, ServiceArgs, TopArgs};
use crate::exit::{fail, ExitCode};

/// Parses the command line, and notes what clap cannot tell apart: `lock
/// KEY --` with nothing after `--` (a usage error) from `lock KEY` (a hold).
pub fn parse(argv: Vec<OsString>) -> std::result::Result<Cli, clap::Error> {
    let mut cli = match parse_run(&argv) {
        Some(cli) => cli,
        None => Cli::try_parse_from(&argv)?,
    };
    let run = match &mut cli.command {
        Command::Lock(args) => &mut args.run,
        Command::Trylock(run) => run,
        _ => return Ok(cli),
    };
    run.empty_after_dashdash = run.command.is_empty() && argv.iter().any(|a| a == "--");
    Ok(cli)
}

/// `lock` and `trylock` parsed without building the other subcommands
/// ([`RunCli`]); anything else, an error or `--help` included, is left to
/// the full parse, which says it as it always did.
fn parse_run(argv: &[OsString]) -> Option<Cli> {
    argv.iter()
        .skip(1)
        .any(|a| a == "lock" || a == "trylock")
        .then_some(())?;
    let RunCli { top, command } = RunCli::try_parse_from(argv).ok()?;
    let command = match command {
        RunCommand::Lock(args) => Command::Lock(args),
        RunCommand::Trylock(run) => Command::Trylock(run),
    };
    Some(Cli { top, command })
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    let Cli {
        top:
            TopArgs {
                server,
                connect_timeout,
                deprecated,
                verbose,
            },
        command,
    } = cli;
    let top = TopLevel {
        server,
        connect_timeout,
        deprecated,
        verbose,
    };
    match command {
        Command::Lock(mut args) => {
            let config = top.config(&args.run.service)?;
            let and = std::mem::take(&mut args.run.and);
            let options = lock::LockOptions::from_args(args.run, args.nonblock, args.timeout)?;
            multi::run_or_single(&config, options, and)
        }
        Command::Trylock(mut args) => {
            let config = top.config(&args.service)?;
            let and = std::mem::take(&mut args.and);
            let options = lock::LockOptions::from_args(args, true, None)?;
            multi::run_or_single(&config, options, and)
        }
        Command::Unlock(args) => unlock::run(&top.config(&args.service)?, args),
        Command::Wait(args) => wait::run(&top.config(&args.service)?, args),
        Command::Reset(args) => reset::run(&top.config(&args.service)?, args),
        Command::Keys(args) => keys::run(&top.config(&args.service)?, args),
        Command::Mark(args) => mark::run(&top.config(&args.service)?, args),
        Command::History(args) => history::run(&top.config(&args.service)?, args),
        Command::Ping(args) => ping::run(&top.config(&args.service)?, args),
        Command::Serve(args) => {
            top.refuse("serve")?;
            serve::run(args, verbose)
        }
        Command::Completions { shell } => {
            top.refuse("completions")?;
            completions::run(shell)
        }
    }
}

/// The service options given before the subcommand, as earlier releases
/// took them.
struct TopLevel {
    server: Option<String>,
    connect_timeout: Option<Duration>,
    deprecated: DeprecatedTuning,
    verbose: bool,
}

impl TopLevel {
    /// The backend config of a subcommand that talks to a service: its own
    /// options, else those before it, else LC_SERVER (read only here, so a
    /// bad one cannot break `serve` or `completions`), else the defaults.
    fn config(&self, own: &ServiceArgs) -> Result<BackendConfig> {
        let url = resolve_server(own.server.as_deref().or(self.server.as_deref()))?;
        let connect_timeout = own
            .connect_timeout
            .or(self.connect_timeout)
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let mut config = BackendConfig::new(url, connect_timeout);
        config.verbose = self.verbose;
        let d = &self.deprecated;
        if let Some(t) = d.session_timeout {
            deprecated("--session-timeout", "zk://HOST/PATH?session-timeout=10s");
            config.session_timeout = t;
        }
        if let Some(t) = d.ttl {
            deprecated("--ttl", "redis://HOST/DB?ttl=30s");
            config.ttl = t;
        }
        if let Some(t) = d.queue_timeout {
            deprecated("--queue-timeout", "redis://HOST/DB?queue-timeout=60s");
            config.queue_timeout = t;
        }
        Ok(config)
    }

    /// `serve` and `completions` talk to no service.
    fn refuse(&self, subcommand: &str) -> Result<()> {
        let d = &self.deprecated;
        let given = [
            (self.server.is_some(), "--server"),
            (self.connect_timeout.is_some(), "--connect-timeout"),
            (d.session_timeout.is_some(), "--session-timeout"),
            (d.ttl.is_some(), "--ttl"),
            (d.queue_timeout.is_some(), "--queue-timeout"),
        ];
        match given.iter().find(|(g, _)| *g) {
            Some((_, flag)) => Err(fail(
                ExitCode::Usage,
                format!(
                    "{flag} is not an option of '{subcommand}', which talks to no lock service"
                ),
            )),
            None => Ok(()),
        }
    }
}

fn deprecated(flag: &str, instead: &str) {
    eprintln!("lc-cli: {flag} is deprecated: put it in the server address, as {instead}");
}

/// The one place the server address is chosen and parsed: `--server`
/// (the subcommand's, else the one before it), else LC_SERVER, else the
/// default. A bad address is a usage error that quotes it masked.
fn resolve_server(flag: Option<&str>) -> Result<ServerUrl> {
    let (origin, text) = match (flag, server_from_env()) {
        (Some(flag), _) => ("--server", flag.to_string()),
        (None, Some(env)) => ("LC_SERVER", env),
        (None, None) => ("the default server", DEFAULT_SERVER.to_string()),
    };
    text.parse().map_err(|e| {
        let shown = crate::backend::secret::mask(&text);
        fail(ExitCode::Usage, format!("invalid {origin} '{shown}': {e}"))
    })
}

/// LC_SERVER, when set and not blank.
fn server_from_env() -> Option<String> {
    std::env::var("LC_SERVER")
        .ok()
        .filter(|v| !v.trim().is_empty())
}

/// Runs a client command on one thread (they wait, they do not compute).
/// The runtime is shut down without waiting for blocking tasks: a host name
/// lookup that outlived its timeout must not hold up the exit.
pub(crate) fn block_on<T>(future: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(ExitCode::Software, format!("cannot start the runtime: {e}")))?;
    let result = runtime.block_on(future);
    runtime.shutdown_background();
    result
}

/// The status a backend error ends lc-cli with: decided here, at the
/// boundary between the commands and the backends.
fn status_of(e: &BackendError) -> ExitCode {
    match e {
        BackendError::Unavailable { .. } | BackendError::AtLimit { .. } => ExitCode::Unavailable,
        BackendError::Refused { .. }
        | BackendError::Protocol { .. }
        | BackendError::Unsupported { .. } => ExitCode::Protocol,
        BackendError::ModeConflict { .. } => ExitCode::ModeConflict,
        BackendError::NotReleased { .. } => ExitCode::ReleaseFailed,
        BackendError::BadKey { .. } | BackendError::BadSource { .. } => ExitCode::Usage,
        BackendError::Other(_) => ExitCode::Software,
    }
}

/// A backend result as a command's: the error becomes a failure with its
/// exit status.
pub(crate) trait OrFail<T> {
    fn or_fail(self) -> Result<T>;
}

impl<T> OrFail<T> for crate::backend::Result<T> {
    fn or_fail(self) -> Result<T> {
        // A library's message could quote what it was given: scrubbed.
        self.map_err(|e| fail(status_of(&e), crate::backend::secret::scrub(&e.to_string())))
    }
}

/// Connects to the backend, refusing a bad key before any connection.
pub(crate) async fn connect_for(config: &BackendConfig, keys: &[&str]) -> Result<Box<dyn Backend>> {
    crate::backend::check_names(Some(&*config.server), keys, &[]).or_fail()?;
    crate::backend::connect(config).await.or_fail()
}

/// A `--source` the protocol can carry, checked before connecting.
pub(crate) fn check_source_shape(source: &str) -> Result<()> {
    crate::backend::check_names(None, &[], &[source]).or_fail()
}

/// `lc-cli [--server ADDR] SUBCOMMAND KEY`, quoted for a shell: the exact
/// command that acts on `key` where this one did. `--server` is left out
/// when it is the default and LC_SERVER does not say otherwise.
pub(crate) fn command_line(config: &BackendConfig, subcommand: &str, key: &str) -> String {
    let server = config.shown();
    let implied = match server_from_env() {
        Some(v) => {
            v.parse::<ServerUrl>().map(|u| u.server.to_string()) == Ok(config.server.to_string())
        }
        None => server == DEFAULT_SERVER,
    };
    if implied {
        format!("lc-cli {subcommand} {}", shell_quote(key))
    } else {
        format!(
            "lc-cli --server {} {subcommand} {}",
            shell_quote(&server),
            shell_quote(key)
        )
    }
}

/// Writes to stdout, one policy for every subcommand: a closed stdout
/// (`lc-cli keys | head -1`) is not an error, the output is dropped and the
/// command ends with its own status (as zoxide's `pipe_exit`); any other
/// write error is one.
pub(crate) fn print_out(text: impl AsRef<[u8]>) -> Result<()> {
    use std::io::Write;
    print_with(|out| out.write_all(text.as_ref()).and_then(|()| out.flush()))
}

/// Writes to stdout with `write` (a broken pipe is no error, as in
/// [`print_out`]).
pub(crate) fn print_with(
    write: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>,
) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match write(&mut out) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(fail(
            ExitCode::Software,
            format!("cannot write to stdout: {e}"),
        )),
        _ => Ok(()),
    }
}

/// Text from the service (keys, sources, peers) as a terminal may show it:
/// control characters escaped, so a key cannot forge a line or recolour
/// the terminal.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A word as a POSIX shell reads it back: as is when safe, else quoted.
pub(crate) fn shell_quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./:@%+=,-".contains(&b));
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// This machine's name: the default source, so one `reset --source HOST`
/// clears everything a dead machine held.
pub(crate) fn default_source() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "lc-cli".to_string())
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    fn argv(line: &str) -> Vec<OsString> {
        std::iter::once("lc-cli")
            .chain(line.split(' ').filter(|a| !a.is_empty()))
            .map(OsString::from)
            .collect()
    }

    /// The short parse of `lock` and `trylock` gives what the full one
    /// gives, is taken for every `lock` and `trylock` the full one accepts,
    /// and leaves everything else (errors, help, other subcommands) to it.
    #[test]
    fn the_run_parse_is_the_full_one() {
        let lines = [
            "lock k",
            "lock k -- true",
            "lock k true -x",
            "lock -n k -- sh -c exit",
            "lock -w 2.5 k -E 75 -q -- a --b",
            "lock -w -1 k",
            "lock --wait 5m --no-wait k",
            "-v lock k -- true",
            "lock k -v -- true",
            "--server 10.0.0.1:1 --connect-timeout 2s lock k",
            "--server=lc://h:1 lock --server redis://x k --source ci-7 -s",
            "--ttl 5s --session-timeout 9s --queue-timeout 1m lock --limit 3 k",
            "lock k --expire 2h",
            "lock k -c 'echo hi'",
            "lock k --kill-after 1s -- true",
            "trylock k",
            "trylock k -- true",
            "trylock -E 3 k -c x -x",
            "--server lock trylock k",
            "--server trylock unlock lock",
            "unlock lock",
            "keys lock",
            "wait lock",
            "lock",
            "lock --help",
            "lock -h",
            "help lock",
            "lock k -s -x",
            "lock k --limit 0",
            "lock k -E 256",
            "lock k -c x -- y",
            "lock k --bogus",
            "--bogus lock k",
            "lock -w nonsense k",
            "lokc k",
            "--version lock",
            "lock --version",
            "trylock -n k",
            "serve lock",
        ];
        let mut fast = 0;
        for line in lines {
            let argv = argv(line);
            let full = Cli::try_parse_from(&argv).ok();
            let short = parse_run(&argv);
            match (&short, &full) {
                (Some(short), Some(full)) => {
                    assert_eq!(format!("{short:?}"), format!("{full:?}"), "{line}")
                }
                (Some(short), None) => panic!("{line}: {short:?}, refused by the full parse"),
                (
                    None,
                    Some(Cli {
                        command: Command::Lock(_) | Command::Trylock(_),
                        ..
                    }),
                ) => {
                    panic!("{line}: left to the full parse")
                }
                (None, _) => {}
            }
            fast += short.is_some() as usize;
        }
        assert!(fast >= 15, "{fast} lines parsed short");
    }
}

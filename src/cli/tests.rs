//! The grammar: what parses, what is refused.

use super::*;
use clap::CommandFactory;

#[test]
fn clap_definition_is_consistent() {
    Cli::command().debug_assert();
}

fn lock_args(argv: &[&str]) -> LockArgs {
    match Cli::try_parse_from(argv).unwrap().command {
        Command::Lock(args) => args,
        other => panic!("{other:?}"),
    }
}

#[test]
fn command_after_double_dash() {
    let args = lock_args(&["lc-cli", "lock", "k", "-w", "3", "--", "ls", "-l"]);
    assert_eq!(args.run.command, ["ls", "-l"]);
    assert_eq!(args.timeout.unwrap().as_secs(), 3);
}

#[test]
fn command_without_double_dash_keeps_its_options() {
    let args = lock_args(&[
        "lc-cli", "lock", "k", "-w", "3", "ls", "-l", "-w", "--", "x",
    ]);
    assert_eq!(args.run.command, ["ls", "-l", "-w", "--", "x"]);
    assert_eq!(args.timeout.unwrap().as_secs(), 3);
    let args = lock_args(&["lc-cli", "lock", "k", "-c", "echo hi"]);
    assert_eq!(args.run.shell_command.as_deref(), Some("echo hi"));
    assert!(args.run.command.is_empty());
}

#[test]
fn the_service_options_are_not_on_serve_or_completions() {
    let cmd = Cli::command();
    for name in ["serve", "completions"] {
        let sub = cmd.find_subcommand(name).unwrap();
        for arg in sub.get_arguments() {
            let id = arg.get_id().as_str();
            assert!(
                !["server", "connect_timeout", "ttl"].contains(&id),
                "{name} has --{id}"
            );
        }
    }
    assert!(Cli::try_parse_from(["lc-cli", "serve", "--server", "h:1"]).is_err());
    assert!(Cli::try_parse_from(["lc-cli", "-s", "h:1", "keys"]).is_err());
}

#[test]
fn shared_and_limit_do_not_mix() {
    for argv in [
        &["lc-cli", "lock", "-s", "--limit", "2", "k"][..],
        &["lc-cli", "lock", "-s", "-x", "k"],
        &["lc-cli", "wait", "--shared", "--limit", "2", "k"],
        &["lc-cli", "trylock", "--limit", "0", "k"],
    ] {
        assert!(Cli::try_parse_from(argv).is_err(), "{argv:?}");
    }
    let args = lock_args(&["lc-cli", "lock", "-s", "k", "ls", "-s"]);
    assert!(args.run.mode.shared);
    assert_eq!(args.run.command, ["ls", "-s"]);
    let args = lock_args(&["lc-cli", "lock", "--limit", "3", "k"]);
    assert_eq!(args.run.mode.limit, Some(3));
}

#[test]
fn trylock_has_no_wait_option() {
    assert!(Cli::try_parse_from(["lc-cli", "trylock", "-w", "3", "k"]).is_err());
}

#[test]
fn sizes_take_binary_units() {
    use super::serve_args::parse_size;
    assert_eq!(parse_size("512MiB"), Ok(512 << 20));
    assert_eq!(parse_size("2G"), Ok(2 << 30));
    assert_eq!(parse_size("1048576"), Ok(1 << 20));
    assert_eq!(parse_size("4 m"), Ok(4 << 20));
    assert!(parse_size("1000").is_err() && parse_size("x").is_err() && parse_size("5Q").is_err());
    assert!(parse_size("99999999999G").is_err() && parse_size("").is_err());
}

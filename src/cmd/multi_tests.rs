//! The grammar of several keys: `--and KEY`, repeatable, on `lock` and
//! `trylock`; what it refuses at once (64), and the order keys are taken in.

use std::ffi::OsString;

use super::*;
use crate::cli::Command;

fn parsed(line: &str) -> (LockOptions, Vec<String>) {
    let argv: Vec<OsString> = std::iter::once("lc-cli")
        .chain(line.split(' ').filter(|a| !a.is_empty()))
        .map(OsString::from)
        .collect();
    let cli = crate::cmd::parse(argv).expect("parses");
    match cli.command {
        Command::Lock(mut args) => {
            let and = std::mem::take(&mut args.run.and);
            let o = LockOptions::from_args(args.run, args.nonblock, args.timeout).unwrap();
            (o, and)
        }
        Command::Trylock(mut run) => {
            let and = std::mem::take(&mut run.and);
            (LockOptions::from_args(run, true, None).unwrap(), and)
        }
        _ => panic!("not lock or trylock: {line}"),
    }
}

fn planned(line: &str) -> Result<KeySet> {
    let (options, and) = parsed(line);
    plan(&options, and)
}

fn refused(line: &str) -> String {
    let e = planned(line).expect_err(line);
    let code = e.downcast_ref::<crate::exit::Failure>().map(|f| f.code);
    assert_eq!(code, Some(ExitCode::Usage), "{line}: {e:#}");
    format!("{e:#}")
}

fn argv_of(options: &LockOptions) -> Vec<String> {
    match &options.command {
        CommandSpec::Exec(argv) => argv.iter().map(|a| a.to_string_lossy().into()).collect(),
        other => panic!("no command: {other:?}"),
    }
}

#[test]
fn and_is_repeatable_and_sorted_by_bytes() {
    let keys = planned("lock deploy/prod --and db/migrations --and b -- ./deploy.sh").unwrap();
    assert_eq!(keys.named, ["deploy/prod", "db/migrations", "b"]);
    assert_eq!(keys.sorted, ["b", "db/migrations", "deploy/prod"]);
    let keys = planned("trylock z --and a -- true").unwrap();
    assert_eq!(keys.sorted, ["a", "z"]);
    // Bytes, not locale: upper case before lower case.
    let keys = planned("lock b --and B --and a -- true").unwrap();
    assert_eq!(keys.sorted, ["B", "a", "b"]);
}

#[test]
fn the_same_set_in_any_order_is_taken_in_one_order() {
    let a = planned("lock k3 --and k1 --and k2 -- true").unwrap();
    let b = planned("lock k1 --and k2 --and k3 -- true").unwrap();
    let c = planned("lock k2 --and k3 --and k1 -- true").unwrap();
    assert_eq!(a.sorted, b.sorted);
    assert_eq!(b.sorted, c.sorted);
}

#[test]
fn without_and_the_command_is_the_command() {
    // `lock KEY [--] COMMAND` is unchanged: an --and after the command is
    // the command's.
    let (o, and) = parsed("lock k cmd --and x");
    assert!(and.is_empty());
    assert_eq!(argv_of(&o), ["cmd", "--and", "x"]);
    let (o, and) = parsed("lock k -- cmd --and x");
    assert!(and.is_empty());
    assert_eq!(argv_of(&o), ["cmd", "--and", "x"]);
    let (o, and) = parsed("lock k --and x cmd --and y");
    assert_eq!(and, ["x"]);
    assert_eq!(argv_of(&o), ["cmd", "--and", "y"]);
    let (o, and) = parsed("lock -w 1s k --and=x -n -- a b");
    assert_eq!(and, ["x"]);
    assert!(o.nonblock);
    assert_eq!(argv_of(&o), ["a", "b"]);
}

#[test]
fn refused_at_once_with_64() {
    assert!(refused("lock k --and k -- true").contains("named twice"));
    assert!(refused("lock k --and a,b -- true").contains("','"));
    assert!(refused("lock k --and x -s -- true").contains("exclusive"));
    assert!(refused("lock k --and x --limit 2 -- true").contains("exclusive"));
    assert!(refused("lock k --and x").contains("give a command"));
    assert!(refused("lock k --and x --expire 1h").contains("give a command"));
    assert!(refused("lock k --and x --order 3 -- true").contains("one key"));
    assert!(refused("lock k --and x --newest -- true").contains("one key"));
    // Refusals are one line.
    assert!(!refused("lock k --and x -s -- true").contains('\n'));
}

#[test]
fn a_note_goes_with_every_key() {
    let keys = planned("lock k --and x --note why -- true").unwrap();
    assert_eq!(keys.sorted, ["k", "x"]);
}

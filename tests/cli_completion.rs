//! The committed completion scripts complete for real, in the shells
//! themselves: bash (the function called as readline calls it), fish
//! (`complete -C`) and zsh (TAB typed at an interactive zsh on a
//! pseudo-terminal). Issue 11, item 1: bash completed nothing after the
//! subcommand (clap_complete's hyphenated-name bug).

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::cli::Pty;

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("completions")
        .join(name)
        .display()
        .to_string()
}

/// COMPREPLY for the words typed so far (the last one being completed).
fn bash_complete(words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{}'\n\
         COMP_WORDS=({})\n\
         COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n\
         COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}\n\
         _lc__cli lc-cli \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script("lc-cli.bash"),
        quoted.join(" ")
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .expect("run bash");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn bash_completes_after_the_subcommand() {
    assert_eq!(bash_complete(&["lc-cli", "lock", "--ti"]), ["--timeout"]);
    assert_eq!(bash_complete(&["lc-cli", "keys", "--j"]), ["--json"]);
    assert_eq!(bash_complete(&["lc-cli", "tr"]), ["trylock"]);
    let shells = bash_complete(&["lc-cli", "completions", ""]);
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        assert!(shells.iter().any(|s| s == shell), "{shells:?}");
    }
    // Options of one subcommand only.
    let serve = bash_complete(&["lc-cli", "serve", "--"]);
    assert!(serve.iter().any(|s| s == "--listen"), "{serve:?}");
    assert!(!serve.iter().any(|s| s == "--server"), "{serve:?}");
}

fn fish_complete(line: &str) -> Vec<String> {
    let program = format!("source '{}'; complete -C '{line}'", script("lc-cli.fish"));
    let out = Command::new("fish")
        .args(["--no-config", "-c", &program])
        .output()
        .expect("run fish (Debian package fish)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn fish_completes_options_and_shells() {
    assert_eq!(fish_complete("lc-cli lock --ti"), ["--timeout"]);
    assert_eq!(fish_complete("lc-cli keys --j"), ["--json"]);
    let shells = fish_complete("lc-cli completions ");
    assert_eq!(shells, ["bash", "elvish", "fish", "powershell", "zsh"]);
    // Hidden, deprecated flags are not offered.
    let top = fish_complete("lc-cli --");
    assert!(!top.iter().any(|s| s == "--ttl"), "{top:?}");
}

#[test]
fn zsh_completes_at_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(script("_lc-cli"), dir.path().join("_lc-cli")).unwrap();
    let mut zsh = Command::new("zsh");
    zsh.args(["-f", "-i"])
        .env("HOME", dir.path())
        .env("TERM", "xterm")
        .current_dir(dir.path());
    let (mut pty, _guard) = Pty::spawn(zsh);
    let limit = Duration::from_secs(10);
    pty.type_bytes(
        format!(
            "fpath=({} $fpath); autoload -Uz compinit; compinit -u -D; PS1='READY> '\n",
            dir.path().display()
        )
        .as_bytes(),
    );
    assert!(pty.wait_for_output("READY> ", limit), "{:?}", pty.output());
    pty.type_bytes(b"lc-cli lock --ti\t");
    assert!(
        pty.wait_for_output("lc-cli lock --timeout", limit),
        "{:?}",
        pty.output()
    );
    // Ctrl-U clears the line.
    pty.type_bytes(b"\x15lc-cli keys --j\t");
    assert!(
        pty.wait_for_output("lc-cli keys --json", limit),
        "{:?}",
        pty.output()
    );
    pty.type_bytes(b"\x15lc-cli completions \t");
    assert!(
        pty.wait_for_output("powershell", limit),
        "{:?}",
        pty.output()
    );
}

//! Completion scripts, generated from the clap definitions: the
//! `completions` subcommand prints them, `cargo run --example gen_docs`
//! writes them to `completions/` (with the man pages, which only that
//! example makes), and a test fails when the committed files differ.

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

pub const SHELLS: [Shell; 5] = [
    Shell::Bash,
    Shell::Zsh,
    Shell::Fish,
    Shell::Elvish,
    Shell::PowerShell,
];

/// The completion script for `shell`.
pub fn completion(shell: Shell) -> Vec<u8> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "lc-cli", &mut out);
    match shell {
        Shell::Bash => fix_bash_hyphenated_name(out),
        Shell::Fish => fix_fish(out, &cmd),
        _ => out,
    }
}

/// clap_complete's fish script offers hidden options and no values for a
/// positional argument (`completions SHELL`): drops the first, adds the
/// second.
fn fix_fish(script: Vec<u8>, cmd: &clap::Command) -> Vec<u8> {
    let text = String::from_utf8(script).expect("clap_complete writes UTF-8");
    let hidden: Vec<String> = cmd
        .get_arguments()
        .filter(|a| a.is_hide_set())
        .filter_map(|a| a.get_long())
        .map(|long| format!("\"__fish_lc_cli_needs_command\" -l {long} "))
        .collect();
    let mut out = String::new();
    for line in text.lines() {
        if !hidden.iter().any(|h| line.contains(h.as_str())) {
            out.push_str(line);
            out.push('\n');
        }
    }
    let shells: Vec<String> = SHELLS.iter().map(|s| s.to_string()).collect();
    out.push_str(&format!(
        "complete -c lc-cli -n \"__fish_lc_cli_using_subcommand completions\" -f -a \"{}\"\n",
        shells.join(" ")
    ));
    out.into_bytes()
}

/// clap_complete names a subcommand's state `lc__cli__subcmd__lock` but
/// matches it as `lc__subcmd__cli__subcmd__lock)` when the binary's name has
/// a hyphen (clap-rs/clap#5986 and its kin), so nothing after the subcommand
/// completes. Renames the `case` labels to the state names.
fn fix_bash_hyphenated_name(script: Vec<u8>) -> Vec<u8> {
    let text = String::from_utf8(script).expect("clap_complete writes UTF-8");
    text.replace("lc__subcmd__cli__", "lc__cli__").into_bytes()
}

/// The file a shell's completion script is kept in, under `completions/`.
pub fn completion_file(shell: Shell) -> &'static str {
    match shell {
        Shell::Bash => "lc-cli.bash",
        Shell::Zsh => "_lc-cli",
        Shell::Fish => "lc-cli.fish",
        Shell::Elvish => "lc-cli.elv",
        Shell::PowerShell => "_lc-cli.ps1",
        _ => "lc-cli.completion",
    }
}

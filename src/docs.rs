//! Completion scripts and man pages, generated from the clap definitions.
//!
//! `cargo run --example gen_docs` writes them to `completions/` and `man/`;
//! a test fails when the committed files differ from what this produces.

use std::io;
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Roff};
use clap_mangen::Man;

use crate::cli::Cli;
use crate::exit::ExitCode;

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
    out
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

/// Every man page: `lc-cli.1` and one `lc-cli-SUBCOMMAND.1` per subcommand.
pub fn man_pages() -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = Cli::command();
    cmd.build();
    let mut pages = Vec::new();

    let mut main = Vec::new();
    let man = Man::new(cmd.clone()).date("");
    man.render_title(&mut main)?;
    man.render_name_section(&mut main)?;
    man.render_synopsis_section(&mut main)?;
    man.render_description_section(&mut main)?;
    man.render_options_section(&mut main)?;
    man.render_subcommands_section(&mut main)?;
    extra_sections().to_writer(&mut main)?;
    man.render_version_section(&mut main)?;
    pages.push(("lc-cli.1".to_string(), main));

    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("lc-cli-{}", sub.get_name());
        let sub = sub
            .clone()
            .name(name.clone())
            .bin_name(format!("lc-cli {}", sub.get_name()));
        let mut page = Vec::new();
        let man = Man::new(sub).date("");
        man.render_title(&mut page)?;
        man.render_name_section(&mut page)?;
        man.render_synopsis_section(&mut page)?;
        man.render_description_section(&mut page)?;
        man.render_options_section(&mut page)?;
        let mut tail = Roff::new();
        see_also(&mut tail);
        tail.to_writer(&mut page)?;
        pages.push((format!("{name}.1"), page));
    }
    Ok(pages)
}

/// Writes every completion script and man page under `root`.
pub fn write_all(root: &Path) -> io::Result<()> {
    let completions = root.join("completions");
    let man = root.join("man");
    std::fs::create_dir_all(&completions)?;
    std::fs::create_dir_all(&man)?;
    for shell in SHELLS {
        std::fs::write(completions.join(completion_file(shell)), completion(shell))?;
    }
    for (name, page) in man_pages()? {
        std::fs::write(man.join(name), page)?;
    }
    Ok(())
}

fn section(roff: &mut Roff, title: &str) {
    roff.control("SH", [title]);
}

fn paragraph(roff: &mut Roff, text: &str) {
    roff.control("PP", []).text([roman(text)]);
}

/// A tagged paragraph: a term in bold, its text indented below it.
fn item(roff: &mut Roff, term: &str, text: &str) {
    roff.control("TP", [])
        .text([bold(term)])
        .text([roman(text)]);
}

fn example(roff: &mut Roff, what: &str, command: &str) {
    roff.control("PP", []).text([roman(what)]);
    roff.control("RS", ["4"])
        .control("nf", [])
        .text([roman(command)])
        .control("fi", [])
        .control("RE", []);
}

fn extra_sections() -> Roff {
    let mut r = Roff::new();

    section(&mut r, "SERVERS");
    paragraph(
        &mut r,
        "The lock service is chosen with --server or LC_SERVER:",
    );
    item(&mut r, "HOST:PORT, lc://HOST:PORT", "The Locking-Center one-byte TCP protocol (default 127.0.0.1:22119); lc-cli serve is such a server.");
    item(&mut r, "zk://HOST:PORT[,HOST:PORT...][/PATH]", "ZooKeeper. The lock for KEY is the znode PATH/KEY (default PATH /lc-cli); waiters are ephemeral sequential nodes, each watching only its predecessor, named as Apache Curator's InterProcessMutex names them.");
    item(&mut r, "redis://HOST:PORT[,HOST:PORT...][/DB]", "Redis. A FIFO queue ordered by a server-assigned counter, and a lock key with an owner token and a lease (--ttl) renewed while held. Several hosts form a quorum of independent nodes: a grant needs a majority.");

    section(&mut r, "ENVIRONMENT");
    item(&mut r, "LC_SERVER", "The lock service, as --server.");
    item(&mut r, "LC_SOURCE", "The holder's name for lock, trylock and wait, as --source (default: this host's name). Never read by reset.");
    item(
        &mut r,
        "BIND_ADDRESS",
        "lc-cli serve: the address to listen on, as --listen.",
    );
    item(
        &mut r,
        "DATA_PATH",
        "lc-cli serve: the write-ahead log, as --data.",
    );
    item(
        &mut r,
        "LC_KEY",
        "Set for the command: the key it runs under.",
    );
    item(&mut r, "LC_LOCK_TOKEN", "Set for the command where the backend has one: a number that grows with each grant of the key, for fencing.");

    section(&mut r, "EXIT STATUS");
    paragraph(&mut r, "The command's own status when it ran; otherwise:");
    let rows = [
        (ExitCode::Conflict, "the lock was not taken: held (with -n) or the wait timed out; -E N changes it; unlock of a key that was not held"),
        (ExitCode::Usage, "usage: a bad option, an empty key or one over 127 bytes"),
        (ExitCode::DataErr, "serve --data: the log holds a corrupt record (the message names the file and byte offset), is not an lc-cli log, or is of a newer format; the server did not start"),
        (ExitCode::Unavailable, "the lock service could not be reached, or went away while waiting"),
        (ExitCode::Software, "internal error"),
        (ExitCode::LogInUse, "serve --data: another lc-cli serve has the log (the message names the file and its PID); the server did not start"),
        (ExitCode::ReleaseFailed, "the release was not confirmed: the key may still be held; the message names the reset command that clears it"),
        (ExitCode::LockLost, "the lock was lost while the command ran; the command was stopped"),
        (ExitCode::Protocol, "the service refused the request or answered something unexpected"),
        (ExitCode::CannotExecute, "the command could not be executed"),
        (ExitCode::NotFound, "the command was not found"),
    ];
    for (code, text) in rows {
        item(&mut r, &code.code().to_string(), text);
    }
    item(
        &mut r,
        "128+N",
        "the command died of signal N, or signal N stopped lc-cli while it waited",
    );

    section(&mut r, "EXAMPLES");
    example(
        &mut r,
        "Run a deploy while holding deploy/prod; others wait their turn:",
        "lc-cli lock deploy/prod -- ./deploy.sh",
    );
    example(&mut r, "In a CI job: give up after ten minutes with status 75 instead of 1:", "lc-cli --server zk://zk1:2181,zk2:2181,zk3:2181/ci lock -w 10m -E 75 deploy/prod -- make deploy");
    example(
        &mut r,
        "Hold a key across several steps of a script:",
        "lc-cli lock maintenance\n./step1 && ./step2\nlc-cli unlock maintenance",
    );
    example(
        &mut r,
        "After a crash: see who holds what, and clear what the dead machine held:",
        "lc-cli keys\nlc-cli reset --source build-host-7",
    );

    section(&mut r, "GUARANTEES AND LIMITS");
    item(&mut r, "Built-in server (lc://)", "One process, no replication: while it is down nobody locks anything. Without --data a restart forgets every held key; with --data held keys survive a restart and a crash can only leave a key held by nobody, never by two. A hold is not a lease: a holder that dies without releasing keeps its key until unlock or reset. No authentication: trusted networks only.");
    item(&mut r, "ZooKeeper (zk://)", "Survives the loss of a minority of the ensemble. A holder that dies loses the lock when its session expires (--session-timeout); a connection loss that recovers within the session timeout is not a loss. When the session expires or the node is deleted, lc-cli stops the command and exits with the lock-lost status.");
    item(&mut r, "Redis (redis://)", "The lock is a lease (--ttl), renewed while the command runs; a holder that dies frees the key when the lease ends, a waiter that dies leaves the line after --queue-timeout. If a renewal fails for longer than the lease allows, lc-cli stops the command and exits with the lock-lost status. A lease cannot stop a holder that stalls past it: protect the resource itself with LC_LOCK_TOKEN.");

    see_also(&mut r);
    r
}

fn see_also(r: &mut Roff) {
    section(r, "SEE ALSO");
    r.text([
        bold("lc-cli"),
        roman("(1), "),
        bold("flock"),
        roman("(1), "),
        italic("https://github.com/freakmaxi/locking-center"),
    ]);
}

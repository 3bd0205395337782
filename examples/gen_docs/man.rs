//! The man pages, generated from the clap definitions: `lc-cli.1` and one
//! page per subcommand, with the sections clap knows nothing of (servers,
//! environment, exit statuses, examples, guarantees). Part of the
//! `gen_docs` example, which alone needs clap_mangen; tests/generated_docs.rs
//! includes this file to check the committed pages.

use std::io;

use clap::CommandFactory;
use clap_mangen::roff::{bold, italic, roman, Roff};
use clap_mangen::Man;

use lc_cli::cli::Cli;
use lc_cli::exit::{self, ExitCode};

/// Every man page: `lc-cli.1` and one `lc-cli-SUBCOMMAND.1` per subcommand.
pub(super) fn man_pages() -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = Cli::command();
    cmd.build();
    let mut pages = Vec::new();

    let mut main = Vec::new();
    // `lc-cli help` has no page of its own: not listed, so no lc-cli-help(1).
    let listed = cmd.clone().mut_subcommand("help", |h| h.hide(true));
    let man = Man::new(listed).date("");
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
        subcommand_sections(&mut tail, sub_name(&name));
        see_also(&mut tail);
        tail.to_writer(&mut page)?;
        pages.push((format!("{name}.1"), page));
    }
    Ok(pages)
}

fn sub_name(page: &str) -> &str {
    page.strip_prefix("lc-cli-").unwrap_or(page)
}

/// The exit statuses a subcommand can end with, and for those that wait or
/// run a command, what signals and the terminal do.
fn subcommand_sections(r: &mut Roff, sub: &str) {
    use ExitCode::*;
    let (lead, codes): (&str, &[ExitCode]) = match sub {
        "lock" | "trylock" => (
            "The command's own status when it ran; otherwise:",
            &[
                Conflict,
                Usage,
                Unavailable,
                Software,
                ReleaseFailed,
                LockLost,
                Protocol,
                ModeConflict,
                Superseded,
                Outdated,
                Cancelled,
                CannotExecute,
                NotFound,
            ],
        ),
        "wait" => (
            "0 once KEY was free (taken and released); otherwise:",
            &[
                Conflict,
                Usage,
                Unavailable,
                Software,
                ReleaseFailed,
                Protocol,
                ModeConflict,
            ],
        ),
        "unlock" => (
            "0 when KEY was released; otherwise:",
            &[Conflict, Usage, Unavailable, Software, Protocol],
        ),
        "mark" => (
            "0 when the mark was printed or cleared; otherwise:",
            &[Conflict, Usage, Unavailable, Software, Protocol],
        ),
        "reset" | "keys" => (
            "0 on success; otherwise:",
            &[Usage, Unavailable, Software, Protocol],
        ),
        "serve" => (
            "0 after a clean shutdown (SIGTERM or SIGINT); otherwise:",
            &[Usage, DataErr, Unavailable, Software, LogInUse],
        ),
        _ => return,
    };
    section(r, "EXIT STATUS");
    paragraph(r, lead);
    for code in codes {
        let text = match (sub, code) {
            ("unlock", Conflict) => "KEY was not held",
            ("mark", Conflict) => "KEY has no mark",
            ("serve", Unavailable) => {
                "an address could not be bound, or the log could not be opened"
            }
            ("serve", Usage) => {
                "a bad option, or no manager port after --listen's (give --manager)"
            }
            _ => code.meaning(),
        };
        item(r, &code.code().to_string(), text);
    }
    if matches!(sub, "lock" | "trylock" | "wait") {
        item(r, exit::SIGNAL, exit::SIGNAL_MEANING);
        section(r, "SIGNALS");
        paragraph(r, "While waiting, HUP, INT, QUIT and TERM withdraw the request from the queue; no command is started and the key is not taken. SIGTSTP (Ctrl-Z) stops lc-cli still in line.");
        if sub != "wait" {
            paragraph(r, "While the command runs (in its own process group), HUP, INT, QUIT, TERM, USR1, USR2 and WINCH sent to lc-cli are forwarded to the whole group; lc-cli then waits for the command, releases the key and ends with its status. If lc-cli is killed, even by SIGKILL, the command gets SIGTERM. When the lock is lost, the command gets SIGTERM, then SIGKILL after --kill-after.");
        }
        paragraph(r, "A signal N that ends the command, or stops the wait, ends lc-cli too: after the release it kills itself with N, so its parent sees it killed by N.");
        section(r, "TERMINAL");
        paragraph(r, "While waiting with stderr on a terminal (and lc-cli in the foreground), one status line shows the key, the server, the time waited, the place in line where the backend knows it and the holder; it is redrawn each second and erased when the wait ends. Nothing is drawn when stderr is not a terminal. A conflict or a timeout prints one line on stderr naming the holder, unless -q.");
        if sub != "wait" {
            paragraph(r, "The command's process group becomes the terminal's foreground group: it can read the terminal, Ctrl-C reaches it once, Ctrl-Z stops it and lc-cli with it, and fg continues both; lc-cli takes the terminal back when the command ends.");
        }
    }
    if sub == "serve" {
        section(r, "SIGNALS");
        paragraph(r, "SIGTERM or SIGINT: stop accepting, and exit 0; held keys survive in the log with --data.");
    }
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
        "The lock service is chosen with --server (an option of the subcommands that talk to one, also accepted before the subcommand) or LC_SERVER. A backend's tuning is a query parameter of its address; an unknown parameter is a usage error.",
    );
    item(&mut r, "HOST:PORT, lc://[:TOKEN@]HOST:PORT[?manager=HOST:PORT]", "The Locking-Center one-byte TCP protocol (default 127.0.0.1:22119); lc-cli serve is such a server. manager: where keys finds the manager port (default: the lock port + 1). TOKEN: for a server with --token-file (shown as ***; better in LC_TOKEN).");
    item(&mut r, "zk://HOST:PORT[,HOST:PORT...][/PATH][?session-timeout=10s]", "ZooKeeper. session-timeout: how long a dead holder keeps the lock (default 10s). The lock for KEY is the znode PATH/KEY (default PATH /lc-cli); waiters are ephemeral sequential nodes, each watching only its predecessor, named as Apache Curator's InterProcessMutex names them.");
    item(&mut r, "redis://HOST:PORT[,HOST:PORT...][/DB][?ttl=30s&queue-timeout=60s]", "Redis. A FIFO queue ordered by a server-assigned counter, and a lock key with an owner token and a lease (ttl, default 30s) renewed at a third of it while held; queue-timeout (default 60s): how long a dead waiter keeps its place. Several hosts form a quorum of independent nodes: a grant needs a majority.");
    item(&mut r, "etcd://HOST:PORT[,HOST:PORT...][/PREFIX][?ttl=10s]", "etcd v3, with etcd's own lock recipe: the lock for KEY is the key range PREFIX/KEY/ (KEY/ without a prefix, as etcdctl lock KEY names it), a key per waiter named by its lease, served by create revision. ttl (default 10s): the lease, kept alive while waiting and holding. KEY must not contain '/'.");

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
    item(
        &mut r,
        "LC_TOKEN, LC_TOKEN_FILE",
        "The built-in server: the token for a server with --token-file, when the address has none; LC_TOKEN_FILE names a file whose first line is the token.",
    );
    item(
        &mut r,
        "REDISCLI_AUTH",
        "Redis: the password, when the address has none.",
    );
    item(
        &mut r,
        "LC_ZK_PASSWORD",
        "ZooKeeper: the digest password of the user the address names.",
    );
    item(
        &mut r,
        "ETCDCTL_USER, ETCDCTL_PASSWORD",
        "etcd: the user (USER or USER:PASSWORD) and password, when the address has none.",
    );
    item(
        &mut r,
        "PGPASSWORD, PGSSLMODE, PGSSLROOTCERT",
        "PostgreSQL: as libpq reads them (also ~/.pgpass).",
    );

    section(&mut r, "EXIT STATUS");
    paragraph(&mut r, "The command's own status when it ran; otherwise:");
    for status in exit::TABLE {
        item(&mut r, &status.code.code().to_string(), status.meaning);
    }
    item(&mut r, exit::SIGNAL, exit::SIGNAL_MEANING);

    section(&mut r, "EXAMPLES");
    example(
        &mut r,
        "Run a deploy while holding deploy/prod; others wait their turn:",
        "lc-cli lock deploy/prod -- ./deploy.sh",
    );
    example(&mut r, "In a CI job: give up after ten minutes with status 3 instead of 1 (a number none of lc-cli's own statuses uses):", "lc-cli lock --server zk://zk1:2181,zk2:2181,zk3:2181/ci -w 10m -E 3 deploy/prod -- make deploy");
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
    item(&mut r, "Built-in server (lc://)", "One process, no replication: while it is down nobody locks anything. Without --data a restart forgets every held key; with --data held keys survive a restart and a crash can only leave a key held by nobody, never by two. lock KEY -- CMD holds a session: a holder not heard from for the server's --reclaim-grace (10s) is freed, a short cut is reclaimed with the hold's token, and a lost hold stops the command (lock-lost status); LC_LOCK_TOKEN grows with every grant. A detached hold (lock KEY without a command) is not a session: it stays until unlock or reset. With --expire DURATION the server frees it at its deadline, kept in its log across a restart; a reference server refuses --expire (76). -s and --limit N queue with exclusive requests in one line, first come first served. Against a reference Locking-Center server lc-cli holds the classic way, without those, and refuses -s and --limit N (76). No authentication: loopback, a tunnel or a trusted network only.");
    item(&mut r, "ZooKeeper (zk://)", "Survives the loss of a minority of the ensemble. A holder that dies loses the lock when its session expires (session-timeout); a connection loss that recovers within the session timeout is not a loss. When the session expires or the node is deleted, lc-cli stops the command and exits with the lock-lost status.");
    item(&mut r, "Redis (redis://)", "The lock is a lease (ttl), renewed while the command runs; a holder that dies frees the key when the lease ends, a waiter that dies leaves the line after queue-timeout. If a renewal fails for longer than the lease allows, lc-cli stops the command and exits with the lock-lost status. A lease cannot stop a holder that stalls past it: protect the resource itself with LC_LOCK_TOKEN.");

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

//! The committed completion scripts and man pages are what the current CLI
//! generates, and the man pages render without warnings.

use std::path::Path;
use std::process::Command;

#[path = "../examples/gen_docs/man.rs"]
mod man;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn committed_completions_match_the_cli() {
    for shell in lc_cli::docs::SHELLS {
        let path = root()
            .join("completions")
            .join(lc_cli::docs::completion_file(shell));
        let committed = std::fs::read(&path).unwrap_or_default();
        assert!(
            committed == lc_cli::docs::completion(shell),
            "{} is stale: run `cargo run --example gen_docs` and commit",
            path.display()
        );
    }
}

#[test]
fn committed_man_pages_match_the_cli() {
    let pages = man::man_pages().unwrap();
    assert!(pages.len() > 5);
    for (name, page) in &pages {
        let path = root().join("man").join(name);
        let committed = std::fs::read(&path).unwrap_or_default();
        assert!(
            &committed == page,
            "{} is stale: run `cargo run --example gen_docs` and commit",
            path.display()
        );
    }
    let committed = std::fs::read_dir(root().join("man")).unwrap().count();
    assert_eq!(
        committed,
        pages.len(),
        "man/ holds pages the CLI no longer has"
    );
}

#[test]
fn completions_subcommand_prints_the_script() {
    let out = Command::new(env!("CARGO_BIN_EXE_lc-cli"))
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        out.stdout,
        lc_cli::docs::completion(clap_complete::Shell::Bash)
    );
}

#[test]
fn man_pages_render_without_warnings() {
    for entry in std::fs::read_dir(root().join("man")).unwrap() {
        let path = entry.unwrap().path();
        let out = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(&path)
            .output()
            .expect("groff is needed to check the man pages (Debian package groff-base)");
        assert!(out.status.success(), "{}: {:?}", path.display(), out);
        assert!(
            out.stderr.is_empty(),
            "{} renders with warnings:\n{}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn page(name: &str) -> String {
    std::fs::read_to_string(root().join("man").join(name)).unwrap()
}

/// Every `lc-cli-NAME(1)` a page refers to exists (there is no lc-cli-help).
#[test]
fn man_pages_refer_only_to_pages_that_exist() {
    for entry in std::fs::read_dir(root().join("man")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for (at, _) in text.match_indices("lc\\-cli\\-") {
            let rest = &text[at + "lc\\-cli\\-".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase())
                .collect();
            if rest[name.len()..].starts_with("(1)") || rest[name.len()..].starts_with("\\fR(1)") {
                assert!(
                    root().join("man").join(format!("lc-cli-{name}.1")).exists(),
                    "{} refers to lc-cli-{name}(1), which does not exist",
                    path.display()
                );
            }
        }
    }
    assert!(
        !page("lc-cli.1").contains("lc\\-cli\\-help"),
        "lc-cli.1 lists a help page"
    );
}

/// An `-E N` example does not pick a status lc-cli itself uses.
#[test]
fn the_conflict_status_example_does_not_collide() {
    let own = [64, 65, 69, 70, 74, 75, 76, 126, 127];
    for entry in std::fs::read_dir(root().join("man")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for (at, _) in text.match_indices("\\-E ") {
            let n: String = text[at + 4..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(n) = n.parse::<i32>() {
                assert!(
                    !own.contains(&n),
                    "-E {n} collides with lc-cli's own status"
                );
            }
        }
    }
}

#[test]
fn subcommand_pages_have_exit_status_signals_and_terminal_where_they_apply() {
    for sub in [
        "lock", "trylock", "wait", "unlock", "reset", "keys", "serve",
    ] {
        let text = page(&format!("lc-cli-{sub}.1"));
        assert!(
            text.contains(".SH \"EXIT STATUS\""),
            "lc-cli-{sub}.1 has no EXIT STATUS"
        );
    }
    for sub in ["lock", "trylock", "wait"] {
        let text = page(&format!("lc-cli-{sub}.1"));
        assert!(
            text.contains(".SH SIGNALS"),
            "lc-cli-{sub}.1 has no SIGNALS"
        );
        assert!(
            text.contains(".SH TERMINAL"),
            "lc-cli-{sub}.1 has no TERMINAL"
        );
        assert!(text.contains("128+N"), "lc-cli-{sub}.1");
    }
    assert!(page("lc-cli-serve.1").contains(".SH SIGNALS"));
    assert!(page("lc-cli-lock.1").contains("\\fB75\\fR"));
}

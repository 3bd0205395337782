//! The committed completion scripts and man pages are what the current CLI
//! generates, and the man pages render without warnings.

use std::path::Path;
use std::process::Command;

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
    let pages = lc_cli::docs::man_pages().unwrap();
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

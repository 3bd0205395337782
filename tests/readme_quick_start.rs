//! The README's quick start ("Then, by hand:"), run line by line as written,
//! with `lc-cli` on PATH, against a built-in server on free ports (given by
//! BIND_ADDRESS and LC_SERVER, so the lines are not changed).

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// The shell lines of the block after "Then, by hand:", comments dropped.
fn quick_start() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("Then, by hand:")
        .expect("the quick start in README.md");
    readme[start..]
        .lines()
        .skip(1)
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with("    "))
        .map(|l| l.split(" # ").next().unwrap().trim().to_string())
        .collect()
}

#[test]
fn the_quick_start_runs_as_written() {
    let lines = quick_start();
    assert!(lines.len() >= 5, "{lines:?}");
    assert_eq!(lines[0], "lc-cli serve &", "{lines:?}");
    let dir = tempfile::tempdir().unwrap();
    let deploy = dir.path().join("deploy.sh");
    std::fs::write(&deploy, "#!/bin/sh\necho deployed >> deploy.log\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&deploy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = free_port_pair();
    let addr = format!("127.0.0.1:{port}");
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let shell = |line: &str| {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", line])
            .current_dir(dir.path())
            .env("PATH", &path)
            .env("BIND_ADDRESS", &addr)
            .env("LC_SERVER", &addr)
            .env_remove("LC_SOURCE");
        cmd
    };
    // `lc-cli serve &`: the server runs on while the other lines are typed.
    let mut serve = cli::Guard(
        shell("exec lc-cli serve")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        wait_until(Duration::from_secs(10), || std::net::TcpStream::connect(
            &addr
        )
        .is_ok()),
        "lc-cli serve did not listen on {addr}"
    );
    for line in &lines[1..] {
        expect_status(&mut shell(line), 0);
    }
    let log = std::fs::read_to_string(dir.path().join("deploy.log")).unwrap();
    assert_eq!(log.lines().count(), 3, "deploy.sh ran {log:?}");
    // And nothing is left held.
    let out = expect_status(&mut shell("lc-cli keys"), 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    let _ = serve.0.kill();
}

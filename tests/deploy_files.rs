//! The systemd unit and the Prometheus alert rules in deploy/ are valid.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> std::process::Output {
    let line = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("{line}: {e}"));
    assert!(
        out.status.success(),
        "{line} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn alert_rules_pass_promtool() {
    let out = run(Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(root().join("deploy/prometheus-alerts.yml")));
    assert!(String::from_utf8_lossy(&out.stdout).contains("SUCCESS: 2 rules found"));
}

#[test]
fn systemd_unit_verifies() {
    // verify insists the binary exists: point a copy of the unit at the one we built.
    let unit = std::fs::read_to_string(root().join("deploy/lc-cli-serve.service")).unwrap();
    assert!(unit.contains("ExecStart=lc-cli serve --data /var/lib/"));
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("lc-cli-serve.service");
    std::fs::write(
        &copy,
        unit.replace(
            "ExecStart=lc-cli",
            &format!("ExecStart={}", env!("CARGO_BIN_EXE_lc-cli")),
        ),
    )
    .unwrap();
    let out = run(Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

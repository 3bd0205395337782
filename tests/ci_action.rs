//! The GitHub Action's step (action/run.sh) run here as a runner runs it:
//! the `INPUT_*` variables action.yml sets, `GITHUB_ACTIONS=true`,
//! `RUNNER_TEMP`, and the built binary instead of the pip install
//! (`LC_CLI_ACTION_BIN`), against `lc-cli serve --token-file` on 127.0.0.1.
//! The command runs under the lock and a second run waits for the first;
//! `shared` lets two in at once; `wait` gives up with 1; the command's exit
//! status is the step's; a wrong input is one line and 64; the token is
//! printed only in the `::add-mask::` line the runner consumes, never
//! otherwise, and the command does not get it. And action.yml, the GitLab
//! component and the Jenkins example agree with run.sh and lc-cli: each
//! input reaches run.sh, each option run.sh passes exists, the pinned
//! version is Cargo.toml's. (The pip install itself: scripts/check-wheel.sh.)

use crate::common;

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{lc_at, wait_until, Serve, Server, BIN};

const TOKEN: &str = "action-Tok3n-never-printed-0047";
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `lc-cli serve` that asks for [`TOKEN`], its token file in `dir`.
fn server(dir: &Path) -> Server {
    let path = dir.join("tokens");
    std::fs::write(&path, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    Serve::new()
        .args(&["--token-file", path.to_str().unwrap()])
        .start()
}

/// `bash action/run.sh` with the environment a runner gives the step: the
/// inputs (key, server, token, version; `more` adds or overrides), and
/// nothing of the caller's lc-cli variables.
fn action(s: &Server, dir: &Path, more: &[(&str, &str)]) -> Command {
    let runner = dir.join("runner");
    std::fs::create_dir_all(&runner).unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("action/run.sh"));
    for (name, _) in std::env::vars() {
        if name.starts_with("INPUT_") || name.starts_with("LC_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("GITHUB_ACTIONS", "true")
        .env("RUNNER_TEMP", &runner)
        .env("LC_CLI_ACTION_BIN", Path::new(BIN).parent().unwrap())
        .env("INPUT_KEY", "ci/deploy")
        .env("INPUT_SERVER", s.addr.to_string())
        .env("INPUT_TOKEN", TOKEN)
        .env("INPUT_VERSION", VERSION)
        .env("INPUT_SHARED", "false")
        .env("INPUT_WAIT", "")
        .env("INPUT_LIMIT", "")
        .env("INPUT_SOURCE", "")
        .stdin(Stdio::null());
    for (k, v) in more {
        cmd.env(k, v);
    }
    cmd
}

/// Starts `cmd` with stdout and stderr in `DIR/NAME.out` (read by [`finish`]).
fn spawn(mut cmd: Command, dir: &Path, name: &str) -> Child {
    let out = File::create(dir.join(format!("{name}.out"))).unwrap();
    cmd.stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap()
}

/// Waits (at most 30 s) for a spawned run; its status and output.
fn finish(mut child: Child, dir: &Path, name: &str) -> (i32, String) {
    let mut status = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            status = child.try_wait().unwrap();
            status.is_some()
        }),
        "the run '{name}' did not end within 30 s"
    );
    let out = std::fs::read_to_string(dir.join(format!("{name}.out"))).unwrap();
    masked(&out, TOKEN);
    (status.unwrap().code().unwrap_or(-1), out)
}

/// Runs `cmd` to its end: its status and its output, checked for the token.
fn run(cmd: &mut Command) -> (i32, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    let token = cmd
        .get_envs()
        .find(|(k, _)| *k == "INPUT_TOKEN")
        .and_then(|(_, v)| v)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    masked(&out, &token);
    (status.code().unwrap_or(-1), out)
}

/// The token shows only in the one `::add-mask::` line a runner consumes
/// (and keeps out of its log), first of all.
fn masked(out: &str, token: &str) {
    let with: Vec<&str> = out.lines().filter(|l| l.contains(token)).collect();
    assert_eq!(with, [format!("::add-mask::{token}")], "output:\n{out}");
    assert_eq!(out.lines().next(), Some(with[0]), "output:\n{out}");
}

#[test]
fn runs_under_the_lock_and_a_second_run_waits() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let log = dir.path().join("log");
    let held = dir.path().join("held");
    let release = dir.path().join("release");
    let paths = [
        ("LOG", log.to_str().unwrap()),
        ("HELD", held.to_str().unwrap()),
        ("RELEASE", release.to_str().unwrap()),
    ];
    // Holds the key until the test says so (at most 20 s).
    let first_run = r#"echo "first start $LC_KEY" >>"$LOG"; : >"$HELD"
        for _ in $(seq 400); do [ -e "$RELEASE" ] && break; sleep 0.05; done
        echo "first end" >>"$LOG""#;
    let mut first = action(&s, dir.path(), &[("INPUT_RUN", first_run)]);
    first.envs(paths);
    let first = spawn(first, dir.path(), "first");
    assert!(
        wait_until(Duration::from_secs(20), || held.exists()),
        "the first run's command did not start"
    );
    // Held: a try from outside finds it taken.
    let out = lc_at(&s.addr.to_string(), &["trylock", "ci/deploy", "--", "true"])
        .env("LC_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    let mut second = action(
        &s,
        dir.path(),
        &[
            ("INPUT_RUN", r#"echo "second $LC_KEY" >>"$LOG""#),
            ("INPUT_WAIT", "60s"),
        ],
    );
    second.envs(paths);
    let mut second = spawn(second, dir.path(), "second");
    s.wait_for("queue 'ci/deploy'", 1, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        second.try_wait().unwrap().is_none(),
        "the second run did not wait"
    );
    assert!(!std::fs::read_to_string(&log).unwrap().contains("second"));

    File::create(&release).unwrap();
    let (status, out) = finish(first, dir.path(), "first");
    assert_eq!(status, 0, "{out}");
    assert!(out.contains(&format!("lc-cli {VERSION}")), "{out}");
    let (status, out) = finish(second, dir.path(), "second");
    assert_eq!(status, 0, "{out}");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "first start ci/deploy\nfirst end\nsecond ci/deploy\n"
    );
}

#[test]
fn shared_runs_hold_it_together() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let held = dir.path().join("held");
    let release = dir.path().join("release");
    let mut first = action(
        &s,
        dir.path(),
        &[
            ("INPUT_SHARED", "true"),
            (
                "INPUT_RUN",
                r#": >"$HELD"; for _ in $(seq 400); do [ -e "$RELEASE" ] && break; sleep 0.05; done"#,
            ),
        ],
    );
    first.env("HELD", &held).env("RELEASE", &release);
    let first = spawn(first, dir.path(), "first");
    assert!(wait_until(Duration::from_secs(20), || held.exists()));
    // A second shared run gets in while the first holds it...
    let (status, out) = run(action(
        &s,
        dir.path(),
        &[("INPUT_SHARED", "true"), ("INPUT_RUN", "true")],
    )
    .env("INPUT_WAIT", "10s"));
    assert_eq!(status, 0, "{out}");
    // ...an exclusive one does not (gives up after `wait`: 1).
    let (status, out) = run(&mut action(
        &s,
        dir.path(),
        &[("INPUT_WAIT", "1s"), ("INPUT_RUN", "echo not-run")],
    ));
    assert_eq!(status, 1, "{out}");
    assert!(!out.contains("not-run"), "{out}");
    File::create(&release).unwrap();
    let (status, out) = finish(first, dir.path(), "first");
    assert_eq!(status, 0, "{out}");
}

#[test]
fn exit_status_passes_through_and_the_token_stays_out() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let (status, out) = run(&mut action(&s, dir.path(), &[("INPUT_RUN", "exit 7")]));
    assert_eq!(status, 7, "{out}");
    // Run with bash -e -o pipefail, as a `run:` step.
    let (status, out) = run(&mut action(
        &s,
        dir.path(),
        &[("INPUT_RUN", "false | true; echo not reached")],
    ));
    assert_eq!(status, 1, "{out}");
    assert!(!out.contains("not reached"), "{out}");
    // The command's environment has no token (run() checks the output).
    let (status, out) = run(&mut action(&s, dir.path(), &[("INPUT_RUN", "env")]));
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("LC_KEY=ci/deploy"), "{out}");
    // A wrong token: the server refuses it (76), and it is not printed either.
    let wrong = "wrong-Tok3n-never-printed-0047";
    let (status, out) =
        run(action(&s, dir.path(), &[("INPUT_RUN", "true")]).env("INPUT_TOKEN", wrong));
    assert_eq!(status, 76, "{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.contains(wrong))
            .collect::<Vec<_>>(),
        [format!("::add-mask::{wrong}")],
        "{out}"
    );
    // Outside a runner, no ::add-mask:: line, and no token at all.
    let (status, out) = {
        let mut cmd = action(&s, dir.path(), &[("INPUT_RUN", "true")]);
        cmd.env_remove("GITHUB_ACTIONS");
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    assert_eq!(status, Some(0), "{out}");
    assert!(!out.contains(TOKEN), "{out}");
}

/// The deploy-queue inputs reach lc-cli: an older `order` than the one
/// that succeeded exits 80 without running; a waiting `newest` run is
/// superseded by a newer one, with the status `superseded-exit-code` gives
/// it; the note shows in `keys`.
#[test]
fn deploy_queue_inputs_reach_lc_cli() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let log = dir.path().join("log");
    let run_logged = |name: &str| format!(r#"echo "{name}" >>"$LOG""#);
    let with_log = |mut cmd: Command| {
        cmd.env("LOG", &log);
        cmd
    };
    let (status, out) = run(&mut with_log(action(
        &s,
        dir.path(),
        &[("INPUT_ORDER", "5"), ("INPUT_RUN", &run_logged("v5"))],
    )));
    assert_eq!(status, 0, "{out}");
    let (status, out) = run(&mut with_log(action(
        &s,
        dir.path(),
        &[("INPUT_ORDER", "4"), ("INPUT_RUN", &run_logged("v4"))],
    )));
    assert_eq!(status, 80, "{out}");
    assert!(out.contains("outdated"), "{out}");

    // A holder with a note; a newest run waits, a newer one supersedes it.
    let held = dir.path().join("held");
    let release = dir.path().join("release");
    let first_run = format!(
        r#": >"{}"; for _ in $(seq 400); do [ -e "{}" ] && break; sleep 0.05; done"#,
        held.display(),
        release.display()
    );
    let first = spawn(
        action(
            &s,
            dir.path(),
            &[
                ("INPUT_NOTE", "deploy 1.4 by ci"),
                ("INPUT_RUN", &first_run),
            ],
        ),
        dir.path(),
        "first",
    );
    assert!(wait_until(Duration::from_secs(20), || held.exists()));
    let keys = lc_at(&s.addr.to_string(), &["keys"])
        .env("LC_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&keys.stdout).contains("deploy 1.4 by ci"),
        "{keys:?}"
    );
    let older = spawn(
        with_log(action(
            &s,
            dir.path(),
            &[
                ("INPUT_NEWEST", "true"),
                ("INPUT_SUPERSEDED_EXIT_CODE", "0"),
                ("INPUT_RUN", &run_logged("older")),
            ],
        )),
        dir.path(),
        "older",
    );
    s.wait_for("queue 'ci/deploy'", 1, Duration::from_secs(20));
    let newer = spawn(
        with_log(action(
            &s,
            dir.path(),
            &[
                ("INPUT_NEWEST", "true"),
                ("INPUT_RUN", &run_logged("newer")),
            ],
        )),
        dir.path(),
        "newer",
    );
    let (status, out) = finish(older, dir.path(), "older");
    assert_eq!(status, 0, "superseded, mapped to 0: {out}");
    assert!(out.contains("superseded"), "{out}");
    File::create(&release).unwrap();
    assert_eq!(finish(first, dir.path(), "first").0, 0);
    assert_eq!(finish(newer, dir.path(), "newer").0, 0);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "v5\nnewer\n");
}

#[test]
fn a_wrong_input_is_one_line_and_64() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    for (name, value, says) in [
        ("INPUT_KEY", "", "'key' is empty"),
        ("INPUT_KEY", "-n", "'key' may not start with '-'"),
        ("INPUT_RUN", "", "'run' is empty"),
        ("INPUT_SHARED", "yes", "'shared' is 'true' or 'false'"),
        ("INPUT_LIMIT", "0", "'limit' is a number"),
        ("INPUT_WAIT", "1 m", "'wait' is a duration"),
        ("INPUT_NEWEST", "yes", "'newest' is 'true' or 'false'"),
        (
            "INPUT_CANCEL_RUNNING",
            "1",
            "'cancel-running' is 'true' or 'false'",
        ),
        ("INPUT_ORDER", "v1.2", "'order' is a number"),
        (
            "INPUT_SUPERSEDED_EXIT_CODE",
            "-1",
            "'superseded-exit-code' is an exit status",
        ),
    ] {
        let mut cmd = action(&s, dir.path(), &[("INPUT_RUN", "echo not-run")]);
        cmd.env(name, value);
        let (status, out) = run(&mut cmd);
        assert_eq!(status, 64, "{name}={value:?}: {out}");
        assert!(out.contains(says), "{name}={value:?}: {out}");
        assert!(!out.contains("not-run"), "{name}={value:?}: {out}");
    }
    // Without LC_CLI_ACTION_BIN the version goes to pip: checked first.
    let mut cmd = action(&s, dir.path(), &[("INPUT_RUN", "true")]);
    cmd.env_remove("LC_CLI_ACTION_BIN")
        .env("INPUT_VERSION", "1.0; rm -rf /");
    let (status, out) = run(&mut cmd);
    assert_eq!(status, 64, "{out}");
}

/// The names under `inputs:` of a YAML file whose inputs are indented by
/// `indent` spaces (action.yml: 2, the GitLab component's spec: 4).
fn inputs(text: &str, header: &str, indent: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.trim_end() == header {
            inside = true;
            continue;
        }
        if !inside || line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let lead = line.len() - line.trim_start().len();
        if lead < indent {
            break;
        }
        if lead == indent {
            names.push(line.trim().trim_end_matches(':').to_string());
        }
    }
    names
}

#[test]
fn the_ci_files_agree_with_run_sh_and_lc_cli() {
    let action_yml = read("action.yml");
    let run_sh = read("action/run.sh");
    let names = inputs(&action_yml, "inputs:", 2);
    assert_eq!(
        names,
        [
            "key",
            "run",
            "server",
            "token",
            "wait",
            "shared",
            "limit",
            "source",
            "note",
            "newest",
            "order",
            "cancel-running",
            "superseded-exit-code",
            "version"
        ]
    );
    for name in &names {
        let var = format!("INPUT_{}", name.to_uppercase().replace('-', "_"));
        assert!(
            action_yml.contains(&format!("{var}: ${{{{ inputs.{name} }}}}")),
            "action.yml does not pass the input {name} as {var}"
        );
        assert!(run_sh.contains(&var), "action/run.sh does not read {var}");
    }
    // The action installs its own release by default.
    assert!(
        action_yml.contains(&format!("default: \"{VERSION}\"")),
        "action.yml's version is not {VERSION}"
    );
    // Each option run.sh gives `lc-cli lock` is one lc-cli has.
    let help = Command::new(BIN).args(["lock", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for option in [
        "-w, --timeout",
        "-s, --shared",
        "--limit <N>",
        "--source <NAME>",
        "--note <TEXT>",
        "--newest",
        "--order <N>",
        "--cancel-running",
        "--superseded-exit-code <N>",
    ] {
        assert!(help.contains(option), "lc-cli lock has no {option}");
    }
    for opt in [
        "opts+=(-w ",
        "opts+=(-s)",
        "opts+=(--limit ",
        "opts+=(--source ",
        "opts+=(--note ",
        "opts+=(--newest)",
        "opts+=(--order ",
        "opts+=(--cancel-running)",
        "opts+=(--superseded-exit-code ",
    ] {
        assert!(run_sh.contains(opt), "action/run.sh has no {opt}");
    }

    // The GitLab component: the same inputs but the token (a masked variable),
    // each passed on to its job; the same default version; the Jenkins
    // example pins it too.
    let gitlab = read("templates/lc-cli-lock.yml");
    let spec = inputs(&gitlab, "  inputs:", 4);
    for name in names.iter().filter(|n| *n != "token") {
        assert!(
            spec.contains(name),
            "the GitLab component has no input {name}"
        );
        assert!(
            gitlab.contains(&format!(": $[[ inputs.{name} ]]")),
            "the GitLab component does not use its input {name}"
        );
    }
    assert!(gitlab.contains(&format!("default: \"{VERSION}\"")));
    assert!(read("examples/ci/Jenkinsfile").contains(&format!("lc-cli=={VERSION}")));
    assert!(read("docs/ci.md").contains(&format!("lc-cli=={VERSION}")));
}

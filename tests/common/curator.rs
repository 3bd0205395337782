//! A Java peer using Apache Curator's recipes (Debian's jars in
//! /usr/share/java), compiled once per test binary with javac: it takes one
//! `InterProcessMutex`, one `InterProcessReadWriteLock` read or write lock,
//! or one lease of an `InterProcessSemaphoreV2`, logs `start TAG NS`/`end TAG NS` as the
//! shell commands do, holds it for a while and gives it back.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

const JARS: &[&str] = &[
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "guava.jar",
    "slf4j-nop.jar",
];

fn class_path(dir: &Path) -> String {
    let mut parts = vec![dir.display().to_string()];
    for jar in JARS {
        let path = Path::new("/usr/share/java").join(jar);
        assert!(
            path.exists(),
            "{} is missing: apt-get install libcurator-recipes-java zookeeper",
            path.display()
        );
        parts.push(path.display().to_string());
    }
    parts.join(":")
}

/// The directory of the compiled peer.
fn compiled() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("lc-cli-curator-peer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/common/java/CuratorPeer.java");
        let out = Command::new("javac")
            .args(["-cp", &class_path(&dir), "-d"])
            .arg(&dir)
            .arg(source)
            .output()
            .expect("javac runs (apt-get install default-jdk-headless)");
        assert!(
            out.status.success(),
            "javac failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
}

/// What the peer takes.
pub(crate) enum Recipe {
    /// `InterProcessMutex` (`lock-` nodes), as lc-cli's default recipe.
    Mutex,
    Read,
    Write,
    Semaphore(u32),
}

/// Starts a peer on `path` (a znode path), holding for `hold_ms` once it
/// has the lock. It prints `waiting` once connected, before it asks.
pub(crate) fn peer(
    hosts: &str,
    path: &str,
    recipe: Recipe,
    hold_ms: u64,
    log: &Path,
    tag: &str,
) -> Child {
    let (mode, n) = match recipe {
        Recipe::Mutex => ("mutex", 0),
        Recipe::Read => ("read", 0),
        Recipe::Write => ("write", 0),
        Recipe::Semaphore(n) => ("sem", n),
    };
    let dir = compiled();
    Command::new("java")
        .args([
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
        ])
        .arg(class_path(dir))
        .arg("CuratorPeer")
        .args([hosts, path, mode, &n.to_string(), &hold_ms.to_string()])
        .arg(log)
        .arg(tag)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("java runs")
}

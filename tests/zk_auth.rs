//! ZooKeeper digest authentication against a real ZooKeeper: with
//! `zk://USER:PASSWORD@HOSTS/PATH` (or LC_ZK_PASSWORD) lc-cli's nodes get
//! all rights for that identity and read for the world. A client without
//! the credentials can still list the queue and read the holder (`keys`),
//! but cannot delete a lock node nor join the queue; `reset` with them works.

use crate::common;

use std::process::{Command, Output};
use std::time::Duration;

use common::zk::Zk;
use common::{expect_status, wait_until};
use zookeeper_client as zkc;

const PASSWORD: &str = "Zk-digest-pw-31337";

fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&stdout).to_string(),
        String::from_utf8_lossy(&stderr).to_string(),
    );
    assert!(
        !out.contains(PASSWORD) && !err.contains(PASSWORD),
        "{cmd:?} printed the password:\n{out}\n{err}"
    );
    (status.code().unwrap_or(-1), out, err)
}

fn lc(zk: &Zk, userinfo: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(common::BIN);
    cmd.arg("--server")
        .arg(format!(
            "zk://{userinfo}{}/p?session-timeout=2s",
            zk.hosts()
        ))
        .args(["--connect-timeout", "10s"])
        .args(args)
        .env_remove("LC_SERVER")
        .env_remove("LC_ZK_PASSWORD");
    cmd
}

/// What an unauthenticated client gets for deleting `path`, and for
/// creating a child of `dir`.
fn anonymous_writes(
    zk: &Zk,
    path: &str,
    dir: &str,
) -> (Result<(), zkc::Error>, Result<(), zkc::Error>) {
    let (path, dir) = (path.to_string(), dir.to_string());
    zk.with_client(move |c| {
        Box::pin(async move {
            let delete = c.delete(&path, None).await;
            let child = format!("{dir}/_c_intruder-lock-");
            let mode = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
            let create = c.create(&child, b"x", &mode).await.map(|_| ());
            (delete, create)
        })
    })
}

fn acl_of(zk: &Zk, path: &str) -> Vec<(String, String, bool, bool)> {
    let path = path.to_string();
    zk.with_client(move |c| {
        Box::pin(async move {
            let (acls, _) = c.get_acl(&path).await.expect("get the ACL");
            acls.iter()
                .map(|a| {
                    let p = a.permission();
                    (
                        a.scheme().to_string(),
                        a.id().split(':').next().unwrap_or("").to_string(),
                        p.has(zkc::Permission::DELETE),
                        p.has(zkc::Permission::READ),
                    )
                })
                .collect()
        })
    })
}

#[test]
fn only_the_digest_identity_can_delete_or_join_and_reset_needs_it() {
    let zk = Zk::start();
    let creds = format!("ops:{PASSWORD}@");
    expect_status(&mut lc(&zk, &creds, &["lock", "kept"]), 0);
    let queue = zk.queue("/p/kept");
    assert_eq!(queue.len(), 1, "{queue:?}");
    let node = format!("/p/kept/{}", queue[0]);
    // Our identity has every right, the world may read.
    let acl = acl_of(&zk, &node);
    assert!(
        acl.contains(&("digest".into(), "ops".into(), true, true)),
        "{acl:?}"
    );
    assert!(
        acl.contains(&("world".into(), "anyone".into(), false, true)),
        "{acl:?}"
    );
    assert_eq!(acl_of(&zk, "/p/kept").len(), 2);

    // Anyone can see the hold.
    let (code, out, err) = run(&mut lc(&zk, "", &["keys"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("kept"), "{out}");
    // An unauthenticated client deletes nothing and cannot queue.
    let (delete, create) = anonymous_writes(&zk, &node, "/p/kept");
    assert!(matches!(delete, Err(zkc::Error::NoAuth)), "{delete:?}");
    assert!(matches!(create, Err(zkc::Error::NoAuth)), "{create:?}");
    // Neither can lc-cli without the credentials, or with a wrong password:
    // one clear line, 76.
    for userinfo in ["", "ops:wrong-password@"] {
        for args in [
            &["reset", "kept"][..],
            &["unlock", "kept"],
            &["lock", "kept", "--", "true"],
        ] {
            let (code, _, err) = run(&mut lc(&zk, userinfo, args));
            assert_eq!(code, 76, "{userinfo} {args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains("ACL"), "{err}");
        }
    }
    assert_eq!(zk.queue("/p/kept"), queue);

    // With them, the queue is shared: a second holder waits its turn.
    let waiter = lc(&zk, &creds, &["lock", "kept", "--", "echo", "ran"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(20), || zk
        .queue("/p/kept")
        .len()
        == 2));
    // The password can also come from the environment.
    let (code, _, err) = run(lc(&zk, "ops@", &["reset", "kept"]).env("LC_ZK_PASSWORD", PASSWORD));
    assert_eq!(code, 0, "{err}");
    let out = waiter.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    assert!(wait_until(Duration::from_secs(20), || zk
        .queue("/p/kept")
        .is_empty()));
}

#[test]
fn without_credentials_the_nodes_stay_open_to_all() {
    let zk = Zk::start();
    expect_status(&mut lc(&zk, "", &["lock", "open"]), 0);
    let node = format!("/p/open/{}", zk.queue("/p/open")[0]);
    let acl = acl_of(&zk, &node);
    assert_eq!(acl, vec![("world".into(), "anyone".into(), true, true)]);
    let (delete, _) = anonymous_writes(&zk, &node, "/p/open");
    assert!(delete.is_ok(), "{delete:?}");
}

//! PostgreSQL's `sslmode` against a real server with `ssl = on` and a
//! certificate from the test CA: `require` and `prefer` encrypt (seen in
//! `pg_stat_ssl`), `verify-full` checks the certificate against
//! `sslrootcert` (another CA's is refused, 69), `disable` stays plain; a
//! server without TLS is refused by `require`, and reached by `prefer`.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::pg::{postgres_ids, PgServer};
use common::tls::TestCa;
use common::{wait_until, BIN};

fn lc(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["--server", url, "--connect-timeout", "5s"])
        .args(args)
        .env_remove("LC_SERVER")
        .env_remove("PGSSLMODE")
        .env_remove("PGSSLROOTCERT");
    cmd
}

/// Whether a session of lc-cli's, holding `key` with `url`, is encrypted.
fn holds_over_tls(pg: &PgServer, url: &str) -> bool {
    let mut holder = lc(url, &["lock", "k", "--", "sleep", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(20), || pg.held("k")));
    let ssl = pg.sql(
        "select bool_or(s.ssl) from pg_stat_ssl s join pg_stat_activity a using (pid) \
         where a.application_name like 'lc-cli%'",
    );
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(wait_until(Duration::from_secs(20), || !pg.held("k")));
    ssl.trim() == "t"
}

#[test]
fn sslmode_encrypts_verifies_or_refuses() {
    let pg = PgServer::start();
    let plain_url = pg.url();
    // No TLS on the server yet: prefer falls back, require is refused.
    assert!(!holds_over_tls(&pg, &format!("{plain_url}?sslmode=prefer")));
    let out = lc(&format!("{plain_url}?sslmode=require"), &["keys"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{out:?}");

    let ca = TestCa::new();
    let (uid, gid) = postgres_ids();
    let certs = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(certs.path(), Some(uid), Some(gid)).unwrap();
    for f in ["server.pem", "server.key"] {
        let to = certs.path().join(f);
        std::fs::copy(ca.path(f), &to).unwrap();
        std::os::unix::fs::chown(&to, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let d = certs.path().display();
    pg.sql(&format!(
        "alter system set ssl_cert_file = '{d}/server.pem'"
    ));
    pg.sql(&format!("alter system set ssl_key_file = '{d}/server.key'"));
    pg.sql("alter system set ssl = on");
    pg.sql("select pg_reload_conf()");
    assert!(wait_until(Duration::from_secs(10), || pg
        .sql("show ssl")
        .trim()
        == "on"));

    assert!(holds_over_tls(&pg, &plain_url), "prefer is the default");
    assert!(holds_over_tls(&pg, &format!("{plain_url}?sslmode=require")));
    assert!(!holds_over_tls(
        &pg,
        &format!("{plain_url}?sslmode=disable")
    ));
    let verified = format!(
        "{plain_url}?sslmode=verify-full&sslrootcert={}",
        ca.file("ca.pem")
    );
    assert!(holds_over_tls(&pg, &verified));
    let mut env = lc(&format!("{plain_url}?sslmode=verify-full"), &["keys"]);
    env.env("PGSSLROOTCERT", ca.file("ca.pem"));
    assert!(env.output().unwrap().status.success());

    let other = TestCa::new();
    let wrong = format!(
        "{plain_url}?sslmode=verify-full&sslrootcert={}",
        other.file("ca.pem")
    );
    let out = lc(&wrong, &["keys"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains(common::pg::PASSWORD), "{err}");
    let out = lc(&format!("{plain_url}?sslmode=verify-ca"), &["keys"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
}

//! The PostgreSQL backend through the real binary against a real server:
//! lock and trylock, -w, psql and lc-cli excluding each other, the token,
//! keys and reset, and the refusals.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::pg::{PgServer, PASSWORD};
use common::*;

#[test]
fn smoke() {
    let pg = PgServer::start();
    let out = expect_status(
        &mut pg.lc(&["lock", "k", "--", "sh", "-c", "echo $LC_KEY $LC_LOCK_TOKEN"]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    eprintln!("{text}");
}

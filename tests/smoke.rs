use crate::common;

use common::*;

#[test]
fn lock_runs_the_command_and_releases() {
    let server = Server::start();
    let out = expect_status(
        server.lc(&["lock", "demo", "--", "echo", "hello"]).arg("x"),
        0,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello x\n");
    expect_status(&mut server.lc(&["trylock", "demo", "--", "true"]), 0);
    expect_status(
        &mut server.lc(&["lock", "demo", "--", "sh", "-c", "exit 3"]),
        3,
    );
}

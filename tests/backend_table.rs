//! The table of backends as the shipped binary has it (the lib's own
//! unit tests see a test-only backend in it too): the unknown-scheme
//! message lists every scheme, and the hand-written `--server` help names
//! every scheme and parameter.

use lc_cli::backend::{BackendConfig, ServerUrl, BACKENDS, DEFAULT_CONNECT_TIMEOUT};

fn shown(s: &str) -> String {
    let url: ServerUrl = s.parse().unwrap();
    BackendConfig::new(url, DEFAULT_CONNECT_TIMEOUT).shown()
}

#[test]
fn each_scheme_is_found_in_the_table() {
    assert_eq!(shown("h:1"), "h:1");
    assert_eq!(shown("zk://z"), "zk://z:2181/lc-cli");
    assert_eq!(shown("redis://r"), "redis://r:6379/0");
    assert_eq!(shown("rediss://u:pw@r"), "rediss://u:***@r:6379/0");
    assert_eq!(shown("etcd://e"), "etcd://e:2379");
    assert_eq!(shown("postgresql://u@p/d"), "postgres://u@p:5432/d");
    let e = "http://x".parse::<ServerUrl>().unwrap_err();
    assert!(
        e.contains("use host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql://"),
        "{e}"
    );
    let e = "http://u:pw@x".parse::<ServerUrl>().unwrap_err();
    assert!(!e.contains("pw"), "{e}");
}

/// The `--server` help is written by hand: it must name every scheme
/// and every parameter of the table.
#[test]
fn the_server_help_names_every_scheme_and_parameter() {
    use clap::CommandFactory;
    let cli = lc_cli::cli::Cli::command();
    let keys = cli.find_subcommand("keys").unwrap();
    let arg = keys
        .get_arguments()
        .find(|a| a.get_id() == "server")
        .unwrap();
    let help = arg.get_help().unwrap().to_string();
    for b in BACKENDS {
        // Its main name (aliases such as postgresql:// may go unsaid).
        let name = b.names.iter().find(|n| !n.is_empty()).unwrap();
        assert!(help.contains(&format!("{name}://")), "{name}:// in {help}");
        for param in b.params {
            assert!(help.contains(&format!("{param}=")), "{param}= in {help}");
        }
    }
}

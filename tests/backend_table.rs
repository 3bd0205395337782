//! The table of backends as the shipped binary has it (the lib's own
//! unit tests see a test-only backend in it too): the unknown-scheme
//! message lists every scheme, and the `--server` help (rendered from the
//! table) names every scheme and parameter.

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
    for b in BACKENDS {
        for name in b.names {
            let form = match *name {
                "" => "host:port".to_string(),
                n => format!("{n}://"),
            };
            assert!(e.contains(&form), "{form} in {e}");
        }
    }
    let e = "http://u:pw@x".parse::<ServerUrl>().unwrap_err();
    assert!(!e.contains("pw"), "{e}");
}

/// The `--server` help is rendered from the table: as the binary shows
/// it, it names every scheme (aliases too) and every parameter.
#[test]
fn the_server_help_names_every_scheme_and_parameter() {
    use clap::CommandFactory;
    let cli = lc_cli::cli::Cli::command();
    let keys = cli.find_subcommand("keys").unwrap();
    let arg = keys
        .get_arguments()
        .find(|a| a.get_id() == "server")
        .unwrap();
    let short = arg.get_help().unwrap().to_string();
    let help = arg.get_long_help().unwrap().to_string();
    for b in BACKENDS {
        for name in b.names.iter().filter(|n| !n.is_empty()) {
            assert!(
                short.contains(&format!("{name}://")),
                "{name}:// in {short}"
            );
            assert!(help.contains(&format!("{name}://")), "{name}:// in {help}");
        }
        for (param, _) in b.params {
            assert!(help.contains(&format!("{param}=")), "{param}= in {help}");
        }
    }
}

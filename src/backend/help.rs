//! The `--server` help, rendered from [`BACKENDS`]: each scheme's names,
//! address ([`Usage`](super::Usage)), query parameters and credential
//! variables are said once, in its `address.rs`, and shown from there.

use super::{BACKENDS, DEFAULT_SERVER};

/// The first line: what `--server` is, its variable and default.
fn lead() -> String {
    format!("The lock service [env: LC_SERVER] [default: {DEFAULT_SERVER}]")
}

/// The short help (`-h`, the completion scripts): every scheme, by name.
pub(crate) fn server_help() -> String {
    format!(
        "{}: {} (--help shows each address)",
        lead(),
        super::scheme::scheme_list()
    )
}

/// The long help (`--help`, the man pages): per backend, a line of its
/// address, then one of the service, its note, its query parameters and
/// the variables its credentials can come from. Indented: a man page
/// breaks its lines only before a space (and warns of a word longer than
/// its line, hence the query apart from the address).
pub(crate) fn server_long_help() -> String {
    let mut out = format!("{} (no password in it is ever printed), one of:", lead());
    for b in BACKENDS {
        let name = b.names.iter().find(|n| !n.is_empty()).expect("a name");
        out.push_str(&format!("\n  {name}://{}", b.usage.address));
        out.push_str(&format!("\n    {}{}", b.service, b.usage.note));
        let query: Vec<String> = b.params.iter().map(|(p, v)| format!("{p}={v}")).collect();
        if !query.is_empty() {
            out.push_str(&format!("; query ?{}", query.join("&")));
        }
        if !b.env.is_empty() {
            out.push_str(&format!("; from the environment: {}", b.env.join(", ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_and_parameter_is_in_the_help() {
        let short = server_help();
        let long = server_long_help();
        for b in BACKENDS {
            for name in b.names.iter().filter(|n| !n.is_empty()) {
                assert!(short.contains(&format!("{name}://")), "{name} in {short}");
                assert!(long.contains(&format!("{name}://")), "{name} in {long}");
            }
            for (param, _) in b.params {
                assert!(long.contains(&format!("{param}=")), "{param} in {long}");
            }
        }
        assert!(
            long.ends_with("\n  throwaway://NAME\n    Throwaway"),
            "{long}"
        );
    }
}

//! What every scheme's address parsing shares: the split into scheme, rest
//! and `NAME=VALUE` query pairs, host lists with default ports, userinfo
//! with `%XX` escapes, the TLS file parameters, and the masked address that
//! every message quotes (never its password). Each backend's own
//! `address.rs` parses the rest with these.

use std::time::Duration;

use super::secret;

/// A `--server` value cut into the pieces a scheme parses.
pub struct Parts<'a> {
    /// The whole address, trimmed (the `%XX` errors name it, masked).
    pub whole: &'a str,
    /// The address as messages quote it: its password as `***`.
    pub shown: String,
    /// The scheme before `://`; empty for a bare `host:port`.
    pub scheme: &'a str,
    /// What follows `scheme://`, up to the query.
    pub rest: &'a str,
    /// The query's `NAME=VALUE` pairs, in order.
    pub params: Vec<(&'a str, &'a str)>,
}

impl<'a> Parts<'a> {
    pub fn split(s: &'a str) -> Result<Parts<'a>, String> {
        let whole = s.trim();
        let shown = secret::mask(whole);
        let (base, query) = whole.split_once('?').unwrap_or((whole, ""));
        let (scheme, rest) = base.split_once("://").unwrap_or(("", base));
        let mut params = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some((name, value)) if !value.is_empty() => params.push((name, value)),
                _ => return Err(format!("'{pair}' in '{shown}' is not NAME=VALUE")),
            }
        }
        Ok(Parts {
            whole,
            shown,
            scheme,
            rest,
            params,
        })
    }

    /// The refusal of a parameter `scheme` does not know, naming those it does.
    pub fn unknown(&self, name: &str, scheme: &str, known: &[(&str, &str)]) -> String {
        let names: Vec<&str> = known.iter().map(|(n, _)| *n).collect();
        format!(
            "unknown parameter '{name}' in '{}' ({scheme} knows {})",
            self.shown,
            names.join(", ")
        )
    }

    /// A duration parameter.
    pub fn duration(&self, name: &str, value: &str) -> Result<Duration, String> {
        crate::duration::parse_duration(value)
            .map_err(|e| format!("{name} in '{}': {e}", self.shown))
    }

    /// `[USER[:PASSWORD]@]HOSTS[/PATH]` -> the credentials and `HOSTS[/PATH]`;
    /// `env_password` is read when the address holds no password.
    pub fn credentials(
        &self,
        env_password: Option<&str>,
    ) -> Result<(secret::Access, String), String> {
        let (authority, path) = match self.rest.find('/') {
            Some(i) => (&self.rest[..i], &self.rest[i..]),
            None => (self.rest, ""),
        };
        let (access, hosts) = secret::split_userinfo(authority, self.whole, env_password)?;
        Ok((access, format!("{hosts}{path}")))
    }
}

/// Takes a TLS file parameter into `t`; false when `name` is not one.
pub(crate) fn tls_param(t: &mut secret::Tls, name: &str, value: &str) -> bool {
    let path = Some(std::path::PathBuf::from(value));
    match name {
        "cacert" => t.ca = path,
        "cert" => t.cert = path,
        "key" => t.key = path,
        _ => return false,
    }
    true
}

/// A client certificate is a pair.
pub(crate) fn check_tls(t: &secret::Tls, shown: &str) -> Result<(), String> {
    if t.cert.is_some() != t.key.is_some() {
        return Err(format!(
            "'{shown}': a client certificate needs both cert= and key="
        ));
    }
    Ok(())
}

/// `HOSTS[/PATH]` -> `HOSTS` and what follows the `/` (empty without one).
#[cfg(any(feature = "redis", feature = "etcd"))]
pub(crate) fn split_path(rest: &str) -> (&str, &str) {
    match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    }
}

/// A single `host[:port]` (the built-in server's address, its manager port).
pub(crate) fn single_host(addr: &str, default_port: u16, whole: &str) -> Result<String, String> {
    let mut hosts = host_list(addr, default_port)?;
    if hosts.len() != 1 {
        return Err(format!("'{whole}': the lock server is a single host:port"));
    }
    Ok(hosts.remove(0))
}

/// `a:1,b,c:3` -> `["a:1", "b:DEFAULT", "c:3"]`.
pub(crate) fn host_list(list: &str, default_port: u16) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for host in list.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err(format!("empty host in '{list}'"));
        }
        let has_port = match host.rsplit_once(':') {
            Some((h, port)) if !h.ends_with(':') && !port.contains(']') => {
                port.parse::<u16>()
                    .map_err(|_| format!("'{port}' is not a port number in '{host}'"))?;
                true
            }
            _ => false,
        };
        out.push(if has_port {
            host.to_string()
        } else {
            format!("{host}:{default_port}")
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_split_scheme_rest_and_query() {
        let p = Parts::split(" redis://u:pw@h/0?ttl=3s&x=y ").unwrap();
        assert_eq!((p.scheme, p.rest), ("redis", "u:pw@h/0"));
        assert_eq!(p.params, vec![("ttl", "3s"), ("x", "y")]);
        assert_eq!(p.shown, "redis://u:***@h/0?ttl=3s&x=y");
        let p = Parts::split("h:1").unwrap();
        assert_eq!((p.scheme, p.rest), ("", "h:1"));
        let e = Parts::split("redis://u:pw@h?ttl").err().unwrap();
        assert!(e.contains("NAME=VALUE") && !e.contains("pw"), "{e}");
    }

    #[test]
    fn host_lists_take_default_ports() {
        assert_eq!(
            host_list("a:1,b,[::1]", 9).unwrap(),
            vec!["a:1", "b:9", "[::1]:9"]
        );
        assert!(host_list("a,,b", 9).is_err());
        assert!(host_list("a:x", 9).is_err());
        assert!(single_host("a,b", 9, "a,b").is_err());
    }
}

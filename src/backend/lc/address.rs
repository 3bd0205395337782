//! The built-in protocol's address: `host:port`,
//! `lc://[:TOKEN@]host:port[?manager=host:port]`, or over TLS
//! `lcs://[:TOKEN@]host:port[?cacert=FILE&cert=FILE&key=FILE&manager=host:port]`.
//! The token of a server with `--token-file` comes from the address, else
//! [`TOKEN_ENV`], else the first line of the file [`TOKEN_FILE_ENV`] names;
//! it is kept as the access's password (a `Secret`, shown `***`).

use std::fmt;

use async_trait::async_trait;

use super::LcBackend;
use crate::backend::address::{check_tls, single_host, tls_param, Parts};
use crate::backend::secret::{self, Secret};
use crate::backend::{
    Backend, BackendConfig, Capabilities, Result, Scheme, ServerAddress, ServerUrl, Usage,
};

pub(crate) const DEFAULT_PORT: u16 = 22119;
/// The reference manager protocol's port: the lock port + 1 by default.
pub(crate) const DEFAULT_MANAGER_PORT: u16 = 22120;

/// The token for a server with `--token-file`, when the address has none.
pub(crate) const TOKEN_ENV: &str = "LC_TOKEN";
/// A file whose first line is the token, when neither the address nor
/// [`TOKEN_ENV`] gives one.
pub(crate) const TOKEN_FILE_ENV: &str = "LC_TOKEN_FILE";

pub(crate) const SCHEME: Scheme = Scheme {
    service: "Locking-Center",
    names: &["", "lc", "lcs"],
    params: &[
        ("manager", "HOST:PORT"),
        ("cacert", "FILE"),
        ("cert", "FILE"),
        ("key", "FILE"),
    ],
    env: &[TOKEN_ENV, TOKEN_FILE_ENV],
    default_port: DEFAULT_PORT,
    default_ttl: crate::backend::DEFAULT_TTL,
    // A reference server may still answer '-' to shared or limited
    // requests: the backend then refuses them with `REFERENCE_CAPS`.
    // A reference server answers '-' to the fields of deploy queues: the
    // backend then refuses them (76), as for the modes.
    caps: Capabilities {
        history: None,
        // A `--limit N` grant tells its slot (the Hello feature `slots`);
        // a server that does not name it has `--slots` refused (76).
        slots: None,
        // The server turns the session hold into a kept hold that expires
        // (the Hello feature `keep`); one that does not name it has the
        // hold released as usual, said in one line (docs/fleet-jobs.md).
        hold_at_least: None,
        ..Capabilities::ALL
    },
    key_problem: crate::backend::any_key,
    usage: Usage {
        address: "[:TOKEN@]HOST:PORT",
        note: "; lcs:// is TLS; HOST:PORT alone is lc://",
    },
    parse,
};

/// What a server that answered '-' to lc-cli's own actions (a reference
/// Locking-Center server) can do: exclusive locks only.
pub(crate) const REFERENCE_CAPS: Capabilities = Capabilities {
    shared: false,
    limit: false,
    kept_holds: true,
    queues: Some("a reference Locking-Center server keeps no fields or marks"),
    history: Some("a reference Locking-Center server keeps no history"),
    slots: Some("a reference Locking-Center server takes no --limit"),
    hold_at_least: Some("a reference Locking-Center server keeps no hold after a command"),
    why: "; it answered '-', as a reference Locking-Center server does",
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LcAddress {
    pub addr: String,
    /// The manager port (`keys`), when it is not the lock port + 1.
    pub manager: Option<String>,
    /// `lcs://`: TLS on the lock port (its files are in the URL's access).
    pub tls: bool,
    /// The address carried a token (`lc://:TOKEN@`): it is shown
    /// `lc://:***@HOST`, with the scheme.
    pub token_in_url: bool,
}

impl fmt::Display for LcAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.manager, self.tls) {
            (None, false) if self.token_in_url => write!(f, "lc://{}", self.addr),
            (None, false) => write!(f, "{}", self.addr),
            (None, true) => write!(f, "lcs://{}", self.addr),
            (Some(m), tls) => {
                let s = if tls { "s" } else { "" };
                write!(f, "lc{s}://{}?manager={m}", self.addr)
            }
        }
    }
}

#[async_trait]
impl ServerAddress for LcAddress {
    fn scheme(&self) -> &'static Scheme {
        &SCHEME
    }

    async fn connect(&self, config: &BackendConfig) -> Result<Box<dyn Backend>> {
        Ok(Box::new(LcBackend::new(self, config)?))
    }
}

fn parse(p: &Parts) -> std::result::Result<ServerUrl, String> {
    let mut t = crate::backend::secret::Tls::default();
    let (access, host) = secret::split_userinfo(p.rest, p.whole, None)?;
    if access.user.is_some() {
        return Err(format!(
            "'{}': the built-in server takes a token, not a user: lc://:TOKEN@HOST:PORT (or {TOKEN_ENV})",
            p.shown
        ));
    }
    let mut address = lc_address(p, host, &mut t)?;
    check_tls(&t, &p.shown)?;
    let token = match access.password.filter(|t| !t.expose().is_empty()) {
        Some(t) => Some(t),
        None => token_from_env()?,
    };
    if let Some(t) = &token {
        check_token(t.expose())?;
    }
    address.token_in_url = access.password_in_url;
    let tls = address.tls;
    let mut url = ServerUrl::plain(address);
    url.access.password = token;
    url.access.password_in_url = access.password_in_url;
    url.access.tls = tls.then_some(t);
    Ok(url)
}

/// [`TOKEN_ENV`], else the first line of [`TOKEN_FILE_ENV`]'s file.
fn token_from_env() -> std::result::Result<Option<Secret>, String> {
    if let Some(t) = std::env::var_os(TOKEN_ENV).filter(|t| !t.is_empty()) {
        let t = t
            .into_string()
            .map_err(|_| format!("{TOKEN_ENV} is not UTF-8"))?;
        return Ok(Some(Secret::new(t)));
    }
    let Some(path) = std::env::var_os(TOKEN_FILE_ENV).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let path = std::path::PathBuf::from(path);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("{TOKEN_FILE_ENV}: cannot read {}: {e}", path.display()))?;
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return Err(format!(
            "{TOKEN_FILE_ENV}: {} has no token on its first line",
            path.display()
        ));
    }
    Ok(Some(Secret::new(line.to_string())))
}

/// A token the Hello can carry.
fn check_token(token: &str) -> std::result::Result<(), String> {
    if token.len() > crate::proto::MAX_FIELD {
        return Err(format!(
            "the token is {} bytes long: at most {} are sent",
            token.len(),
            crate::proto::MAX_FIELD
        ));
    }
    Ok(())
}

fn lc_address(
    p: &Parts,
    host: &str,
    t: &mut crate::backend::secret::Tls,
) -> std::result::Result<LcAddress, String> {
    let tls = p.scheme == "lcs";
    let mut manager = None;
    for &(name, value) in &p.params {
        match name {
            "manager" => manager = Some(single_host(value, DEFAULT_MANAGER_PORT, p.whole)?),
            _ if tls && tls_param(t, name, value) => {}
            "cacert" | "cert" | "key" => {
                return Err(format!(
                    "'{name}' in '{}' is a TLS setting: use lcs://",
                    p.shown
                ))
            }
            _ => return Err(p.unknown(name, "lc://", SCHEME.params)),
        }
    }
    Ok(LcAddress {
        addr: single_host(host, DEFAULT_PORT, &p.shown)?,
        manager,
        tls,
        token_in_url: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lc(s: &str) -> LcAddress {
        let p = Parts::split(s).unwrap();
        lc_address(&p, p.rest, &mut Default::default()).unwrap()
    }

    #[test]
    fn forms() {
        assert_eq!(lc("127.0.0.1:22119").addr, "127.0.0.1:22119");
        assert_eq!(lc("lc://h:1").addr, "h:1");
        assert_eq!(lc("lockhost").addr, "lockhost:22119");
        assert_eq!(lc("lc://h:5?manager=h:7").manager.as_deref(), Some("h:7"));
        assert_eq!(lc("lc://h:5?manager=h").manager.as_deref(), Some("h:22120"));
        for bad in [
            "a:1,b:2",
            "h:notaport",
            "lc://u:pw@h:1",
            "lc://u@h:1",
            "lc://h:1?manager=a:1,b:2",
        ] {
            assert!(bad.parse::<ServerUrl>().is_err(), "{bad}");
        }
        let e = "h:1?session-timeout=3s".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("lc:// knows manager"), "{e}");
        let u: ServerUrl = "lc://h:5?manager=h:7".parse().unwrap();
        assert_eq!(u.server.to_string(), "lc://h:5?manager=h:7");
    }

    #[test]
    fn a_token_in_the_address_is_never_shown() {
        let u: ServerUrl = "lc://:t0k3n-in-the-url-0123@h:5".parse().unwrap();
        assert_eq!(u.server.to_string(), "lc://h:5");
        assert_eq!(
            u.access.password.as_ref().map(Secret::expose),
            Some("t0k3n-in-the-url-0123")
        );
        assert_eq!(u.access.show(&u.server.to_string()), "lc://:***@h:5");
        let u: ServerUrl = "lcs://:t%40k@h:5?cacert=/ca.pem".parse().unwrap();
        assert_eq!(u.access.password.as_ref().map(Secret::expose), Some("t@k"));
        assert_eq!(u.access.show(&u.server.to_string()), "lcs://:***@h:5");
        let e = format!("lc://:{}@h:5", "x".repeat(128))
            .parse::<ServerUrl>()
            .unwrap_err();
        assert!(e.contains("at most 127"), "{e}");
        let e = "lc://ops:pw@h:5".parse::<ServerUrl>().unwrap_err();
        assert!(
            e.contains("lc://:TOKEN@HOST:PORT") && !e.contains("pw"),
            "{e}"
        );
    }

    #[test]
    fn lcs_carries_its_tls_files() {
        let u: ServerUrl = "lcs://10.0.0.5:7?cacert=/ca.pem&cert=/c.pem&key=/k.pem"
            .parse()
            .unwrap();
        assert_eq!(u.server.to_string(), "lcs://10.0.0.5:7");
        let t = u.access.tls.unwrap();
        assert_eq!(t.ca, Some("/ca.pem".into()));
        assert_eq!(
            (t.cert, t.key),
            (Some("/c.pem".into()), Some("/k.pem".into()))
        );
        assert_eq!(lc("lcs://h").addr, "h:22119");
        let u: ServerUrl = "lcs://h:1".parse().unwrap();
        assert_eq!(u.access.tls, Some(Default::default()));
        assert!("lc://h:1"
            .parse::<ServerUrl>()
            .unwrap()
            .access
            .tls
            .is_none());
        for bad in ["lc://h:1?cacert=/ca.pem", "lcs://h:1?cert=/c.pem"] {
            assert!(bad.parse::<ServerUrl>().is_err(), "{bad}");
        }
    }
}

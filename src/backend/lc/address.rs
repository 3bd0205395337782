//! The built-in protocol's address: `host:port`,
//! `lc://host:port[?manager=host:port]`, or over TLS
//! `lcs://host:port[?cacert=FILE&cert=FILE&key=FILE&manager=host:port]`.

use std::fmt;

use async_trait::async_trait;

use super::LcBackend;
use crate::backend::address::{check_tls, single_host, tls_param, Parts};
use crate::backend::{
    Backend, BackendConfig, Capabilities, Result, Scheme, ServerAddress, ServerUrl,
};

pub const DEFAULT_PORT: u16 = 22119;
/// The reference manager protocol's port: the lock port + 1 by default.
pub const DEFAULT_MANAGER_PORT: u16 = 22120;

pub const SCHEME: Scheme = Scheme {
    service: "Locking-Center",
    names: &["", "lc", "lcs"],
    params: &["manager", "cacert", "cert", "key"],
    env: &[],
    default_port: DEFAULT_PORT,
    default_ttl: crate::backend::DEFAULT_TTL,
    // A reference server may still answer '-' to shared or limited
    // requests: the backend then refuses them with `REFERENCE_CAPS`.
    caps: Capabilities::ALL,
    key_problem: crate::backend::any_key,
    parse,
};

/// What a server that answered '-' to lc-cli's own actions (a reference
/// Locking-Center server) can do: exclusive locks only.
pub const REFERENCE_CAPS: Capabilities = Capabilities {
    shared: false,
    limit: false,
    kept_holds: true,
    why: "; it answered '-', as a reference Locking-Center server does",
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LcAddress {
    pub addr: String,
    /// The manager port (`keys`), when it is not the lock port + 1.
    pub manager: Option<String>,
    /// `lcs://`: TLS on the lock port (its files are in the URL's access).
    pub tls: bool,
}

impl fmt::Display for LcAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.manager, self.tls) {
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
    let address = lc_address(p, &mut t)?;
    check_tls(&t, &p.shown)?;
    let tls = address.tls;
    let mut url = ServerUrl::plain(address);
    url.access.tls = tls.then_some(t);
    Ok(url)
}

fn lc_address(
    p: &Parts,
    t: &mut crate::backend::secret::Tls,
) -> std::result::Result<LcAddress, String> {
    let tls = p.scheme == "lcs";
    if p.rest.contains('@') {
        return Err(format!(
            "'{}': the built-in server takes no credentials (see the README's Security section)",
            p.shown
        ));
    }
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
        addr: single_host(p.rest, DEFAULT_PORT, p.whole)?,
        manager,
        tls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lc(s: &str) -> LcAddress {
        lc_address(&Parts::split(s).unwrap(), &mut Default::default()).unwrap()
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

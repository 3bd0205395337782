//! The built-in protocol's address: `host:port` or
//! `lc://host:port[?manager=host:port]`.

use std::fmt;

use async_trait::async_trait;

use super::LcBackend;
use crate::backend::address::{single_host, Parts};
use crate::backend::{
    Backend, BackendConfig, Capabilities, Result, Scheme, ServerAddress, ServerUrl,
};

pub const DEFAULT_PORT: u16 = 22119;
/// The reference manager protocol's port: the lock port + 1 by default.
pub const DEFAULT_MANAGER_PORT: u16 = 22120;

pub const SCHEME: Scheme = Scheme {
    service: "Locking-Center",
    names: &["", "lc"],
    params: &["manager"],
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
}

impl fmt::Display for LcAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.manager {
            None => write!(f, "{}", self.addr),
            Some(m) => write!(f, "lc://{}?manager={m}", self.addr),
        }
    }
}

#[async_trait]
impl ServerAddress for LcAddress {
    fn scheme(&self) -> &'static Scheme {
        &SCHEME
    }

    async fn connect(&self, config: &BackendConfig) -> Result<Box<dyn Backend>> {
        Ok(Box::new(LcBackend::new(self, config)))
    }
}

fn parse(p: &Parts) -> std::result::Result<ServerUrl, String> {
    lc_address(p).map(ServerUrl::plain)
}

fn lc_address(p: &Parts) -> std::result::Result<LcAddress, String> {
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
            _ => return Err(p.unknown(name, "lc://", SCHEME.params)),
        }
    }
    Ok(LcAddress {
        addr: single_host(p.rest, DEFAULT_PORT, p.whole)?,
        manager,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lc(s: &str) -> LcAddress {
        lc_address(&Parts::split(s).unwrap()).unwrap()
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
}

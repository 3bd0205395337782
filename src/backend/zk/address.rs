//! ZooKeeper's address: `zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PATH][?session-timeout=10s&recipe=rwlock]`.

use std::fmt;

use async_trait::async_trait;

use super::ZkBackend;
use crate::backend::address::{host_list, Parts};
use crate::backend::{
    Backend, BackendConfig, Capabilities, Result, Scheme, ServerAddress, ServerUrl, Tuning, Usage,
};

pub(crate) const DEFAULT_PORT: u16 = 2181;
pub(crate) const DEFAULT_ROOT: &str = "/lc-cli";
/// The digest password of the user the address names, when it holds none.
pub(crate) const PASSWORD_ENV: &str = "LC_ZK_PASSWORD";

pub(crate) const SCHEME: Scheme = Scheme {
    service: "ZooKeeper",
    names: &["zk"],
    params: &[("session-timeout", "10s"), ("recipe", "rwlock")],
    env: &[PASSWORD_ENV],
    default_port: DEFAULT_PORT,
    default_ttl: crate::backend::DEFAULT_TTL,
    caps: Capabilities {
        queues: None,
        // Entries beside each key's queue (zk/history.rs).
        history: None,
        // A slot node beside a --limit key's leases (zk/slots.rs).
        slots: None,
        ..Capabilities::ALL
    },
    key_problem: super::names::key_problem,
    usage: Usage {
        address: "[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PATH]",
        note: "",
    },
    parse,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ZkAddress {
    pub hosts: Vec<String>,
    /// The znode under which each key's lock node lives.
    pub root: String,
    /// The Curator recipe an exclusive lock's node follows.
    pub recipe: Recipe,
}

/// Which Curator recipe an exclusive (`-x`) request joins as (`recipe=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Recipe {
    /// `InterProcessMutex` (`lock-`), unless read-write nodes already queue.
    #[default]
    Mutex,
    /// Always `InterProcessReadWriteLock`'s writer (`__WRIT__`), so Curator
    /// readers on the path see it even on an empty key.
    RwLock,
}

impl Recipe {
    const NAMES: &'static str = "mutex or rwlock";

    fn parse(value: &str) -> Option<Recipe> {
        match value {
            "mutex" => Some(Recipe::Mutex),
            "rwlock" => Some(Recipe::RwLock),
            _ => None,
        }
    }
}

impl fmt::Display for ZkAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "zk://{}{}", self.hosts.join(","), self.root)
    }
}

#[async_trait]
impl ServerAddress for ZkAddress {
    fn scheme(&self) -> &'static Scheme {
        &SCHEME
    }

    async fn connect(&self, config: &BackendConfig) -> Result<Box<dyn Backend>> {
        Ok(Box::new(ZkBackend::connect(self, config).await?))
    }
}

fn parse(p: &Parts) -> std::result::Result<ServerUrl, String> {
    let mut tuning = Tuning::default();
    let mut recipe = Recipe::default();
    for &(name, value) in &p.params {
        match name {
            "session-timeout" => tuning.session_timeout = Some(p.duration(name, value)?),
            "recipe" => {
                recipe = Recipe::parse(value).ok_or_else(|| {
                    format!(
                        "recipe in '{}': '{value}' is not a recipe (use {})",
                        p.shown,
                        Recipe::NAMES
                    )
                })?
            }
            _ => return Err(p.unknown(name, "zk://", SCHEME.params)),
        }
    }
    let (access, rest) = p.credentials(Some(PASSWORD_ENV))?;
    if access.password.is_some() && access.user.is_none() {
        return Err(format!(
            "'{}': ZooKeeper's digest authentication needs a user (zk://USER:PASSWORD@HOSTS)",
            p.shown
        ));
    }
    let address = ZkAddress {
        recipe,
        ..zk_address(&rest)?
    };
    Ok(ServerUrl {
        server: std::sync::Arc::new(address),
        tuning,
        access,
    })
}

fn zk_address(rest: &str) -> std::result::Result<ZkAddress, String> {
    let (hosts, root) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, DEFAULT_ROOT),
    };
    let root = root.trim_end_matches('/');
    let root = if root.is_empty() { DEFAULT_ROOT } else { root };
    Ok(ZkAddress {
        hosts: host_list(hosts, DEFAULT_PORT)?,
        root: root.to_string(),
        recipe: Recipe::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(
            zk_address("z1:2181,z2/locks").unwrap(),
            ZkAddress {
                hosts: vec!["z1:2181".into(), "z2:2181".into()],
                root: "/locks".into(),
                recipe: Recipe::Mutex,
            }
        );
        assert_eq!(zk_address("z1/").unwrap().root, DEFAULT_ROOT);
        let u: ServerUrl = "zk://h1,h2/locks?session-timeout=10s".parse().unwrap();
        assert_eq!(
            u.tuning.session_timeout,
            Some(std::time::Duration::from_secs(10))
        );
        assert_eq!(u.server.to_string(), "zk://h1:2181,h2:2181/locks");
    }

    #[test]
    fn credentials_and_parameters() {
        let u: ServerUrl = "zk://ops:pw@z1/locks".parse().unwrap();
        assert_eq!(u.server.to_string(), "zk://z1:2181/locks");
        assert_eq!(u.access.user.as_deref(), Some("ops"));
        let e = "zk://:pw@z1".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("needs a user") && !e.contains("pw@"), "{e}");
        let e = "zk://z?ttl=3s".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("zk:// knows session-timeout, recipe"), "{e}");
    }

    #[test]
    fn recipes() {
        let recipe = |s: &str| {
            let u: ServerUrl = s.parse().unwrap();
            format!("{:?}", u.server)
        };
        assert!(recipe("zk://z/l").contains("Mutex"));
        assert!(recipe("zk://z/l?recipe=mutex").contains("Mutex"));
        assert!(recipe("zk://z/l?recipe=rwlock").contains("RwLock"));
        let e = "zk://z/l?recipe=semaphore"
            .parse::<ServerUrl>()
            .unwrap_err();
        assert!(
            e.contains("'semaphore' is not a recipe (use mutex or rwlock)"),
            "{e}"
        );
    }
}

//! Redis's address: `redis[s]://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...][/DB]`
//! with `ttl=`, `queue-timeout=` and, for `rediss://`, the TLS files.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use super::RedisBackend;
use crate::backend::address::{check_tls, host_list, split_path, tls_param, Parts};
use crate::backend::{
    secret, Backend, BackendConfig, Capabilities, Result, Scheme, ServerAddress, ServerUrl, Tuning,
    Usage,
};

pub(crate) const DEFAULT_PORT: u16 = 6379;
/// Where redis-cli reads a password the address does not hold.
pub(crate) const PASSWORD_ENV: &str = "REDISCLI_AUTH";

pub(crate) const SCHEME: Scheme = Scheme {
    service: "Redis",
    names: &["redis", "rediss"],
    params: &[
        ("ttl", "30s"),
        ("queue-timeout", "60s"),
        ("cacert", "FILE"),
        ("cert", "FILE"),
        ("key", "FILE"),
    ],
    env: &[PASSWORD_ENV],
    default_port: DEFAULT_PORT,
    default_ttl: Duration::from_secs(30),
    // History: a stream per key written by the scripts that end a hold
    // (history.rs); slots: a `--limit N` holder's record keeps the slot
    // its grant gave (scripts/common.lua, `grant_set`).
    caps: Capabilities {
        history: None,
        slots: None,
        ..Capabilities::ALL
    },
    key_problem: crate::backend::any_key,
    usage: Usage {
        address: "[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...][/DB]",
        note: "; rediss:// is TLS",
    },
    parse,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RedisAddress {
    /// Several nodes form a quorum.
    pub nodes: Vec<String>,
    pub db: i64,
    /// `rediss://`.
    pub tls: bool,
}

impl fmt::Display for RedisAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.tls { "s" } else { "" };
        write!(f, "redis{s}://{}/{}", self.nodes.join(","), self.db)
    }
}

#[async_trait]
impl ServerAddress for RedisAddress {
    fn scheme(&self) -> &'static Scheme {
        &SCHEME
    }

    async fn connect(&self, config: &BackendConfig) -> Result<Box<dyn Backend>> {
        Ok(Box::new(RedisBackend::connect(self, config).await?))
    }
}

fn parse(p: &Parts) -> std::result::Result<ServerUrl, String> {
    let tls = p.scheme == "rediss";
    let mut tuning = Tuning::default();
    let mut t = secret::Tls::default();
    for &(name, value) in &p.params {
        match name {
            "ttl" => tuning.ttl = Some(p.duration(name, value)?),
            "queue-timeout" => tuning.queue_timeout = Some(p.duration(name, value)?),
            _ if tls && tls_param(&mut t, name, value) => {}
            "cacert" | "cert" | "key" => {
                return Err(format!(
                    "'{name}' in '{}' is a TLS setting: use rediss://",
                    p.shown
                ))
            }
            _ => return Err(p.unknown(name, "redis://", SCHEME.params)),
        }
    }
    let (mut access, rest) = p.credentials(Some(PASSWORD_ENV))?;
    check_tls(&t, &p.shown)?;
    access.tls = tls.then_some(t);
    Ok(ServerUrl {
        server: std::sync::Arc::new(redis_address(&rest, tls)?),
        tuning,
        access,
    })
}

fn redis_address(rest: &str, tls: bool) -> std::result::Result<RedisAddress, String> {
    let (hosts, db) = split_path(rest);
    let db = if db.is_empty() {
        0
    } else {
        db.parse()
            .map_err(|_| format!("'{db}' is not a Redis database number"))?
    };
    Ok(RedisAddress {
        nodes: host_list(hosts, DEFAULT_PORT)?,
        db,
        tls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(
            redis_address("r1:6379/2", false).unwrap(),
            RedisAddress {
                nodes: vec!["r1:6379".into()],
                db: 2,
                tls: false
            }
        );
        assert_eq!(
            redis_address("a,b:7000,c", false).unwrap().nodes,
            vec!["a:6379", "b:7000", "c:6379"]
        );
        assert!("redis://a/x".parse::<ServerUrl>().is_err());
    }

    #[test]
    fn tuning_comes_from_the_query() {
        let u: ServerUrl = "redis://a,b,c/0?ttl=3s&queue-timeout=1m".parse().unwrap();
        assert_eq!(u.tuning.ttl, Some(Duration::from_secs(3)));
        assert_eq!(u.tuning.queue_timeout, Some(Duration::from_secs(60)));
        assert_eq!(u.server.to_string(), "redis://a:6379,b:6379,c:6379/0");
        let e = "redis://r?tll=3s".parse::<ServerUrl>().unwrap_err();
        assert!(
            e.contains("'tll'") && e.contains("ttl, queue-timeout"),
            "{e}"
        );
        assert!("redis://r?ttl".parse::<ServerUrl>().is_err());
        assert!("redis://r?ttl=-1".parse::<ServerUrl>().is_err());
    }

    #[test]
    fn credentials_and_tls_are_parsed_and_never_shown() {
        let u: ServerUrl = "rediss://locker:pw%2Fx@r1,r2:7000/3?cacert=/ca.pem&ttl=3s"
            .parse()
            .unwrap();
        assert_eq!(u.server.to_string(), "rediss://r1:6379,r2:7000/3");
        assert_eq!(u.access.user.as_deref(), Some("locker"));
        assert_eq!(u.access.password.as_ref().map(|p| p.expose()), Some("pw/x"));
        let tls = u.access.tls.clone().unwrap();
        assert_eq!(tls.ca, Some("/ca.pem".into()));
        let config = BackendConfig::new(u, crate::backend::DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(config.shown(), "rediss://locker:***@r1:6379,r2:7000/3");
        let e = "redis://u:pw@r?cacert=/x".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("rediss://") && e.contains("u:***@"), "{e}");
        let e = "rediss://r?cert=/c".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("cert= and key="), "{e}");
    }
}

//! etcd's address: `etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PREFIX]`
//! with `ttl=` and the TLS files. The lock NAME is the key prefix
//! `PREFIX/NAME/` (`NAME/` without a prefix, as `etcdctl lock NAME` names it).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use super::EtcdBackend;
use crate::backend::address::{check_tls, host_list, split_path, tls_param, Parts};
use crate::backend::{
    secret, Backend, BackendConfig, Capabilities, Result, Scheme, ServerAddress, ServerUrl, Tuning,
    Usage,
};

pub(crate) const DEFAULT_PORT: u16 = 2379;
/// etcdctl's: `USER` or `USER:PASSWORD`, when the address names no user.
pub(crate) const USER_ENV: &str = "ETCDCTL_USER";
pub(crate) const PASSWORD_ENV: &str = "ETCDCTL_PASSWORD";

pub(crate) const SCHEME: Scheme = Scheme {
    service: "etcd",
    names: &["etcd"],
    params: &[
        ("ttl", "10s"),
        ("cacert", "FILE"),
        ("cert", "FILE"),
        ("key", "FILE"),
    ],
    env: &[USER_ENV, PASSWORD_ENV],
    default_port: DEFAULT_PORT,
    // etcdctl lock's session TTL.
    default_ttl: Duration::from_secs(10),
    caps: Capabilities {
        history: None,
        slots: None,
        ..Capabilities::ALL
    },
    key_problem: super::names::key_problem,
    usage: Usage {
        address: "[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PREFIX]",
        note: "; TLS with cacert=",
    },
    parse,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EtcdAddress {
    pub endpoints: Vec<String>,
    /// Without slashes at either end; empty: none.
    pub prefix: String,
}

impl fmt::Display for EtcdAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "etcd://{}", self.endpoints.join(","))?;
        if !self.prefix.is_empty() {
            write!(f, "/{}", self.prefix)?;
        }
        Ok(())
    }
}

#[async_trait]
impl ServerAddress for EtcdAddress {
    fn scheme(&self) -> &'static Scheme {
        &SCHEME
    }

    async fn connect(&self, config: &BackendConfig) -> Result<Box<dyn Backend>> {
        Ok(Box::new(EtcdBackend::connect(self, config).await?))
    }
}

fn parse(p: &Parts) -> std::result::Result<ServerUrl, String> {
    let mut tuning = Tuning::default();
    let mut t = secret::Tls::default();
    let mut tls = false;
    for &(name, value) in &p.params {
        match name {
            "ttl" => tuning.ttl = Some(p.duration(name, value)?),
            _ if tls_param(&mut t, name, value) => tls = true,
            _ => return Err(p.unknown(name, "etcd://", SCHEME.params)),
        }
    }
    let (access, rest) = p.credentials(Some(PASSWORD_ENV))?;
    check_tls(&t, &p.shown)?;
    let mut access = user_from_env(access);
    access.tls = tls.then_some(t);
    let (hosts, prefix) = split_path(&rest);
    Ok(ServerUrl {
        server: std::sync::Arc::new(EtcdAddress {
            endpoints: host_list(hosts, DEFAULT_PORT)?,
            prefix: prefix.trim_matches('/').to_string(),
        }),
        tuning,
        access,
    })
}

/// etcdctl's ETCDCTL_USER (`USER` or `USER:PASSWORD`), when the address
/// names no user.
fn user_from_env(mut access: secret::Access) -> secret::Access {
    if access.user.is_some() {
        return access;
    }
    let Ok(value) = std::env::var(USER_ENV) else {
        return access;
    };
    match value.split_once(':') {
        Some((user, password)) => {
            access.user = Some(user.to_string());
            if access.password.is_none() {
                access.password = Some(secret::Secret::new(password.to_string()));
            }
        }
        None if !value.is_empty() => access.user = Some(value),
        None => {}
    }
    access
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let u: ServerUrl = "etcd://e1,e2:3000".parse().unwrap();
        assert_eq!(u.server.to_string(), "etcd://e1:2379,e2:3000");
        let u: ServerUrl = "etcd://127.0.0.1:5/locks/?ttl=3s".parse().unwrap();
        assert_eq!(u.tuning.ttl, Some(Duration::from_secs(3)));
        assert_eq!(u.server.to_string(), "etcd://127.0.0.1:5/locks");
        let again: ServerUrl = u.server.to_string().parse().unwrap();
        assert_eq!(again.server.to_string(), u.server.to_string());
        let e = "etcd://e?session-timeout=3s"
            .parse::<ServerUrl>()
            .unwrap_err();
        assert!(e.contains("etcd:// knows ttl"), "{e}");
        let u: ServerUrl = "etcd://root:pw@e1?cacert=/ca".parse().unwrap();
        assert!(u.access.tls.is_some());
        assert_eq!(u.server.to_string(), "etcd://e1:2379");
    }
}

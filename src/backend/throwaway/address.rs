//! `throwaway://NAME`: the scheme of the test-only backend.

use std::fmt;

use async_trait::async_trait;

use super::ThrowawayBackend;
use crate::backend::address::Parts;
use crate::backend::{
    Backend, BackendConfig, Capabilities, Result, Scheme, ServerAddress, ServerUrl, Usage,
};

pub(crate) const SCHEME: Scheme = Scheme {
    service: "Throwaway",
    names: &["throwaway"],
    params: &[],
    env: &[],
    // A port no other backend has (the table's test checks it).
    default_port: 1,
    default_ttl: crate::backend::DEFAULT_TTL,
    caps: Capabilities {
        shared: false,
        limit: false,
        kept_holds: false,
        queues: Some(crate::backend::fields::NOT_YET),
        history: Some(crate::backend::history::HISTORY_NOT_YET),
        slots: Some("it takes no --limit"),
        hold_at_least: Some("a hold cannot outlive lc-cli"),
        why: "",
    },
    key_problem: crate::backend::any_key,
    usage: Usage {
        address: "NAME",
        note: "",
    },
    parse,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ThrowawayAddress {
    pub name: String,
}

impl fmt::Display for ThrowawayAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "throwaway://{}", self.name)
    }
}

#[async_trait]
impl ServerAddress for ThrowawayAddress {
    fn scheme(&self) -> &'static Scheme {
        &SCHEME
    }

    async fn connect(&self, _config: &BackendConfig) -> Result<Box<dyn Backend>> {
        Ok(Box::new(ThrowawayBackend::default()))
    }
}

fn parse(p: &Parts) -> std::result::Result<ServerUrl, String> {
    if let Some(&(name, _)) = p.params.first() {
        return Err(p.unknown(name, "throwaway://", SCHEME.params));
    }
    Ok(ServerUrl::plain(ThrowawayAddress {
        name: p.rest.to_string(),
    }))
}

//! What each backend's folder declares of its scheme ([`Scheme`],
//! [`Capabilities`]), the parsed address behind it ([`ServerAddress`],
//! [`ServerUrl`]), and the checks every request passes before it is sent.

use crate::backend::fields::Extras;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    address, secret, Backend, BackendConfig, BackendError, LockMode, Result, BACKENDS, LEFT_OUT,
};

/// What lc-cli knows of one backend's scheme, for parsing, the errors and
/// the docs; each backend's `address.rs` defines its own.
pub struct Scheme {
    /// The service as messages name it ("Redis").
    pub service: &'static str,
    /// The URL schemes it answers to; `""` is a bare `host:port`.
    pub names: &'static [&'static str],
    /// The query parameters it knows, each with what its value looks like
    /// in the `--server` help (`("ttl", "30s")`).
    pub params: &'static [(&'static str, &'static str)],
    /// Where its credentials can come from when the address has none.
    pub env: &'static [&'static str],
    pub default_port: u16,
    /// The lease (`ttl=`) when the address gives none.
    pub default_ttl: Duration,
    pub caps: Capabilities,
    /// Its own naming rule for keys, beyond the limits every backend keeps.
    pub key_problem: fn(&str) -> Option<String>,
    /// How the `--server` help writes its addresses.
    pub usage: Usage,
    /// The address after the scheme, its query, into the typed address.
    pub parse: fn(&address::Parts) -> std::result::Result<ServerUrl, String>,
}

/// How the `--server` help writes a scheme's addresses (`backend::help`
/// renders it with the scheme's names, parameters and variables).
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// The address after `NAME://`, without the query, its optional parts
    /// in brackets: `[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PATH]`.
    pub address: &'static str,
    /// What else to know, said after the service's name (TLS, aliases):
    /// "" or starting with "; ".
    pub note: &'static str,
}

/// Why a backend does not take `--slots` in this build (76).
pub(crate) const SLOTS_NOT_YET: &str =
    "it cannot tell a holder which slot it has yet (docs/fleet-slots.md says which backends can)";

/// What a backend can do: asked only through [`check_mode`] and
/// [`ServerAddress::keeps_detached_holds`].
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// `--shared`.
    pub shared: bool,
    /// `--limit N`.
    pub limit: bool,
    /// A hold can outlive lc-cli (`lock KEY` without a command): not where a
    /// hold is a session's, as on PostgreSQL.
    pub kept_holds: bool,
    /// Deploy queues: `--newest`, `--order` (and the key's mark, `lc-cli
    /// mark`), `--cancel-running`, `--note`; None where they are taken,
    /// else why not (the one line of the refusal, 76).
    pub queues: Option<&'static str>,
    /// A key's history (`lc-cli history`, docs/history.md): None where it
    /// is kept, else why not (the one line of the refusal, 76).
    pub history: Option<&'static str>,
    /// `--slots` and `LC_SLOT` (docs/fleet-slots.md): None where a holder
    /// is told its slot, else why not (the one line of the refusal, 76).
    pub slots: Option<&'static str>,
    /// `--hold-at-least` (docs/fleet-jobs.md): None where a hold can be kept
    /// for the rest of its window after the command, else why not (76).
    pub hold_at_least: Option<&'static str>,
    /// Why a mode is refused, added to the refusal: inside the parentheses
    /// that name the mode asked for where neither mode is taken.
    pub why: &'static str,
}

impl Capabilities {
    pub const ALL: Capabilities = Capabilities {
        shared: true,
        limit: true,
        kept_holds: true,
        queues: None,
        history: Some(crate::backend::history::HISTORY_NOT_YET),
        slots: Some(SLOTS_NOT_YET),
        hold_at_least: None,
        why: "",
    };

    /// Why `who` ("lc-cli's etcd backend", "this server") refuses `mode`;
    /// None when it takes it.
    pub fn refusal(&self, who: &str, mode: LockMode) -> Option<String> {
        let what = match mode {
            LockMode::Exclusive => return None,
            LockMode::Shared if self.shared => return None,
            LockMode::Limit(_) if self.limit => return None,
            _ if !self.shared && !self.limit => {
                let why = self.why;
                return Some(format!(
                    "{who} cannot take shared or limited locks (asked for {mode}{why})"
                ));
            }
            LockMode::Limit(n) => format!("--limit {n}"),
            LockMode::Shared => "shared locks".to_string(),
        };
        Some(format!("{who} cannot take {what}{}", self.why))
    }
}

/// A parsed server address: a backend's own type, behind which [`connect`]
/// finds its implementation.
#[async_trait]
pub trait ServerAddress: std::fmt::Display + std::fmt::Debug + Send + Sync {
    fn scheme(&self) -> &'static Scheme;

    /// Opens the backend (a session, a connection check) at this address.
    async fn connect(&self, config: &BackendConfig) -> Result<Box<dyn Backend>>;

    /// Whether a hold can outlive lc-cli (`lock KEY` without a command).
    fn keeps_detached_holds(&self) -> bool {
        self.scheme().caps.kept_holds
    }
}

/// Backend tuning carried in the address's query (`redis://h/0?ttl=30s`), so
/// a new backend adds parameters to its scheme, not global flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuning {
    pub session_timeout: Option<Duration>,
    pub ttl: Option<Duration>,
    pub queue_timeout: Option<Duration>,
}

/// A `--server` value: the service and the tuning its address carries.
#[derive(Debug, Clone)]
pub struct ServerUrl {
    pub server: Arc<dyn ServerAddress>,
    pub tuning: Tuning,
    pub access: secret::Access,
}

impl ServerUrl {
    /// An address without tuning or credentials of its own.
    pub fn plain(server: impl ServerAddress + 'static) -> ServerUrl {
        ServerUrl {
            server: Arc::new(server),
            tuning: Tuning::default(),
            access: secret::Access::default(),
        }
    }
}

pub const DEFAULT_SERVER: &str = "127.0.0.1:22119";

impl std::str::FromStr for ServerUrl {
    type Err = String;

    /// Finds the scheme in [`BACKENDS`]; every message quotes the address
    /// masked, never its password.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let parts = address::Parts::split(s)?;
        match BACKENDS.iter().find(|b| b.names.contains(&parts.scheme)) {
            Some(scheme) => (scheme.parse)(&parts),
            None if LEFT_OUT.iter().any(|(n, _)| *n == parts.scheme) => {
                let feature = LEFT_OUT
                    .iter()
                    .find(|(n, _)| *n == parts.scheme)
                    .map(|(_, f)| *f);
                Err(format!(
                    "'{}': this lc-cli was built without the {}:// backend (build it with `--features {}`)",
                    parts.shown,
                    parts.scheme,
                    feature.unwrap_or_default()
                ))
            }
            None => Err(format!(
                "unknown server scheme in '{}' (use {})",
                parts.shown,
                scheme_list()
            )),
        }
    }
}

/// `host:port, lc://, zk://, ... or postgresql://`, from the table.
pub(super) fn scheme_list() -> String {
    let forms: Vec<String> = BACKENDS
        .iter()
        .flat_map(|b| b.names.iter())
        .map(|n| match *n {
            "" => "host:port".to_string(),
            n => format!("{n}://"),
        })
        .collect();
    match forms.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => forms.join(""),
    }
}

/// What the well-known port of another backend in `addr` suggests, for a
/// built-in-protocol address that got no Locking-Center answer.
pub fn port_hint(addr: &str) -> String {
    let (host, port) = match addr.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().ok()),
        None => (addr, None),
    };
    let other = BACKENDS
        .iter()
        .filter(|b| !b.names.contains(&""))
        .find(|b| Some(b.default_port) == port);
    match (other, port) {
        (Some(b), Some(port)) => format!(
            " ({port} is {}'s port: use --server {}://{host}:{port})",
            b.service, b.names[0]
        ),
        (None, Some(80 | 443 | 8080)) => " (an HTTP port?)".to_string(),
        _ => String::new(),
    }
}

/// The one check of a mode against the backend's capabilities: a shared or
/// limited request is refused, never served as an exclusive lock.
pub fn check_mode(server: &dyn ServerAddress, shown: &str, mode: LockMode) -> Result<()> {
    let scheme = server.scheme();
    let who = format!("lc-cli's {} backend", scheme.service);
    match scheme.caps.refusal(&who, mode) {
        None => Ok(()),
        Some(reason) => Err(BackendError::Unsupported {
            server: shown.to_string(),
            reason,
        }),
    }
}

/// `lc-cli history` against the backend's capabilities, before anything is
/// sent: refused at once (76) where the backend keeps no history.
pub fn check_history(server: &dyn ServerAddress, shown: &str) -> Result<()> {
    let scheme = server.scheme();
    match scheme.caps.history {
        None => Ok(()),
        Some(why) => Err(BackendError::Unsupported {
            server: shown.to_string(),
            reason: format!(
                "lc-cli's {} backend cannot show a key's history: {why}",
                scheme.service
            ),
        }),
    }
}

/// The one check of a request's extra fields against the backend's
/// capabilities, before anything is sent: a deploy-queue option is refused
/// at once where the backend does not keep them, never ignored.
pub fn check_extras(server: &dyn ServerAddress, shown: &str, extras: &Extras) -> Result<()> {
    if extras.is_empty() {
        return Ok(());
    }
    let scheme = server.scheme();
    match scheme.caps.queues {
        None => Ok(()),
        Some(why) => Err(BackendError::Unsupported {
            server: shown.to_string(),
            reason: format!(
                "lc-cli's {} backend cannot take {}: {why}",
                scheme.service,
                extras.options()
            ),
        }),
    }
}

/// The one check of keys and sources, before anything is sent: the limits
/// of the one-byte protocol (a key of 1 to 127 bytes, a source of up to 127), which
/// every backend keeps so a key means the same thing on each, then the
/// naming rule of the backend at `server`.
pub fn check_names(
    server: Option<&dyn ServerAddress>,
    keys: &[&str],
    sources: &[&str],
) -> Result<()> {
    for key in keys {
        let problem = crate::proto::check_key(key.as_bytes())
            .err()
            .map(|e| e.to_string())
            .or_else(|| server.and_then(|s| (s.scheme().key_problem)(key)));
        if let Some(reason) = problem {
            return Err(BackendError::BadKey {
                key: key.to_string(),
                reason,
            });
        }
    }
    for source in sources {
        if let Err(e) = crate::proto::check_source(source.as_bytes()) {
            return Err(BackendError::BadSource {
                source_name: source.to_string(),
                reason: e.to_string(),
            });
        }
    }
    Ok(())
}

/// No naming rule beyond the shared limits.
pub(crate) fn any_key(_key: &str) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_name_and_port_is_unique() {
        let names: Vec<_> = BACKENDS.iter().flat_map(|b| b.names.iter()).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        let mut ports: Vec<_> = BACKENDS.iter().map(|b| b.default_port).collect();
        ports.sort();
        ports.dedup();
        assert_eq!(ports.len(), BACKENDS.len());
    }

    #[test]
    fn port_hints_name_the_other_backends() {
        assert!(port_hint("127.0.0.1:6379").contains("redis://127.0.0.1:6379"));
        assert!(port_hint("zk1:2181").contains("zk://zk1:2181"));
        assert!(port_hint("e:2379").contains("etcd://e:2379"));
        assert!(port_hint("p:5432").contains("postgres://p:5432"));
        assert!(port_hint("h:8080").contains("HTTP"));
        assert_eq!(port_hint("h:22119"), "");
    }

    #[test]
    fn modes_are_refused_from_the_capabilities() {
        let etcd: ServerUrl = "etcd://e".parse().unwrap();
        for mode in [LockMode::Exclusive, LockMode::Shared, LockMode::limit(2)] {
            assert!(check_mode(&*etcd.server, "x", mode).is_ok());
        }
        let pg: ServerUrl = "postgres://u@h/d".parse().unwrap();
        assert!(check_mode(&*pg.server, "x", LockMode::Shared).is_ok());
        assert!(check_mode(
            &*pg.server,
            "x",
            LockMode::Limit(std::num::NonZeroU32::new(2).unwrap())
        )
        .is_ok());
        let lc: ServerUrl = "h:1".parse().unwrap();
        assert!(check_mode(
            &*lc.server,
            "x",
            LockMode::Limit(std::num::NonZeroU32::new(3).unwrap())
        )
        .is_ok());
        assert!(pg.server.keeps_detached_holds() && lc.server.keeps_detached_holds());
    }

    /// A reference server's refusal comes from its capabilities, worded
    /// as before they were.
    #[test]
    fn a_reference_servers_refusal_comes_from_its_capabilities() {
        let caps = crate::backend::lc::address::REFERENCE_CAPS;
        assert_eq!(caps.refusal("this server", LockMode::Exclusive), None);
        let mode = LockMode::limit(2);
        assert_eq!(
            caps.refusal("this server", mode).unwrap(),
            format!(
                "this server cannot take shared or limited locks (asked for {mode}; it answered '-', as a reference Locking-Center server does)"
            )
        );
        let none = Capabilities {
            shared: false,
            limit: false,
            kept_holds: true,
            queues: None,
            history: None,
            slots: None,
            hold_at_least: None,
            why: "",
        };
        assert_eq!(
            none.refusal("lc-cli's X backend", LockMode::Shared)
                .unwrap(),
            format!(
                "lc-cli's X backend cannot take shared or limited locks (asked for {})",
                LockMode::Shared
            )
        );
    }

    #[test]
    fn names_are_checked_once_with_the_backends_rule() {
        let zk: ServerUrl = "zk://z".parse().unwrap();
        assert!(check_names(Some(&*zk.server), &["a/b"], &[]).is_ok());
        assert!(check_names(Some(&*zk.server), &["a//b"], &[]).is_err());
        assert!(check_names(None, &[""], &[]).is_err());
        assert!(check_names(None, &[&"k".repeat(128)], &[]).is_err());
        assert!(check_names(None, &[], &[&"s".repeat(256)]).is_err());
        assert!(check_names(None, &["k"], &["s"]).is_ok());
    }
}

//! `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?keepalive=10s&sslmode=prefer]`: parsing, and
//! the displayed form, which never shows the password.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use super::PgBackend;
use crate::backend::address::Parts;
use crate::backend::{
    Backend, BackendConfig, Capabilities, Scheme, ServerAddress, ServerUrl, Usage,
};

pub(crate) const DEFAULT_PORT: u16 = 5432;
/// See [`PgAddress::keepalive`].
pub(crate) const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(10);
pub(crate) const PARAMS: &[(&str, &str)] = &[
    ("keepalive", "10s"),
    ("sslmode", "verify-full"),
    ("sslrootcert", "FILE"),
];

pub(crate) const SCHEME: Scheme = Scheme {
    service: "PostgreSQL",
    names: &["postgres", "postgresql"],
    params: PARAMS,
    // As libpq reads them (also ~/.pgpass).
    env: &[
        "PGUSER",
        "PGPASSWORD",
        "PGPASSFILE",
        "PGSSLMODE",
        "PGSSLROOTCERT",
    ],
    default_port: DEFAULT_PORT,
    default_ttl: crate::backend::DEFAULT_TTL,
    caps: Capabilities {
        // PostgreSQL's shared advisory lock, in the same queue.
        shared: true,
        // N slot locks behind a turnstile lock (limit.rs).
        limit: true,
        // A kept hold is a row of lc_cli.kept that every grant reads (kept.rs).
        kept_holds: true,
        queues: None,
        // lc_cli.holds and lc_cli.history (history.rs).
        history: None,
        // The slot lock a holder took is its slot (limit.rs).
        slots: None,
        // The window is a row of lc_cli.kept written at the grant (kept.rs).
        hold_at_least: None,
        why: "",
    },
    // Any text hashes.
    key_problem: crate::backend::any_key,
    usage: Usage {
        address: "USER[:PASSWORD]@HOST[:PORT]/DB",
        note: "; postgresql:// too; TLS with sslmode=verify-full",
    },
    parse: parse_url,
};

#[async_trait]
impl ServerAddress for PgAddress {
    fn scheme(&self) -> &'static Scheme {
        &SCHEME
    }

    async fn connect(&self, config: &BackendConfig) -> crate::backend::Result<Box<dyn Backend>> {
        Ok(Box::new(PgBackend::connect(self, config).await?))
    }
}

/// PostgreSQL keeps its credentials and tuning in its own address.
fn parse_url(p: &Parts) -> Result<ServerUrl, String> {
    parse(p.rest, &p.params, p.whole).map(ServerUrl::plain)
}

/// libpq's `sslmode` (also from PGSSLMODE), its default `prefer` included.
/// `verify-ca` is not offered: rustls always checks the host name, so it
/// would be `verify-full` under another name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum SslMode {
    /// Plain TCP.
    Disable,
    /// TLS when the server offers it, unverified; else plain TCP.
    #[default]
    Prefer,
    /// TLS or nothing, unverified (encryption against a passive listener
    /// only, as libpq's `require` without a root certificate).
    Require,
    /// TLS, the certificate checked against `sslrootcert` (PGSSLROOTCERT),
    /// else the system roots, and its name against the host.
    VerifyFull,
}

impl SslMode {
    pub(crate) const NAMES: &'static [&'static str] =
        &["disable", "prefer", "require", "verify-full"];

    fn parse(value: &str, shown: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-full" => SslMode::VerifyFull,
            _ => {
                return Err(format!(
                    "sslmode '{value}' in '{shown}': lc-cli knows {}",
                    SslMode::NAMES.join(", ")
                ))
            }
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

use crate::backend::secret::decode;
pub(crate) use crate::backend::secret::{mask, Secret};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PgAddress {
    pub user: String,
    /// From the URL; else PGPASSWORD or ~/.pgpass are read at connect time.
    pub password: Option<Secret>,
    pub host: String,
    pub port: u16,
    pub db: String,
    /// The liveness bound: the server drops our session (and frees the key)
    /// no sooner than this after it last heard from us, and lc-cli stops a
    /// command it cannot confirm the session for before then.
    pub keepalive: Duration,
    pub sslmode: SslMode,
    /// The CA file of `verify-full` (PEM); None: the system roots.
    pub sslrootcert: Option<std::path::PathBuf>,
}

impl fmt::Display for PgAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let password = if self.password.is_some() { ":***" } else { "" };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        write!(
            f,
            "postgres://{}{password}@{host}:{}/{}",
            self.user, self.port, self.db
        )?;
        let mut params = Vec::new();
        if self.keepalive != DEFAULT_KEEPALIVE {
            params.push(format!(
                "keepalive={}",
                humantime::format_duration(self.keepalive)
            ));
        }
        if self.sslmode != SslMode::default() {
            params.push(format!("sslmode={}", self.sslmode.name()));
        }
        if let Some(ca) = &self.sslrootcert {
            params.push(format!("sslrootcert={}", ca.display()));
        }
        if !params.is_empty() {
            write!(f, "?{}", params.join("&"))?;
        }
        Ok(())
    }
}

/// `rest` is what follows `postgres://` and precedes `?`; `params` the query.
pub(crate) fn parse(rest: &str, params: &[(&str, &str)], whole: &str) -> Result<PgAddress, String> {
    let shown = mask(whole);
    let mut keepalive = DEFAULT_KEEPALIVE;
    let mut sslmode = match std::env::var("PGSSLMODE") {
        Ok(v) if !v.is_empty() => SslMode::parse(&v, "PGSSLMODE")?,
        _ => SslMode::default(),
    };
    let mut sslrootcert = std::env::var_os("PGSSLROOTCERT")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from);
    for (name, value) in params {
        match *name {
            "sslmode" => sslmode = SslMode::parse(value, &shown)?,
            "sslrootcert" => sslrootcert = Some(std::path::PathBuf::from(value)),
            "keepalive" => {
                keepalive = crate::duration::parse_duration(value)
                    .map_err(|e| format!("keepalive in '{shown}': {e}"))?;
                if keepalive < Duration::from_secs(2) {
                    return Err(format!("keepalive in '{shown}': at least 2s"));
                }
            }
            _ => {
                return Err(format!(
                    "unknown parameter '{name}' in '{shown}' (postgres:// knows {})",
                    PARAMS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
        }
    }
    let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (user, password) = match userinfo {
        Some(u) => match u.split_once(':') {
            Some((user, pw)) => (decode(user, whole)?, Some(Secret::new(decode(pw, whole)?))),
            None => (decode(u, whole)?, None),
        },
        None => (String::new(), None),
    };
    let user = if user.is_empty() {
        std::env::var("PGUSER").unwrap_or_else(|_| "postgres".into())
    } else {
        user
    };
    let (host, port) = split_host_port(hostport, &shown)?;
    let db = decode(db.trim_end_matches('/'), whole)?;
    if db.contains('/') {
        return Err(format!("'{shown}': the database name cannot contain '/'"));
    }
    let db = if db.is_empty() { user.clone() } else { db };
    Ok(PgAddress {
        user,
        password,
        host,
        port,
        db,
        keepalive,
        sslmode,
        sslrootcert,
    })
}

fn split_host_port(hostport: &str, shown: &str) -> Result<(String, u16), String> {
    if hostport.contains(',') {
        return Err(format!("'{shown}': lc-cli takes a single PostgreSQL host"));
    }
    let (host, port) = if let Some(inner) = hostport.strip_prefix('[') {
        match inner.split_once(']') {
            Some((h, rest)) => (h, rest.strip_prefix(':')),
            None => return Err(format!("'{shown}': an unclosed '[' in the host")),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err(format!(
            "'{shown}': no host (a socket directory is not supported)"
        ));
    }
    let port = match port {
        Some(p) => p
            .parse()
            .map_err(|_| format!("'{p}' is not a port number in '{shown}'"))?,
        None => DEFAULT_PORT,
    };
    Ok((host.to_string(), port))
}

/// The password for `a`: the URL's, else PGPASSWORD, else the first
/// matching line of PGPASSFILE or ~/.pgpass (`host:port:db:user:password`,
/// `*` matches anything, `\:` and `\\` escape), as libpq reads them.
pub(crate) fn password_for(a: &PgAddress) -> Option<String> {
    if let Some(p) = &a.password {
        return Some(p.0.clone());
    }
    if let Ok(p) = std::env::var("PGPASSWORD") {
        return Some(Secret::new(p).0);
    }
    let file = std::env::var_os("PGPASSFILE")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".pgpass")))?;
    let text = std::fs::read_to_string(file).ok()?;
    pgpass_lookup(&text, a).map(|p| Secret::new(p).0)
}

fn pgpass_lookup(text: &str, a: &PgAddress) -> Option<String> {
    let port = a.port.to_string();
    let wanted = [
        a.host.as_str(),
        port.as_str(),
        a.db.as_str(),
        a.user.as_str(),
    ];
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let fields = pgpass_fields(line);
        if fields.len() != 5 {
            continue;
        }
        let matches = fields[..4]
            .iter()
            .zip(wanted)
            .all(|(f, w)| f == "*" || f == w);
        if matches {
            return Some(fields[4].clone());
        }
    }
    None
}

fn pgpass_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    fields.last_mut().unwrap().push(n);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PgAddress {
        let rest = s.split_once("://").unwrap().1;
        parse(rest, &[], s).unwrap()
    }

    #[test]
    fn forms_and_defaults() {
        let a = p("postgres://u:s%40cret@db1:6543/locks");
        assert_eq!(a.user, "u");
        assert_eq!(a.password, Some(Secret("s@cret".into())));
        assert_eq!(
            (a.host.as_str(), a.port, a.db.as_str()),
            ("db1", 6543, "locks")
        );
        assert_eq!(a.to_string(), "postgres://u:***@db1:6543/locks");
        assert!(!format!("{a:?}").contains("cret"));
        let a = p("postgresql://ops@h/");
        assert_eq!(
            (a.port, a.db.as_str(), a.password.is_none()),
            (5432, "ops", true)
        );
        let a = p("postgres://ops@[::1]:5433/d");
        assert_eq!(a.host, "::1");
        assert_eq!(a.to_string(), "postgres://ops@[::1]:5433/d");
    }

    #[test]
    fn errors_never_show_the_password() {
        for bad in [
            "postgres://u:hunter2@h:notaport/d",
            "postgres://u:hunter2@a,b/d",
            "postgres://u:hunter2@/d",
            "postgres://u:hunter2@h/d%zz",
        ] {
            let rest = bad.split_once("://").unwrap().1;
            let e = parse(rest, &[], bad).unwrap_err();
            assert!(!e.contains("hunter2"), "{e}");
        }
        let e = parse(
            "u:hunter2@h/d",
            &[("ttl", "3s")],
            "postgres://u:hunter2@h/d?ttl=3s",
        )
        .unwrap_err();
        assert!(e.contains("keepalive") && !e.contains("hunter2"), "{e}");
        assert!(parse("u@h/d", &[("keepalive", "1s")], "x").is_err());
        let a = parse("u@h/d", &[("keepalive", "30s")], "x").unwrap();
        assert_eq!(a.keepalive, Duration::from_secs(30));
        assert_eq!(a.to_string(), "postgres://u@h:5432/d?keepalive=30s");
    }

    #[test]
    fn sslmode_and_sslrootcert() {
        let a = p("postgres://u@h/d");
        assert_eq!(a.sslmode, SslMode::Prefer);
        let a = parse(
            "u@h/d",
            &[("sslmode", "verify-full"), ("sslrootcert", "/ca.pem")],
            "x",
        )
        .unwrap();
        assert_eq!(a.sslmode, SslMode::VerifyFull);
        assert_eq!(
            a.to_string(),
            "postgres://u@h:5432/d?sslmode=verify-full&sslrootcert=/ca.pem"
        );
        let e = parse("u@h/d", &[("sslmode", "verify-ca")], "x").unwrap_err();
        assert!(e.contains("verify-full"), "{e}");
    }

    #[test]
    fn pgpass_lines_match_with_wildcards_and_escapes() {
        let a = p("postgres://ops@db1:5432/locks");
        let text = "# comment\nother:*:*:*:no\ndb1:5432:*:ops:pa\\:ss\n*:*:*:*:late\n";
        assert_eq!(pgpass_lookup(text, &a).as_deref(), Some("pa:ss"));
        assert_eq!(pgpass_lookup("x:1:2:3\n", &a), None);
    }
}

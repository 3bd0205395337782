//! Credentials in server addresses, and the one rule for showing them: a
//! password is never printed, whatever prints it (an error line, `-v`, the
//! status line, a hint that names the address).
//!
//! - [`Secret`] holds a password; its `Debug` shows `***`, and it has no
//!   `Display`.
//! - [`mask`] is the address as any output may show it:
//!   `redis://u:***@host` for `redis://u:pw@host`.
//! - [`scrub`] is the last line of defence at the places lc-cli prints:
//!   every password it was given (in an address or the environment) is
//!   replaced in the text, should some library's message quote it.

use std::fmt;
use std::sync::Mutex;

/// Every password this process was given, for [`scrub`].
static KNOWN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Passwords shorter than this are not scrubbed from free text (a one-letter
/// password would turn every such letter into `***`); the structured paths
/// never show them anyway.
const SCRUB_MIN_LEN: usize = 3;

/// A password that no `Display` or `Debug` shows.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl Secret {
    /// A password, remembered so that [`scrub`] can remove it from any text.
    pub fn new(password: String) -> Secret {
        if password.len() >= SCRUB_MIN_LEN {
            let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
            if !known.contains(&password) {
                known.push(password.clone());
            }
        }
        Secret(password)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// `text` with every password this process knows replaced by `***`.
pub(crate) fn scrub(text: &str) -> String {
    let known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = text.to_string();
    for password in known.iter() {
        if out.contains(password.as_str()) {
            out = out.replace(password.as_str(), "***");
        }
    }
    out
}

/// The address as an error may show it: the userinfo's password replaced
/// (`scheme://user:***@host...`). Only the part before the query is looked
/// at, so a `@` in a parameter's path is left alone.
pub(crate) fn mask(whole: &str) -> String {
    let Some((scheme, rest)) = whole.split_once("://") else {
        return whole.to_string();
    };
    let (base, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let masked = match base.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => format!("{scheme}://{base}"),
        },
        None => format!("{scheme}://{base}"),
    };
    match query {
        Some(q) => format!("{masked}?{q}"),
        None => masked,
    }
}

/// `%XX` escapes as URLs allow them in a user name or password.
pub(crate) fn decode(s: &str, whole: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("a bad %-escape in '{}'", mask(whole)))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("'{}' is not UTF-8 once decoded", mask(whole)))
}

/// Who lc-cli is to the service (ZooKeeper, Redis, etcd; PostgreSQL keeps
/// its own in its address), and how the connection is protected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    pub user: Option<String>,
    /// From the address, else from the backend's environment variable.
    pub password: Option<Secret>,
    /// The password was in the address (so a hint that repeats the address
    /// shows `user:***@`, a reminder that one is needed).
    pub password_in_url: bool,
    /// None: plain TCP.
    pub tls: Option<Tls>,
}

/// TLS settings from the address: verification against the system roots,
/// or the CA file given; a client certificate when the service asks for one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

impl Tls {
    /// The PEM files, read now: a missing file is one clear error.
    pub fn read(path: &std::path::Path, what: &str) -> Result<Vec<u8>, String> {
        std::fs::read(path).map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))
    }
}

/// Splits `user[:password]@hosts` (the authority, before any `/`) into the
/// credentials and the host list. `env_password` is the backend's variable
/// (REDISCLI_AUTH, ...), used when the address has no password.
pub(crate) fn split_userinfo<'a>(
    authority: &'a str,
    whole: &str,
    env_password: Option<&str>,
) -> Result<(Access, &'a str), String> {
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let mut access = Access::default();
    if let Some(u) = userinfo {
        let (user, password) = match u.split_once(':') {
            Some((user, pw)) => (user, Some(pw)),
            None => (u, None),
        };
        let user = decode(user, whole)?;
        access.user = (!user.is_empty()).then_some(user);
        if let Some(pw) = password {
            access.password = Some(Secret::new(decode(pw, whole)?));
            access.password_in_url = true;
        }
    }
    if access.password.is_none() {
        if let Some(var) = env_password {
            if let Ok(pw) = std::env::var(var) {
                if !pw.is_empty() {
                    access.password = Some(Secret::new(pw));
                }
            }
        }
    }
    Ok((access, hosts))
}

impl Access {
    /// `address` (as the backend's address shows it, without credentials) with the
    /// user put back and the password, when the address had one, as `***`.
    pub fn show(&self, address: &str) -> String {
        let Some((scheme, rest)) = address.split_once("://") else {
            return address.to_string();
        };
        let address = format!("{scheme}://{rest}");
        let user = self.user.as_deref().unwrap_or("");
        match (user.is_empty(), self.password_in_url) {
            (true, false) => address,
            (_, true) => format!("{scheme}://{user}:***@{rest}"),
            (false, false) => format!("{scheme}://{user}@{rest}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_hides_only_the_password() {
        assert_eq!(
            mask("redis://u:secretpw@127.0.0.1:21999"),
            "redis://u:***@127.0.0.1:21999"
        );
        assert_eq!(mask("redis://:pw@h/0?ttl=3s"), "redis://:***@h/0?ttl=3s");
        assert_eq!(mask("zk://ops@h/p"), "zk://ops@h/p");
        assert_eq!(mask("h:1"), "h:1");
        assert_eq!(
            mask("rediss://u:p@ss@h?cacert=/a@b"),
            "rediss://u:***@h?cacert=/a@b"
        );
    }

    #[test]
    fn userinfo_is_split_and_decoded() {
        let (a, hosts) = split_userinfo("u:s%40cr3t@h1,h2", "x", None).unwrap();
        assert_eq!(hosts, "h1,h2");
        assert_eq!(a.user.as_deref(), Some("u"));
        assert_eq!(a.password.as_ref().map(Secret::expose), Some("s@cr3t"));
        assert!(!format!("{a:?}").contains("cr3t"));
        assert_eq!(a.show("redis://h1/0"), "redis://u:***@h1/0");
        let (a, hosts) = split_userinfo("h", "x", None).unwrap();
        assert_eq!((hosts, a), ("h", Access::default()));
        let (a, _) = split_userinfo(":pw@h", "x", None).unwrap();
        assert_eq!(a.user, None);
        assert_eq!(a.show("redis://h/0"), "redis://:***@h/0");
    }

    #[test]
    fn scrub_removes_every_known_password() {
        let _ = Secret::new("zq-hunter-7".into());
        assert_eq!(scrub("auth zq-hunter-7 failed"), "auth *** failed");
        let _ = Secret::new("ab".into());
        assert_eq!(scrub("ab"), "ab");
    }
}

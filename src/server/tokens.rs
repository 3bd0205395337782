//! `serve --token-file FILE`: who may use the lock port, and for what.
//!
//! The file holds one token per line, optionally followed by whitespace and
//! a role (`lock`, the default, or `admin`) and by `name=NAME`, the
//! identity the server's log and `keys` show for what the token does
//! (`TOKEN admin name=alice`, `TOKEN name=ci-runner`); `#` starts a
//! comment, blank lines are skipped. A name is 1 to 64 bytes of ASCII
//! letters, digits and `-_.@`; a line without one is shown as
//! `token:FINGERPRINT` (16 hex digits: the first 8 bytes of the token's
//! SHA-256), stable for as long as the token is. Files of earlier releases
//! (a token and a role) read as before. Only the SHA-256 of each token is
//! kept, and a token is checked against every entry with no early exit
//! ([`TokenSet::check`]).
//! SIGHUP re-reads the file ([`reload_on_hangup`]); a file that no longer
//! parses leaves the tokens in use as they were.
//!
//! A connection starts with a Hello carrying its token (`hello.rs`); the
//! role it proves is then checked for the request behind it by
//! [`allowed`], one exhaustive `match` over [`Request`], so that a new
//! action cannot be added without saying who may send it. "Its own" holds
//! are those granted to a connection whose token had the same
//! fingerprint ([`Owner`]); the owner is written to the `--data` log with
//! the grant and restored with the hold, so a restart changes nothing of
//! who may release or reclaim it. (Holds restored from a log of an earlier
//! release have no owner: only an admin token releases them, until their
//! holder reclaims them.) Two lines may give the same name (a rotation:
//! old and new token side by side): ownership goes by the token, the name
//! is only shown.
//!
//! A line may also end with `keys=PATTERNS` (`keys=deploy/*,ci/*`): the
//! keys its token may lock, try, wait for or mark (`quota.rs`); a line
//! without it may use every key. `held=N` caps the holds its token may
//! have at once (default [`quota::DEFAULT_HELD`]), `waits=N` how many of
//! its requests may wait in line at once (default
//! [`quota::DEFAULT_WAITS`]).

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use sha2::{Digest, Sha256};

use super::events::Events;
use super::quota::{self, KeyPatterns};
use crate::proto::{Request, MAX_FIELD};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Lock, trylock, wait, release its own holds, keys, ping.
    Lock,
    /// Also reset by key or source, and release holds that are not its own.
    Admin,
}

impl Role {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Lock => "lock",
            Role::Admin => "admin",
        }
    }
}

/// A token's identity: its fingerprint (the first 8 bytes of its
/// SHA-256) and its name. Recorded with each hold its connection is
/// granted (in the log too); the fingerprint tells "its own" holds from
/// others', the name is what the log and `keys` show (neither tells
/// anything of the token).
pub(crate) use super::table::{Identity, Owner};

/// Who a connection's Hello proved it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    pub role: Role,
    pub owner: Owner,
    /// The keys it may take (`keys=`); None: every key.
    pub keys: Option<Arc<KeyPatterns>>,
    /// How many holds it may have at once (`held=`, else the default).
    pub held: u32,
    /// How many of its requests may wait in line at once (`waits=`, else
    /// the default).
    pub waits: u32,
}

/// The longest name a token line may give (`name=NAME`).
pub(crate) const MAX_NAME: usize = 64;

/// Tokens this short are refused when the file is read: a token is the
/// only thing between the network and every key.
pub(crate) const MIN_TOKEN_LEN: usize = 16;

struct Entry {
    digest: [u8; 32],
    role: Role,
    owner: Owner,
    keys: Option<Arc<KeyPatterns>>,
    held: u32,
    waits: u32,
}

/// The tokens of one reading of the file, as digests.
pub(crate) struct TokenSet {
    entries: Vec<Entry>,
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

fn fingerprint_of(digest: &[u8; 32]) -> super::table::Fingerprint {
    let prefix = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
    super::table::Fingerprint::new(prefix).unwrap_or(super::table::Fingerprint::MIN)
}

/// The identity of a token line: its name, else `token:` and the
/// fingerprint in hex.
fn identity(digest: &[u8; 32], name: Option<&[u8]>) -> Owner {
    let fingerprint = fingerprint_of(digest);
    let name = match name {
        Some(n) => String::from_utf8_lossy(n).into_owned(),
        None => format!("token:{fingerprint:016x}"),
    };
    Arc::new(Identity {
        fingerprint,
        name: name.into_boxed_str(),
    })
}

/// Whether `name` may name a token: 1 to [`MAX_NAME`] bytes of ASCII
/// letters, digits and `-_.@` (no `:`, so no name reads as a derived
/// `token:...` identity, and nothing to escape in a log line).
pub(crate) fn valid_name(name: &[u8]) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(b))
}

impl TokenSet {
    /// Parses the file's text. A message names the line and what is wrong
    /// with it, never the token (nor the word after it, which may be half
    /// of a token with a space in it).
    pub(crate) fn parse(text: &[u8]) -> Result<TokenSet, String> {
        let mut entries: Vec<Entry> = Vec::new();
        let mut lines_of: Vec<usize> = Vec::new();
        for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
            let n = i + 1;
            let line = match raw.iter().position(|&b| b == b'#') {
                Some(at) => &raw[..at],
                None => raw,
            };
            let mut words = line
                .split(|b| b.is_ascii_whitespace())
                .filter(|w| !w.is_empty());
            let Some(token) = words.next() else {
                continue;
            };
            let mut role = None;
            let mut name = None;
            let mut keys = None;
            let mut held = None;
            let mut waits = None;
            for (i, word) in words.enumerate() {
                match word {
                    b"lock" | b"admin" if role.is_none() && name.is_none() && keys.is_none() => {
                        role = Some(if word == b"admin" {
                            Role::Admin
                        } else {
                            Role::Lock
                        })
                    }
                    _ if word.starts_with(b"name=") && name.is_none() => {
                        let given = &word[5..];
                        if !valid_name(given) {
                            return Err(format!(
                                "line {n}: a name (name=) must be 1 to {MAX_NAME} ASCII letters, \
                                 digits and -_.@"
                            ));
                        }
                        name = Some(given);
                    }
                    _ if word.starts_with(b"keys=") && keys.is_none() => {
                        keys = Some(
                            KeyPatterns::parse(&word[5..]).map_err(|e| format!("line {n}: {e}"))?,
                        );
                    }
                    _ if word.starts_with(b"held=") && held.is_none() => {
                        held = Some(
                            quota::parse_held(&word[5..]).map_err(|e| format!("line {n}: {e}"))?,
                        );
                    }
                    _ if word.starts_with(b"waits=") && waits.is_none() => {
                        waits = Some(
                            quota::parse_waits(&word[6..]).map_err(|e| format!("line {n}: {e}"))?,
                        );
                    }
                    _ if i == 0 => {
                        return Err(format!(
                            "line {n}: the word after the token is not a role (lock or admin) \
                             nor a name (name=NAME), keys=PATTERNS, held=N or waits=N"
                        ))
                    }
                    _ => {
                        return Err(format!(
                            "line {n}: more than a token, a role, a name=NAME, keys=PATTERNS, \
                             held=N and waits=N (a token has no spaces)"
                        ))
                    }
                }
            }
            let role = role.unwrap_or(Role::Lock);
            if token.iter().any(|b| !(0x21..0x7f).contains(b)) {
                return Err(format!(
                    "line {n}: the token has a byte that is not printable ASCII"
                ));
            }
            if token.len() < MIN_TOKEN_LEN || token.len() > MAX_FIELD {
                return Err(format!(
                    "line {n}: a token of {} bytes: {MIN_TOKEN_LEN} to {MAX_FIELD} are allowed \
                     (`openssl rand -hex 24` makes one)",
                    token.len()
                ));
            }
            let d = digest(token);
            if let Some(k) = entries.iter().position(|e| e.digest == d) {
                return Err(format!("line {n}: the same token as line {}", lines_of[k]));
            }
            let owner = identity(&d, name);
            entries.push(Entry {
                digest: d,
                role,
                owner,
                keys,
                held: held.unwrap_or(quota::DEFAULT_HELD),
                waits: waits.unwrap_or(quota::DEFAULT_WAITS),
            });
            lines_of.push(n);
        }
        if entries.is_empty() {
            return Err(
                "no token in it (one per line, optionally followed by lock or admin and name=NAME)"
                    .into(),
            );
        }
        Ok(TokenSet { entries })
    }

    /// The caller `token` makes, if it is one of the set. Its digest is
    /// compared with every entry's, each byte of each, without an early
    /// exit: the time taken does not depend on which entry matches, or
    /// how much of one.
    pub(crate) fn check(&self, token: &[u8]) -> Option<Caller> {
        let d = digest(token);
        let mut found = 0u8;
        let mut at = 0usize;
        for (i, e) in self.entries.iter().enumerate() {
            let mut diff = 0u8;
            for (a, b) in e.digest.iter().zip(d.iter()) {
                diff |= a ^ b;
            }
            // 1 when diff is 0, else 0, without a branch.
            let same = (((diff as u16).wrapping_sub(1) >> 8) & 1) as u8;
            found |= same;
            // All ones when same, else 0: the index of the match, if any.
            at |= i & usize::from(same).wrapping_neg();
            std::hint::black_box((found, at));
        }
        (std::hint::black_box(found) == 1).then(|| {
            let e = &self.entries[at];
            Caller {
                role: e.role,
                owner: e.owner.clone(),
                keys: e.keys.clone(),
                held: e.held,
                waits: e.waits,
            }
        })
    }

    /// How many tokens of each role: (admin, lock).
    pub(crate) fn counts(&self) -> (usize, usize) {
        let admin = self
            .entries
            .iter()
            .filter(|e| e.role == Role::Admin)
            .count();
        (admin, self.entries.len() - admin)
    }
}

impl fmt::Display for TokenSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (admin, lock) = self.counts();
        write!(f, "{} token(s): {admin} admin, {lock} lock", admin + lock)
    }
}

/// Peers whose refusals were logged (at most this many are remembered;
/// then the set starts again, so a flood from many addresses logs at most
/// this many lines per round).
const LOGGED_PEERS: usize = 1024;

/// Why a connection was refused, for the once-per-peer log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Refusal {
    /// Another frame came before the Hello.
    NoHello,
    /// A Hello without a token.
    NoToken,
    /// A Hello with a token that is not in the file.
    WrongToken,
}

/// The tokens of `--token-file`, re-read on SIGHUP.
pub(crate) struct Tokens {
    path: PathBuf,
    set: RwLock<Arc<TokenSet>>,
    logged: Mutex<HashSet<(IpAddr, Refusal)>>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tokens({}: {})", self.path.display(), self.current())
    }
}

/// Reads and parses the file; the message names it.
fn read(path: &Path) -> Result<TokenSet, String> {
    let text = std::fs::read(path)
        .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
    TokenSet::parse(&text).map_err(|e| format!("the token file {}: {e}", path.display()))
}

impl Tokens {
    pub(crate) fn load(path: &Path) -> Result<Tokens, String> {
        Ok(Tokens {
            path: path.to_path_buf(),
            set: RwLock::new(Arc::new(read(path)?)),
            logged: Mutex::new(HashSet::new()),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn current(&self) -> Arc<TokenSet> {
        self.set.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads the file again; on any error the tokens in use stay.
    pub(crate) fn reload(&self) -> Result<Arc<TokenSet>, String> {
        let fresh = Arc::new(read(&self.path)?);
        *self.set.write().unwrap_or_else(|e| e.into_inner()) = fresh.clone();
        Ok(fresh)
    }

    pub(crate) fn check(&self, token: &[u8]) -> Option<Caller> {
        self.current().check(token)
    }

    /// "3 token(s): 1 admin, 2 lock", of the tokens in use.
    pub(crate) fn summary(&self) -> String {
        self.current().to_string()
    }

    /// True the first time `ip` is refused for `why` (then log it).
    pub(crate) fn first_refusal(&self, ip: IpAddr, why: Refusal) -> bool {
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        if logged.len() >= LOGGED_PEERS && !logged.contains(&(ip, why)) {
            logged.clear();
        }
        logged.insert((ip, why))
    }

    /// A file others may read, for a warning at start-up: the mode, if so.
    pub(crate) fn readable_by_others(&self) -> Option<u32> {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&self.path).ok()?.permissions().mode() & 0o777;
        (mode & 0o007 != 0).then_some(mode)
    }
}

/// Re-reads the token file on each SIGHUP, logging one line either way,
/// and warns again of a token file others may read and of a TLS
/// certificate (`cert`) that expired or expires soon.
pub(crate) async fn reload_on_hangup(
    tokens: Arc<Tokens>,
    events: Events,
    mut hangup: tokio::signal::unix::Signal,
    cert: Option<std::path::PathBuf>,
) {
    while hangup.recv().await.is_some() {
        let path = tokens.path().display().to_string();
        match tokens.reload() {
            Ok(set) => {
                events.info(format_args!("SIGHUP: {path} read again: {set}"));
                // The file may have been rewritten with looser rights.
                if let Some(mode) = tokens.readable_by_others() {
                    events.warn(format_args!(
                        "SIGHUP: {path} can be read by other users (mode {mode:03o}): chmod o-rwx it"
                    ));
                }
            }
            Err(e) => events.error(format_args!(
                "SIGHUP: {e}; still using the {}",
                tokens.current()
            )),
        }
        if let Some(warning) = cert.as_deref().and_then(super::tls::expiry_warning) {
            events.warn(format_args!("SIGHUP: {warning}"));
        }
    }
}

/// What a role may do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Permit {
    Yes,
    /// Only on holds of the caller's own token ([`Owner`]).
    OwnHolds,
    /// Refused: the reason, as the client shows it.
    No(&'static str),
}

/// Whether `role` may send `request`: every action is named here, so a new
/// one must say who may use it.
pub(crate) fn allowed(role: Role, request: &Request) -> Permit {
    let admin = role == Role::Admin;
    match request {
        // Keys (the listing of holders and waiters) is the `keys` of a lock
        // token too: it shows sources and fencing tokens, never a token;
        // History (a key's ended holds) is read as Keys is.
        Request::Lock { .. }
        | Request::ExpiringLock { .. }
        | Request::Extended { .. }
        | Request::Mark { clear: false, .. }
        | Request::Ping
        | Request::Hello { .. }
        | Request::Keys { .. }
        | Request::History { .. } => Permit::Yes,
        // A reclaim names its hold by the grant's token, which `keys`
        // shows: the owner is checked too.
        Request::Release { .. } | Request::Reclaim { .. } if admin => Permit::Yes,
        Request::Release { .. } | Request::Reclaim { .. } => Permit::OwnHolds,
        // Clearing a mark lets an older version run again: an admin's.
        Request::Mark { clear: true, .. } if admin => Permit::Yes,
        Request::Mark { clear: true, .. } => {
            Permit::No("token role 'lock' may not clear a mark; an admin token can")
        }
        Request::ResetByKey { .. } | Request::ResetBySource { .. } if admin => Permit::Yes,
        Request::ResetByKey { .. } | Request::ResetBySource { .. } => {
            Permit::No("token role 'lock' may not reset; an admin token can")
        }
    }
}

/// The refusal of a release (or reclaim) of a hold that is not the caller's.
pub(crate) const NOT_YOURS: &str =
    "token role 'lock' may release only the holds of its own token; an admin token can";

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaa-admin";
    const L: &str = "llllllllllllllllllll-lock";

    #[test]
    fn a_file_of_tokens_and_roles() {
        let text = format!("# team tokens\n\n{A}   admin\n{L}\n  {L}x lock # ci\n");
        let set = TokenSet::parse(text.as_bytes()).unwrap();
        assert_eq!(set.counts(), (1, 2));
        assert_eq!(set.check(A.as_bytes()).unwrap().role, Role::Admin);
        assert_eq!(set.check(L.as_bytes()).unwrap().role, Role::Lock);
        assert_eq!(
            set.check(format!("{L}x").as_bytes()).unwrap().role,
            Role::Lock
        );
        assert_eq!(set.check(b""), None);
        assert_eq!(set.check(&A.as_bytes()[1..]), None);
        assert_eq!(set.check(format!("{A} ").as_bytes()), None);
        let a = set.check(A.as_bytes()).unwrap().owner;
        let l = set.check(L.as_bytes()).unwrap().owner;
        assert_ne!(a, l);
        assert_eq!(set.to_string(), "3 token(s): 1 admin, 2 lock");
        // Without a name, the identity is the fingerprint, stable.
        assert_eq!(a.name.len(), "token:".len() + 16);
        assert!(a.name.starts_with("token:"), "{}", a.name);
        assert_eq!(a, set.check(A.as_bytes()).unwrap().owner);
        assert!(!a.name.contains(A));
    }

    #[test]
    fn a_line_may_name_its_identity() {
        let text = format!(
            "{A} admin name=alice\n{L} name=ci-runner # the CI\n{L}x lock name=ci-runner\n"
        );
        let set = TokenSet::parse(text.as_bytes()).unwrap();
        let admin = set.check(A.as_bytes()).unwrap();
        assert_eq!((admin.role, &*admin.owner.name), (Role::Admin, "alice"));
        let ci = set.check(L.as_bytes()).unwrap();
        assert_eq!((ci.role, &*ci.owner.name), (Role::Lock, "ci-runner"));
        // Two tokens of one name (a rotation) own their holds apart.
        let other = set.check(format!("{L}x").as_bytes()).unwrap();
        assert_eq!(other.owner.name, ci.owner.name);
        assert_ne!(other.owner.fingerprint, ci.owner.fingerprint);
        assert!(valid_name(b"a.b-c_d@e"));
        assert!(!valid_name(b"token:00") && !valid_name(&[b'a'; MAX_NAME + 1]));
    }

    #[test]
    fn a_bad_line_is_named_without_its_token() {
        let secret = "s3cret-s3cret-s3cret";
        for (text, says) in [
            (
                format!("{A}\n{secret} owner\n"),
                "line 2: the word after the token is not a role",
            ),
            (
                format!("{secret} lock extra"),
                "line 1: more than a token, a role, a name=NAME",
            ),
            (
                format!("{secret} admin name=al:ice"),
                "line 1: a name (name=) must be 1 to 64",
            ),
            (format!("{secret} name="), "line 1: a name (name=) must be"),
            (
                format!("{secret} name=a name=b"),
                "line 1: more than a token",
            ),
            (
                format!("{secret} name=a admin"),
                "line 1: more than a token",
            ),
            (
                "short lock".to_string(),
                "line 1: a token of 5 bytes: 16 to 127",
            ),
            (
                format!("{secret}\n#\n{secret} admin"),
                "line 3: the same token as line 1",
            ),
            ("# nothing\n\n".to_string(), "no token in it"),
            (format!("{secret}\u{e9}"), "not printable ASCII"),
        ] {
            let e = TokenSet::parse(text.as_bytes()).err().unwrap();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("s3cret") && !e.contains("owner"), "{e}");
        }
    }

    #[test]
    fn roles_decide_what_a_request_may_do() {
        let reset = Request::ResetByKey { key: b"k".to_vec() };
        let release = Request::Release {
            key: b"k".to_vec(),
            kind: crate::proto::ReleaseKind::Release,
            ended: None,
        };
        assert_eq!(allowed(Role::Admin, &reset), Permit::Yes);
        assert!(matches!(allowed(Role::Lock, &reset), Permit::No(_)));
        assert!(matches!(
            allowed(Role::Lock, &Request::ResetBySource { source: vec![] }),
            Permit::No(_)
        ));
        assert_eq!(allowed(Role::Lock, &release), Permit::OwnHolds);
        assert_eq!(allowed(Role::Admin, &release), Permit::Yes);
        assert_eq!(allowed(Role::Lock, &Request::Ping), Permit::Yes);
    }

    #[test]
    fn each_peer_is_logged_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, format!("{A} admin\n")).unwrap();
        let t = Tokens::load(&path).unwrap();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        assert!(t.first_refusal(ip, Refusal::NoHello));
        assert!(!t.first_refusal(ip, Refusal::NoHello));
        assert!(t.first_refusal(ip, Refusal::WrongToken));
        for i in 0..LOGGED_PEERS as u32 * 2 {
            t.first_refusal(IpAddr::from(i.to_be_bytes()), Refusal::NoHello);
        }
        assert!(t.logged.lock().unwrap().len() <= LOGGED_PEERS);
        // A reload that fails keeps the tokens.
        std::fs::write(&path, "bad").unwrap();
        assert!(t.reload().is_err());
        assert!(t.check(A.as_bytes()).is_some());
        std::fs::write(&path, format!("{L}\n")).unwrap();
        t.reload().unwrap();
        assert!(t.check(A.as_bytes()).is_none());
        assert_eq!(t.check(L.as_bytes()).unwrap().role, Role::Lock);
    }
}

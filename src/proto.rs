//! The Locking-Center one-byte protocol: frames in, values out, no I/O.
//! [`request`] decodes and encodes the requests, [`answer`] builds and
//! parses the answers, [`listing`] Keys' listing; the manager port's codec
//! is [`manager`].
//!
//! One request per TCP connection, one answer byte back:
//!
//! | action | frame                                   |
//! |--------|-----------------------------------------|
//! | Lock          | `[1][keySize][key][sourceSize][source]` |
//! | Unlock        | `[2][keySize][key]`                     |
//! | ResetByKey    | `[3][keySize][key]`                     |
//! | ResetBySource | `[4][sourceSize][source]`               |
//! | TryLock       | `[5][keySize][key][sourceSize][source]` |
//! | Release       | `[6][keySize][key]` (lc-cli extension)  |
//! | Ping          | `[7][keySize][key][sourceSize][source]` (lc-cli extension) |
//! | SessionLock    | `[8][keySize][key][sourceSize][source]` (lc-cli extension) |
//! | SessionTryLock | `[9][keySize][key][sourceSize][source]` (lc-cli extension) |
//! | Reclaim        | `[10][keySize][key][8][token:u64be]`, or `[24][token:u64be][secret:16]` for a hold granted with a secret (lc-cli extension) |
//! | SessionRelease | `[11][keySize][key][8][token:u64be]` (lc-cli extension) |
//! | ModeSessionLock    | `[12][keySize][key][sourceSize][source][4][mode:u32be]` (lc-cli extension) |
//! | ModeSessionTryLock | `[13]` as 12 (lc-cli extension) |
//! | ModeLock           | `[14]` as 12 (lc-cli extension) |
//! | ModeTryLock        | `[15]` as 12 (lc-cli extension) |
//! | Hello              | `[16][len][client version][len][token]` (lc-cli extension) |
//! | Keys               | `[17][len][key or empty][len][flags]` (lc-cli extension) |
//! | ExpiringLock       | `[18]` as 12, then `[8][ttl_ms:u64be][1][wait:u8 0\|1]` (lc-cli extension) |
//! | ExtendedLock       | `[19]`, a whole frame of 8, 9, 12 to 15 or 18, then `[len:u16be][field list]` (lc-cli extension, issue 44) |
//! | Mark               | `[20][keySize][key][1][clear:u8 0\|1]` (lc-cli extension, issue 44) |
//! | History            | `[21][keySize][key][4][limit:u32be]` (lc-cli extension, issue 46: [`history`]) |
//!
//! Actions 12 to 15 lock in a mode: 0 shared, 1 exclusive, N (2 and more)
//! at most N holders (`--limit N`). 12 and 13 are session holds, answered as
//! 8 and 9 are; 14 and 15 are kept holds (until an Unlock), granted `=` with
//! their token and a timeout of 0 (a client that gives its hold back, or
//! withdraws, releases it under its token: a plain Unlock of a shared key
//! ends its oldest kept hold, maybe someone else's). All
//! four answer `#` (a try found the key taken), `!` (withdrawn: a reset by
//! source, or the grant could not be logged), or `~` and the key's mode as a
//! u32be (the key is held or waited for in a mode this request cannot
//! join). Their `-` is only ever a server that does not know them (a
//! reference server): the client then says the server cannot take shared
//! or limited locks. Actions 8 and 9 answer `~` too, for an exclusive
//! request on a `--limit N` key; actions 1 and 5, the reference's, `-`.
//!
//! Ping is an lc-cli extension: `lc-cli serve` answers `+` (and ignores the
//! key and source), a reference server `-` (an unknown action): one protocol
//! byte either way, so a client learns the peer speaks the protocol.
//! Sizes are one signed byte: a key is 1..=127 bytes, a source 0..=127.
//! Answers: `+` success, `-` failure, `#` a TryLock found the key held.
//!
//! Actions 1 to 5 are the 2021 reference server's, answered byte for byte as
//! it does; in particular Unlock answers `+` whether or not the key was held,
//! because the public clients retry Unlock until they read `+`.
//!
//! Release is lc-cli's own: the same frame as Unlock, with answers that tell
//! the cases apart: `+` released, `#` it was not held, `-` it could not be
//! released (the log could not record it; the key is still held). A
//! reference server answers `-` to an action it does not know, so a client
//! that reads `-` to a Release asks again with the classic Unlock, whose `-`
//! (from lc-cli's server: the release could not be recorded) also means "not
//! released". Against a reference server "not held" cannot be told from
//! "released".

pub(crate) mod answer;
pub(crate) mod grant;
pub(crate) mod history;
pub(crate) mod listing;
pub(crate) mod manager;
pub(crate) mod printable;
pub(crate) mod request;

pub(crate) use answer::*;
pub(crate) use printable::printable;
pub(crate) use request::{check_key, check_source, decode, encode, Decoded, FrameError};
pub(crate) use request::{Ended, Hold, Request};

pub(crate) const MAX_FIELD: usize = 127;

/// The bytes of a session hold's secret: sent with its grant to a client
/// whose Hello named the feature [`FEATURE_SECRET`], asked back with its
/// Reclaim.
pub(crate) const SECRET_LEN: usize = 16;

/// The feature word a client puts after its version in the Hello
/// (`0.1.0 secret`), and the server after its own in the answer when it
/// takes it: session grants on that connection then carry the hold's
/// secret (`=`, token, grace, `[len][secret]`).
pub(crate) const FEATURE_SECRET: &str = "secret";

/// The feature word of deploy queues (issue 44): the server takes
/// ExtendedLock (19) and Mark (20), answers a superseded or outdated
/// request `^` or `<`, tells a holder `>` when a newer `--cancel-running`
/// request asks it to stop, hands a queued waiter its ticket (`@`), and
/// takes a SessionRelease that says how the command ended.
pub(crate) const FEATURE_QUEUES: &str = "queues";

/// The feature word of a key's history (issue 46, docs/history.md): the
/// server keeps the last holds of each key (`serve --history N`, not 0)
/// and takes History (21). Not named by a server with `--history 0`.
pub(crate) const FEATURE_HISTORY: &str = "history";

/// The feature word of slots (issue 45, docs/fleet-slots.md): every `=`
/// answer on the connection ends with the hold's slot field
/// ([`grant`]): `[4][slot:u32be]` for a `--limit N` hold (0 to N-1, the
/// lowest free at its grant), `[0]` for the others; Keys' listing of
/// version 2 gives each hold's slot.
pub(crate) const FEATURE_SLOTS: &str = "slots";
/// A client's Hello feature, named back by a server that takes it: a
/// SessionRelease may ask the server to keep the hold for a while as a
/// kept hold that expires, instead of releasing it (`--hold-at-least`,
/// issue 45): its token field is then 28 bytes,
/// `[token:u64be][status:i32be][order:u64be][keep_ms:u64be]`.
pub(crate) const FEATURE_KEEP: &str = "keep";
/// A client's Hello feature, named back by a server that takes it: a
/// lock whose field list names a group (`group=ID/N`, issue 45: `--and`)
/// is granted only together with the group's other requests, all in one
/// step (docs/several-keys.md). A server that does not name it grants each
/// request alone, so the client then takes the keys one after another.
pub(crate) const FEATURE_GROUP: &str = "group";

pub(crate) const ACTION_LOCK: u8 = 1;
pub(crate) const ACTION_UNLOCK: u8 = 2;
pub(crate) const ACTION_RESET_BY_KEY: u8 = 3;
pub(crate) const ACTION_RESET_BY_SOURCE: u8 = 4;
pub(crate) const ACTION_TRY_LOCK: u8 = 5;
/// The reference server knows actions 1 to 5; every lc-cli extension is
/// numbered after them.
pub(crate) const LAST_REFERENCE_ACTION: u8 = ACTION_TRY_LOCK;
/// lc-cli's extension: Unlock that says whether the key was held.
pub(crate) const ACTION_RELEASE: u8 = 6;
pub(crate) const ACTION_PING: u8 = 7;
pub(crate) const ACTION_SESSION_LOCK: u8 = 8;
pub(crate) const ACTION_SESSION_TRY_LOCK: u8 = 9;
pub(crate) const ACTION_RECLAIM: u8 = 10;
pub(crate) const ACTION_SESSION_RELEASE: u8 = 11;
pub(crate) const ACTION_MODE_SESSION_LOCK: u8 = 12;
pub(crate) const ACTION_MODE_SESSION_TRY_LOCK: u8 = 13;
pub(crate) const ACTION_MODE_LOCK: u8 = 14;
pub(crate) const ACTION_MODE_TRY_LOCK: u8 = 15;
/// lc-cli's extension: `[16][len][client version][len][token]`, both fields
/// may be empty; lc-cli sends it first on every connection, the request
/// right behind it. Answered `+[len][server version]` by a server without
/// tokens (which ignores the token), `*[len][version][len][role]` by one
/// with `--token-file` that takes the token, `%[len][reason]` (and a
/// close) by one that does not; then the request behind it is served.
pub(crate) const ACTION_HELLO: u8 = 16;
/// lc-cli's extension: `[17][len][key][len][flags]`, who holds and waits:
/// the key's entries, or every key's when the key is empty; flags bit 0
/// asks for the waiters too. Answered by a listing ([`listing`]).
pub(crate) const ACTION_KEYS: u8 = 17;
/// lc-cli's extension: a kept hold in a mode that the server releases
/// `ttl_ms` after its grant (`lock KEY --expire`); `wait` 0 is a try.
/// Answered as 14 and 15.
pub(crate) const ACTION_EXPIRING_LOCK: u8 = 18;
/// lc-cli's extension (issue 44): a lock request with a field list
/// (docs/request-fields.md): `[19]`, the whole frame of a lock action of
/// lc-cli's (8, 9, 12 to 15, 18), then `[len:u16be][field list]`. Sent
/// only to a server whose Hello answer named [`FEATURE_QUEUES`].
pub(crate) const ACTION_EXTENDED_LOCK: u8 = 19;
/// lc-cli's extension (issue 44): `[20][keySize][key][1][clear]`, a key's
/// mark read (0) or cleared (1): `+[mark:u64be]`, or `#` none.
pub(crate) const ACTION_MARK: u8 = 20;
/// lc-cli's extension (issue 46): `[21][keySize][key][4][limit:u32be]`, the
/// last `limit` ended holds of the key, newest first ([`history`]). Sent
/// only to a server whose Hello answer named [`FEATURE_HISTORY`].
pub(crate) const ACTION_HISTORY: u8 = 21;

/// The ping as lc-cli sends it. Its key is CR LF, so a line-based server
/// (Redis, HTTP) sees a whole line and answers with text, which tells it
/// apart at once from one that stays silent.
pub(crate) const PING_FRAME: [u8; 5] = [ACTION_PING, 2, b'\r', b'\n', 0];

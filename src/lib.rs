//! lc-cli: a distributed flock(1).
//!
//! Dependencies point one way: `cmd -> backend -> {lc -> proto, zk, redis}`,
//! `cmd::serve -> server -> {proto, wal}`; `cli`, `proto`, `wal`, `mode` and
//! `exit` import nothing else of the crate but `mode`.
//!
//! - [`cli`]: the clap types, nothing else.
//! - [`cmd`]: one module per subcommand; turns the command line into config,
//!   dispatches, and turns backend errors into exit statuses.
//! - [`backend`]: the lock-backend trait, its error type and the parsing of
//!   server addresses; one folder per implementation: [`backend::lc`] (the
//!   one-byte protocol, over `proto`), [`backend::zk`], [`backend::redis`].
//! - `child`, `signals` and `terminal`: running the command while the lock
//!   is held (its process group, job control at a terminal); `status_line`:
//!   the wait; `guardian`: the process outside lc-cli's that stops the
//!   command when lc-cli is frozen or killed.
//! - `server`: the built-in lock server (`serve`): accept loop, one file per
//!   request kind, the lock table, and with [`wal`] its write-ahead log.
//! - `proto`: the codecs, no I/O: the one-byte protocol, and
//!   `proto::manager` (the reference manager protocol on the lock port + 1).
//! - [`exit`]: every exit status, in one place.
//! - [`mode`]: how a key is held (exclusive, shared, `--limit N`), for both
//!   the clients and the server.
//! - [`duration`]: how durations are written, on the command line and in
//!   server addresses.
//! - [`docs`]: completion scripts and man pages generated from [`cli`].
//!
//! Where new things go:
//! - a backend: a folder `src/backend/NAME/` implementing `Backend` and
//!   `HeldLock`, a `ServerSpec` variant and its scheme and query parameters
//!   in `src/backend/mod.rs`, its arm in `backend::connect`, a README
//!   section; no global flag;
//! - a subcommand: an `Args` struct and a `Command` variant in `cli.rs`, a
//!   file `src/cmd/NAME.rs`, one arm in `cmd::run`, its exit statuses in
//!   the man page generator (`examples/gen_docs/man.rs`); then
//!   `cargo run --example gen_docs`;
//! - a protocol action: its frame in `proto.rs` (and the README table), a
//!   file `src/server/NAME.rs` that serves it, one arm in `server/conn.rs`,
//!   and the client side in `backend/lc/`.

pub mod backend;
pub(crate) mod child;
pub mod cli;
pub mod cmd;
pub mod docs;
pub mod duration;
pub mod exit;
#[doc(hidden)]
pub mod guardian;
pub mod mode;
pub(crate) mod proto;
pub(crate) mod server;
pub(crate) mod signals;
pub(crate) mod status_line;
pub(crate) mod terminal;
pub mod wal;

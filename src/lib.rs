//! lc-cli: a distributed flock(1).
//!
//! Dependencies point one way: `cmd -> {cli, backend, child, ...}`,
//! `backend -> {lc -> proto, zk, redis, etcd, postgres}` (and `backend`
//! itself -> `proto` for the key limits, `mode`, `duration`),
//! `cmd::serve -> server -> {proto, wal}`; `proto` and `wal` import only
//! `mode`, `cli` only `duration` and `backend::help` (the `--server` help,
//! rendered from the table of backends); `exit`, `mode` and `duration`
//! nothing.
//!
//! - [`cli`]: the clap types, nothing else (`--server` stays text).
//! - [`cmd`]: one module per subcommand; turns the command line into config
//!   (the one place the server address is chosen and parsed), dispatches,
//!   and turns backend errors into exit statuses.
//! - [`backend`]: the lock-backend trait, its error type, the table of
//!   backends (`backend::BACKENDS`); `backend::scheme` (what a scheme
//!   declares, the parsed address, the one check of keys, sources and
//!   modes), `backend::config` (how a backend is reached and tuned),
//!   `backend::address` (what every scheme's parsing shares) and
//!   `backend::help` (the `--server` help, from the table).
//!   One folder per implementation, each owning its scheme in
//!   `address.rs`: [`backend::lc`] (the one-byte protocol, over `proto`),
//!   [`backend::zk`] (ZooKeeper, Curator's recipes), [`backend::redis`]
//!   (one node or a quorum), [`backend::etcd`] (etcdctl lock's layout),
//!   [`backend::postgres`] (advisory locks). The queue backends (zk, etcd)
//!   end every wait through one step, [`backend::settle`]. Imports point
//!   from `backend::NAME` to `backend`, never between two backends.
//! - `child`, `spawn`, `signals` and `terminal`: running the command while
//!   the lock is held (started posix_spawn's way, in its process group, job
//!   control at a terminal); `status_line`:
//!   the wait; `guardian`: a program of its own (lc-cli's binary exec'd
//!   again) that stops the command when lc-cli is frozen or killed.
//! - `server`: the built-in lock server (`serve`): accept loop, one match
//!   over the request in `server::conn`, one file per action family, the
//!   lock table (`server::table`: its requests, the state under its mutex,
//!   a key's line, its listing, its restore from the log), and with
//!   [`wal`] its write-ahead log (appending, start-up recovery, the writer
//!   thread and its compaction, each a file).
//! - `proto`: the codecs, no I/O: the one-byte protocol's requests
//!   (`proto::request`) and answers (`proto::answer`, and Keys' listing in
//!   `proto::listing`), and `proto::manager` (the reference manager
//!   protocol on the lock port + 1).
//! - `tls` and `tls_stream`: what the built-in server's TLS and its
//!   `lcs://` clients share, leaves both: rustls and the PEM files, and the
//!   plain-or-TLS connection to the lock port (`tls_stream::PlainOrTls`).
//! - [`exit`]: every exit status, in one place, and the process's end.
//! - [`mode`]: how a key is held (exclusive, shared, `--limit N`), for both
//!   the clients and the server.
//! - [`duration`]: how durations are written, on the command line and in
//!   server addresses.
//! - [`docs`]: completion scripts and man pages generated from [`cli`].
//!
//! Where new things go: see CONTRIBUTING.md, which lists the files a new
//! backend, subcommand or protocol action touches.

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
pub(crate) mod spawn;
pub(crate) mod status_line;
pub(crate) mod terminal;
pub(crate) mod tls;
pub(crate) mod tls_stream;
pub mod wal;

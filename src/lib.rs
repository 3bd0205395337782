//! lc-cli: a distributed flock(1).
//!
//! - [`cli`]: the clap types, nothing else.
//! - [`cmd`]: one module per subcommand; turns the command line into config
//!   and dispatches.
//! - [`backend`]: the lock-backend trait and its implementations: [`backend::lc`]
//!   (the one-byte protocol, over [`proto`]), [`backend::zk`], [`backend::redis`].
//! - [`child`], [`signals`] and [`terminal`]: running the command while the
//!   lock is held (job control at a terminal); [`status_line`]: the wait.
//! - [`server`]: the built-in lock server (`serve`), its lock table and,
//!   with [`wal`], its write-ahead log.
//! - [`proto::manager`]: the reference manager protocol (`keys`, resets) on the lock port + 1.
//! - [`exit`]: every exit status, in one place.
//! - [`duration`]: how durations are written, on the command line and in
//!   server addresses.
//! - [`docs`]: completion scripts and man pages generated from [`cli`].

pub mod backend;
pub mod child;
pub mod cli;
pub mod cmd;
pub mod docs;
pub mod duration;
pub mod exit;
pub mod proto;
pub mod server;
pub mod signals;
pub mod status_line;
pub mod terminal;
pub mod wal;

//! The runtime `lc-cli serve` runs on.
//!
//! A plain request costs the server a handful of syscalls (accept, read,
//! write, close); on a multi-thread runtime each one also cost about two
//! wake-ups of another thread (the accept loop runs on the thread that
//! blocks on the server, so every new connection's task went through the
//! shared queue to a worker woken by futex, and the I/O driver was woken by
//! eventfd): 4 futex calls and an eventfd write per request, measured with
//! `strace -c` (BENCHMARKS.md). So a plain server runs on one thread, as
//! the reference's shape of a one-thread epoll loop: every task, the
//! accept loop and the I/O driver on it, and no thread is woken to serve a
//! request. The log's writer (`--data`) keeps its own thread either way.
//!
//! A TLS handshake is CPU work (a signature per connection, a millisecond
//! or so), which one thread would serialize behind every other request:
//! with `--tls-cert` the server keeps tokio's multi-thread runtime, one
//! worker per core.

use std::io;

use tokio::runtime::{Builder, Runtime};

/// The runtime for a server with TLS on its lock port (`tls`) or without.
pub(crate) fn build(tls: bool) -> io::Result<Runtime> {
    let mut builder = match tls {
        true => Builder::new_multi_thread(),
        false => Builder::new_current_thread(),
    };
    builder.enable_all().build()
}

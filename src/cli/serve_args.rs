//! `lc-cli serve`'s options: the built-in server's listen address, data,
//! limits, TLS and tokens.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::parse_duration;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (loopback by default; port 0 picks a free one)
    #[arg(
        long,
        short = 'l',
        env = "BIND_ADDRESS",
        default_value = "127.0.0.1:22119",
        value_name = "ADDR"
    )]
    pub listen: SocketAddr,

    /// Keep held keys in a write-ahead log at PATH, so they survive a restart
    #[arg(long, env = "DATA_PATH", value_name = "PATH")]
    pub data: Option<PathBuf>,

    /// How long a client may take to send its whole request, from its
    /// connection on (its login is bounded by --login-timeout)
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub read_timeout: Duration,

    /// How long a new connection may take to log in: its TLS handshake and
    /// its first frame (with --token-file, the Hello with a token of the
    /// file), from its accept on; a connection not through by then is
    /// closed. A queued lock's wait is not bounded by it
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub login_timeout: Duration,

    /// Address of the manager port (KEYS, RSET, RSBS, KEYX) [default: the listen port + 1,
    /// on loopback when --listen is not; off with --token-file]
    #[arg(long, value_name = "ADDR")]
    pub manager: Option<SocketAddr>,

    /// Serve Prometheus metrics over HTTP at ADDR/metrics (off by default)
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,

    /// Release a session hold (`lc-cli lock KEY -- CMD`) once its holder has
    /// not been heard from for DURATION; within it, a holder whose connection
    /// broke (or whose server restarted with --data) takes it back
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub reclaim_grace: Duration,

    /// Keep the last N ended holds of each key for `lc-cli history KEY`
    /// (with --data, in the log too, through restarts and compactions);
    /// 0 keeps none
    #[arg(long, value_name = "N", default_value_t = crate::backend::history::DEFAULT_HISTORY as u32)]
    pub history: u32,

    /// Refuse new holds (one line, 76) while the log's held keys, marks and
    /// history take half of SIZE (512MiB, 2G, bytes): the other half is the
    /// room the log grows into before a compaction rewrites it, so the file
    /// stays under SIZE and the volume needs SIZE and a half (the
    /// compaction's new file beside it). Releases are always taken. Off by
    /// default
    #[arg(long, value_name = "SIZE", requires = "data", value_parser = parse_size)]
    pub max_log_bytes: Option<u64>,

    /// Connections open at once; beyond it a new one is closed at once
    /// [default: the file limit (ulimit -n) less 64]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,

    /// Connections open at once from one peer address; 0: no limit. A pool
    /// of hosts behind one NAT address (CI runners) counts as one peer, and
    /// each lc-cli holds one connection per lock held or waited for: raise
    /// it to what the pool holds and waits for at once, with room to spare
    #[arg(long, value_name = "N", default_value = "256")]
    pub max_connections_per_peer: u32,

    /// Connections still logging in at once (their TLS handshake and first
    /// frame not yet through); beyond it a new one is closed at once, so the
    /// rest of --max-connections stays for connections that logged in (with
    /// --token-file: that gave a token) [default: half of --max-connections]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_pending_logins: Option<u32>,

    /// Speak TLS on the lock port with this certificate (PEM, the chain
    /// after it); clients then use lcs://HOST:PORT?cacert=FILE. The manager
    /// and metrics ports stay plain
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Require a client certificate signed by this CA (PEM): mutual TLS;
    /// clients add cert=FILE&key=FILE to their lcs:// address
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// Require a token from every client (LC_TOKEN, LC_TOKEN_FILE or
    /// lc://:TOKEN@HOST): one per line of FILE, each optionally followed by
    /// its role, lock (the default: lock, release its own holds) or admin
    /// (also reset, and release any hold), then by name=NAME, the identity
    /// the log and keys show for it (else token:FINGERPRINT), keys=PATTERNS
    /// (the keys it may take: deploy/*,ci/*), held=N (the holds it may
    /// have at once, default 10000) and waits=N (its requests waiting in
    /// line at once, default 10000); SIGHUP reads
    /// FILE again. The manager port, which takes no token, is then off
    /// unless --manager names it
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// A size in bytes: a number, or one with K, M, G (KiB, MiB, GiB: powers
/// of 1,024); at least 1 MiB.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(digits);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("'{s}' is not a size (512MiB, 2G, bytes)")),
    };
    let bytes = n
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("'{s}' is not a size (512MiB, 2G, bytes)"))?;
    match bytes >= 1 << 20 {
        true => Ok(bytes),
        false => Err(format!("'{s}' is less than 1MiB")),
    }
}

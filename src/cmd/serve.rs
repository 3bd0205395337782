//! `lc-cli serve`: the built-in lock server.

mod hint;

use std::io::Write;
use std::net::SocketAddr;

use anyhow::{Context, Result};
use tokio::net::TcpListener;

use crate::cli::ServeArgs;
use crate::exit::{fail, ExitCode};
use crate::server::tls::TlsFiles;
use crate::server::tokens::Tokens;
use crate::server::{Listeners, OpenError, Server, ServerOptions};

/// Set (to anything) in a test, `serve` answers as the reference server.
pub(crate) const REFERENCE_MODE_ENV: &str = "LC_CLI_SERVE_AS_REFERENCE";

pub(crate) fn run(args: ServeArgs, verbose: bool) -> Result<ExitCode> {
    if args.reclaim_grace < std::time::Duration::from_millis(300) {
        return Err(fail(
            ExitCode::Usage,
            format!(
                "--reclaim-grace {:?} is too short: at least 300ms (holders send a heartbeat every quarter of it)",
                args.reclaim_grace
            ),
        ));
    }
    if args.login_timeout < std::time::Duration::from_millis(100) {
        return Err(fail(
            ExitCode::Usage,
            format!(
                "--login-timeout {:?} is too short: at least 100ms (a TLS handshake and a Hello take a few round trips)",
                args.login_timeout
            ),
        ));
    }
    // Before the log and the ports: a bad file changes nothing.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let files = TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: args.tls_client_ca.clone(),
            };
            let acceptor = crate::server::tls::acceptor(&files)
                .map_err(|e| fail(ExitCode::Usage, format!("refusing to start: {e}")))?;
            Some((acceptor, files))
        }
        _ => None,
    };
    let tokens = match &args.token_file {
        Some(path) => {
            Some(std::sync::Arc::new(Tokens::load(path).map_err(|e| {
                fail(ExitCode::Usage, format!("refusing to start: {e}"))
            })?))
        }
        None => None,
    };
    let runtime =
        crate::server::runtime::build(tls.is_some()).context("cannot start the runtime")?;
    let max_connections = args
        .max_connections
        .map(|n| n as usize)
        .unwrap_or_else(crate::server::limits::default_max_connections);
    let options = ServerOptions {
        read_timeout: args.read_timeout,
        login_timeout: args.login_timeout,
        verbose,
        data: args.data.clone(),
        reclaim_grace: args.reclaim_grace,
        // Test-only: answer lc-cli's own actions `-`, as the reference
        // server does, to exercise the clients' fallback.
        extensions: std::env::var_os(REFERENCE_MODE_ENV).is_none(),
        max_connections,
        max_connections_per_peer: args.max_connections_per_peer as usize,
        max_pending_logins: args.max_pending_logins.map_or_else(
            || crate::server::limits::default_pending_logins(max_connections),
            |n| n as usize,
        ),
        tokens: tokens.clone(),
        history: args.history as usize,
        max_log_bytes: args.max_log_bytes,
    };
    // The log is recovered before the port opens: no client sees a table
    // that is not yet restored.
    let server = Server::open(options).map_err(|e| match e {
        OpenError::Corrupt(e) => fail(
            ExitCode::DataErr,
            format!("refusing to start: {e} (move the file aside to start empty)"),
        ),
        OpenError::InUse(e) => fail(ExitCode::LogInUse, format!("refusing to start: {e}")),
        OpenError::Io(e) => fail(ExitCode::Unavailable, format!("cannot open the log: {e}")),
    })?;
    let exposed = !args.listen.ip().is_loopback();
    // The manager port takes no token: with tokens, only where asked for.
    let manager_addr = match args.manager {
        Some(addr) => Some(addr),
        None if tokens.is_some() => None,
        None => Some(
            next_port(args.listen)
                .map(|m| loopback_unless_asked(m, exposed))
                .ok_or_else(|| {
                    fail(
                        ExitCode::Usage,
                        format!(
                            "no manager port after {}: give one with --manager ADDR",
                            args.listen
                        ),
                    )
                })?,
        ),
    };
    runtime.block_on(async {
        let lock = bind(args.listen, "listen").await?;
        let addr = lock.local_addr()?;
        let manager = match manager_addr {
            Some(a) => Some(bind(a, "serve the manager port").await?),
            None => None,
        };
        let manager_addr = match &manager {
            Some(m) => Some(m.local_addr()?),
            None => None,
        };
        let metrics = match args.metrics {
            Some(a) => Some(bind(a, "serve metrics").await?),
            None => None,
        };
        // Handlers in place before anyone can know the address, so a SIGTERM
        // sent right after start-up still stops the server cleanly (and a
        // SIGHUP re-reads the tokens instead of ending it).
        let shutdown = shutdown_signal()?;
        if let Some(t) = &tokens {
            let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                .context("cannot handle SIGHUP")?;
            let events = crate::server::events::Events::new(verbose);
            tokio::spawn(crate::server::tokens::reload_on_hangup(
                t.clone(),
                events,
                hangup,
                tls.as_ref().map(|(_, files)| files.cert.clone()),
            ));
        }
        // The bound addresses on stdout, so `--listen 127.0.0.1:0` is usable;
        // one write, so a reader that stops after the first line cannot make
        // a later line fail.
        let manager_line = match manager_addr {
            Some(m) => format!("manager on {m}"),
            None => "manager off".to_string(),
        };
        let mut banner = format!("listening on {addr}\n{manager_line}\n");
        if let Some(m) = &metrics {
            banner.push_str(&format!("metrics on {}\n", m.local_addr()?));
        }
        let files = tls.as_ref().map(|(_, f)| f);
        let metrics_addr = match &metrics {
            Some(m) => Some(m.local_addr()?),
            None => None,
        };
        for line in warnings(addr, manager_addr, files, tokens.as_deref())
            .into_iter()
            .chain(metrics_addr.and_then(metrics_warning))
        {
            eprintln!("lc-cli serve: warning: {line}");
        }
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(banner.as_bytes());
        let _ = stdout.flush();
        drop(stdout);
        // The address a client elsewhere can use (not 0.0.0.0 or loopback).
        let mutual = files.is_some_and(|f| f.client_ca.is_some());
        let reach = hint::clients(
            addr,
            manager_addr,
            files.is_some(),
            mutual,
            tokens.is_some(),
        );
        let secured = match files {
            None => String::new(),
            Some(f) => format!(
                " with TLS (certificate {}{})",
                f.cert.display(),
                match &f.client_ca {
                    Some(ca) =>
                        format!(", client certificates signed by {} required", ca.display()),
                    None => String::new(),
                }
            ),
        };
        let secured = match &tokens {
            Some(t) => format!(
                "{secured}, a token required ({} from {})",
                t.summary(),
                t.path().display()
            ),
            None => secured,
        };
        eprintln!(
            "{} lc-cli serve {} listening on {addr}{secured}, {manager_line} ({reach})",
            humantime::format_rfc3339_millis(std::time::SystemTime::now()),
            env!("CARGO_PKG_VERSION")
        );
        let listeners = Listeners {
            lock,
            tls: tls.map(|(acceptor, _)| acceptor),
            manager,
            metrics,
        };
        server.serve(listeners, shutdown).await?;
        Ok(ExitCode::Success)
    })
}

/// What start-up warns of, one line each, before the banner: a lock port
/// that is not on loopback and that anyone who reaches it may use (no
/// client certificate or token required), tokens sent in clear text, a
/// token file others may read, and a manager port, which takes no token
/// and is plain TCP whatever the lock port speaks.
fn warnings(
    lock: SocketAddr,
    manager: Option<SocketAddr>,
    tls: Option<&TlsFiles>,
    tokens: Option<&Tokens>,
) -> Vec<String> {
    let mut lines = Vec::new();
    lines.extend(tls.and_then(|f| crate::server::tls::expiry_warning(&f.cert)));
    let mutual = tls.is_some_and(|f| f.client_ca.is_some());
    if let Some(t) = tokens {
        if !lock.ip().is_loopback() && tls.is_none() {
            lines.push(format!(
                "{lock} is not a loopback address and has no TLS: the tokens cross the network \
                 in clear text (add --tls-cert and --tls-key, clients lcs://)"
            ));
        }
        if let Some(mode) = t.readable_by_others() {
            lines.push(format!(
                "{} can be read by other users (mode {mode:03o}): chmod o-rwx it",
                t.path().display()
            ));
        }
        if let Some(m) = manager {
            lines.push(format!(
                "the manager port {m} takes no token: anyone who reaches it can list and reset \
                 every key (--manager opened it; without it, it stays off with --token-file)"
            ));
        }
        return lines;
    }
    let Some(manager) = manager else {
        return lines;
    };
    if !lock.ip().is_loopback() && !mutual {
        let what = match tls {
            None => "the lock protocol has no authentication",
            Some(_) => {
                "TLS encrypts the lock port but without --tls-client-ca does not say who a client is"
            }
        };
        lines.push(format!(
            "{lock} is not a loopback address, and {what}: anyone who reaches it can take and \
             release any key (see the Security section of the README)"
        ));
    }
    if tls.is_some() && !manager.ip().is_loopback() {
        lines.push(format!(
            "the manager port {manager} is plain TCP without authentication (TLS is on the lock \
             port only): anyone who reaches it can list and reset every key; keep it on loopback"
        ));
    }
    lines
}

/// The metrics port takes no token and no TLS: off loopback, anyone who
/// reaches it reads the server's counts.
fn metrics_warning(metrics: SocketAddr) -> Option<String> {
    (!metrics.ip().is_loopback()).then(|| {
        format!(
            "the metrics port {metrics} is not a loopback address: it takes no token and no TLS, \
             so anyone who reaches it reads the server's counts (it serves at most {} \
             connections at once, apart from the lock port's); keep it on loopback or firewall it",
            crate::server::metrics::MAX_CONNECTIONS
        )
    })
}

/// The manager port can reset every key: on a listen address that is not
/// loopback it stays on loopback unless `--manager` names one (the
/// reference server opens it beside the lock port).
fn loopback_unless_asked(manager: SocketAddr, exposed: bool) -> SocketAddr {
    if !exposed {
        return manager;
    }
    let ip: std::net::IpAddr = match manager.ip() {
        std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
    };
    SocketAddr::new(ip, manager.port())
}

/// The manager's default address: on the same host, the port the protocol
/// says; port 0 stays 0 (a free port of its own).
fn next_port(listen: SocketAddr) -> Option<SocketAddr> {
    let port = match listen.port() {
        0 => 0,
        p => crate::proto::manager::port_for(p)?,
    };
    Some(SocketAddr::new(listen.ip(), port))
}

async fn bind(addr: SocketAddr, what: &str) -> Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        fail(
            ExitCode::Unavailable,
            format!("cannot {what} on {addr}: {e}"),
        )
    })
}

/// Resolves on the first SIGINT or SIGTERM. The handlers are installed by
/// this call, not when the future is first polled.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[test]
    fn the_help_shows_the_servers_default_per_peer() {
        let cli = crate::cli::Cli::try_parse_from(["lc-cli", "serve"]).unwrap();
        let crate::cli::Command::Serve(args) = cli.command else {
            panic!("not serve");
        };
        assert_eq!(
            args.max_connections_per_peer as usize,
            crate::server::limits::DEFAULT_PER_PEER
        );
        assert_eq!(args.login_timeout, crate::server::DEFAULT_LOGIN_TIMEOUT);
    }
}

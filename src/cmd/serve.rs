//! `lc-cli serve`: the built-in lock server.

use anyhow::{Context, Result};
use tokio::net::TcpListener;

use crate::cli::ServeArgs;
use crate::exit::{fail, ExitCode};
use crate::server::{OpenError, Server, ServerOptions};

pub fn run(args: ServeArgs, verbose: bool) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let options = ServerOptions {
        read_timeout: args.read_timeout,
        verbose,
        data: args.data.clone(),
    };
    // The log is recovered before the port opens: no client sees a table
    // that is not yet restored.
    let server = Server::open(options).map_err(|e| match e {
        OpenError::Corrupt(e) => fail(
            ExitCode::DataErr,
            format!("refusing to start: {e} (move the file aside to start empty)"),
        ),
        OpenError::Io(e) => fail(ExitCode::Unavailable, format!("cannot open the log: {e}")),
    })?;
    runtime.block_on(async {
        let listener = TcpListener::bind(args.listen).await.map_err(|e| {
            fail(
                ExitCode::Unavailable,
                format!("cannot listen on {}: {e}", args.listen),
            )
        })?;
        let addr = listener.local_addr()?;
        // Handlers in place before anyone can know the address, so a SIGTERM
        // sent right after start-up still stops the server cleanly.
        let shutdown = shutdown_signal()?;
        // The bound address on stdout, so `--listen 127.0.0.1:0` is usable.
        println!("listening on {addr}");
        eprintln!(
            "{} lc-cli serve {} listening on {addr}",
            humantime::format_rfc3339_millis(std::time::SystemTime::now()),
            env!("CARGO_PKG_VERSION")
        );
        server.run(listener, shutdown).await?;
        Ok(ExitCode::Success)
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

//! `lc-cli ping [--json]`: what the lock service is, and whether a lock
//! could be taken now. Exit 0 when it could; else the status the lock would
//! get (69 unreachable or a wait, 76 refused), with the one `lc-cli:` line.

use anyhow::Result;

use super::OrFail;
use crate::backend::ping::PingReport;
use crate::backend::BackendConfig;
use crate::cli::PingArgs;
use crate::exit::{fail, ExitCode};

pub(crate) fn run(config: &BackendConfig, args: PingArgs) -> Result<ExitCode> {
    let json = args.json;
    let shown = config.shown();
    let pinged = super::block_on(async {
        let backend = crate::backend::connect(config).await.or_fail()?;
        let report = backend.ping().await;
        backend.close().await;
        report.or_fail()
    });
    let mut report = match pinged {
        Ok(r) => r,
        Err(e) => {
            if json {
                let error = serde_json::json!({
                    "server": shown,
                    "ready": false,
                    "error": e.to_string(),
                });
                super::print_out(format!("{error}\n"))?;
            }
            return Err(e);
        }
    };
    // What the address asked for, where the backend did not say.
    let access = &config.access;
    report.tls.get_or_insert(access.tls.is_some());
    if report.authenticated.is_none() && (access.password.is_some() || access.user.is_some()) {
        report.authenticated = Some(true);
    }
    let line = super::printable(&line(&report, &shown)).into_owned();
    if json {
        super::print_out(format!("{}\n", as_json(&report, &shown)))?;
    } else if report.ready() {
        super::print_out(format!("{line}\n"))?;
    }
    if report.ready() {
        Ok(ExitCode::Success)
    } else {
        Err(fail(ExitCode::Unavailable, line))
    }
}

/// The one line: what it is, where, the round trip, and ready or why not.
pub(crate) fn line(r: &PingReport, shown: &str) -> String {
    let what = match (&r.version, r.service.as_str()) {
        (Some(v), s) => format!("{s} {v}"),
        (None, "Locking-Center server") => {
            "a Locking-Center server that is not lc-cli serve (no version told)".to_string()
        }
        (None, s) => format!("{s} (version not told)"),
    };
    let mut parts = vec![format!(
        "round trip {:.2} ms",
        r.round_trip.as_secs_f64() * 1000.0
    )];
    parts.extend(r.answering());
    if r.tls == Some(true) {
        parts.push("TLS".into());
    }
    match (r.authenticated, &r.role) {
        (Some(true), Some(role)) => parts.push(format!("token accepted (role {role})")),
        (Some(true), None) => parts.push("credentials accepted".into()),
        (Some(false), _) => parts.push("token not checked (the server takes none)".into()),
        (None, _) => {}
    }
    let state = if r.ready() {
        "ready".to_string()
    } else {
        format!("a lock would wait: {}", r.waits.join("; "))
    };
    format!("{what} at {shown}: {}, {state}", parts.join(", "))
}

pub(crate) fn as_json(r: &PingReport, shown: &str) -> serde_json::Value {
    let nodes: Vec<_> = r
        .nodes
        .iter()
        .map(|n| {
            serde_json::json!({
                "addr": n.addr,
                "up": n.up,
                "counts": n.counts,
                "version": n.version,
                "note": n.note,
            })
        })
        .collect();
    serde_json::json!({
        "service": r.service,
        "version": r.version,
        "server": shown,
        "round_trip_ms": (r.round_trip.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0,
        "tls": r.tls.unwrap_or(false),
        "authenticated": r.authenticated,
        "role": r.role,
        "ready": r.ready(),
        "waits": r.waits,
        "nodes": nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ping::NodeReport;
    use std::time::Duration;

    fn node(up: bool) -> NodeReport {
        NodeReport {
            addr: "r:1".into(),
            up,
            counts: up,
            ..NodeReport::default()
        }
    }

    #[test]
    fn the_line_says_what_where_and_why_it_would_wait() {
        let mut r = PingReport {
            service: "Redis".into(),
            version: Some("7.0.15".into()),
            round_trip: Duration::from_micros(420),
            tls: Some(true),
            authenticated: Some(true),
            nodes: vec![node(true), node(true), node(false)],
            ..PingReport::default()
        };
        let l = line(&r, "rediss://u:***@r:1/0");
        assert_eq!(
            l,
            "Redis 7.0.15 at rediss://u:***@r:1/0: round trip 0.42 ms, 2 of 3 nodes, TLS, credentials accepted, ready"
        );
        r.waits.push("r:1 counts in 3 s".into());
        assert!(line(&r, "x").ends_with("a lock would wait: r:1 counts in 3 s"));
        let j = as_json(&r, "x");
        assert_eq!(j["ready"], false);
        assert_eq!(j["nodes"][2]["up"], false);
        assert_eq!(j["round_trip_ms"], 0.42);
        let reference = PingReport {
            service: "Locking-Center server".into(),
            ..PingReport::default()
        };
        assert!(line(&reference, "h:1").contains("not lc-cli serve"));
        let ours = PingReport {
            service: "lc-cli serve".into(),
            version: Some("0.1.0".into()),
            authenticated: Some(true),
            role: Some("lock".into()),
            ..PingReport::default()
        };
        assert!(line(&ours, "lc://:***@h:1").contains("token accepted (role lock), ready"));
        assert_eq!(as_json(&ours, "x")["role"], "lock");
    }
}

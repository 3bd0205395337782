//! The `clients:` hint of `serve`'s start-up line: the `--server` value a
//! client elsewhere can use. A wildcard listen address (0.0.0.0, ::) is
//! named by the machine's own address, never 127.0.0.1. lc-cli clients need
//! only the lock port (`keys` and the holder's name go over it, as Keys), so
//! the hint names no manager; a manager port kept on loopback is said to
//! serve the reference tools from this host only. With `--token-file` it
//! says where a client puts its token, never which one.

use std::net::{IpAddr, SocketAddr, UdpSocket};

/// `--server '...'` for `lock` (the bound lock port); `manager` (None:
/// off) is only mentioned when a remote host cannot reach it. `tls` makes
/// it the `lcs://` form, with the CA a client needs to trust it, `mutual`
/// (`--tls-client-ca`) with the client certificate it must show, and
/// `token` (`--token-file`) says where the token goes.
pub(super) fn clients(
    lock: SocketAddr,
    manager: Option<SocketAddr>,
    tls: bool,
    mutual: bool,
    token: bool,
) -> String {
    let host = reachable_ip(lock.ip());
    let shown = SocketAddr::new(host, lock.port());
    let mut params = Vec::new();
    if tls {
        params.push("cacert=CA-FILE".to_string());
    }
    if tls && mutual {
        params.push("cert=CERT-FILE&key=KEY-FILE".to_string());
    }
    let mut text = match tls {
        false => format!("clients: --server '{shown}'"),
        true => format!("clients: --server 'lcs://{shown}?{}'", params.join("&")),
    };
    if let Some(manager) = manager.filter(|m| m.ip().is_loopback() && !lock.ip().is_loopback()) {
        text.push_str(&format!(
            "; the reference manager tools from this host only (manager on {manager})"
        ));
    }
    if token {
        text.push_str("; each with a token of the token file in LC_TOKEN (or LC_TOKEN_FILE)");
    }
    text
}

/// The address a client elsewhere reaches `ip` by: itself, unless it is a
/// wildcard, then the address this machine sends from (no packet is sent:
/// a UDP "connect" only picks the route), else loopback.
fn reachable_ip(ip: IpAddr) -> IpAddr {
    if !ip.is_unspecified() {
        return ip;
    }
    let (bind, probe): (&str, &str) = match ip {
        IpAddr::V4(_) => ("0.0.0.0:0", "192.0.2.1:9"),
        IpAddr::V6(_) => ("[::]:0", "[2001:db8::1]:9"),
    };
    UdpSocket::bind(bind)
        .and_then(|s| s.connect(probe).map(|_| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip())
        .ok()
        .filter(|a| !a.is_unspecified())
        .unwrap_or(match ip {
            IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_lock_port_is_all_a_client_needs() {
        assert_eq!(
            clients(
                a("127.0.0.1:22119"),
                Some(a("127.0.0.1:22120")),
                false,
                false,
                false
            ),
            "clients: --server '127.0.0.1:22119'"
        );
        // A manager elsewhere is for the reference tools: lc-cli needs no `manager=`.
        assert_eq!(
            clients(
                a("127.0.0.1:5000"),
                Some(a("127.0.0.1:6000")),
                false,
                false,
                false
            ),
            "clients: --server '127.0.0.1:5000'"
        );
        assert_eq!(
            clients(
                a("192.0.2.2:22219"),
                Some(a("0.0.0.0:7000")),
                false,
                false,
                false
            ),
            "clients: --server '192.0.2.2:22219'"
        );
    }

    #[test]
    fn an_exposed_server_never_names_loopback_to_remote_clients() {
        let hint = clients(
            a("192.0.2.2:22219"),
            Some(a("127.0.0.1:22220")),
            false,
            false,
            false,
        );
        assert_eq!(
            hint,
            "clients: --server '192.0.2.2:22219'; the reference manager tools from this host only (manager on 127.0.0.1:22220)"
        );
        assert!(!hint.contains("manager=127.0.0.1"), "{hint}");
        let hint = clients(
            a("0.0.0.0:22219"),
            Some(a("127.0.0.1:22220")),
            true,
            false,
            false,
        );
        assert!(!hint.contains("0.0.0.0:22219"), "{hint}");
        assert!(hint.starts_with("clients: --server 'lcs://"), "{hint}");
        assert!(hint.contains(":22219?cacert=CA-FILE'"), "{hint}");
        let hint = clients(
            a("192.0.2.2:22219"),
            Some(a("127.0.0.1:22220")),
            true,
            true,
            false,
        );
        assert!(
            hint.starts_with(
                "clients: --server 'lcs://192.0.2.2:22219?cacert=CA-FILE&cert=CERT-FILE&key=KEY-FILE'"
            ),
            "{hint}"
        );
    }

    #[test]
    fn a_token_server_says_where_the_token_goes() {
        let hint = clients(a("192.0.2.2:22219"), None, true, false, true);
        assert_eq!(
            hint,
            "clients: --server 'lcs://192.0.2.2:22219?cacert=CA-FILE'; each with a token of the \
             token file in LC_TOKEN (or LC_TOKEN_FILE)"
        );
        let hint = clients(
            a("127.0.0.1:22119"),
            Some(a("127.0.0.1:22120")),
            false,
            false,
            true,
        );
        assert!(
            hint.starts_with("clients: --server '127.0.0.1:22119'; each with"),
            "{hint}"
        );
    }
}

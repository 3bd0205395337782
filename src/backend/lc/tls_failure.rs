//! A TLS failure of an `lcs://` connection as one line saying which side
//! is wrong: a plain server, an untrusted certificate, a client
//! certificate missing or refused, or the server's refusal of a connection
//! over one of its connection limits (its alert before the handshake).

use std::io;

use rustls::AlertDescription;

/// The line for a failed handshake.
pub(super) fn handshake_failure(e: &io::Error, trusted_by: &str, plain: &str) -> String {
    use rustls::{CertificateError, Error};
    match rustls_error(e) {
        Some(
            err @ Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ),
        ) => format!("its certificate is not for this address: {err}"),
        Some(err @ Error::InvalidCertificate(_)) => {
            format!("its certificate is not trusted by {trusted_by}: {err}")
        }
        Some(Error::AlertReceived(alert)) => refused(*alert),
        Some(
            err @ (Error::InvalidMessage(_)
            | Error::InappropriateHandshakeMessage { .. }
            | Error::InappropriateMessage { .. }),
        ) => {
            format!("it did not answer the TLS handshake: {plain} ({err})")
        }
        Some(err) => format!("TLS handshake failed: {err}"),
        None => match e.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe => {
                format!("it closed the connection during the TLS handshake: {plain}")
            }
            _ => format!("TLS handshake failed: {e}"),
        },
    }
}

fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

/// What a TLS client learns of the limit it was refused at (the alert
/// cannot say which).
pub(super) const TLS_AT_LIMIT: &str = "it sent the TLS alert internal_error before the handshake, \
     its refusal of a connection over --max-connections, --max-connections-per-peer or \
     --max-pending-logins";

/// The handshake ended with the alert `lc-cli serve` sends on a connection
/// over one of its limits (`crate::tls::AT_LIMIT_ALERT`).
pub(super) fn is_at_limit_alert(e: &io::Error) -> bool {
    matches!(
        rustls_error(e),
        Some(rustls::Error::AlertReceived(alert)) if *alert == crate::tls::AT_LIMIT_ALERT
    )
}

/// The server's alert: under TLS 1.3 a client certificate is judged after
/// our side of the handshake is done, so this comes on the first read.
fn refused(alert: AlertDescription) -> String {
    match alert {
        AlertDescription::CertificateRequired | AlertDescription::HandshakeFailure => format!(
            "it refused the TLS connection ({alert:?}): it wants a client certificate signed by its CA (cert=FILE&key=FILE)"
        ),
        AlertDescription::BadCertificate
        | AlertDescription::UnknownCA
        | AlertDescription::CertificateUnknown
        | AlertDescription::CertificateExpired
        | AlertDescription::CertificateRevoked
        | AlertDescription::UnsupportedCertificate
        | AlertDescription::AccessDenied
        | AlertDescription::DecryptError => format!(
            "it did not accept our client certificate ({alert:?}): it wants one signed by its CA (--tls-client-ca)"
        ),
        other => format!("it ended the TLS connection ({other:?})"),
    }
}

/// A read or write error of a TLS connection, as one clear reason.
pub(super) fn after_handshake(e: io::Error) -> io::Error {
    match rustls_error(&e) {
        Some(rustls::Error::AlertReceived(alert)) => io::Error::other(Refusal(refused(*alert))),
        _ => e,
    }
}

/// The server ended a TLS connection with an alert (see [`refused`]).
#[derive(Debug)]
struct Refusal(String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// The reason, if `e` is the server refusing our TLS connection (which a
/// reader must not take for a plain hang-up).
pub(crate) fn refusal(e: &io::Error) -> Option<String> {
    e.get_ref()?.downcast_ref::<Refusal>().map(|r| r.0.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerts_say_which_side_to_fix() {
        assert!(refused(AlertDescription::CertificateRequired).contains("cert=FILE&key=FILE"));
        assert!(
            refused(AlertDescription::UnknownCA).contains("did not accept our client certificate")
        );
    }
}

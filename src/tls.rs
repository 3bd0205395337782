//! What the built-in server's TLS (`serve --tls-cert`) and its `lcs://`
//! clients share: rustls with ring as its one crypto provider (as `rediss://`
//! and PostgreSQL use it), and the PEM files read with one clear error each.
//! A leaf: it knows no other module of the crate.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

/// The crypto provider of every TLS connection lc-cli makes or serves.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))
}

/// The certificates of a PEM file; none is an error (a key file given for a
/// certificate, an empty file).
pub(crate) fn certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the {what} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "the {what} {} holds no PEM certificate",
            path.display()
        ));
    }
    Ok(certs)
}

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub(crate) fn key(path: &Path, what: &str) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read(path, what)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        format!(
            "the {what} {} holds no PEM private key: {e}",
            path.display()
        )
    })
}

/// The certificates of a CA file as a root store.
pub(crate) fn roots(path: &Path, what: &str) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for cert in certs(path, what)? {
        store
            .add(cert)
            .map_err(|e| format!("the {what} {}: {e}", path.display()))?;
    }
    Ok(store)
}

/// The alert `lc-cli serve` sends, in the clear and before the handshake,
/// on a TLS connection over one of its connection limits (the plain
/// protocol's `&` answer cannot pass through a TLS client): fatal,
/// internal_error ("unrelated to the peer or the correctness of the
/// protocol", RFC 8446), which a rustls server sends for nothing a client
/// meets. An `lcs://` client that gets it before the handshake says the
/// server is at its connection limit.
pub(crate) const AT_LIMIT_ALERT: rustls::AlertDescription = rustls::AlertDescription::InternalError;

/// [`AT_LIMIT_ALERT`] as a TLS record: content type alert (21), version
/// TLS 1.2 (the record layer's for every version), length 2, level fatal
/// (2), the description.
pub(crate) const AT_LIMIT_RECORD: [u8; 7] = [21, 3, 3, 0, 2, 2, 80];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_are_one_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.pem");
        let e = certs(&missing, "certificate").unwrap_err();
        assert!(e.starts_with("cannot read the certificate "), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not pem\n").unwrap();
        let e = certs(&empty, "certificate").unwrap_err();
        assert!(e.contains("holds no PEM certificate"), "{e}");
        let e = key(&empty, "key").unwrap_err();
        assert!(e.contains("holds no PEM private key"), "{e}");
    }

    #[test]
    fn the_at_limit_record_carries_the_alert() {
        assert_eq!(AT_LIMIT_RECORD[6], u8::from(AT_LIMIT_ALERT));
    }
}

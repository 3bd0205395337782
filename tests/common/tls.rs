//! A throw-away certificate authority made with `openssl` for the TLS
//! tests: a CA, a server certificate for 127.0.0.1 (an IP SAN, as rustls
//! checks it) and a client certificate, all in a temp dir.

use std::path::PathBuf;
use std::process::Command;

pub(crate) struct TestCa {
    pub dir: tempfile::TempDir,
}

fn openssl(args: &[&str], dir: &std::path::Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl must be installed (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TestCa {
    pub(crate) fn new() -> TestCa {
        TestCa::for_ips(&["127.0.0.1"])
    }

    /// A CA whose server certificate names these IP addresses.
    pub(crate) fn for_ips(ips: &[&str]) -> TestCa {
        let sans: Vec<String> = ips.iter().map(|ip| format!("IP:{ip}")).collect();
        let server_ext = format!(
            "subjectAltName={}\nextendedKeyUsage=serverAuth\n",
            sans.join(",")
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=lc-cli test CA",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
            ],
            d,
        );
        for (name, ext) in [
            ("server", server_ext.as_str()),
            ("client", "extendedKeyUsage=clientAuth\n"),
        ] {
            std::fs::write(d.join(format!("{name}.ext")), ext).unwrap();
            openssl(
                &[
                    "req",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-subj",
                    &format!("/CN={name}"),
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                ],
                d,
            );
            openssl(
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-out",
                    &format!("{name}.pem"),
                    "-extfile",
                    &format!("{name}.ext"),
                ],
                d,
            );
        }
        TestCa { dir }
    }

    pub(crate) fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    pub(crate) fn file(&self, file: &str) -> String {
        self.path(file).display().to_string()
    }
}

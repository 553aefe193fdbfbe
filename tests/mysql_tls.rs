//! TLS to real MariaDB servers started with certificates made here: the mysql client's
//! `ssl-mode`s verify what they promise, never fall back to plain text when asked not to,
//! and the sessions really are encrypted.

use crate::common;

use std::path::{Path, PathBuf};

use common::tls::{
    CERT_USER, Pki, assert_not_ready_because, config_for, connect_error, serve_biz, serve_ids,
};
use common::*;
use segmint::config::Config;

/// A MariaDB server serving TLS with a certificate of a [`Pki`], trusting its CA for
/// client certificates. The certificate and key are copies at fixed paths, so that
/// [`TlsMaria::serve`] can change them for the running server (`FLUSH SSL`).
struct TlsMaria {
    server: MariaServer,
    /// Holds `server.crt`, `server.key` and `ca.crt`, the server's files.
    _files: tempfile::TempDir,
    files: PathBuf,
}

impl TlsMaria {
    /// A server with `pki`'s `NAME.crt` and `NAME.key`, and an account `tls@127.0.0.1`
    /// with every privilege that only TLS sessions may use (`REQUIRE SSL`).
    fn start(pki: &Pki, name: &str) -> TlsMaria {
        let dir = tempfile::tempdir().unwrap();
        let files = dir.path().to_path_buf();
        std::fs::copy(pki.path("ca.crt"), files.join("ca.crt")).unwrap();
        copy_certificate(pki, name, &files);
        let option = |key: &str, file: &str| format!("--{key}={}", files.join(file).display());
        let options = [
            option("ssl-cert", "server.crt"),
            option("ssl-key", "server.key"),
            option("ssl-ca", "ca.crt"),
        ];
        let server =
            MariaServer::start_with(&options.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(
            server.sql("SELECT @@have_ssl"),
            "YES",
            "the server serves TLS"
        );
        server.sql(
            "CREATE USER 'tls'@'127.0.0.1' REQUIRE SSL;
             GRANT ALL PRIVILEGES ON *.* TO 'tls'@'127.0.0.1'",
        );
        TlsMaria {
            server,
            _files: dir,
            files,
        }
    }

    /// Serves `pki`'s `NAME.crt` and `NAME.key` from now on.
    fn serve(&self, pki: &Pki, name: &str) {
        copy_certificate(pki, name, &self.files);
        self.server.sql("FLUSH SSL");
    }

    /// `mysql://tls@HOST:PORT/segmint?PARAMS`.
    fn url(&self, host: &str, params: &str) -> String {
        format!("mysql://tls@{host}:{}/segmint?{params}", self.server.port)
    }
}

fn copy_certificate(pki: &Pki, name: &str, to: &Path) {
    std::fs::copy(pki.path(&format!("{name}.crt")), to.join("server.crt")).unwrap();
    std::fs::copy(pki.path(&format!("{name}.key")), to.join("server.key")).unwrap();
}

fn ssl(mode: &str, ca: &Path) -> String {
    format!("ssl-mode={mode}&ssl-ca={}", ca.display())
}

/// Whether the server refuses `tls@127.0.0.1` in plain text: then a session of it that
/// works was encrypted, as the server saw it.
async fn assert_plain_text_refused(maria: &TlsMaria) {
    let error = connect_error(&maria.url("127.0.0.1", "ssl-mode=DISABLED")).await;
    assert!(
        error.contains("Access denied for user 'tls'@'127.0.0.1'"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_identity_with_the_right_ca_serves_ids_over_tls() {
    let pki = Pki::new();
    let maria = TlsMaria::start(&pki, "server");
    let url = maria.url("localhost", &ssl("VERIFY_IDENTITY", &pki.path("ca.crt")));
    let (ids, app) = serve_ids(&url).await;
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    let (status, body) = app.get("/readyz").await;
    assert_eq!(status, 200, "{body}");
    // Every session was one of `tls`, which the server takes only over TLS.
    assert_plain_text_refused(&maria).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_ca_is_refused_clearly_everywhere() {
    let pki = Pki::new();
    let maria = TlsMaria::start(&pki, "server");
    let other = pki.path("other-ca.crt");
    // With a CA, REQUIRED checks the chain too, as the mysql client does.
    for mode in ["VERIFY_IDENTITY", "VERIFY_CA", "REQUIRED"] {
        let error = connect_error(&maria.url("localhost", &ssl(mode, &other))).await;
        assert!(
            error.contains("invalid peer certificate") && error.contains("UnknownIssuer"),
            "{mode}: {error}"
        );
    }

    let app = spawn_app(config_for(
        &maria.url("localhost", &ssl("VERIFY_CA", &other)),
    ))
    .await;
    assert_not_ready_because(&app, "UnknownIssuer").await;
}

/// The server's certificate names `localhost` only: connecting to 127.0.0.1 by that
/// address is refused by VERIFY_IDENTITY, which checks the name, and accepted by
/// VERIFY_CA (and REQUIRED with a CA), which check the chain only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_fails_verify_identity_but_passes_verify_ca() {
    let pki = Pki::new();
    let maria = TlsMaria::start(&pki, "server");
    let ca = pki.path("ca.crt");
    let error = connect_error(&maria.url("127.0.0.1", &ssl("VERIFY_IDENTITY", &ca))).await;
    assert!(
        error.contains("certificate not valid for name \"127.0.0.1\""),
        "{error}"
    );
    let (ids, app) = serve_ids(&maria.url("127.0.0.1", &ssl("VERIFY_CA", &ca))).await;
    assert_eq!(ids.len(), 5);
    app.stop().await;
    let (ids, _app) = serve_biz(&maria.url("127.0.0.1", &ssl("REQUIRED", &ca)), "required").await;
    assert_eq!(ids.len(), 5);
    assert_plain_text_refused(&maria).await;
}

/// REQUIRED without a CA encrypts and checks no certificate: one of a CA nobody trusts,
/// for another name, is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_encrypts_without_checking_the_certificate() {
    let pki = Pki::new();
    pki.leaf_of(
        "stranger",
        "db.example.com",
        "other-ca",
        "subjectAltName=DNS:db.example.com\n",
    );
    let maria = TlsMaria::start(&pki, "stranger");
    let (ids, _app) = serve_ids(&maria.url("127.0.0.1", "ssl-mode=REQUIRED")).await;
    assert_eq!(ids.len(), 5);
    assert_plain_text_refused(&maria).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_and_verify_refuse_a_server_without_tls() {
    let pki = Pki::new();
    let plain = MariaServer::start();
    assert_eq!(plain.sql("SELECT @@have_ssl"), "DISABLED");
    for params in [
        "ssl-mode=REQUIRED".to_string(),
        ssl("VERIFY_CA", &pki.path("ca.crt")),
        ssl("VERIFY_IDENTITY", &pki.path("ca.crt")),
    ] {
        let url = format!("{}?{params}", plain.url());
        let error = connect_error(&url).await;
        assert!(
            error.contains("server does not have this capability"),
            "{params}: {error}"
        );
    }
}

/// Without `ssl-mode` the connection is plain text, with or without TLS on the server
/// (the mysql client's PREFERRED would encrypt with the second); PREFERRED itself is
/// refused, with what to write instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_is_plain_text_and_preferred_is_refused() {
    let plain = MariaServer::start();
    let (ids, _app) = serve_ids(&plain.url()).await;
    assert_eq!(ids, [1, 2, 3, 4, 5]);

    let pki = Pki::new();
    let maria = TlsMaria::start(&pki, "server");
    let (ids, _app) = serve_ids(&maria.server.url()).await;
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    let error = connect_error(&maria.url("127.0.0.1", "")).await;
    assert!(
        error.contains("Access denied for user 'tls'"),
        "plain text: {error}"
    );

    for url in [
        format!("{}?ssl-mode=PREFERRED", plain.url()),
        format!("{}?ssl-mode=preferred", maria.server.url()),
    ] {
        let error = Config::from_toml(&config_toml_urls(std::slice::from_ref(&url), ""))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("databases[0].url")
                && error.contains("cannot fall back")
                && error.contains("ssl-mode=REQUIRED"),
            "{url}: {error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_authenticates() {
    let pki = Pki::new();
    let maria = TlsMaria::start(&pki, "server");
    maria.server.sql(&format!(
        "CREATE USER '{CERT_USER}'@'127.0.0.1'
             REQUIRE SUBJECT '/CN={CERT_USER}' AND ISSUER '/CN=segmint test ca';
         GRANT ALL PRIVILEGES ON *.* TO '{CERT_USER}'@'127.0.0.1'"
    ));
    let url = format!(
        "mysql://{CERT_USER}@localhost:{}/segmint?{}",
        maria.server.port,
        ssl("VERIFY_IDENTITY", &pki.path("ca.crt"))
    );
    let error = connect_error(&url).await;
    assert!(
        error.contains(&format!("Access denied for user '{CERT_USER}'")),
        "no client certificate: {error}"
    );
    let with_cert = format!(
        "{url}&ssl-cert={}&ssl-key={}",
        pki.path("client.crt").display(),
        pki.path("client.key").display()
    );
    let (ids, _app) = serve_ids(&with_cert).await;
    assert_eq!(ids.len(), 5);
    // A certificate of another subject is refused.
    pki.leaf("intruder", "intruder", "extendedKeyUsage=clientAuth\n");
    let error = connect_error(&format!(
        "{url}&ssl-cert={}&ssl-key={}",
        pki.path("intruder.crt").display(),
        pki.path("intruder.key").display()
    ))
    .await;
    assert!(error.contains("Access denied"), "another subject: {error}");
}

/// PostgreSQL's documented certificate recipe: OpenSSL 3.0 makes the server's
/// certificate X.509 version 1, naming the host in its CN only, which the mysql client
/// (OpenSSL) accepts under VERIFY_IDENTITY. segmint's MySQL driver (mysql_async with
/// webpki) reads version 3 certificates only: it refuses this one in every mode, even
/// REQUIRED without a CA (it still checks the handshake's signature with the
/// certificate's key), and says why. So does a version 3 certificate naming the host
/// in its CN only under VERIFY_IDENTITY (VERIFY_CA takes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_webpki_cannot_read_is_refused_with_a_clear_error() {
    let pki = Pki::new();
    pki.postgres_docs_recipe();
    assert_eq!(
        pki.version("docs-leaf"),
        1,
        "the recipe makes a version 1 certificate"
    );
    let maria = TlsMaria::start(&pki, "docs-server");
    let root = pki.path("root.crt");
    for params in [
        ssl("VERIFY_IDENTITY", &root),
        ssl("VERIFY_CA", &root),
        "ssl-mode=REQUIRED".to_string(),
    ] {
        let error = connect_error(&maria.url("localhost", &params)).await;
        assert!(
            error.contains("UnsupportedCertVersion"),
            "{params}: {error}"
        );
    }

    pki.leaf("cn-only", "localhost", "");
    maria.serve(&pki, "cn-only");
    let ca = pki.path("ca.crt");
    let error = connect_error(&maria.url("localhost", &ssl("VERIFY_IDENTITY", &ca))).await;
    assert!(
        error.contains("certificate not valid for name \"localhost\""),
        "{error}"
    );
    let (ids, _app) = serve_ids(&maria.url("localhost", &ssl("VERIFY_CA", &ca))).await;
    assert_eq!(ids.len(), 5);
}

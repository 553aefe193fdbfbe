//! TLS to real PostgreSQL servers started with `ssl = on` and certificates made here:
//! libpq's sslmodes verify what they promise, never fall back to plain text when asked
//! not to, and the sessions really are encrypted; no command or log line shows a
//! database password.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::cli::segmint_cli;
use common::http::{bearer, request, send};
use common::tls::*;
use common::*;
use reqwest::Method;

/// `localhost` for the certificate's name, 127.0.0.1 for the connection (`hostaddr`),
/// so the name check does not depend on how `localhost` resolves.
fn localhost_url(cluster: &PgCluster, params: &str) -> String {
    format!(
        "postgres://postgres@localhost:{}/segmint?hostaddr=127.0.0.1&{params}",
        cluster.port
    )
}

fn ssl(mode: &str, root: &Path) -> String {
    format!("sslmode={mode}&sslrootcert={}", root.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_with_the_right_ca_serves_ids_over_tls() {
    let pki = Pki::new();
    let cluster = tls_cluster(&pki, &[]);
    let (ids, _app) = serve_ids(&localhost_url(
        &cluster,
        &ssl("verify-full", &pki.path("ca.crt")),
    ))
    .await;
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    assert_sessions_encrypted(&cluster, true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_with_another_ca_fails_clearly_everywhere() {
    let pki = Pki::new();
    let cluster = tls_cluster(&pki, &[]);
    let url = localhost_url(&cluster, &ssl("verify-full", &pki.path("other-ca.crt")));
    let error = connect_error(&url).await;
    assert!(
        error.contains("invalid peer certificate") && error.contains("UnknownIssuer"),
        "{error}"
    );

    let app = spawn_app(config_for(&url)).await;
    assert_not_ready_because(&app, "UnknownIssuer").await;
}

/// The server's certificate names `localhost` only: connecting to 127.0.0.1 by that
/// address is refused by verify-full, which checks the name, and accepted by verify-ca,
/// which checks the chain only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_fails_verify_full_but_passes_verify_ca() {
    let pki = Pki::new();
    let cluster = tls_cluster(&pki, &[]);
    let ca = pki.path("ca.crt");
    let by_address = |params: String| format!("{}?{params}", cluster.url());
    let error = connect_error(&by_address(ssl("verify-full", &ca))).await;
    assert!(
        error.contains("certificate not valid for name \"127.0.0.1\""),
        "{error}"
    );
    let (ids, _app) = serve_ids(&by_address(ssl("verify-ca", &ca))).await;
    assert_eq!(ids.len(), 5);
    // libpq's rule: `require` with a root certificate verifies the chain like verify-ca.
    let error = connect_error(&by_address(ssl("require", &pki.path("other-ca.crt")))).await;
    assert!(error.contains("UnknownIssuer"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_and_verify_refuse_a_server_without_tls() {
    let pki = Pki::new();
    let plain = PgCluster::start();
    for params in [
        "sslmode=require".to_string(),
        ssl("verify-full", &pki.path("ca.crt")),
    ] {
        let error = connect_error(&localhost_url(&plain, &params)).await;
        assert!(
            error.contains("server does not support TLS"),
            "{params}: {error}"
        );
    }
}

/// The quick start: a server without TLS still works with libpq's default (`prefer`),
/// and a server with TLS is then used encrypted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_and_no_sslmode_work_without_tls_and_encrypt_with_it() {
    let plain = PgCluster::start();
    for url in [plain.url(), format!("{}?sslmode=prefer", plain.url())] {
        let (ids, app) = serve_ids(&url).await;
        assert_eq!(ids.len(), 5, "{url}");
        assert_sessions_encrypted(&plain, false);
        app.stop().await;
        plain.psql("DROP TABLE tiny_id_info, tiny_id_token, segmint_witness, segmint_migrations");
    }
    let pki = Pki::new();
    let with_tls = tls_cluster(&pki, &[]);
    let (ids, _app) = serve_ids(&with_tls.url()).await;
    assert_eq!(ids.len(), 5);
    assert_sessions_encrypted(&with_tls, true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_value_form_reads_quotes_and_verifies() {
    let pki = Pki::new();
    let cluster = tls_cluster(&pki, &[]);
    // A directory with a space and a quote in its name, quoted and escaped as libpq reads it.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("it's my ca.crt");
    std::fs::copy(pki.path("ca.crt"), &root).unwrap();
    let quoted = root.display().to_string().replace('\'', "\\\\'");
    let conninfo = format!(
        "host=localhost hostaddr=127.0.0.1 port={} user=postgres dbname=segmint sslmode = verify-full sslrootcert='{quoted}'",
        cluster.port
    );
    let (ids, _app) = serve_ids(&conninfo).await;
    assert_eq!(ids.len(), 5);
    assert_sessions_encrypted(&cluster, true);
    let wrong = conninfo.replace("host=localhost", "host=127.0.0.1");
    assert!(connect_error(&wrong).await.contains("not valid for name"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_authenticates() {
    let pki = Pki::new();
    let cluster = tls_cluster(
        &pki,
        &[&format!("hostssl all {CERT_USER} 127.0.0.1/32 cert")],
    );
    cluster.psql(&format!("CREATE ROLE {CERT_USER} LOGIN SUPERUSER"));
    let url = format!(
        "postgres://{CERT_USER}@localhost:{}/segmint?hostaddr=127.0.0.1&{}",
        cluster.port,
        ssl("verify-full", &pki.path("ca.crt"))
    );
    let error = connect_error(&url).await;
    assert!(
        error.contains("certificate"),
        "no client certificate: {error}"
    );
    let with_cert = format!(
        "{url}&sslcert={}&sslkey={}",
        pki.path("client.crt").display(),
        pki.path("client.key").display()
    );
    let (ids, _app) = serve_ids(&with_cert).await;
    assert_eq!(ids.len(), 5);
    let users = cluster
        .psql("SELECT DISTINCT usename FROM pg_stat_activity WHERE application_name = 'segmint'");
    assert_eq!(users, CERT_USER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslcrl_refuses_a_revoked_server_certificate() {
    let pki = Pki::new();
    pki.revocation_lists();
    let cluster = tls_cluster(&pki, &[]);
    let with_crl = |crl: &str| {
        let params = format!(
            "{}&sslcrl={}",
            ssl("verify-full", &pki.path("ca.crt")),
            pki.path(crl).display()
        );
        localhost_url(&cluster, &params)
    };
    let (ids, _app) = serve_ids(&with_crl("none.crl")).await;
    assert_eq!(ids.len(), 5);
    let error = connect_error(&with_crl("server-revoked.crl")).await;
    assert!(error.contains("Revoked"), "{error}");
}

/// PostgreSQL's documented certificate recipe, run as its docs give it: OpenSSL 3.0
/// makes the server's certificate X.509 version 1, signed by an intermediate the server
/// sends, naming the host in its CN only. libpq's verify-full accepts it; so does
/// segmint, with the same checks of the chain and the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificates_of_postgresqls_documented_recipe_pass_verify_full() {
    let pki = Pki::new();
    pki.postgres_docs_recipe();
    assert_eq!(
        pki.version("docs-leaf"),
        1,
        "the recipe makes a version 1 certificate"
    );
    let cluster = tls_cluster_serving(&pki, "docs-server", &[]);
    let root = pki.path("root.crt");
    let (ids, app) = serve_ids(&localhost_url(&cluster, &ssl("verify-full", &root))).await;
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    assert_sessions_encrypted(&cluster, true);
    app.stop().await;

    // The name is checked: the CN names localhost, not 127.0.0.1.
    let by_address = |params: String| format!("{}?{params}", cluster.url());
    let error = connect_error(&by_address(ssl("verify-full", &root))).await;
    assert!(
        error.contains("certificate not valid for name \"127.0.0.1\""),
        "{error}"
    );
    assert_connects(&by_address(ssl("verify-ca", &root))).await;
    // The chain is checked: another root, or the intermediate missing from the server's
    // chain, is refused.
    for mode in ["verify-ca", "verify-full"] {
        let error = connect_error(&localhost_url(&cluster, &ssl(mode, &pki.path("ca.crt")))).await;
        assert!(error.contains("UnknownIssuer"), "{mode}: {error}");
    }
    serve_certificate(&cluster, &pki, "docs-leaf");
    let error = connect_error(&localhost_url(&cluster, &ssl("verify-ca", &root))).await;
    assert!(error.contains("UnknownIssuer"), "{error}");
}

/// What else libpq accepts beyond webpki, and what it still refuses, on one cluster
/// restarted with each certificate: a self-signed certificate trusted as its own root; a
/// version 3 certificate naming the host in its CN only; a version 1 certificate over
/// TLS 1.2, revoked by `sslcrl`, or signed by a root not trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libpq_certificate_rules_beyond_webpki_hold() {
    let pki = Pki::new();
    pki.self_signed("self", "localhost");
    pki.leaf("cn-only", "localhost", "");
    pki.leaf(
        "san-other",
        "localhost",
        "subjectAltName=DNS:db.example.com\n",
    );
    pki.v1_leaf("v1", "localhost", "ca");
    pki.v1_leaf("v1-other", "localhost", "other-ca");
    pki.revocation_lists_of("v1");
    let cluster = tls_cluster_serving(&pki, "self", &[]);
    let ca = pki.path("ca.crt");
    let full = |root: &Path| localhost_url(&cluster, &ssl("verify-full", root));

    let (ids, app) = serve_ids(&full(&pki.path("self.crt"))).await;
    assert_eq!(ids.len(), 5, "a self-signed certificate as its own root");
    app.stop().await;
    // Trusted as its own root only: under another root it is a CA's certificate.
    let error = connect_error(&full(&ca)).await;
    assert!(error.contains("CaUsedAsEndEntity"), "{error}");

    serve_certificate(&cluster, &pki, "cn-only");
    assert_connects(&full(&ca)).await;

    // A DNS name in the subjectAltName: the CN is no longer read.
    serve_certificate(&cluster, &pki, "san-other");
    let error = connect_error(&full(&ca)).await;
    assert!(error.contains("not valid for name"), "{error}");

    serve_certificate(&cluster, &pki, "v1-other");
    for mode in ["verify-ca", "verify-full", "require"] {
        let error = connect_error(&localhost_url(&cluster, &ssl(mode, &ca))).await;
        assert!(error.contains("UnknownIssuer"), "{mode}: {error}");
    }

    // TLS 1.2 signs the handshake differently: the version 1 key is still checked.
    cluster.psql("ALTER SYSTEM SET ssl_max_protocol_version = 'TLSv1.2'");
    serve_certificate(&cluster, &pki, "v1");
    assert_eq!(pki.version("v1"), 1);
    let with_crl = |crl: &str| format!("{}&sslcrl={}", full(&ca), pki.path(crl).display());
    let (ids, app) = serve_biz(&with_crl("none.crl"), "tls12").await;
    assert_eq!(ids.len(), 5, "a version 1 certificate over TLS 1.2");
    assert_sessions_encrypted(&cluster, true);
    assert_eq!(
        cluster.psql(
            "SELECT DISTINCT version FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'segmint'"
        ),
        "TLSv1.2"
    );
    app.stop().await;
    let error = connect_error(&with_crl("v1-revoked.crl")).await;
    assert!(error.contains("Revoked"), "{error}");
}

/// A password used three ways (in the URL, in `password_file`, in `password_env`) never
/// shows in any command's output or the server's log, whatever happens: success, a bad
/// configuration, a wrong password, a TLS failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_output_or_log_line_shows_a_database_password() {
    const PASSWORD: &str = "Xq7-distinctive-pw-93k";
    const WRONG: &str = "Zr4-wrong-distinctive-71j";
    const VAR: &str = "TEST_DB_PASSWORD_C";
    let pki = Pki::new();
    let cluster = tls_cluster(&pki, &["host all pwuser 127.0.0.1/32 scram-sha-256"]);
    cluster.psql(&format!(
        "CREATE ROLE pwuser LOGIN SUPERUSER PASSWORD '{PASSWORD}'"
    ));
    for db in ["seg_b", "seg_c"] {
        cluster.psql(&format!("CREATE DATABASE {db}"));
    }
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("db-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let at = |db: &str, user: &str| {
        format!(
            "postgres://{user}@localhost:{}/{db}?hostaddr=127.0.0.1",
            cluster.port
        )
    };
    let database = |name: &str, remainder: usize, url: &str, extra: &str| {
        format!(
            "[[databases]]\nname = \"{name}\"\nurl = \"{url}\"\ndelta = 3\nremainder = {remainder}\n{extra}\n"
        )
    };
    let toml = format!(
        "bind = \"127.0.0.1:0\"\n{}{}{}",
        database("a", 0, &at("segmint", &format!("pwuser:{PASSWORD}")), ""),
        database(
            "b",
            1,
            &at("seg_b", "pwuser"),
            &format!("password_file = \"{}\"", password_file.display())
        ),
        database(
            "c",
            2,
            &at("seg_c", "pwuser"),
            &format!("password_env = \"{VAR}\"")
        ),
    );
    let config = dir.path().join("segmint.toml");
    std::fs::write(&config, &toml).unwrap();
    let env = [(VAR, PASSWORD), ("RUST_LOG", "debug")];
    let mut transcript = String::new();
    let mut run = |config: &Path, args: &[&str], succeeds: bool| {
        let run = segmint_cli(config, args, &env);
        let out = format!("{}{}", run.stdout, run.stderr);
        assert_eq!(run.ok(), succeeds, "segmint {args:?}: {out}");
        transcript.push_str(&out);
        out
    };
    run(&config, &["migrate"], true);
    run(&config, &["biz", "add", "order", "--step", "100"], true);
    run(&config, &["biz", "list"], true);
    let token = run(&config, &["token", "add", "--biz", "order"], true);
    let token = token.lines().next().unwrap().to_string();
    run(&config, &["token", "list"], true);
    run(&config, &["db", "fence", "a"], true);

    let variants = [
        // Two password sources for one database.
        toml.replace(
            "password_env = ",
            &format!(
                "password_file = \"{}\"\npassword_env = ",
                password_file.display()
            ),
        ),
        toml.replace("pwuser@localhost", &format!("pwuser:{PASSWORD}@localhost")),
        toml.replace(
            &password_file.display().to_string(),
            "/nonexistent/db-password",
        ),
        toml.replace(VAR, "TEST_NO_SUCH_VARIABLE"),
        toml.replace("delta = 3", "delta = 0"),
    ];
    for (i, text) in variants.iter().enumerate() {
        let bad = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&bad, text).unwrap();
        let out = run(&bad, &["migrate"], false);
        assert!(out.contains("databases["), "a configuration error: {out}");
    }
    let failing = [
        database("a", 0, &at("segmint", &format!("pwuser:{WRONG}")), ""),
        database(
            "a",
            0,
            &format!(
                "{}&{}",
                at("segmint", "pwuser"),
                ssl("verify-full", &pki.path("other-ca.crt"))
            ),
            &format!("password_env = \"{VAR}\""),
        ),
    ];
    for (i, text) in failing.iter().enumerate() {
        let bad = dir.path().join(format!("failing{i}.toml"));
        std::fs::write(&bad, text).unwrap();
        let out = run(&bad, &["biz", "list"], false);
        assert!(
            out.contains("password authentication failed") || out.contains("UnknownIssuer"),
            "{out}"
        );
    }

    let mut server = ServerProcess::start_with_env(&toml, &env).await;
    let remote = server.remote(Duration::from_secs(30));
    for path in ["/readyz", "/status", "/metrics", "/v1/ids/order?count=3"] {
        let r = send(request(&remote, Method::GET, path, bearer(&token))).await;
        transcript.push_str(&r.body);
    }
    assert!(
        transcript.contains("\"ids\""),
        "the server served IDs: {transcript}"
    );
    server.sigterm(Duration::from_secs(30)).await;
    transcript.push_str(&server.log_text());

    for secret in [PASSWORD, WRONG] {
        assert!(
            !transcript.contains(secret),
            "a password was shown:\n{transcript}"
        );
    }
}

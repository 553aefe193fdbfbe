//! TLS fixtures: certificates made with `openssl` at test time, and PostgreSQL clusters
//! that serve them, ask for client certificates or passwords.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::PgCluster;

/// The role that logs in with a client certificate (its certificate's CN).
pub const CERT_USER: &str = "certuser";

/// Test certificates in a temporary directory: `ca`, `other-ca` (trusted by nobody),
/// `server` (signed by `ca`, valid for the name `localhost` only) and `client` (signed
/// by `ca`, CN [`CERT_USER`]). Each NAME has `NAME.crt` and `NAME.key` (PEM).
pub struct Pki {
    /// Holds the files.
    dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl (Debian's openssl package)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A new P-256 key `NAME.key`, in PKCS#8 as PostgreSQL and rustls both read it.
const NEW_KEY: [&str; 6] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-keyout",
];

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("segmint-pki-")
            .tempdir()
            .unwrap();
        let pki = Pki { dir };
        for ca in ["ca", "other-ca"] {
            let (key, crt) = (format!("{ca}.key"), format!("{ca}.crt"));
            let mut args = vec!["req", "-x509", "-days", "2", "-subj"];
            let subject = format!("/CN=segmint test {ca}");
            args.extend([subject.as_str(), "-out", &crt]);
            args.extend(NEW_KEY);
            args.extend([
                key.as_str(),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ]);
            openssl(pki.dir.path(), &args);
        }
        pki.leaf(
            "server",
            "localhost",
            "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n",
        );
        pki.leaf("client", CERT_USER, "extendedKeyUsage=clientAuth\n");
        pki
    }

    /// `NAME.crt` and `NAME.key` for `cn`, signed by `ca`, with the extensions `ext`.
    pub fn leaf(&self, name: &str, cn: &str, ext: &str) {
        let extfile = format!("{name}.ext");
        std::fs::write(
            self.path(&extfile),
            format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n{ext}"),
        )
        .unwrap();
        self.signed(name, cn, "ca", Some(&extfile));
    }

    /// `NAME.crt` and `NAME.key` for `cn`, signed by `ca` (e.g. `other-ca`), with the
    /// extensions `ext`.
    pub fn leaf_of(&self, name: &str, cn: &str, ca: &str, ext: &str) {
        let extfile = format!("{name}.ext");
        std::fs::write(
            self.path(&extfile),
            format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n{ext}"),
        )
        .unwrap();
        self.signed(name, cn, ca, Some(&extfile));
    }

    /// `NAME.crt` and `NAME.key`: a new key and a certificate for `cn` signed by `ca` with
    /// `openssl x509 -req`, with the extensions of `extfile`, or none (version 1).
    fn signed(&self, name: &str, cn: &str, ca: &str, extfile: Option<&str>) {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        let subject = format!("/CN={cn}");
        let mut args = vec!["req", "-new", "-subj", &subject, "-out", &csr];
        args.extend(NEW_KEY);
        args.push(&key);
        openssl(self.dir.path(), &args);
        let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
        let mut args = vec![
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &crt,
        ];
        if let Some(extfile) = extfile {
            args.extend(["-extfile", extfile]);
        }
        openssl(self.dir.path(), &args);
    }

    /// PostgreSQL's documented recipe ("Creating Certificates"), run as its docs give it
    /// with this machine's OpenSSL: `root.crt` (self-signed, `v3_ca`), an intermediate
    /// signed by it, and a server certificate for `localhost` signed by the intermediate
    /// with `openssl x509 -req` and no extension file: OpenSSL 3.0 makes it X.509
    /// version 1, the host named in its CN only. `docs-server.crt` holds it followed by
    /// the intermediate, as the server sends them; `docs-leaf.crt` holds it alone (with
    /// the same key, `docs-leaf.key`).
    pub fn postgres_docs_recipe(&self) {
        // The docs' commands, with `-days 2`, this machine's openssl.cnf and the names
        // used here.
        let recipe = [
            "req -new -nodes -text -out root.csr -keyout root.key -subj /CN=root.yourdomain.com",
            "x509 -req -in root.csr -text -days 2 -extfile /etc/ssl/openssl.cnf -extensions v3_ca \
             -signkey root.key -out root.crt",
            "req -new -nodes -text -out intermediate.csr -keyout intermediate.key \
             -subj /CN=intermediate.yourdomain.com",
            "x509 -req -in intermediate.csr -text -days 2 -extfile /etc/ssl/openssl.cnf \
             -extensions v3_ca -CA root.crt -CAkey root.key -CAcreateserial -out intermediate.crt",
            "req -new -nodes -text -out docs-server.csr -keyout docs-server.key -subj /CN=localhost",
            "x509 -req -in docs-server.csr -text -days 2 -CA intermediate.crt \
             -CAkey intermediate.key -CAcreateserial -out docs-leaf.crt",
        ];
        for command in recipe {
            let args: Vec<&str> = command.split_whitespace().collect();
            openssl(self.dir.path(), &args);
        }
        let chain = [
            std::fs::read_to_string(self.path("docs-leaf.crt")).unwrap(),
            std::fs::read_to_string(self.path("intermediate.crt")).unwrap(),
        ];
        std::fs::write(self.path("docs-server.crt"), chain.concat()).unwrap();
        std::fs::copy(self.path("docs-server.key"), self.path("docs-leaf.key")).unwrap();
    }

    /// `NAME.crt` and `NAME.key`: a version 1 certificate for `cn`, signed by `ca` with
    /// `openssl x509 -req` and no extensions.
    pub fn v1_leaf(&self, name: &str, cn: &str, ca: &str) {
        self.signed(name, cn, ca, None);
    }

    /// `NAME.crt` and `NAME.key`: the self-signed certificate of the documented recipe's
    /// first form (`openssl req -new -x509`), for `cn`; clients trust it as its own root.
    pub fn self_signed(&self, name: &str, cn: &str) {
        let (key, crt, subject) = (
            format!("{name}.key"),
            format!("{name}.crt"),
            format!("/CN={cn}"),
        );
        openssl(
            self.dir.path(),
            &[
                "req", "-new", "-x509", "-days", "2", "-nodes", "-text", "-out", &crt, "-keyout",
                &key, "-subj", &subject,
            ],
        );
    }

    /// The X.509 version of `NAME.crt` (its first certificate), as OpenSSL reads it.
    pub fn version(&self, name: &str) -> u32 {
        let out = Command::new("openssl")
            .args(["x509", "-noout", "-text", "-in"])
            .arg(self.path(&format!("{name}.crt")))
            .output()
            .expect("run openssl");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Version: "))
            .unwrap_or_else(|| panic!("no version in {text}"));
        line.split_whitespace().next().unwrap().parse().unwrap()
    }

    /// Two revocation lists from `ca`: `none.crl`, revoking nothing, then
    /// `server-revoked.crl`, revoking the server's certificate.
    pub fn revocation_lists(&self) {
        self.revocation_lists_of("server");
    }

    /// Two revocation lists from `ca`: `none.crl`, revoking nothing, then
    /// `NAME-revoked.crl`, revoking `NAME.crt`.
    pub fn revocation_lists_of(&self, name: &str) {
        std::fs::write(
            self.path("crl.cnf"),
            "[ca]\ndefault_ca = test\n[test]\ndatabase = index.txt\ncrlnumber = crlnumber\n\
             default_md = sha256\ndefault_crl_days = 2\n",
        )
        .unwrap();
        std::fs::write(self.path("index.txt"), "").unwrap();
        std::fs::write(self.path("crlnumber"), "01\n").unwrap();
        let ca = [
            "-config", "crl.cnf", "-keyfile", "ca.key", "-cert", "ca.crt",
        ];
        let dir = self.dir.path();
        openssl(
            dir,
            &[&["ca"], &ca[..], &["-gencrl", "-out", "none.crl"]].concat(),
        );
        let (crt, crl) = (format!("{name}.crt"), format!("{name}-revoked.crl"));
        openssl(dir, &[&["ca"], &ca[..], &["-revoke", &crt]].concat());
        openssl(
            dir,
            &[&["ca"], &ca[..], &["-gencrl", "-out", &crl]].concat(),
        );
    }

    /// The path of one of the files, e.g. `ca.crt`.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }
}

/// Reconfigures `cluster` and restarts it: `settings` through `ALTER SYSTEM`, `files`
/// (source, name) copied into its data directory as the server's own (mode 0600, as
/// PostgreSQL wants its key), and `hba` lines placed before initdb's trust lines.
pub fn reconfigure(cluster: &PgCluster, settings: &[&str], files: &[(&Path, &str)], hba: &[&str]) {
    let data = PathBuf::from(cluster.psql("SHOW data_directory"));
    let owner = std::fs::metadata(&data).unwrap();
    for (from, name) in files {
        let to = data.join(name);
        std::fs::copy(from, &to).unwrap();
        std::os::unix::fs::chown(&to, Some(owner.uid()), Some(owner.gid())).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    for setting in settings {
        cluster.psql(&format!("ALTER SYSTEM SET {setting}"));
    }
    let hba_file = PathBuf::from(cluster.psql("SHOW hba_file"));
    let old = std::fs::read_to_string(&hba_file).unwrap();
    std::fs::write(&hba_file, format!("{}\n{old}", hba.join("\n"))).unwrap();
    cluster.stop();
    cluster.start_again();
}

/// A cluster serving TLS with `pki`'s server certificate, trusting `pki`'s CA for
/// client certificates, with `hba` lines first in pg_hba.conf.
pub fn tls_cluster(pki: &Pki, hba: &[&str]) -> PgCluster {
    tls_cluster_serving(pki, "server", hba)
}

/// A cluster serving TLS with `pki`'s `NAME.crt` and `NAME.key`, trusting `pki`'s CA for
/// client certificates, with `hba` lines first in pg_hba.conf.
pub fn tls_cluster_serving(pki: &Pki, name: &str, hba: &[&str]) -> PgCluster {
    let cluster = PgCluster::start();
    reconfigure(
        &cluster,
        &["ssl = on", "ssl_ca_file = 'root.crt'"],
        &[
            (&pki.path(&format!("{name}.crt")), "server.crt"),
            (&pki.path(&format!("{name}.key")), "server.key"),
            (&pki.path("ca.crt"), "root.crt"),
        ],
        hba,
    );
    assert_eq!(cluster.psql("SHOW ssl"), "on", "the cluster serves TLS");
    cluster
}

/// Asserts that segmint has sessions on `cluster` and that all of them are encrypted
/// (or, with `encrypted` false, none), as the server sees them in `pg_stat_ssl`.
pub fn assert_sessions_encrypted(cluster: &PgCluster, encrypted: bool) {
    let counts = cluster.psql(
        "SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_ssl s
         JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'segmint'",
    );
    let (tls, all) = counts.split_once('|').expect("two counts");
    let expected = if encrypted { all } else { "0" };
    assert!(
        all != "0" && tls == expected,
        "{tls} of {all} segmint sessions encrypted, expected {}",
        if encrypted { "all" } else { "none" }
    );
}

/// Restarts `cluster` serving `pki`'s `NAME.crt` and `NAME.key`.
pub fn serve_certificate(cluster: &PgCluster, pki: &Pki, name: &str) {
    reconfigure(
        cluster,
        &[],
        &[
            (&pki.path(&format!("{name}.crt")), "server.crt"),
            (&pki.path(&format!("{name}.key")), "server.key"),
        ],
        &[],
    );
}

/// Asserts that `app` is not ready and that `/readyz` and `/status` both name `why`.
pub async fn assert_not_ready_because(app: &super::TestApp, why: &str) {
    let (status, body) = app.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(why), "/readyz names the reason: {body}");
    let (_, body) = app.get("/status").await;
    assert!(body.contains(why), "/status names the reason: {body}");
}

// What the TLS tests of both engines do with a database URL.

/// A configuration of the one database at `url`.
pub fn config_for(url: &str) -> segmint::config::Config {
    segmint::config::Config::from_toml(&super::config_toml_urls(&[url.to_string()], ""))
        .expect("test configuration")
}

/// The error of connecting to `url` (through `migrate`); panics if it connects.
pub async fn connect_error(url: &str) -> String {
    let store = segmint::store::Store::connect(&config_for(url)).unwrap();
    let (db, result) = store.cluster().migrate().await.results().remove(0);
    match result {
        Ok(_) => panic!("database {db} at {url} accepted the connection"),
        Err(e) => e.to_string(),
    }
}

/// Asserts that a store connects to the database at `url` (through `migrate`).
pub async fn assert_connects(url: &str) {
    let store = segmint::store::Store::connect(&config_for(url)).unwrap();
    let (db, result) = store.cluster().migrate().await.results().remove(0);
    if let Err(e) = result {
        panic!("database {db} at {url} refused: {e}");
    }
}

/// Serves IDs from the database at `url`; returns the IDs and the app.
pub async fn serve_ids(url: &str) -> (Vec<i64>, super::TestApp) {
    serve_biz(url, "order").await
}

/// Serves IDs of a new biz `biz` from the database at `url`; returns the IDs and the app.
pub async fn serve_biz(url: &str, biz: &str) -> (Vec<i64>, super::TestApp) {
    let config = config_for(url);
    let token = super::setup_biz(&config, biz, 100, false).await;
    let app = super::spawn_app(config).await;
    (app.ids(biz, &token, 5).await, app)
}

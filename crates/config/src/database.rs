//! The `[[databases]]`: each one's name, where it is (its URL, read into a
//! [`DatabaseKind`]), its password and its residue class, and `pool_size`. Classes
//! are checked pairwise disjoint here, so that no two databases can issue one ID.

use serde::{Deserialize, Serialize};

use crate::secret::password;
use crate::segment::Residue;
use crate::{Config, ConfigError, TlsSettings, invalid, libpq};

/// One `[[databases]]` entry as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDatabase {
    name: String,
    url: String,
    #[serde(default = "one")]
    delta: i64,
    #[serde(default)]
    remainder: i64,
    /// A file whose content (less trailing newlines) is the password.
    #[serde(default)]
    password_file: Option<std::path::PathBuf>,
    /// An environment variable holding the password.
    #[serde(default)]
    password_env: Option<String>,
}

fn one() -> i64 {
    1
}

/// One database: where it is and which residue class it issues from.
#[derive(Clone)]
pub struct DatabaseConfig {
    /// Unique name used in logs, errors and metrics.
    pub name: String,
    /// Which engine, and how to reach it.
    pub kind: DatabaseKind,
    /// The residue class plain bizs get on this database.
    pub residue: Residue,
}

/// The engine behind one configured database, chosen by its URL's scheme.
#[derive(Clone)]
pub enum DatabaseKind {
    /// `postgres://…` or libpq key=value pairs.
    Postgres(Box<PgTarget>),
    /// `sqlite://path`: an embedded database file, relative to the working directory
    /// unless absolute (`sqlite:///var/lib/segmint/a.db`).
    Sqlite(std::path::PathBuf),
    /// `mysql://user[:password]@host[:port]/database`: MySQL or MariaDB.
    MySql(Box<MyTarget>),
}

/// How to reach one MySQL or MariaDB database.
#[derive(Clone)]
pub struct MyTarget {
    pub host: String,
    pub port: u16,
    pub user: String,
    /// From the URL, `password_file` or `password_env`.
    pub password: Option<String>,
    pub database: String,
    /// Where the biz rows are (`tables=` in the URL).
    pub tables: BizTables,
    /// TLS: `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key` in the URL, their files read.
    pub tls: crate::tls::MyTls,
}

/// The table of a MySQL database's biz rows: Tinyid's `tiny_id_info` (the default), or
/// Leaf's `leaf_alloc` (`tables=leaf`), each served in place beside the servers it
/// belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BizTables {
    #[default]
    Tinyid,
    Leaf,
}

/// How to reach one PostgreSQL database.
#[derive(Clone)]
pub struct PgTarget {
    /// What tokio-postgres reads: host, user, password (whatever its source), options.
    pub config: tokio_postgres::Config,
    /// The TLS part of the connection string, after libpq's rules.
    pub tls: TlsSettings,
    /// Built once from `tls`, with its certificate files already read.
    pub connector: tokio_postgres_rustls::MakeRustlsConnect,
}

impl std::fmt::Debug for DatabaseConfig {
    /// Never prints the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseConfig")
            .field("name", &self.name)
            .field("location", &self.location())
            .field("residue", &self.residue)
            .finish()
    }
}

impl DatabaseConfig {
    /// `host:port/dbname` or the file path, safe to log.
    pub fn location(&self) -> String {
        match &self.kind {
            DatabaseKind::Postgres(target) => {
                let pg = &target.config;
                let host = pg
                    .get_hosts()
                    .first()
                    .map(|h| match h {
                        tokio_postgres::config::Host::Tcp(h) => h.clone(),
                        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
                    })
                    .unwrap_or_default();
                let port = pg.get_ports().first().copied().unwrap_or(5432);
                let db = pg.get_dbname().unwrap_or("");
                format!("{host}:{port}/{db}")
            }
            DatabaseKind::Sqlite(path) => format!("sqlite:{}", path.display()),
            DatabaseKind::MySql(my) => format!("{}:{}/{}", my.host, my.port, my.database),
        }
    }

    pub fn is_embedded(&self) -> bool {
        matches!(self.kind, DatabaseKind::Sqlite(_))
    }
}

/// Whether two embedded database paths name the same file, spelled differently
/// (`data/a.db`, `./data/a.db`, or absolute from the working directory).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    fn normal(p: &std::path::Path) -> std::path::PathBuf {
        let absolute = match std::env::current_dir() {
            Ok(cwd) if p.is_relative() => cwd.join(p),
            _ => p.to_path_buf(),
        };
        absolute
            .components()
            .filter(|c| *c != std::path::Component::CurDir)
            .collect()
    }
    normal(a) == normal(b)
}

const DATABASE_NAME_RULE: &str = "must be non-empty and use only letters, digits, '-', '_' and '.'";

fn valid_database_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

impl Config {
    /// This configuration with one more database, `name` at `url`: the one `segmint db
    /// add` brings in. Its class comes from the layout the change writes, so it is not
    /// checked against the configured classes.
    ///
    /// # Errors
    /// A message naming the bad argument: a malformed name, one already configured, or
    /// a malformed URL.
    pub fn with_database(&self, name: &str, url: &str) -> Result<Config, String> {
        if !valid_database_name(name) {
            return Err(format!("NAME `{name}` {DATABASE_NAME_RULE}"));
        }
        if self.databases.iter().any(|d| d.name == name) {
            return Err(format!(
                "database \"{name}\" is configured already; `segmint db list` shows whether it is in the layout"
            ));
        }
        let kind = database_kind(url).map_err(|e| format!("URL: {e}"))?;
        let mut config = self.clone();
        config.databases.push(DatabaseConfig {
            name: name.to_owned(),
            kind,
            residue: Residue::ALL,
        });
        Ok(config)
    }

    /// Whether every database is embedded (a single-node setup).
    pub fn all_embedded(&self) -> bool {
        self.databases.iter().all(DatabaseConfig::is_embedded)
    }
}

/// Parses a database URL: `sqlite://path`, `mysql://…`, or a PostgreSQL URL / key=value
/// string.
fn database_kind(url: &str) -> Result<DatabaseKind, String> {
    if let Some(rest) = url.strip_prefix("mysql://") {
        return mysql_target(rest).map(|t| DatabaseKind::MySql(Box::new(t)));
    }
    if let Some(path) = url.strip_prefix("sqlite://") {
        if path.is_empty() {
            return Err("`sqlite://` needs a file path, e.g. sqlite://data/segmint.db".into());
        }
        return Ok(DatabaseKind::Sqlite(path.into()));
    }
    let (config, tls) = libpq::parse(url)?;
    let connector = crate::tls::connector(&tls)?;
    Ok(DatabaseKind::Postgres(Box::new(PgTarget {
        config,
        tls,
        connector,
    })))
}

/// The parts of `mysql://user[:password]@host[:port]/database[?parameters]` after the
/// scheme, each percent-decoded. The TLS parameters are the mysql client's options:
/// `ssl-mode` (or `ssl_mode`, `sslmode`; its value in any case), `ssl-ca`, `ssl-cert`,
/// `ssl-key` (or with `_`), read by [`crate::tls::my_tls`] with their files.
fn mysql_target(rest: &str) -> Result<MyTarget, String> {
    const FORM: &str = "expected mysql://user[:password]@host[:port]/database";
    let decode = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| format!("{FORM}: a part is not valid UTF-8 once percent-decoded"))
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut tables = BizTables::Tinyid;
    let mut tls: [(&str, Option<String>); 5] = [
        ("ssl-mode", None),
        ("ssl-ca", None),
        ("ssl-cert", None),
        ("ssl-key", None),
        ("ssl-crl", None),
    ];
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        match (key, value.to_ascii_uppercase().as_str()) {
            ("tables", "TINYID") => tables = BizTables::Tinyid,
            ("tables", "LEAF") => tables = BizTables::Leaf,
            ("tables", _) => {
                return Err(format!(
                    "tables={value}: expected `tinyid` (tiny_id_info, the default) or `leaf` (leaf_alloc)"
                ));
            }
            (
                "ssl-mode" | "ssl_mode" | "sslmode" | "ssl-ca" | "ssl_ca" | "ssl-cert" | "ssl_cert"
                | "ssl-key" | "ssl_key" | "ssl-crl" | "ssl_crl",
                _,
            ) => {
                let name = if key == "sslmode" {
                    "ssl-mode".to_owned()
                } else {
                    key.replace('_', "-")
                };
                let value = decode(value)?;
                if value.is_empty() {
                    return Err(format!("{key}= needs a value"));
                }
                let slot = tls
                    .iter_mut()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v)
                    .expect("a slot for every TLS parameter");
                if slot.replace(value).is_some() {
                    return Err(format!("{name} is given twice"));
                }
            }
            _ => return Err(format!("unknown parameter `{key}`: {FORM}")),
        }
    }
    let [mode, ca, cert, key, crl] = tls.each_ref().map(|(_, v)| v.as_deref());
    let tls = crate::tls::my_tls(&crate::tls::MyTlsParams {
        mode,
        ca,
        cert,
        key,
        crl,
    })?;
    let (credentials, address) = rest
        .rsplit_once('@')
        .ok_or_else(|| format!("{FORM}: the user is missing"))?;
    let (user, password) = match credentials.split_once(':') {
        Some((user, password)) => (decode(user)?, Some(decode(password)?)),
        None => (decode(credentials)?, None),
    };
    let (host_port, database) = address
        .split_once('/')
        .ok_or_else(|| format!("{FORM}: the database name is missing"))?;
    let database = decode(database)?;
    let (host, port) = match host_port.rsplit_once(':') {
        Some((host, port)) => (
            host,
            port.parse::<u16>()
                .map_err(|_| format!("{FORM}: port `{port}` is not a number from 1 to 65535"))?,
        ),
        None => (host_port, 3306),
    };
    if user.is_empty() || host.is_empty() || database.is_empty() || port == 0 {
        return Err(format!("{FORM}: user, host and database must be non-empty"));
    }
    Ok(MyTarget {
        tables,
        tls,
        host: host.to_owned(),
        port,
        user,
        password: password.filter(|p| !p.is_empty()),
        database,
    })
}

/// Checks `pool_size` and every `[[databases]]` entry: a unique name, a class that
/// overlaps no other, a URL (with at most one password) and, for an embedded
/// database, a file no other entry names.
pub(crate) fn validate(
    pool_size: usize,
    raw: Vec<RawDatabase>,
) -> Result<Vec<DatabaseConfig>, ConfigError> {
    if pool_size == 0 {
        return Err(invalid("pool_size", "must be at least 1"));
    }
    if raw.is_empty() {
        return Err(invalid(
            "databases",
            "at least one [[databases]] entry is required",
        ));
    }
    let mut databases: Vec<DatabaseConfig> = Vec::with_capacity(raw.len());
    for (i, db) in raw.into_iter().enumerate() {
        let key = |field: &str| format!("databases[{i}].{field} (database \"{}\")", db.name);
        if !valid_database_name(&db.name) {
            return Err(invalid(key("name"), DATABASE_NAME_RULE));
        }
        if databases.iter().any(|d| d.name == db.name) {
            return Err(invalid(key("name"), "is used by another database"));
        }
        let residue = Residue::new(db.delta, db.remainder).map_err(|e| {
            let field = if db.delta < 1 { "delta" } else { "remainder" };
            invalid(key(field), e.to_string())
        })?;
        let mut kind = database_kind(&db.url).map_err(|e| invalid(key("url"), e))?;
        if let Some(password) = password(
            db.password_file.as_deref(),
            db.password_env.as_deref(),
            &kind,
            key,
        )? {
            match &mut kind {
                DatabaseKind::Postgres(pg) => {
                    pg.config.password(password);
                }
                DatabaseKind::MySql(my) => my.password = Some(password),
                DatabaseKind::Sqlite(_) => {}
            }
        }
        if let DatabaseKind::Sqlite(path) = &kind
            && let Some(other) = databases
                .iter()
                .find(|d| matches!(&d.kind, DatabaseKind::Sqlite(p) if same_file(p, path)))
        {
            return Err(invalid(
                key("url"),
                format!(
                    "file {} is already database \"{}\"",
                    path.display(),
                    other.name
                ),
            ));
        }
        if let Some(other) = databases.iter().find(|d| d.residue.overlaps(residue)) {
            return Err(invalid(
                key("remainder"),
                format!(
                    "residue class {residue} overlaps {} of database \"{}\": the two databases could issue the same ID",
                    other.residue, other.name
                ),
            ));
        }
        databases.push(DatabaseConfig {
            name: db.name,
            kind,
            residue,
        });
    }
    Ok(databases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BUILT_IN, TWO, error};

    #[test]
    fn loads_two_databases_with_defaults() {
        let cfg = Config::from_toml(TWO).unwrap();
        assert_eq!(cfg.bind, "127.0.0.1:9999");
        assert_eq!(cfg.preload_percent, 20);
        assert_eq!(cfg.databases.len(), 2);
        assert_eq!(cfg.databases[1].residue, Residue::new(2, 1).unwrap());
        let shown = format!("{:?}", cfg.databases[0]);
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("127.0.0.1:5432/segmint"), "{shown}");
    }

    #[test]
    fn mysql_tables_name_tinyids_or_leafs() {
        let tables = |query: &str| mysql_target(&format!("root@h/db{query}")).map(|t| t.tables);
        assert_eq!(tables(""), Ok(BizTables::Tinyid));
        assert_eq!(tables("?tables=tinyid"), Ok(BizTables::Tinyid));
        assert_eq!(tables("?tables=LEAF"), Ok(BizTables::Leaf));
        let Err(e) = tables("?tables=snowflake") else {
            panic!("tables=snowflake was taken");
        };
        assert!(e.contains("expected `tinyid`"), "{e}");
    }

    #[test]
    fn mysql_urls_are_read_part_by_part() {
        let target = |url: &str| match mysql_target(url.strip_prefix("mysql://").unwrap()) {
            Ok(t) => (t.user, t.password, t.host, t.port, t.database),
            Err(e) => panic!("{url}: {e}"),
        };
        assert_eq!(
            target("mysql://tinyid:p%40ss:w@db1.internal:3307/tinyid-db1"),
            (
                "tinyid".into(),
                Some("p@ss:w".into()),
                "db1.internal".into(),
                3307,
                "tinyid-db1".into()
            )
        );
        assert_eq!(
            target("mysql://root@127.0.0.1/segmint?ssl-mode=disabled"),
            (
                "root".into(),
                None,
                "127.0.0.1".into(),
                3306,
                "segmint".into()
            )
        );
        for (url, why) in [
            (
                "mysql://root@h/db?charset=latin1",
                "unknown parameter `charset`",
            ),
            ("mysql://root@h:x/db", "port `x`"),
            ("mysql://root@h", "database name is missing"),
            ("mysql://root@/db", "must be non-empty"),
        ] {
            let Err(e) = mysql_target(url.strip_prefix("mysql://").unwrap()) else {
                panic!("{url} was taken");
            };
            assert!(e.contains(why), "{url}: {e}");
        }
        let cfg = Config::from_toml(
            "[[databases]]\nname = \"m\"\nurl = \"mysql://root:secret@127.0.0.1:3306/segmint\"\n",
        )
        .unwrap();
        assert_eq!(cfg.databases[0].location(), "127.0.0.1:3306/segmint");
        let shown = format!("{:?}", cfg.databases[0]);
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn mysql_tls_parameters_follow_the_mysql_client() {
        use crate::tls::MySslMode;
        // A CA (P-256) and a client certificate it signed, with its key and another key.
        const CA: &str = r"-----BEGIN CERTIFICATE-----
MIIBlTCCATugAwIBAgIUInR4GK+d+1c3ozQJSNdMZuoY1iQwCgYIKoZIzj0EAwIw
HzEdMBsGA1UEAwwUc2VnbWludCB1bml0IHRlc3QgY2EwIBcNMjYxMTI2MDc0OTM3
WhgPMjEyNjExMDIwNzQ5MzdaMB8xHTAbBgNVBAMMFHNlZ21pbnQgdW5pdCB0ZXN0
IGNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEWKunZ0m1cMzlOUofgZPDrzVv
GTRUBu1v35opWctCNJCIs9xntlX5SNcsUUMWVeuIhzkuzckW3ivvu0V0cLIv2KNT
MFEwHQYDVR0OBBYEFMXBaG86ZAeLJgkJcXMDw2dRFmrVMB8GA1UdIwQYMBaAFMXB
aG86ZAeLJgkJcXMDw2dRFmrVMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwID
SAAwRQIgf0MJ3pW1CjzAcaHGQJZYeDKdFje9t72NTRBJ/AyXv8YCIQCco8SUJfYw
iwQj7sVeGn78b9fK0bSkBijlDuD4xd7AkQ==
-----END CERTIFICATE-----
";
        const CERT: &str = r"-----BEGIN CERTIFICATE-----
MIIBlzCCAT6gAwIBAgIUUZyFaW5IU4h8ziFsCDTuWS7aFuwwCgYIKoZIzj0EAwIw
HzEdMBsGA1UEAwwUc2VnbWludCB1bml0IHRlc3QgY2EwIBcNMjYxMTI2MDc0OTM3
WhgPMjEyNjExMDIwNzQ5MzdaMBMxETAPBgNVBAMMCGNlcnR1c2VyMFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAEHW3zJFf6Yr3cRqUBn6nCZ67dpb2Mmw3Ox/K/IIFq
rGFTuu41B4O1n1q5+X/avTCeCP9+VVJu0Y/CtKby1Ia70aNiMGAwCQYDVR0TBAIw
ADATBgNVHSUEDDAKBggrBgEFBQcDAjAdBgNVHQ4EFgQUUagN/G0BJZ/V8w7CYA0R
41pq724wHwYDVR0jBBgwFoAUxcFobzpkB4smCQlxcwPDZ1EWatUwCgYIKoZIzj0E
AwIDRwAwRAIgAT7EJ5Oyh8h6tHSR220+CGr8KBW26odYlaa2bDsMrB0CIHFQjbBl
GqJcLSwSjSKq8mnAYbLJBOhgrHeuP4hgiJ9g
-----END CERTIFICATE-----
";
        const KEY: &str = r"-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg6NN2Q/yAH+wB63WF
iO0D2WXFiIFnWNY2gX4/SlUvqvehRANCAAQdbfMkV/pivdxGpQGfqcJnrt2lvYyb
Dc7H8r8ggWqsYVO67jUHg7WfWrn5f9q9MJ4I/35VUm7Rj8K0pvLUhrvR
-----END PRIVATE KEY-----
";
        const OTHER_KEY: &str = r"-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg7A7Ai1mE/uxChPS9
LBiFdIegFKNETMTOsyKScunnNFahRANCAARL8DWNH/entKoky9tTdL4TbY/SZQvx
1JBiMCO4enpJrC4ySnuraV0LSNEME4Y6FKc+cPAizX3gF3+vdvi1/ize
-----END PRIVATE KEY-----
";
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };
        let (ca, cert, key, other_key) = (
            file("ca.pem", CA),
            file("client.pem", CERT),
            file("client.key", KEY),
            file("other.key", OTHER_KEY),
        );
        let not_pem = file("not.pem", "not a certificate\n");
        let with_space = file("my ca.pem", CA);
        let tls = |params: &str| {
            mysql_target(&format!("root@h/db?{params}")).map(|t| {
                let client = t.tls.client.map(|(c, k)| (c.path, k.path));
                (t.tls.mode, t.tls.ca.map(|c| c.path), client)
            })
        };
        let mode = |params: &str| match tls(params) {
            Ok((mode, _, _)) => mode,
            Err(e) => panic!("{params}: {e}"),
        };
        assert_eq!(mode(""), MySslMode::Disabled, "plain text by default");
        assert_eq!(mode("ssl-mode=disabled"), MySslMode::Disabled);
        assert_eq!(mode("sslmode=Required"), MySslMode::Required);
        assert_eq!(
            mode(&format!("ssl_mode=verify_ca&ssl-ca={ca}")),
            MySslMode::VerifyCa
        );
        // As the mysql client: `ssl-ca` without `ssl-mode` is VERIFY_CA.
        assert_eq!(mode(&format!("ssl-ca={ca}")), MySslMode::VerifyCa);
        assert_eq!(
            tls(&format!(
                "ssl-mode=VERIFY_IDENTITY&ssl_ca={}&ssl-cert={cert}&ssl_key={key}",
                with_space.replace(' ', "%20")
            ))
            .unwrap(),
            (
                MySslMode::VerifyIdentity,
                Some(with_space.clone().into()),
                Some((cert.clone().into(), key.clone().into()))
            )
        );
        assert_eq!(
            mode(&format!("ssl-mode=REQUIRED&ssl-cert={cert}&ssl-key={key}")),
            MySslMode::Required
        );
        for (params, why) in [
            ("ssl-mode=PREFERRED".to_string(), "cannot fall back"),
            ("ssl-mode=preferred".into(), "use ssl-mode=REQUIRED"),
            ("ssl-mode=bogus".into(), "invalid ssl-mode \"bogus\""),
            ("ssl-mode=".into(), "ssl-mode= needs a value"),
            (
                "ssl-mode=REQUIRED&sslmode=REQUIRED".into(),
                "ssl-mode is given twice",
            ),
            (
                "ssl-mode=VERIFY_CA".into(),
                "ssl-mode=VERIFY_CA needs ssl-ca",
            ),
            (
                "ssl-mode=verify_identity".into(),
                "VERIFY_IDENTITY needs ssl-ca",
            ),
            (format!("ssl-mode=DISABLED&ssl-ca={ca}"), "ssl-ca needs TLS"),
            (
                format!("ssl-cert={cert}&ssl-key={key}"),
                "ssl-cert needs TLS",
            ),
            (
                format!("ssl-mode=REQUIRED&ssl-cert={cert}"),
                "ssl-cert needs ssl-key",
            ),
            (
                format!("ssl-mode=REQUIRED&ssl-key={key}"),
                "ssl-key needs ssl-cert",
            ),
            (
                "ssl-ca=/nonexistent/ca.pem".into(),
                "ssl-ca /nonexistent/ca.pem: ",
            ),
            (format!("ssl-ca={not_pem}"), "no PEM item"),
            (format!("ssl-ca={key}"), "no PEM item"),
            (
                format!("ssl-mode=REQUIRED&ssl-cert={cert}&ssl-key=/nonexistent/k"),
                "ssl-key /nonexistent/k: ",
            ),
            (
                format!("ssl-mode=REQUIRED&ssl-cert={key}&ssl-key={key}"),
                "ssl-cert",
            ),
            (
                format!("ssl-mode=REQUIRED&ssl-cert={cert}&ssl-key={cert}"),
                "no private key in it",
            ),
            (
                format!("ssl-mode=REQUIRED&ssl-cert={cert}&ssl-key={other_key}"),
                "does not go with ssl-cert",
            ),
            (format!("ssl-ca={ca}&ssl-crl={ca}"), "ssl-crl"),
            (
                "ssl-capath=/etc/ssl/certs".into(),
                "unknown parameter `ssl-capath`",
            ),
        ] {
            match tls(&params) {
                Ok(taken) => panic!("{params} was taken: {taken:?}"),
                Err(e) => assert!(e.contains(why), "{params}: {e}"),
            }
        }
        // The error names the database's URL key, and the key's file only by its path.
        let msg = error(&format!(
            "[[databases]]\nname = \"m\"\nurl = \"mysql://root:hunter2@h/db?ssl-mode=REQUIRED&ssl-cert={cert}&ssl-key={other_key}\"\n"
        ));
        assert!(msg.contains("databases[0].url (database \"m\")"), "{msg}");
        assert!(
            !msg.contains("hunter2") && !msg.contains("PRIVATE"),
            "{msg}"
        );
    }

    #[test]
    fn built_in_default_is_one_embedded_database() {
        let cfg = Config::from_toml(BUILT_IN).unwrap();
        assert!(cfg.all_embedded());
        assert_eq!(cfg.databases[0].location(), "sqlite:data/segmint.db");
        let mixed = TWO.replace(
            "postgres://postgres@127.0.0.1:5433/segmint",
            "sqlite:///tmp/b.db",
        );
        let cfg = Config::from_toml(&mixed).unwrap();
        assert!(!cfg.all_embedded() && cfg.databases[1].is_embedded());
    }

    #[test]
    fn names_the_offending_key() {
        let overlap = TWO.replace("remainder = 1", "remainder = 0");
        let msg = error(&overlap);
        assert!(msg.contains("databases[1].remainder"), "{msg}");
        assert!(msg.contains("\"a\""), "{msg}");
        let msg = error(&TWO.replace("remainder = 1", "remainder = 2"));
        assert!(
            msg.contains("databases[1].remainder") && msg.contains("\"b\""),
            "{msg}"
        );
        let msg = error(&TWO.replacen("delta = 2", "delta = 0", 1));
        assert!(msg.contains("databases[0].delta"), "{msg}");
        let msg = error(&TWO.replace("name = \"b\"", "name = \"a\""));
        assert!(msg.contains("databases[1].name"), "{msg}");
        let msg = error(&TWO.replacen(
            "postgres://postgres:secret@127.0.0.1:5432/segmint",
            "mysql://127.0.0.1:3306/segmint",
            1,
        ));
        assert!(
            msg.contains("databases[0].url") && msg.contains("the user is missing"),
            "{msg}"
        );
        let same_file = TWO.replace(
            "postgres://postgres:secret@127.0.0.1:5432/segmint",
            "sqlite://x.db",
        );
        let msg = error(&same_file.replace(
            "postgres://postgres@127.0.0.1:5433/segmint",
            "sqlite://./x.db",
        ));
        assert!(
            msg.contains("databases[1].url") && msg.contains("x.db"),
            "{msg}"
        );
        assert!(error("").contains("databases"));
        let msg = error(&format!("pool_size = 0\n{TWO}"));
        assert!(msg.contains("`pool_size`: must be at least 1"), "{msg}");
    }

    #[test]
    fn tls_errors_name_the_url_and_the_file() {
        let one = |url: &str| format!("[[databases]]\nname = \"a\"\nurl = \"{url}\"\n");
        let msg = error(&one("postgres://u:hunter2@h/db?sslmode=verify-full"));
        assert!(msg.contains("databases[0].url (database \"a\")"), "{msg}");
        assert!(
            msg.contains("sslrootcert") && !msg.contains("hunter2"),
            "{msg}"
        );
        let msg = error(&one(
            "host=h sslmode=verify-ca sslrootcert=/nonexistent/ca.crt",
        ));
        assert!(
            msg.contains("databases[0].url") && msg.contains("/nonexistent/ca.crt"),
            "{msg}"
        );
        let msg = error(&one("postgres://h/db?sslmode=bogus"));
        assert!(
            msg.contains("databases[0].url") && msg.contains("bogus"),
            "{msg}"
        );
    }

    #[test]
    fn with_database_names_the_bad_argument() {
        let cfg = Config::from_toml(TWO).unwrap();
        let added = cfg.with_database("c", "sqlite://c.db").unwrap();
        assert_eq!(added.databases.len(), 3);
        assert_eq!(added.databases[2].residue, Residue::ALL);
        let msg = cfg.with_database("no spaces", "sqlite://c.db").unwrap_err();
        assert!(msg.starts_with("NAME `no spaces`"), "{msg}");
        let msg = cfg.with_database("a", "sqlite://c.db").unwrap_err();
        assert!(msg.contains("configured already"), "{msg}");
        let msg = cfg.with_database("c", "sqlite://").unwrap_err();
        assert!(msg.starts_with("URL: "), "{msg}");
    }
}

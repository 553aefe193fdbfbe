//! Secrets as the configuration reads them: the operator token as written (never
//! shown), files as container secrets are mounted, and a database's password from
//! `password_file` or `password_env`. Every error names the key and the file or
//! variable, never the secret.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::database::DatabaseKind;
use crate::{ConfigError, invalid};

/// A secret as read from the file or the environment: printed as `..` by `Debug`, and
/// refused without its value when it is not a string.
#[derive(Clone, Serialize)]
pub(crate) struct Secret(String);

impl Secret {
    /// The secret itself, for the one check that needs it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        // Serde's own type errors quote the value they found.
        match <figment::value::Value as Deserialize>::deserialize(d)? {
            figment::value::Value::String(_, text) => Ok(Secret(text)),
            _ => Err(serde::de::Error::custom(
                "must be a string (in quotes, in TOML)",
            )),
        }
    }
}

/// A secret from a file, as container secrets are mounted: its content less trailing
/// line breaks. An error names `key` and the file, never the content.
pub(crate) fn read_secret_file(key: &str, path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map(|text| text.trim_end_matches(['\n', '\r']).to_owned())
        .map_err(|e| invalid(key, format!("cannot read {}: {e}", path.display())))
}

/// Where a database's password is read from, besides its URL.
enum PasswordSource<'a> {
    /// `password_file`: a file, as container secrets are mounted.
    File(&'a Path),
    /// `password_env`: an environment variable's name.
    Env(&'a str),
}

/// The password from `password_file` or `password_env`, if either is set: at most one
/// source per database, the URL's password included. Errors name the key and the file
/// or variable, never the password.
pub(crate) fn password(
    file: Option<&Path>,
    env: Option<&str>,
    kind: &DatabaseKind,
    key: impl Fn(&str) -> String,
) -> Result<Option<String>, ConfigError> {
    let (field, secret) = match (file, env) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(invalid(
                key("password_env"),
                "give the password in one place: password_file or password_env",
            ));
        }
        (Some(path), None) => ("password_file", PasswordSource::File(path)),
        (None, Some(name)) => ("password_env", PasswordSource::Env(name)),
    };
    match kind {
        DatabaseKind::Sqlite(_) => {
            return Err(invalid(
                key(field),
                "is for PostgreSQL and MySQL databases only",
            ));
        }
        DatabaseKind::Postgres(pg) if pg.config.get_password().is_some() => {
            return Err(invalid(
                key(field),
                "the url holds a password too: give the password in one place",
            ));
        }
        DatabaseKind::MySql(my) if my.password.is_some() => {
            return Err(invalid(
                key(field),
                "the url holds a password too: give the password in one place",
            ));
        }
        DatabaseKind::Postgres(_) | DatabaseKind::MySql(_) => {}
    }
    let password = match secret {
        PasswordSource::File(path) => read_secret_file(&key(field), path)?,
        // Not VarError's own text: for a value that is not UTF-8 it shows the value.
        PasswordSource::Env(name) => std::env::var(name).map_err(|e| {
            let why = match e {
                std::env::VarError::NotPresent => "is not set",
                std::env::VarError::NotUnicode(_) => "is not valid UTF-8",
            };
            invalid(key(field), format!("environment variable {name} {why}"))
        })?,
    };
    if password.is_empty() {
        return Err(invalid(key(field), "the password is empty"));
    }
    Ok(Some(password))
}

#[cfg(test)]
mod tests {
    use crate::{Config, DatabaseKind, error};

    #[test]
    fn password_from_a_file_or_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret pass\n").unwrap();
        let one = |url: &str, extra: &str| {
            format!("[[databases]]\nname = \"a\"\nurl = \"{url}\"\n{extra}\n")
        };
        let pg_password = |text: &str| match &Config::from_toml(text).unwrap().databases[0].kind {
            DatabaseKind::Postgres(pg) => pg.config.get_password().map(<[u8]>::to_vec),
            DatabaseKind::Sqlite(_) | DatabaseKind::MySql(_) => None,
        };
        let url = "postgres://u@h/db";
        let from_file = one(
            url,
            &format!("password_file = {:?}", file.display().to_string()),
        );
        assert_eq!(pg_password(&from_file), Some(b"s3cret pass".to_vec()));
        let path = std::env::var("PATH").unwrap();
        let from_env = one(url, "password_env = \"PATH\"");
        assert_eq!(pg_password(&from_env), Some(path.into_bytes()));

        let msg = error(&one("postgres://u:pw@h/db", "password_env = \"PATH\""));
        assert!(
            msg.contains("databases[0].password_env") && msg.contains("url"),
            "{msg}"
        );
        let msg = error(&format!("{from_file}password_env = \"PATH\""));
        assert!(msg.contains("databases[0].password_env"), "{msg}");
        let msg = error(&one(
            url,
            "password_env = \"SEGMINT_TEST_NO_SUCH_VARIABLE\"",
        ));
        assert!(
            msg.contains("password_env") && msg.contains("SEGMINT_TEST_NO_SUCH_VARIABLE"),
            "{msg}"
        );
        let msg = error(&one(url, "password_file = \"/nonexistent/pw\""));
        assert!(
            msg.contains("databases[0].password_file") && msg.contains("/nonexistent/pw"),
            "{msg}"
        );
        std::fs::write(&file, "\n").unwrap();
        let msg = error(&from_file);
        assert!(
            msg.contains("password_file") && msg.contains("empty"),
            "{msg}"
        );
        let msg = error(&one("sqlite://a.db", "password_env = \"PATH\""));
        assert!(
            msg.contains("password_env") && msg.contains("PostgreSQL"),
            "{msg}"
        );
    }
}

//! [`DbError`]: why a call to one database failed, with the engine's error kept as its
//! source.

use std::error::Error;
use std::time::Duration;

/// The engine's own error behind a [`DbError`]: `tokio_postgres::Error`, deadpool's
/// `PoolError`, `rusqlite::Error`, `std::io::Error`.
pub type Cause = Box<dyn Error + Send + Sync + 'static>;

/// A failure talking to one database: unreachable, timed out, or a query error.
/// The database is backed off and another one is tried.
///
/// The text is what operators read (`/status`, `/readyz`, the CLI, logs), so a
/// variant's `message` holds the cause's text too; [`Error::source`] keeps the cause
/// itself for code that needs more than the text.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// No connection could be had: the pool could not be built or gave none (connect
    /// refused, authentication or TLS failed, no slot in time); for the embedded store,
    /// its file could not be looked for, created or opened.
    #[error("{message}")]
    Connect {
        message: String,
        #[source]
        source: Option<Cause>,
    },
    /// A call that did not answer within `after`; its outcome is unknown.
    #[error("timed out after {after:?}")]
    Timeout { after: Duration },
    /// A statement or its transaction failed, the commit included (PostgreSQL commits
    /// a lone statement at Sync, where a failed commit cannot be told apart from a
    /// failed statement); a write that failed so gives no IDs.
    #[error("{}{message}", code_prefix(.sqlstate.as_deref()))]
    Query {
        /// The SQLSTATE, when the server answered with one (`40001`, `42P01`).
        sqlstate: Option<String>,
        message: String,
        #[source]
        source: Option<Cause>,
    },
    /// The database went back in time (a row below what was seen or witnessed) and is
    /// fenced until an operator raises its rows.
    #[error("fenced: {reason}")]
    Fenced { reason: String },
    /// The database answered, but using it as it is could lose reservations or issue
    /// IDs again: an embedded store's file is missing, its journal cannot be WAL, a
    /// session does not commit synchronously.
    #[error("{reason}")]
    Refused { reason: String },
    /// The blocking task of an embedded store's call panicked or was cancelled.
    #[error("embedded database call failed: {source}")]
    Embedded {
        #[source]
        source: tokio::task::JoinError,
    },
}

/// What a failed call says about its database, for its back-off and its metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Unreachable, timed out, or failing: backed off, the back-off doubling with each
    /// consecutive failure.
    Down,
    /// The database answered and a retry may succeed at once: the transaction lost to
    /// another (serialization failure, deadlock, a lock not available, an embedded file
    /// busy with another process's write). Not a failure of the database: no back-off,
    /// and a reservation counts it as a lost race and tries again.
    Transient,
    /// The database answered, but may not be used as it is (a durability setting, a
    /// missing file, a fence): backed off for the longest back-off at once, since no
    /// retry soon will find it changed.
    Unusable,
}

/// SQLSTATE prefixes of failures a retry may not meet: class 40 (transaction
/// rollback: `40001` serialization failure, `40P01` deadlock) and `55P03` (lock not
/// available).
const TRANSIENT_SQLSTATES: &[&str] = &["40", "55P03"];

/// Whether `e` is SQLite's "database is busy" or "locked": another connection holds
/// the write lock past the busy timeout.
fn sqlite_busy(e: &(dyn Error + Send + Sync + 'static)) -> bool {
    matches!(
        e.downcast_ref::<rusqlite::Error>(),
        Some(rusqlite::Error::SqliteFailure(f, _))
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// `"40001: "` before a query error's message, when the server gave a SQLSTATE.
fn code_prefix(sqlstate: Option<&str>) -> String {
    sqlstate.map(|code| format!("{code}: ")).unwrap_or_default()
}

impl DbError {
    /// A connection that could not be had, described by `message`, caused by `source`.
    pub fn connect(message: impl Into<String>, source: impl Into<Cause>) -> DbError {
        DbError::Connect {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// What this failure says about the database's health, which decides its back-off
    /// ([`Verdict`]).
    pub fn verdict(&self) -> Verdict {
        match self {
            DbError::Connect { .. } | DbError::Timeout { .. } | DbError::Embedded { .. } => {
                Verdict::Down
            }
            DbError::Refused { .. } | DbError::Fenced { .. } => Verdict::Unusable,
            DbError::Query {
                sqlstate, source, ..
            } => match sqlstate.as_deref() {
                Some(code) if TRANSIENT_SQLSTATES.iter().any(|t| code.starts_with(t)) => {
                    Verdict::Transient
                }
                Some(_) => Verdict::Down,
                None if source.as_deref().is_some_and(sqlite_busy) => Verdict::Transient,
                None => Verdict::Down,
            },
        }
    }

    /// The SQLSTATE of a query error, if the server gave one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            DbError::Query { sqlstate, .. } => sqlstate.as_deref(),
            _ => None,
        }
    }
}

/// The error and its chain of causes ("error connecting to server: Connection refused"),
/// each cause once.
pub(super) fn with_causes(e: &dyn Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(sqlstate: Option<&str>, source: Option<Cause>) -> DbError {
        DbError::Query {
            sqlstate: sqlstate.map(String::from),
            message: "m".into(),
            source,
        }
    }

    #[test]
    fn the_verdict_follows_the_kind_and_the_sqlstate() {
        for code in ["40001", "40P01", "55P03"] {
            assert_eq!(
                query(Some(code), None).verdict(),
                Verdict::Transient,
                "{code}"
            );
        }
        // Undefined table, admin shutdown, too many connections, a connection failure.
        for code in ["42P01", "57P01", "53300", "08006"] {
            assert_eq!(query(Some(code), None).verdict(), Verdict::Down, "{code}");
        }
        assert_eq!(query(None, None).verdict(), Verdict::Down);
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        assert_eq!(
            query(None, Some(Box::new(busy))).verdict(),
            Verdict::Transient
        );
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        );
        assert_eq!(query(None, Some(Box::new(full))).verdict(), Verdict::Down);
        assert_eq!(
            DbError::Timeout {
                after: Duration::from_secs(1)
            }
            .verdict(),
            Verdict::Down
        );
        assert_eq!(
            DbError::connect("refused", std::io::Error::other("x")).verdict(),
            Verdict::Down
        );
        assert_eq!(
            DbError::Refused { reason: "r".into() }.verdict(),
            Verdict::Unusable
        );
        assert_eq!(
            DbError::Fenced { reason: "r".into() }.verdict(),
            Verdict::Unusable
        );
    }

    #[test]
    fn a_query_error_keeps_its_sqlstate_in_value_and_text() {
        let e = DbError::Query {
            sqlstate: Some("40001".into()),
            message: "could not serialize access due to concurrent update".into(),
            source: None,
        };
        assert_eq!(e.sqlstate(), Some("40001"));
        assert_eq!(
            e.to_string(),
            "40001: could not serialize access due to concurrent update"
        );
        let plain = DbError::Query {
            sqlstate: None,
            message: "connection closed".into(),
            source: None,
        };
        assert_eq!(plain.sqlstate(), None);
        assert_eq!(plain.to_string(), "connection closed");
    }

    #[test]
    fn a_wrapped_error_stays_the_source() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = DbError::connect("cannot open /x: refused", io);
        let source = e.source().expect("the cause is kept");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("as the engine's own type");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
        assert_eq!(e.to_string(), "cannot open /x: refused");
        assert!(
            DbError::Timeout {
                after: Duration::ZERO
            }
            .source()
            .is_none()
        );
    }

    #[test]
    fn texts_stay_as_operators_know_them() {
        let fenced = DbError::Fenced {
            reason: "biz `order` row (3, 300) is below what was seen (5, 500)".into(),
        };
        assert_eq!(
            fenced.to_string(),
            "fenced: biz `order` row (3, 300) is below what was seen (5, 500)"
        );
        assert_eq!(
            DbError::Timeout {
                after: Duration::from_millis(1500)
            }
            .to_string(),
            "timed out after 1.5s"
        );
    }

    #[test]
    fn causes_are_joined_once_each() {
        let inner = std::io::Error::other("Connection refused");
        let outer = DbError::connect("error connecting to server", inner);
        assert_eq!(
            with_causes(&outer),
            "error connecting to server: Connection refused"
        );
        let repeated = DbError::connect(
            "error: Connection refused",
            std::io::Error::other("Connection refused"),
        );
        assert_eq!(with_causes(&repeated), "error: Connection refused");
    }
}

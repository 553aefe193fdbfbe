//! An embedded database: one SQLite file, for single-node deployments, demos and
//! development. Same tables and the same compare-and-set as PostgreSQL.
//!
//! Durability: WAL journal with `synchronous = FULL`, so a reservation that returned
//! survives a crash or power loss. Several processes may share one file: SQLite's
//! file locks serialise their writes, and the version check does the rest.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use super::{BizRow, DbError, Mark, SegmentStore, TokenRow, Witness};

/// Schema migrations, applied in order, each once per file.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../../sql/sqlite/0001_init.sql")),
    (
        2,
        "witness",
        include_str!("../../sql/sqlite/0002_witness.sql"),
    ),
];

const BIZ_COLUMNS: &str = "biz_type, begin_id, max_id, step, delta, remainder, version";

/// One SQLite file.
pub struct SqliteStore {
    /// One connection; calls run one at a time on the blocking pool. Plain mutex: it is
    /// only ever held inside `spawn_blocking`, never across an await.
    conn: Arc<Mutex<Connection>>,
}

impl SqliteStore {
    /// Opens (creating if needed) the file at `path` and brings its schema up to date.
    /// Waits up to `timeout` for a lock held by another process.
    ///
    /// # Errors
    /// [`DbError`] when the file cannot be opened, created or migrated.
    pub fn open(path: &Path, timeout: Duration) -> Result<SqliteStore, DbError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| DbError(format!("cannot create {}: {e}", dir.display())))?;
        }
        let conn = Connection::open(path)
            .map_err(|e| DbError(format!("cannot open {}: {e}", path.display())))?;
        conn.busy_timeout(timeout).map_err(sql_error)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(sql_error)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(DbError(format!(
                "{}: cannot use the WAL journal (got {mode})",
                path.display()
            )));
        }
        conn.execute_batch("PRAGMA synchronous = FULL")
            .map_err(sql_error)?;
        let store = SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
        };
        migrate(&mut store.conn.lock())?;
        Ok(store)
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, DbError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || f(&mut conn.lock()).map_err(sql_error))
            .await
            .map_err(|e| DbError(format!("embedded database call failed: {e}")))?
    }
}

fn sql_error(e: rusqlite::Error) -> DbError {
    DbError(e.to_string())
}

fn migrate(conn: &mut Connection) -> Result<Vec<String>, DbError> {
    // IMMEDIATE takes the write lock at once: concurrent migrations queue.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql_error)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS segmint_migrations (
             version INTEGER PRIMARY KEY,
             name TEXT NOT NULL,
             applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
    )
    .map_err(sql_error)?;
    let mut done = Vec::new();
    for (version, name, sql) in MIGRATIONS {
        let applied: Option<i64> = tx
            .query_row(
                "SELECT version FROM segmint_migrations WHERE version = ?1",
                [version],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql_error)?;
        if applied.is_some() {
            continue;
        }
        tx.execute_batch(sql).map_err(sql_error)?;
        tx.execute(
            "INSERT INTO segmint_migrations (version, name) VALUES (?1, ?2)",
            params![version, name],
        )
        .map_err(sql_error)?;
        done.push(format!("{version:04}_{name}"));
    }
    tx.commit().map_err(sql_error)?;
    Ok(done)
}

fn biz_row(row: &Row) -> rusqlite::Result<BizRow> {
    Ok(BizRow {
        biz_type: row.get(0)?,
        begin_id: row.get(1)?,
        max_id: row.get(2)?,
        step: row.get(3)?,
        delta: row.get(4)?,
        remainder: row.get(5)?,
        version: row.get(6)?,
    })
}

#[async_trait]
impl SegmentStore for SqliteStore {
    async fn migrate(&self) -> Result<Vec<String>, DbError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || migrate(&mut conn.lock()))
            .await
            .map_err(|e| DbError(format!("embedded database call failed: {e}")))?
    }

    async fn ping(&self) -> Result<(), DbError> {
        self.with(|c| c.query_row("SELECT 1", [], |_| Ok(()))).await
    }

    async fn biz(&self, biz: &str) -> Result<Option<BizRow>, DbError> {
        let biz = biz.to_owned();
        self.with(move |c| {
            c.prepare_cached(&format!(
                "SELECT {BIZ_COLUMNS} FROM tiny_id_info WHERE biz_type = ?1"
            ))?
            .query_row([biz], biz_row)
            .optional()
        })
        .await
    }

    async fn advance(
        &self,
        biz: &str,
        version: i64,
        max_id: i64,
        new_max_id: i64,
    ) -> Result<Option<BizRow>, DbError> {
        self.raise(biz, version, max_id, version + 1, new_max_id)
            .await
    }

    async fn raise(
        &self,
        biz: &str,
        version: i64,
        max_id: i64,
        new_version: i64,
        new_max_id: i64,
    ) -> Result<Option<BizRow>, DbError> {
        let biz = biz.to_owned();
        self.with(move |c| {
            c.prepare_cached(&format!(
                "UPDATE tiny_id_info SET max_id = ?5, version = ?4, update_time = CURRENT_TIMESTAMP
                 WHERE biz_type = ?1 AND version = ?2 AND max_id = ?3
                 RETURNING {BIZ_COLUMNS}"
            ))?
            .query_row(
                params![biz, version, max_id, new_version, new_max_id],
                biz_row,
            )
            .optional()
        })
        .await
    }

    async fn witness(&self, witnesses: &[Witness]) -> Result<(), DbError> {
        let witnesses = witnesses.to_vec();
        self.with(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut stmt = tx.prepare_cached(
                    "INSERT INTO segmint_witness (database, biz_type, version, max_id, high_id)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (database, biz_type) DO UPDATE SET
                         max_id = CASE WHEN excluded.version > segmint_witness.version
                                  THEN excluded.max_id ELSE segmint_witness.max_id END,
                         version = max(segmint_witness.version, excluded.version),
                         high_id = max(segmint_witness.high_id, excluded.high_id),
                         update_time = CURRENT_TIMESTAMP",
                )?;
                for w in &witnesses {
                    stmt.execute(params![
                        w.database,
                        w.biz,
                        w.mark.version,
                        w.mark.max_id,
                        w.mark.high_id
                    ])?;
                }
            }
            tx.commit()
        })
        .await
    }

    async fn witnesses(&self) -> Result<Vec<Witness>, DbError> {
        self.with(|c| {
            c.prepare_cached(
                "SELECT database, biz_type, version, max_id, high_id FROM segmint_witness",
            )?
            .query_map([], |r| {
                Ok(Witness {
                    database: r.get(0)?,
                    biz: r.get(1)?,
                    mark: Mark {
                        version: r.get(2)?,
                        max_id: r.get(3)?,
                        high_id: r.get(4)?,
                    },
                })
            })?
            .collect()
        })
        .await
    }

    async fn bizs(&self) -> Result<Vec<BizRow>, DbError> {
        self.with(|c| {
            c.prepare_cached(&format!(
                "SELECT {BIZ_COLUMNS} FROM tiny_id_info ORDER BY biz_type"
            ))?
            .query_map([], biz_row)?
            .collect()
        })
        .await
    }

    async fn insert_biz(&self, row: &BizRow) -> Result<bool, DbError> {
        let row = row.clone();
        self.with(move |c| {
            let n = c.execute(
                "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder, version)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (biz_type) DO NOTHING",
                params![row.biz_type, row.begin_id, row.max_id, row.step, row.delta, row.remainder, row.version],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn tokens(&self) -> Result<Vec<TokenRow>, DbError> {
        self.with(|c| {
            c.prepare_cached("SELECT id, token, biz_type, remark, create_time || ' UTC' FROM tiny_id_token ORDER BY id")?
                .query_map([], |r| {
                    Ok(TokenRow {
                        id: r.get(0)?,
                        token_hash: r.get(1)?,
                        biz_type: r.get(2)?,
                        remark: r.get(3)?,
                        create_time: r.get(4)?,
                    })
                })?
                .collect()
        })
        .await
    }

    async fn insert_token(&self, token_hash: &str, biz: &str, remark: &str) -> Result<(), DbError> {
        let (hash, biz, remark) = (token_hash.to_owned(), biz.to_owned(), remark.to_owned());
        self.with(move |c| {
            c.execute(
                "INSERT INTO tiny_id_token (token, biz_type, remark) VALUES (?1, ?2, ?3)
                 ON CONFLICT (token, biz_type) DO NOTHING",
                params![hash, biz, remark],
            )?;
            Ok(())
        })
        .await
    }
}

//! An embedded database: one SQLite file, for single-node deployments, demos and
//! development. Same tables and the same compare-and-set as PostgreSQL.
//!
//! Durability: WAL journal with `synchronous = FULL`, so a reservation that returned
//! survives a crash or power loss. Several processes may share one file: SQLite's
//! file locks serialise their writes, and the version check does the rest.
//!
//! Every write runs through [`write`]: an explicit transaction whose `COMMIT` result is
//! checked. An autocommit statement commits when it is reset, and rusqlite drops the
//! result of that reset, so a commit that failed (a full disk, an I/O error) would roll
//! the row back while the caller went on with the new one and issued its IDs twice.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Row, Transaction, TransactionBehavior, params,
};

use super::rules::{
    self, BIZ_COLUMNS, Cells, LAYOUT_COLUMNS, LEASE_COLUMNS, Migration, SECTION_COLUMNS,
    SHAPE_COLUMNS, WITNESS_COLUMNS, migrations,
};
use super::{
    BizRow, CatalogRows, DbError, FeedPosition, Inserted, LayoutRow, LeaseRenewal, LeaseRow,
    LeaseSet, RowWrite, SectionRow, SectionWrite, SegmentStore, ShapeRow, TokenRow, Witness,
};

/// Schema migrations, applied in order, each once per file.
const MIGRATIONS: &[Migration] = migrations!("sqlite");

/// The token rows, as [`rules::token_row`] reads them. A time written by hand in
/// another format reads as 0 rather than failing the catalog read: a token so expired
/// or revoked stays so.
const TOKENS: &str = "SELECT id, token, biz_type, remark, coalesce(unixepoch(create_time), 0),
        iif(expire_time IS NULL, NULL, coalesce(unixepoch(expire_time), 0)),
        iif(revoke_time IS NULL, NULL, coalesce(unixepoch(revoke_time), 0)),
        unixepoch(last_used_time)
    FROM tiny_id_token";

/// The database's clock in Unix milliseconds (`julianday('now')` has millisecond
/// precision and is fixed for the duration of one statement).
const NOW_MS: &str = "CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

/// One SQLite file.
pub struct SqliteStore {
    /// One connection; calls run one at a time on the blocking pool. Plain mutex: it is
    /// only ever held inside `spawn_blocking`, never across an await.
    conn: Arc<Mutex<Connection>>,
    /// Set by a call that found the disk full: the next call first checkpoints the
    /// write-ahead log and truncates it, so that the space it holds returns to the file
    /// system (else, on a small one, the log grows into the space freed and fills it
    /// again before SQLite's own checkpoint).
    reclaim: Arc<std::sync::atomic::AtomicBool>,
}

/// The write-ahead log is checkpointed at this many pages of 4 KB (1 MB; SQLite's
/// default is 1000) and truncated to this size after each checkpoint: on a small file
/// system the log stays small.
const WAL_PAGES: u32 = 256;
const WAL_BYTES: u32 = WAL_PAGES * 4096;

/// Checkpoints the write-ahead log and truncates it to nothing; whether it was (no
/// reader or writer of another process held it).
fn reclaim_space(conn: &Connection) -> bool {
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
        r.get::<_, i64>(0)
    })
    .is_ok_and(|busy| busy == 0)
}

/// Whether `e` says the disk (or the file system) is full.
fn is_disk_full(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
}

/// Whether opening an embedded store may create its file. A missing file is the usual
/// sign of a store that was lost, not of a new one: another working directory, a
/// container started without its volume, a deleted file. A new store there would issue
/// from the beginning again, every ID a second time; so only an explicit initialisation
/// or a genuine first start creates one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Create the file (and its directory) if missing: `segmint migrate`,
    /// `segmint serve --init`, programs that set up their own stores.
    Create,
    /// Create the file only together with its directory: nothing can have been stored
    /// where no directory was (the quick start's first `segmint serve`). A directory
    /// without the file is refused.
    FirstStart,
    /// The file must exist.
    Existing,
}

impl OpenMode {
    /// Why the missing file at `path` must not be created, if it must not.
    fn refuse_missing(self, path: &Path) -> Option<String> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let absolute = absolute(path);
        let cwd = std::env::current_dir()
            .map(|d| format!(" (working directory {})", d.display()))
            .unwrap_or_default();
        let fix = "restore the file or point the configuration at it; to start a new store \
                   on purpose, run `segmint migrate` (or `segmint serve --init`)";
        match self {
            OpenMode::Create => None,
            OpenMode::FirstStart if dir.is_some_and(|d| !d.exists()) => None,
            OpenMode::FirstStart => Some(format!(
                "embedded store {} not found{cwd}: its directory exists, so this is not a \
                 first start; the store may have moved, been deleted or be on a volume that \
                 is not mounted, and a new one would issue IDs that were issued before; {fix}",
                absolute.display()
            )),
            OpenMode::Existing => Some(format!(
                "embedded store {} not found{cwd}; {fix}",
                absolute.display()
            )),
        }
    }
}

/// `path` made absolute, for messages read far from the working directory.
fn absolute(path: &Path) -> std::path::PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

impl SqliteStore {
    /// Opens the file at `path` (creating it only as `mode` allows) and brings its
    /// schema up to date. Waits up to `timeout` for a lock held by another process.
    ///
    /// # Errors
    /// [`DbError`] when the file is missing and `mode` forbids creating it, or cannot
    /// be opened, created or migrated.
    pub fn open(path: &Path, timeout: Duration, mode: OpenMode) -> Result<SqliteStore, DbError> {
        let mut flags = OpenFlags::default();
        let missing = !path
            .try_exists()
            .map_err(|e| DbError::connect(format!("cannot look for {}: {e}", path.display()), e))?;
        if missing {
            if let Some(refused) = mode.refuse_missing(path) {
                return Err(DbError::Refused { reason: refused });
            }
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| {
                    DbError::connect(format!("cannot create {}: {e}", dir.display()), e)
                })?;
            }
            // Said loudly: a store created in the wrong place starts from the beginning.
            tracing::warn!(path = %absolute(path).display(), "creating a new embedded store");
        } else {
            // Deleted between the look and the open: still not ours to create.
            flags.remove(OpenFlags::SQLITE_OPEN_CREATE);
        }
        let conn = Connection::open_with_flags(path, flags)
            .map_err(|e| DbError::connect(format!("cannot open {}: {e}", path.display()), e))?;
        conn.busy_timeout(timeout).map_err(sql_error)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(sql_error)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(DbError::Refused {
                reason: format!(
                    "{}: cannot use the WAL journal (got {mode})",
                    path.display()
                ),
            });
        }
        conn.execute_batch(&format!(
            "PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = {WAL_PAGES}; PRAGMA journal_size_limit = {WAL_BYTES}"
        ))
        .map_err(sql_error)?;
        let store = SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            reclaim: Arc::default(),
        };
        migrate(&mut store.conn.lock())?;
        Ok(store)
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, DbError> {
        use std::sync::atomic::Ordering::Relaxed;
        let (conn, reclaim) = (self.conn.clone(), self.reclaim.clone());
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock();
            if reclaim.load(Relaxed) && reclaim_space(&conn) {
                tracing::info!(
                    "the write-ahead log is checkpointed and truncated after a full disk"
                );
                reclaim.store(false, Relaxed);
            }
            let result = f(&mut conn);
            if result.as_ref().is_err_and(is_disk_full) {
                reclaim.store(true, Relaxed);
            }
            result.map_err(sql_error)
        })
        .await
        .map_err(|source| DbError::Embedded { source })?
    }

    /// Runs `sql`, an UPDATE of token rows taking the hash as `?1` and a time as `?2`,
    /// in a write transaction. Returns the number of rows updated.
    async fn update_tokens(
        &self,
        sql: &'static str,
        token_hash: &str,
        at: i64,
    ) -> Result<u64, DbError> {
        let hash = token_hash.to_owned();
        self.with(move |c| write(c, |tx| tx.execute(sql, params![hash, at])))
            .await
            .map(|n| n as u64)
    }
}

fn sql_error(e: rusqlite::Error) -> DbError {
    DbError::Query {
        sqlstate: None,
        message: e.to_string(),
        source: Some(Box::new(e)),
    }
}

/// Runs `f` in a transaction and commits it; the result counts only once the commit
/// has succeeded. IMMEDIATE takes the write lock at once, so writers from several
/// processes queue on the busy timeout instead of failing on a lock upgrade. On any
/// error the transaction is rolled back when dropped.
fn write<T>(
    conn: &mut Connection,
    f: impl FnOnce(&Transaction) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let out = f(&tx)?;
    tx.commit()?;
    Ok(out)
}

/// Writes a section's row in transaction `tx` if it is still at the version read (an
/// insert if still absent). As on PostgreSQL, `expires_ms - lease_ms` is the
/// database's clock, fixed for the statement.
fn write_section_in(tx: &Transaction, w: &SectionWrite) -> rusqlite::Result<Option<SectionRow>> {
    let section = rules::section_number(w.section);
    match w.expected {
        Some(version) => tx
            .prepare_cached(&format!(
                "UPDATE segmint_sequence_section SET holder = ?3,
                     version = version + 1, bound = ?4,
                     expires_ms = {NOW_MS} + ?5, update_time = CURRENT_TIMESTAMP
                 WHERE biz_type = ?1 AND section = ?2 AND version = ?6
                 RETURNING {SECTION_COLUMNS}, expires_ms - ?5"
            ))?
            .query_row(
                params![w.biz, section, w.holder, w.bound, w.lease_ms, version],
                |r| rules::section_row(r),
            )
            .optional(),
        None => tx
            .prepare_cached(&format!(
                "INSERT INTO segmint_sequence_section (biz_type, section, {SECTION_COLUMNS})
                 VALUES (?1, ?2, ?3, 1, ?4, {NOW_MS} + ?5)
                 ON CONFLICT (biz_type, section) DO NOTHING
                 RETURNING {SECTION_COLUMNS}, expires_ms - ?5"
            ))?
            .query_row(
                params![w.biz, section, w.holder, w.bound, w.lease_ms],
                |r| rules::section_row(r),
            )
            .optional(),
    }
}

fn migrate(conn: &mut Connection) -> Result<Vec<String>, DbError> {
    write(conn, |tx| {
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS segmint_migrations (
                 version INTEGER PRIMARY KEY,
                 name TEXT NOT NULL,
                 applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
        )?;
        let applied = tx
            .prepare("SELECT version FROM segmint_migrations")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<i32>>>()?;
        let mut done = Vec::new();
        for migration @ (version, name, sql) in rules::pending(MIGRATIONS, &applied) {
            tx.execute_batch(sql)?;
            tx.execute(
                "INSERT INTO segmint_migrations (version, name) VALUES (?1, ?2)",
                params![version, name],
            )?;
            done.push(rules::migration_name(migration));
        }
        Ok(done)
    })
    .map_err(sql_error)
}

impl Cells for Row<'_> {
    type Error = rusqlite::Error;
    fn int(&self, i: usize) -> rusqlite::Result<i64> {
        self.get(i)
    }
    fn int32(&self, i: usize) -> rusqlite::Result<i32> {
        self.get(i)
    }
    fn opt_int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }
    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.get(i)
    }
    fn flag(&self, i: usize) -> rusqlite::Result<bool> {
        self.get(i)
    }
}

#[async_trait]
impl SegmentStore for SqliteStore {
    async fn migrate(&self) -> Result<Vec<String>, DbError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || migrate(&mut conn.lock()))
            .await
            .map_err(|source| DbError::Embedded { source })?
    }

    async fn ping(&self) -> Result<(), DbError> {
        self.with(|c| c.query_row("SELECT 1", [], |_| Ok(()))).await
    }

    async fn clock_ms(&self) -> Result<i64, DbError> {
        self.with(|c| c.query_row(&format!("SELECT {NOW_MS}"), [], |r| r.get(0)))
            .await
    }

    async fn biz(&self, biz: &str) -> Result<Option<BizRow>, DbError> {
        let biz = biz.to_owned();
        self.with(move |c| {
            c.prepare_cached(&format!(
                "SELECT {BIZ_COLUMNS} FROM tiny_id_info WHERE biz_type = ?1"
            ))?
            .query_row([biz], |r| rules::biz_row(r))
            .optional()
        })
        .await
    }

    async fn write_row(
        &self,
        biz: &str,
        version: i64,
        max_id: i64,
        to: &RowWrite,
    ) -> Result<Option<BizRow>, DbError> {
        let (biz, to) = (biz.to_owned(), *to);
        let class = to.class;
        // A NULL keeps the column: without a class, a write leaves class, epoch, frozen
        // state and claim as they are, even if edited since the caller's read.
        self.with(move |c| {
            write(c, |tx| {
                tx.prepare_cached(&format!(
                    "UPDATE tiny_id_info SET version = ?4, max_id = ?5,
                         delta = coalesce(?6, delta), remainder = coalesce(?7, remainder),
                         layout_epoch = coalesce(?8, layout_epoch), frozen = coalesce(?9, frozen),
                         claimed_by = coalesce(?10, claimed_by), update_time = CURRENT_TIMESTAMP
                     WHERE biz_type = ?1 AND version = ?2 AND max_id = ?3
                     RETURNING {BIZ_COLUMNS}"
                ))?
                .query_row(
                    params![
                        biz,
                        version,
                        max_id,
                        to.version,
                        to.max_id,
                        class.map(|c| c.delta),
                        class.map(|c| c.remainder),
                        class.map(|c| c.epoch),
                        class.map(|c| c.frozen),
                        class.map(|c| c.claimed_by)
                    ],
                    |r| rules::biz_row(r),
                )
                .optional()
            })
        })
        .await
    }

    async fn witness(&self, witnesses: &[Witness]) -> Result<(), DbError> {
        let witnesses = witnesses.to_vec();
        self.with(move |c| {
            write(c, |tx| {
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
                Ok(())
            })
        })
        .await
    }

    async fn witness_rows(&self, biz: Option<&str>) -> Result<Vec<Witness>, DbError> {
        let biz = biz.map(str::to_owned);
        self.with(move |c| {
            c.prepare_cached(&format!(
                "SELECT {WITNESS_COLUMNS} FROM segmint_witness WHERE ?1 IS NULL OR biz_type = ?1"
            ))?
            .query_map([biz], |r| rules::witness_row(r))?
            .collect()
        })
        .await
    }

    async fn bizs(&self) -> Result<Vec<BizRow>, DbError> {
        self.with(|c| {
            c.prepare_cached(&format!(
                "SELECT {BIZ_COLUMNS} FROM tiny_id_info ORDER BY biz_type"
            ))?
            .query_map([], |r| rules::biz_row(r))?
            .collect()
        })
        .await
    }

    async fn insert_bizs(&self, rows: &[BizRow]) -> Result<Vec<Inserted>, DbError> {
        let rows = rows.to_vec();
        let Some(epoch) = rows.iter().map(|r| r.epoch).min() else {
            return Ok(Vec::new());
        };
        self.with(move |c| {
            // An immediate transaction: no claim of a layout can come between the
            // check and the inserts.
            write(c, |tx| {
                let above: Option<i64> = tx.query_row(
                    "SELECT max(epoch) FROM segmint_layout WHERE epoch > ?1",
                    params![epoch],
                    |r| r.get(0),
                )?;
                if let Some(above) = above {
                    return Ok(vec![Inserted::LayoutAbove(above); rows.len()]);
                }
                let mut insert = tx.prepare_cached(&format!(
                    "INSERT INTO tiny_id_info ({BIZ_COLUMNS})
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT (biz_type) DO NOTHING"
                ))?;
                rows.iter()
                    .map(|row| {
                        let n = insert.execute(params![row.biz_type.as_str(), row.begin_id, row.max_id, row.step, row.delta, row.remainder, row.version, row.description, row.epoch, row.frozen, row.claimed_by])?;
                        Ok(if n == 1 { Inserted::Yes } else { Inserted::Exists })
                    })
                    .collect()
            })
        })
        .await
    }

    async fn shapes(&self) -> Result<Vec<ShapeRow>, DbError> {
        self.with(|c| {
            c.prepare_cached(&format!(
                "SELECT {SHAPE_COLUMNS} FROM segmint_biz_shape ORDER BY biz_type"
            ))?
            .query_map([], |r| rules::shape_row(r))?
            .collect()
        })
        .await
    }

    async fn put_shape(&self, r: &ShapeRow) -> Result<(), DbError> {
        let r = r.clone();
        self.with(move |c| {
            write(c, |tx| {
                tx.execute(
                    &format!(
                        "INSERT INTO segmint_biz_shape ({SHAPE_COLUMNS})
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
                         ON CONFLICT (biz_type) DO UPDATE SET id_order = excluded.id_order,
                             block = excluded.block, domain = excluded.domain,
                             within_delta = excluded.within_delta,
                             within_remainder = excluded.within_remainder,
                             shape_key = excluded.shape_key, prefix = excluded.prefix,
                             width = excluded.width, base = excluded.base,
                             check_char = excluded.check_char, as_string = excluded.as_string,
                             period_spec = excluded.period_spec"
                    ),
                    params![
                        r.biz_type,
                        r.id_order,
                        r.block,
                        r.domain,
                        r.within_delta,
                        r.within_remainder,
                        r.key,
                        r.prefix,
                        r.width,
                        r.base,
                        r.check_char,
                        r.as_string,
                        r.period
                    ],
                )
            })
        })
        .await
        .map(|_| ())
    }

    async fn describe(&self, biz: &str, description: &str) -> Result<bool, DbError> {
        let (biz, description) = (biz.to_owned(), description.to_owned());
        self.with(move |c| {
            write(c, |tx| {
                tx.execute(
                    "UPDATE tiny_id_info SET description = ?2, update_time = CURRENT_TIMESTAMP
                     WHERE biz_type = ?1",
                    params![biz, description],
                )
            })
        })
        .await
        .map(|n| n == 1)
    }

    async fn tokens(&self) -> Result<Vec<TokenRow>, DbError> {
        self.with(|c| {
            c.prepare_cached(&format!("{TOKENS} ORDER BY id"))?
                .query_map([], |r| rules::token_row(r))?
                .collect()
        })
        .await
    }

    async fn insert_token(
        &self,
        token_hash: &str,
        biz: &str,
        remark: &str,
        expires: Option<i64>,
    ) -> Result<(), DbError> {
        let (hash, biz, remark) = (token_hash.to_owned(), biz.to_owned(), remark.to_owned());
        self.with(move |c| {
            write(c, |tx| {
                tx.execute(
                    "INSERT INTO tiny_id_token (token, biz_type, remark, expire_time)
                     VALUES (?1, ?2, ?3, datetime(?4, 'unixepoch'))
                     ON CONFLICT (token, biz_type) DO NOTHING",
                    params![hash, biz, remark, expires],
                )
            })?;
            Ok(())
        })
        .await
    }

    async fn revoke_tokens(&self, token_hash: &str, at: i64) -> Result<u64, DbError> {
        self.update_tokens(
            "UPDATE tiny_id_token SET revoke_time = datetime(?2, 'unixepoch'), update_time = CURRENT_TIMESTAMP
             WHERE lower(token) = ?1 AND revoke_time IS NULL",
            token_hash,
            at,
        )
        .await
    }

    async fn expire_token(&self, token_hash: &str, at: i64) -> Result<u64, DbError> {
        self.update_tokens(
            "UPDATE tiny_id_token SET expire_time = datetime(?2, 'unixepoch'), update_time = CURRENT_TIMESTAMP
             WHERE lower(token) = ?1
               AND (expire_time IS NULL OR expire_time > datetime(?2, 'unixepoch'))",
            token_hash,
            at,
        )
        .await
    }

    async fn touch_tokens(&self, uses: &[(String, i64)]) -> Result<(), DbError> {
        let uses = uses.to_vec();
        self.with(move |c| {
            write(c, |tx| {
                let mut stmt = tx.prepare_cached(
                    "UPDATE tiny_id_token SET last_used_time = datetime(?2, 'unixepoch')
                     WHERE lower(token) = ?1
                       AND (last_used_time IS NULL OR last_used_time < datetime(?2, 'unixepoch'))",
                )?;
                for (hash, at) in &uses {
                    stmt.execute(params![hash, at])?;
                }
                Ok(())
            })
        })
        .await
    }

    async fn catalog(&self, since: Option<&FeedPosition>) -> Result<CatalogRows, DbError> {
        let since = since.cloned();
        self.with(move |c| {
            // A deferred transaction reads one snapshot from its first SELECT on.
            let tx = c.transaction()?;
            let position = tx.query_row(
                "SELECT n + 1, incarnation || '/' || deletions FROM segmint_change WHERE id = 1",
                [],
                |r| {
                    Ok(FeedPosition {
                        next: r.get(0)?,
                        incarnation: r.get(1)?,
                    })
                },
            )?;
            let from = rules::resume_at(since.as_ref(), &position);
            let from_n = from.unwrap_or(i64::MIN);
            let prepare = |sql: String| tx.prepare_cached(&sql);
            let bizs = prepare(format!(
                "SELECT {BIZ_COLUMNS} FROM tiny_id_info WHERE change_n >= ?1 ORDER BY biz_type"
            ))?
            .query_map([from_n], |r| rules::biz_row(r))?
            .collect::<rusqlite::Result<_>>()?;
            let shapes = prepare(format!(
                "SELECT {SHAPE_COLUMNS} FROM segmint_biz_shape WHERE change_n >= ?1 ORDER BY biz_type"
            ))?
            .query_map([from_n], |r| rules::shape_row(r))?
            .collect::<rusqlite::Result<_>>()?;
            let tokens = prepare(format!("{TOKENS} WHERE change_n >= ?1 ORDER BY id"))?
                .query_map([from_n], |r| rules::token_row(r))?
                .collect::<rusqlite::Result<_>>()?;
            let witnesses = prepare(format!(
                "SELECT {WITNESS_COLUMNS} FROM segmint_witness WHERE change_n >= ?1"
            ))?
            .query_map([from_n], |r| rules::witness_row(r))?
            .collect::<rusqlite::Result<_>>()?;
            let layouts = prepare(format!(
                "SELECT {LAYOUT_COLUMNS} FROM segmint_layout ORDER BY epoch"
            ))?
            .query_map([], |r| rules::layout_row(r))?
            .collect::<rusqlite::Result<_>>()?;
            tx.commit()?;
            Ok(CatalogRows {
                position: Some(position),
                full: from.is_none(),
                bizs,
                shapes,
                tokens,
                witnesses,
                layouts,
            })
        })
        .await
    }

    async fn catalog_of(
        &self,
        biz: &str,
        token_hash: Option<&str>,
        databases: &[String],
    ) -> Result<CatalogRows, DbError> {
        let (biz, token_hash, databases) = (
            biz.to_owned(),
            token_hash.map(str::to_owned),
            databases.to_vec(),
        );
        self.with(move |c| {
            // A deferred transaction reads one snapshot from its first SELECT on.
            let tx = c.transaction()?;
            let prepare = |sql: String| tx.prepare_cached(&sql);
            let bizs = prepare(format!(
                "SELECT {BIZ_COLUMNS} FROM tiny_id_info WHERE biz_type = ?1"
            ))?
            .query_map([&biz], |r| rules::biz_row(r))?
            .collect::<rusqlite::Result<_>>()?;
            let shapes = prepare(format!(
                "SELECT {SHAPE_COLUMNS} FROM segmint_biz_shape WHERE biz_type = ?1"
            ))?
            .query_map([&biz], |r| rules::shape_row(r))?
            .collect::<rusqlite::Result<_>>()?;
            let tokens = prepare(format!("{TOKENS} WHERE token = ?1 ORDER BY id"))?
                .query_map([&token_hash], |r| rules::token_row(r))?
                .collect::<rusqlite::Result<_>>()?;
            let mut witnesses = Vec::new();
            let mut by_key = prepare(format!(
                "SELECT {WITNESS_COLUMNS} FROM segmint_witness WHERE database = ?1 AND biz_type = ?2"
            ))?;
            for database in &databases {
                for w in by_key.query_map([database, &biz], |r| rules::witness_row(r))? {
                    witnesses.push(w?);
                }
            }
            drop(by_key);
            let layouts = prepare(format!(
                "SELECT {LAYOUT_COLUMNS} FROM segmint_layout ORDER BY epoch"
            ))?
            .query_map([], |r| rules::layout_row(r))?
            .collect::<rusqlite::Result<_>>()?;
            tx.commit()?;
            Ok(CatalogRows {
                position: None,
                full: false,
                bizs,
                shapes,
                tokens,
                witnesses,
                layouts,
            })
        })
        .await
    }

    async fn layouts(&self) -> Result<Vec<LayoutRow>, DbError> {
        self.with(|c| {
            c.prepare_cached(&format!(
                "SELECT {LAYOUT_COLUMNS} FROM segmint_layout ORDER BY epoch"
            ))?
            .query_map([], |r| rules::layout_row(r))?
            .collect()
        })
        .await
    }

    async fn write_layout(
        &self,
        row: &LayoutRow,
        replacing: Option<&str>,
    ) -> Result<bool, DbError> {
        let (row, replacing) = (row.clone(), replacing.map(str::to_owned));
        // With `replacing` NULL the WHERE is never true: an insert if absent.
        self.with(move |c| {
            write(c, |tx| {
                tx.execute(
                    &format!(
                        "INSERT INTO segmint_layout ({LAYOUT_COLUMNS}) VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT (epoch) DO UPDATE SET members = excluded.members,
                             state = excluded.state, changed_ms = excluded.changed_ms
                         WHERE segmint_layout.state = ?5"
                    ),
                    params![row.epoch, row.members, row.state, row.changed_ms, replacing],
                )
                .map(|n| n == 1)
            })
        })
        .await
    }

    async fn set_leases_while(
        &self,
        epoch: i64,
        state: &str,
        rows: &[LeaseSet],
    ) -> Result<Option<Vec<LeaseRow>>, DbError> {
        let (rows, state) = (rows.to_vec(), state.to_owned());
        self.with(move |c| {
            // The immediate transaction holds the write lock: no rewrite of the layout
            // row comes between the check and the leases.
            write(c, |tx| {
                let held: Option<i64> = tx
                    .query_row(
                        "SELECT 1 FROM segmint_layout WHERE epoch = ?1 AND state = ?2",
                        params![epoch, state],
                        |r| r.get(0),
                    )
                    .optional()?;
                if held.is_none() {
                    return Ok(None);
                }
                let mut stmt = tx.prepare_cached(&format!(
                    "INSERT INTO segmint_worker_lease ({LEASE_COLUMNS})
                     VALUES (?1, ?2, 1, ?3, ?4, ?5)
                     ON CONFLICT (worker_id) DO UPDATE SET
                         holder = excluded.holder,
                         version = segmint_worker_lease.version + 1,
                         expires_ms = excluded.expires_ms,
                         last_ms = max(segmint_worker_lease.last_ms, excluded.last_ms),
                         bound_ms = max(segmint_worker_lease.bound_ms, excluded.bound_ms),
                         update_time = CURRENT_TIMESTAMP
                     RETURNING {LEASE_COLUMNS}, {NOW_MS}"
                ))?;
                rows.iter()
                    .map(|r| {
                        stmt.query_row(
                            params![r.worker_id, r.holder, r.expires_ms, r.last_ms, r.bound_ms],
                            |r| rules::lease_row(r),
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            })
        })
        .await
    }

    async fn leases(&self) -> Result<Vec<LeaseRow>, DbError> {
        self.with(|c| {
            c.prepare_cached(&format!(
                "SELECT {LEASE_COLUMNS}, {NOW_MS} FROM segmint_worker_lease ORDER BY worker_id"
            ))?
            .query_map([], |r| rules::lease_row(r))?
            .collect()
        })
        .await
    }

    async fn take_lease(
        &self,
        worker_id: u16,
        holder: &str,
        lease_ms: i64,
        grace_ms: i64,
    ) -> Result<Option<LeaseRow>, DbError> {
        let holder = holder.to_owned();
        // As on PostgreSQL: `excluded.expires_ms - lease_ms` is the database's clock.
        self.with(move |c| {
            write(c, |tx| {
                tx.prepare_cached(&format!(
                    "INSERT INTO segmint_worker_lease ({LEASE_COLUMNS})
                     VALUES (?1, ?2, 1, {NOW_MS} + ?3, 0, 0)
                     ON CONFLICT (worker_id) DO UPDATE SET
                         holder = excluded.holder,
                         version = segmint_worker_lease.version + 1,
                         expires_ms = excluded.expires_ms, update_time = CURRENT_TIMESTAMP
                     WHERE segmint_worker_lease.expires_ms + ?4 < excluded.expires_ms - ?3
                     RETURNING {LEASE_COLUMNS}, expires_ms - ?3"
                ))?
                .query_row(params![worker_id, holder, lease_ms, grace_ms], |r| {
                    rules::lease_row(r)
                })
                .optional()
            })
        })
        .await
    }

    async fn section(&self, biz: &str, section: u32) -> Result<Option<SectionRow>, DbError> {
        let biz = biz.to_owned();
        let section = rules::section_number(section);
        self.with(move |c| {
            c.prepare_cached(&format!(
                "SELECT {SECTION_COLUMNS}, {NOW_MS} FROM segmint_sequence_section
                 WHERE biz_type = ?1 AND section = ?2"
            ))?
            .query_row(params![biz, section], |r| rules::section_row(r))
            .optional()
        })
        .await
    }

    async fn sections(&self, biz: &str) -> Result<Vec<(u32, SectionRow)>, DbError> {
        let biz = biz.to_owned();
        self.with(move |c| {
            c.prepare_cached(&format!(
                "SELECT section, {SECTION_COLUMNS}, {NOW_MS} FROM segmint_sequence_section
                 WHERE biz_type = ?1 ORDER BY section"
            ))?
            .query_map([biz], |r| rules::numbered_section_row(r))?
            .collect()
        })
        .await
    }

    async fn write_section(&self, w: &SectionWrite) -> Result<Option<SectionRow>, DbError> {
        let w = w.clone();
        self.with(move |c| write(c, |tx| write_section_in(tx, &w)))
            .await
    }

    async fn all_sections(&self) -> Result<Vec<(String, u32, SectionRow)>, DbError> {
        self.with(move |c| {
            c.prepare_cached(&format!(
                "SELECT biz_type, section, {SECTION_COLUMNS}, {NOW_MS}
                 FROM segmint_sequence_section ORDER BY biz_type, section"
            ))?
            .query_map([], |r| rules::named_section_row(r))?
            .collect()
        })
        .await
    }

    /// One write transaction holds the file's write lock throughout: the writes are
    /// made one after the other, in the order given (no other writer waits on a row).
    async fn write_sections(
        &self,
        writes: &[SectionWrite],
    ) -> Result<Vec<Option<SectionRow>>, DbError> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        // Only the check that no row is named twice.
        rules::in_row_order(writes);
        let writes = writes.to_vec();
        self.with(move |c| {
            write(c, |tx| {
                writes.iter().map(|w| write_section_in(tx, w)).collect()
            })
        })
        .await
    }

    async fn renew_lease(&self, renewal: &LeaseRenewal) -> Result<Option<LeaseRow>, DbError> {
        let r = renewal.clone();
        self.with(move |c| {
            write(c, |tx| {
                tx.prepare_cached(&format!(
                    "UPDATE segmint_worker_lease SET version = version + 1,
                         expires_ms = {NOW_MS} + ?4,
                         last_ms = max(last_ms, ?5), bound_ms = max(bound_ms, ?6),
                         update_time = CURRENT_TIMESTAMP
                     WHERE worker_id = ?1 AND holder = ?2 AND (version = ?3 OR ?4 < 0)
                     RETURNING {LEASE_COLUMNS}, expires_ms - ?4"
                ))?
                .query_row(
                    params![
                        r.worker_id,
                        r.holder,
                        r.version,
                        r.expires_in_ms,
                        r.last_ms,
                        r.bound_ms
                    ],
                    |r| rules::lease_row(r),
                )
                .optional()
            })
        })
        .await
    }

    async fn snowflake_spec(&self) -> Result<Option<(String, bool)>, DbError> {
        self.with(|c| {
            c.prepare_cached("SELECT spec, confirmed FROM segmint_snowflake WHERE id = 1")?
                .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .await
    }

    async fn confirm_snowflake_spec(&self, spec: &str) -> Result<bool, DbError> {
        let spec = spec.to_owned();
        self.with(move |c| {
            write(c, |tx| {
                tx.execute(
                    "UPDATE segmint_snowflake SET confirmed = 1
                     WHERE id = 1 AND spec = ?1 AND confirmed = 0",
                    params![spec],
                )
            })
        })
        .await
        .map(|n| n == 1)
    }

    async fn record_snowflake_spec(&self, spec: &str) -> Result<bool, DbError> {
        let spec = spec.to_owned();
        self.with(move |c| {
            write(c, |tx| {
                tx.execute(
                    "INSERT INTO segmint_snowflake (id, spec) VALUES (1, ?1) ON CONFLICT (id) DO NOTHING",
                    params![spec],
                )
            })
        })
        .await
        .map(|n| n == 1)
    }
}

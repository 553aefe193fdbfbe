//! A MySQL or MariaDB database behind a `mysql_async` connection pool, on Tinyid's own
//! tables (`tiny_id_info`, `tiny_id_token`) or Leaf's `leaf_alloc`, with segmint's
//! columns and tables added.
//!
//! MySQL has no `RETURNING` on an UPDATE: a write that returns its row is an explicit
//! transaction (the write, then a read of the row it locked, then `COMMIT`), and its
//! result counts only once the commit has answered. Every statement runs on the
//! process's database I/O thread, the one PostgreSQL's connections run on.
//!
//! Durability is checked by [`SegmentStore::ping`]: `innodb_flush_log_at_trx_commit`
//! must be 1, and with the binary log on, `sync_binlog` must be 1 (a commit InnoDB
//! answered is rolled back at recovery if its binary log entry was lost).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use mysql_async::prelude::{FromValue, Queryable};
use mysql_async::{Conn, Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts, Row, TxOpts};

use crate::config::MyTarget;

use super::rules::{self, Cells, Migration, migrations};
use super::{
    BizRow, DbError, Inserted, LayoutRow, LeaseRenewal, LeaseRow, LeaseSet, RowWrite, SectionRow,
    SectionWrite, SegmentStore, ShapeRow, TokenRow, Witness,
};

/// Where a database keeps its biz rows, and the statements on them: Tinyid's
/// `tiny_id_info`, or Leaf's `leaf_alloc` (see [`BizTable::leaf`]). The other tables are
/// the same for both.
pub(crate) struct BizTable {
    /// Schema migrations, applied in order, each once per database.
    migrations: &'static [Migration],
    /// One row by name: [`rules::BIZ_COLUMNS`] in order, the name as the parameter.
    row: String,
    /// Every row, by name.
    all: String,
    /// The compare-and-set: the new version, max_id, delta, remainder, epoch, frozen
    /// state and claim (a NULL keeps the column), then the name, version and max_id.
    write: String,
    /// An insert unless the name exists, with the parameters of `insert_params`.
    insert: String,
    insert_params: fn(&BizRow) -> mysql_async::Params,
    /// Whether a row of the name exists.
    exists: String,
    /// The description, then the name.
    describe: String,
}

impl BizTable {
    /// Tinyid's `tiny_id_info`, its columns as Tinyid names them (its `step` may be NULL).
    fn tinyid() -> BizTable {
        let columns = "biz_type, begin_id, max_id, coalesce(step, 0), delta, remainder, version, \
             description, layout_epoch, frozen, claimed_by";
        BizTable {
            migrations: migrations!("mysql"),
            row: format!("SELECT {columns} FROM tiny_id_info WHERE biz_type = ?"),
            all: format!("SELECT {columns} FROM tiny_id_info ORDER BY biz_type"),
            write: "UPDATE tiny_id_info SET version = ?, max_id = ?,
                     delta = coalesce(?, delta), remainder = coalesce(?, remainder),
                     layout_epoch = coalesce(?, layout_epoch), frozen = coalesce(?, frozen),
                     claimed_by = coalesce(?, claimed_by), update_time = now()
                 WHERE biz_type = ? AND version = ? AND max_id = ?"
                .into(),
            insert: "INSERT IGNORE INTO tiny_id_info (biz_type, begin_id, max_id, step, delta,
                     remainder, version, description, layout_epoch, frozen, claimed_by,
                     create_time, update_time)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now(), now())"
                .into(),
            insert_params: |row| {
                (
                    row.biz_type.as_str(),
                    row.begin_id,
                    row.max_id,
                    row.step,
                    row.delta,
                    row.remainder,
                    row.version,
                    &*row.description,
                    row.epoch,
                    row.frozen,
                    row.claimed_by,
                )
                    .into()
            },
            exists: "SELECT 1 FROM tiny_id_info WHERE biz_type = ?".into(),
            describe: "UPDATE tiny_id_info SET description = ?, update_time = now()
                 WHERE biz_type = ?"
                .into(),
        }
    }

    /// Leaf's `leaf_alloc`. Leaf issues a segment as `[max_id - step, max_id)`, segmint
    /// as `(max_id - step, max_id]`: a Leaf row of `max_id` M is a segmint row of
    /// `max_id` M - 1, and segmint writes M + 1 for its M. Leaf's reservation (`max_id =
    /// max_id + step`) leaves segmint's version alone; a trigger moves it on whenever
    /// `max_id` changes without it, so that a row never holds two `max_id`s at one
    /// version (`0001_init.sql` of `sql/mysql_leaf`).
    fn leaf() -> BizTable {
        let columns = "biz_tag, 0, max_id - 1, step, delta, remainder, segmint_version, \
             coalesce(description, ''), layout_epoch, frozen, claimed_by";
        BizTable {
            migrations: migrations!("mysql_leaf"),
            row: format!("SELECT {columns} FROM leaf_alloc WHERE biz_tag = ?"),
            all: format!("SELECT {columns} FROM leaf_alloc ORDER BY biz_tag"),
            write: "UPDATE leaf_alloc SET segmint_version = ?, max_id = ? + 1,
                     delta = coalesce(?, delta), remainder = coalesce(?, remainder),
                     layout_epoch = coalesce(?, layout_epoch), frozen = coalesce(?, frozen),
                     claimed_by = coalesce(?, claimed_by), update_time = now()
                 WHERE biz_tag = ? AND segmint_version = ? AND max_id = ? + 1"
                .into(),
            insert: "INSERT IGNORE INTO leaf_alloc (biz_tag, max_id, step, delta, remainder,
                     segmint_version, description, layout_epoch, frozen, claimed_by)
                 VALUES (?, ? + 1, ?, ?, ?, ?, ?, ?, ?, ?)"
                .into(),
            insert_params: |row| {
                (
                    row.biz_type.as_str(),
                    row.max_id,
                    row.step,
                    row.delta,
                    row.remainder,
                    row.version,
                    &*row.description,
                    row.epoch,
                    row.frozen,
                    row.claimed_by,
                )
                    .into()
            },
            exists: "SELECT 1 FROM leaf_alloc WHERE biz_tag = ?".into(),
            describe: "UPDATE leaf_alloc SET description = ?, update_time = now()
                 WHERE biz_tag = ?"
                .into(),
        }
    }

    /// The table named by a database's `tables` setting.
    pub(crate) fn of(tables: crate::config::BizTables) -> &'static BizTable {
        static TINYID: std::sync::LazyLock<BizTable> = std::sync::LazyLock::new(BizTable::tinyid);
        static LEAF: std::sync::LazyLock<BizTable> = std::sync::LazyLock::new(BizTable::leaf);
        match tables {
            crate::config::BizTables::Tinyid => &TINYID,
            crate::config::BizTables::Leaf => &LEAF,
        }
    }
}

/// [`rules::WITNESS_COLUMNS`], `database` quoted (a reserved word in MySQL).
const WITNESS_COLUMNS: &str = "`database`, biz_type, version, max_id, high_id";

use super::rules::{LAYOUT_COLUMNS, LEASE_COLUMNS, SECTION_COLUMNS, SHAPE_COLUMNS};

/// The token rows, as [`rules::token_row`] reads them (times in UTC, the sessions' zone),
/// with the hash of a token Tinyid keeps in plain text (see `0010_token_lookup.sql`).
const TOKENS: &str = "SELECT id,
        IF(token REGEXP '^[0-9a-fA-F]{64}$', token, token_hash), biz_type, remark,
        CAST(coalesce(unix_timestamp(create_time), 0) AS SIGNED),
        CAST(unix_timestamp(expire_time) AS SIGNED),
        CAST(unix_timestamp(revoke_time) AS SIGNED),
        CAST(unix_timestamp(last_used_time) AS SIGNED)
    FROM tiny_id_token";

/// The database's clock in Unix milliseconds.
const NOW_MS: &str = "CAST(unix_timestamp(now(3)) * 1000 AS SIGNED)";

/// Serialises concurrent `segmint migrate` runs on one database.
const MIGRATION_LOCK: &str = "segmint_migrate";

/// One MySQL or MariaDB database.
pub struct MyStore {
    /// Connections, opened and driven on the I/O thread.
    pool: Pool,
    /// The I/O thread's runtime; `None` if it could not be started.
    io: Option<tokio::runtime::Handle>,
    /// Where the biz rows are.
    table: &'static BizTable,
}

/// How long an idle pooled connection is kept before it is closed.
const IDLE_KEPT: Duration = Duration::from_secs(60);

impl MyStore {
    /// A pool for `target` that connects lazily. Waiting on a row lock is bounded by
    /// `timeout`; the caller bounds every call.
    ///
    /// # Errors
    /// [`DbError`] when the pool cannot be built.
    pub fn new(target: &MyTarget, pool_size: usize, timeout: Duration) -> Result<Self, DbError> {
        let constraints =
            PoolConstraints::new(0, pool_size.max(1)).ok_or_else(|| DbError::Connect {
                message: "pool_size must be at least 1".into(),
                source: None,
            })?;
        let lock_wait = timeout.as_secs().max(1);
        let opts = OptsBuilder::default()
            .ip_or_hostname(target.host.clone())
            .tcp_port(target.port)
            .user(Some(target.user.clone()))
            .pass(target.password.clone())
            .db_name(Some(target.database.clone()))
            .prefer_socket(false)
            .ssl_opts(Self::ssl_opts(&target.tls))
            // A connection goes back to the pool with no transaction open (the driver
            // rolls back one left open) and no state of ours but the settings below: no
            // reset (a round trip, and a reset would drop them) on each return.
            //
            // Idle connections are kept for `IDLE_KEPT` (the driver's default, 0, closes
            // every connection handed back above the pool's minimum: a new connection,
            // its settings and prepared statements, for every operation).
            .pool_opts(
                PoolOpts::default()
                    .with_constraints(constraints)
                    .with_inactive_connection_ttl(IDLE_KEPT)
                    .with_reset_connection(false),
            )
            // Run on every new connection (and after a reset, were there one).
            .setup(vec![
                // Token times are written and read as UTC.
                "SET time_zone = '+00:00'".to_owned(),
                // Whatever the server's default: the locking reads of `insert_bizs` and
                // `take_lease` lock the gaps they read (a layout or lease row inserted
                // there meanwhile waits for the commit), which READ COMMITTED does not.
                "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ".to_owned(),
                format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}"),
            ]);
        let io = crate::postgres::io_runtime();
        // The pool's background work runs where it is built: on the I/O thread.
        let pool = match &io {
            Some(handle) => {
                let _on_io = handle.enter();
                Pool::new(Opts::from(opts))
            }
            None => Pool::new(Opts::from(opts)),
        };
        Ok(MyStore {
            pool,
            io,
            table: BizTable::of(target.tables),
        })
    }

    /// The driver's TLS options for the mysql client's modes; `None`: plain text.
    ///
    /// mysql_async builds its rustls configuration itself and takes no verifier of ours
    /// (not segmint's libpq-like one of [`crate::tls`]): the server's certificate is
    /// checked by webpki, which reads X.509 version 3 certificates only, and names in the
    /// subjectAltName only. Within that:
    /// - `REQUIRED` without `ssl-ca`: any certificate (`accept_invalid_certs`), as the
    ///   mysql client checks none; the handshake is still signed with its key.
    /// - with `ssl-ca` (`REQUIRED`, `VERIFY_CA`, `VERIFY_IDENTITY`): the chain to its
    ///   certificates alone, never to the roots built into the driver (Mozilla's).
    /// - `VERIFY_IDENTITY`: the host's name too, as connected to (`host` of the URL).
    ///
    /// The chain without the name is `skip_domain_validation`, which mysql_async 0.37.1
    /// honours only for a name error whose text holds `NotValidForName`
    /// (blackbeam/mysql_async#404; fixed upstream by #408, unreleased). rustls 0.23 words
    /// that error "certificate not valid for name \"…\"", quoting the name expected: so
    /// the name expected (also sent as SNI, which MySQL and MariaDB ignore) is
    /// [`Self::ANY_NAME`]. webpki checks the chain before the name, so a name error means
    /// the chain held; any other error stands.
    fn ssl_opts(tls: &crate::config::tls::MyTls) -> Option<mysql_async::SslOpts> {
        use crate::config::tls::MySslMode;
        if tls.mode == MySslMode::Disabled {
            return None;
        }
        let mut opts = mysql_async::SslOpts::default();
        match &tls.ca {
            // The driver's built-in roots stay, never consulted: its verifier cannot be
            // built without a root.
            None => opts = opts.with_danger_accept_invalid_certs(true),
            Some(ca) => {
                opts = opts
                    .with_disable_built_in_roots(true)
                    .with_root_certs(vec![ca.pem.clone().into()]);
                if tls.mode != MySslMode::VerifyIdentity {
                    opts = opts
                        .with_danger_skip_domain_validation(true)
                        .with_danger_tls_hostname_override(Some(Self::ANY_NAME));
                }
            }
        }
        if let Some((cert, key)) = &tls.client {
            opts = opts.with_client_identity(Some(mysql_async::ClientIdentity::new(
                cert.pem.clone().into(),
                key.pem.clone().into(),
            )));
        }
        Some(opts)
    }

    /// The server name of a certificate checked for its chain only: one no certificate
    /// of a real host holds (`.invalid`, RFC 6761), whose mismatch mysql_async recognises
    /// (see [`Self::ssl_opts`]).
    const ANY_NAME: &'static str = "NotValidForName.segmint.invalid";

    /// Every row `sql` returns, read by `read`.
    async fn all<T: Send + 'static>(
        &self,
        sql: String,
        read: fn(&Row) -> Result<T, DbError>,
    ) -> Result<Vec<T>, DbError> {
        self.run(move |mut conn| async move {
            let rows: Vec<Row> = conn.query(sql).await.map_err(db_error)?;
            read_all(&rows, read)
        })
        .await
    }

    /// Runs `f` with a connection, on the I/O thread. A caller that gives up (its bound
    /// ran out) cancels the work where it stands, as dropping a PostgreSQL query does: a
    /// write whose outcome it never learns counts for nothing, and no work piles up
    /// behind a stalled database.
    async fn run<T, F, Fut>(&self, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(Conn) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, DbError>> + Send + 'static,
    {
        self.on_io(f, true).await
    }

    /// As [`Self::run`], `abort` telling whether a caller that gives up cancels the work
    /// (a migration runs to its end: an ALTER of a large Tinyid table may outlast the
    /// caller's bound, and cut off it would never finish).
    async fn on_io<T, F, Fut>(&self, f: F, abort: bool) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(Conn) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, DbError>> + Send + 'static,
    {
        let pool = self.pool.clone();
        let work = async move {
            let conn = pool
                .get_conn()
                .await
                .map_err(|e| DbError::connect(e.to_string(), e))?;
            f(conn).await
        };
        let Some(handle) = &self.io else {
            return work.await;
        };
        let task = handle.spawn(work);
        let abort_handle = task.abort_handle();
        let _cancel = abort.then(|| CancelOnDrop(abort_handle));
        task.await
            .map_err(|e| DbError::connect(format!("database I/O thread: {e}"), e))?
    }
}

/// Aborts a task when dropped (a finished task ignores it).
struct CancelOnDrop(tokio::task::AbortHandle);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn db_error(e: mysql_async::Error) -> DbError {
    let (sqlstate, message) = match &e {
        mysql_async::Error::Server(server) => (Some(server.state.clone()), server.message.clone()),
        other => (None, other.to_string()),
    };
    DbError::Query {
        sqlstate,
        message,
        source: Some(Box::new(e)),
    }
}

/// Whether `e` is the loss of a race to insert one key: a duplicate key (1062), or the
/// deadlock (1213) of two transactions that locked the same gap and both inserted
/// into it; the loser's transaction is rolled back.
fn lost_insert_race(e: &mysql_async::Error) -> bool {
    duplicate_key(e) || matches!(e, mysql_async::Error::Server(server) if server.code == 1213)
}

/// Whether `e` is a duplicate key (1062): InnoDB undoes the statement alone, and the
/// transaction goes on.
fn duplicate_key(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(server) if server.code == 1062)
}

/// Cell `i` of `row` as `T`; a NULL, a missing cell or another type is an error.
fn cell<T: FromValue>(row: &Row, i: usize) -> Result<T, DbError> {
    match row.get_opt::<T, usize>(i) {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(DbError::Query {
            sqlstate: None,
            message: format!("column {i}: {e}"),
            source: None,
        }),
        None => Err(DbError::Query {
            sqlstate: None,
            message: format!("column {i} is missing"),
            source: None,
        }),
    }
}

impl Cells for Row {
    type Error = DbError;
    fn int(&self, i: usize) -> Result<i64, DbError> {
        cell(self, i)
    }
    fn int32(&self, i: usize) -> Result<i32, DbError> {
        cell(self, i)
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, DbError> {
        cell(self, i)
    }
    fn text(&self, i: usize) -> Result<String, DbError> {
        cell(self, i)
    }
    fn flag(&self, i: usize) -> Result<bool, DbError> {
        cell(self, i)
    }
}

/// The lease row of `worker` as this transaction wrote it, with the database's clock
/// `now` (read before the write).
async fn lease_as_written(
    tx: &mut mysql_async::Transaction<'_>,
    worker: i32,
    now: i64,
) -> Result<Option<LeaseRow>, DbError> {
    let row: Option<Row> = tx
        .exec_first(
            format!("SELECT {LEASE_COLUMNS}, ? FROM segmint_worker_lease WHERE worker_id = ?"),
            (now, worker),
        )
        .await
        .map_err(db_error)?;
    row.as_ref().map(rules::lease_row).transpose()
}

/// The database's clock, read in transaction `tx`.
async fn db_now(tx: &mut mysql_async::Transaction<'_>) -> Result<i64, DbError> {
    let now: Option<i64> = tx
        .query_first(format!("SELECT {NOW_MS}"))
        .await
        .map_err(db_error)?;
    Ok(now.unwrap_or_default())
}

/// The most rows one statement of a batch of section writes names: its parameters stay
/// far below the 65,535 a prepared statement may have.
const BATCH_ROWS: usize = 1_000;

/// A condition naming `n` section rows by their primary key. A row constructor's `IN`
/// is read as lookups of the key (MariaDB 10.11, seen with EXPLAIN: a thousand rows in
/// a tenth of the time of as many `OR`ed equalities; MySQL documents it from 5.7.3), so
/// a locking read locks the rows named and the gaps of those absent. Where the rows
/// named are most of a small table the optimiser may scan it instead, and a locking
/// read then holds the table's other rows too until the commit.
fn section_rows_where(n: usize) -> String {
    format!("(biz_type, section) IN ({})", vec!["(?, ?)"; n].join(", "))
}

/// The biz and section of the writes at positions `at`, for [`section_rows_where`].
fn section_keys(writes: &[SectionWrite], at: &[usize]) -> Vec<mysql_async::Value> {
    at.iter()
        .flat_map(|&i| {
            let w = &writes[i];
            [
                w.biz.as_str().into(),
                rules::section_number(w.section).into(),
            ]
        })
        .collect()
}

/// An insert of the rows of the writes at positions `at`: each at the version above
/// the one read (1 when absent), its lease from the database's clock `now`.
fn section_values(
    writes: &[SectionWrite],
    at: &[usize],
    now: i64,
) -> (String, Vec<mysql_async::Value>) {
    let sql = format!(
        "INSERT INTO segmint_sequence_section (biz_type, section, {SECTION_COLUMNS}) VALUES {}",
        vec!["(?, ?, ?, ?, ?, ?)"; at.len()].join(", ")
    );
    let params = at
        .iter()
        .flat_map(|&i| {
            let w = &writes[i];
            [
                w.biz.as_str().into(),
                rules::section_number(w.section).into(),
                w.holder.as_str().into(),
                w.expected.map_or(1, |v| v + 1).into(),
                w.bound.into(),
                now.saturating_add(w.lease_ms).into(),
            ]
        })
        .collect();
    (sql, params)
}

/// The compare-and-sets among a batch's writes, at positions `at` (in the rows'
/// order): each [`BATCH_ROWS`] locked in one read, and those still at the version read
/// written in one statement (an update of rows this transaction holds). Returns the
/// positions written.
async fn update_sections(
    tx: &mut mysql_async::Transaction<'_>,
    writes: &[SectionWrite],
    at: &[usize],
    now: i64,
) -> Result<Vec<usize>, DbError> {
    let mut made = Vec::new();
    for chunk in at.chunks(BATCH_ROWS) {
        let rows: Vec<(String, i32, i64)> = tx
            .exec(
                format!(
                    "SELECT biz_type, section, version FROM segmint_sequence_section
                     WHERE {} FOR UPDATE",
                    section_rows_where(chunk.len())
                ),
                section_keys(writes, chunk),
            )
            .await
            .map_err(db_error)?;
        let versions: HashMap<(&str, i32), i64> = rows
            .iter()
            .map(|(biz, section, version)| ((biz.as_str(), *section), *version))
            .collect();
        let won: Vec<usize> = chunk
            .iter()
            .copied()
            .filter(|&i| {
                let w = &writes[i];
                let row = (w.biz.as_str(), rules::section_number(w.section));
                versions.get(&row).is_some_and(|&v| Some(v) == w.expected)
            })
            .collect();
        if won.is_empty() {
            continue;
        }
        let (insert, params) = section_values(writes, &won, now);
        tx.exec_drop(
            format!(
                "{insert} ON DUPLICATE KEY UPDATE holder = VALUES(holder),
                     version = VALUES(version), bound = VALUES(bound),
                     expires_ms = VALUES(expires_ms), update_time = now()"
            ),
            params,
        )
        .await
        .map_err(db_error)?;
        made.extend(won);
    }
    Ok(made)
}

/// The inserts among a batch's writes, at positions `at` (in the rows' order): each
/// [`BATCH_ROWS`] in one statement. A row already there (a duplicate key, of a row
/// inserted before or by a transaction that committed meanwhile) undoes that statement
/// alone; its rows are then inserted one at a time, each found there lost. No row is
/// locked before its insert: two batches inserting other rows into one gap of the key
/// do not wait on each other. Returns the positions inserted.
async fn insert_sections(
    tx: &mut mysql_async::Transaction<'_>,
    writes: &[SectionWrite],
    at: &[usize],
    now: i64,
) -> Result<Vec<usize>, DbError> {
    let mut made = Vec::new();
    for chunk in at.chunks(BATCH_ROWS) {
        let (sql, params) = section_values(writes, chunk, now);
        match tx.exec_drop(sql, params).await {
            Ok(()) => made.extend_from_slice(chunk),
            Err(e) if duplicate_key(&e) => {
                for &i in chunk {
                    let (sql, params) = section_values(writes, &[i], now);
                    match tx.exec_drop(sql, params).await {
                        Ok(()) => made.push(i),
                        Err(e) if duplicate_key(&e) => {}
                        Err(e) => return Err(db_error(e)),
                    }
                }
            }
            Err(e) => return Err(db_error(e)),
        }
    }
    Ok(made)
}

/// The answers of a batch of section writes: the rows at positions `made` as this
/// transaction wrote them (it holds them until its commit), with the database's clock
/// `now` read before the writes; `None` for the other writes.
async fn sections_as_written(
    tx: &mut mysql_async::Transaction<'_>,
    writes: &[SectionWrite],
    made: &[usize],
    now: i64,
) -> Result<Vec<Option<SectionRow>>, DbError> {
    let mut written = vec![None; writes.len()];
    for chunk in made.chunks(BATCH_ROWS) {
        let mut params = vec![now.into()];
        params.extend(section_keys(writes, chunk));
        let rows: Vec<Row> = tx
            .exec(
                format!(
                    "SELECT biz_type, section, {SECTION_COLUMNS}, ? FROM segmint_sequence_section
                     WHERE {}",
                    section_rows_where(chunk.len())
                ),
                params,
            )
            .await
            .map_err(db_error)?;
        let at: HashMap<(&str, u32), usize> = chunk
            .iter()
            .map(|&i| ((writes[i].biz.as_str(), writes[i].section), i))
            .collect();
        for row in &rows {
            let (biz, section, row) = rules::named_section_row(row)?;
            if let Some(&i) = at.get(&(biz.as_str(), section)) {
                written[i] = Some(row);
            }
        }
    }
    match made.iter().all(|&i| written[i].is_some()) {
        true => Ok(written),
        false => Err(DbError::Query {
            sqlstate: None,
            message: "a section row written is missing".into(),
            source: None,
        }),
    }
}

/// Every row of `rows` read by `read`.
fn read_all<T>(rows: &[Row], read: impl Fn(&Row) -> Result<T, DbError>) -> Result<Vec<T>, DbError> {
    rows.iter().map(read).collect()
}

/// The statements of a migration file: split at `;` ending a line, comments dropped.
fn statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in sql.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("--") || trimmed.is_empty() {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if trimmed.ends_with(';') {
            out.push(current.trim().trim_end_matches(';').to_owned());
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_owned());
    }
    out
}

/// How `migrate` runs one statement of a migration file. MariaDB takes `IF NOT EXISTS`
/// on `ALTER TABLE … ADD COLUMN` (one column a statement), `CREATE INDEX` and
/// `CREATE TRIGGER`; MySQL 8 on none of the first two, and on the third only from
/// 8.0.29. The files say `IF NOT EXISTS` (a run that died midway left some of it done),
/// and this runner asks `information_schema` itself and runs the statement without the
/// clause: one path on both servers. Every other statement runs as written.
#[derive(Debug, PartialEq)]
enum Step {
    Run(String),
    /// `sql`, unless `exists` (a count of `information_schema` rows of the database in
    /// use, for `params`) finds the object.
    Unless {
        exists: &'static str,
        params: Vec<String>,
        sql: String,
    },
}

fn step(statement: &str) -> Step {
    const CLAUSE: &str = "IF NOT EXISTS";
    let words: Vec<String> = statement
        .split_whitespace()
        .map(str::to_ascii_uppercase)
        .collect();
    let at = |i: usize, want: &[&str]| {
        words.len() > i + want.len() && want.iter().zip(&words[i..]).all(|(w, a)| a == w)
    };
    // A name as written (lower-case here: MySQL compares them so on Linux only for
    // databases made with lower_case_table_names, and the files write them lower-case).
    let name = |i: usize| {
        let word = statement.split_whitespace().nth(i).unwrap_or_default();
        word.split('(')
            .next()
            .unwrap_or_default()
            .trim_matches('`')
            .to_owned()
    };
    let without = || {
        let upper = statement.to_ascii_uppercase();
        match upper.find(CLAUSE) {
            Some(i) => format!(
                "{}{}",
                &statement[..i],
                statement[i + CLAUSE.len()..].trim_start()
            ),
            None => statement.to_owned(),
        }
    };
    let (exists, params) =
        if at(0, &["ALTER", "TABLE"]) && at(3, &["ADD", "COLUMN", "IF", "NOT", "EXISTS"]) {
            (
                "SELECT count(*) FROM information_schema.columns
             WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?",
                vec![name(2), name(8)],
            )
        } else if at(0, &["CREATE", "INDEX", "IF", "NOT", "EXISTS"]) && at(6, &["ON"]) {
            (
                "SELECT count(*) FROM information_schema.statistics
             WHERE table_schema = DATABASE() AND table_name = ? AND index_name = ?",
                vec![name(7), name(5)],
            )
        } else if at(0, &["CREATE", "TRIGGER", "IF", "NOT", "EXISTS"]) {
            (
                "SELECT count(*) FROM information_schema.triggers
             WHERE trigger_schema = DATABASE() AND trigger_name = ?",
                vec![name(5)],
            )
        } else {
            return Step::Run(statement.to_owned());
        };
    Step::Unless {
        exists,
        params,
        sql: without(),
    }
}

/// A transaction for a write whose result is read back before the commit: the
/// session's REPEATABLE READ (set once per connection, so that a transaction costs no
/// statement of its own to set it).
/// How long, in seconds, the database waits for the next statement of a sequence batch
/// before it closes the connection and rolls the batch back (see `write_sections`).
const IN_BATCH_WAIT_S: u32 = 2;

fn write_tx() -> TxOpts {
    TxOpts::default()
}

#[async_trait]
impl SegmentStore for MyStore {
    async fn migrate(&self) -> Result<Vec<String>, DbError> {
        let migrations = self.table.migrations;
        let migrate = move |mut conn: Conn| async move {
            // DDL commits on its own in MySQL: a lock (not a transaction) keeps two runs
            // apart, and every statement is written to be run again after a run that
            // died midway (IF NOT EXISTS).
            let locked: Option<i64> = conn
                .exec_first("SELECT GET_LOCK(?, 60)", (MIGRATION_LOCK,))
                .await
                .map_err(db_error)?;
            if locked != Some(1) {
                return Err(DbError::Refused {
                    reason: "another `segmint migrate` holds the migration lock".into(),
                });
            }
            let result = async {
                conn.query_drop(
                    "CREATE TABLE IF NOT EXISTS segmint_migrations (
                         version int NOT NULL PRIMARY KEY,
                         name varchar(255) NOT NULL,
                         applied_at timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP
                     ) ENGINE=InnoDB",
                )
                .await
                .map_err(db_error)?;
                let applied: Vec<i32> = conn
                    .query("SELECT version FROM segmint_migrations")
                    .await
                    .map_err(db_error)?;
                let mut done = Vec::new();
                for migration @ (version, name, sql) in rules::pending(migrations, &applied) {
                    for statement in statements(sql) {
                        let sql = match step(&statement) {
                            Step::Run(sql) => sql,
                            Step::Unless {
                                exists,
                                params,
                                sql,
                            } => {
                                let found: Option<i64> =
                                    conn.exec_first(exists, params).await.map_err(db_error)?;
                                if found.unwrap_or(0) > 0 {
                                    continue;
                                }
                                sql
                            }
                        };
                        conn.query_drop(sql).await.map_err(db_error)?;
                    }
                    conn.exec_drop(
                        "INSERT INTO segmint_migrations (version, name) VALUES (?, ?)",
                        (version, name),
                    )
                    .await
                    .map_err(db_error)?;
                    done.push(rules::migration_name(migration));
                }
                Ok(done)
            }
            .await;
            conn.exec_drop("DO RELEASE_LOCK(?)", (MIGRATION_LOCK,))
                .await
                .map_err(db_error)?;
            result
        };
        self.on_io(migrate, false).await
    }

    /// Also checks the durability settings (see the module's text): a database where
    /// they do not hold is not ready.
    async fn ping(&self) -> Result<(), DbError> {
        self.run(|mut conn| async move {
            let row: Option<(i64, i64, i64)> = conn
                .query_first(
                    "SELECT @@innodb_flush_log_at_trx_commit, @@log_bin, @@sync_binlog",
                )
                .await
                .map_err(db_error)?;
            let Some((flush, log_bin, sync_binlog)) = row else {
                return Err(DbError::Refused {
                    reason: "the durability settings could not be read".into(),
                });
            };
            if flush != 1 {
                return Err(DbError::Refused {
                    reason: format!(
                        "innodb_flush_log_at_trx_commit is {flush}, not 1: a crash could lose reservations"
                    ),
                });
            }
            if log_bin == 1 && sync_binlog != 1 {
                return Err(DbError::Refused {
                    reason: format!(
                        "sync_binlog is {sync_binlog}, not 1, with the binary log on: a crash could roll back reservations already answered"
                    ),
                });
            }
            Ok(())
        })
        .await
    }

    async fn clock_ms(&self) -> Result<i64, DbError> {
        self.run(|mut conn| async move {
            let now: Option<i64> = conn
                .query_first(format!("SELECT {NOW_MS}"))
                .await
                .map_err(db_error)?;
            now.ok_or_else(|| DbError::Refused {
                reason: "the database's clock could not be read".into(),
            })
        })
        .await
    }

    async fn biz(&self, biz: &str) -> Result<Option<BizRow>, DbError> {
        let biz = biz.to_owned();
        let table = self.table;
        self.run(move |mut conn| async move {
            let row: Option<Row> = conn
                .exec_first(&table.row, (biz,))
                .await
                .map_err(db_error)?;
            row.as_ref().map(rules::biz_row).transpose()
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
        let table = self.table;
        self.run(move |mut conn| async move {
            let class = to.class;
            let mut tx = conn.start_transaction(write_tx()).await.map_err(db_error)?;
            // A NULL keeps the column, as on PostgreSQL.
            tx.exec_drop(
                &table.write,
                (
                    to.version,
                    to.max_id,
                    class.map(|c| c.delta),
                    class.map(|c| c.remainder),
                    class.map(|c| c.epoch),
                    class.map(|c| c.frozen),
                    class.map(|c| c.claimed_by),
                    &biz,
                    version,
                    max_id,
                ),
            )
            .await
            .map_err(db_error)?;
            if tx.affected_rows() != 1 {
                tx.rollback().await.map_err(db_error)?;
                return Ok(None);
            }
            // The row is locked by the update until the commit: this reads it as written.
            let row: Option<Row> = tx.exec_first(&table.row, (&biz,)).await.map_err(db_error)?;
            let row = row.as_ref().map(rules::biz_row).transpose()?;
            tx.commit().await.map_err(db_error)?;
            Ok(row)
        })
        .await
    }

    async fn witness(&self, witnesses: &[Witness]) -> Result<(), DbError> {
        let witnesses = witnesses.to_vec();
        self.run(move |mut conn| async move {
            let mut tx = conn.start_transaction(write_tx()).await.map_err(db_error)?;
            // The assignments read the row's old values: max_id before version.
            tx.exec_batch(
                "INSERT INTO segmint_witness (`database`, biz_type, version, max_id, high_id)
                 VALUES (?, ?, ?, ?, ?)
                 ON DUPLICATE KEY UPDATE
                     max_id = IF(VALUES(version) > version, VALUES(max_id), max_id),
                     version = GREATEST(version, VALUES(version)),
                     high_id = GREATEST(high_id, VALUES(high_id)),
                     update_time = now()",
                witnesses.iter().map(|w| {
                    (
                        w.database.clone(),
                        w.biz.clone(),
                        w.mark.version,
                        w.mark.max_id,
                        w.mark.high_id,
                    )
                }),
            )
            .await
            .map_err(db_error)?;
            tx.commit().await.map_err(db_error)
        })
        .await
    }

    async fn witness_rows(&self, biz: Option<&str>) -> Result<Vec<Witness>, DbError> {
        let biz = biz.map(str::to_owned);
        self.run(move |mut conn| async move {
            let rows: Vec<Row> = conn
                .exec(
                    format!(
                        "SELECT {WITNESS_COLUMNS} FROM segmint_witness WHERE ? IS NULL OR biz_type = ?"
                    ),
                    (&biz, &biz),
                )
                .await
                .map_err(db_error)?;
            read_all(&rows, rules::witness_row)
        })
        .await
    }

    async fn bizs(&self) -> Result<Vec<BizRow>, DbError> {
        self.all(self.table.all.clone(), rules::biz_row).await
    }

    async fn insert_bizs(&self, rows: &[BizRow]) -> Result<Vec<Inserted>, DbError> {
        let rows = rows.to_vec();
        let Some(epoch) = rows.iter().map(|r| r.epoch).min() else {
            return Ok(Vec::new());
        };
        let table = self.table;
        self.run(move |mut conn| async move {
            let mut tx = conn.start_transaction(write_tx()).await.map_err(db_error)?;
            // A locking read of the layouts above the rows' epoch: a claim's insert of
            // such a layout waits for this commit (the gap is locked), or committed
            // before and is seen here.
            let above: Option<Option<i64>> = tx
                .exec_first(
                    "SELECT max(epoch) FROM segmint_layout WHERE epoch > ? LOCK IN SHARE MODE",
                    (epoch,),
                )
                .await
                .map_err(db_error)?;
            if let Some(above) = above.flatten() {
                tx.rollback().await.map_err(db_error)?;
                return Ok(vec![Inserted::LayoutAbove(above); rows.len()]);
            }
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                tx.exec_drop(&table.insert, (table.insert_params)(row))
                    .await
                    .map_err(db_error)?;
                out.push(if tx.affected_rows() == 1 {
                    Inserted::Yes
                } else {
                    Inserted::Exists
                });
            }
            tx.commit().await.map_err(db_error)?;
            Ok(out)
        })
        .await
    }

    async fn shapes(&self) -> Result<Vec<ShapeRow>, DbError> {
        self.all(
            format!("SELECT {SHAPE_COLUMNS} FROM segmint_biz_shape ORDER BY biz_type"),
            rules::shape_row,
        )
        .await
    }

    async fn put_shape(&self, row: &ShapeRow) -> Result<(), DbError> {
        let r = row.clone();
        self.run(move |mut conn| async move {
            conn.exec_drop(
                format!(
                    "INSERT INTO segmint_biz_shape ({SHAPE_COLUMNS})
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                     ON DUPLICATE KEY UPDATE id_order = VALUES(id_order), block = VALUES(block),
                         domain = VALUES(domain), within_delta = VALUES(within_delta),
                         within_remainder = VALUES(within_remainder),
                         shape_key = VALUES(shape_key), prefix = VALUES(prefix),
                         width = VALUES(width), base = VALUES(base),
                         check_char = VALUES(check_char), as_string = VALUES(as_string),
                         period_spec = VALUES(period_spec)"
                ),
                mysql_async::Params::Positional(vec![
                    r.biz_type.into(),
                    r.id_order.into(),
                    r.block.into(),
                    r.domain.into(),
                    r.within_delta.into(),
                    r.within_remainder.into(),
                    r.key.into(),
                    r.prefix.into(),
                    r.width.into(),
                    r.base.into(),
                    r.check_char.into(),
                    r.as_string.into(),
                    r.period.into(),
                ]),
            )
            .await
            .map_err(db_error)
        })
        .await
    }

    async fn describe(&self, biz: &str, description: &str) -> Result<bool, DbError> {
        let (biz, description) = (biz.to_owned(), description.to_owned());
        let table = self.table;
        self.run(move |mut conn| async move {
            // Matched rather than changed: a description set to what it is still exists.
            let found: Option<i64> = conn
                .exec_first(&table.exists, (&biz,))
                .await
                .map_err(db_error)?;
            conn.exec_drop(&table.describe, (&description, &biz))
                .await
                .map_err(db_error)?;
            Ok(found.is_some())
        })
        .await
    }

    async fn tokens(&self) -> Result<Vec<TokenRow>, DbError> {
        self.all(format!("{TOKENS} ORDER BY id"), rules::token_row)
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
        self.run(move |mut conn| async move {
            // Tinyid's table has no unique key on (token, biz_type): the check is the
            // statement's own.
            conn.exec_drop(
                "INSERT INTO tiny_id_token (token, biz_type, remark, expire_time, create_time,
                     update_time)
                 SELECT ?, ?, ?, from_unixtime(?), now(), now() FROM DUAL
                 WHERE NOT EXISTS (SELECT 1 FROM tiny_id_token WHERE token_hash = LOWER(?) AND biz_type = ?)",
                (&hash, &biz, &remark, expires, &hash, &biz),
            )
            .await
            .map_err(db_error)
        })
        .await
    }

    async fn revoke_tokens(&self, token_hash: &str, at: i64) -> Result<u64, DbError> {
        self.update_tokens(
            "UPDATE tiny_id_token SET revoke_time = from_unixtime(?), update_time = now()
             WHERE token_hash = ? AND revoke_time IS NULL",
            token_hash,
            at,
        )
        .await
    }

    async fn expire_token(&self, token_hash: &str, at: i64) -> Result<u64, DbError> {
        self.update_tokens(
            "UPDATE tiny_id_token SET expire_time = from_unixtime(?), update_time = now()
             WHERE token_hash = ? AND (expire_time IS NULL OR expire_time > from_unixtime(?))",
            token_hash,
            at,
        )
        .await
    }

    async fn touch_tokens(&self, uses: &[(String, i64)]) -> Result<(), DbError> {
        let uses = uses.to_vec();
        self.run(move |mut conn| async move {
            let mut tx = conn.start_transaction(write_tx()).await.map_err(db_error)?;
            tx.exec_batch(
                "UPDATE tiny_id_token SET last_used_time = from_unixtime(?)
                 WHERE token_hash = ? AND (last_used_time IS NULL OR last_used_time < from_unixtime(?))",
                uses.iter().map(|(hash, at)| (*at, hash.clone(), *at)),
            )
            .await
            .map_err(db_error)?;
            tx.commit().await.map_err(db_error)
        })
        .await
    }

    async fn layouts(&self) -> Result<Vec<LayoutRow>, DbError> {
        self.all(
            format!("SELECT {LAYOUT_COLUMNS} FROM segmint_layout ORDER BY epoch"),
            rules::layout_row,
        )
        .await
    }

    async fn catalog_of(
        &self,
        biz: &str,
        token_hash: Option<&str>,
        databases: &[String],
    ) -> Result<super::CatalogRows, DbError> {
        let (biz, hash, databases) = (
            biz.to_owned(),
            token_hash.map(str::to_owned),
            databases.to_vec(),
        );
        let table = self.table;
        self.run(move |mut conn| async move {
            // One snapshot of every table (the session's REPEATABLE READ).
            let mut opts = TxOpts::default();
            opts.with_consistent_snapshot(true);
            let mut tx = conn.start_transaction(opts).await.map_err(db_error)?;
            let bizs: Vec<Row> = tx.exec(&table.row, (&biz,)).await.map_err(db_error)?;
            let shapes: Vec<Row> = tx
                .exec(
                    format!("SELECT {SHAPE_COLUMNS} FROM segmint_biz_shape WHERE biz_type = ?"),
                    (&biz,),
                )
                .await
                .map_err(db_error)?;
            let tokens: Vec<Row> = tx
                .exec(
                    format!("{TOKENS} WHERE token_hash = ? ORDER BY id"),
                    (&hash,),
                )
                .await
                .map_err(db_error)?;
            let mut witnesses = Vec::new();
            for database in &databases {
                let rows: Vec<Row> = tx
                    .exec(
                        format!(
                            "SELECT {WITNESS_COLUMNS} FROM segmint_witness
                             WHERE `database` = ? AND biz_type = ?"
                        ),
                        (database, &biz),
                    )
                    .await
                    .map_err(db_error)?;
                witnesses.extend(rows);
            }
            let layouts: Vec<Row> = tx
                .query(format!(
                    "SELECT {LAYOUT_COLUMNS} FROM segmint_layout ORDER BY epoch"
                ))
                .await
                .map_err(db_error)?;
            tx.commit().await.map_err(db_error)?;
            Ok(super::CatalogRows {
                position: None,
                full: false,
                bizs: read_all(&bizs, rules::biz_row)?,
                shapes: read_all(&shapes, rules::shape_row)?,
                tokens: read_all(&tokens, rules::token_row)?,
                witnesses: read_all(&witnesses, rules::witness_row)?,
                layouts: read_all(&layouts, rules::layout_row)?,
            })
        })
        .await
    }

    async fn write_layout(
        &self,
        row: &LayoutRow,
        replacing: Option<&str>,
    ) -> Result<bool, DbError> {
        let (row, replacing) = (row.clone(), replacing.map(str::to_owned));
        self.run(move |mut conn| async move {
            let mut tx = conn.start_transaction(write_tx()).await.map_err(db_error)?;
            let state: Option<String> = tx
                .exec_first(
                    "SELECT state FROM segmint_layout WHERE epoch = ? FOR UPDATE",
                    (row.epoch,),
                )
                .await
                .map_err(db_error)?;
            let written = match state {
                None => {
                    let inserted = tx
                        .exec_drop(
                            format!(
                                "INSERT INTO segmint_layout ({LAYOUT_COLUMNS}) VALUES (?, ?, ?, ?)"
                            ),
                            (row.epoch, &row.members, &row.state, row.changed_ms),
                        )
                        .await;
                    match inserted {
                        Ok(()) => true,
                        // Two writers found the epoch free and both inserted: the
                        // other's row stands (a duplicate key, or this transaction
                        // chosen as the deadlock's victim over the gap both locked).
                        Err(e) if lost_insert_race(&e) => return Ok(false),
                        Err(e) => return Err(db_error(e)),
                    }
                }
                Some(state) if Some(&state) == replacing.as_ref() => {
                    tx.exec_drop(
                        "UPDATE segmint_layout SET members = ?, state = ?, changed_ms = ?
                         WHERE epoch = ?",
                        (&row.members, &row.state, row.changed_ms, row.epoch),
                    )
                    .await
                    .map_err(db_error)?;
                    true
                }
                Some(_) => false,
            };
            tx.commit().await.map_err(db_error)?;
            Ok(written)
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
        self.run(move |mut conn| async move {
            let mut tx = conn.start_transaction(write_tx()).await.map_err(db_error)?;
            // The shared lock holds the layout row until the commit: a rewrite of its
            // state waits, so no lease is written after it.
            let held: Option<i64> = tx
                .exec_first(
                    "SELECT 1 FROM segmint_layout WHERE epoch = ? AND state = ? LOCK IN SHARE MODE",
                    (epoch, &state),
                )
                .await
                .map_err(db_error)?;
            if held.is_none() {
                tx.rollback().await.map_err(db_error)?;
                return Ok(None);
            }
            let mut written = Vec::with_capacity(rows.len());
            for r in &rows {
                tx.exec_drop(
                    format!(
                        "INSERT INTO segmint_worker_lease ({LEASE_COLUMNS})
                         VALUES (?, ?, 1, ?, ?, ?)
                         ON DUPLICATE KEY UPDATE holder = VALUES(holder), version = version + 1,
                             expires_ms = VALUES(expires_ms),
                             last_ms = GREATEST(last_ms, VALUES(last_ms)),
                             bound_ms = GREATEST(bound_ms, VALUES(bound_ms)),
                             update_time = now()"
                    ),
                    (i32::from(r.worker_id), &r.holder, r.expires_ms, r.last_ms, r.bound_ms),
                )
                .await
                .map_err(db_error)?;
                let row: Option<Row> = tx
                    .exec_first(
                        format!(
                            "SELECT {LEASE_COLUMNS}, {NOW_MS} FROM segmint_worker_lease WHERE worker_id = ?"
                        ),
                        (i32::from(r.worker_id),),
                    )
                    .await
                    .map_err(db_error)?;
                let row = row.ok_or_else(|| DbError::Query {
                    sqlstate: None,
                    message: "a lease row written is missing".into(),
                    source: None,
                })?;
                written.push(rules::lease_row(&row)?);
            }
            tx.commit().await.map_err(db_error)?;
            Ok(Some(written))
        })
        .await
    }

    async fn leases(&self) -> Result<Vec<LeaseRow>, DbError> {
        self.all(
            format!(
                "SELECT {LEASE_COLUMNS}, {NOW_MS} FROM segmint_worker_lease ORDER BY worker_id"
            ),
            rules::lease_row,
        )
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
        self.run(move |mut conn| async move {
            let worker = i32::from(worker_id);
            let mut tx = conn.start_transaction(write_tx()).await.map_err(db_error)?;
            // The row (or its gap) is locked until the commit: of two takers, one waits
            // and then sees the other's lease.
            let now = db_now(&mut tx).await?;
            let current: Option<(i64,)> = tx
                .exec_first(
                    "SELECT expires_ms FROM segmint_worker_lease WHERE worker_id = ? FOR UPDATE",
                    (worker,),
                )
                .await
                .map_err(db_error)?;
            let statement = match current {
                None => format!(
                    "INSERT INTO segmint_worker_lease ({LEASE_COLUMNS}) VALUES (?, ?, 1, ?, 0, 0)"
                ),
                Some((expires,)) if expires + grace_ms < now => "UPDATE segmint_worker_lease
                     SET holder = ?, version = version + 1, expires_ms = ?, update_time = now()
                     WHERE worker_id = ?"
                    .to_owned(),
                Some(_) => {
                    tx.rollback().await.map_err(db_error)?;
                    return Ok(None);
                }
            };
            let expires = now + lease_ms;
            if current.is_none() {
                let inserted = tx.exec_drop(statement, (worker, &holder, expires)).await;
                match inserted {
                    Ok(()) => {}
                    // Another taker inserted first: the lease is held.
                    Err(e) if lost_insert_race(&e) => return Ok(None),
                    Err(e) => return Err(db_error(e)),
                }
            } else {
                tx.exec_drop(statement, (&holder, expires, worker))
                    .await
                    .map_err(db_error)?;
            }
            let row = lease_as_written(&mut tx, worker, now).await?;
            tx.commit().await.map_err(db_error)?;
            Ok(row)
        })
        .await
    }

    async fn section(&self, biz: &str, section: u32) -> Result<Option<SectionRow>, DbError> {
        let biz = biz.to_owned();
        let section = rules::section_number(section);
        self.run(move |mut conn| async move {
            let row: Option<Row> = conn
                .exec_first(
                    format!(
                        "SELECT {SECTION_COLUMNS}, {NOW_MS} FROM segmint_sequence_section
                         WHERE biz_type = ? AND section = ?"
                    ),
                    (&biz, section),
                )
                .await
                .map_err(db_error)?;
            row.as_ref().map(rules::section_row).transpose()
        })
        .await
    }

    async fn sections(&self, biz: &str) -> Result<Vec<(u32, SectionRow)>, DbError> {
        let biz = biz.to_owned();
        self.run(move |mut conn| async move {
            let rows: Vec<Row> = conn
                .exec(
                    format!(
                        "SELECT section, {SECTION_COLUMNS}, {NOW_MS} FROM segmint_sequence_section
                         WHERE biz_type = ? ORDER BY section"
                    ),
                    (&biz,),
                )
                .await
                .map_err(db_error)?;
            read_all(&rows, rules::numbered_section_row)
        })
        .await
    }

    async fn write_section(&self, w: &SectionWrite) -> Result<Option<SectionRow>, DbError> {
        let w = w.clone();
        self.run(move |mut conn| async move {
            let section = rules::section_number(w.section);
            let mut tx = conn.start_transaction(write_tx()).await.map_err(db_error)?;
            let now = db_now(&mut tx).await?;
            let expires = now.saturating_add(w.lease_ms);
            match w.expected {
                Some(version) => {
                    tx.exec_drop(
                        "UPDATE segmint_sequence_section SET holder = ?, version = version + 1,
                             bound = ?, expires_ms = ?, update_time = now()
                         WHERE biz_type = ? AND section = ? AND version = ?",
                        (&w.holder, w.bound, expires, &w.biz, section, version),
                    )
                    .await
                    .map_err(db_error)?;
                    if tx.affected_rows() != 1 {
                        tx.rollback().await.map_err(db_error)?;
                        return Ok(None);
                    }
                }
                None => {
                    let inserted = tx
                        .exec_drop(
                            format!(
                                "INSERT INTO segmint_sequence_section
                                     (biz_type, section, {SECTION_COLUMNS})
                                 VALUES (?, ?, ?, 1, ?, ?)"
                            ),
                            (&w.biz, section, &w.holder, w.bound, expires),
                        )
                        .await;
                    match inserted {
                        Ok(()) => {}
                        // Inserted by another claim first: not at the version read.
                        Err(e) if lost_insert_race(&e) => return Ok(None),
                        Err(e) => return Err(db_error(e)),
                    }
                }
            }
            let row: Option<Row> = tx
                .exec_first(
                    format!(
                        "SELECT {SECTION_COLUMNS}, ? FROM segmint_sequence_section
                         WHERE biz_type = ? AND section = ?"
                    ),
                    (now, &w.biz, section),
                )
                .await
                .map_err(db_error)?;
            let row = row.as_ref().map(rules::section_row).transpose()?;
            tx.commit().await.map_err(db_error)?;
            Ok(row)
        })
        .await
    }

    async fn all_sections(&self) -> Result<Vec<(String, u32, SectionRow)>, DbError> {
        // The table's collation (utf8mb4_bin) orders names as bytes.
        self.all(
            format!(
                "SELECT biz_type, section, {SECTION_COLUMNS}, {NOW_MS}
                 FROM segmint_sequence_section ORDER BY biz_type, section"
            ),
            rules::named_section_row,
        )
        .await
    }

    /// One transaction: the database's clock, the compare-and-sets (their rows locked
    /// in one read, those at the version read written in one statement), the inserts
    /// (one statement), and the rows written read back before the commit; each
    /// statement names at most `BATCH_ROWS` rows. The rows are taken in their order,
    /// so that two batches do not deadlock on rows they both write; a deadlock found
    /// anyway rolls the whole transaction back, an error.
    async fn write_sections(
        &self,
        writes: &[SectionWrite],
    ) -> Result<Vec<Option<SectionRow>>, DbError> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let (updates, inserts): (Vec<usize>, Vec<usize>) = rules::in_row_order(writes)
            .into_iter()
            .partition(|&i| writes[i].expected.is_some());
        let writes = writes.to_vec();
        self.run(move |mut conn| async move {
            // The batch takes several round trips in one transaction, holding the rows'
            // locks: a server paused between them (SIGSTOP, a VM pause) would keep
            // every other server from claiming those sections until it resumed. The
            // database closes the connection (rolling the batch back) once it has waited
            // `IN_BATCH_WAIT_S` for the next statement; the usual wait is restored after.
            // A connection that fails on the way is closed, never pooled with the
            // short wait.
            let batch = async {
                conn.query_drop(format!("SET SESSION wait_timeout = {IN_BATCH_WAIT_S}"))
                    .await
                    .map_err(db_error)?;
                let mut tx = conn.start_transaction(write_tx()).await.map_err(db_error)?;
                let now = db_now(&mut tx).await?;
                let mut made = update_sections(&mut tx, &writes, &updates, now).await?;
                made.extend(insert_sections(&mut tx, &writes, &inserts, now).await?);
                let written = sections_as_written(&mut tx, &writes, &made, now).await?;
                tx.commit().await.map_err(db_error)?;
                conn.query_drop("SET SESSION wait_timeout = @@GLOBAL.wait_timeout")
                    .await
                    .map_err(db_error)?;
                Ok(written)
            }
            .await;
            if batch.is_err() {
                // Closing is best effort: a connection already broken is dropped alike.
                let _ = conn.disconnect().await;
            }
            batch
        })
        .await
    }

    async fn renew_lease(&self, renewal: &LeaseRenewal) -> Result<Option<LeaseRow>, DbError> {
        let r = renewal.clone();
        self.run(move |mut conn| async move {
            let worker = i32::from(r.worker_id);
            let mut tx = conn.start_transaction(write_tx()).await.map_err(db_error)?;
            let now = db_now(&mut tx).await?;
            tx.exec_drop(
                "UPDATE segmint_worker_lease SET version = version + 1, expires_ms = ?,
                     last_ms = GREATEST(last_ms, ?), bound_ms = GREATEST(bound_ms, ?),
                     update_time = now()
                 WHERE worker_id = ? AND holder = ? AND (version = ? OR ? < 0)",
                (
                    now + r.expires_in_ms,
                    r.last_ms,
                    r.bound_ms,
                    worker,
                    &r.holder,
                    r.version,
                    r.expires_in_ms,
                ),
            )
            .await
            .map_err(db_error)?;
            if tx.affected_rows() != 1 {
                tx.rollback().await.map_err(db_error)?;
                return Ok(None);
            }
            let row = lease_as_written(&mut tx, worker, now).await?;
            tx.commit().await.map_err(db_error)?;
            Ok(row)
        })
        .await
    }

    async fn snowflake_spec(&self) -> Result<Option<(String, bool)>, DbError> {
        self.run(|mut conn| async move {
            conn.query_first("SELECT spec, confirmed FROM segmint_snowflake WHERE id = 1")
                .await
                .map_err(db_error)
        })
        .await
    }

    async fn confirm_snowflake_spec(&self, spec: &str) -> Result<bool, DbError> {
        let spec = spec.to_owned();
        self.run(move |mut conn| async move {
            conn.exec_drop(
                "UPDATE segmint_snowflake SET confirmed = true
                 WHERE id = 1 AND spec = ? AND NOT confirmed",
                (&spec,),
            )
            .await
            .map_err(db_error)?;
            Ok(conn.affected_rows() == 1)
        })
        .await
    }

    async fn record_snowflake_spec(&self, spec: &str) -> Result<bool, DbError> {
        let spec = spec.to_owned();
        self.run(move |mut conn| async move {
            // Not INSERT IGNORE, which would hide other errors too: a duplicate key
            // leaves the row as it is (0 rows affected).
            conn.exec_drop(
                "INSERT INTO segmint_snowflake (id, spec) VALUES (1, ?) ON DUPLICATE KEY UPDATE id = id",
                (&spec,),
            )
            .await
            .map_err(db_error)?;
            Ok(conn.affected_rows() == 1)
        })
        .await
    }
}

impl MyStore {
    /// Runs `sql`, an UPDATE of token rows taking a time, the hash, and optionally the
    /// time again. Returns the number of rows updated.
    async fn update_tokens(
        &self,
        sql: &'static str,
        token_hash: &str,
        at: i64,
    ) -> Result<u64, DbError> {
        let hash = token_hash.to_owned();
        self.run(move |mut conn| async move {
            let params = if sql.matches('?').count() == 3 {
                mysql_async::Params::Positional(vec![at.into(), hash.into(), at.into()])
            } else {
                mysql_async::Params::Positional(vec![at.into(), hash.into()])
            };
            conn.exec_drop(sql, params).await.map_err(db_error)?;
            Ok(conn.affected_rows())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::{BizTable, Step, statements, step};

    #[test]
    fn if_not_exists_is_checked_by_the_runner_not_the_server() {
        let Step::Unless { params, sql, .. } = step(
            "ALTER TABLE `leaf_alloc` ADD COLUMN IF NOT EXISTS delta bigint NOT NULL DEFAULT 1",
        ) else {
            panic!("ADD COLUMN IF NOT EXISTS is checked");
        };
        assert_eq!(params, ["leaf_alloc", "delta"]);
        assert_eq!(
            sql,
            "ALTER TABLE `leaf_alloc` ADD COLUMN delta bigint NOT NULL DEFAULT 1"
        );
        let Step::Unless { params, sql, .. } =
            step("CREATE INDEX IF NOT EXISTS segmint_token ON tiny_id_token (token_hash)")
        else {
            panic!("CREATE INDEX IF NOT EXISTS is checked");
        };
        assert_eq!(params, ["tiny_id_token", "segmint_token"]);
        assert_eq!(
            sql,
            "CREATE INDEX segmint_token ON tiny_id_token (token_hash)"
        );
        let Step::Unless { params, sql, .. } = step(
            "CREATE TRIGGER IF NOT EXISTS t BEFORE UPDATE ON leaf_alloc FOR EACH ROW SET NEW.x = 1",
        ) else {
            panic!("CREATE TRIGGER IF NOT EXISTS is checked");
        };
        assert_eq!(params, ["t"]);
        assert_eq!(
            sql,
            "CREATE TRIGGER t BEFORE UPDATE ON leaf_alloc FOR EACH ROW SET NEW.x = 1"
        );
        assert_eq!(
            step("CREATE TABLE IF NOT EXISTS a (x int)"),
            Step::Run("CREATE TABLE IF NOT EXISTS a (x int)".into())
        );
    }

    /// What reaches the server from every migration of both table sets holds no
    /// `IF NOT EXISTS` MySQL 8 would refuse: only `CREATE TABLE` keeps it (MySQL has
    /// it), and an `ALTER TABLE` adds one column, so that the runner's check covers it.
    #[test]
    fn every_migration_runs_on_mysql_8_syntax() {
        for table in [BizTable::tinyid(), BizTable::leaf()] {
            for (version, name, sql) in table.migrations {
                for statement in statements(sql) {
                    let sent = match step(&statement) {
                        Step::Run(sql) | Step::Unless { sql, .. } => sql,
                    };
                    let upper = sent.to_ascii_uppercase();
                    assert!(
                        !upper.contains("IF NOT EXISTS")
                            || upper.starts_with("CREATE TABLE IF NOT EXISTS"),
                        "{version:04}_{name}: {sent}"
                    );
                    assert!(
                        !(upper.starts_with("ALTER TABLE") && upper.matches("ADD ").count() > 1),
                        "{version:04}_{name}: one column an ALTER TABLE: {sent}"
                    );
                }
            }
        }
    }

    #[test]
    fn migration_files_split_into_statements() {
        let sql = "-- a comment\nCREATE TABLE a (\n  x int\n);\n\nALTER TABLE a ADD y int;\n";
        assert_eq!(
            statements(sql),
            ["CREATE TABLE a (\n  x int\n)", "ALTER TABLE a ADD y int"]
        );
        assert!(statements("-- nothing\n").is_empty());
    }
}

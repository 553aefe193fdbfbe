//! A PostgreSQL database behind a deadpool connection pool.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::Row;

use crate::config::PgTarget;

use super::error::with_causes;
use super::rules::{
    self, BIZ_COLUMNS, Cells, LAYOUT_COLUMNS, LEASE_COLUMNS, Migration, SECTION_COLUMNS,
    SHAPE_COLUMNS, WITNESS_COLUMNS, migrations,
};
use super::{
    BizRow, CatalogRows, DbError, FeedPosition, Inserted, LayoutRow, LeaseRenewal, LeaseRow,
    LeaseSet, RowWrite, SectionRow, SectionWrite, SegmentStore, ShapeRow, TokenRow, Witness,
};

/// Schema migrations, applied in order, each once per database.
const MIGRATIONS: &[Migration] = migrations!("postgres");

/// The database's clock in Unix milliseconds: the time of the statement's execution,
/// not of its transaction's start.
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The token rows, as [`rules::token_row`] reads them.
const TOKENS: &str = "SELECT id, token, biz_type, remark,
        floor(extract(epoch FROM create_time))::bigint,
        floor(extract(epoch FROM expire_time))::bigint,
        floor(extract(epoch FROM revoke_time))::bigint,
        floor(extract(epoch FROM last_used_time))::bigint
    FROM tiny_id_token";

/// The writes of [`SegmentStore::write_sections`] in one statement. Its parameters
/// are arrays, one value a write: biz, section, the version read (NULL: absent),
/// holder, bound, lease and the write's position in the batch. Each row written comes
/// back with its position.
///
/// A compare-and-set finds its row by the primary key, one lookup a write (a lateral
/// subquery the planner cannot flatten: joined to the arrays, it hashes the whole table
/// instead once it knows their length), and updates it by its address. A row updated
/// by another transaction since is rechecked at its new version, whose address and
/// version differ: that write is lost, as `write_section`'s would be. The inserts are
/// of the rows still absent. The clock is read once, for every expiry (a CTE that calls
/// a volatile function is evaluated once).
fn write_sections_sql() -> String {
    format!(
        "WITH clock AS (SELECT {NOW_MS} AS ms),
         w AS (SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[], $4::text[],
                                    $5::bigint[], $6::bigint[], $7::integer[])
                   AS w(biz, num, expected, new_holder, new_bound, lease_ms, at)),
         found AS (
             SELECT hit.address, w.* FROM w CROSS JOIN LATERAL (
                 SELECT ctid AS address FROM segmint_sequence_section
                 WHERE biz_type = w.biz AND section = w.num AND version = w.expected
                 OFFSET 0) hit),
         updated AS (
             UPDATE segmint_sequence_section s SET holder = found.new_holder,
                 version = s.version + 1, bound = found.new_bound,
                 expires_ms = clock.ms + found.lease_ms, update_time = now()
             FROM found, clock
             WHERE s.ctid = found.address AND s.version = found.expected
             RETURNING {SECTION_COLUMNS}, clock.ms, found.at),
         inserted AS (
             INSERT INTO segmint_sequence_section (biz_type, section, {SECTION_COLUMNS})
             SELECT w.biz, w.num, w.new_holder, 1, w.new_bound, clock.ms + w.lease_ms
             FROM w, clock WHERE w.expected IS NULL
             ON CONFLICT (biz_type, section) DO NOTHING
             RETURNING biz_type, section, {SECTION_COLUMNS})
         SELECT * FROM updated
         UNION ALL
         SELECT {SECTION_COLUMNS}, clock.ms, w.at FROM inserted
             JOIN w ON inserted.biz_type = w.biz AND inserted.section = w.num, clock"
    )
}

/// Serialises concurrent `segmint migrate` runs on one database.
const MIGRATION_LOCK: i64 = 0x0005_e91d;

/// One PostgreSQL database.
pub struct PgStore {
    /// Connections; also bounds how many statements run at once.
    pool: Pool,
}

impl PgStore {
    /// A pool for `target` that connects lazily, through its TLS connector. Connecting,
    /// waiting for a connection and every statement are bounded by `timeout`, so a
    /// stalled database fails fast.
    ///
    /// # Errors
    /// [`DbError`] when the pool cannot be built.
    pub fn new(target: &PgTarget, pool_size: usize, timeout: Duration) -> Result<Self, DbError> {
        let mut pg = target.config.clone();
        pg.ssl_mode(target.tls.mode.negotiation());
        // A reservation is used once its commit returns: with `synchronous_commit` off
        // (a server default some tune for speed) a crash could lose a commit already
        // answered, and the IDs of its segment would be issued again. Options given last
        // win, so no URL or server default can turn it off for segmint's sessions.
        let options = format!(
            "{} -c statement_timeout={} -c synchronous_commit=on",
            pg.get_options().unwrap_or(""),
            timeout.as_millis()
        );
        pg.options(options.trim())
            .application_name("segmint")
            .connect_timeout(timeout);
        let manager = Manager::from_connect(
            pg,
            OnRuntime {
                tls: target.connector.clone(),
                runtime: io_runtime(),
            },
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(timeout))
            .create_timeout(Some(timeout))
            .recycle_timeout(Some(timeout))
            .build()
            .map_err(|e| DbError::connect(format!("cannot build connection pool: {e}"), e))?;
        Ok(PgStore { pool })
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, DbError> {
        self.pool
            .get()
            .await
            .map_err(|e| DbError::connect(with_causes(&e), e))
    }
}

/// The runtime that opens and drives every PostgreSQL connection of the process: one
/// thread of its own, which runs nothing else and lives as long as the process (never
/// dropped, so never dropped inside another runtime). `None` if it cannot be started;
/// connections are then made where they are asked for.
///
/// A connection belongs to the runtime it was opened on (its socket to that runtime's
/// I/O driver), and answers only while that runtime's thread is free to drive it.
/// Opened for a request on an HTTP worker (each has a runtime of its own), it failed
/// when that worker stopped, under the give-backs and the worker-ID release of a
/// stopping server. Opened on the main runtime, it waited while that thread worked
/// (a full catalog read streams and checks a million rows there).
pub(crate) fn io_runtime() -> Option<tokio::runtime::Handle> {
    static IO: std::sync::OnceLock<Option<tokio::runtime::Handle>> = std::sync::OnceLock::new();
    IO.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("segmint-db-io".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .ok()?;
        Some(handle)
    })
    .clone()
}

/// Connects as deadpool does by default, but on `runtime` ([`io_runtime`]), where the
/// connection is then driven.
struct OnRuntime<T> {
    tls: T,
    runtime: Option<tokio::runtime::Handle>,
}

impl<T> OnRuntime<T>
where
    T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
{
    /// Connects and spawns the connection's driver, both on the current runtime.
    async fn here(
        tls: T,
        pg_config: tokio_postgres::Config,
    ) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error> {
        let (client, connection) = pg_config.connect(tls).await?;
        let task = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(target: "deadpool.postgres", "Connection error: {e}");
            }
        });
        Ok((client, task))
    }
}

impl<T> deadpool_postgres::Connect for OnRuntime<T>
where
    T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
{
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> futures_util::future::BoxFuture<
        '_,
        Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>,
    > {
        let (tls, pg_config) = (self.tls.clone(), pg_config.clone());
        Box::pin(async move {
            match &self.runtime {
                Some(runtime) => {
                    let (tls_again, config_again) = (tls.clone(), pg_config.clone());
                    match runtime.spawn(Self::here(tls, pg_config)).await {
                        Ok(connected) => connected,
                        // Not reached: the runtime lives as long as the process.
                        Err(_) => Self::here(tls_again, config_again).await,
                    }
                }
                None => Self::here(tls, pg_config).await,
            }
        })
    }
}

/// A transaction that reads one snapshot of every table; read-only, so it never waits
/// on a writer.
async fn read_snapshot(
    client: &mut deadpool_postgres::Object,
) -> Result<deadpool_postgres::Transaction<'_>, DbError> {
    client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(db_error)
}

fn db_error(e: tokio_postgres::Error) -> DbError {
    let (sqlstate, message) = match e.as_db_error() {
        Some(db) => (Some(db.code().code().to_owned()), db.message().to_owned()),
        None => (None, with_causes(&e)),
    };
    DbError::Query {
        sqlstate,
        message,
        source: Some(Box::new(e)),
    }
}

impl Cells for Row {
    type Error = tokio_postgres::Error;
    fn int(&self, i: usize) -> Result<i64, Self::Error> {
        self.try_get(i)
    }
    fn int32(&self, i: usize) -> Result<i32, Self::Error> {
        self.try_get(i)
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, Self::Error> {
        self.try_get(i)
    }
    fn text(&self, i: usize) -> Result<String, Self::Error> {
        self.try_get(i)
    }
    fn flag(&self, i: usize) -> Result<bool, Self::Error> {
        self.try_get(i)
    }
}

/// Every row of `rows` read by `read`.
fn read_all<T>(
    rows: &[Row],
    read: impl Fn(&Row) -> Result<T, tokio_postgres::Error>,
) -> Result<Vec<T>, DbError> {
    rows.iter().map(|r| read(r).map_err(db_error)).collect()
}

/// The row `row`, if any, read by `read`.
fn read_opt<T>(
    row: Option<Row>,
    read: impl Fn(&Row) -> Result<T, tokio_postgres::Error>,
) -> Result<Option<T>, DbError> {
    row.as_ref().map(read).transpose().map_err(db_error)
}

#[async_trait]
impl SegmentStore for PgStore {
    async fn migrate(&self) -> Result<Vec<String>, DbError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        tx.batch_execute(&format!(
            "SELECT pg_advisory_xact_lock({MIGRATION_LOCK});
             CREATE TABLE IF NOT EXISTS segmint_migrations (
                 version integer PRIMARY KEY,
                 name text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now())"
        ))
        .await
        .map_err(db_error)?;
        let applied = read_all(
            &tx.query("SELECT version FROM segmint_migrations", &[])
                .await
                .map_err(db_error)?,
            |r| r.int32(0),
        )?;
        let mut done = Vec::new();
        for migration @ (version, name, sql) in rules::pending(MIGRATIONS, &applied) {
            tx.batch_execute(sql).await.map_err(db_error)?;
            tx.execute(
                "INSERT INTO segmint_migrations (version, name) VALUES ($1, $2)",
                &[version, name],
            )
            .await
            .map_err(db_error)?;
            done.push(rules::migration_name(migration));
        }
        tx.commit().await.map_err(db_error)?;
        Ok(done)
    }

    /// Also checks that the session commits synchronously (see [`PgStore::new`]): a
    /// database where that does not hold is not ready.
    async fn ping(&self) -> Result<(), DbError> {
        let row = self
            .client()
            .await?
            .query_one("SHOW synchronous_commit", &[])
            .await
            .map_err(db_error)?;
        match row.try_get::<_, &str>(0).map_err(db_error)? {
            "on" => Ok(()),
            other => Err(DbError::Refused {
                reason: format!(
                    "synchronous_commit is {other}, not on: a crash could lose reservations"
                ),
            }),
        }
    }

    async fn clock_ms(&self) -> Result<i64, DbError> {
        let row = self
            .client()
            .await?
            .query_one(&format!("SELECT {NOW_MS}"), &[])
            .await
            .map_err(db_error)?;
        row.try_get::<_, i64>(0).map_err(db_error)
    }

    async fn biz(&self, biz: &str) -> Result<Option<BizRow>, DbError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {BIZ_COLUMNS} FROM tiny_id_info WHERE biz_type = $1"
            ))
            .await
            .map_err(db_error)?;
        let row = client.query_opt(&stmt, &[&biz]).await.map_err(db_error)?;
        read_opt(row, rules::biz_row)
    }

    async fn write_row(
        &self,
        biz: &str,
        version: i64,
        max_id: i64,
        to: &RowWrite,
    ) -> Result<Option<BizRow>, DbError> {
        let client = self.client().await?;
        // A NULL keeps the column: without a class, a write leaves class, epoch, frozen
        // state and claim as they are, even if edited since the caller's read.
        let stmt = client
            .prepare_cached(&format!(
                "UPDATE tiny_id_info SET version = $4::bigint, max_id = $5::bigint,
                     delta = coalesce($6::bigint, delta),
                     remainder = coalesce($7::bigint, remainder),
                     layout_epoch = coalesce($8::bigint, layout_epoch),
                     frozen = coalesce($9::boolean, frozen),
                     claimed_by = coalesce($10::bigint, claimed_by), update_time = now()
                 WHERE biz_type = $1::text AND version = $2::bigint AND max_id = $3::bigint
                 RETURNING {BIZ_COLUMNS}"
            ))
            .await
            .map_err(db_error)?;
        let class = to.class;
        // The statement runs in an implicit transaction that commits at Sync, before
        // ReadyForQuery. `query_opt` reads the stream until ReadyForQuery
        // (tokio-postgres 0.7.18, src/query.rs:358) and turns an ErrorResponse or a
        // closed connection into an error (src/client.rs:50, :57), so a failed or
        // unknown commit returns an error and its segment is never used.
        let row = client
            .query_opt(
                &stmt,
                &[
                    &biz,
                    &version,
                    &max_id,
                    &to.version,
                    &to.max_id,
                    &class.map(|c| c.delta),
                    &class.map(|c| c.remainder),
                    &class.map(|c| c.epoch),
                    &class.map(|c| c.frozen),
                    &class.map(|c| c.claimed_by),
                ],
            )
            .await
            .map_err(db_error)?;
        read_opt(row, rules::biz_row)
    }

    async fn witness(&self, witnesses: &[Witness]) -> Result<(), DbError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let stmt = tx
            .prepare_cached(
                "INSERT INTO segmint_witness AS w (database, biz_type, version, max_id, high_id)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (database, biz_type) DO UPDATE SET
                     max_id = CASE WHEN excluded.version > w.version THEN excluded.max_id ELSE w.max_id END,
                     version = GREATEST(w.version, excluded.version),
                     high_id = GREATEST(w.high_id, excluded.high_id),
                     update_time = now()",
            )
            .await
            .map_err(db_error)?;
        for w in witnesses {
            tx.execute(
                &stmt,
                &[
                    &w.database,
                    &w.biz,
                    &w.mark.version,
                    &w.mark.max_id,
                    &w.mark.high_id,
                ],
            )
            .await
            .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)
    }

    async fn witness_rows(&self, biz: Option<&str>) -> Result<Vec<Witness>, DbError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {WITNESS_COLUMNS} FROM segmint_witness
                     WHERE $1::text IS NULL OR biz_type = $1::text"
                ),
                &[&biz],
            )
            .await
            .map_err(db_error)?;
        read_all(&rows, rules::witness_row)
    }

    async fn bizs(&self) -> Result<Vec<BizRow>, DbError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT {BIZ_COLUMNS} FROM tiny_id_info ORDER BY biz_type"),
                &[],
            )
            .await
            .map_err(db_error)?;
        read_all(&rows, rules::biz_row)
    }

    async fn insert_bizs(&self, rows: &[BizRow]) -> Result<Vec<Inserted>, DbError> {
        let Some(epoch) = rows.iter().map(|r| r.epoch).min() else {
            return Ok(Vec::new());
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        // SHARE conflicts with the ROW EXCLUSIVE lock of a claim's INSERT: a claim
        // either committed before this reads the layouts, or waits for these inserts to
        // commit (and the change then lists these bizs among the rows it moves).
        tx.batch_execute("LOCK TABLE segmint_layout IN SHARE MODE")
            .await
            .map_err(db_error)?;
        let above = tx
            .query_one(
                "SELECT max(epoch) FROM segmint_layout WHERE epoch > $1::bigint",
                &[&epoch],
            )
            .await
            .map_err(db_error)?
            .opt_int(0)
            .map_err(db_error)?;
        if let Some(above) = above {
            return Ok(vec![Inserted::LayoutAbove(above); rows.len()]);
        }
        let column = |f: fn(&BizRow) -> i64| rows.iter().map(f).collect::<Vec<i64>>();
        let names: Vec<&str> = rows.iter().map(|r| r.biz_type.as_str()).collect();
        let descriptions: Vec<&str> = rows.iter().map(|r| &*r.description).collect();
        let frozen: Vec<bool> = rows.iter().map(|r| r.frozen).collect();
        let inserted = tx
            .query(
                &format!(
                    "INSERT INTO tiny_id_info ({BIZ_COLUMNS})
                     SELECT * FROM unnest($1::varchar[], $2::bigint[], $3::bigint[], $4::bigint[],
                         $5::bigint[], $6::bigint[], $7::bigint[], $8::varchar[], $9::bigint[],
                         $10::boolean[], $11::bigint[])
                     ON CONFLICT (biz_type) DO NOTHING RETURNING biz_type"
                ),
                &[
                    &names,
                    &column(|r| r.begin_id),
                    &column(|r| r.max_id),
                    &column(|r| r.step),
                    &column(|r| r.delta),
                    &column(|r| r.remainder),
                    &column(|r| r.version),
                    &descriptions,
                    &column(|r| r.epoch),
                    &frozen,
                    &column(|r| r.claimed_by),
                ],
            )
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        let inserted: std::collections::HashSet<String> = inserted
            .iter()
            .map(|r| r.text(0))
            .collect::<Result<_, _>>()
            .map_err(db_error)?;
        Ok(rows
            .iter()
            .map(|r| match inserted.contains(r.biz_type.as_str()) {
                true => Inserted::Yes,
                false => Inserted::Exists,
            })
            .collect())
    }

    async fn shapes(&self) -> Result<Vec<ShapeRow>, DbError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT {SHAPE_COLUMNS} FROM segmint_biz_shape ORDER BY biz_type"),
                &[],
            )
            .await
            .map_err(db_error)?;
        read_all(&rows, rules::shape_row)
    }

    async fn put_shape(&self, r: &ShapeRow) -> Result<(), DbError> {
        let client = self.client().await?;
        client
            .execute(
                &format!(
                    "INSERT INTO segmint_biz_shape ({SHAPE_COLUMNS})
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                     ON CONFLICT (biz_type) DO UPDATE SET id_order = excluded.id_order, block = excluded.block,
                         domain = excluded.domain, within_delta = excluded.within_delta,
                         within_remainder = excluded.within_remainder, shape_key = excluded.shape_key,
                         prefix = excluded.prefix, width = excluded.width, base = excluded.base,
                         check_char = excluded.check_char, as_string = excluded.as_string,
                             period_spec = excluded.period_spec"
                ),
                &[
                    &r.biz_type,
                    &r.id_order,
                    &r.block,
                    &r.domain,
                    &r.within_delta,
                    &r.within_remainder,
                    &r.key,
                    &r.prefix,
                    &r.width,
                    &r.base,
                    &r.check_char,
                    &r.as_string,
                    &r.period,
                ],
            )
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn describe(&self, biz: &str, description: &str) -> Result<bool, DbError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "UPDATE tiny_id_info SET description = $2, update_time = now() WHERE biz_type = $1",
                &[&biz, &description],
            )
            .await
            .map_err(db_error)?;
        Ok(n == 1)
    }

    async fn tokens(&self) -> Result<Vec<TokenRow>, DbError> {
        let client = self.client().await?;
        let rows = client
            .query(&format!("{TOKENS} ORDER BY id"), &[])
            .await
            .map_err(db_error)?;
        read_all(&rows, rules::token_row)
    }

    async fn insert_token(
        &self,
        token_hash: &str,
        biz: &str,
        remark: &str,
        expires: Option<i64>,
    ) -> Result<(), DbError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO tiny_id_token (token, biz_type, remark, expire_time)
                 VALUES ($1, $2, $3, to_timestamp($4::bigint))
                 ON CONFLICT (token, biz_type) DO NOTHING",
                &[&token_hash, &biz, &remark, &expires],
            )
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn revoke_tokens(&self, token_hash: &str, at: i64) -> Result<u64, DbError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE tiny_id_token SET revoke_time = to_timestamp($2::bigint), update_time = now()
                 WHERE lower(token) = $1 AND revoke_time IS NULL",
                &[&token_hash, &at],
            )
            .await
            .map_err(db_error)
    }

    async fn expire_token(&self, token_hash: &str, at: i64) -> Result<u64, DbError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE tiny_id_token SET expire_time = to_timestamp($2::bigint), update_time = now()
                 WHERE lower(token) = $1
                   AND (expire_time IS NULL OR expire_time > to_timestamp($2::bigint))",
                &[&token_hash, &at],
            )
            .await
            .map_err(db_error)
    }

    async fn touch_tokens(&self, uses: &[(String, i64)]) -> Result<(), DbError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let stmt = tx
            .prepare_cached(
                "UPDATE tiny_id_token SET last_used_time = to_timestamp($2::bigint)
                 WHERE lower(token) = $1
                   AND (last_used_time IS NULL OR last_used_time < to_timestamp($2::bigint))",
            )
            .await
            .map_err(db_error)?;
        for (hash, at) in uses {
            tx.execute(&stmt, &[hash, at]).await.map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)
    }

    async fn layouts(&self) -> Result<Vec<LayoutRow>, DbError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT {LAYOUT_COLUMNS} FROM segmint_layout ORDER BY epoch"),
                &[],
            )
            .await
            .map_err(db_error)?;
        read_all(&rows, rules::layout_row)
    }

    async fn catalog(&self, since: Option<&FeedPosition>) -> Result<CatalogRows, DbError> {
        let mut client = self.client().await?;
        let tx = read_snapshot(&mut client).await?;
        let now = tx
            .query_one(
                "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
                        extract(epoch FROM pg_postmaster_start_time())::text
                            || '/' || (SELECT deletions FROM segmint_feed WHERE id = 1)",
                &[],
            )
            .await
            .map_err(db_error)?;
        let position = FeedPosition {
            next: now.int(0).map_err(db_error)?,
            incarnation: now.text(1).map_err(db_error)?,
        };
        let from = rules::resume_at(since, &position);
        let from_xid = from.unwrap_or(i64::MIN);
        if from.is_none() {
            // Every row (a million bizs: seconds): the session's statement bound is a
            // request's; the caller bounds a full read.
            tx.batch_execute("SET LOCAL statement_timeout = 0")
                .await
                .map_err(db_error)?;
        }
        // Each row is turned into its record as it arrives, so that a full read of a
        // million rows never holds them all twice (raw and read).
        async fn stream<T>(
            tx: &tokio_postgres::Transaction<'_>,
            sql: String,
            from_xid: i64,
            read: impl Fn(&Row) -> Result<T, tokio_postgres::Error>,
        ) -> Result<Vec<T>, DbError> {
            use futures_util::TryStreamExt;
            let rows = tx.query_raw(&sql, [from_xid]).await.map_err(db_error)?;
            let mut rows = std::pin::pin!(rows);
            let mut out = Vec::new();
            while let Some(row) = rows.try_next().await.map_err(db_error)? {
                out.push(read(&row).map_err(db_error)?);
            }
            Ok(out)
        }
        let bizs = stream(
            &tx,
            format!(
                "SELECT {BIZ_COLUMNS} FROM tiny_id_info WHERE change_xid >= $1 ORDER BY biz_type"
            ),
            from_xid,
            rules::biz_row,
        )
        .await?;
        let shapes = stream(
            &tx,
            format!(
                "SELECT {SHAPE_COLUMNS} FROM segmint_biz_shape WHERE change_xid >= $1 ORDER BY biz_type"
            ),
            from_xid,
            rules::shape_row,
        )
        .await?;
        let tokens = stream(
            &tx,
            format!("{TOKENS} WHERE change_xid >= $1 ORDER BY id"),
            from_xid,
            rules::token_row,
        )
        .await?;
        let witnesses = stream(
            &tx,
            format!("SELECT {WITNESS_COLUMNS} FROM segmint_witness WHERE change_xid >= $1"),
            from_xid,
            rules::witness_row,
        )
        .await?;
        let layouts = tx
            .query(
                &format!("SELECT {LAYOUT_COLUMNS} FROM segmint_layout ORDER BY epoch"),
                &[],
            )
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(CatalogRows {
            position: Some(position),
            full: from.is_none(),
            bizs,
            shapes,
            tokens,
            witnesses,
            layouts: read_all(&layouts, rules::layout_row)?,
        })
    }

    async fn catalog_of(
        &self,
        biz: &str,
        token_hash: Option<&str>,
        databases: &[String],
    ) -> Result<CatalogRows, DbError> {
        let mut client = self.client().await?;
        let tx = read_snapshot(&mut client).await?;
        // Sent together (one round trip for all five), each by its table's index.
        let (bizs, shapes, tokens, witnesses, layouts) = futures_util::future::try_join5(
            tx.query(
                &format!("SELECT {BIZ_COLUMNS} FROM tiny_id_info WHERE biz_type = $1"),
                &[&biz],
            ),
            tx.query(
                &format!("SELECT {SHAPE_COLUMNS} FROM segmint_biz_shape WHERE biz_type = $1"),
                &[&biz],
            ),
            tx.query(
                &format!("{TOKENS} WHERE token = $1::text ORDER BY id"),
                &[&token_hash],
            ),
            tx.query(
                &format!(
                    "SELECT {WITNESS_COLUMNS} FROM segmint_witness
                     WHERE database = ANY($1) AND biz_type = $2"
                ),
                &[&databases, &biz],
            ),
            tx.query(
                &format!("SELECT {LAYOUT_COLUMNS} FROM segmint_layout ORDER BY epoch"),
                &[],
            ),
        )
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(CatalogRows {
            position: None,
            full: false,
            bizs: read_all(&bizs, rules::biz_row)?,
            shapes: read_all(&shapes, rules::shape_row)?,
            tokens: read_all(&tokens, rules::token_row)?,
            witnesses: read_all(&witnesses, rules::witness_row)?,
            layouts: read_all(&layouts, rules::layout_row)?,
        })
    }

    async fn write_layout(
        &self,
        row: &LayoutRow,
        replacing: Option<&str>,
    ) -> Result<bool, DbError> {
        let client = self.client().await?;
        // With `replacing` NULL the WHERE is never true: an insert if absent.
        let n = client
            .execute(
                &format!(
                    "INSERT INTO segmint_layout AS l ({LAYOUT_COLUMNS})
                     VALUES ($1::bigint, $2::text, $3::text, $4::bigint)
                     ON CONFLICT (epoch) DO UPDATE SET members = excluded.members,
                         state = excluded.state, changed_ms = excluded.changed_ms
                     WHERE l.state = $5::text"
                ),
                &[
                    &row.epoch,
                    &row.members,
                    &row.state,
                    &row.changed_ms,
                    &replacing,
                ],
            )
            .await
            .map_err(db_error)?;
        Ok(n == 1)
    }

    async fn set_leases_while(
        &self,
        epoch: i64,
        state: &str,
        rows: &[LeaseSet],
    ) -> Result<Option<Vec<LeaseRow>>, DbError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        // FOR SHARE holds the layout row until the commit: a rewrite of its state (a
        // later change superseding this one) waits, so no lease is written after it.
        let held = tx
            .query_opt(
                "SELECT 1 FROM segmint_layout WHERE epoch = $1::bigint AND state = $2::text FOR SHARE",
                &[&epoch, &state],
            )
            .await
            .map_err(db_error)?;
        if held.is_none() {
            return Ok(None);
        }
        let stmt = tx
            .prepare(&format!(
                "INSERT INTO segmint_worker_lease AS l ({LEASE_COLUMNS})
                 VALUES ($1::integer, $2::text, 1, $3::bigint, $4::bigint, $5::bigint)
                 ON CONFLICT (worker_id) DO UPDATE SET
                     holder = excluded.holder, version = l.version + 1,
                     expires_ms = excluded.expires_ms,
                     last_ms = GREATEST(l.last_ms, excluded.last_ms),
                     bound_ms = GREATEST(l.bound_ms, excluded.bound_ms),
                     update_time = now()
                 RETURNING {LEASE_COLUMNS}, {NOW_MS}"
            ))
            .await
            .map_err(db_error)?;
        let mut written = Vec::with_capacity(rows.len());
        for r in rows {
            let row = tx
                .query_one(
                    &stmt,
                    &[
                        &i32::from(r.worker_id),
                        &r.holder,
                        &r.expires_ms,
                        &r.last_ms,
                        &r.bound_ms,
                    ],
                )
                .await
                .map_err(db_error)?;
            written.push(rules::lease_row(&row).map_err(db_error)?);
        }
        tx.commit().await.map_err(db_error)?;
        Ok(Some(written))
    }

    async fn leases(&self) -> Result<Vec<LeaseRow>, DbError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {LEASE_COLUMNS}, {NOW_MS} FROM segmint_worker_lease ORDER BY worker_id"
                ),
                &[],
            )
            .await
            .map_err(db_error)?;
        read_all(&rows, rules::lease_row)
    }

    async fn take_lease(
        &self,
        worker_id: u16,
        holder: &str,
        lease_ms: i64,
        grace_ms: i64,
    ) -> Result<Option<LeaseRow>, DbError> {
        let client = self.client().await?;
        // The new expiry is `now + lease_ms`, so `excluded.expires_ms - lease_ms` is the
        // database's clock: the row is taken only when its lease ran out more than the
        // grace period ago. The earlier holder's last_ms and bound_ms stay, for the new
        // holder to issue above them. One statement: the row lock decides a race.
        let row = client
            .query_opt(
                &format!(
                    "INSERT INTO segmint_worker_lease AS l ({LEASE_COLUMNS})
                     VALUES ($1::integer, $2::text, 1, {NOW_MS} + $3::bigint, 0, 0)
                     ON CONFLICT (worker_id) DO UPDATE SET
                         holder = excluded.holder, version = l.version + 1,
                         expires_ms = excluded.expires_ms, update_time = now()
                     WHERE l.expires_ms + $4::bigint < excluded.expires_ms - $3::bigint
                     RETURNING {LEASE_COLUMNS}, expires_ms - $3::bigint"
                ),
                &[&i32::from(worker_id), &holder, &lease_ms, &grace_ms],
            )
            .await
            .map_err(db_error)?;
        read_opt(row, rules::lease_row)
    }

    async fn renew_lease(&self, renewal: &LeaseRenewal) -> Result<Option<LeaseRow>, DbError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "UPDATE segmint_worker_lease SET version = version + 1,
                         expires_ms = {NOW_MS} + $4::bigint,
                         last_ms = GREATEST(last_ms, $5::bigint), bound_ms = GREATEST(bound_ms, $6::bigint),
                         update_time = now()
                     WHERE worker_id = $1::integer AND holder = $2::text
                       AND (version = $3::bigint OR $4::bigint < 0)
                     RETURNING {LEASE_COLUMNS}, expires_ms - $4::bigint"
                ),
                &[
                    &i32::from(renewal.worker_id),
                    &renewal.holder,
                    &renewal.version,
                    &renewal.expires_in_ms,
                    &renewal.last_ms,
                    &renewal.bound_ms,
                ],
            )
            .await
            .map_err(db_error)?;
        read_opt(row, rules::lease_row)
    }

    async fn section(&self, biz: &str, section: u32) -> Result<Option<SectionRow>, DbError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {SECTION_COLUMNS}, {NOW_MS} FROM segmint_sequence_section
                     WHERE biz_type = $1::text AND section = $2::integer"
                ),
                &[&biz, &rules::section_number(section)],
            )
            .await
            .map_err(db_error)?;
        read_opt(row, rules::section_row)
    }

    async fn sections(&self, biz: &str) -> Result<Vec<(u32, SectionRow)>, DbError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT section, {SECTION_COLUMNS}, {NOW_MS} FROM segmint_sequence_section
                     WHERE biz_type = $1::text ORDER BY section"
                ),
                &[&biz],
            )
            .await
            .map_err(db_error)?;
        read_all(&rows, rules::numbered_section_row)
    }

    async fn write_section(&self, w: &SectionWrite) -> Result<Option<SectionRow>, DbError> {
        let client = self.client().await?;
        let section = rules::section_number(w.section);
        // The new expiry is `now + lease_ms`: `expires_ms - lease_ms` is the database's
        // clock when the statement ran. One statement: the row lock decides a race.
        let row = match w.expected {
            Some(version) => {
                client
                    .query_opt(
                        &format!(
                            "UPDATE segmint_sequence_section SET holder = $3::text,
                             version = version + 1, bound = $4::bigint,
                             expires_ms = {NOW_MS} + $5::bigint, update_time = now()
                         WHERE biz_type = $1::text AND section = $2::integer
                           AND version = $6::bigint
                         RETURNING {SECTION_COLUMNS}, expires_ms - $5::bigint"
                        ),
                        &[&w.biz, &section, &w.holder, &w.bound, &w.lease_ms, &version],
                    )
                    .await
            }
            None => {
                client
                    .query_opt(
                        &format!(
                            "INSERT INTO segmint_sequence_section
                             (biz_type, section, {SECTION_COLUMNS})
                         VALUES ($1::text, $2::integer, $3::text, 1, $4::bigint,
                                 {NOW_MS} + $5::bigint)
                         ON CONFLICT (biz_type, section) DO NOTHING
                         RETURNING {SECTION_COLUMNS}, expires_ms - $5::bigint"
                        ),
                        &[&w.biz, &section, &w.holder, &w.bound, &w.lease_ms],
                    )
                    .await
            }
        }
        .map_err(db_error)?;
        read_opt(row, rules::section_row)
    }

    async fn all_sections(&self) -> Result<Vec<(String, u32, SectionRow)>, DbError> {
        let client = self.client().await?;
        // Names in byte order ("C"), as the other engines' columns compare them,
        // whatever the database's collation.
        let rows = client
            .query(
                &format!(
                    "SELECT biz_type, section, {SECTION_COLUMNS}, {NOW_MS}
                     FROM segmint_sequence_section ORDER BY biz_type COLLATE \"C\", section"
                ),
                &[],
            )
            .await
            .map_err(db_error)?;
        read_all(&rows, rules::named_section_row)
    }

    async fn write_sections(
        &self,
        writes: &[SectionWrite],
    ) -> Result<Vec<Option<SectionRow>>, DbError> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        // Sent in the rows' order, which the lookups follow: two batches lock the rows
        // they share in the same order. A deadlock PostgreSQL finds all the same fails
        // the batch as a whole (an error: no write counts).
        let order = rules::in_row_order(writes);
        let column = |f: fn(&SectionWrite) -> i64| -> Vec<i64> {
            order.iter().map(|&i| f(&writes[i])).collect()
        };
        let bizs: Vec<&str> = order.iter().map(|&i| writes[i].biz.as_str()).collect();
        let sections: Vec<i32> = order
            .iter()
            .map(|&i| rules::section_number(writes[i].section))
            .collect();
        let expected: Vec<Option<i64>> = order.iter().map(|&i| writes[i].expected).collect();
        let holders: Vec<&str> = order.iter().map(|&i| writes[i].holder.as_str()).collect();
        let at: Vec<i32> = order
            .iter()
            .map(|&i| i32::try_from(i).expect("a batch of fewer than 2^31 writes"))
            .collect();
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&write_sections_sql())
            .await
            .map_err(db_error)?;
        // One statement, committed at Sync before ReadyForQuery (see `write_row`): a
        // failed or unknown commit is an error.
        let rows = client
            .query(
                &stmt,
                &[
                    &bizs,
                    &sections,
                    &expected,
                    &holders,
                    &column(|w| w.bound),
                    &column(|w| w.lease_ms),
                    &at,
                ],
            )
            .await
            .map_err(db_error)?;
        let mut written = vec![None; writes.len()];
        for row in &rows {
            let at = usize::try_from(row.int32(5).map_err(db_error)?).ok();
            let slot = at.and_then(|at| written.get_mut(at));
            let slot = slot.expect("a row written answers a write of the batch");
            assert!(slot.is_none(), "a write of the batch is answered once");
            *slot = Some(rules::section_row(row).map_err(db_error)?);
        }
        Ok(written)
    }

    async fn snowflake_spec(&self) -> Result<Option<(String, bool)>, DbError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT spec, confirmed FROM segmint_snowflake WHERE id = 1",
                &[],
            )
            .await
            .map_err(db_error)?;
        row.map(|r| Ok((r.text(0)?, r.flag(1)?)))
            .transpose()
            .map_err(db_error)
    }

    async fn confirm_snowflake_spec(&self, spec: &str) -> Result<bool, DbError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "UPDATE segmint_snowflake SET confirmed = true
                 WHERE id = 1 AND spec = $1 AND NOT confirmed",
                &[&spec],
            )
            .await
            .map_err(db_error)?;
        Ok(n == 1)
    }

    async fn record_snowflake_spec(&self, spec: &str) -> Result<bool, DbError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "INSERT INTO segmint_snowflake (id, spec) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
                &[&spec],
            )
            .await
            .map_err(db_error)?;
        Ok(n == 1)
    }
}

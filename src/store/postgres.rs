//! A PostgreSQL database behind a deadpool connection pool.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::{NoTls, Row};

use super::{BizRow, DbError, SegmentStore, TokenRow};

/// Schema migrations, applied in order, each once per database.
const MIGRATIONS: &[(i32, &str, &str)] =
    &[(1, "init", include_str!("../../sql/postgres/0001_init.sql"))];

/// Serialises concurrent `segmint migrate` runs on one database.
const MIGRATION_LOCK: i64 = 0x0005_e91d;

const BIZ_COLUMNS: &str = "biz_type, begin_id, max_id, step, delta, remainder, version";

/// One PostgreSQL database.
pub struct PgStore {
    /// Connections; also bounds how many statements run at once.
    pool: Pool,
}

impl PgStore {
    /// A pool for `pg` that connects lazily. Connecting, waiting for a connection and
    /// every statement are bounded by `timeout`, so a stalled database fails fast.
    ///
    /// # Errors
    /// [`DbError`] when the pool cannot be built.
    pub fn new(
        mut pg: tokio_postgres::Config,
        pool_size: usize,
        timeout: Duration,
    ) -> Result<Self, DbError> {
        let options = format!(
            "{} -c statement_timeout={}",
            pg.get_options().unwrap_or(""),
            timeout.as_millis()
        );
        pg.options(options.trim())
            .application_name("segmint")
            .connect_timeout(timeout);
        let manager = Manager::from_config(
            pg,
            NoTls,
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
            .map_err(|e| DbError(format!("cannot build connection pool: {e}")))?;
        Ok(PgStore { pool })
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, DbError> {
        self.pool.get().await.map_err(|e| DbError(with_causes(&e)))
    }
}

fn db_error(e: tokio_postgres::Error) -> DbError {
    match e.as_db_error() {
        Some(db) => DbError(format!("{}: {}", db.code().code(), db.message())),
        None => DbError(with_causes(&e)),
    }
}

/// The error and its chain of causes ("error connecting to server: Connection refused").
fn with_causes(e: &dyn std::error::Error) -> String {
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

fn biz_row(row: &Row) -> BizRow {
    BizRow {
        biz_type: row.get(0),
        begin_id: row.get(1),
        max_id: row.get(2),
        step: row.get(3),
        delta: row.get(4),
        remainder: row.get(5),
        version: row.get(6),
    }
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
        let applied: Vec<i32> = tx
            .query("SELECT version FROM segmint_migrations", &[])
            .await
            .map_err(db_error)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut done = Vec::new();
        for (version, name, sql) in MIGRATIONS {
            if applied.contains(version) {
                continue;
            }
            tx.batch_execute(sql).await.map_err(db_error)?;
            tx.execute(
                "INSERT INTO segmint_migrations (version, name) VALUES ($1, $2)",
                &[version, name],
            )
            .await
            .map_err(db_error)?;
            done.push(format!("{version:04}_{name}"));
        }
        tx.commit().await.map_err(db_error)?;
        Ok(done)
    }

    async fn ping(&self) -> Result<(), DbError> {
        self.client()
            .await?
            .simple_query("SELECT 1")
            .await
            .map_err(db_error)?;
        Ok(())
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
        Ok(row.as_ref().map(biz_row))
    }

    async fn advance(
        &self,
        biz: &str,
        version: i64,
        max_id: i64,
        new_max_id: i64,
    ) -> Result<Option<BizRow>, DbError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "UPDATE tiny_id_info SET max_id = $4, version = version + 1, update_time = now()
                 WHERE biz_type = $1 AND version = $2 AND max_id = $3
                 RETURNING {BIZ_COLUMNS}"
            ))
            .await
            .map_err(db_error)?;
        // The statement runs in an implicit transaction that commits at Sync, before
        // ReadyForQuery. `query_opt` reads the stream until ReadyForQuery
        // (tokio-postgres 0.7.18, src/query.rs:358) and turns an ErrorResponse or a
        // closed connection into an error (src/client.rs:50, :57), so a failed or
        // unknown commit returns an error and its segment is never used.
        let row = client
            .query_opt(&stmt, &[&biz, &version, &max_id, &new_max_id])
            .await
            .map_err(db_error)?;
        Ok(row.as_ref().map(biz_row))
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
        Ok(rows.iter().map(biz_row).collect())
    }

    async fn insert_biz(&self, row: &BizRow) -> Result<bool, DbError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder, version)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (biz_type) DO NOTHING",
                &[&row.biz_type, &row.begin_id, &row.max_id, &row.step, &row.delta, &row.remainder, &row.version],
            )
            .await
            .map_err(db_error)?;
        Ok(n == 1)
    }

    async fn tokens(&self) -> Result<Vec<TokenRow>, DbError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, token, biz_type, remark, to_char(create_time, 'YYYY-MM-DD HH24:MI:SS TZ')
                 FROM tiny_id_token ORDER BY id",
                &[],
            )
            .await
            .map_err(db_error)?;
        Ok(rows
            .iter()
            .map(|r| TokenRow {
                id: r.get(0),
                token_hash: r.get(1),
                biz_type: r.get(2),
                remark: r.get(3),
                create_time: r.get(4),
            })
            .collect())
    }

    async fn insert_token(&self, token_hash: &str, biz: &str, remark: &str) -> Result<(), DbError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO tiny_id_token (token, biz_type, remark) VALUES ($1, $2, $3)
                 ON CONFLICT (token, biz_type) DO NOTHING",
                &[&token_hash, &biz, &remark],
            )
            .await
            .map_err(db_error)?;
        Ok(())
    }
}

//! An in-memory [`SegmentStore`] with injectable latency, failures and lost
//! compare-and-set races, for the tests of timing logic (hedging, back-off, contention
//! retry, wait timeout, the fetch guard), mostly under paused tokio time.
//!
//! A test double for timing only, never a stand-in for a database: what a store must do
//! (transactions, migrations, tokens) is tested against PostgreSQL and SQLite.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use segmint::segment::Residue;
use segmint::step::StepPolicy;
use segmint::store::{
    BizRow, CatalogRows, DbError, Inserted, LayoutRow, LeaseRenewal, LeaseRow, LeaseSet, Mark,
    RowWrite, SectionRow, SectionWrite, SegmentStore, ShapeRow, Store, Timing, TokenRow, Witness,
};

/// How an injected failure fails.
#[derive(Debug, Clone, Copy)]
pub enum Injected {
    /// As a database that cannot be reached.
    Down,
    /// A query error with this SQLSTATE.
    Query(&'static str),
    /// As a database that answers but may not be used as it is.
    Refused,
}

/// One in-memory database; clones share it, so a test keeps a handle on what it gave
/// to a [`Store`].
#[derive(Clone, Default)]
pub struct MemoryStore {
    /// Plain mutex: held for a map update, never across the injected latency.
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    /// Rows by biz.
    rows: HashMap<String, BizRow>,
    /// Witness rows by database and biz.
    witnesses: HashMap<(String, String), Witness>,
    /// How long every call takes before it answers.
    latency: Duration,
    /// While set, calls fail (after the latency) so.
    failing: Option<Injected>,
    /// How many more calls fail while `failing` is set.
    failures_left: u32,
    /// How many of the next compare-and-sets lose their race.
    races_to_lose: u32,
    /// Calls so far, by method name.
    calls: HashMap<&'static str, u32>,
    /// The membership recorded (the layout of epoch 0), as `segmint migrate` records
    /// it: set by [`store`] for the databases it is given.
    layout: Option<LayoutRow>,
    /// Sequence sections' rows by biz and section, their times by the system clock.
    sections: HashMap<(String, u32), SectionRow>,
}

impl MemoryStore {
    /// A database holding the row of `biz`: IDs in `residue`, segments of `step`,
    /// nothing reserved yet.
    pub fn with_biz(biz: &str, step: i64, residue: Residue) -> MemoryStore {
        let store = MemoryStore::default();
        store.inner.lock().rows.insert(
            biz.to_string(),
            BizRow {
                biz_type: biz.into(),
                begin_id: 0,
                max_id: 0,
                step,
                delta: residue.delta(),
                remainder: residue.remainder(),
                version: 0,
                description: Box::default(),
                epoch: 0,
                frozen: false,
                claimed_by: 0,
            },
        );
        store
    }

    /// Every call from now on takes `latency` before it answers.
    pub fn set_latency(&self, latency: Duration) {
        self.inner.lock().latency = latency;
    }

    /// Every call from now on fails as a database down would, or answers again when
    /// `failing` is false.
    pub fn set_failing(&self, failing: bool) {
        self.fail_next(u32::MAX, failing.then_some(Injected::Down));
    }

    /// The next `n` calls fail with `failure`; `None` ends the failures.
    pub fn fail_next(&self, n: u32, failure: Option<Injected>) {
        let mut inner = self.inner.lock();
        inner.failing = failure;
        inner.failures_left = n;
    }

    /// The next `n` compare-and-sets lose their race, as if another writer got there
    /// first.
    pub fn lose_races(&self, n: u32) {
        self.inner.lock().races_to_lose = n;
    }

    /// How many times `method` was called.
    pub fn calls(&self, method: &str) -> u32 {
        self.inner.lock().calls.get(method).copied().unwrap_or(0)
    }

    /// The row of `biz`, as it is now.
    pub fn row(&self, biz: &str) -> BizRow {
        self.inner.lock().rows[biz].clone()
    }

    /// Sets the row of `biz` back to `version` and `max_id`, as a restore from a backup
    /// taken then would.
    pub fn set_back(&self, biz: &str, version: i64, max_id: i64) {
        let mut inner = self.inner.lock();
        let row = inner.rows.get_mut(biz).expect("a row to set back");
        row.version = version;
        row.max_id = max_id;
    }

    /// The mark this database's witness row holds of the row of `biz` on `database`.
    pub fn witnessed(&self, database: &str, biz: &str) -> Option<Mark> {
        let key = (database.to_owned(), biz.to_owned());
        self.inner.lock().witnesses.get(&key).map(|w| w.mark)
    }

    /// Counts the call, waits the latency, then fails if failures are injected.
    async fn enter(&self, method: &'static str) -> Result<(), DbError> {
        let latency = {
            let mut inner = self.inner.lock();
            *inner.calls.entry(method).or_default() += 1;
            inner.latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut inner = self.inner.lock();
        let Some(failure) = inner.failing.filter(|_| inner.failures_left > 0) else {
            return Ok(());
        };
        inner.failures_left -= 1;
        Err(match failure {
            Injected::Down => DbError::Connect {
                message: "injected failure".into(),
                source: None,
            },
            Injected::Query(sqlstate) => DbError::Query {
                sqlstate: Some(sqlstate.into()),
                message: "injected query failure".into(),
                source: None,
            },
            Injected::Refused => DbError::Refused {
                reason: "injected refusal".into(),
            },
        })
    }

    /// Moves the row of `biz` from `(version, max_id)` to `(new_version, new_max_id)`,
    /// if it is still there and no lost race is due.
    fn compare_and_set(
        &self,
        biz: &str,
        (version, max_id): (i64, i64),
        (new_version, new_max_id): (i64, i64),
    ) -> Option<BizRow> {
        let mut inner = self.inner.lock();
        if inner.races_to_lose > 0 {
            inner.races_to_lose -= 1;
            return None;
        }
        inner
            .rows
            .get_mut(biz)
            .filter(|row| row.version == version && row.max_id == max_id)
            .map(|row| {
                row.version = new_version;
                row.max_id = new_max_id;
                row.clone()
            })
    }
}

impl Inner {
    /// Writes a section's row if it is still at the version read (inserts it if still
    /// absent), its lease from `now`.
    fn write_section(&mut self, w: &SectionWrite, now: i64) -> Option<SectionRow> {
        let key = (w.biz.clone(), w.section);
        if self.sections.get(&key).map(|r| r.version) != w.expected {
            return None;
        }
        let row = SectionRow {
            holder: w.holder.clone(),
            version: w.expected.unwrap_or(0) + 1,
            bound: w.bound,
            expires_ms: now.saturating_add(w.lease_ms),
            db_now_ms: now,
        };
        self.sections.insert(key, row.clone());
        Some(row)
    }
}

/// A [`Store`] over `dbs`, named `db0`, `db1`, … in order, with the rows' own steps.
pub fn store(dbs: &[MemoryStore], timing: Timing) -> Arc<Store> {
    let memories = dbs;
    let dbs: Vec<_> = dbs
        .iter()
        .enumerate()
        .map(|(i, db)| {
            let residue = {
                let inner = db.inner.lock();
                let row = inner
                    .rows
                    .values()
                    .next()
                    .expect("a memory store has a biz");
                Residue::new(row.delta, row.remainder).unwrap()
            };
            (
                format!("db{i}"),
                format!("memory/{i}"),
                residue,
                Box::new(db.clone()) as Box<dyn SegmentStore>,
            )
        })
        .collect();
    let members = segmint::layout::Layout {
        epoch: 0,
        members: dbs
            .iter()
            .map(|(name, _, class, _)| segmint::layout::Member {
                name: name.clone(),
                class: *class,
            })
            .collect(),
        state: segmint::layout::LayoutState::Done,
        lost: Vec::new(),
    }
    .row(1);
    for db in memories {
        db.inner.lock().layout = Some(members.clone());
    }
    let policy = StepPolicy {
        adaptive: false,
        ..StepPolicy::default()
    };
    Arc::new(Store::new(
        dbs,
        timing,
        policy,
        Arc::new(segmint::metrics::Metrics::new(16)),
    ))
}

#[async_trait]
impl SegmentStore for MemoryStore {
    async fn migrate(&self) -> Result<Vec<String>, DbError> {
        self.enter("migrate").await?;
        Ok(Vec::new())
    }

    async fn ping(&self) -> Result<(), DbError> {
        self.enter("ping").await
    }

    /// The host's wall clock, at once: not counted, delayed nor failed, so that the
    /// latency and faults a test injects reach only the calls it counts.
    async fn clock_ms(&self) -> Result<i64, DbError> {
        Ok(i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis(),
        )
        .unwrap_or(i64::MAX))
    }

    async fn biz(&self, biz: &str) -> Result<Option<BizRow>, DbError> {
        self.enter("biz").await?;
        Ok(self.inner.lock().rows.get(biz).cloned())
    }

    /// A layout change never runs here: a write with a class is no timing concern.
    async fn write_row(
        &self,
        biz: &str,
        version: i64,
        max_id: i64,
        to: &RowWrite,
    ) -> Result<Option<BizRow>, DbError> {
        self.enter("write_row").await?;
        if to.class.is_some() {
            return Err(untested("write_row with a class"));
        }
        Ok(self.compare_and_set(biz, (version, max_id), (to.version, to.max_id)))
    }

    async fn witness(&self, witnesses: &[Witness]) -> Result<(), DbError> {
        self.enter("witness").await?;
        let mut inner = self.inner.lock();
        for w in witnesses {
            inner
                .witnesses
                .entry((w.database.clone(), w.biz.clone()))
                .and_modify(|old| old.mark = old.mark.join(w.mark))
                .or_insert_with(|| w.clone());
        }
        Ok(())
    }

    async fn witness_rows(&self, biz: Option<&str>) -> Result<Vec<Witness>, DbError> {
        self.enter("witness_rows").await?;
        let inner = self.inner.lock();
        let rows = inner.witnesses.values();
        Ok(rows
            .filter(|w| biz.is_none_or(|b| w.biz == b))
            .cloned()
            .collect())
    }

    async fn bizs(&self) -> Result<Vec<BizRow>, DbError> {
        self.enter("bizs").await?;
        Ok(self.inner.lock().rows.values().cloned().collect())
    }

    /// No layout change ever runs here (see `layouts`): only the biz's own row decides.
    async fn insert_bizs(&self, rows: &[BizRow]) -> Result<Vec<Inserted>, DbError> {
        self.enter("insert_biz").await?;
        let mut inner = self.inner.lock();
        Ok(rows
            .iter()
            .map(|row| {
                if inner.rows.contains_key(row.biz_type.as_str()) {
                    return Inserted::Exists;
                }
                inner.rows.insert(row.biz_type.to_string(), row.clone());
                Inserted::Yes
            })
            .collect())
    }

    async fn tokens(&self) -> Result<Vec<TokenRow>, DbError> {
        self.enter("tokens").await?;
        Ok(Vec::new())
    }

    async fn insert_token(
        &self,
        _token_hash: &str,
        _biz: &str,
        _remark: &str,
        _expires: Option<i64>,
    ) -> Result<(), DbError> {
        Err(untested("insert_token"))
    }

    async fn revoke_tokens(&self, _token_hash: &str, _at: i64) -> Result<u64, DbError> {
        Err(untested("revoke_tokens"))
    }

    async fn expire_token(&self, _token_hash: &str, _at: i64) -> Result<u64, DbError> {
        Err(untested("expire_token"))
    }

    async fn touch_tokens(&self, _uses: &[(String, i64)]) -> Result<(), DbError> {
        Err(untested("touch_tokens"))
    }

    async fn shapes(&self) -> Result<Vec<ShapeRow>, DbError> {
        Ok(Vec::new())
    }

    async fn put_shape(&self, _row: &ShapeRow) -> Result<(), DbError> {
        Err(untested("put_shape"))
    }

    async fn describe(&self, _biz: &str, _description: &str) -> Result<bool, DbError> {
        Err(untested("describe"))
    }

    async fn leases(&self) -> Result<Vec<LeaseRow>, DbError> {
        Err(untested("leases"))
    }

    async fn take_lease(
        &self,
        _worker_id: u16,
        _holder: &str,
        _lease_ms: i64,
        _grace_ms: i64,
    ) -> Result<Option<LeaseRow>, DbError> {
        Err(untested("take_lease"))
    }

    async fn section(&self, biz: &str, section: u32) -> Result<Option<SectionRow>, DbError> {
        self.enter("section").await?;
        let now = self.clock_ms().await?;
        let inner = self.inner.lock();
        Ok(inner
            .sections
            .get(&(biz.to_owned(), section))
            .map(|r| SectionRow {
                db_now_ms: now,
                ..r.clone()
            }))
    }

    async fn sections(&self, biz: &str) -> Result<Vec<(u32, SectionRow)>, DbError> {
        self.enter("sections").await?;
        let now = self.clock_ms().await?;
        let inner = self.inner.lock();
        let mut rows: Vec<_> = inner
            .sections
            .iter()
            .filter(|((b, _), _)| b == biz)
            .map(|((_, s), r)| {
                let row = SectionRow {
                    db_now_ms: now,
                    ..r.clone()
                };
                (*s, row)
            })
            .collect();
        rows.sort_by_key(|(s, _)| *s);
        Ok(rows)
    }

    async fn write_section(&self, w: &SectionWrite) -> Result<Option<SectionRow>, DbError> {
        self.enter("write_section").await?;
        let now = self.clock_ms().await?;
        Ok(self.inner.lock().write_section(w, now))
    }

    async fn all_sections(&self) -> Result<Vec<(String, u32, SectionRow)>, DbError> {
        self.enter("all_sections").await?;
        let now = self.clock_ms().await?;
        let inner = self.inner.lock();
        let mut rows: Vec<_> = inner
            .sections
            .iter()
            .map(|((biz, section), r)| {
                let row = SectionRow {
                    db_now_ms: now,
                    ..r.clone()
                };
                (biz.clone(), *section, row)
            })
            .collect();
        rows.sort_by(|(a, i, _), (b, j, _)| (a, i).cmp(&(b, j)));
        Ok(rows)
    }

    /// All at once under the lock, as one transaction: a failure injected fails the
    /// whole batch before any write.
    async fn write_sections(
        &self,
        writes: &[SectionWrite],
    ) -> Result<Vec<Option<SectionRow>>, DbError> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let rows: HashSet<(&str, u32)> = writes.iter().map(|w| (&*w.biz, w.section)).collect();
        assert_eq!(rows.len(), writes.len(), "a batch names each row once");
        self.enter("write_sections").await?;
        let now = self.clock_ms().await?;
        let mut inner = self.inner.lock();
        Ok(writes.iter().map(|w| inner.write_section(w, now)).collect())
    }

    async fn renew_lease(&self, _renewal: &LeaseRenewal) -> Result<Option<LeaseRow>, DbError> {
        Err(untested("renew_lease"))
    }

    async fn snowflake_spec(&self) -> Result<Option<(String, bool)>, DbError> {
        Err(untested("snowflake_spec"))
    }

    async fn confirm_snowflake_spec(&self, _spec: &str) -> Result<bool, DbError> {
        Err(untested("confirm_snowflake_spec"))
    }

    async fn record_snowflake_spec(&self, _spec: &str) -> Result<bool, DbError> {
        Err(untested("record_snowflake_spec"))
    }

    /// The membership recorded, and no layout change.
    async fn layouts(&self) -> Result<Vec<LayoutRow>, DbError> {
        Ok(self.inner.lock().layout.iter().cloned().collect())
    }

    async fn catalog_of(
        &self,
        biz: &str,
        _token_hash: Option<&str>,
        _databases: &[String],
    ) -> Result<CatalogRows, DbError> {
        self.enter("catalog_of").await?;
        let inner = self.inner.lock();
        Ok(CatalogRows {
            bizs: inner.rows.get(biz).cloned().into_iter().collect(),
            witnesses: inner
                .witnesses
                .values()
                .filter(|w| w.biz == biz)
                .cloned()
                .collect(),
            ..CatalogRows::default()
        })
    }

    async fn write_layout(
        &self,
        _row: &LayoutRow,
        _replacing: Option<&str>,
    ) -> Result<bool, DbError> {
        Err(untested("write_layout"))
    }

    async fn set_leases_while(
        &self,
        _epoch: i64,
        _state: &str,
        _rows: &[LeaseSet],
    ) -> Result<Option<Vec<LeaseRow>>, DbError> {
        Err(untested("set_leases_while"))
    }
}

/// Tokens, descriptions, worker-ID leases and layouts are no timing concern of reservations:
/// the in-memory store keeps none of them, and says so.
fn untested(method: &str) -> DbError {
    DbError::Query {
        sqlstate: None,
        message: format!(
            "the in-memory store keeps no tokens, descriptions, leases or layouts ({method})"
        ),
        source: None,
    }
}

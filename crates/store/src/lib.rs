//! Storage: the only place that talks SQL.
//!
//! [`SegmentStore`] is one database: PostgreSQL ([`postgres`]), MySQL or MariaDB
//! ([`mysql`]) or an embedded SQLite file ([`sqlite`]). [`Store`] spreads
//! reservations over all configured databases: a random live one per fetch, a
//! back-off for one that fails, and the residue checks that keep bizs collision-free.
//!
//! # Adding an engine
//!
//! An engine is one database's statements behind [`SegmentStore`]. Everything else is
//! above the seam: the cluster protocol in `cluster/`, and what every engine would
//! otherwise repeat in [`rules`] (the one list of migrations, the column lists and the
//! readers of rows through `Cells`, and the protocol's writes `advance`, `raise`,
//! `reclass`, `put_layout`, `claim_layout`, `set_leases` made of the primitives).
//!
//! A new engine:
//! 1. writes its dialect's `sql/<dialect>/000N_*.sql` files, with the same numbers and
//!    names as the others (`migrations!` fails to build without one);
//! 2. implements `Cells` for its driver's row;
//! 3. implements the primitives below, each one statement or one transaction whose
//!    commit result it returns (an unknown commit is an error: a segment is used only
//!    once durable);
//! 4. joins the `by_kind!` macro of the integration tests (`tests/common/by_kind.rs`),
//!    so that the contract suite (`tests/contract.rs`) and the other per-engine suites
//!    run every primitive on it.
//!
//! | primitive | atomicity it must keep |
//! | --- | --- |
//! | `migrate` | all pending migrations and their records in one transaction, serialised against a concurrent `migrate`; the change feed's triggers mark every write of a catalog row, and count every deletion |
//! | `ping` | refuses a session that does not commit durably |
//! | `biz`, `bizs`, `shapes`, `tokens`, `layouts`, `leases`, `witness_rows`, `snowflake_spec` | plain reads (`leases` with the database's clock) |
//! | `record_snowflake_spec`, `confirm_snowflake_spec` | insert if absent, never replace; confirm only a record of the spec given: one statement each |
//! | `write_row` | one compare-and-set on `version` **and** `max_id`; a column without a value keeps the row's own (never the caller's read) |
//! | `insert_bizs` | each row inserted if absent, none if a layout above the rows' lowest epoch exists: check and inserts in one transaction that excludes a concurrent insert of a layout row |
//! | `catalog` | every catalog read in one snapshot, with the feed's position in that snapshot; the rows written since a position are every row whose change mark is at or above it, whatever order their writers committed in |
//! | `catalog_of` | one biz's rows, its shape and witness rows, one token's rows and the layouts, in one snapshot |
//! | `write_layout` | insert if absent, else replace only a row in the state named: one statement |
//! | `set_leases_while` | the layout row's state checked and held until the commit of all the lease rows |
//! | `take_lease`, `renew_lease` | one statement each, by the database's clock; take only past expiry plus grace, renew at holder and version (release at holder) |
//! | `section`, `sections` | plain reads with the database's clock |
//! | `write_section` | one compare-and-set on `version` (an insert if absent), the expiry by the database's clock |
//! | `all_sections` | one plain read of every section row, with the database's clock, in biz (as bytes) then section order |
//! | `write_sections` | each write as `write_section` makes it, all in one transaction; a write lost leaves the others, and a failed or unknown commit is an error for all |
//! | `witness`, `put_shape`, `describe`, `insert_token`, `revoke_tokens`, `expire_token`, `touch_tokens` | one statement or transaction each; witnesses join as `Mark::join` does, token times move one way |
//!
//! Some decisions stay in each engine's SQL, since moving them out would change the
//! statements the protocol runs: `take_lease` judges expiry and grace by the
//! database's clock in its one statement, `renew_lease` releases at any version,
//! `witness` joins as `Mark::join` does, and the token updates move their times one
//! way. The contract suite checks each on every engine.
//!
//! MySQL's dialect keeps these atomicities its own way: DDL commits by itself, so
//! `migrate` holds a named lock (`GET_LOCK`) and every statement can run again after a
//! run cut off midway (`IF NOT EXISTS`); with no `RETURNING` and no conditional upsert,
//! `write_row`, `write_layout`, `take_lease` and `renew_lease` are each one transaction
//! that locks the row, decides, writes and reads the row back before `COMMIT`, and
//! `write_sections` one such transaction for a whole batch (one locking read of the
//! compare-and-sets' rows, one statement writing those still at the version read, one
//! inserting the absent rows, one at a time only after a duplicate key, and one reading
//! the rows back); `insert_bizs` reads the layouts above with `LOCK IN SHARE MODE`,
//! which a claim's insert waits for. It has no change feed yet: `catalog` is the
//! trait's default, which reads every row.

pub(crate) mod catalog;
mod clock;
mod cluster;
mod error;
pub mod mysql;
pub mod postgres;
mod refusal;
pub mod rules;
pub mod sqlite;

// The layers below, under the names the store's modules use.
/// This crate under the name its modules use for it.
use crate as store;
pub(crate) use segmint_config as config;
pub use segmint_config::tls;
pub(crate) use segmint_core::{
    backoff, biz, biz_add, db_fence, evidence, import, layout, name, recover, segment, shape,
    snowflake, step,
};
pub(crate) use segmint_metrics as metrics;

use std::borrow::Cow;

use async_trait::async_trait;

pub use catalog::{
    BizEntry, Catalog, Grant, MAX_SEQUENCE_STEP, SEQUENCE, TokenState, TokenSummary, live_at,
    period_of,
};
pub use clock::{Clock, RuntimeClock};
pub use cluster::admin::Migration;
pub use cluster::import::ImportReport;
pub use cluster::layout::{InForce, LayoutReport, Membership};
pub use cluster::lease::{Lease, WORKER_IDS};
pub use cluster::sequence::{SectionClaim, SectionRows};
pub use cluster::tokens::{HASH_PREFIX, Rotation, TokenList};
pub use cluster::{Cluster, DatabaseStatus, Decoded, Reservation, Store, Timing};
pub use error::{Cause, DbError, Verdict};
pub use refusal::{Reason, Refusal};
pub use segmint_core::evidence::{Mark, Witness};
pub use segmint_core::rows::{BizRow, LayoutRow, LeaseRow, LeaseSet, Reclass};
pub use segmint_core::sequence::claim::SectionRow;
pub use sqlite::OpenMode;

/// What [`SegmentStore::insert_bizs`] did with a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// The row was inserted.
    Yes,
    /// The biz already has a row here; nothing written.
    Exists,
    /// This database holds the layout of this epoch, above the row's; nothing written.
    LayoutAbove(i64),
}

/// What [`SegmentStore::write_row`] writes: the row's new version and `max_id`, and
/// with a layout change its class, epoch and frozen state too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowWrite {
    pub version: i64,
    pub max_id: i64,
    /// `None`: the class, epoch, frozen state and claim stay as they are.
    pub class: Option<RowClass>,
}

/// The columns of a biz row that only a layout change writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowClass {
    pub delta: i64,
    pub remainder: i64,
    pub epoch: i64,
    pub frozen: bool,
    pub claimed_by: i64,
}

/// One `segmint_biz_shape` row: how a biz's IDs look (see [`crate::shape`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeRow {
    pub biz_type: String,
    /// `sequential`, `shuffled` or `opaque`.
    pub id_order: String,
    /// Shuffled: indexes per block.
    pub block: i64,
    /// Opaque: every ID is below this.
    pub domain: i64,
    /// The biz's own restriction: modulus and remainder (1 and 0 for none).
    pub within_delta: i64,
    pub within_remainder: i64,
    /// The order's 128-bit key, 32 hex digits.
    pub key: String,
    pub prefix: String,
    pub width: i32,
    pub base: i32,
    pub check_char: bool,
    /// Whether the v1 API writes the IDs as JSON strings.
    pub as_string: bool,
    /// How the counter restarts: empty for never, else `reset;zone;start;pattern`
    /// (see `catalog::biz_shape`).
    pub period: String,
}

impl ShapeRow {
    /// The shape row of a sequence biz of `sections` sections; its step is the biz
    /// row's, its key and restriction are filled in when the biz is added.
    pub fn sequence(sections: u32) -> ShapeRow {
        ShapeRow {
            id_order: SEQUENCE.to_owned(),
            domain: i64::from(sections),
            ..ShapeRow::periodic(String::new(), 0, 10, false)
        }
    }

    /// The shape row of a sequential biz whose counter restarts each period, as
    /// `spec` (`reset;zone;start;pattern`) says, its counter `width` digits of `base`;
    /// its key, block and restriction are filled in when the biz is added.
    pub fn periodic(spec: String, width: i32, base: i32, check_char: bool) -> ShapeRow {
        ShapeRow {
            biz_type: String::new(),
            id_order: "sequential".to_owned(),
            block: 1,
            domain: i64::MAX,
            within_delta: 1,
            within_remainder: 0,
            key: String::new(),
            prefix: String::new(),
            width,
            base,
            check_char,
            as_string: true,
            period: spec,
        }
    }
}

/// A renewal or release of a held lease: a compare-and-set on holder and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRenewal {
    pub worker_id: u16,
    pub holder: String,
    /// The version the holder last wrote.
    pub version: i64,
    /// The new expiry, counted from the database's clock now; negative releases the
    /// lease (free once the grace period after that expiry has passed).
    pub expires_in_ms: i64,
    /// The last timestamp issued so far (the row's `last_ms` only grows).
    pub last_ms: i64,
    /// The highest timestamp the holder will issue until its next renewal (only grows).
    pub bound_ms: i64,
}

/// A write of a sequence section's row, by compare-and-set on its version
/// ([`claim::Write`](segmint_core::sequence::claim::Write)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionWrite {
    pub biz: String,
    pub section: u32,
    /// The version read; `None` when the row was absent (it is inserted, version 1).
    pub expected: Option<i64>,
    pub holder: String,
    pub bound: i64,
    /// The holder's lease, counted from the database's clock now.
    pub lease_ms: i64,
}

/// One `tiny_id_token` row. Times are unix seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    /// The row's id in its database.
    pub id: i64,
    /// The SHA-256 of the token, hex-encoded, as stored.
    pub token_hash: String,
    /// The biz this row grants.
    pub biz_type: String,
    /// The operator's note.
    pub remark: String,
    /// When the row was created.
    pub create_time: i64,
    /// From when on the token is refused; `None`: never.
    pub expires: Option<i64>,
    /// When the token was revoked, if it was.
    pub revoked: Option<i64>,
    /// When a server last noted the token in use (approximate).
    pub last_used: Option<i64>,
}

/// Where a database's change feed stood at a catalog read (see [`SegmentStore::catalog`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedPosition {
    /// Tells one run of the database from another (PostgreSQL: when its server started;
    /// SQLite: a tag of the file), with the number of deletions of catalog rows so far.
    /// A feed never resumes across runs (a database restored from a backup is
    /// restarted) nor across a deletion (a row deleted by hand leaves nothing to read):
    /// every row is read again.
    pub incarnation: String,
    /// Every catalog row written after the read carries a change mark at or above this.
    pub next: i64,
}

/// What a catalog read returned: every row, or the rows written since a position.
#[derive(Debug, Clone, Default)]
pub struct CatalogRows {
    /// Where the feed stood; `None` from an engine without a feed (every read is full).
    pub position: Option<FeedPosition>,
    /// Whether these are every row (else only the rows written since the position
    /// asked for; layouts are always every row).
    pub full: bool,
    pub bizs: Vec<BizRow>,
    pub shapes: Vec<ShapeRow>,
    pub tokens: Vec<TokenRow>,
    pub witnesses: Vec<Witness>,
    pub layouts: Vec<LayoutRow>,
}

/// One database holding `tiny_id_info` and `tiny_id_token`.
///
/// Every method is a single short statement (or one transaction) so that the caller
/// can bound it with a timeout; none retries on its own. An engine implements only
/// these primitives; the protocol's decisions are made above it, in [`rules`] and the
/// cluster, so each is written once whichever engine runs it.
#[async_trait]
pub trait SegmentStore: Send + Sync + 'static {
    /// Applies the pending migrations; returns the names of those applied now.
    async fn migrate(&self) -> Result<Vec<String>, DbError>;
    /// Succeeds when the database answers.
    async fn ping(&self) -> Result<(), DbError>;
    /// The database's clock now, in Unix milliseconds: the clock its lease expiries are
    /// counted in, and the one a period is checked against (an embedded database's is
    /// its process's).
    async fn clock_ms(&self) -> Result<i64, DbError>;
    /// The row of `biz`, if it exists.
    async fn biz(&self, biz: &str) -> Result<Option<BizRow>, DbError>;
    /// Compare-and-set of a biz row, the one write that moves a row's IDs: from
    /// `version` and `max_id` to `to`, only if the row still has both. Returns the row
    /// as written, or `None` when another writer got there first (or the row is gone).
    /// Reservations, give-backs, fences and layout changes are this with their own `to`
    /// (see [`rules`]).
    async fn write_row(
        &self,
        biz: &str,
        version: i64,
        max_id: i64,
        to: &RowWrite,
    ) -> Result<Option<BizRow>, DbError>;
    /// Records in this database how far other databases' rows advanced; a witness
    /// only ever moves forward (the statement joins as [`Mark::join`] does).
    async fn witness(&self, witnesses: &[Witness]) -> Result<(), DbError>;
    /// The witness rows of this database, of `biz` (of every database) alone if given.
    async fn witness_rows(&self, biz: Option<&str>) -> Result<Vec<Witness>, DbError>;
    /// Every biz row.
    async fn bizs(&self) -> Result<Vec<BizRow>, DbError>;
    /// Inserts biz rows, each unless its biz already exists, and none when this
    /// database holds a layout above the lowest epoch of the rows (a change claimed
    /// since the caller read the layouts: the change may have listed the bizs already,
    /// and would leave a row created now behind in the old layout). Returns what
    /// became of each row, in order. The check and the inserts are one transaction that
    /// excludes a concurrent claim of a layout. One row at a time is
    /// [`insert_biz`](rules); an import writes thousands at once.
    async fn insert_bizs(&self, rows: &[BizRow]) -> Result<Vec<Inserted>, DbError>;
    /// Every shape row.
    async fn shapes(&self) -> Result<Vec<ShapeRow>, DbError>;
    /// Writes a shape row, replacing the biz's row if there is one (only ever done
    /// while no database holds a row of the biz).
    async fn put_shape(&self, row: &ShapeRow) -> Result<(), DbError>;
    /// Sets the description of `biz`'s row (no effect on its IDs or version); `false`
    /// when the row does not exist.
    async fn describe(&self, biz: &str, description: &str) -> Result<bool, DbError>;
    /// Every token row.
    async fn tokens(&self) -> Result<Vec<TokenRow>, DbError>;
    /// Grants the token with this hash the use of `biz`, until `expires` if given.
    async fn insert_token(
        &self,
        token_hash: &str,
        biz: &str,
        remark: &str,
        expires: Option<i64>,
    ) -> Result<(), DbError>;
    /// Marks every row of the token with this (lower-case) hash revoked at `at`, unless
    /// already revoked. Returns the number of rows revoked now.
    async fn revoke_tokens(&self, token_hash: &str, at: i64) -> Result<u64, DbError>;
    /// Lowers the expiry of every row of the token with this (lower-case) hash to `at`;
    /// a row that expires earlier keeps its expiry. Returns the number of rows lowered.
    async fn expire_token(&self, token_hash: &str, at: i64) -> Result<u64, DbError>;
    /// Records that each token (lower-case hash) was in use at the time given; a row's
    /// last use only moves forward.
    async fn touch_tokens(&self, uses: &[(String, i64)]) -> Result<(), DbError>;
    /// Every layout row.
    async fn layouts(&self) -> Result<Vec<LayoutRow>, DbError>;
    /// The catalog's rows (bizs, shapes, tokens, witnesses and layouts) read in one
    /// snapshot: the rows written since `since` when the feed can resume from it
    /// ([`rules::resume_at`]), else every row; layouts always in full. A full read of
    /// a large catalog takes long: an engine does not cut it off at its statement
    /// bound (the caller bounds it). The default reads every row, one table at a
    /// time, with no position.
    async fn catalog(&self, since: Option<&FeedPosition>) -> Result<CatalogRows, DbError> {
        let _ = since;
        // Bizs before shapes: a shape row is written before its biz's rows, so every
        // biz read here has its shape read too.
        Ok(CatalogRows {
            position: None,
            full: true,
            bizs: self.bizs().await?,
            shapes: self.shapes().await?,
            tokens: self.tokens().await?,
            witnesses: self.witness_rows(None).await?,
            layouts: self.layouts().await?,
        })
    }
    /// The catalog's rows of one biz, read in one snapshot by a server that serves
    /// before its first full read ends: the biz's row and shape row, its witness rows
    /// of the databases named in `databases`, the rows of the token whose hash is
    /// `token_hash` (if given, whatever biz they grant; the hash as a server stores it,
    /// lower-case) and every layout row. Each table is read by its index: a lookup
    /// costs the same whatever the number of bizs. No position, not `full`.
    async fn catalog_of(
        &self,
        biz: &str,
        token_hash: Option<&str>,
        databases: &[String],
    ) -> Result<CatalogRows, DbError>;
    /// Inserts a layout row if its epoch has none; when it has one, replaces it only
    /// if that row's state is `replacing` (`None`: never, a claim). One statement, so
    /// that two writers of one epoch cannot both see the state they need. Returns
    /// whether the row was written. Which states may be replaced is decided above the
    /// engine ([`rules::REPLACEABLE`]).
    async fn write_layout(&self, row: &LayoutRow, replacing: Option<&str>)
    -> Result<bool, DbError>;
    /// Sets each lease row of `rows` to its holder and expiry (absolute, by the
    /// database's clock), whoever holds it, bumping its version; `last_ms` and
    /// `bound_ms` only grow. One transaction, made only while the layout row of
    /// `epoch` has state `state` (`None` otherwise), the check holding that row against
    /// a concurrent rewrite until the commit. Returns the rows as written, in order.
    async fn set_leases_while(
        &self,
        epoch: i64,
        state: &str,
        rows: &[LeaseSet],
    ) -> Result<Option<Vec<LeaseRow>>, DbError>;
    /// Every worker-ID lease row.
    async fn leases(&self) -> Result<Vec<LeaseRow>, DbError>;
    /// Takes the lease of `worker_id` for `holder` until `lease_ms` from the database's
    /// clock now, if no row exists or the row's lease ran out more than `grace_ms` ago.
    /// Returns the row (with the earlier holder's `last_ms` and `bound_ms`), or `None`
    /// when the lease is held.
    async fn take_lease(
        &self,
        worker_id: u16,
        holder: &str,
        lease_ms: i64,
        grace_ms: i64,
    ) -> Result<Option<LeaseRow>, DbError>;
    /// Renews or releases a held lease; `None` when the row is no longer the holder's
    /// at that version (another process took it, or the database went back in time).
    /// A release (negative `expires_in_ms`) needs the holder only, not the version: a
    /// renewal whose answer was lost may have moved the version on, and freeing a row
    /// this process still holds is safe at any version.
    async fn renew_lease(&self, renewal: &LeaseRenewal) -> Result<Option<LeaseRow>, DbError>;
    /// The row of section `section` of sequence biz `biz`, with the database's clock
    /// now; `None` when the database holds none.
    async fn section(&self, biz: &str, section: u32) -> Result<Option<SectionRow>, DbError>;
    /// Every section row of sequence biz `biz` this database holds, with its number and
    /// the database's clock now, in section order: who holds what, for routes and
    /// balancing (a claim reads each row again before it writes).
    async fn sections(&self, biz: &str) -> Result<Vec<(u32, SectionRow)>, DbError>;
    /// Writes a section's row if it is still at the version read (inserts it if it is
    /// still absent), in one statement: version one above, the holder, the bound and
    /// an expiry `lease_ms` after the database's clock. Returns the row as written, or
    /// `None` when it was not at that version (written or inserted since).
    async fn write_section(&self, write: &SectionWrite) -> Result<Option<SectionRow>, DbError>;
    /// Every section row this database holds, of every sequence biz (the servers' own
    /// pseudo-biz among them), each with its biz, its number and the database's clock
    /// now as [`sections`](Self::sections) gives it, in biz then section order (names
    /// compared as bytes, as Rust compares them), in one statement: a server's round
    /// of reads costs one per database whatever the number of bizs and sections.
    async fn all_sections(&self) -> Result<Vec<(String, u32, SectionRow)>, DbError>;
    /// Each of `writes` as [`write_section`](Self::write_section) makes it (the
    /// compare-and-set on the version read, or the insert of an absent row), all in one
    /// transaction; answers in the order given: the row as written, or `None` for a
    /// write that found its row not at the version read (written or inserted since).
    /// One write lost leaves the others. An error (the transaction failed, or its
    /// commit is unknown) leaves every outcome unknown: the caller counts none as
    /// written. An empty batch answers at once, sending nothing.
    ///
    /// # Panics
    /// When two writes name the same row (biz and section).
    async fn write_sections(
        &self,
        writes: &[SectionWrite],
    ) -> Result<Vec<Option<SectionRow>>, DbError>;
    /// The snowflake spec recorded in this database and whether it is confirmed, if
    /// any ([`agreement`](crate::snowflake::agreement)).
    async fn snowflake_spec(&self) -> Result<Option<(String, bool)>, DbError>;
    /// Records `spec` unless a spec is recorded (one statement; a record is never
    /// replaced). Returns whether it was written now.
    async fn record_snowflake_spec(&self, spec: &str) -> Result<bool, DbError>;
    /// Marks the record confirmed if it is `spec` (one statement; a record of another
    /// spec is left as it is). Returns whether it was marked now.
    async fn confirm_snowflake_spec(&self, spec: &str) -> Result<bool, DbError>;
}

/// Which clock a periodic biz's refusal blames ([`StoreError::Clock`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockFault {
    /// This server's clock is ahead of every database's: it begins no period they have
    /// not begun.
    Ahead,
    /// The biz's rows are in a period no clock has begun: a clock that was ahead moved
    /// them there.
    RowsAhead,
}

impl ClockFault {
    /// The fault's stable name (`clock_ahead`, `rows_ahead`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClockFault::Ahead => "clock_ahead",
            ClockFault::RowsAhead => "rows_ahead",
        }
    }
}

/// Why a reservation or an admin operation failed, across all databases.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("biz `{0}` does not exist")]
    NotFound(String),
    #[error(
        "biz `{biz}` cannot advance on database \"{database}\": max_id {max_id} + step {step} exceeds {}; IDs never wrap",
        i64::MAX
    )]
    Overflow {
        biz: String,
        database: String,
        max_id: i64,
        step: i64,
    },
    #[error(
        "biz `{biz}` is refused: its rows on databases \"{first}\" ({first_class}) and \"{second}\" ({second_class}) have overlapping residue classes and could issue the same ID"
    )]
    ResidueConflict {
        biz: String,
        first: String,
        first_class: String,
        second: String,
        second_class: String,
    },
    #[error("biz `{biz}` has an invalid row on database \"{database}\": {reason}")]
    InvalidRow {
        biz: String,
        database: String,
        reason: String,
    },
    #[error("biz `{0}`: every reservation lost its compare-and-set race; try again")]
    Contention(String),
    #[error("biz `{0}` is being moved to a new database layout; try again")]
    Moving(String),
    #[error("no database reachable: {0}")]
    Unavailable(String),
    /// Refused as asked (an admin operation, mostly): why, what, and what to do.
    #[error("{0}")]
    Refused(Refusal),
    #[error(
        "biz `{biz}`: the counter of period {period} is used up on every database; its format's counter holds {modulus} values, and IDs resume in the next period"
    )]
    PeriodFull {
        biz: String,
        period: String,
        modulus: i64,
    },
    #[error("biz `{0}`: a later period has begun on every database")]
    PeriodPassed(String),
    /// A biz whose counter restarts each period, refused because a clock is off:
    /// `fault` says which.
    #[error("biz `{biz}`: {detail}")]
    Clock {
        biz: String,
        fault: ClockFault,
        detail: String,
    },
    #[error(
        "biz `{0}` restarts its counter each period: its segments come from /v1/segments, whose answer says when the period ends, never from Tinyid's segment routes"
    )]
    Periodic(String),
}

impl StoreError {
    /// A stable name for the kind of failure, for scripts (`--json`) and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::NotFound(_) => "not_found",
            StoreError::Overflow { .. } => "overflow",
            StoreError::ResidueConflict { .. } => "residue_conflict",
            StoreError::InvalidRow { .. } => "invalid_row",
            StoreError::Contention(_) => "contention",
            StoreError::Moving(_) => "moving",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Refused(_) => "refused",
            StoreError::PeriodFull { .. } => "period_full",
            StoreError::PeriodPassed(_) => "period_passed",
            StoreError::Clock { fault, .. } => fault.as_str(),
            StoreError::Periodic(_) => "periodic",
        }
    }

    /// What an operator can do about it: a refusal's own hint, if it has one.
    pub fn hint(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(match self {
            StoreError::NotFound(_) => {
                "create the biz with `segmint biz add NAME`, or import it with `segmint import`"
            }
            StoreError::Overflow { .. } => {
                "the biz has no IDs left below 2^63 at its step: give a smaller step, or issue from a new biz"
            }
            StoreError::ResidueConflict { .. } => {
                "give the rows disjoint classes (their `delta` and `remainder`); `segmint db list` shows each database's class"
            }
            StoreError::InvalidRow { .. } => {
                "correct the row on the database named; nothing is issued from it until then"
            }
            StoreError::Contention(_) => {
                "try again; if it persists, another writer advances the row without pause"
            }
            StoreError::Moving(_) => {
                "a layout change is moving the biz: `segmint db list` shows it; wait for it, or run the same command again if it was cut off"
            }
            StoreError::Unavailable(_) => {
                "check that the databases answer (`segmint db list`) and that the configuration names them"
            }
            StoreError::Refused(r) => r.hint.as_deref()?,
            StoreError::PeriodFull { .. } => {
                "the format's {seq} is too narrow for the biz's busiest period: add a biz with a wider one (the `segmint_biz_period_used_ratio` alert warns before)"
            }
            StoreError::PeriodPassed(_) => {
                "this server's clock is behind the others': check its time synchronisation"
            }
            StoreError::Clock {
                fault: ClockFault::Ahead,
                ..
            } => {
                "correct this server's clock (NTP): until then it issues none of the biz's numbers, and the servers whose clocks agree with the databases' serve them"
            }
            StoreError::Clock {
                fault: ClockFault::RowsAhead,
                ..
            } => {
                "a clock that was ahead moved the biz's rows into a later period: `segmint biz recover BIZ` serves the periods before it (\"Rows ahead of every clock\" in docs/periods.md)"
            }
            StoreError::Periodic(_) => {
                "use segmint's client library (/v1/segments/{biz}), or take IDs from nextId or /v1/ids/{biz}"
            }
        }))
    }

    /// The stable code of a refusal's [`Reason`] (`change_pending`); `None` for the
    /// other kinds.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            StoreError::Refused(r) => Some(r.reason.code()),
            _ => None,
        }
    }
}

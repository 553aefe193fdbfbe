//! What the engines share above the seam: the migrations each applies, the columns each
//! reads and how a row read is turned into a value, and the protocol's writes expressed
//! with the engines' few primitives.
//!
//! An engine ([`crate::postgres`], [`crate::sqlite`]) holds only its dialect's
//! statements and transactions. Every choice that is the same whichever database runs
//! it (which layout states may be rewritten, that an advance is the next version, which
//! worker IDs a row may name) is made here once, so the next engine inherits it instead
//! of writing it again.

use crate::layout::LayoutState;
use crate::name::Name;
use crate::{
    BizRow, DbError, FeedPosition, Inserted, LayoutRow, LeaseRow, LeaseSet, Mark, Reclass,
    RowClass, RowWrite, SectionRow, SectionWrite, SegmentStore, ShapeRow, TokenRow, Witness,
};

/// One schema migration: its number, its name, and its statements in one dialect.
pub(crate) type Migration = (i32, &'static str, &'static str);

/// The schema migrations of dialect `$dialect` (a directory under `sql/`), in order.
/// One list for every engine: a migration added to one dialect and forgotten in another
/// fails to build, since its file is missing.
macro_rules! migrations {
    ($dialect:literal) => {
        &[
            (
                1,
                "init",
                include_str!(concat!("../../../sql/", $dialect, "/0001_init.sql")),
            ),
            (
                2,
                "witness",
                include_str!(concat!("../../../sql/", $dialect, "/0002_witness.sql")),
            ),
            (
                3,
                "token_lifecycle",
                include_str!(concat!(
                    "../../../sql/",
                    $dialect,
                    "/0003_token_lifecycle.sql"
                )),
            ),
            (
                4,
                "description",
                include_str!(concat!("../../../sql/", $dialect, "/0004_description.sql")),
            ),
            (
                5,
                "worker_lease",
                include_str!(concat!("../../../sql/", $dialect, "/0005_worker_lease.sql")),
            ),
            (
                6,
                "biz_shape",
                include_str!(concat!("../../../sql/", $dialect, "/0006_biz_shape.sql")),
            ),
            (
                7,
                "layout",
                include_str!(concat!("../../../sql/", $dialect, "/0007_layout.sql")),
            ),
            (
                8,
                "layout_claim",
                include_str!(concat!("../../../sql/", $dialect, "/0008_layout_claim.sql")),
            ),
            (
                9,
                "change_feed",
                include_str!(concat!("../../../sql/", $dialect, "/0009_change_feed.sql")),
            ),
            (
                10,
                "token_lookup",
                include_str!(concat!("../../../sql/", $dialect, "/0010_token_lookup.sql")),
            ),
            (
                11,
                "biz_period",
                include_str!(concat!("../../../sql/", $dialect, "/0011_biz_period.sql")),
            ),
            (
                12,
                "snowflake_layout",
                include_str!(concat!(
                    "../../../sql/",
                    $dialect,
                    "/0012_snowflake_layout.sql"
                )),
            ),
            (
                13,
                "sequence_section",
                include_str!(concat!(
                    "../../../sql/",
                    $dialect,
                    "/0013_sequence_section.sql"
                )),
            ),
        ]
    };
}
pub(crate) use migrations;

/// Where a catalog read resumes the feed last read at `since`, the feed now standing at
/// `now`: `since.next` when both are of the same run of the database and the feed has
/// not gone back, else `None` (read every row). A feed that went back means the
/// database went back in time (a file restored from a copy), so every row is read and
/// checked against the evidence.
pub fn resume_at(since: Option<&FeedPosition>, now: &FeedPosition) -> Option<i64> {
    since
        .filter(|s| s.incarnation == now.incarnation && s.next <= now.next)
        .map(|s| s.next)
}

/// The migrations of `all` not yet in `applied`, in order: what a `migrate` runs, in
/// one transaction with the record of each.
pub(crate) fn pending<'a>(
    all: &'a [Migration],
    applied: &'a [i32],
) -> impl Iterator<Item = &'a Migration> + 'a {
    all.iter().filter(move |(v, _, _)| !applied.contains(v))
}

/// How a migration applied now is reported.
pub(crate) fn migration_name(&(version, name, _): &Migration) -> String {
    format!("{version:04}_{name}")
}

/// The columns of `tiny_id_info` in the order [`biz_row`] reads them.
pub(crate) const BIZ_COLUMNS: &str = "biz_type, begin_id, max_id, step, delta, remainder, version, description, layout_epoch, frozen, claimed_by";
/// The columns of `segmint_biz_shape` in the order [`shape_row`] reads them.
pub(crate) const SHAPE_COLUMNS: &str = "biz_type, id_order, block, domain, within_delta, within_remainder, \
     shape_key, prefix, width, base, check_char, as_string, period_spec";
/// The stored columns of `segmint_worker_lease` in the order [`lease_row`] reads them;
/// the database's clock follows them in every statement that returns a lease.
pub(crate) const LEASE_COLUMNS: &str = "worker_id, holder, version, expires_ms, last_ms, bound_ms";
/// The columns of `segmint_layout` in the order [`layout_row`] reads them.
pub(crate) const LAYOUT_COLUMNS: &str = "epoch, members, state, changed_ms";
/// The columns of `segmint_witness` in the order [`witness_row`] reads them.
pub(crate) const WITNESS_COLUMNS: &str = "database, biz_type, version, max_id, high_id";

/// One row as an engine's driver returns it: typed reads of its columns by position.
/// The shared readers below build values from it, so each engine maps only its
/// driver's types, and a cell of an unexpected type is an error, never a panic.
pub(crate) trait Cells {
    type Error;
    fn int(&self, i: usize) -> Result<i64, Self::Error>;
    fn int32(&self, i: usize) -> Result<i32, Self::Error>;
    fn opt_int(&self, i: usize) -> Result<Option<i64>, Self::Error>;
    fn text(&self, i: usize) -> Result<String, Self::Error>;
    fn flag(&self, i: usize) -> Result<bool, Self::Error>;
}

/// A biz row read with [`BIZ_COLUMNS`].
pub(crate) fn biz_row<C: Cells>(r: &C) -> Result<BizRow, C::Error> {
    Ok(BizRow {
        biz_type: Name::new(&r.text(0)?),
        begin_id: r.int(1)?,
        max_id: r.int(2)?,
        step: r.int(3)?,
        delta: r.int(4)?,
        remainder: r.int(5)?,
        version: r.int(6)?,
        description: r.text(7)?.into(),
        epoch: r.int(8)?,
        frozen: r.flag(9)?,
        claimed_by: r.int(10)?,
    })
}

/// A shape row read with [`SHAPE_COLUMNS`].
pub(crate) fn shape_row<C: Cells>(r: &C) -> Result<ShapeRow, C::Error> {
    Ok(ShapeRow {
        biz_type: r.text(0)?,
        id_order: r.text(1)?,
        block: r.int(2)?,
        domain: r.int(3)?,
        within_delta: r.int(4)?,
        within_remainder: r.int(5)?,
        key: r.text(6)?,
        prefix: r.text(7)?,
        width: r.int32(8)?,
        base: r.int32(9)?,
        check_char: r.flag(10)?,
        as_string: r.flag(11)?,
        period: r.text(12)?,
    })
}

/// A lease row read with [`LEASE_COLUMNS`] and the database's clock.
pub(crate) fn lease_row<C: Cells>(r: &C) -> Result<LeaseRow, C::Error> {
    Ok(LeaseRow {
        // The column's CHECK keeps it within 0..=1023; a value beyond reads as a worker
        // ID no class holds, so no server ever takes or renews it.
        worker_id: u16::try_from(r.int32(0)?).unwrap_or(u16::MAX),
        holder: r.text(1)?,
        version: r.int(2)?,
        expires_ms: r.int(3)?,
        last_ms: r.int(4)?,
        bound_ms: r.int(5)?,
        db_now_ms: r.int(6)?,
    })
}

/// The columns of a sequence section's row as the engines read it, the database's
/// clock after them.
pub(crate) const SECTION_COLUMNS: &str = "holder, version, bound, expires_ms";

/// Section `section` as the engines' integer column holds it.
pub(crate) fn section_number(section: u32) -> i32 {
    assert!(
        section < segmint_core::sequence::MAX_SECTIONS,
        "a section number below the most a biz may have"
    );
    section as i32
}

/// A section row read with [`SECTION_COLUMNS`] and the database's clock.
pub(crate) fn section_row<C: Cells>(r: &C) -> Result<SectionRow, C::Error> {
    section_row_from(r, 0)
}

/// A section's number and row, read with `section, ` [`SECTION_COLUMNS`] and the
/// database's clock.
pub(crate) fn numbered_section_row<C: Cells>(r: &C) -> Result<(u32, SectionRow), C::Error> {
    Ok((section_of(r, 0)?, section_row_from(r, 1)?))
}

/// A section's biz, number and row, read with `biz_type, section, `
/// [`SECTION_COLUMNS`] and the database's clock.
pub(crate) fn named_section_row<C: Cells>(r: &C) -> Result<(String, u32, SectionRow), C::Error> {
    Ok((r.text(0)?, section_of(r, 1)?, section_row_from(r, 2)?))
}

/// The section number in cell `i`; a negative one (the column's CHECK forbids it) reads
/// as a section no biz has.
fn section_of<C: Cells>(r: &C, i: usize) -> Result<u32, C::Error> {
    Ok(u32::try_from(r.int32(i)?).unwrap_or(u32::MAX))
}

/// A section row read with [`SECTION_COLUMNS`] from cell `first` on, the database's
/// clock after them.
fn section_row_from<C: Cells>(r: &C, first: usize) -> Result<SectionRow, C::Error> {
    Ok(SectionRow {
        holder: r.text(first)?,
        version: r.int(first + 1)?,
        bound: r.int(first + 2)?,
        expires_ms: r.int(first + 3)?,
        db_now_ms: r.int(first + 4)?,
    })
}

/// The positions of `writes` in the order of the rows they name, biz then section:
/// the order a batch of section writes takes its rows' locks in, so that two batches
/// locking some of the same rows wait on each other at the first of them instead of
/// each holding one the other waits for.
///
/// # Panics
/// When two writes name the same row: a batch answers once per row, and one statement
/// cannot compare-and-set a row twice.
pub(crate) fn in_row_order(writes: &[SectionWrite]) -> Vec<usize> {
    let row = |i: usize| (writes[i].biz.as_str(), writes[i].section);
    let mut order: Vec<usize> = (0..writes.len()).collect();
    order.sort_unstable_by_key(|&i| row(i));
    assert!(
        order.windows(2).all(|p| row(p[0]) != row(p[1])),
        "a batch of section writes names each row once"
    );
    order
}

/// A layout row read with [`LAYOUT_COLUMNS`].
pub(crate) fn layout_row<C: Cells>(r: &C) -> Result<LayoutRow, C::Error> {
    Ok(LayoutRow {
        epoch: r.int(0)?,
        members: r.text(1)?,
        state: r.text(2)?,
        changed_ms: r.int(3)?,
    })
}

/// A witness row read with [`WITNESS_COLUMNS`].
pub(crate) fn witness_row<C: Cells>(r: &C) -> Result<Witness, C::Error> {
    Ok(Witness {
        database: r.text(0)?,
        biz: r.text(1)?,
        mark: Mark {
            version: r.int(2)?,
            max_id: r.int(3)?,
            high_id: r.int(4)?,
        },
    })
}

/// A token row read as `id, token, biz_type, remark` and its four times in Unix
/// seconds (`create_time`, `expire_time`, `revoke_time`, `last_used_time`): each
/// dialect converts its own time type in its statement.
pub(crate) fn token_row<C: Cells>(r: &C) -> Result<TokenRow, C::Error> {
    Ok(TokenRow {
        id: r.int(0)?,
        token_hash: r.text(1)?,
        biz_type: r.text(2)?,
        remark: r.text(3)?,
        create_time: r.int(4)?,
        expires: r.opt_int(5)?,
        revoked: r.opt_int(6)?,
        last_used: r.opt_int(7)?,
    })
}

/// The state a layout row must hold for a later write of its epoch to replace it:
/// `moving` only, since `done` and `superseded` are final. A claim replaces nothing.
pub const REPLACEABLE: LayoutState = LayoutState::Moving;

/// The protocol's writes, each one primitive of the engine with the decision made here.
impl dyn SegmentStore {
    /// Inserts one biz row (see [`SegmentStore::insert_bizs`]).
    ///
    /// # Errors
    /// [`DbError`] when the statement fails or its commit is unknown, or the engine
    /// answers for no row.
    pub async fn insert_biz(&self, row: &BizRow) -> Result<Inserted, DbError> {
        self.insert_bizs(std::slice::from_ref(row))
            .await?
            .pop()
            .ok_or_else(|| DbError::Query {
                sqlstate: None,
                message: "the engine answered for no row".into(),
                source: None,
            })
    }

    /// Compare-and-set of a reservation: moves `max_id` from `max_id` to `new_max_id`
    /// at the next version, only if the row still has `version` and `max_id`.
    ///
    /// # Errors
    /// [`DbError`] when the statement fails or its commit is unknown.
    pub async fn advance(
        &self,
        biz: &str,
        version: i64,
        max_id: i64,
        new_max_id: i64,
    ) -> Result<Option<BizRow>, DbError> {
        self.raise(biz, version, max_id, version + 1, new_max_id)
            .await
    }

    /// Compare-and-set to `new_version` (above `version`) and `new_max_id`, the row's
    /// class, epoch and frozen state untouched: an operator's fence, an import.
    ///
    /// # Errors
    /// [`DbError`] when the statement fails or its commit is unknown.
    pub async fn raise(
        &self,
        biz: &str,
        version: i64,
        max_id: i64,
        new_version: i64,
        new_max_id: i64,
    ) -> Result<Option<BizRow>, DbError> {
        let to = RowWrite {
            version: new_version,
            max_id: new_max_id,
            class: None,
        };
        self.write_row(biz, version, max_id, &to).await
    }

    /// Compare-and-set of a layout change: the row of `biz` moves from `version` and
    /// `max_id` to everything `to` gives.
    ///
    /// # Errors
    /// [`DbError`] when the statement fails or its commit is unknown.
    pub async fn reclass(
        &self,
        biz: &str,
        version: i64,
        max_id: i64,
        to: &Reclass,
    ) -> Result<Option<BizRow>, DbError> {
        let to = RowWrite {
            version: to.version,
            max_id: to.max_id,
            class: Some(RowClass {
                delta: to.delta,
                remainder: to.remainder,
                epoch: to.epoch,
                frozen: to.frozen,
                claimed_by: to.claimed_by,
            }),
        };
        self.write_row(biz, version, max_id, &to).await
    }

    /// The witness rows of `biz` (of every database) in this database.
    ///
    /// # Errors
    /// [`DbError`] when the statement fails.
    pub async fn witnesses_of(&self, biz: &str) -> Result<Vec<Witness>, DbError> {
        self.witness_rows(Some(biz)).await
    }

    /// Every witness row of this database.
    ///
    /// # Errors
    /// [`DbError`] when the statement fails.
    pub async fn witnesses(&self) -> Result<Vec<Witness>, DbError> {
        self.witness_rows(None).await
    }

    /// Writes a layout row, replacing the row of its epoch only while that row is
    /// [`REPLACEABLE`]. Returns whether it was written.
    ///
    /// # Errors
    /// [`DbError`] when the statement fails or its commit is unknown.
    pub async fn put_layout(&self, row: &LayoutRow) -> Result<bool, DbError> {
        self.write_layout(row, Some(REPLACEABLE.as_str())).await
    }

    /// Inserts a layout row if its epoch has none: a change's claim on this database.
    /// Returns whether it was inserted.
    ///
    /// # Errors
    /// [`DbError`] when the statement fails or its commit is unknown.
    pub async fn claim_layout(&self, row: &LayoutRow) -> Result<bool, DbError> {
        self.write_layout(row, None).await
    }

    /// Sets the lease rows of a layout change at `epoch`, only while that change is
    /// still `moving` on this database (`None` otherwise: a later change superseded
    /// it, or it is done, and a command still running it writes no lease).
    ///
    /// # Errors
    /// [`DbError`] when the transaction fails or its commit is unknown.
    pub async fn set_leases(
        &self,
        epoch: i64,
        rows: &[LeaseSet],
    ) -> Result<Option<Vec<LeaseRow>>, DbError> {
        self.set_leases_while(epoch, LayoutState::Moving.as_str(), rows)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(biz: &str, section: u32) -> SectionWrite {
        SectionWrite {
            biz: biz.into(),
            section,
            expected: None,
            holder: "h".into(),
            bound: 0,
            lease_ms: 0,
        }
    }

    #[test]
    fn a_batch_is_taken_in_the_rows_order() {
        let writes = [write("b", 1), write("a", 10), write("a", 2), write("#s", 0)];
        assert_eq!(in_row_order(&writes), [3, 2, 1, 0]);
        assert_eq!(in_row_order(&[]), Vec::<usize>::new());
    }

    #[test]
    #[should_panic(expected = "names each row once")]
    fn a_batch_naming_a_row_twice_is_refused() {
        in_row_order(&[write("a", 1), write("b", 1), write("a", 1)]);
    }
}

//! The give-back plan at stop, pure: which unissued IDs of the segments a process held
//! can be returned to each database, and by which compare-and-set. The ID cache carries
//! it out; only a row still at the version of this process's last reservation moves.

use super::SegmentRange;

/// A segment of the cache at stop: where it was reserved and what was issued from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub range: SegmentRange,
    /// The last ID issued from it, if any.
    pub last_issued: Option<i64>,
    /// IDs not issued.
    pub remaining: u64,
    pub database: usize,
    /// The row's version the reservation produced.
    pub version: i64,
}

/// One compare-and-set that gives unissued IDs back to a database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiveBack {
    pub database: usize,
    /// The row must still be at this version and `max_id`...
    pub version: i64,
    pub max_id: i64,
    /// ...to be moved back to this `max_id`.
    pub new_max_id: i64,
    /// IDs given back if it succeeds.
    pub ids: u64,
}

/// What can be given back of the `held` segments: per database, the segments of this
/// process's last reservations there (consecutive versions, each starting where the
/// one before ended), back to the last ID issued from them, or to where the first of
/// them started if none was. Whether nobody reserved since is checked by the
/// compare-and-set on the version.
pub fn plan_give_back(held: &[Held]) -> Vec<GiveBack> {
    let mut databases: Vec<usize> = held.iter().map(|h| h.database).collect();
    databases.sort_unstable();
    databases.dedup();
    let mut plans = Vec::new();
    for db in databases {
        let mut segments: Vec<&Held> = held.iter().filter(|h| h.database == db).collect();
        segments.sort_by_key(|h| std::cmp::Reverse(h.version));
        // Newest first; stop at the first gap in versions or IDs.
        let mut chain = vec![segments[0]];
        for s in &segments[1..] {
            let after = chain[chain.len() - 1];
            if s.version + 1 == after.version && s.range.max_id() == after.range.current_id() {
                chain.push(s);
            } else {
                break;
            }
        }
        let newest = chain[0];
        let new_max_id = chain
            .iter()
            .find_map(|s| s.last_issued)
            .unwrap_or_else(|| chain[chain.len() - 1].range.current_id());
        let ids: u64 = chain.iter().map(|s| s.remaining).sum();
        if new_max_id < newest.range.max_id() && ids > 0 {
            plans.push(GiveBack {
                database: db,
                version: newest.version,
                max_id: newest.range.max_id(),
                new_max_id,
                ids,
            });
        }
    }
    plans
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Residue;

    /// A segment of step `step` above `from`, in class `d, r`, reserved as `version`
    /// on database `db`, with `used` IDs issued.
    fn held(db: usize, version: i64, from: i64, step: i64, d: i64, r: i64, used: usize) -> Held {
        let range = SegmentRange::after(from, step, Residue::new(d, r).unwrap()).unwrap();
        let ids: Vec<i64> = range.ids().collect();
        Held {
            range,
            last_issued: used.checked_sub(1).map(|i| ids[i]),
            remaining: (ids.len() - used) as u64,
            database: db,
            version,
        }
    }

    #[test]
    fn gives_back_down_to_the_last_issued_id() {
        // Current segment (5, 15] with 3 issued (6, 7, 8), next (15, 25] untouched.
        let plan = plan_give_back(&[held(0, 7, 5, 10, 1, 0, 3), held(0, 8, 15, 10, 1, 0, 0)]);
        assert_eq!(
            plan,
            [GiveBack {
                database: 0,
                version: 8,
                max_id: 25,
                new_max_id: 8,
                ids: 17
            }]
        );
    }

    #[test]
    fn an_untouched_segment_goes_back_whole() {
        let plan = plan_give_back(&[held(1, 3, 100, 50, 2, 1, 0)]);
        assert_eq!(plan.len(), 1);
        assert_eq!((plan[0].new_max_id, plan[0].ids), (100, 25));
    }

    #[test]
    fn a_gap_in_versions_keeps_the_older_segment() {
        // Version 4 was reserved by someone else between our 3 and 5: only 5 goes back.
        let plan = plan_give_back(&[held(0, 3, 0, 10, 1, 0, 2), held(0, 5, 20, 10, 1, 0, 0)]);
        assert_eq!(plan.len(), 1);
        assert_eq!(
            (plan[0].version, plan[0].new_max_id, plan[0].ids),
            (5, 20, 10)
        );
    }

    #[test]
    fn each_database_on_its_own_and_nothing_for_a_used_up_segment() {
        let plan = plan_give_back(&[held(0, 2, 0, 10, 2, 0, 5), held(1, 9, 40, 10, 2, 1, 1)]);
        // Database 0's segment is used up; database 1 gives back 4 of its 5 odd IDs.
        assert_eq!(plan.len(), 1);
        assert_eq!(
            (plan[0].database, plan[0].new_max_id, plan[0].ids),
            (1, 41, 4)
        );
    }
}

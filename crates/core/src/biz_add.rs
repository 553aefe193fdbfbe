//! `segmint biz add`, as the layout change is: the store reads, this module checks and
//! plans from what was read, the store writes the plan. Pure: the same inputs give the
//! same rows, and a refusal changes nothing.
//!
//! ```text
//!   check the numbers (step, start) ─bad─▶ Invalid, before any read
//!   read: the layout in force, each member's class, the biz's row on each member
//!   plan: none has it ──▶ one row per member, its class restricted to `within`
//!         all have it ──▶ Exists          some have it ──▶ Partial (which, which not)
//!   write: the shape, then each row (insert-if-absent, fenced by the layout's epoch)
//! ```

use crate::biz::BizTag;
use crate::rows::BizRow;
use crate::segment::Residue;

/// What `biz add` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BizAdd<'a> {
    pub biz: &'a BizTag,
    /// How many IDs a segment holds (before the class thins them).
    pub step: i64,
    /// The first ID.
    pub start: i64,
    /// The class every ID of the biz keeps (odd, even), if any.
    pub within: Option<Residue>,
    pub description: &'a str,
}

/// One member database of the layout in force, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member<'a> {
    pub name: &'a str,
    /// Its class in the layout in force.
    pub class: Residue,
    /// Whether it holds a row of the biz already.
    pub has_biz: bool,
}

/// Why the plan refuses; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// A bad argument: what is wrong.
    Invalid(String),
    /// Every member holds the biz.
    Exists,
    /// Some members hold the biz and others do not: their names.
    Partial {
        have: Vec<String>,
        lack: Vec<String>,
    },
}

/// The numbers checked before anything is read.
///
/// # Errors
/// [`Refused::Invalid`] for a step or start below 1.
pub fn check(add: &BizAdd<'_>) -> Result<(), Refused> {
    if add.step < 1 {
        return Err(Refused::Invalid(format!(
            "step must be at least 1, got {}",
            add.step
        )));
    }
    if add.start < 1 {
        return Err(Refused::Invalid(format!(
            "start must be at least 1, got {}",
            add.start
        )));
    }
    Ok(())
}

/// The rows to insert, one per member in order, at layout `epoch`: each issues from its
/// member's class restricted to `within`, from `start`.
///
/// # Errors
/// As [`check`]; [`Refused::Exists`] and [`Refused::Partial`] when members hold the biz;
/// [`Refused::Invalid`] when a class cannot be restricted or the step is below its
/// delta (a segment could hold no ID).
pub fn plan(add: &BizAdd<'_>, members: &[Member<'_>], epoch: i64) -> Result<Vec<BizRow>, Refused> {
    check(add)?;
    let (have, lack): (Vec<&Member>, Vec<&Member>) = members.iter().partition(|m| m.has_biz);
    let names = |ms: &[&Member]| ms.iter().map(|m| m.name.to_owned()).collect();
    if lack.is_empty() {
        return Err(Refused::Exists);
    }
    if !have.is_empty() {
        return Err(Refused::Partial {
            have: names(&have),
            lack: names(&lack),
        });
    }
    let mut rows = Vec::with_capacity(members.len());
    for member in members {
        let class = match add.within {
            Some(w) => member.class.restrict(w),
            None => Ok(member.class),
        }
        .map_err(|e| Refused::Invalid(format!("database \"{}\": {e}", member.name)))?;
        if add.step < class.delta() {
            return Err(Refused::Invalid(format!(
                "step {} is smaller than the biz's delta {} on database \"{}\": a segment could hold no ID; nothing changed",
                add.step,
                class.delta(),
                member.name
            )));
        }
        rows.push(BizRow {
            biz_type: add.biz.as_str().into(),
            begin_id: add.start - 1,
            max_id: add.start - 1,
            step: add.step,
            delta: class.delta(),
            remainder: class.remainder(),
            version: 0,
            description: add.description.into(),
            claimed_by: 0,
            epoch,
            frozen: false,
        });
    }
    // Disjoint classes in, disjoint classes out: the layout's classes restricted alike.
    for (i, a) in rows.iter().enumerate() {
        for b in &rows[i + 1..] {
            let (ra, rb) = (
                Residue::new(a.delta, a.remainder),
                Residue::new(b.delta, b.remainder),
            );
            if let (Ok(ra), Ok(rb)) = (ra, rb) {
                assert!(!ra.overlaps(rb), "a biz planned with overlapping classes");
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(biz: &BizTag, step: i64, within: Option<Residue>) -> BizAdd<'_> {
        BizAdd {
            biz,
            step,
            start: 1,
            within,
            description: "",
        }
    }

    fn members(classes: &[(i64, i64, bool)]) -> Vec<Member<'static>> {
        const NAMES: [&str; 3] = ["pg0", "pg1", "pg2"];
        classes
            .iter()
            .enumerate()
            .map(|(i, &(d, r, has_biz))| Member {
                name: NAMES[i],
                class: Residue::new(d, r).expect("a class"),
                has_biz,
            })
            .collect()
    }

    #[test]
    fn plans_a_row_per_member_in_its_class_within_the_restriction() {
        let biz = BizTag::parse("order").expect("a name");
        let odd = Residue::new(2, 1).ok();
        let rows = plan(
            &add(&biz, 100, odd),
            &members(&[(2, 0, false), (2, 1, false)]),
            3,
        )
        .expect("a plan");
        let classes: Vec<(i64, i64, i64)> = rows
            .iter()
            .map(|r| (r.delta, r.remainder, r.epoch))
            .collect();
        assert_eq!(classes, vec![(4, 1, 3), (4, 3, 3)]);
        assert!(rows.iter().all(|r| r.max_id == 0 && r.step == 100));
    }

    #[test]
    fn refuses_what_exists_a_partial_biz_and_bad_numbers() {
        let biz = BizTag::parse("order").expect("a name");
        let both = members(&[(2, 0, true), (2, 1, true)]);
        assert_eq!(plan(&add(&biz, 10, None), &both, 1), Err(Refused::Exists));
        let one = members(&[(2, 0, true), (2, 1, false)]);
        assert_eq!(
            plan(&add(&biz, 10, None), &one, 1),
            Err(Refused::Partial {
                have: vec!["pg0".into()],
                lack: vec!["pg1".into()]
            })
        );
        let none = members(&[(2, 0, false), (2, 1, false)]);
        assert!(matches!(
            plan(&add(&biz, 1, None), &none, 1),
            Err(Refused::Invalid(m)) if m.contains("smaller than the biz's delta 2")
        ));
        assert!(matches!(
            check(&add(&biz, 0, None)),
            Err(Refused::Invalid(_))
        ));
    }
}

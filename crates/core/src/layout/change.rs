//! A layout change: what it asks for, what it does, which databases must answer, in
//! which order it claims its epoch, and where a biz's new rows start.

use super::{Layout, LayoutState, MAX_MODULUS, Member, current, gcd};
use crate::segment::Residue;

/// What a layout command asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutChange {
    /// `segmint db add NAME`.
    Add(String),
    /// `segmint db remove NAME`.
    Remove(String),
    /// `segmint db remove NAME --lost`.
    Lost(String),
}

/// Why a change cannot be planned. The text says what is refused; what an operator can
/// do about it is the store's to say (its refusal's hint), by the variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The database named is in neither the layout in force nor a change under way.
    #[error("database \"{name}\" is not in the layout (epoch {epoch}: {layout}); nothing changed")]
    NotInLayout {
        name: String,
        epoch: i64,
        /// The layout's members and classes, as [`Layout::describe`] gives them.
        layout: String,
    },
    /// A layout needs at least one database.
    #[error("a layout needs at least one database; nothing changed")]
    Empty,
    /// The first change would start from configured classes that leave IDs to no
    /// database: one is missing from the configuration.
    #[error(
        "the configured classes ({classes}) give IDs like {id} to no database: a database is missing from this configuration, and it would keep issuing from its class; nothing changed"
    )]
    Uncovered { classes: String, id: i64 },
    /// The name was declared lost: a restored backup of it may hold rows.
    #[error(
        "database \"{name}\" was declared lost (layout epoch {epoch}): it may hold rows no change can reach; nothing changed"
    )]
    Lost { name: String, epoch: i64 },
    /// No classes can be allocated (see [`Layout::allocate`]).
    #[error("{0}")]
    Classes(String),
}

/// The databases of the layout `change` asks for, in `order` (the configuration's;
/// names it lacks first), and the databases it declares lost, from the layouts read:
/// the layout in force (or `before`, the configured classes) with the database added or
/// taken out.
///
/// # Errors
/// [`PlanError::NotInLayout`] when the database to take out is in neither the layout
/// in force nor a change under way.
pub fn target(
    change: &LayoutChange,
    layouts: &[Layout],
    before: &Layout,
    order: &[String],
) -> Result<(Vec<String>, Vec<String>), PlanError> {
    let (done, pending) = current(layouts);
    let from = done.unwrap_or(before);
    let mut names = from.names();
    let lost = match change {
        LayoutChange::Add(name) => {
            if !names.contains(name) {
                names.push(name.clone());
            }
            Vec::new()
        }
        LayoutChange::Remove(name) | LayoutChange::Lost(name) => {
            if from.class_of(name).is_none() && pending.is_none_or(|p| p.class_of(name).is_none()) {
                return Err(PlanError::NotInLayout {
                    name: name.clone(),
                    epoch: from.epoch,
                    layout: from.describe(),
                });
            }
            names.retain(|n| n != name);
            match change {
                LayoutChange::Lost(_) => vec![name.clone()],
                _ => Vec::new(),
            }
        }
    };
    // Database i of n in configuration order (one added by URL comes last), so that
    // taking a database out and bringing it back restores the classes.
    names.sort_by_key(|n| order.iter().position(|o| o == n));
    Ok((names, lost))
}

/// What a change does, decided from the layouts read from every database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The layout in force already has these databases: nothing to do.
    Already(Layout),
    /// Move from `from` (the layout in force) to `to`.
    Change {
        from: Layout,
        to: Layout,
        /// A change cut off before, replaced by this one (marked superseded).
        supersede: Option<Layout>,
        /// `to` is that change cut off before, finished now.
        finishing: bool,
    },
}

/// Decides a change to the layout of `target` (names in order) that declares `lost`
/// lost, from the stored `layouts` (merged) and `before`, the layout of the configured
/// classes when none is stored.
///
/// # Errors
/// A [`PlanError`] saying what is refused: an empty layout, configured classes that
/// leave IDs to no database, a database declared lost before, a lost one that the
/// layout does not name, or classes that cannot be allocated.
pub fn plan(
    layouts: &[Layout],
    before: &Layout,
    target: &[String],
    lost: &[String],
) -> Result<Plan, PlanError> {
    if target.is_empty() {
        return Err(PlanError::Empty);
    }
    let (done, pending) = current(layouts);
    if done.is_none() && pending.is_none() {
        // The first change starts from the configured classes: every database must be
        // configured, and then their classes cover every ID (database i of n: i mod n).
        if let Some(id) = uncovered(before.members.iter().map(|m| m.class)) {
            return Err(PlanError::Uncovered {
                classes: before.describe(),
                id,
            });
        }
    }
    let from = done.unwrap_or(before).clone();
    let newest = layouts.last().unwrap_or(&from);
    for name in target {
        if newest.is_lost(name) {
            return Err(PlanError::Lost {
                name: name.clone(),
                epoch: newest.epoch,
            });
        }
    }
    let gone = gone(layouts, before, (&from, pending, newest), lost)?;
    if let Some(p) = pending {
        if p.names() == target && p.lost == gone {
            return Ok(Plan::Change {
                from,
                to: p.clone(),
                supersede: None,
                finishing: true,
            });
        }
    } else if from.names() == target && from.lost == gone {
        return Ok(Plan::Already(from));
    }
    let epoch = layouts
        .iter()
        .map(|l| l.epoch)
        .max()
        .unwrap_or(from.epoch)
        .max(from.epoch)
        + 1;
    let to = next_layout(epoch, &from, target, lost, gone)?;
    Ok(Plan::Change {
        from,
        to,
        supersede: pending.cloned(),
        finishing: false,
    })
}

/// The members the change's layout declares lost: those `newest` (the newest layout
/// stored) declares, and every class each database of `lost` held in `layouts` or
/// `before`. `from` is the layout in force (or `before`), `pending` a change under way.
///
/// # Errors
/// [`PlanError::NotInLayout`] when a database of `lost` is in neither `from` nor
/// `pending`.
fn gone(
    layouts: &[Layout],
    before: &Layout,
    (from, pending, newest): (&Layout, Option<&Layout>, &Layout),
    lost: &[String],
) -> Result<Vec<Member>, PlanError> {
    let mut gone = newest.lost.clone();
    for name in lost {
        let named =
            from.class_of(name).is_some() || pending.is_some_and(|p| p.class_of(name).is_some());
        if !named {
            return Err(PlanError::NotInLayout {
                name: name.clone(),
                epoch: from.epoch,
                layout: from.describe(),
            });
        }
        // Every class it held: a restored backup of it may hold rows of any of them.
        for l in layouts.iter().chain([before]) {
            if let Some(class) = l.class_of(name) {
                let m = Member {
                    name: name.clone(),
                    class,
                };
                if !gone.contains(&m) {
                    gone.push(m);
                }
            }
        }
    }
    Ok(gone)
}

/// The layout a change from `from` moves to: epoch `epoch`, `moving`, the databases of
/// `target` as members and `gone` lost. When the change declares databases `lost`, each
/// member keeps its class in `from` if every member has one there that overlaps no lost
/// class; else the classes are allocated afresh.
///
/// # Errors
/// [`PlanError::Classes`] when no classes can be allocated.
fn next_layout(
    epoch: i64,
    from: &Layout,
    target: &[String],
    lost: &[String],
    gone: Vec<Member>,
) -> Result<Layout, PlanError> {
    // Declaring a database lost keeps the others' classes where they avoid every lost
    // class: no biz moves to new classes, and no worker ID changes hands.
    let kept = (!lost.is_empty())
        .then(|| {
            target
                .iter()
                .map(|name| {
                    let class = from.class_of(name)?;
                    (!gone.iter().any(|g| overlap(g.class, class))).then(|| Member {
                        name: name.clone(),
                        class,
                    })
                })
                .collect::<Option<Vec<Member>>>()
        })
        .flatten();
    Ok(match kept {
        Some(members) => Layout {
            epoch,
            members,
            state: LayoutState::Moving,
            lost: gone,
        },
        None => Layout::allocate(epoch, target, gone, LayoutState::Moving)
            .map_err(PlanError::Classes)?,
    })
}

/// An ID that none of `classes` holds, if any (checked over one period, the least
/// common multiple of their moduli, up to `MAX_MODULUS`).
pub fn uncovered(classes: impl Iterator<Item = Residue> + Clone) -> Option<i64> {
    let m = classes.clone().try_fold(1i64, |m, c| {
        (m / gcd(m, c.delta()))
            .checked_mul(c.delta())
            .filter(|&m| m <= MAX_MODULUS)
    })?;
    (0..m).find(|&id| !classes.clone().any(|c| c.contains(id)))
}

/// The databases a server must be configured with, and have just read, to finish the
/// bizs of `pending`, a change cut off: those [`required`] names (with `witnessed`,
/// the databases the witnesses read name) and every member of `pending`.
fn needed_to_heal(
    layouts: &[Layout],
    before: &Layout,
    witnessed: &[String],
    pending: &Layout,
) -> Vec<String> {
    let mut need = required(layouts, before, witnessed, &[]);
    for m in pending.names() {
        if !need.contains(&m) {
            need.push(m);
        }
    }
    need
}

/// What a server can do for a change cut off ([`healing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heal<'a> {
    /// No change is pending.
    Nothing,
    /// The server is not configured with, or did not just read, these databases the
    /// change needs: the command must be run again.
    Lacks(Vec<String>),
    /// Move every biz with a row that [`frozen_by`] the change `pending`, over `parts`
    /// (positions in the server's configuration, in the order the change needs them).
    Move {
        pending: &'a Layout,
        parts: Vec<usize>,
    },
}

/// What a server configured with the databases named `configured` (its classes
/// before any change: `before`), which just read those at positions `read` and found
/// witnesses naming the databases `witnessed`, does for the change pending in
/// `layouts`, once it fell silent.
pub fn healing<'a>(
    layouts: &'a [Layout],
    before: &Layout,
    configured: &[String],
    read: &[usize],
    witnessed: &[String],
) -> Heal<'a> {
    let Some(pending) = current(layouts).1 else {
        return Heal::Nothing;
    };
    let need = needed_to_heal(layouts, before, witnessed, pending);
    let parts: Option<Vec<usize>> = need
        .iter()
        .map(|n| {
            configured
                .iter()
                .position(|c| c == n)
                .filter(|p| read.contains(p))
        })
        .collect();
    match parts {
        Some(parts) => Heal::Move { pending, parts },
        None => Heal::Lacks(need),
    }
}

/// Whether a row read on the database named `name`, `frozen` by the change to epoch
/// `claimed_by`, is one a heal of `pending` moves: a member's row frozen by the change
/// (the rows of a database it removes stay frozen for good).
pub fn frozen_by(pending: &Layout, name: &str, frozen: bool, claimed_by: i64) -> bool {
    frozen && claimed_by == pending.epoch && pending.class_of(name).is_some()
}

/// Whether two classes share an ID: `a ≡ b` modulo the gcd of their moduli.
pub fn overlap(a: Residue, b: Residue) -> bool {
    let g = gcd(a.delta(), b.delta());
    a.remainder() % g == b.remainder() % g
}

/// The databases that must be configured and answer before a change starts: every
/// member of the layout in force (or of `before`, the configured classes, when none is
/// stored) and of every layout above it (a change under way or cut off), and every
/// database a witness names that no stored layout explains (it served before layouts
/// were stored). Lost databases are never required, nor is `lost`, about to be.
pub fn required(
    layouts: &[Layout],
    before: &Layout,
    witnessed: &[String],
    lost: &[String],
) -> Vec<String> {
    let (done, _) = current(layouts);
    let from = done.unwrap_or(before);
    let mut names: Vec<String> = Vec::new();
    let mut add = |name: &String| {
        if !names.contains(name) {
            names.push(name.clone());
        }
    };
    for l in std::iter::once(from).chain(layouts.iter().filter(|l| l.epoch > from.epoch)) {
        l.members.iter().for_each(|m| add(&m.name));
    }
    let known = |name: &String| {
        layouts
            .iter()
            .chain([before])
            .any(|l| l.class_of(name).is_some() || l.is_lost(name))
    };
    witnessed.iter().filter(|w| !known(w)).for_each(&mut add);
    let gone = layouts.last().map(Layout::lost_names).unwrap_or_default();
    names.retain(|n| !gone.contains(n) && !lost.contains(n));
    names
}

/// The order in which a change claims epoch `prev.epoch + 1` on the databases `all`:
/// the members of `prev` (the newest epoch stored, whatever its state) first, sorted
/// by name, then the others, sorted. Two changes racing for the same epoch read the
/// same `prev` (epochs never differ between databases), so both try its first member
/// first, and only one can insert the row there.
pub fn claim_order(prev: &Layout, all: &[String]) -> Vec<String> {
    let mut first: Vec<String> = all
        .iter()
        .filter(|n| prev.class_of(n).is_some())
        .cloned()
        .collect();
    let mut rest: Vec<String> = all.iter().filter(|n| !first.contains(n)).cloned().collect();
    first.sort();
    rest.sort();
    first.extend(rest);
    first
}

/// Where a biz's rows start in a new layout, from its frozen rows' `(max_id,
/// version)` and what witnesses recorded of them: `(fence, version)`, the highest
/// `max_id` (nothing was issued above it under the old layout: a frozen row gives out
/// nothing, and a give-back lowers a row only to its first ID not issued) and the
/// highest version, above which an inserted row starts.
pub fn fence(rows: impl IntoIterator<Item = (i64, i64)>) -> (i64, i64) {
    rows.into_iter().fold((0, 0), |(f, v), (max_id, version)| {
        (f.max(max_id), v.max(version))
    })
}

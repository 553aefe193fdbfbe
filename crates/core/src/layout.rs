//! Layouts: which databases issue IDs, and from which residue class, at each epoch.
//! Pure: no IO. `segmint db add` and `db remove` move the cluster from one layout to
//! the next (see `store/cluster/layout.rs`); servers read the layouts with the catalog.
//!
//! Epoch 0 is the configuration's classes, before any change. A change claims the next
//! epoch (inserting its row as `moving` on every database, one at a time in
//! [`claim_order`]: of two changes racing for one epoch only one can win), moves every
//! biz row and worker ID to it, then marks it `done`.
//!
//! The decisions of a change are made here, by pure functions that the store and the
//! protocol's model (`tests/model`) both call: which databases must answer
//! ([`required`]), what the change does ([`plan`]), in which order it claims
//! ([`claim_order`]), where a biz's new rows start ([`fence`]), and which databases a
//! server may use ([`standing`]).

use crate::rows::LayoutRow;
use crate::segment::Residue;

/// How far a layout's change got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutState {
    /// Being applied: bizs and worker IDs still follow the layout before it.
    Moving,
    /// Every biz row and worker ID follows it.
    Done,
    /// A later change replaced it before it was done.
    Superseded,
}

impl LayoutState {
    pub fn as_str(self) -> &'static str {
        match self {
            LayoutState::Moving => "moving",
            LayoutState::Done => "done",
            LayoutState::Superseded => "superseded",
        }
    }

    fn parse(text: &str) -> Option<LayoutState> {
        match text {
            "moving" => Some(LayoutState::Moving),
            "done" => Some(LayoutState::Done),
            "superseded" => Some(LayoutState::Superseded),
            _ => None,
        }
    }
}

/// One database of a layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// The class plain bizs get on it.
    pub class: Residue,
}

/// The databases issuing IDs at one epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub epoch: i64,
    pub members: Vec<Member>,
    pub state: LayoutState,
    /// Databases declared lost (`segmint db remove NAME --lost`), once per class they
    /// held in any layout: a lost database may come back with live rows and leases that
    /// no change could freeze, so no later layout gives any of these classes (nor their
    /// worker IDs) to another database. Carried into every later epoch.
    pub lost: Vec<Member>,
}

impl Layout {
    /// The layout of `names`, in that order, each database `i` of `n` with the class
    /// `i mod n`: pairwise disjoint, and covering every ID (every worker ID has a home).
    pub fn spread(epoch: i64, names: &[String], state: LayoutState) -> Result<Layout, String> {
        let n = i64::try_from(names.len()).map_err(|e| e.to_string())?;
        let members = names
            .iter()
            .zip(0..)
            .map(|(name, i)| {
                Ok(Member {
                    name: name.clone(),
                    class: Residue::new(n, i).map_err(|e| e.to_string())?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Layout {
            epoch,
            members,
            state,
            lost: Vec::new(),
        })
    }

    /// The layout of `names` that gives no database a class of a `lost` one: database
    /// `i` of `n` gets `f + m·i mod m·n`, where `m` is the least common multiple of the
    /// lost classes' moduli and `f` the least residue mod `m` that no lost class holds.
    /// With nothing lost it is [`Layout::spread`]. The classes then cover only `f mod m`
    /// of the IDs (and of the worker IDs): what a lost database held is never reused.
    ///
    /// # Errors
    /// A message when the lost classes leave no residue free.
    pub fn allocate(
        epoch: i64,
        names: &[String],
        lost: Vec<Member>,
        state: LayoutState,
    ) -> Result<Layout, String> {
        let mut layout = Layout::spread(epoch, names, state)?;
        if lost.is_empty() {
            return Ok(layout);
        }
        let m = lost.iter().try_fold(1i64, |m, l| {
            let d = l.class.delta();
            (m / gcd(m, d))
                .checked_mul(d)
                .filter(|&m| m <= MAX_MODULUS)
                .ok_or_else(|| "the lost databases' classes are too many to keep apart".to_owned())
        })?;
        let free = (0..m)
            .find(|&r| !lost.iter().any(|l| l.class.contains(r)))
            .ok_or_else(|| {
                "the lost databases' classes hold every ID: no class is left for a new layout"
                    .to_owned()
            })?;
        let n = i64::try_from(names.len()).map_err(|e| e.to_string())?;
        let modulus = m
            .checked_mul(n)
            .filter(|&x| x <= MAX_MODULUS)
            .ok_or_else(|| "too many databases for the classes the lost ones left".to_owned())?;
        for (member, i) in layout.members.iter_mut().zip(0..) {
            member.class = Residue::new(modulus, free + m * i).map_err(|e| e.to_string())?;
        }
        layout.lost = lost;
        Ok(layout)
    }

    /// Reads a stored row.
    ///
    /// # Errors
    /// A message naming what is malformed.
    pub fn parse(row: &LayoutRow) -> Result<Layout, String> {
        let bad = |what: String| format!("layout epoch {}: {what}", row.epoch);
        let state = LayoutState::parse(&row.state)
            .ok_or_else(|| bad(format!("unknown state `{}`", row.state)))?;
        let mut members = Vec::new();
        let mut lost = Vec::new();
        for part in row.members.split(',').filter(|p| !p.is_empty()) {
            let (list, part) = match part.strip_prefix('!') {
                Some(rest) => (&mut lost, rest),
                None => (&mut members, part),
            };
            let member = (|| {
                let (name, class) = part.split_once('=')?;
                let (delta, remainder) = class.split_once(':')?;
                let class = Residue::new(delta.parse().ok()?, remainder.parse().ok()?).ok()?;
                Some(Member {
                    name: name.to_owned(),
                    class,
                })
            })()
            .ok_or_else(|| bad(format!("malformed member `{part}`")))?;
            list.push(member);
        }
        Ok(Layout {
            epoch: row.epoch,
            members,
            state,
            lost,
        })
    }

    /// The row to store, written at `changed_ms`. A lost database is written as a
    /// member with a leading `!`.
    pub fn row(&self, changed_ms: i64) -> LayoutRow {
        let member = |m: &Member| format!("{}={}:{}", m.name, m.class.delta(), m.class.remainder());
        LayoutRow {
            epoch: self.epoch,
            members: self
                .members
                .iter()
                .map(member)
                .chain(self.lost.iter().map(|m| format!("!{}", member(m))))
                .collect::<Vec<_>>()
                .join(","),
            state: self.state.as_str().to_owned(),
            changed_ms,
        }
    }

    /// The class of the database `name`; `None` when it is not a member.
    pub fn class_of(&self, name: &str) -> Option<Residue> {
        self.members
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.class)
    }

    pub fn names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    /// Whether the database `name` was declared lost at or before this epoch.
    pub fn is_lost(&self, name: &str) -> bool {
        self.lost.iter().any(|m| m.name == name)
    }

    /// The names of the lost databases, each once.
    pub fn lost_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.lost.iter().map(|m| m.name.clone()).collect();
        names.dedup();
        names
    }

    /// The member whose class holds the worker ID `w`, if any.
    pub fn owner_of(&self, w: u16) -> Option<&str> {
        self.members
            .iter()
            .find(|m| m.class.contains(i64::from(w)))
            .map(|m| m.name.as_str())
    }

    /// `name=class` for each member, for messages.
    pub fn describe(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{} ({})", m.name, m.class))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The largest modulus a layout may give: far below where arithmetic could overflow,
/// and far above any real cluster (a thousand databases, a few of them lost).
const MAX_MODULUS: i64 = 1 << 30;

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The layouts as read from every database: each epoch once, the furthest state
/// found for it (a database missed by a write lags behind), sorted by epoch.
///
/// # Errors
/// A message naming a malformed row, or an epoch whose members differ between
/// databases.
pub fn merge(rows: &[LayoutRow]) -> Result<Vec<Layout>, String> {
    let mut merged: Vec<Layout> = Vec::new();
    for row in rows {
        let layout = Layout::parse(row)?;
        match merged.iter_mut().find(|l| l.epoch == layout.epoch) {
            Some(known) if known.members != layout.members || known.lost != layout.lost => {
                return Err(format!(
                    "layout epoch {} differs between databases: {} and {}",
                    layout.epoch,
                    known.describe(),
                    layout.describe()
                ));
            }
            Some(known) => {
                if rank(layout.state) > rank(known.state) {
                    known.state = layout.state;
                }
            }
            None => merged.push(layout),
        }
    }
    merged.sort_by_key(|l| l.epoch);
    Ok(merged)
}

fn rank(state: LayoutState) -> u8 {
    match state {
        LayoutState::Moving => 0,
        LayoutState::Done | LayoutState::Superseded => 1,
    }
}

/// The layout in force (the latest done; `None` before any change) and the change
/// under way above it, if any.
pub fn current(layouts: &[Layout]) -> (Option<&Layout>, Option<&Layout>) {
    let done = layouts.iter().rev().find(|l| l.state == LayoutState::Done);
    let pending = layouts
        .iter()
        .rev()
        .find(|l| l.state == LayoutState::Moving && done.is_none_or(|d| l.epoch > d.epoch));
    (done, pending)
}

/// Whether worker IDs may be leased under the `layouts` read. Only the classes of a
/// layout done say which database holds which worker ID: under a change still moving
/// (a new database that holds nothing else yet), or under configured classes no
/// database confirmed, a worker ID may be leased on another database this process did
/// not reach. Before any layout is stored, the configured classes hold once every
/// configured database answered one read without a layout (`confirmed`): a static
/// cluster, each member agreeing.
pub fn leases_allowed(layouts: &[Layout], confirmed: bool) -> bool {
    match current(layouts) {
        (Some(_), _) => true,
        (None, None) => layouts.is_empty() && confirmed,
        (None, Some(_)) => false,
    }
}

/// The restriction of a biz (odd-only: `1 mod 2`) whose row has the class `row` on a
/// database of class `db`: the inverse of [`Residue::restrict`]. `None` when `row` is
/// not a restriction of `db`.
pub fn restriction(row: Residue, db: Residue) -> Option<Residue> {
    if row.delta() % db.delta() != 0 {
        return None;
    }
    let m = row.delta() / db.delta();
    let within = Residue::new(m, row.remainder() % m).ok()?;
    (db.restrict(within).ok()? == row).then_some(within)
}

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

/// The databases of the layout `change` asks for, in `order` (the configuration's;
/// names it lacks first), and the databases it declares lost, from the layouts read:
/// the layout in force (or `before`, the configured classes) with the database added or
/// taken out.
///
/// # Errors
/// A message when the database to take out is in neither the layout in force nor a
/// change under way.
pub fn target(
    change: &LayoutChange,
    layouts: &[Layout],
    before: &Layout,
    order: &[String],
) -> Result<(Vec<String>, Vec<String>), String> {
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
                return Err(format!(
                    "database \"{name}\" is not in the layout (epoch {}: {}); nothing changed",
                    from.epoch,
                    from.describe()
                ));
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
/// A message saying what is refused: an empty layout, a database declared lost before,
/// a lost one that the layout does not name, or classes that cannot be allocated.
pub fn plan(
    layouts: &[Layout],
    before: &Layout,
    target: &[String],
    lost: &[String],
) -> Result<Plan, String> {
    if target.is_empty() {
        return Err("a layout needs at least one database; nothing changed".into());
    }
    let (done, pending) = current(layouts);
    if done.is_none() && pending.is_none() {
        // The first change starts from the configured classes: every database must be
        // configured, and then their classes cover every ID (database i of n: i mod n).
        if let Some(id) = uncovered(before.members.iter().map(|m| m.class)) {
            return Err(format!(
                "the configured classes ({}) give IDs like {id} to no database: a database is missing from this configuration, and it would keep issuing from its class; configure every database; nothing changed",
                before.describe()
            ));
        }
    }
    let from = done.unwrap_or(before).clone();
    let newest = layouts.last().unwrap_or(&from);
    for name in target {
        if newest.is_lost(name) {
            return Err(format!(
                "database \"{name}\" was declared lost (layout epoch {}): it may hold rows no change can reach; give a new database another name; nothing changed",
                newest.epoch
            ));
        }
    }
    let mut gone = newest.lost.clone();
    for name in lost {
        let named =
            from.class_of(name).is_some() || pending.is_some_and(|p| p.class_of(name).is_some());
        if !named {
            return Err(format!(
                "database \"{name}\" is not in the layout (epoch {}: {}); nothing changed",
                from.epoch,
                from.describe()
            ));
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
    let to = match kept {
        Some(members) => Layout {
            epoch,
            members,
            state: LayoutState::Moving,
            lost: gone,
        },
        None => Layout::allocate(epoch, target, gone, LayoutState::Moving)?,
    };
    Ok(Plan::Change {
        from,
        to,
        supersede: pending.cloned(),
        finishing: false,
    })
}

/// An ID that none of `classes` holds, if any (checked over one period, the least
/// common multiple of their moduli, up to [`MAX_MODULUS`]).
pub fn uncovered(classes: impl Iterator<Item = Residue> + Clone) -> Option<i64> {
    let m = classes.clone().try_fold(1i64, |m, c| {
        (m / gcd(m, c.delta()))
            .checked_mul(c.delta())
            .filter(|&m| m <= MAX_MODULUS)
    })?;
    (0..m).find(|&id| !classes.clone().any(|c| c.contains(id)))
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

/// Whether a server may use a database under the layouts it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Its layout rows disagree with another database's (an epoch with other members):
    /// neither is trusted, and neither is used.
    Disagrees,
    /// Its layout is the newest read: it serves its class (if it is a member).
    Current,
    /// Its newest layout epoch (`None`: it has none while others do) is below
    /// `newest`, another database's: a change it missed may have moved its classes to
    /// others, so its rows and leases are not used until it catches up.
    Behind { own: Option<i64>, newest: i64 },
    /// Declared lost at `epoch`: never used again.
    Lost { epoch: i64 },
}

impl Standing {
    pub fn as_str(&self) -> &'static str {
        match self {
            Standing::Current => "current",
            Standing::Disagrees => "disagrees",
            Standing::Behind { .. } => "behind",
            Standing::Lost { .. } => "lost",
        }
    }
}

/// What a server makes of the layout rows it read: the layouts merged (with those
/// `known` from earlier reads) and the standing of each database read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    pub layouts: Vec<Layout>,
    /// Per database of the read, in its order.
    pub standing: Vec<Standing>,
}

/// Merges the layout rows read from each database (`(name, rows)`) with the layouts
/// `known` before. A database whose rows disagree with what is known, or with another
/// database's, is left out of the merge (both sides of a disagreement are).
///
/// # Errors
/// A message when even the layouts known before cannot be read back (a malformed row).
pub fn read(known: &[Layout], per_db: &[(String, Vec<LayoutRow>)]) -> Result<Reading, String> {
    let known_rows: Vec<LayoutRow> = known.iter().map(|l| l.row(0)).collect();
    let fits = |rows: &[&[LayoutRow]]| {
        let all: Vec<LayoutRow> = rows.iter().flat_map(|r| r.iter().cloned()).collect();
        merge(&all).is_ok()
    };
    let mut out: Vec<bool> = per_db
        .iter()
        .map(|(_, rows)| !fits(&[&known_rows, rows]))
        .collect();
    for a in 0..per_db.len() {
        for b in a + 1..per_db.len() {
            if !out[a] && !out[b] && !fits(&[&per_db[a].1, &per_db[b].1]) {
                out[a] = true;
                out[b] = true;
            }
        }
    }
    let rows: Vec<LayoutRow> = known_rows
        .into_iter()
        .chain(
            per_db
                .iter()
                .zip(&out)
                .filter(|(_, out)| !**out)
                .flat_map(|((_, rows), _)| rows.iter().cloned()),
        )
        .collect();
    let layouts = merge(&rows)?;
    let standing = per_db
        .iter()
        .zip(&out)
        .map(|((name, rows), out)| {
            if *out {
                Standing::Disagrees
            } else {
                standing(name, rows.iter().map(|r| r.epoch).max(), &layouts)
            }
        })
        .collect();
    Ok(Reading { layouts, standing })
}

/// Whether a biz's rows already follow `wanted` (per database, its class in the
/// target layout narrowed to the biz's restriction; `None` for a database out of it):
/// every member's row unfrozen in its class at `epoch`, every other row frozen or
/// absent.
pub fn settled(
    rows: &[Option<&crate::rows::BizRow>],
    wanted: &[Option<Residue>],
    epoch: i64,
) -> bool {
    rows.iter()
        .zip(wanted)
        .all(|(row, want)| match (want, row) {
            (Some(class), Some(r)) => {
                !r.frozen
                    && r.epoch == epoch
                    && (r.delta, r.remainder) == (class.delta(), class.remainder())
            }
            (Some(_), None) => false,
            (None, r) => r.is_none_or(|r| r.frozen),
        })
}

/// The standing of database `name`, whose own newest layout epoch is `own`, among
/// `layouts` merged from every database read (whose newest epoch is the newest any
/// database has).
pub fn standing(name: &str, own: Option<i64>, layouts: &[Layout]) -> Standing {
    if let Some(l) = layouts.iter().find(|l| l.is_lost(name)) {
        return Standing::Lost { epoch: l.epoch };
    }
    match layouts.last() {
        Some(newest) if own.is_none_or(|e| e < newest.epoch) => Standing::Behind {
            own,
            newest: newest.epoch,
        },
        _ => Standing::Current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(d: i64, r: i64) -> Residue {
        Residue::new(d, r).unwrap()
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn spread_classes_partition_every_id() {
        let l = Layout::spread(3, &names(&["a", "b", "c"]), LayoutState::Done).unwrap();
        for id in 0..100 {
            let owners = l.members.iter().filter(|m| m.class.contains(id)).count();
            assert_eq!(owners, 1, "{id}");
        }
        assert_eq!(l.class_of("b"), Some(class(3, 1)));
        assert_eq!(l.class_of("z"), None);
        assert_eq!(l.owner_of(5), Some("c"));
    }

    #[test]
    fn rows_round_trip_and_malformed_rows_are_named() {
        let l = Layout::spread(2, &names(&["a", "b-2"]), LayoutState::Moving).unwrap();
        let row = l.row(1234);
        assert_eq!(row.members, "a=2:0,b-2=2:1");
        assert_eq!(Layout::parse(&row).unwrap(), l);
        for members in ["a=2", "a=2:2", "a", "a=x:0"] {
            let bad = LayoutRow {
                members: members.into(),
                ..row.clone()
            };
            let e = Layout::parse(&bad).unwrap_err();
            assert!(e.contains("epoch 2") && e.contains("malformed"), "{e}");
        }
        let bad = LayoutRow {
            state: "half".into(),
            ..row
        };
        assert!(Layout::parse(&bad).unwrap_err().contains("half"));
    }

    #[test]
    fn merge_keeps_the_furthest_state_and_refuses_disagreement() {
        let one = Layout::spread(1, &names(&["a"]), LayoutState::Done).unwrap();
        let two = Layout::spread(2, &names(&["a", "b"]), LayoutState::Moving).unwrap();
        let two_done = Layout {
            state: LayoutState::Done,
            ..two.clone()
        };
        let rows = [one.row(1), two.row(2), two_done.row(3), one.row(1)];
        let merged = merge(&rows).unwrap();
        assert_eq!(merged, vec![one.clone(), two_done.clone()]);
        assert_eq!(current(&merged), (Some(&two_done), None));
        let merged = merge(&[one.row(1), two.row(2)]).unwrap();
        assert_eq!(current(&merged), (Some(&one), Some(&two)));
        let other = Layout::spread(2, &names(&["a", "c"]), LayoutState::Done).unwrap();
        let e = merge(&[two.row(2), other.row(3)]).unwrap_err();
        assert!(e.contains("epoch 2 differs"), "{e}");
        assert_eq!(current(&[]), (None, None));
    }

    fn lay(epoch: i64, members: &[(&str, i64, i64)], state: LayoutState) -> Layout {
        Layout {
            epoch,
            members: members
                .iter()
                .map(|&(n, d, r)| Member {
                    name: n.into(),
                    class: class(d, r),
                })
                .collect(),
            state,
            lost: Vec::new(),
        }
    }

    #[test]
    fn lost_members_round_trip_and_are_never_reused() {
        let lost = vec![Member {
            name: "b".into(),
            class: class(2, 1),
        }];
        let l =
            Layout::allocate(3, &names(&["a", "c"]), lost.clone(), LayoutState::Moving).unwrap();
        assert_eq!(l.row(1).members, "a=4:0,c=4:2,!b=2:1");
        assert_eq!(Layout::parse(&l.row(1)).unwrap(), l);
        assert!(l.is_lost("b") && !l.is_lost("a"));
        for id in 0..64 {
            let owners = l.members.iter().filter(|m| m.class.contains(id)).count();
            assert_eq!(owners, usize::from(id % 2 == 0), "{id}");
        }
        // Worker IDs of the lost class have no owner.
        assert_eq!(l.owner_of(3), None);
        assert_eq!(l.owner_of(2), Some("c"));
        // Two lost classes: 1 mod 2 and 0 mod 3 leave 2 and 4 mod 6.
        let more = vec![
            lost[0].clone(),
            Member {
                name: "d".into(),
                class: class(3, 0),
            },
        ];
        let l = Layout::allocate(4, &names(&["a"]), more, LayoutState::Moving).unwrap();
        assert_eq!(l.class_of("a"), Some(class(6, 2)));
        let all = vec![
            Member {
                name: "x".into(),
                class: class(2, 0),
            },
            lost[0].clone(),
        ];
        assert!(Layout::allocate(5, &names(&["a"]), all, LayoutState::Moving).is_err());
    }

    #[test]
    fn a_first_change_needs_every_configured_class() {
        let half = lay(0, &[("a", 2, 0)], LayoutState::Done);
        let e = plan(&[], &half, &names(&["a", "c"]), &[]).unwrap_err();
        assert!(e.contains("like 1") && e.contains("missing"), "{e}");
        assert_eq!(uncovered([class(2, 0), class(2, 1)].into_iter()), None);
        assert_eq!(uncovered([class(3, 0), class(3, 2)].into_iter()), Some(1));
    }

    #[test]
    fn overlap_is_a_shared_id() {
        for (a, b) in [((2, 0), (3, 0)), ((4, 1), (6, 3)), ((1, 0), (5, 4))] {
            assert!(overlap(class(a.0, a.1), class(b.0, b.1)), "{a:?} {b:?}");
        }
        for (a, b) in [((2, 0), (2, 1)), ((4, 1), (6, 0)), ((4, 0), (4, 2))] {
            assert!(!overlap(class(a.0, a.1), class(b.0, b.1)), "{a:?} {b:?}");
        }
    }

    #[test]
    fn plan_adds_finishes_supersedes_and_declares_lost() {
        let before = lay(0, &[("a", 1, 0)], LayoutState::Done);
        // Nothing stored: a first change from the configured classes.
        let Plan::Change {
            from,
            to,
            supersede,
            finishing,
        } = plan(&[], &before, &names(&["a", "b"]), &[]).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (from.epoch, to.epoch, supersede, finishing),
            (0, 1, None, false)
        );
        assert_eq!(to.describe(), "a (0 mod 2), b (1 mod 2)");
        let one = lay(1, &[("a", 2, 0), ("b", 2, 1)], LayoutState::Done);
        let stored = [before.clone(), one.clone()];
        assert_eq!(
            plan(&stored, &before, &names(&["a", "b"]), &[]).unwrap(),
            Plan::Already(one.clone())
        );
        // A change under way with the same databases is finished; with others, superseded.
        let two = lay(2, &[("a", 1, 0)], LayoutState::Moving);
        let stored = [before.clone(), one.clone(), two.clone()];
        let Plan::Change { to, finishing, .. } =
            plan(&stored, &before, &names(&["a"]), &[]).unwrap()
        else {
            panic!()
        };
        assert!(finishing && to == two);
        let Plan::Change {
            to,
            supersede,
            finishing,
            ..
        } = plan(&stored, &before, &names(&["a", "b"]), &[]).unwrap()
        else {
            panic!()
        };
        assert!(!finishing && supersede == Some(two.clone()) && to.epoch == 3);
        // Lost: the others keep their classes; every class the lost one held is kept out.
        let Plan::Change { to, .. } =
            plan(&stored[..2], &before, &names(&["a"]), &names(&["b"])).unwrap()
        else {
            panic!()
        };
        assert_eq!(to.describe(), "a (0 mod 2)");
        assert_eq!(to.lost_names(), names(&["b"]));
        assert_eq!(to.row(0).members, "a=2:0,!b=2:1");
        // A lost database never comes back under its name; one not in the layout is
        // not lost.
        let after = [
            before.clone(),
            one.clone(),
            Layout {
                state: LayoutState::Done,
                ..to
            },
        ];
        let e = plan(&after, &before, &names(&["a", "b"]), &[]).unwrap_err();
        assert!(e.contains("declared lost"), "{e}");
        let e = plan(&stored[..2], &before, &names(&["a"]), &names(&["z"])).unwrap_err();
        assert!(e.contains("not in the layout"), "{e}");
        // Growing after a loss avoids the lost class.
        let Plan::Change { to, .. } = plan(&after, &before, &names(&["a", "c"]), &[]).unwrap()
        else {
            panic!()
        };
        assert_eq!(to.describe(), "a (0 mod 4), c (2 mod 4)");
        assert_eq!(to.lost_names(), names(&["b"]));
    }

    #[test]
    fn a_command_targets_the_layout_in_force_with_one_database_more_or_less() {
        let before = lay(0, &[("a", 1, 0)], LayoutState::Done);
        let order = names(&["a", "b", "c"]);
        let one = lay(1, &[("b", 2, 0), ("a", 2, 1)], LayoutState::Done);
        let stored = [before.clone(), one];
        let add = LayoutChange::Add("c".into());
        assert_eq!(
            target(&add, &stored, &before, &order).unwrap(),
            (names(&["a", "b", "c"]), vec![])
        );
        // Added by URL, not configured: last.
        let add = LayoutChange::Add("z".into());
        assert_eq!(
            target(&add, &stored, &before, &order).unwrap().0,
            names(&["z", "a", "b"])
        );
        let lost = LayoutChange::Lost("b".into());
        assert_eq!(
            target(&lost, &stored, &before, &order).unwrap(),
            (names(&["a"]), names(&["b"]))
        );
        let e = target(&LayoutChange::Remove("c".into()), &stored, &before, &order).unwrap_err();
        assert!(e.contains("not in the layout"), "{e}");
        // Before any change: the configured classes.
        assert_eq!(
            target(&LayoutChange::Add("b".into()), &[], &before, &order)
                .unwrap()
                .0,
            names(&["a", "b"])
        );
    }

    #[test]
    fn required_names_every_database_that_may_hold_live_rows() {
        let before = lay(0, &[("a", 1, 0)], LayoutState::Done);
        // Before any layout: the configured ones, and any a witness names.
        assert_eq!(
            required(&[], &before, &names(&["z"]), &[]),
            names(&["a", "z"])
        );
        let one = lay(1, &[("a", 2, 0), ("b", 2, 1)], LayoutState::Done);
        let stored = [before.clone(), one.clone()];
        // A configuration naming only `a` still needs `b`.
        assert_eq!(
            required(&stored, &before, &names(&["a", "b"]), &[]),
            names(&["a", "b"])
        );
        assert_eq!(
            required(&stored, &before, &[], &names(&["b"])),
            names(&["a"])
        );
        // A change above the layout in force adds its members; a removed database is
        // no longer needed once the removal is done.
        let two = lay(
            2,
            &[("a", 3, 0), ("b", 3, 1), ("c", 3, 2)],
            LayoutState::Moving,
        );
        let with = [before.clone(), one.clone(), two.clone()];
        assert_eq!(required(&with, &before, &[], &[]), names(&["a", "b", "c"]));
        let three = lay(3, &[("a", 1, 0)], LayoutState::Done);
        let removed = [
            before.clone(),
            one,
            Layout {
                state: LayoutState::Superseded,
                ..two
            },
            three,
        ];
        assert_eq!(
            required(&removed, &before, &names(&["b", "c"]), &[]),
            names(&["a"])
        );
    }

    #[test]
    fn claims_start_on_the_newest_layouts_members() {
        let prev = lay(1, &[("q0", 1, 0)], LayoutState::Done);
        assert_eq!(
            claim_order(&prev, &names(&["q1", "q0"])),
            names(&["q0", "q1"])
        );
        assert_eq!(
            claim_order(&prev, &names(&["a-new", "q0"])),
            names(&["q0", "a-new"])
        );
        let prev = lay(2, &[("b", 2, 0), ("a", 2, 1)], LayoutState::Moving);
        assert_eq!(
            claim_order(&prev, &names(&["c", "b", "a"])),
            names(&["a", "b", "c"])
        );
    }

    #[test]
    fn worker_ids_follow_a_layout_done_or_a_confirmed_static_cluster() {
        let zero = lay(0, &[("a", 1, 0)], LayoutState::Done);
        let moving = lay(1, &[("a", 2, 0), ("b", 2, 1)], LayoutState::Moving);
        assert!(leases_allowed(&[zero.clone(), moving.clone()], false));
        assert!(!leases_allowed(std::slice::from_ref(&moving), true));
        assert!(!leases_allowed(&[], false));
        assert!(leases_allowed(&[], true));
    }

    #[test]
    fn fence_is_the_highest_max_id_and_version() {
        assert_eq!(fence([(5, 2), (9, 1), (7, 8)]), (9, 8));
        assert_eq!(fence([]), (0, 0));
    }

    #[test]
    fn a_database_behind_lost_or_disagreeing_is_not_current() {
        let one = lay(1, &[("a", 2, 0), ("b", 2, 1)], LayoutState::Done);
        let two = lay(2, &[("a", 1, 0)], LayoutState::Done);
        let r = read(
            &[],
            &[
                ("a".into(), vec![one.row(1), two.row(2)]),
                ("b".into(), vec![one.row(1)]),
            ],
        )
        .unwrap();
        assert_eq!(
            r.standing,
            vec![
                Standing::Current,
                Standing::Behind {
                    own: Some(1),
                    newest: 2
                }
            ]
        );
        assert_eq!(current(&r.layouts).0, Some(&two));
        // Known from an earlier read: a database read alone is still behind.
        let r = read(&r.layouts, &[("b".into(), vec![one.row(1)])]).unwrap();
        assert_eq!(
            r.standing,
            vec![Standing::Behind {
                own: Some(1),
                newest: 2
            }]
        );
        // Lost.
        let lost = Layout {
            lost: vec![Member {
                name: "b".into(),
                class: class(2, 1),
            }],
            ..lay(2, &[("a", 2, 0)], LayoutState::Done)
        };
        let r = read(
            &[],
            &[
                ("a".into(), vec![one.row(1), lost.row(2)]),
                ("b".into(), vec![one.row(1)]),
            ],
        )
        .unwrap();
        assert_eq!(r.standing[1], Standing::Lost { epoch: 2 });
        // Two claims of one epoch with other members: neither database is used.
        let q1 = lay(2, &[("q0", 2, 0), ("q1", 2, 1)], LayoutState::Moving);
        let q2 = lay(2, &[("q0", 2, 0), ("q2", 2, 1)], LayoutState::Moving);
        let r = read(
            &[],
            &[
                ("q1".into(), vec![q1.row(1)]),
                ("q2".into(), vec![q2.row(1)]),
            ],
        )
        .unwrap();
        assert_eq!(r.standing, vec![Standing::Disagrees, Standing::Disagrees]);
        // Nothing stored anywhere: every database is current.
        let r = read(&[], &[("a".into(), vec![]), ("b".into(), vec![])]).unwrap();
        assert!(r.standing.iter().all(|s| *s == Standing::Current));
    }

    #[test]
    fn restriction_inverts_restrict() {
        for d in 1..7 {
            for r in 0..d {
                let db = class(d, r);
                for m in 1..5 {
                    for p in 0..m {
                        let within = class(m, p);
                        let row = db.restrict(within).unwrap();
                        assert_eq!(restriction(row, db), Some(within), "{db} {within}");
                    }
                }
            }
        }
        // Not a restriction of the database's class.
        assert_eq!(restriction(class(3, 0), class(2, 0)), None);
        assert_eq!(restriction(class(4, 1), class(2, 1)), None);
    }
}

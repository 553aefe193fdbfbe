//! The model's state (databases, commands, servers, what was issued), its actions, and
//! the properties checked. The rows and primitives here are the store's statements
//! (compare-and-set, insert if absent, put a layout row only while it is `moving`);
//! the decisions are the project's own pure functions, called from [`crate::command`],
//! [`crate::mover`] and [`crate::server`].

use std::sync::Arc;

use segmint_core::db_fence;
use segmint_core::layout::{Layout, LayoutState, Member};
use segmint_core::segment::Residue;
use segmint_store::{BizRow, LayoutRow, Mark, Reclass};
use stateright::{Model, Property};

use crate::command::{Cmd, Phase};
use crate::import::Imp;
use crate::server::Server;

/// A database, by its index in [`Spec::names`].
pub type Db = usize;

/// Which of the protocol's safeguards are on. Each test of a known bug switches one
/// off and expects the checker to find a counterexample; with all on it must find none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fixes {
    /// A change needs every database [`segmint_core::layout::required`] names (else only its
    /// target databases).
    pub required: bool,
    /// A change claims its epoch by insert-if-absent in `claim_order` (else it puts
    /// the row, as a read-then-write would, and carries on whatever it finds).
    pub claim: bool,
    /// A change stops when a row was written by a later change (`claimed_by`).
    pub claimed_by_stamp: bool,
    /// Servers use only databases whose layout standing is `Current`.
    pub standing: bool,
    /// `db remove --lost` retires the lost database's classes (else it is a plain
    /// removal that does not need the lost database to answer).
    pub retire_lost: bool,
    /// Lease writes of a change are made only while its epoch is `moving` there.
    pub lease_fence: bool,
    /// A move reads the biz's witnesses again once every row is frozen, and stops on a
    /// row behind them or behind what it saw itself (else it fences with the witnesses
    /// read when the command started).
    pub fresh_witnesses: bool,
    /// Servers use databases and lease worker IDs only under a layout done read from
    /// the databases, the membership `segmint migrate` records (else from their
    /// configured classes whenever no layout is done).
    pub membership: bool,
    /// `db fence` raises a row frozen while a change is pending, or when its epoch is
    /// below the layout in force (else it raises it live, as it was).
    pub fence_freezes: bool,
    /// A biz row is created only where no layout above its epoch is stored, checked in
    /// the insert's transaction (else wherever the command's first read allowed it).
    pub insert_fence: bool,
    /// A look at the biz before a server's first catalog read (`Store::look_up`)
    /// learns the biz's witnesses from the databases it reads (else only their rows).
    pub look_witnesses: bool,
    /// A reservation within a period's window starts above the row (at the window's
    /// floor only when the row is below it: `Window::range`); else a server's first
    /// reservation of a period starts the row again at the floor, as a counter reset
    /// at midnight would.
    pub window_above_row: bool,
    /// A server begins a period only once a database's clock has reached it
    /// (`clocks::may_begin`); else its own clock alone decides.
    pub period_begun: bool,
    /// A lease holder reads the other configured members' lease rows at each take and
    /// renewal and gives up a worker ID held live on one of them
    /// (`lease::held_elsewhere`); else only its own database's.
    pub elsewhere: bool,
}

impl Fixes {
    pub const ALL: Fixes = Fixes {
        required: true,
        claim: true,
        claimed_by_stamp: true,
        standing: true,
        retire_lost: true,
        lease_fence: true,
        fresh_witnesses: true,
        membership: true,
        fence_freezes: true,
        insert_fence: true,
        look_witnesses: true,
        window_above_row: true,
        period_begun: true,
        elsewhere: true,
    };
}

/// A `segmint db add/remove` run: its own configuration and what it asks for.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// The databases its configuration names.
    pub config: Vec<Db>,
    /// Its configured classes: the layout before any change (epoch 0).
    pub before: Vec<(Db, Residue)>,
    /// The layout it moves to (as `main.rs` derives it from the layout in force).
    pub target: Vec<Db>,
    /// `db remove NAME --lost`.
    pub lost: Vec<Db>,
}

/// A `segmint serve` process and its configuration.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub config: Vec<Db>,
    /// Its configured class of each database of `config`, in that order.
    pub classes: Vec<Residue>,
    /// Whether it reserves segments of the biz.
    pub reserves: bool,
    /// Whether it leases a snowflake worker ID.
    pub leases: bool,
    /// Whether it finishes the bizs of a change cut off (`Store::heal`).
    pub heals: bool,
}

/// Everything fixed in one checked model.
#[derive(Debug, Clone)]
pub struct Spec {
    pub title: &'static str,
    pub names: Vec<String>,
    /// The biz's step: a reservation moves `max_id` by this much.
    pub step: i64,
    /// Reservations allowed in all (keeps the state space finite).
    pub reservations: u8,
    /// Worker IDs `0..workers` are modelled (0: no leases).
    pub workers: u16,
    pub commands: Vec<CommandSpec>,
    pub servers: Vec<ServerSpec>,
    /// Servers write witnesses and fence a database found behind their evidence.
    pub witnesses: bool,
    /// Servers that heal finish the bizs of a pending change (`Store::heal`) at most
    /// this many times each.
    pub heals: u8,
    /// Rounds of one biz's move before it gives up (`MOVE_ATTEMPTS`).
    pub attempts: u8,
    pub fixes: Fixes,
    /// Rows restored from a backup (a fault) allowed.
    pub restores: u8,
    /// A restore brings back the whole database (its layout, witness and lease rows
    /// too), not the biz's row alone.
    pub whole_restores: bool,
    /// The windows of a biz whose counter restarts each period, in order (empty: the
    /// biz never restarts): servers reserve in the window of the period their clock is
    /// in, and each server's clock reaches the next period at any moment.
    pub windows: Vec<segmint_core::segment::Window>,
    /// `db fence` runs allowed, each after a restore.
    pub fences: u8,
    /// `segmint import` of the biz (while it has no row), configured with these
    /// databases.
    pub import: Option<Vec<Db>>,
    /// Servers act only once every command ended: not a fault model, a narrower
    /// search for tests that only need to find a known bug fast.
    pub servers_after_commands: bool,
    /// Before its first catalog read, a server serves from looks at the biz alone
    /// (`Store::look_up`): [`Action::Look`].
    pub looks: bool,
    /// Commands may pause and wake up: a change is finished, superseded or healed at
    /// once, its command still able to carry on (else only once its command crashed).
    pub paused: bool,
    /// Commands crash explicitly ([`Action::Crash`]), so that a second command or a
    /// server can take over their change (without it, a command that stops being
    /// scheduled has crashed too, but nobody takes over while it "runs").
    pub crashes: bool,
    /// The highest layout epoch stored at the start: "a change is done" means a layout
    /// above it is done somewhere.
    pub init_epoch: i64,
    /// Whether some change must be able to complete (checked as a `sometimes`
    /// property, so that a model that can do nothing does not pass by accident).
    pub expect_change: bool,
}

/// How far a layout's change got (`LayoutState`, hashable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum St {
    Moving,
    Done,
    Superseded,
}

/// A layout with databases by index: what a `segmint_layout` row holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lay {
    pub epoch: i64,
    /// Shared: states are cloned at every step, layouts rarely change.
    pub members: Arc<[(Db, Residue)]>,
    pub lost: Arc<[(Db, Residue)]>,
    pub state: St,
}

impl Lay {
    pub fn of(l: &Layout, names: &[String]) -> Lay {
        let index = |m: &Member| {
            (
                names
                    .iter()
                    .position(|n| *n == m.name)
                    .expect("a modelled database"),
                m.class,
            )
        };
        Lay {
            epoch: l.epoch,
            members: l.members.iter().map(index).collect(),
            lost: l.lost.iter().map(index).collect(),
            state: match l.state {
                LayoutState::Moving => St::Moving,
                LayoutState::Done => St::Done,
                LayoutState::Superseded => St::Superseded,
            },
        }
    }

    pub fn layout(&self, names: &[String]) -> Layout {
        let member = |&(d, class): &(Db, Residue)| Member {
            name: names[d].clone(),
            class,
        };
        Layout {
            epoch: self.epoch,
            members: self.members.iter().map(member).collect(),
            lost: self.lost.iter().map(member).collect(),
            state: match self.state {
                St::Moving => LayoutState::Moving,
                St::Done => LayoutState::Done,
                St::Superseded => LayoutState::Superseded,
            },
        }
    }

    pub fn row(&self, names: &[String]) -> LayoutRow {
        self.layout(names).row(1)
    }

    pub fn class_of(&self, d: Db) -> Option<Residue> {
        self.members.iter().find(|m| m.0 == d).map(|m| m.1)
    }
}

/// The biz's `tiny_id_info` row on one database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Row {
    pub version: i64,
    pub max_id: i64,
    pub class: Residue,
    pub epoch: i64,
    pub frozen: bool,
    pub claimed_by: i64,
}

impl Row {
    pub fn new(max_id: i64, class: Residue, epoch: i64) -> Row {
        Row {
            version: 1,
            max_id,
            class,
            epoch,
            frozen: false,
            claimed_by: 0,
        }
    }

    pub fn biz_row(&self, step: i64) -> BizRow {
        BizRow {
            biz_type: "biz".into(),
            begin_id: 0,
            max_id: self.max_id,
            step,
            delta: self.class.delta(),
            remainder: self.class.remainder(),
            version: self.version,
            description: Box::default(),
            epoch: self.epoch,
            frozen: self.frozen,
            claimed_by: self.claimed_by,
        }
    }

    /// The row as a change's compare-and-set leaves it.
    pub fn reclassed(r: &Reclass) -> Row {
        Row {
            version: r.version,
            max_id: r.max_id,
            class: Residue::new(r.delta, r.remainder).expect("a valid class"),
            epoch: r.epoch,
            frozen: r.frozen,
            claimed_by: r.claimed_by,
        }
    }

    /// The fields a layout change reads.
    pub fn reclass(&self) -> Reclass {
        Reclass {
            version: self.version,
            max_id: self.max_id,
            delta: self.class.delta(),
            remainder: self.class.remainder(),
            epoch: self.epoch,
            frozen: self.frozen,
            claimed_by: self.claimed_by,
        }
    }

    pub fn mark(&self) -> Mark {
        Mark::of(&self.biz_row(0))
    }
}

/// A `Mark` (version, max_id, high_id), hashable.
pub type MarkT = (i64, i64, i64);

pub fn to_mark(m: MarkT) -> Mark {
    Mark {
        version: m.0,
        max_id: m.1,
        high_id: m.2,
    }
}

pub fn of_mark(m: Mark) -> MarkT {
    (m.version, m.max_id, m.high_id)
}

/// Joins `m` into what is known (`Mark::join`).
pub fn learn(known: &mut Option<MarkT>, m: Mark) {
    *known = Some(of_mark(match known {
        Some(k) => to_mark(*k).join(m),
        None => m,
    }));
}

/// Who holds a worker ID's lease row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Holder {
    /// No row, or one free (released, expired at once by a change).
    Free,
    Server(usize),
    /// `segmint-layout`: blocked by a change on a database the worker ID left.
    Moved,
}

/// A worker ID's lease row. Its version is left out: a holder's renewal (a
/// compare-and-set on holder and version) fails exactly when another writer took or
/// blocked the row since, which the holder tells here, as a holder whose lease ran out
/// has stopped (see [`Action::Expire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseRow {
    pub holder: Holder,
    /// The lease ran out (by the database's clock, grace included).
    pub expired: bool,
}

impl LeaseRow {
    pub const FREE: LeaseRow = LeaseRow {
        holder: Holder::Free,
        expired: true,
    };

    pub fn takeable(&self) -> bool {
        match self.holder {
            Holder::Free => true,
            Holder::Server(_) => self.expired,
            Holder::Moved => false,
        }
    }

    /// Worker ID `w`'s row as the store reads it: the model keeps no times, a row free
    /// to take reads as run out.
    pub fn read(&self, w: usize) -> segmint_core::rows::LeaseRow {
        segmint_core::rows::LeaseRow {
            worker_id: u16::try_from(w).expect("a worker ID"),
            holder: match self.holder {
                Holder::Free => String::new(),
                Holder::Moved => segmint_core::rows::MOVED_HOLDER.to_owned(),
                Holder::Server(s) => holder_name(s),
            },
            version: 0,
            expires_ms: if self.takeable() { -1 } else { 1 },
            last_ms: 0,
            bound_ms: 0,
            db_now_ms: 0,
        }
    }
}

/// Server `s`'s holder name in lease rows.
pub fn holder_name(s: usize) -> String {
    format!("server {s}")
}

/// One database.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DbState {
    /// The biz's row.
    pub row: Option<Row>,
    /// `segmint_layout`, by epoch.
    pub layouts: Vec<Lay>,
    /// Witness rows: the mark recorded here of the row of each database.
    pub witness: Vec<Option<MarkT>>,
    /// Lease rows of worker IDs `0..workers`.
    pub leases: Vec<LeaseRow>,
    /// A backup taken earlier, to be restored (a fault): the row, and with
    /// [`Spec::whole_restores`] the other tables.
    pub backup: Option<Box<Backup>>,
}

/// The tables of a backup besides the biz's row: layouts, witnesses, leases.
pub type Tables = (Vec<Lay>, Vec<Option<MarkT>>, Vec<LeaseRow>);

/// What a backup holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Backup {
    pub row: Option<Row>,
    pub tables: Option<Tables>,
}

impl DbState {
    pub fn new(n: usize, workers: u16, row: Option<Row>, layouts: Vec<Lay>) -> DbState {
        DbState {
            row,
            layouts,
            witness: vec![None; n],
            leases: vec![LeaseRow::FREE; usize::from(workers)],
            backup: None,
        }
    }

    /// Compare-and-set on `(version, max_id)`.
    pub fn cas(&mut self, version: i64, max_id: i64, to: Row) -> Option<Row> {
        match &mut self.row {
            Some(r) if r.version == version && r.max_id == max_id => {
                *r = to;
                Some(to)
            }
            _ => None,
        }
    }

    /// `put_layout`: replaces the epoch's row only while it is `moving`.
    pub fn put_layout(&mut self, l: &Lay) -> bool {
        match self.layouts.iter_mut().find(|x| x.epoch == l.epoch) {
            Some(x) if x.state == St::Moving => {
                *x = l.clone();
                true
            }
            Some(_) => false,
            None => {
                self.insert_layout(l);
                true
            }
        }
    }

    /// `claim_layout`: inserts the epoch's row if it has none.
    pub fn claim_layout(&mut self, l: &Lay) -> bool {
        if self.layouts.iter().any(|x| x.epoch == l.epoch) {
            return false;
        }
        self.insert_layout(l);
        true
    }

    fn insert_layout(&mut self, l: &Lay) {
        let at = self.layouts.partition_point(|x| x.epoch < l.epoch);
        self.layouts.insert(at, l.clone());
    }

    pub fn moving(&self, epoch: i64) -> bool {
        self.layouts
            .iter()
            .any(|l| l.epoch == epoch && l.state == St::Moving)
    }

    pub fn layout_rows(&self, names: &[String]) -> Vec<LayoutRow> {
        self.layouts.iter().map(|l| l.row(names)).collect()
    }
}

/// The whole system at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub dbs: Vec<DbState>,
    pub cmds: Vec<Cmd>,
    pub servers: Vec<Server>,
    /// Every ID issued so far (bit `x` for ID `x`).
    pub issued: u64,
    /// The first ID issued twice.
    pub dup: Option<i64>,
    /// Whether an ID was issued from a row of a layout above the initial one.
    pub fresh: bool,
    /// Reservations left.
    pub reservations: u8,
    /// Restores from backup left.
    pub restores: u8,
    /// `db fence` runs left.
    pub fences: u8,
    /// The import command, if the scenario runs one.
    pub import: Imp,
    /// The period the databases' clock is in (an index of `Spec::windows`).
    pub dawn: u8,
    /// Whether an ID was issued in a period the databases' clock had not begun.
    pub early: bool,
}

impl State {
    pub fn issue(&mut self, id: i64) {
        let bit = 1u64 << id;
        if self.issued & bit != 0 && self.dup.is_none() {
            self.dup = Some(id);
        }
        self.issued |= bit;
    }

    /// A database holding a live row of an epoch below its own layout done: no server
    /// serves from it (a row left in an earlier layout gives out nothing), and no
    /// change will move it (they list the bizs once).
    pub fn stranded(&self) -> Option<Db> {
        self.dbs.iter().position(|db| {
            let done = db
                .layouts
                .iter()
                .filter(|l| l.state == St::Done)
                .map(|l| l.epoch)
                .max();
            db.row
                .is_some_and(|r| !r.frozen && done.is_some_and(|e| r.epoch < e))
        })
    }

    /// Two servers issuing with one worker ID at once.
    pub fn two_holders(&self) -> Option<(usize, usize, u16)> {
        let active: Vec<(usize, u16)> = self
            .servers
            .iter()
            .enumerate()
            .filter_map(|(s, x)| x.lease.filter(|l| l.active).map(|l| (s, l.w)))
            .collect();
        active.iter().enumerate().find_map(|(i, &(a, w))| {
            active[i + 1..]
                .iter()
                .find(|&&(_, v)| v == w)
                .map(|&(b, _)| (a, b, w))
        })
    }
}

/// A set of positions in a configuration, a bit each: the databases that answer a read.
pub type Answer = u8;

/// The nonempty subsets of `n` databases.
pub fn answers(n: usize) -> impl Iterator<Item = Answer> {
    1..(1u8 << n)
}

/// The steps of the actors and the faults. A database that does not answer (down,
/// partitioned, too slow) is one that a read leaves out ([`Answer`]); a write to it
/// fails, which stops a command as a crash would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Command `c` reads the layouts of the databases of its configuration in `Answer`,
    /// and decides.
    Begin(usize, Answer),
    /// The next step of command `c`.
    Cmd(usize),
    /// Command `c` crashes (when commands cannot pause; else a command that is never
    /// scheduled again is one that crashed).
    Crash(usize),
    /// Server `s` re-reads its catalog (rows, layouts, witnesses) from the databases
    /// in the first `Answer`, may start healing, and writes the marks they lack into
    /// those of the second (a subset of the first; with witnesses, any subset: a
    /// server's first refresh writes none, a write may fail, a large backlog is written
    /// over several refreshes).
    Refresh(usize, Answer, Answer),
    /// Before its first catalog read, server `s` looks at the biz alone in the
    /// databases in `Answer` (`Store::look_up`): as a refresh reads it, but a look
    /// fences and never lifts a fence, writes no witness, heals nothing, and leaves
    /// the catalog unread; the server reserves from what it saw.
    Look(usize, Answer),
    /// The next step of server `s`'s heal.
    Heal(usize),
    /// Server `s` reserves a segment on the database at position `p` of its configuration.
    Reserve(usize, usize),
    /// Server `s`'s clock reaches the next period (ahead of the databases' clock, or
    /// behind it).
    Tick(usize),
    /// The databases' clock reaches the next period.
    Dawn,
    /// Server `s` takes worker ID `w` on the database at position `p`.
    Take(usize, usize, u16),
    /// Server `s`'s wait after taking its worker ID is over: it issues with it.
    Start(usize),
    /// Server `s` renews its lease.
    Renew(usize),
    /// The lease of worker ID `w` on database `d` runs out (its holder stopped).
    Expire(Db, u16),
    /// A backup of database `d`'s row is taken (to be restored later).
    Backup(Db),
    /// Database `d`'s row goes back to its backup (and every server reads every
    /// database again before it serves: the restore takes longer than a refresh).
    Restore(Db),
    /// `segmint db fence NAME` on database `d`, after a restore: its row raised above
    /// every witness of it on the other databases (`Store::raise_database`; its reads
    /// and its compare-and-set taken as one step).
    Fence(Db),
    /// The next step of the import command.
    Import,
}

/// One checked model: a [`Spec`] and its initial state.
pub struct Sys {
    pub spec: Spec,
    pub init: State,
}

impl Sys {
    pub fn names(&self) -> &[String] {
        &self.spec.names
    }

    /// `Store::raise_database` on database `d`: the core's plan for its row
    /// (`db_fence::plan_row`) from the witnesses of it on the other databases and the
    /// layouts read, carried out by compare-and-set.
    fn fence(&self, st: &mut State, d: Db) -> bool {
        let mut mark: Option<MarkT> = None;
        for (j, db) in st.dbs.iter().enumerate() {
            if let (true, Some(w)) = (j != d, db.witness[d]) {
                learn(&mut mark, to_mark(w));
            }
        }
        let Some(row) = st.dbs[d].row else {
            return false;
        };
        // `load_layout`, then `layouts`: a change under way, and the layout in force.
        let names = self.names();
        let per_db: Vec<_> = st
            .dbs
            .iter()
            .enumerate()
            .map(|(j, db)| (names[j].clone(), db.layout_rows(names)))
            .collect();
        let reading = segmint_core::layout::read(&[], &per_db).ok();
        let layouts = match reading.filter(|_| self.spec.fixes.fence_freezes) {
            Some(reading) => {
                let (done, change) = segmint_core::layout::current(&reading.layouts);
                db_fence::Layouts {
                    done: done.map(|l| l.epoch),
                    pending: change.map(|l| l.epoch),
                }
            }
            None => db_fence::Layouts {
                done: None,
                pending: None,
            },
        };
        let raised = match db_fence::plan_row(&row.biz_row(0), mark.map(to_mark), None, layouts) {
            db_fence::RowPlan::Keep | db_fence::RowPlan::NoVersionLeft => return false,
            db_fence::RowPlan::Raise { version, max_id } => Row {
                version,
                max_id,
                ..row
            },
            db_fence::RowPlan::RaiseFrozen(to) => Row {
                version: to.version,
                max_id: to.max_id,
                frozen: to.frozen,
                claimed_by: to.claimed_by,
                ..row
            },
        };
        st.dbs[d].cas(row.version, row.max_id, raised);
        st.fences -= 1;
        true
    }

    pub fn layouts(&self, lays: &[Lay]) -> Vec<Layout> {
        lays.iter().map(|l| l.layout(self.names())).collect()
    }

    pub fn lay(&self, l: &Layout) -> Lay {
        Lay::of(l, self.names())
    }

    pub fn name_list(&self, dbs: &[Db]) -> Vec<String> {
        dbs.iter().map(|&d| self.spec.names[d].clone()).collect()
    }

    pub fn index(&self, name: &str) -> Db {
        self.spec
            .names
            .iter()
            .position(|n| n == name)
            .expect("a modelled database")
    }
}

impl Model for Sys {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.init.clone()]
    }

    fn actions(&self, st: &State, actions: &mut Vec<Action>) {
        if usize::from(st.dawn) + 1 < self.spec.windows.len() {
            actions.push(Action::Dawn);
        }
        for (c, cmd) in st.cmds.iter().enumerate() {
            if cmd.phase == Phase::Start {
                for answer in answers(self.spec.commands[c].config.len()) {
                    actions.push(Action::Begin(c, answer));
                }
            } else if cmd.running() {
                actions.push(Action::Cmd(c));
                if self.spec.crashes && !self.spec.paused {
                    actions.push(Action::Crash(c));
                }
            }
        }
        let servers_wait = self.spec.servers_after_commands && st.cmds.iter().any(Cmd::running);
        for (s, server) in st.servers.iter().enumerate() {
            let spec = &self.spec.servers[s];
            if servers_wait {
                break;
            }
            if server.heal.is_some() {
                actions.push(Action::Heal(s));
            } else {
                for answer in answers(spec.config.len()) {
                    if self.spec.witnesses {
                        // Every subset of the databases read, the empty one included.
                        let mut write = answer;
                        loop {
                            actions.push(Action::Refresh(s, answer, write));
                            if write == 0 {
                                break;
                            }
                            write = (write - 1) & answer;
                        }
                    } else {
                        actions.push(Action::Refresh(s, answer, answer));
                    }
                }
            }
            if self.spec.looks && !server.read {
                for answer in answers(spec.config.len()) {
                    actions.push(Action::Look(s, answer));
                }
            }
            if server.reread {
                continue;
            }
            if spec.reserves && st.reservations > 0 && (server.read || server.looked) {
                for p in 0..spec.config.len() {
                    actions.push(Action::Reserve(s, p));
                }
            }
            if usize::from(server.period) + 1 < self.spec.windows.len() {
                actions.push(Action::Tick(s));
            }
            if spec.leases && server.read {
                match server.lease {
                    None => {
                        for p in 0..spec.config.len() {
                            for w in 0..self.spec.workers {
                                actions.push(Action::Take(s, p, w));
                            }
                        }
                    }
                    Some(l) => {
                        if !l.active {
                            actions.push(Action::Start(s));
                        }
                        actions.push(Action::Renew(s));
                    }
                }
            }
        }
        for (d, db) in st.dbs.iter().enumerate() {
            for (w, l) in db.leases.iter().enumerate() {
                if matches!(l.holder, Holder::Server(_)) && !l.expired {
                    actions.push(Action::Expire(d, u16::try_from(w).expect("few worker IDs")));
                }
            }
            if st.restores > 0 {
                match db.backup {
                    None => actions.push(Action::Backup(d)),
                    Some(_) => actions.push(Action::Restore(d)),
                }
            }
            if st.fences > 0 && st.restores < self.spec.restores {
                actions.push(Action::Fence(d));
            }
        }
        if self.spec.import.is_some() && st.import != Imp::Ended {
            actions.push(Action::Import);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut st = last.clone();
        let changed = match action {
            Action::Begin(c, answer) => {
                let mut cmd = st.cmds[c].clone();
                let _ = cmd.begin(self, c, &st, answer);
                st.cmds[c] = cmd;
                true
            }
            Action::Cmd(c) => {
                let mut cmd = st.cmds[c].clone();
                let _ = cmd.step(self, &mut st);
                st.cmds[c] = cmd;
                true
            }
            Action::Crash(c) => {
                st.cmds[c].crash();
                true
            }
            Action::Refresh(s, answer, write) => self.refresh(&mut st, s, answer, write),
            Action::Look(s, answer) => self.look(&mut st, s, answer),
            Action::Heal(s) => self.heal_step(&mut st, s),
            Action::Reserve(s, p) => self.reserve(&mut st, s, p),
            Action::Tick(s) => {
                st.servers[s].period += 1;
                true
            }
            Action::Dawn => {
                st.dawn += 1;
                true
            }
            Action::Take(s, p, w) => self.take(&mut st, s, p, w),
            Action::Start(s) => self.start(&mut st, s),
            Action::Renew(s) => self.renew(&mut st, s),
            Action::Expire(d, w) => {
                self.expire(&mut st, d, w);
                true
            }
            Action::Backup(d) => {
                let db = &st.dbs[d];
                let tables = self
                    .spec
                    .whole_restores
                    .then(|| (db.layouts.clone(), db.witness.clone(), db.leases.clone()));
                st.dbs[d].backup = Some(Box::new(Backup {
                    row: db.row,
                    tables,
                }));
                true
            }
            Action::Restore(d) => {
                let backup = st.dbs[d].backup.take().expect("a backup");
                let db = &mut st.dbs[d];
                db.row = backup.row;
                if let Some((layouts, witness, leases)) = backup.tables {
                    db.layouts = layouts;
                    db.witness = witness;
                    // A lease row that went back is found by its holder's next renewal
                    // when another holds it; one back to this holder's still renews
                    // here (the store's compare-and-set on the version would fail: the
                    // model keeps the holder longer, never shorter).
                    db.leases = leases;
                }
                st.restores -= 1;
                // A restore takes the database away for longer than a catalog refresh:
                // every server has read every database (and its witnesses) again before
                // it serves again.
                for server in &mut st.servers {
                    server.reread = true;
                }
                true
            }
            Action::Fence(d) => self.fence(&mut st, d),
            Action::Import => {
                let config = self.spec.import.clone().expect("an import");
                self.import_step(&mut st, &config)
            }
        };
        changed.then_some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always("no duplicate ID", |_, st: &State| st.dup.is_none()),
            Property::always(
                "no ID dated in a period the databases' clock has not begun",
                |_, st: &State| !st.early,
            ),
            Property::always("no worker ID held twice", |_, st: &State| {
                st.two_holders().is_none()
            }),
        ];
        if self.spec.restores == 0 {
            // Else a row is left behind only by a restore (which fencing deals with).
            properties.push(Property::always(
                "no live row left below the layout done",
                |_, st: &State| st.stranded().is_none(),
            ));
        }
        if self.spec.expect_change {
            properties.push(Property::sometimes(
                "a change is done",
                |m: &Sys, st: &State| {
                    st.dbs.iter().any(|db| {
                        db.layouts
                            .iter()
                            .any(|l| l.epoch > m.spec.init_epoch && l.state == St::Done)
                    })
                },
            ));
            properties.push(Property::sometimes(
                "an ID issued in a new layout",
                |_, st: &State| st.fresh,
            ));
        }
        if !self.spec.windows.is_empty() {
            properties.push(Property::sometimes(
                "an ID issued in the last period",
                |m: &Sys, st: &State| {
                    m.spec.windows.last().is_some_and(|last| {
                        (last.floor + 1..=last.ceiling).any(|x| st.issued & (1 << x) != 0)
                    })
                },
            ));
        }
        properties
    }
}

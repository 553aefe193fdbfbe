//! A `segmint serve` process: catalog refreshes (rows, layouts with `layout::read`,
//! witnesses and the evidence that fences a database gone back in time), reservations
//! (`Store::attempt`: one compare-and-set, every ID of the row's class in the segment
//! issued at once), healing a change cut off (`Store::heal`), and a snowflake worker
//! ID's lease.
//!
//! Time, for leases, is abstract: [`Action::Start`](crate::model::Action::Start) is the
//! wait a new holder makes (a lease's length) before issuing with a worker ID it took:
//! every other holder of that worker ID that did not renew successfully since the take
//! has passed its deadline by then and stopped. [`Action::Expire`](crate::model::Action::Expire)
//! is a lease running out by its database's clock: its holder (paused, cut off) has
//! stopped by its own clock before that.

use segmint_core::layout::{self, Layout, LayoutState, Member, Standing};
use segmint_core::segment::Residue;

use crate::model::{
    Answer, Db, Holder, Lay, MarkT, Row, ServerSpec, State, Sys, holder_name, learn, to_mark,
};
use crate::mover::{Moved, Mover};
use segmint_core::evidence::Mark;
use segmint_core::segment::judge;
use segmint_core::segment::reserve;
use segmint_core::shape::clocks;
use segmint_core::snowflake::lease::{self, Agreed, RenewNeed, Renewed, TakeNeed};
use segmint_core::step::{StepChoice, StepReason};

/// What the catalog keeps of a row: not its `max_id` nor its version, which only the
/// reservation's own read uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Seen {
    pub class: Residue,
    pub epoch: i64,
    pub frozen: bool,
    pub claimed_by: i64,
}

impl Seen {
    fn of(r: &Row) -> Seen {
        Seen {
            class: r.class,
            epoch: r.epoch,
            frozen: r.frozen,
            claimed_by: r.claimed_by,
        }
    }
}

/// A worker ID this server took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Held {
    pub db: Db,
    /// Position of `db` in the server's configuration.
    pub pos: usize,
    pub w: u16,
    /// Issuing with it (the wait after taking it is over).
    pub active: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Server {
    /// Whether a catalog was read yet (a server serves nothing before, but what it
    /// looked at).
    pub read: bool,
    /// Whether it looked at the biz before its first catalog read.
    pub looked: bool,
    /// A database was restored from a backup since this server's last read of every
    /// database: it serves nothing until it has read them all.
    pub reread: bool,
    /// The layouts known (`LayoutView::layouts`).
    pub layouts: Vec<Lay>,
    /// Per configured database: its standing is `Current`.
    pub current: Vec<bool>,
    /// Per configured database: the class plain bizs get on it in the layout in force
    /// (`LayoutView::classes`); `None`: not used.
    pub classes: Vec<Option<Residue>>,
    /// Per configured database: its row as last read (`None`: never read), as much of
    /// it as the catalog uses.
    pub snap: Vec<Option<Option<Seen>>>,
    /// Per configured database: the evidence of how far its row got.
    pub marks: Vec<Option<MarkT>>,
    /// Per configured database: fenced (found behind the evidence).
    pub fenced: Vec<bool>,
    pub lease: Option<Held>,
    /// Servers (bits) that took this server's worker ID elsewhere since this server
    /// last renewed: when their wait is over, this server has stopped.
    pub owes: u8,
    pub heal: Option<Mover>,
    /// Heals started so far.
    pub heals: u8,
    /// The period its clock is in (an index of `Spec::windows`).
    pub period: u8,
    /// The period of its last reservation.
    pub reserved_in: Option<u8>,
}

impl Server {
    pub fn new(spec: &ServerSpec) -> Server {
        let n = spec.config.len();
        Server {
            read: false,
            looked: false,
            reread: false,
            layouts: Vec::new(),
            current: vec![true; n],
            classes: vec![None; n],
            snap: vec![None; n],
            marks: vec![None; n],
            fenced: vec![false; n],
            lease: None,
            owes: 0,
            heal: None,
            heals: 0,
            period: 0,
            reserved_in: None,
        }
    }
}

/// Whether two databases' classes overlap (`catalog::conflict`).
fn conflict(classes: &[(usize, Residue)]) -> bool {
    judge::first_overlap(classes).is_some()
}

impl Sys {
    /// The server's configured classes: its layout before any change.
    fn configured(&self, s: usize) -> Layout {
        let spec = &self.spec.servers[s];
        Layout {
            epoch: 0,
            members: spec
                .config
                .iter()
                .zip(&spec.classes)
                .map(|(&d, &class)| Member {
                    name: self.spec.names[d].clone(),
                    class,
                })
                .collect(),
            state: LayoutState::Done,
            lost: Vec::new(),
        }
    }

    /// The class plain bizs get on the database at position `p` (`Store::class_of`):
    /// `None` when the layout in force does not name it or its standing is not current.
    pub fn class_of(&self, st: &State, s: usize, p: usize) -> Option<Residue> {
        st.servers[s].classes[p]
    }

    /// The class whose worker IDs the database at position `p` may lease
    /// (`Store::worker_ids_of`): none unless [`layout::leases_allowed`].
    fn worker_class(&self, st: &State, s: usize, p: usize) -> Option<Residue> {
        let server = &st.servers[s];
        let allowed =
            !self.spec.fixes.membership || layout::leases_allowed(&self.layouts(&server.layouts));
        self.class_of(st, s, p).filter(|_| allowed)
    }

    /// `Store::refresh_since`: reads the configured databases in `answer`.
    pub fn refresh(&self, st: &mut State, s: usize, answer: Answer, write: Answer) -> bool {
        self.read_catalog(st, s, answer, write, false)
    }

    /// `Store::look_up` before the first catalog read: the biz alone read from the
    /// databases in `answer` (see [`Action::Look`]).
    pub fn look(&self, st: &mut State, s: usize, answer: Answer) -> bool {
        self.read_catalog(st, s, answer, 0, true)
    }

    fn read_catalog(
        &self,
        st: &mut State,
        s: usize,
        answer: Answer,
        write: Answer,
        look: bool,
    ) -> bool {
        let spec = &self.spec.servers[s];
        let names = self.names();
        let mut server = st.servers[s].clone();
        let before = server.marks.clone();
        let mut read: Vec<usize> = Vec::new();
        let mut per_db = Vec::new();
        for (p, &d) in spec.config.iter().enumerate() {
            let db = &st.dbs[d];
            if answer & (1 << p) == 0 {
                continue;
            }
            read.push(p);
            if self.spec.witnesses {
                match db.row {
                    Some(r) if before[p].is_some_and(|m| to_mark(m).is_ahead_of(&r.biz_row(0))) => {
                        server.fenced[p] = true;
                    }
                    row => {
                        if let Some(r) = row {
                            learn(&mut server.marks[p], r.mark());
                        }
                        server.fenced[p] &= look;
                    }
                }
            }
            server.snap[p] = Some(db.row.as_ref().map(Seen::of));
            per_db.push((names[d].clone(), db.layout_rows(names)));
        }
        if self.spec.witnesses && (!look || self.spec.fixes.look_witnesses) {
            for &p in &read {
                for (j, w) in st.dbs[spec.config[p]].witness.iter().enumerate() {
                    if let (Some(w), Some(q)) = (w, spec.config.iter().position(|&d| d == j)) {
                        learn(&mut server.marks[q], to_mark(*w));
                    }
                }
            }
            // The marks a database lacks are written there, if the write happens.
            for &p in read.iter().filter(|&&p| write & (1 << p) != 0) {
                for (q, &j) in spec.config.iter().enumerate() {
                    if let (true, Some(m)) = (q != p, server.marks[q]) {
                        learn(&mut st.dbs[spec.config[p]].witness[j], to_mark(m));
                    }
                }
            }
        }
        let known = self.layouts(&server.layouts);
        if let Ok(reading) = layout::read(&known, &per_db) {
            for (&p, standing) in read.iter().zip(&reading.standing) {
                server.current[p] = *standing == Standing::Current;
            }
            server.layouts = reading.layouts.iter().map(|l| self.lay(l)).collect();
            let current = layout::current(&reading.layouts).0;
            for (p, &d) in spec.config.iter().enumerate() {
                server.classes[p] = if self.spec.fixes.standing && !server.current[p] {
                    None
                } else {
                    match current {
                        Some(l) => l.class_of(&names[d]),
                        None if self.spec.fixes.membership => None,
                        None => Some(spec.classes[p]),
                    }
                };
            }
        }
        match look {
            true => server.looked = true,
            false => server.read = true,
        }
        if read.len() == spec.config.len() {
            server.reread = false;
        }
        if !look && spec.heals && server.heal.is_none() && server.heals < self.spec.heals {
            server.heal = self.heal(st, s, &server, &read);
            if server.heal.is_some() {
                server.heals += 1;
            }
        }
        st.servers[s] = server;
        true
    }

    /// `Store::heal`: the bizs of a change cut off, moved from this server when it is
    /// configured with, and just read, every database the change needs. The change's
    /// row is taken as silent at once (a command paused meanwhile may wake up).
    fn heal(&self, st: &State, s: usize, server: &Server, read: &[usize]) -> Option<Mover> {
        let spec = &self.spec.servers[s];
        let layouts = self.layouts(&server.layouts);
        let pending = layout::current(&layouts).1?;
        // Its row fell silent: its command stopped (unless commands may pause).
        if !self.spec.paused
            && st
                .cmds
                .iter()
                .any(|c| c.running() && c.epoch() == Some(pending.epoch))
        {
            return None;
        }
        let mut witnessed_names: Vec<String> = Vec::new();
        let mut witnessed = Vec::new();
        for &p in read {
            for (j, w) in st.dbs[spec.config[p]].witness.iter().enumerate() {
                if let Some((version, max_id, high)) = *w {
                    witnessed_names.push(self.spec.names[j].clone());
                    witnessed.push((high.max(max_id), version));
                }
            }
        }
        witnessed_names.sort();
        witnessed_names.dedup();
        let configured: Vec<String> = spec
            .config
            .iter()
            .map(|&d| self.spec.names[d].clone())
            .collect();
        let layout::Heal::Move { parts, .. } = layout::healing(
            &layouts,
            &self.configured(s),
            &configured,
            read,
            &witnessed_names,
        ) else {
            return None;
        };
        let parts: Vec<Db> = parts.iter().map(|&p| spec.config[p]).collect();
        let frozen_by_it = spec.config.iter().zip(&server.snap).any(|(&d, snap)| {
            snap.flatten().is_some_and(|r| {
                layout::frozen_by(pending, &self.spec.names[d], r.frozen, r.claimed_by)
            })
        });
        frozen_by_it.then(|| {
            Mover::new(
                self,
                self.lay(pending),
                parts,
                server.layouts.clone(),
                witnessed,
            )
        })
    }

    pub fn heal_step(&self, st: &mut State, s: usize) -> bool {
        let mut mover = st.servers[s].heal.take().expect("healing");
        if mover.step(&mut st.dbs) == Moved::Going {
            st.servers[s].heal = Some(mover);
        }
        true
    }

    /// `Store::attempt` on the database at position `p`, against the catalog built
    /// from the rows last read (`Catalog::build`).
    pub fn reserve(&self, st: &mut State, s: usize, p: usize) -> bool {
        let spec = &self.spec.servers[s];
        let d = spec.config[p];
        if st.servers[s].fenced[p] || self.class_of(st, s, p).is_none() {
            return false;
        }
        let server = &st.servers[s];
        let rows: Vec<(usize, Seen)> = server
            .snap
            .iter()
            .enumerate()
            .filter_map(|(q, r)| Some((q, r.flatten()?)))
            .collect();
        if rows.is_empty() {
            return false;
        }
        let epoch = rows
            .iter()
            .filter(|(_, r)| !r.frozen)
            .map(|(_, r)| r.epoch)
            .max()
            .unwrap_or(0);
        let classes: Vec<(usize, Residue)> = rows
            .iter()
            .filter(|(_, r)| !r.frozen && r.epoch >= epoch)
            .map(|&(q, r)| (q, r.class))
            .collect();
        if conflict(&classes) {
            return false;
        }
        let Some(read) = st.dbs[d].row else {
            return false;
        };
        // The cache's check before a period is begun (`Cache::take_begun`), the
        // databases' clock read exactly: periods are the clocks' units here.
        let (own, dawn) = (i64::from(st.servers[s].period), i64::from(st.dawn));
        let reading = clocks::Reading {
            offset_ms: dawn - own,
            uncertainty_ms: 0,
        };
        if !self.spec.windows.is_empty()
            && self.spec.fixes.period_begun
            && clocks::may_begin(own, own, &[reading], 0).is_err()
        {
            return false;
        }
        // The window of the server's period; the mutation starts a period's first
        // segment at the window's floor.
        let window = self
            .spec
            .windows
            .get(usize::from(st.servers[s].period))
            .copied();
        let period = window.map(|_| st.servers[s].period);
        let safeguards = reserve::Safeguards {
            window_above_row: self.spec.fixes.window_above_row
                || st.servers[s].reserved_in == period,
        };
        // `Store::attempt`: the store's machine, its read and compare-and-set made at
        // once (the marks only with witnesses).
        let mut machine = reserve::Reserve::new(p, &classes, epoch, window, safeguards);
        let (range, version) = loop {
            let server = &mut st.servers[s];
            match machine.need() {
                reserve::Need::Read => {
                    let seen = server.marks[p].filter(|_| self.spec.witnesses).map(to_mark);
                    machine.read(st.dbs[d].row.map(|r| (r.reclass(), self.spec.step)), seen);
                }
                reserve::Need::Learn(mark) => {
                    if self.spec.witnesses {
                        learn(&mut server.marks[p], mark);
                    }
                    machine.learned();
                }
                reserve::Need::Step { row_step, .. } => machine.stepped(StepChoice {
                    step: row_step,
                    reason: StepReason::Fixed,
                }),
                reserve::Need::Advance { to, .. } => {
                    let row = st.dbs[d].row.as_mut().expect("read at once");
                    row.version += 1;
                    row.max_id = to;
                    machine.advanced(Some(row.reclass()));
                }
                reserve::Need::Done(reserve::Outcome::Reserved { range, version, .. }) => {
                    break (range, version);
                }
                reserve::Need::Done(reserve::Outcome::Behind { .. }) => {
                    server.fenced[p] = true;
                    return true;
                }
                // Nothing served; a window missed or passed waits for the clock's
                // `Tick`.
                reserve::Need::Done(_) => return true,
            }
        };
        if window.is_some() {
            st.servers[s].reserved_in = period;
            st.early |= own > dawn;
        }
        st.reservations -= 1;
        for id in range.max_id() - range.step() + 1..=range.max_id() {
            if range.residue().contains(id) {
                st.issue(id);
            }
        }
        st.fresh |= read.epoch > self.spec.init_epoch;
        if self.spec.witnesses {
            let mark = Mark {
                version,
                max_id: range.max_id(),
                high_id: range.max_id(),
            };
            // Witnessed in the other databases before use (taken as written in all).
            for &j in &spec.config {
                if j != d {
                    learn(&mut st.dbs[j].witness[d], mark);
                }
            }
        }
        true
    }

    /// `Store::take_lease` on the database at position `p`: the store's machine
    /// ([`lease::Take`]), its read and compare-and-set made at once, trying worker ID
    /// `w` if its database may lease it (any of the class: the lower ones may be held
    /// by servers not modelled).
    pub fn take(&self, st: &mut State, s: usize, p: usize, w: u16) -> bool {
        let d = self.spec.servers[s].config[p];
        let class = self
            .worker_class(st, s, p)
            .filter(|_| !st.servers[s].fenced[p]);
        let mut ids = lease::worker_ids(class, true, self.spec.workers);
        ids.retain(|&x| x == w);
        let mut take = lease::Take::new(ids, &holder_name(s), 0, 1);
        let w = loop {
            match take.need() {
                TakeNeed::Read => take.read(&lease_rows(st, &[d])),
                TakeNeed::Elsewhere => take.elsewhere(&self.leases_elsewhere(st, s, d)),
                TakeNeed::Take(w) => {
                    let row = &mut st.dbs[d].leases[usize::from(w)];
                    let taken = row.takeable().then(|| {
                        row.holder = Holder::Server(s);
                        row.expired = false;
                        row.read(usize::from(w))
                    });
                    take.taken(taken);
                }
                TakeNeed::Done(None) => return false,
                TakeNeed::Done(Some(row)) => break row.worker_id,
            }
        };
        st.servers[s].lease = Some(Held {
            db: d,
            pos: p,
            w,
            active: false,
        });
        for (t, other) in st.servers.iter_mut().enumerate() {
            if t != s && other.lease.is_some_and(|l| l.w == w) {
                other.owes |= 1 << s;
            }
        }
        true
    }

    /// The wait after a take is over: every other holder of the worker ID that has not
    /// renewed since has passed its deadline.
    pub fn start(&self, st: &mut State, s: usize) -> bool {
        let held = st.servers[s].lease.expect("a lease");
        st.servers[s].lease = Some(Held {
            active: true,
            ..held
        });
        for t in 0..st.servers.len() {
            let other = &st.servers[t];
            if t != s && other.owes & (1 << s) != 0 && other.lease.is_some_and(|l| l.w == held.w) {
                drop_lease(st, t);
            }
        }
        for other in &mut st.servers {
            other.owes &= !(1 << s);
        }
        true
    }

    /// `Store::renew_lease`, the store's machine ([`lease::Renew`]): given up when the
    /// worker ID left its database's class in the layout in force; lost when the row
    /// is no longer this holder's. The spec is not modelled here (the agreement's own
    /// scenarios check it): the agreement keeps the lease.
    pub fn renew(&self, st: &mut State, s: usize) -> bool {
        let held = st.servers[s].lease.expect("a lease");
        let ids = lease::worker_ids(self.worker_class(st, s, held.pos), true, self.spec.workers);
        let mut renew = lease::Renew::new(held.w, &holder_name(s), &ids);
        loop {
            match renew.need() {
                RenewNeed::Agree => renew.agreed(Agreed::Keep),
                RenewNeed::Elsewhere => renew.elsewhere(&self.leases_elsewhere(st, s, held.db)),
                RenewNeed::Renew => {
                    let row = st.dbs[held.db].leases[usize::from(held.w)];
                    renew.renewed(
                        (row.holder == Holder::Server(s)).then(|| row.read(usize::from(held.w))),
                    );
                }
                RenewNeed::Done(Renewed::Kept(_)) => {
                    st.servers[s].owes = 0;
                    return true;
                }
                RenewNeed::Done(_) => {
                    drop_lease(st, s);
                    return true;
                }
            }
        }
    }

    /// The lease rows of server `s`'s configured databases but `d`
    /// (`Store::leases_elsewhere`); none without `fixes.elsewhere`.
    fn leases_elsewhere(&self, st: &State, s: usize, d: Db) -> Vec<segmint_core::rows::LeaseRow> {
        if !self.spec.fixes.elsewhere {
            return Vec::new();
        }
        let others: Vec<Db> = self.spec.servers[s]
            .config
            .iter()
            .copied()
            .filter(|&j| j != d)
            .collect();
        lease_rows(st, &others)
    }

    /// A lease row runs out by its database's clock: its holder stopped before.
    pub fn expire(&self, st: &mut State, d: Db, w: u16) {
        let row = &mut st.dbs[d].leases[usize::from(w)];
        row.expired = true;
        if let Holder::Server(t) = row.holder
            && st.servers[t].lease.is_some_and(|l| l.db == d && l.w == w)
        {
            drop_lease(st, t);
        }
    }
}

/// The lease rows of databases `dbs`.
fn lease_rows(st: &State, dbs: &[Db]) -> Vec<segmint_core::rows::LeaseRow> {
    dbs.iter()
        .flat_map(|&d| st.dbs[d].leases.iter().enumerate().map(|(w, r)| r.read(w)))
        .collect()
}

/// Server `t` stops using its worker ID.
fn drop_lease(st: &mut State, t: usize) {
    st.servers[t].lease = None;
    st.servers[t].owes = 0;
    for other in &mut st.servers {
        other.owes &= !(1 << t);
    }
}

//! Counterexamples as readable traces: one line per step, then the databases at the end.

use stateright::Path;

use crate::command::Phase;
use crate::import::Imp;
use crate::model::{Action, Lay, Row, St, State, Sys};
use crate::mover::Mover;
use segmint_core::layout::changing::Need as ChangeNeed;
use segmint_core::layout::moving::Need;
use segmint_core::layout::{Change, Move};

impl Sys {
    /// The steps of `path`, one per line, and the databases it ends with.
    pub fn trace(&self, path: Path<State, Action>) -> String {
        let steps = path.into_vec();
        let mut out = Vec::new();
        for pair in steps.windows(2) {
            let (before, action) = (&pair[0].0, pair[0].1.as_ref().expect("an action"));
            out.push(format!("  {}", self.narrate(before, action, &pair[1].0)));
        }
        if let Some((last, _)) = steps.last() {
            out.push(self.summary(last));
        }
        out.join("\n")
    }

    fn db(&self, d: usize) -> &str {
        &self.spec.names[d]
    }

    fn describe_lay(&self, l: &Lay) -> String {
        let members: Vec<String> = l
            .members
            .iter()
            .map(|&(d, c)| format!("{}: {c}", self.db(d)))
            .chain(
                l.lost
                    .iter()
                    .map(|&(d, c)| format!("lost {}: {c}", self.db(d))),
            )
            .collect();
        format!("epoch {} {{{}}} {:?}", l.epoch, members.join(", "), l.state)
    }

    fn describe_row(&self, r: &Row) -> String {
        format!(
            "{} max {} v{} epoch {}{}{}",
            r.class,
            r.max_id,
            r.version,
            r.epoch,
            if r.frozen { " frozen" } else { "" },
            if r.claimed_by > 0 {
                format!(" claimed by {}", r.claimed_by)
            } else {
                String::new()
            }
        )
    }

    fn describe_move(&self, m: &Mover) -> String {
        self.describe_moving(&m.machine, &m.parts)
    }

    fn describe_moving(&self, m: &Move, parts: &[usize]) -> String {
        let e = m.epoch();
        let db = |part: usize| self.db(parts[part]);
        match m.need() {
            Need::Read if m.verifying() => "reads the biz's rows again: still frozen?".to_string(),
            Need::Read => format!("reads the biz's rows (move to epoch {e})"),
            Need::Insert { part, row, .. } => format!(
                "inserts a frozen placeholder on {} ({})",
                db(part),
                self.describe_row(&Row::reclassed(&row))
            ),
            Need::Write { part, .. } if m.thawing() => {
                format!("thaws the row on {}", db(part))
            }
            Need::Write { part, to, .. } if to.frozen => {
                format!("freezes the row on {} (epoch {e})", db(part))
            }
            Need::Write { part, to, .. } => format!(
                "switches the row on {} to {}:{} at fence {} (epoch {e})",
                db(part),
                to.delta,
                to.remainder,
                to.max_id
            ),
            Need::Witness { part, .. } => format!(
                "records the frozen rows as witnesses on {} and reads its witnesses",
                db(part)
            ),
            Need::Done(o) => format!("{o:?}"),
        }
    }

    fn describe_change(&self, change: &Change) -> String {
        let d = change.decision();
        let e = d.to.epoch;
        let on = |part: usize| d.parts[part].as_str();
        match change.need() {
            ChangeNeed::ClaimBefore { part, layout } => {
                format!("claims epoch {} on {}", layout.epoch, on(part))
            }
            ChangeNeed::Claim { part, .. } => format!("claims epoch {e} on {}", on(part)),
            ChangeNeed::Put { part, layout } => format!(
                "puts epoch {} ({}) on {}",
                layout.epoch,
                layout.state.as_str(),
                on(part)
            ),
            ChangeNeed::CopyCatalog | ChangeNeed::Gather => "reads the bizs and witnesses".into(),
            ChangeNeed::Move { .. } => {
                let parts: Vec<usize> = d.parts.iter().map(|n| self.index(n)).collect();
                let mut change = change.clone();
                self.describe_moving(change.mover(), &parts)
            }
            ChangeNeed::ReadLeases => "reads the lease rows".into(),
            ChangeNeed::SetLeases { part, rows, .. } => format!(
                "sets {} lease rows on {} (blocked or freed)",
                rows.len(),
                on(part)
            ),
            ChangeNeed::Sequences => "reads the sequence bizs (none here)".into(),
            ChangeNeed::Carry { biz, .. } => format!("carries the sections of {biz}"),
            ChangeNeed::Done(o) => format!("{o:?}"),
        }
    }

    fn narrate(&self, before: &State, action: &Action, after: &State) -> String {
        match *action {
            Action::Cmd(c) => {
                let cmd = &before.cmds[c];
                let what = match cmd.change() {
                    Some(change) => self.describe_change(change),
                    None => "-".into(),
                };
                // The step again, for the reason it stopped (not kept in the state).
                let why = cmd.clone().step(self, &mut before.clone());
                let end = match (why, &after.cmds[c].phase) {
                    (Some(why), _) => format!(" => stops: {why}"),
                    (None, Phase::Finished) => " => finished".into(),
                    _ => String::new(),
                };
                format!("command {c} {what}{end}")
            }
            Action::Begin(c, answer) => {
                let spec = &self.spec.commands[c];
                let read: Vec<&str> = (0..spec.config.len())
                    .filter(|p| answer & (1 << p) != 0)
                    .map(|p| self.db(spec.config[p]))
                    .collect();
                let why = before.cmds[c].clone().begin(self, c, before, answer);
                let what = match (why, &after.cmds[c].phase, after.cmds[c].change()) {
                    (Some(why), ..) => format!("refused: {why}"),
                    (_, Phase::Finished, _) => "nothing to do".into(),
                    (_, _, Some(change)) => {
                        let p = change.decision();
                        format!(
                            "plans {} -> {} over [{}]{}{}",
                            p.from.epoch,
                            self.describe_lay(&self.lay(&p.to)),
                            p.parts.join(", "),
                            p.supersede.as_ref().map_or(String::new(), |s| format!(
                                ", superseding epoch {}",
                                s.epoch
                            )),
                            if p.finishing { ", finishing it" } else { "" }
                        )
                    }
                    (_, _, None) => "?".into(),
                };
                format!(
                    "command {c} reads the layouts of [{}]: {what}",
                    read.join(", ")
                )
            }
            Action::Crash(c) => format!("command {c} crashes"),
            Action::Refresh(s, answer, write) => {
                let read: Vec<&str> = (0..self.spec.servers[s].config.len())
                    .filter(|p| answer & (1 << p) != 0)
                    .map(|p| self.db(self.spec.servers[s].config[p]))
                    .collect();
                let uses: Vec<String> = (0..self.spec.servers[s].config.len())
                    .filter_map(|p| {
                        let d = self.spec.servers[s].config[p];
                        self.class_of(after, s, p)
                            .map(|c| format!("{} ({c})", self.db(d)))
                    })
                    .collect();
                let heal = match (&before.servers[s].heal, &after.servers[s].heal) {
                    (None, Some(m)) => format!("; starts healing epoch {}", m.machine.epoch()),
                    _ => String::new(),
                };
                let written: Vec<&str> = (0..self.spec.servers[s].config.len())
                    .filter(|p| write & (1 << p) != 0)
                    .map(|p| self.db(self.spec.servers[s].config[p]))
                    .collect();
                let witnesses = match (self.spec.witnesses, written.len() == read.len()) {
                    (false, _) | (true, true) => String::new(),
                    (true, false) => {
                        format!("; writes witnesses into [{}] only", written.join(", "))
                    }
                };
                format!(
                    "server {s} reads [{}]: would use [{}]{heal}{witnesses}",
                    read.join(", "),
                    uses.join(", ")
                )
            }
            Action::Look(s, answer) => {
                let read: Vec<&str> = (0..self.spec.servers[s].config.len())
                    .filter(|p| answer & (1 << p) != 0)
                    .map(|p| self.db(self.spec.servers[s].config[p]))
                    .collect();
                format!(
                    "server {s}, before its first catalog read, looks at the biz in [{}]",
                    read.join(", ")
                )
            }
            Action::Heal(s) => {
                let m = before.servers[s].heal.as_ref().expect("healing");
                format!("server {s} heals: {}", self.describe_move(m))
            }
            Action::Tick(s) => format!(
                "server {s}'s clock reaches period {}",
                after.servers[s].period
            ),
            Action::Dawn => format!("the databases' clocks reach period {}", after.dawn),
            Action::Reserve(s, p) => {
                let d = self.spec.servers[s].config[p];
                let ids: Vec<i64> = (0..64)
                    .filter(|&x| after.issued & !before.issued & (1 << x) != 0)
                    .collect();
                let dup = match (before.dup, after.dup) {
                    (None, Some(x)) => format!(" -- ID {x} AGAIN"),
                    _ => String::new(),
                };
                let row = after.dbs[d]
                    .row
                    .map_or("none".into(), |r| self.describe_row(&r));
                if after.fenced_changed(before, s) {
                    format!(
                        "server {s} reads {}: behind its evidence, fenced",
                        self.db(d)
                    )
                } else if after.dbs[d].row == before.dbs[d].row {
                    format!("server {s} tries {}: nothing reserved ({row})", self.db(d))
                } else {
                    format!(
                        "server {s} reserves on {} (now {row}): issues {ids:?}{dup}",
                        self.db(d)
                    )
                }
            }
            Action::Take(s, p, _) => match after.servers[s].lease {
                Some(l) => format!(
                    "server {s} takes worker ID {} on {}",
                    l.w,
                    self.db(self.spec.servers[s].config[p])
                ),
                None => format!(
                    "server {s} finds no worker ID free on {}",
                    self.db(self.spec.servers[s].config[p])
                ),
            },
            Action::Start(s) => {
                let w = after.servers[s].lease.map_or(0, |l| l.w);
                format!("server {s} has waited out its lease: issues with worker ID {w}")
            }
            Action::Renew(s) => match after.servers[s].lease {
                Some(_) => format!("server {s} renews its lease"),
                None => format!("server {s}'s renewal fails: it stops using its worker ID"),
            },
            Action::Expire(d, w) => {
                format!("the lease of worker ID {w} on {} runs out", self.db(d))
            }
            Action::Backup(d) => format!("a backup of {} is taken", self.db(d)),
            Action::Restore(d) => format!("{} is restored from its backup", self.db(d)),
            Action::Import => match (&before.import, &after.import) {
                (Imp::Idle, Imp::Insert { epoch, .. }) => {
                    format!("import reads the layouts: creates the biz in epoch {epoch}")
                }
                (Imp::Idle, _) => "import reads the layouts: refused".into(),
                (Imp::Insert { classes, k, .. }, _) => {
                    let d = classes[*k].0;
                    match (before.dbs[d].row, after.dbs[d].row) {
                        (None, Some(r)) => {
                            format!(
                                "import creates the row on {} ({})",
                                self.db(d),
                                self.describe_row(&r)
                            )
                        }
                        _ => format!("import writes nothing on {}: stops", self.db(d)),
                    }
                }
                (Imp::Ended, _) => "import ended".into(),
            },
            Action::Fence(d) => format!(
                "`db fence {}` raises its row (now {})",
                self.db(d),
                after.dbs[d]
                    .row
                    .map_or("none".into(), |r| self.describe_row(&r))
            ),
        }
    }

    fn summary(&self, st: &State) -> String {
        let mut out = vec!["  at the end:".to_owned()];
        for (d, db) in st.dbs.iter().enumerate() {
            let layouts: Vec<String> = db.layouts.iter().map(|l| self.describe_lay(l)).collect();
            out.push(format!(
                "    {}: row {}; layouts [{}]",
                self.db(d),
                db.row.map_or("none".into(), |r| self.describe_row(&r)),
                layouts.join("; ")
            ));
            if !db.leases.is_empty() {
                out.push(format!("      leases {:?}", db.leases));
            }
        }
        for (s, server) in st.servers.iter().enumerate() {
            let known = server
                .layouts
                .iter()
                .filter(|l| l.state != St::Superseded)
                .map(|l| self.describe_lay(l))
                .collect::<Vec<_>>();
            out.push(format!(
                "    server {s}: knows [{}]; lease {:?}",
                known.join("; "),
                server.lease
            ));
        }
        out.join("\n")
    }
}

impl State {
    fn fenced_changed(&self, before: &State, s: usize) -> bool {
        self.servers[s].fenced != before.servers[s].fenced
    }
}

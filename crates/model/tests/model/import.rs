//! `segmint import` (and `segmint biz add`, which creates rows the same way) of the biz
//! while it has no row anywhere: `Store::layout_for_writes` reads the layouts of the
//! configured databases and refuses while a change is pending; then the command
//! creates the biz's row on each configured database in turn, in the database's class
//! of the layout in force, stamped with its epoch (`SegmentStore::insert_biz`).
//!
//! The race: a change claims its epoch and lists the bizs between the command's read
//! of the layouts and its inserts; the change never moves the biz, and the rows
//! created in the old layout are left behind once it is done. `insert_biz` therefore
//! writes nothing on a database holding a layout above the row's epoch, its check and
//! its insert one transaction that a claim cannot come between (here: one step).

use segmint_core::layout;
use segmint_core::segment::Residue;

use crate::model::{Db, Row, State, Sys};

/// Where the import command is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Imp {
    /// Not started.
    Idle,
    /// Creating the row on `classes[k]`'s database, in layout `epoch`.
    Insert {
        epoch: i64,
        classes: Vec<(Db, Residue)>,
        k: usize,
    },
    /// Ended: done, refused or stopped.
    Ended,
}

impl Sys {
    /// The next step of the import command configured with `config`.
    pub fn import_step(&self, st: &mut State, config: &[Db]) -> bool {
        let next = match std::mem::replace(&mut st.import, Imp::Ended) {
            Imp::Idle => self.import_begin(st, config),
            Imp::Insert { epoch, classes, k } => {
                let (d, class) = classes[k];
                let db = &mut st.dbs[d];
                let above = db.layouts.iter().any(|l| l.epoch > epoch);
                if above && self.spec.fixes.insert_fence {
                    // `Inserted::LayoutAbove`: the command stops.
                    Imp::Ended
                } else {
                    if db.row.is_none() {
                        db.row = Some(Row::new(0, class, epoch));
                    }
                    if k + 1 < classes.len() {
                        Imp::Insert {
                            epoch,
                            classes,
                            k: k + 1,
                        }
                    } else {
                        Imp::Ended
                    }
                }
            }
            Imp::Ended => return false,
        };
        st.import = next;
        true
    }

    /// `layout_for_writes`, then each configured database's class in the layout in
    /// force (a database outside it refuses the biz everywhere).
    fn import_begin(&self, st: &State, config: &[Db]) -> Imp {
        let names = self.names();
        let per_db: Vec<_> = config
            .iter()
            .map(|&d| (names[d].clone(), st.dbs[d].layout_rows(names)))
            .collect();
        let Ok(reading) = layout::read(&[], &per_db) else {
            return Imp::Ended;
        };
        let (Some(done), None) = layout::current(&reading.layouts) else {
            return Imp::Ended;
        };
        let lay = self.lay(done);
        let classes: Option<Vec<(Db, Residue)>> = config
            .iter()
            .map(|&d| Some((d, lay.class_of(d)?)))
            .collect();
        match classes {
            Some(classes) if !classes.is_empty() => Imp::Insert {
                epoch: done.epoch,
                classes,
                k: 0,
            },
            _ => Imp::Ended,
        }
    }
}

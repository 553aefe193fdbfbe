//! A server's worker ID, as a machine (sans-IO): what its lease loop does next and
//! whether it may issue at `now`. The store carries out the takes and renewals
//! ([`super::lease`]); the machine takes their answers and the time, a server's
//! monotonic clock since an origin of its choosing.
//!
//! ```text
//!   Idle ──taken──▶ Waiting (the lease, from the take's start) ──renewed past it──▶ Active
//!   Waiting, Active ──renewed──▶ the deadline moves to the renewal's (lease less a tenth)
//!                   ──lost (taken over, or the database went back)──▶ Idle
//!                   ──failed, past the deadline──▶ Idle   (before it: retried sooner)
//!   any ──stop──▶ Stopped
//! ```
//!
//! Why no two servers issue with one worker ID: a holder issues only before its
//! deadline ([`Timing::deadline`], the rule every lease holder follows), and a new
//! holder issues its first ID only once a whole lease has passed since it took the
//! worker ID, by its own clock. Another process can take the worker ID only once the
//! lease ran out (with a grace) by its database's clock; the last holder's deadline
//! came a tenth of a lease before its lease could run out, and its renewals fail from
//! the take on. So the waiting covers a database whose clock stepped, or that was
//! restored from a backup and forgot the last renewal.

use std::time::Duration;

use crate::lease::Timing;

/// Where a worker ID's holder is; `L` is the lease held, `A` what it issues with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held<L, A> {
    /// No worker ID: none leased yet, or the lease was lost or lapsed.
    Idle,
    /// Leased; waiting out earlier holders until `until` before the first ID.
    Waiting {
        lease: L,
        until: Duration,
        deadline: Duration,
    },
    /// Issuing, until `deadline` unless a renewal moves it.
    Active {
        lease: L,
        deadline: Duration,
        issuing: A,
    },
    /// Released at shutdown: nothing more is issued.
    Stopped,
}

/// What the lease loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a, L> {
    /// Take a worker ID.
    Take,
    /// Renew the lease held.
    Renew(&'a L),
    /// Nothing: stopped.
    Rest,
}

/// The answer to a renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal<L> {
    /// Renewed: the lease as written.
    Renewed(L),
    /// The row is no longer this holder's (taken over, or its database went back).
    Lost,
    /// No answer (a database down, a timeout): the outcome is unknown.
    Failed,
}

/// What a renewal came to, for the caller's logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewed {
    /// Still waiting out earlier holders.
    Waiting,
    /// Issuing from now on.
    Activated,
    /// Issuing, the deadline moved.
    Kept,
    /// Issuing could not begin (`activate` gave nothing): idle again.
    NotActivated,
    Lost,
    /// Failed past the deadline: idle.
    Lapsed,
    /// Failed before the deadline: tried again sooner.
    Retry,
    /// The state moved on while the renewal ran (stopped, or lapsed): ignored.
    Stale,
}

/// Why no ID may be issued now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotIssuing {
    Idle,
    /// Waiting out earlier holders for this much longer.
    Waiting(Duration),
    Stopped,
}

/// A server's worker ID holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder<L, A> {
    timing: Timing,
    /// How often a held lease is renewed.
    renew: Duration,
    held: Held<L, A>,
}

impl<L, A> Holder<L, A> {
    /// A holder of leases of `timing`, renewed every `renew`; idle.
    pub fn new(timing: Timing, renew: Duration) -> Holder<L, A> {
        Holder {
            timing,
            renew,
            held: Held::Idle,
        }
    }

    pub fn held(&self) -> &Held<L, A> {
        &self.held
    }

    /// The lease held, waiting or issuing.
    pub fn lease(&self) -> Option<&L> {
        match &self.held {
            Held::Waiting { lease, .. } | Held::Active { lease, .. } => Some(lease),
            Held::Idle | Held::Stopped => None,
        }
    }

    pub fn step(&self) -> Step<'_, L> {
        match &self.held {
            Held::Idle => Step::Take,
            Held::Stopped => Step::Rest,
            Held::Waiting { lease, .. } | Held::Active { lease, .. } => Step::Renew(lease),
        }
    }

    /// A worker ID taken by a take sent at `sent`: waited out until a lease from then.
    /// How long until the next step.
    pub fn taken(&mut self, lease: L, sent: Duration) -> Duration {
        if matches!(self.held, Held::Idle) {
            self.held = Held::Waiting {
                lease,
                until: sent + self.timing.lease,
                deadline: self.timing.deadline(sent),
            };
        }
        self.renew.min(self.timing.lease)
    }

    /// The answer to a renewal of the lease for which `held` is true, sent at `sent`,
    /// come at `now`; `activate` makes what the holder issues with, once the wait is
    /// over. What it came to, and how long until the next step.
    pub fn renewed(
        &mut self,
        held: impl Fn(&L) -> bool,
        answer: Renewal<L>,
        (sent, now): (Duration, Duration),
        activate: impl FnOnce(&L) -> Option<A>,
    ) -> (Renewed, Duration) {
        let deadline = match &self.held {
            Held::Waiting {
                lease, deadline, ..
            }
            | Held::Active {
                lease, deadline, ..
            } if held(lease) => *deadline,
            _ => return (Renewed::Stale, self.renew),
        };
        let renewed = match answer {
            Renewal::Renewed(lease) => lease,
            Renewal::Lost => {
                self.held = Held::Idle;
                return (Renewed::Lost, Duration::ZERO);
            }
            Renewal::Failed if now >= deadline => {
                self.held = Held::Idle;
                return (Renewed::Lapsed, Duration::ZERO);
            }
            // Sooner than the usual renewal: the deadline approaches.
            Renewal::Failed => return (Renewed::Retry, self.renew / 4),
        };
        let deadline = self.timing.deadline(sent);
        let (outcome, next) = match std::mem::replace(&mut self.held, Held::Idle) {
            Held::Waiting { until, .. } if now < until => {
                self.held = Held::Waiting {
                    lease: renewed,
                    until,
                    deadline,
                };
                (Renewed::Waiting, until - now)
            }
            Held::Waiting { .. } => match activate(&renewed) {
                Some(issuing) => {
                    self.held = Held::Active {
                        lease: renewed,
                        deadline,
                        issuing,
                    };
                    (Renewed::Activated, Duration::ZERO)
                }
                None => (Renewed::NotActivated, self.renew),
            },
            Held::Active { issuing, .. } => {
                self.held = Held::Active {
                    lease: renewed,
                    deadline,
                    issuing,
                };
                // The next renewal a `renew` from now: the deadline stays a lease less
                // a tenth from this one.
                (Renewed::Kept, self.renew)
            }
            other => {
                self.held = other;
                (Renewed::Stale, Duration::ZERO)
            }
        };
        (outcome, next.min(self.renew).max(Duration::from_millis(1)))
    }

    /// What it issues with, its lease and deadline, while issuing; else why not at
    /// `now`.
    ///
    /// # Errors
    /// [`NotIssuing`]: idle, waiting, or stopped.
    pub fn issuing(&mut self, now: Duration) -> Result<(&L, &mut A, Duration), NotIssuing> {
        match &mut self.held {
            Held::Active {
                lease,
                deadline,
                issuing,
            } => Ok((lease, issuing, *deadline)),
            Held::Waiting { until, .. } => Err(NotIssuing::Waiting(until.saturating_sub(now))),
            Held::Idle => Err(NotIssuing::Idle),
            Held::Stopped => Err(NotIssuing::Stopped),
        }
    }

    /// Stops for good: what was held.
    pub fn stop(&mut self) -> Held<L, A> {
        std::mem::replace(&mut self.held, Held::Stopped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn holder() -> Holder<u32, &'static str> {
        Holder::new(Timing::new(ms(1_000), ms(200)), ms(300))
    }

    #[test]
    fn a_taken_worker_id_is_waited_out_for_a_lease_then_issues_until_its_deadline() {
        let mut h = holder();
        assert_eq!(h.step(), Step::Take);
        assert_eq!(h.taken(1, ms(100)), ms(300));
        assert_eq!(h.step(), Step::Renew(&1));
        assert_eq!(h.issuing(ms(200)).err(), Some(NotIssuing::Waiting(ms(900))));
        let same = |l: &u32| *l == 1;
        let r = h.renewed(same, Renewal::Renewed(1), (ms(400), ms(410)), |_| {
            Some("gen")
        });
        assert_eq!(r, (Renewed::Waiting, ms(300)));
        // A lease after the take: issuing, until a lease less a tenth after the last
        // renewal was sent.
        let r = h.renewed(same, Renewal::Renewed(1), (ms(1_100), ms(1_110)), |_| {
            Some("gen")
        });
        assert_eq!(r.0, Renewed::Activated);
        let (lease, issuing, deadline) = h.issuing(ms(1_200)).expect("issuing");
        assert_eq!((*lease, *issuing, deadline), (1, "gen", ms(2_000)));
        let r = h.renewed(same, Renewal::Renewed(1), (ms(1_400), ms(1_410)), |_| None);
        assert_eq!(r, (Renewed::Kept, ms(300)));
        assert_eq!(h.issuing(ms(0)).map(|i| i.2).ok(), Some(ms(2_300)));
    }

    #[test]
    fn a_lost_or_lapsed_lease_is_dropped_and_a_failure_before_the_deadline_retried() {
        let mut h = holder();
        h.taken(1, ms(0));
        let same = |l: &u32| *l == 1;
        assert_eq!(
            h.renewed(same, Renewal::Failed, (ms(100), ms(899)), |_| None),
            (Renewed::Retry, ms(75))
        );
        assert_eq!(
            h.renewed(|_| false, Renewal::Lost, (ms(100), ms(100)), |_| None)
                .0,
            Renewed::Stale,
            "another lease's answer"
        );
        assert_eq!(
            h.renewed(same, Renewal::Failed, (ms(100), ms(900)), |_| None)
                .0,
            Renewed::Lapsed
        );
        assert_eq!(h.step(), Step::Take);
        h.taken(2, ms(1_000));
        let two = |l: &u32| *l == 2;
        assert_eq!(
            h.renewed(two, Renewal::Lost, (ms(0), ms(0)), |_| None).0,
            Renewed::Lost
        );
        assert_eq!(h.issuing(ms(0)).err(), Some(NotIssuing::Idle));
        h.taken(3, ms(0));
        assert!(matches!(h.stop(), Held::Waiting { lease: 3, .. }));
        assert_eq!(h.step(), Step::Rest);
        assert_eq!(h.taken(4, ms(0)), ms(300));
        assert_eq!(h.issuing(ms(0)).err(), Some(NotIssuing::Stopped));
    }
}

//! [`Refusal`]: an operation refused as asked, typed. It says why ([`Reason`], a stable
//! code for scripts), what was refused (`message`), what an operator can do about it
//! (`hint`), and the per-database steps taken before it stopped (`notes`).
//!
//! The text an operator reads is the message then the notes; the CLI prints the hint on
//! a line of its own after it, and under `--json` gives every part as a field.

use std::fmt;

use crate::StoreError;
use crate::biz::InputError;
use crate::layout::PlanError;

/// Defines [`Reason`], its [`code`](Reason::code) and [`Reason::ALL`] from one list,
/// so that no variant can lack a code or be left out of the list.
macro_rules! reasons {
    ($($(#[$doc:meta])+ $variant:ident => $code:literal,)+) => {
        /// Why an operation was refused: a stable cause, whatever the wording of the
        /// message. Its [`code`](Reason::code) is what scripts branch on.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason {
            $($(#[$doc])+ $variant,)+
        }

        impl Reason {
            /// Every reason, in the order of the documentation's table.
            pub const ALL: &[Reason] = &[$(Reason::$variant),+];

            /// The stable snake_case name of the reason (`change_pending`), for
            /// scripts (`--json`) and logs.
            pub fn code(self) -> &'static str {
                match self {
                    $(Reason::$variant => $code,)+
                }
            }
        }
    };
}

reasons! {
    /// A layout change is under way or was cut off, or began while the command ran.
    ChangePending => "change_pending",
    /// Another command claimed the change's layout epoch first, or is running it.
    ChangeClaimed => "change_claimed",
    /// A later change superseded the one this command was running.
    ChangeSuperseded => "change_superseded",
    /// A database the operation needs did not answer.
    DatabaseUnanswered => "database_unanswered",
    /// The database named is not configured, or not in the layout.
    DatabaseUnknown => "database_unknown",
    /// A database that may hold live rows or worker IDs is missing from the
    /// configuration.
    DatabaseMissingFromConfig => "database_missing_from_config",
    /// A database to declare lost answers.
    DatabaseAnswers => "database_answers",
    /// The database's name was declared lost, and is never used again.
    DatabaseLost => "database_lost",
    /// The stored layout rows are malformed or disagree between databases.
    LayoutInvalid => "layout_invalid",
    /// The layout asked for cannot be made: no database left, or no class free.
    LayoutImpossible => "layout_impossible",
    /// A database went back in time while a change ran: a row is behind what was seen
    /// or witnessed.
    RowBehindWitness => "row_behind_witness",
    /// A biz's rows cannot be moved as they are (their classes do not fit the layouts).
    RowInvalid => "row_invalid",
    /// A change lost its races for a biz's rows against other writers, time after time.
    RacesLost => "races_lost",
    /// The biz exists on every database.
    BizExists => "biz_exists",
    /// The biz exists on some databases and not on others.
    BizPartial => "biz_partial",
    /// A write failed midway: the notes say what was done before it.
    WriteFailed => "write_failed",
    /// No token's hash starts with the prefix given.
    TokenUnknown => "token_unknown",
    /// The prefix given names several tokens.
    TokenAmbiguous => "token_ambiguous",
    /// The token is revoked.
    TokenRevoked => "token_revoked",
    /// A biz name that is not 1–63 characters of letters, digits, `_`, `-`, `.`.
    InvalidName => "invalid_name",
    /// An argument out of range, or that does not fit the databases' classes.
    InvalidArgument => "invalid_argument",
    /// An order or format that is invalid, or does not fit the biz's IDs.
    InvalidShape => "invalid_shape",
    /// Not an ID of the biz's format or order.
    InvalidId => "invalid_id",
    /// An import refused some bizs: a row with another class or a higher `max_id`.
    ImportConflict => "import_conflict",
    /// `biz recover` of a biz that does not restart its counter each period, whose
    /// rows are not all ahead of the databases' clocks, or recovered already.
    NothingToRecover => "nothing_to_recover",
}

/// An operation refused as asked; nothing was changed unless the notes say so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Why, for scripts to branch on.
    pub reason: Reason,
    /// What was refused, and what it left changed; no advice.
    pub message: String,
    /// What the operator can do about it, when there is advice to give.
    pub hint: Option<String>,
    /// The per-database steps taken before the refusal, one line each, printed after
    /// the message.
    pub notes: Vec<String>,
}

impl Refusal {
    /// A refusal for `reason` saying `message`, with no hint and no notes.
    pub fn new(reason: Reason, message: impl Into<String>) -> Refusal {
        Refusal {
            reason,
            message: message.into(),
            hint: None,
            notes: Vec::new(),
        }
    }

    /// With `hint`: what the operator can do.
    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Refusal {
        self.hint = Some(hint.into());
        self
    }

    /// With `notes`: the steps taken before it, one line each.
    #[must_use]
    pub fn notes(mut self, notes: Vec<String>) -> Refusal {
        self.notes = notes;
        self
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        for note in &self.notes {
            write!(f, "\n{note}")?;
        }
        Ok(())
    }
}

impl From<Refusal> for StoreError {
    fn from(refusal: Refusal) -> StoreError {
        StoreError::Refused(refusal)
    }
}

impl From<InputError> for StoreError {
    fn from(e: InputError) -> StoreError {
        StoreError::Refused(e.into())
    }
}

impl From<InputError> for Refusal {
    fn from(e: InputError) -> Refusal {
        let reason = match e {
            InputError::BizTag => Reason::InvalidName,
            InputError::Batch { .. } | InputError::Duration { .. } => Reason::InvalidArgument,
        };
        Refusal::new(reason, e.to_string())
    }
}

impl From<PlanError> for Refusal {
    fn from(e: PlanError) -> Refusal {
        let refusal = |reason| Refusal::new(reason, e.to_string());
        match &e {
            PlanError::NotInLayout { .. } => {
                refusal(Reason::DatabaseUnknown).hint("`segmint db list` shows the layout")
            }
            PlanError::Uncovered { .. } => {
                refusal(Reason::DatabaseMissingFromConfig).hint("configure every database")
            }
            PlanError::Lost { .. } => {
                refusal(Reason::DatabaseLost).hint("give a new database another name")
            }
            PlanError::Empty | PlanError::Classes(_) => refusal(Reason::LayoutImpossible),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_reason_has_a_distinct_snake_case_code() {
        let codes: HashSet<&str> = Reason::ALL.iter().map(|r| r.code()).collect();
        assert_eq!(codes.len(), Reason::ALL.len(), "{codes:?}");
        for code in codes {
            assert!(
                !code.is_empty()
                    && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                    && !code.starts_with('_')
                    && !code.ends_with('_'),
                "{code}"
            );
        }
    }

    #[test]
    fn the_text_is_the_message_then_the_notes_and_never_the_hint() {
        let refusal = Refusal::new(Reason::WriteFailed, "stopped midway")
            .hint("run the command again")
            .notes(vec!["\"pg0\": done".into(), "\"pg1\": FAILED: down".into()]);
        assert_eq!(
            refusal.to_string(),
            "stopped midway\n\"pg0\": done\n\"pg1\": FAILED: down"
        );
        assert_eq!(
            Refusal::new(Reason::BizExists, "exists").to_string(),
            "exists"
        );
    }

    #[test]
    fn a_plan_error_keeps_its_text_and_gains_its_hint() {
        let lost = PlanError::Lost {
            name: "pg1".into(),
            epoch: 2,
        };
        let refusal = Refusal::from(lost.clone());
        assert_eq!(refusal.reason, Reason::DatabaseLost);
        assert_eq!(refusal.message, lost.to_string());
        assert_eq!(
            refusal.hint.as_deref(),
            Some("give a new database another name")
        );
        assert_eq!(
            Refusal::from(InputError::BizTag).reason,
            Reason::InvalidName
        );
    }
}

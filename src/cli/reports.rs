//! What the admin commands that change something print: lines for people, or with
//! `--json` one JSON document on stdout for scripts, built from the same typed report.
//! A failure is the error's text on stderr with a hint when there is one, or under
//! `--json` a JSON document `{"error": {"kind", "reason", "message", "hint", "notes"}}`
//! on stderr ([`Failure`]); either way the command exits non-zero.
//!
//! The per-database steps the store reports as it goes (`"pg0": inserted at …`) are
//! carried as `notes`: their facts are in the typed fields beside them.

use segmint::config::ConfigError;
use segmint::segment::Residue;
use segmint::store::{Decoded, ShapeRow, StoreError};
use serde::Serialize;
use serde_json::{Value, json};

use super::Result;
use super::lists::class_json;

/// How a command prints what it did.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `report`: as JSON under `--json`, else as the lines `text` gives.
    pub fn emit<T: Serialize>(&self, report: &T, text: impl FnOnce(&T) -> Vec<String>) -> Result {
        if self.json {
            println!("{}", serde_json::to_string_pretty(report)?);
        } else {
            for line in text(report) {
                println!("{line}");
            }
        }
        Ok(())
    }
}

/// A failed command, as scripts read it (`{"error": …}` under `--json`).
#[derive(Debug, Serialize)]
pub struct Failure {
    /// A stable name for the kind of error (`refused`, `not_found`, `config` …).
    pub kind: &'static str,
    /// A refusal's stable cause (`change_pending`); `None` for other kinds.
    pub reason: Option<&'static str>,
    /// What failed; a refusal's notes are not in it.
    pub message: String,
    /// What an operator can do about it, when there is advice to give.
    pub hint: Option<String>,
    /// A refusal's per-database steps, printed after its message.
    pub notes: Vec<String>,
}

impl Failure {
    /// What `e` says, by its type: the store's errors and refusals, configuration
    /// errors, and anything else as a refusal without a reason.
    pub fn of(e: &(dyn std::error::Error + 'static)) -> Failure {
        let failure = |kind, hint: Option<&str>| Failure {
            kind,
            reason: None,
            message: e.to_string(),
            hint: hint.map(str::to_owned),
            notes: Vec::new(),
        };
        match e.downcast_ref::<StoreError>() {
            Some(StoreError::Refused(r)) => Failure {
                kind: "refused",
                reason: Some(r.reason.code()),
                message: r.message.clone(),
                hint: r.hint.clone(),
                notes: r.notes.clone(),
            },
            Some(e) => failure(e.kind(), e.hint().as_deref()),
            None if e.downcast_ref::<ConfigError>().is_some() => failure(
                "config",
                Some("fix the key named in the configuration file or its SEGMINT_ variable"),
            ),
            None => failure("refused", None),
        }
    }

    /// The document printed on stderr under `--json`.
    pub fn json(&self) -> Value {
        json!({ "error": self })
    }
}

/// `segmint migrate`, and the migrations `db add` runs first.
#[derive(Debug, Serialize)]
pub struct Migrated {
    pub databases: Vec<MigratedDatabase>,
    /// The cluster's membership (`segmint migrate` only): `None` when it could not be
    /// recorded (the command fails, saying why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub membership: Option<MembershipRecorded>,
}

/// The membership `segmint migrate` found or recorded.
#[derive(Debug, Serialize)]
pub struct MembershipRecorded {
    /// Whether this run recorded it (else a layout was recorded before).
    pub now: bool,
    /// The layout recorded now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<serde_json::Value>,
    /// The members and classes recorded now, for the text output.
    #[serde(skip)]
    pub members: String,
}

#[derive(Debug, Serialize)]
pub struct MigratedDatabase {
    pub name: String,
    /// The migrations applied now; empty when the schema was up to date.
    pub applied: Vec<String>,
    /// Why it could not be migrated.
    pub error: Option<String>,
}

impl Migrated {
    pub fn failed(&self) -> usize {
        self.databases.iter().filter(|d| d.error.is_some()).count()
    }

    pub fn lines(&self) -> Vec<String> {
        self.databases
            .iter()
            .map(|d| match (&d.error, d.applied.is_empty()) {
                (Some(e), _) => format!("\"{}\": FAILED: {e}", d.name),
                (None, true) => format!("\"{}\": schema up to date", d.name),
                (None, false) => format!("\"{}\": applied {}", d.name, d.applied.join(", ")),
            })
            .chain(self.membership.as_ref().map(|m| match m.now {
                true => format!(
                    "recorded the cluster's membership (layout epoch 0): {}",
                    m.members
                ),
                false => {
                    "membership: recorded before (servers follow the stored layout)".to_owned()
                }
            }))
            .collect()
    }
}

/// `segmint biz add`.
#[derive(Debug, Serialize)]
pub struct BizAdded {
    pub biz: String,
    pub step: i64,
    pub start: i64,
    /// The biz's own restriction (odd-only: `2`/`1`), if any.
    pub within: Option<Value>,
    pub description: String,
    /// Its order and format, when not plain sequential numbers.
    pub shape: Option<Value>,
    pub notes: Vec<String>,
}

impl BizAdded {
    pub fn new(
        biz: &str,
        (step, start): (i64, i64),
        within: Option<Residue>,
        description: &str,
        shape: Option<&ShapeRow>,
        notes: Vec<String>,
    ) -> BizAdded {
        BizAdded {
            biz: biz.to_owned(),
            step,
            start,
            within: within.map(class_json),
            description: description.to_owned(),
            shape: shape.map(|s| {
                if s.id_order == segmint::store::SEQUENCE {
                    return json!({"order": s.id_order, "sections": s.domain});
                }
                json!({
                    "order": s.id_order,
                    "domain": s.domain,
                    "prefix": s.prefix,
                    "width": s.width,
                    "base": s.base,
                    "check_char": s.check_char,
                    "ids_as_strings": s.as_string,
                })
            }),
            notes,
        }
    }
}

/// `segmint token add` and `token rotate`: the token is shown here once.
#[derive(Debug, Serialize)]
pub struct TokenIssued {
    pub token: String,
    /// The biz granted, when `token add` was given one.
    pub biz: Option<String>,
    /// Every biz granted, in the order given.
    pub bizs: Vec<String>,
    /// The prefix of the token rotated, for `token rotate`.
    pub rotated: Option<String>,
    pub expires_in_seconds: Option<u64>,
    /// For `token rotate`: how long the old token keeps working.
    pub grace_seconds: Option<u64>,
    /// Databases where the old token's expiry could not be lowered (`token rotate`).
    pub failed: Vec<String>,
    pub notes: Vec<String>,
}

/// `segmint token revoke` and `db fence`: what was changed, and where.
#[derive(Debug, Serialize)]
pub struct Changed {
    /// `token revoke` or `db fence`.
    pub command: &'static str,
    /// The token prefix revoked, or the database fenced.
    pub target: String,
    pub notes: Vec<String>,
}

/// `segmint id decode`.
pub fn decoded_json(d: &Decoded) -> Value {
    let mut doc = serde_json::to_value(d).unwrap_or(Value::Null);
    doc["class"] = d.class.map_or(Value::Null, class_json);
    doc
}

/// `segmint db add` and `db remove`.
#[derive(Debug, Serialize)]
pub struct LayoutChanged {
    /// `add`, `remove` or `lost`.
    pub change: &'static str,
    pub database: String,
    /// Migrations run first (`db add`).
    pub migrated: Vec<MigratedDatabase>,
    /// The steps of the change, as they were taken.
    pub steps: Vec<String>,
    /// The layout in force once the change is done.
    pub layout: Value,
}

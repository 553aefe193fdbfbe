//! Reading an issued ID back: `segmint id decode`.

use super::Cluster;
use crate::Catalog;
use crate::biz::BizTag;
use crate::segment::Residue;
use crate::store::{Reason, Refusal, StoreError};

/// What an issued ID stands for (`segmint id decode`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Decoded {
    pub biz: String,
    /// The biz's order: `sequential`, `shuffled` or `opaque`.
    pub order: &'static str,
    /// The ID as given.
    pub id: String,
    /// The number the ID's format spells.
    pub number: i64,
    /// The sequential value behind it, the biz's order undone.
    pub sequential: i64,
    /// The database whose class holds the sequential value; `None` when no class of
    /// the biz holds it (not an ID of this biz).
    pub database: Option<String>,
    #[serde(skip)]
    pub class: Option<Residue>,
    /// For a biz whose counter restarts each period: the period (`2026-11-25`) and
    /// the counter within it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counter: Option<i64>,
}

impl std::fmt::Display for Decoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Decoded {
            biz,
            order,
            id,
            number,
            sequential,
            ..
        } = self;
        write!(
            f,
            "biz `{biz}` ({order}): {id} is the number {number}, sequential value {sequential} ("
        )?;
        if let (Some(period), Some(counter)) = (&self.period, self.counter) {
            write!(f, "period {period}, counter {counter}; ")?;
        }
        match (&self.database, self.class) {
            (Some(db), Some(class)) => write!(f, "database \"{db}\", IDs ≡ {class})"),
            _ => write!(f, "no database's class holds it: not an ID of this biz)"),
        }
    }
}

impl Cluster {
    /// What `text`, an ID of `biz` as issued, stands for: its number, its sequential
    /// value (the biz's format and order undone) and the database whose class holds it.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown biz; [`StoreError::Refused`] when
    /// `text` is not an ID of the biz's format or order.
    pub async fn decode_id(
        &self,
        catalog: &Catalog,
        biz: &BizTag,
        text: &str,
    ) -> Result<Decoded, StoreError> {
        let entry = catalog
            .biz(biz.as_str())
            .ok_or_else(|| StoreError::NotFound(biz.to_string()))?;
        let refuse = |e: String| {
            StoreError::from(Refusal::new(Reason::InvalidId, format!("biz `{biz}`: {e}")))
        };
        let (number, sequential) = match &entry.shape {
            None => {
                let n = text
                    .parse::<i64>()
                    .map_err(|_| refuse(format!("`{text}` is not a decimal ID")))?;
                (n, n)
            }
            Some(shape) => {
                // A periodic biz's number, as Tinyid's routes give it, reads too.
                let n = match (shape.format.decode(text), &shape.period) {
                    (Ok(n), _) => n,
                    (Err(e), Some(_)) => text.parse::<i64>().map_err(|_| refuse(e.to_string()))?,
                    (Err(e), None) => return Err(refuse(e.to_string())),
                };
                (
                    n,
                    shape
                        .ordering
                        .invert(n)
                        .map_err(|e| refuse(e.to_string()))?,
                )
            }
        };
        let holder = entry
            .classes
            .iter()
            .find(|(_, class)| class.contains(sequential));
        let order = entry.shape.as_ref().map_or("sequential", |s| {
            crate::shape::order_name(s.ordering.order())
        });
        let period = match entry.shape.as_ref().and_then(|s| s.period.as_ref()) {
            Some(p) => {
                let (code, counter) = p.split(number).ok_or_else(|| {
                    refuse(format!("{number} holds no date: not an ID of this biz"))
                })?;
                if counter < p.start() {
                    return Err(refuse(format!(
                        "{number} holds counter {counter}, below the first of each period ({}): not an ID of this biz",
                        p.start()
                    )));
                }
                Some((p.label(code), counter))
            }
            None => None,
        };
        Ok(Decoded {
            period: period.as_ref().map(|(label, _)| label.clone()),
            counter: period.map(|(_, counter)| counter),
            biz: biz.to_string(),
            order,
            id: text.to_string(),
            number,
            sequential,
            database: holder.map(|(db, _)| self.names[*db].clone()),
            class: holder.map(|(_, class)| *class),
        })
    }
}

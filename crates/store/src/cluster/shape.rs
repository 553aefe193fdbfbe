//! Reading an issued ID back: `segmint id decode`.

use super::Store;
use crate::biz::BizTag;
use crate::store::StoreError;

impl Store {
    /// What `text`, an ID of `biz` as issued, stands for: its number, its sequential
    /// value (the biz's format and order undone) and the database whose class holds it.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown biz; [`StoreError::Refused`] when
    /// `text` is not an ID of the biz's format or order.
    pub async fn decode_id(&self, biz: &BizTag, text: &str) -> Result<String, StoreError> {
        let catalog = self.refresh_since(self.clock.now()).await;
        let entry = catalog
            .biz(biz.as_str())
            .ok_or_else(|| StoreError::NotFound(biz.to_string()))?;
        let refuse = |e: String| StoreError::Refused(format!("biz `{biz}`: {e}"));
        let (number, sequential) = match &entry.shape {
            None => {
                let n = text
                    .parse::<i64>()
                    .map_err(|_| refuse(format!("`{text}` is not a decimal ID")))?;
                (n, n)
            }
            Some(shape) => {
                let n = shape
                    .format
                    .decode(text)
                    .map_err(|e| refuse(e.to_string()))?;
                (
                    n,
                    shape
                        .ordering
                        .invert(n)
                        .map_err(|e| refuse(e.to_string()))?,
                )
            }
        };
        let from = entry
            .classes
            .iter()
            .find(|(_, class)| class.contains(sequential))
            .map(|(db, class)| format!("database \"{}\", IDs ≡ {class}", self.names[*db]))
            .unwrap_or_else(|| "no database's class holds it: not an ID of this biz".into());
        let order = entry.shape.as_ref().map_or("sequential", |s| {
            crate::shape::order_name(s.ordering.order())
        });
        Ok(format!(
            "biz `{biz}` ({order}): {text} is the number {number}, sequential value {sequential} ({from})"
        ))
    }
}

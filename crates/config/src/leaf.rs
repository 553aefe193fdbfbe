//! The `[leaf]` table: whether Leaf's routes are served, for which bizs and where.

use serde::{Deserialize, Serialize};

use crate::biz::BizTag;
use crate::server::own_address;
use crate::{ConfigError, biz_list};

/// `[leaf]` as written.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawLeaf {
    enabled: bool,
    bizs: Vec<String>,
    bind: Option<String>,
}

/// Leaf's routes (`/api/segment/get/{key}`, `/decodeSnowflakeId`): they take no token,
/// so they are served only when enabled, and only for the bizs listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafConfig {
    /// Whether Leaf's routes are served at all; off by default.
    pub enabled: bool,
    /// The bizs `/api/segment/get/{key}` may serve; empty: none (the decode route only).
    pub bizs: Vec<BizTag>,
    /// Where Leaf's routes are served instead of `bind`; `None`: on `bind`.
    pub bind: Option<String>,
}

impl LeafConfig {
    /// Whether `/api/segment/get/{key}` may serve `biz`.
    pub fn serves(&self, biz: &BizTag) -> bool {
        self.bizs.contains(biz)
    }
}

impl RawLeaf {
    /// Validates `[leaf]`; `others` are the addresses already taken, with their keys.
    pub(super) fn validate(self, others: &[(&str, &str)]) -> Result<LeafConfig, ConfigError> {
        let bizs = biz_list("leaf.bizs", &self.bizs)?;
        if let Some(bind) = &self.bind {
            own_address(
                "leaf.bind",
                bind,
                others,
                "name another port or interface, or leave leaf.bind unset to serve Leaf's routes on `bind`",
            )?;
        }
        Ok(LeafConfig {
            enabled: self.enabled,
            bizs,
            bind: self.bind,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::with_one_database as load;

    #[test]
    fn off_by_default() {
        let leaf = load("").unwrap().leaf;
        assert!(!leaf.enabled);
        assert!(leaf.bizs.is_empty());
        assert_eq!(leaf.bind, None);
    }

    #[test]
    fn bizs_and_bind_are_read() {
        let leaf = load(
            "[leaf]\nenabled = true\nbizs = [\"order\", \"user\", \"order\"]\nbind = \"127.0.0.1:8080\"",
        )
        .unwrap()
        .leaf;
        assert!(leaf.enabled);
        let bizs: Vec<&str> = leaf.bizs.iter().map(|b| b.as_str()).collect();
        assert_eq!(bizs, ["order", "user"]);
        assert_eq!(leaf.bind.as_deref(), Some("127.0.0.1:8080"));
    }

    #[test]
    fn bad_values_name_their_key() {
        for (text, key) in [
            ("[leaf]\nbizs = [\"ok\", \"no spaces\"]", "`leaf.bizs[1]`"),
            ("[leaf]\nepoch_ms = 1000", "epoch_ms"),
            ("[leaf]\nbind = \"nowhere\"", "`leaf.bind`"),
            ("[leaf]\nbind = \"127.0.0.1:9999\"", "`leaf.bind`"),
            ("[leaf]\nenabled = \"yes\"", "leaf.enabled"),
            ("[leaf]\nbizz = []", "bizz"),
        ] {
            let msg = load(text).unwrap_err();
            assert!(msg.contains(key), "{text}: {msg}");
        }
    }
}

//! The `[resp]` table: the Redis-protocol listener, off unless it has an address, and
//! the table that maps Redis keys to bizs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::biz::BizTag;
use crate::server::own_address;
use crate::{ConfigError, invalid};

/// The most threads `resp.threads` may ask for.
const MAX_THREADS: usize = 256;

/// `resp.max_queued` unless set: a transaction of many commands fits, a client queueing
/// without end is stopped at a few megabytes.
const MAX_QUEUED: usize = 10_000;

/// The most `resp.max_queued` may be.
const MAX_QUEUED_BOUND: usize = 1_000_000;

/// `resp.max_clients` unless set, as Redis's `maxclients`.
const MAX_CLIENTS: usize = 10_000;

/// The most `resp.max_clients` may be.
const MAX_CLIENTS_BOUND: usize = 1_000_000;

/// `resp.max_queued_ids` unless set: the IDs of one `EXEC`'s reply, some 20 MB of it.
const MAX_QUEUED_IDS: usize = 1_000_000;

/// The most `resp.max_queued_ids` may be.
const MAX_QUEUED_IDS_BOUND: usize = 100_000_000;

/// `[resp]` as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawResp {
    bind: Option<String>,
    threads: usize,
    keys: BTreeMap<String, String>,
    max_queued: usize,
    max_queued_ids: usize,
    max_clients: usize,
}

impl Default for RawResp {
    fn default() -> RawResp {
        RawResp {
            bind: None,
            threads: 0,
            keys: BTreeMap::new(),
            max_queued: MAX_QUEUED,
            max_queued_ids: MAX_QUEUED_IDS,
            max_clients: MAX_CLIENTS,
        }
    }
}

/// The Redis-protocol listener: where, and which keys name which bizs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespConfig {
    /// Where Redis clients connect; `None`: no listener (the default).
    pub bind: Option<String>,
    /// Threads serving Redis clients, each its connections' whole life; `0`: one per
    /// CPU core.
    pub threads: usize,
    /// Keys and key prefixes (those ending in `:`) mapped to bizs, so that existing
    /// keys (`order_id`, `msg_seq:{conversation}`) keep their names. A key not listed
    /// names a biz itself: `order` is biz `order`, `chat:1041` key `1041` of biz `chat`.
    pub keys: Vec<(String, BizTag)>,
    /// The most commands one `MULTI` may queue; the command past it discards the
    /// transaction (its `EXEC` answers `EXECABORT`).
    pub max_queued: usize,
    /// The most IDs the commands of one `MULTI` may ask for together (`IDS key n`
    /// counts `n`, any other command one): the command past it discards the
    /// transaction, as past `max_queued`.
    pub max_queued_ids: usize,
    /// The most connections open at once; one past it is answered `-ERR max number of
    /// clients reached` and closed, as by Redis.
    pub max_clients: usize,
}

impl Default for RespConfig {
    fn default() -> RespConfig {
        RespConfig {
            bind: None,
            threads: 0,
            keys: Vec::new(),
            max_queued: MAX_QUEUED,
            max_queued_ids: MAX_QUEUED_IDS,
            max_clients: MAX_CLIENTS,
        }
    }
}

impl RawResp {
    /// Validates `[resp]`; `others` are the addresses already taken, with their keys.
    pub(super) fn validate(self, others: &[(&str, &str)]) -> Result<RespConfig, ConfigError> {
        if let Some(bind) = &self.bind {
            own_address("resp.bind", bind, others, "name another port")?;
        }
        if self.threads > MAX_THREADS {
            return Err(invalid(
                "resp.threads",
                format!("at most {MAX_THREADS} (0: one per CPU core)"),
            ));
        }
        if !(1..=MAX_QUEUED_BOUND).contains(&self.max_queued) {
            return Err(invalid(
                "resp.max_queued",
                format!("from 1 to {MAX_QUEUED_BOUND} commands"),
            ));
        }
        if !(1..=MAX_QUEUED_IDS_BOUND).contains(&self.max_queued_ids) {
            return Err(invalid(
                "resp.max_queued_ids",
                format!("from 1 to {MAX_QUEUED_IDS_BOUND} IDs"),
            ));
        }
        if !(1..=MAX_CLIENTS_BOUND).contains(&self.max_clients) {
            return Err(invalid(
                "resp.max_clients",
                format!("from 1 to {MAX_CLIENTS_BOUND} connections"),
            ));
        }
        let mut keys = Vec::with_capacity(self.keys.len());
        for (key, biz) in self.keys {
            let name = format!("resp.keys.{key}");
            if key.is_empty() || key.len() > 255 || key.chars().any(char::is_control) {
                return Err(invalid(
                    name,
                    "a key or prefix is 1 to 255 bytes without control characters",
                ));
            }
            let biz = BizTag::parse(&biz).map_err(|e| invalid(&name, e.to_string()))?;
            keys.push((key, biz));
        }
        Ok(RespConfig {
            bind: self.bind,
            threads: self.threads,
            keys,
            max_queued: self.max_queued,
            max_queued_ids: self.max_queued_ids,
            max_clients: self.max_clients,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_bizs_and_the_address_is_its_own() {
        let raw = |bind: Option<&str>, keys: &[(&str, &str)]| RawResp {
            bind: bind.map(str::to_owned),
            keys: keys
                .iter()
                .map(|(k, b)| (k.to_string(), b.to_string()))
                .collect(),
            ..RawResp::default()
        };
        let ok = raw(
            Some("127.0.0.1:6380"),
            &[("order_id", "order"), ("msg_seq:", "chat")],
        )
        .validate(&[("bind", "127.0.0.1:9999")])
        .unwrap();
        assert_eq!(ok.keys.len(), 2);
        let key = |e: ConfigError| match e {
            ConfigError::Invalid { key, .. } => key,
            other => panic!("{other:?}"),
        };
        let taken = raw(Some("127.0.0.1:9999"), &[]).validate(&[("bind", "127.0.0.1:9999")]);
        assert_eq!(key(taken.unwrap_err()), "resp.bind");
        let bad = raw(None, &[("order_id", "no way")]).validate(&[]);
        assert_eq!(key(bad.unwrap_err()), "resp.keys.order_id");
        let many = RawResp {
            threads: MAX_THREADS + 1,
            ..RawResp::default()
        };
        assert_eq!(key(many.validate(&[]).unwrap_err()), "resp.threads");
        for max_queued in [0, MAX_QUEUED_BOUND + 1] {
            let queue = RawResp {
                max_queued,
                ..RawResp::default()
            };
            assert_eq!(key(queue.validate(&[]).unwrap_err()), "resp.max_queued");
        }
        for max_queued_ids in [0, MAX_QUEUED_IDS_BOUND + 1] {
            let ids = RawResp {
                max_queued_ids,
                ..RawResp::default()
            };
            assert_eq!(key(ids.validate(&[]).unwrap_err()), "resp.max_queued_ids");
        }
        let clients = RawResp {
            max_clients: 0,
            ..RawResp::default()
        };
        assert_eq!(key(clients.validate(&[]).unwrap_err()), "resp.max_clients");
        assert_eq!(
            RawResp::default().validate(&[]).unwrap(),
            RespConfig::default()
        );
    }
}

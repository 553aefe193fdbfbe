//! Sequence bizs through the client: per-key numbers that only go up
//! (`/v1/sequences/{biz}/…`). Numbers are never cached here (each one is the server's
//! answer); what the client adds is the route: it reads the biz's route table once
//! (`…/routes`), works out each key's section as the servers do
//! ([`section_of`](segmint_core::sequence::section_of)), and sends the request
//! straight to the section's owner, saving the hop a server would forward it on. When
//! the owner refuses (the section moved) or does not answer, the table is read again
//! and the request goes to a configured server, which forwards it.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use segmint_core::sequence::{check_key, key_hash, section_of};
use serde_json::{Value, json};

use super::{ClientError, ErrorKind};
use crate::fetch::{Called, Servers};

/// A sequence biz's handle; cheap to clone. See [`Client::sequence`](crate::Client::sequence).
#[derive(Clone)]
pub struct Sequence {
    inner: Arc<SequenceInner>,
}

struct SequenceInner {
    biz: String,
    servers: Arc<Servers>,
    /// Plain lock: read for each request, written when the table is read again.
    routes: RwLock<Option<Routes>>,
}

/// A route table as `…/routes` answers it.
#[derive(Debug, Clone, serde::Deserialize)]
struct Routes {
    sections: u32,
    version: String,
    owners: Vec<Option<String>>,
}

/// How long a request keeps being sent again (to the owner, then after reading the
/// routes again to a configured server, and so on) while sections move or an owner is
/// gone: longer than a failover with the servers' default settings (2.1 s).
const MOVE_WAIT: Duration = Duration::from_secs(5);

/// The first pause between two tries; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(25);
const MAX_PAUSE: Duration = Duration::from_millis(400);

impl Sequence {
    pub(super) fn new(biz: &str, servers: Arc<Servers>) -> Sequence {
        Sequence {
            inner: Arc::new(SequenceInner {
                biz: biz.to_owned(),
                servers,
                routes: RwLock::new(None),
            }),
        }
    }

    /// The next number of `key`: above every number answered for it before.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a key the servers would refuse; [`ErrorKind::Refused`]
    /// when a server refused (unknown biz, bad token, not a sequence biz);
    /// [`ErrorKind::Unavailable`] when no server could answer.
    pub async fn next(&self, key: &str) -> Result<i64, ClientError> {
        Ok(*self.take(key, 1).await?.end())
    }

    /// `count` consecutive numbers of `key` (1 to 10,000), all above every number
    /// answered for it before.
    ///
    /// # Errors
    /// As [`Sequence::next`].
    pub async fn take(&self, key: &str, count: i64) -> Result<RangeInclusive<i64>, ClientError> {
        let count = count.to_string();
        let answer = self
            .send("next", &[("key", key), ("count", &count)])
            .await?;
        let number = |field: &str| answer[field].as_i64();
        match (number("first"), number("number")) {
            (Some(first), Some(last)) => Ok(first..=last),
            _ => Err(self.invalid(&answer)),
        }
    }

    /// The number `key` is at, taking none: at or above every number answered for it,
    /// below every number answered next.
    ///
    /// # Errors
    /// As [`Sequence::next`].
    pub async fn current(&self, key: &str) -> Result<i64, ClientError> {
        let answer = self.send("current", &[("key", key)]).await?;
        answer["number"]
            .as_i64()
            .ok_or_else(|| self.invalid(&answer))
    }

    /// The next number of each of `keys`, in one request (a server answers the keys
    /// of its sections and forwards the rest once per owner).
    ///
    /// # Errors
    /// As [`Sequence::next`].
    pub async fn next_many(&self, keys: &[&str]) -> Result<Vec<i64>, ClientError> {
        for key in keys {
            self.check(key)?;
        }
        let body = json!({ "keys": keys });
        let path = format!("/v1/sequences/{}/next", self.inner.biz);
        let answer = self.call(None, &path, &[], Some(&body)).await?;
        let numbers: Option<Vec<i64>> = answer["numbers"]
            .as_array()
            .filter(|n| n.len() == keys.len())
            .map(|n| n.iter().filter_map(|n| n["number"].as_i64()).collect());
        numbers
            .filter(|n| n.len() == keys.len())
            .ok_or_else(|| self.invalid(&answer))
    }

    /// The version of the route table held, once one was read.
    pub fn route_version(&self) -> Option<String> {
        self.inner.routes.read().as_ref().map(|r| r.version.clone())
    }

    fn check(&self, key: &str) -> Result<(), ClientError> {
        check_key(key).map_err(|e| ErrorKind::Config(format!("key `{key}`: {e}")).into())
    }

    /// Sends `…/{what}` with `query` (the key first) to the key's section's owner,
    /// then, when it refused or failed, to the configured servers (which forward), the
    /// route table read again between.
    async fn send(&self, what: &str, query: &[(&str, &str)]) -> Result<Value, ClientError> {
        let key = query.first().map_or("", |(_, k)| k);
        self.check(key)?;
        let path = format!("/v1/sequences/{}/{what}", self.inner.biz);
        let started = Instant::now();
        let mut pause = FIRST_PAUSE;
        let mut attempt = 0usize;
        loop {
            attempt += 1;
            if self.inner.routes.read().is_none() {
                self.read_routes().await;
            }
            // The owner first, then a configured server, in turn.
            let owner = match attempt % 2 {
                1 => self.owner_of(key),
                _ => None,
            };
            match self.call(owner.as_deref(), &path, query, None).await {
                Ok(answer) => return Ok(answer),
                Err(e) if retried(&e) && started.elapsed() < MOVE_WAIT => {
                    self.read_routes().await;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The owner of `key`'s section by the table held, if any.
    fn owner_of(&self, key: &str) -> Option<String> {
        let routes = self.inner.routes.read();
        let routes = routes.as_ref()?;
        let section = section_of(key_hash(key), routes.sections) as usize;
        routes.owners.get(section).cloned().flatten()
    }

    /// Reads the route table from a configured server; keeps the one held if none
    /// answers.
    async fn read_routes(&self) {
        let path = format!("/v1/sequences/{}/routes", self.inner.biz);
        if let Ok(answer) = self.call(None, &path, &[], None).await
            && let Ok(routes) = serde_json::from_value::<Routes>(answer)
            && routes.owners.len() == routes.sections as usize
        {
            *self.inner.routes.write() = Some(routes);
        }
    }

    /// One request to `base` (or to the configured servers in turn).
    async fn call(
        &self,
        base: Option<&str>,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        match self.inner.servers.call(base, path, query, body).await {
            Ok(answer) => Ok(answer),
            Err(Called::Refused {
                server,
                status,
                message,
            }) => Err(ErrorKind::Refused {
                biz: self.inner.biz.clone(),
                server,
                status,
                message,
            }
            .into()),
            Err(Called::Failed(reasons)) => Err(self.unavailable(reasons)),
        }
    }

    fn unavailable(&self, reasons: String) -> ClientError {
        ErrorKind::Unavailable {
            biz: self.inner.biz.clone(),
            reasons,
        }
        .into()
    }

    fn invalid(&self, answer: &Value) -> ClientError {
        ErrorKind::InvalidSegment {
            biz: self.inner.biz.clone(),
            server: String::new(),
            reason: format!("not a sequence answer: {answer}"),
        }
        .into()
    }
}

/// Whether a request refused this way is worth sending again after reading the routes:
/// the section moved (503), or its owner did not answer.
fn retried(e: &ClientError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Unavailable { .. } | ErrorKind::Refused { status: 503, .. }
    )
}

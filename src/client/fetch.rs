//! Fetching segments from the servers: in turn, skipping those backing off.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::{ClientBuilder, ClientError, Protocol};
use crate::backoff::{Backoff, Failures};
use crate::segment::{Residue, SegmentRange};

pub(super) struct Servers {
    servers: Vec<Server>,
    http: reqwest::Client,
    token: String,
    protocol: Protocol,
    /// Where the next fetch starts, so that fetches spread over the servers.
    turn: AtomicUsize,
    /// How long a failed server is tried last.
    backoff: Backoff,
}

struct Server {
    base: String,
    /// Plain mutex: held only to read or update the failures, never across an await.
    health: Mutex<Failures>,
}

/// What one server answered.
enum Answer {
    Segment(SegmentRange),
    /// Permanent for this request: do not try elsewhere.
    Refused(ClientError),
    /// The server failed; try another.
    Failed(String),
}

impl Servers {
    pub(super) fn new(settings: &ClientBuilder, token: String) -> Result<Servers, ClientError> {
        let mut servers = Vec::new();
        for url in &settings.servers {
            let base = url.trim_end_matches('/').to_string();
            if !(base.starts_with("http://") || base.starts_with("https://")) {
                return Err(ClientError::Config(format!(
                    "servers: `{url}` is not an http:// or https:// URL"
                )));
            }
            servers.push(Server {
                base,
                health: Mutex::new(Failures::default()),
            });
        }
        let http = reqwest::Client::builder()
            .timeout(settings.request_timeout)
            .connect_timeout(settings.request_timeout)
            // No idle reaper: its background task would outlive a dropped client by up
            // to its interval. Idle connections the server closed are noticed on use.
            .pool_idle_timeout(None)
            .build()
            .map_err(|e| ClientError::Config(format!("HTTP client: {e}")))?;
        Ok(Servers {
            servers,
            http,
            token,
            protocol: settings.protocol,
            turn: AtomicUsize::new(0),
            backoff: Backoff {
                initial: settings.backoff_initial,
                max: settings.backoff_max,
            },
        })
    }

    /// One segment of `biz` from the first server, in turn, that gives one. Servers
    /// backing off are tried last, so that a fetch still succeeds if they are back.
    pub(super) async fn fetch(&self, biz: &str) -> Result<SegmentRange, ClientError> {
        let n = self.servers.len();
        let start = self.turn.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let (mut order, resting): (Vec<usize>, Vec<usize>) = (0..n)
            .map(|k| (start + k) % n)
            .partition(|&i| self.servers[i].health.lock().is_over(now));
        order.extend(resting);
        let mut reasons = Vec::new();
        for i in order {
            let server = &self.servers[i];
            match self.ask(server, biz).await {
                Answer::Segment(range) => {
                    *server.health.lock() = Failures::default();
                    return Ok(range);
                }
                Answer::Refused(e) => return Err(e),
                Answer::Failed(reason) => {
                    let backoff = server.health.lock().fail(self.backoff, Instant::now());
                    tracing::warn!(server = %server.base, %reason, ?backoff, "segmint server failed; backing off");
                    reasons.push(format!("{}: {reason}", server.base));
                }
            }
        }
        Err(ClientError::Unavailable {
            biz: biz.to_string(),
            reasons: reasons.join("; "),
        })
    }

    async fn ask(&self, server: &Server, biz: &str) -> Answer {
        let request = match self.protocol {
            Protocol::V1 => self
                .http
                .get(format!("{}/v1/segments/{biz}", server.base))
                .bearer_auth(&self.token),
            Protocol::Tinyid => self
                .http
                .get(format!("{}/tinyid/id/nextSegmentIdSimple", server.base))
                .query(&[("bizType", biz), ("token", self.token.as_str())]),
        };
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return Answer::Failed(without_url(&e)),
        };
        let status = response.status();
        let header_error = response
            .headers()
            .get("x-segmint-error")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = match response.text().await {
            Ok(b) => b,
            Err(e) => return Answer::Failed(without_url(&e)),
        };
        if status.is_server_error() {
            return Answer::Failed(format!("HTTP {status}: {}", body.trim()));
        }
        let refused = |message: String| {
            Answer::Refused(ClientError::Refused {
                biz: biz.to_string(),
                server: server.base.clone(),
                status: status.as_u16(),
                message,
            })
        };
        if status.is_client_error() {
            return refused(error_message(&body));
        }
        let parsed = match self.protocol {
            Protocol::V1 => parse_v1(&body),
            Protocol::Tinyid => match header_error {
                // Tinyid's simple routes answer 200 with an empty body on errors: code 5
                // is a token problem, final; code 6 is anything else, mostly passing
                // (no database reachable, contention, a server stopping), so another
                // server is tried, as after a 5xx of the v1 API.
                Some(e) if body.trim().is_empty() => {
                    return if e.starts_with("5:") {
                        refused(e)
                    } else {
                        Answer::Failed(e)
                    };
                }
                _ => parse_tinyid(&body),
            },
        };
        match parsed {
            Ok(range) => Answer::Segment(range),
            Err(reason) => Answer::Refused(ClientError::InvalidSegment {
                biz: biz.to_string(),
                server: server.base.clone(),
                reason,
            }),
        }
    }
}

/// A reqwest error and its causes, without the URL, which may hold the token.
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "<server>");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The message of a v1 error body, or the body itself.
fn error_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| body.trim().to_string())
}

/// The segment `(current, max]` of class `delta, remainder`, checked.
fn segment(current: i64, max: i64, delta: i64, remainder: i64) -> Result<SegmentRange, String> {
    let residue = Residue::new(delta, remainder).map_err(|e| e.to_string())?;
    let step = max
        .checked_sub(current)
        .filter(|s| *s >= 1)
        .ok_or_else(|| format!("max_id {max} is not above current_id {current}"))?;
    SegmentRange::after(current, step, residue).map_err(|e| e.to_string())
}

/// segmint's `/v1/segments` answer.
fn parse_v1(body: &str) -> Result<SegmentRange, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("not JSON ({e}): {body}"))?;
    let field = |name: &str| {
        v[name]
            .as_i64()
            .ok_or_else(|| format!("no integer `{name}` in {body}"))
    };
    segment(
        field("current_id")?,
        field("max_id")?,
        field("delta")?,
        field("remainder")?,
    )
}

/// Tinyid's `currentId,loadingId,maxId,delta,remainder`.
fn parse_tinyid(body: &str) -> Result<SegmentRange, String> {
    let fields: Vec<i64> = body
        .trim()
        .split(',')
        .map(|f| f.trim().parse::<i64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("not five integers: {body}"))?;
    match fields.as_slice() {
        [current, _loading, max, delta, remainder] => segment(*current, *max, *delta, *remainder),
        _ => Err(format!("not five integers: {body}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_protocols_alike() {
        let v1 = parse_v1(
            r#"{"biz":"a","current_id":100,"max_id":110,"step":10,"delta":2,"remainder":1,"loading_id":102}"#,
        )
        .unwrap();
        let tinyid = parse_tinyid("100,102,110,2,1").unwrap();
        assert_eq!(v1, tinyid);
        assert_eq!(v1.ids().collect::<Vec<_>>(), [101, 103, 105, 107, 109]);
    }

    #[test]
    fn refuses_malformed_segments() {
        assert!(parse_tinyid("").is_err());
        assert!(parse_tinyid("1,2,3").is_err());
        assert!(parse_tinyid("10,12,5,1,0").is_err(), "max below current");
        assert!(parse_tinyid("10,12,20,0,0").is_err(), "delta 0");
        assert!(
            parse_tinyid("10,12,20,2,2").is_err(),
            "remainder out of range"
        );
        assert!(parse_v1(r#"{"current_id":1}"#).is_err());
        assert!(parse_v1("<html>").is_err());
    }

    #[test]
    fn error_bodies_give_their_message() {
        assert_eq!(
            error_message(r#"{"error":{"code":"not_found","message":"biz `x` does not exist"}}"#),
            "biz `x` does not exist"
        );
        assert_eq!(error_message(" plain "), "plain");
    }
}

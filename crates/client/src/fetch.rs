//! Fetching segments from the servers, in turn, skipping those backing off; and
//! giving the unissued rest back to the server that handed it out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::{ClientBuilder, ClientError, ErrorKind, Protocol};
use crate::backoff::{Backoff, Failures};
use crate::segment::{Residue, SegmentRange};

/// The header that names the client on fetches and give-backs.
pub(super) const CLIENT_HEADER: &str = "x-segmint-client";

pub(super) struct Servers {
    servers: Vec<Server>,
    http: reqwest::Client,
    token: String,
    protocol: Protocol,
    /// Sent as `X-Segmint-Client`, so that a server gives back only its own segments
    /// to the client that holds them.
    client_id: String,
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

/// A segment and where it came from: what a give-back must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fetched {
    pub range: SegmentRange,
    /// Index of the server that handed it out.
    pub server: usize,
    /// The database and the row's version after the reservation; absent over
    /// Tinyid's protocol, whose segments cannot be given back, and for a segment a
    /// server carved out of its own buffer (a biz whose counter restarts each period).
    pub origin: Option<(String, i64)>,
    /// For a biz whose counter restarts each period: when the segment's period ends,
    /// by the clock of the server that handed it out (its answer's `period_left_ms`
    /// counted from when the request was sent). None of its IDs is issued after.
    pub expires: Option<Instant>,
}

/// One segment a closing client still holds, as the give-back route takes it.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Returned {
    pub database: String,
    pub version: i64,
    /// The last ID issued from it; `None` when none was.
    pub last_issued: Option<i64>,
}

/// What one server answered to a give-back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
pub(super) struct GivenBack {
    pub given_back: u64,
    pub wasted: u64,
}

/// What one server answered.
enum Answer {
    Segment(Segment),
    /// Permanent for this request: do not try elsewhere.
    Refused(ClientError),
    /// The server failed; try another.
    Failed(String),
}

impl Servers {
    pub(super) fn new(
        settings: &ClientBuilder,
        token: String,
        client_id: String,
    ) -> Result<Servers, ClientError> {
        let mut servers = Vec::new();
        for url in &settings.servers {
            let base = url.trim_end_matches('/').to_string();
            if !(base.starts_with("http://") || base.starts_with("https://")) {
                return Err(ErrorKind::Config(format!(
                    "servers: `{url}` is not an http:// or https:// URL"
                ))
                .into());
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
            .map_err(|e| ErrorKind::Config(format!("HTTP client: {e}")))?;
        Ok(Servers {
            servers,
            http,
            token,
            client_id,
            protocol: settings.protocol,
            turn: AtomicUsize::new(0),
            backoff: Backoff {
                initial: settings.backoff_initial,
                max: settings.backoff_max,
            },
        })
    }

    pub(super) fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The servers in the order to try them: from the next one in turn, those backing
    /// off last.
    fn in_turn(&self) -> Vec<usize> {
        let n = self.servers.len();
        let start = self.turn.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let (mut order, resting): (Vec<usize>, Vec<usize>) = (0..n)
            .map(|k| (start + k) % n)
            .partition(|&i| self.servers[i].health.lock().is_over(now));
        order.extend(resting);
        order
    }

    /// One segment of `biz` from the first server, in turn, that gives one, of about
    /// `step` (the server bounds it) or of the row's step. Servers backing off are
    /// tried last, so that a fetch still succeeds if they are back.
    pub(super) async fn fetch(&self, biz: &str, step: Option<i64>) -> Result<Fetched, ClientError> {
        let mut reasons = Vec::new();
        for i in self.in_turn() {
            let server = &self.servers[i];
            match self.ask(server, biz, step).await {
                Answer::Segment(segment) => {
                    *server.health.lock() = Failures::default();
                    return Ok(Fetched {
                        range: segment.range,
                        server: i,
                        origin: segment.origin,
                        expires: segment.expires,
                    });
                }
                Answer::Refused(e) => return Err(e),
                Answer::Failed(reason) => {
                    let backoff = server.health.lock().fail(self.backoff, Instant::now());
                    tracing::warn!(server = %server.base, %reason, ?backoff, "segmint server failed; backing off");
                    reasons.push(format!("{}: {reason}", server.base));
                }
            }
        }
        Err(ErrorKind::Unavailable {
            biz: biz.to_string(),
            reasons: reasons.join("; "),
        }
        .into())
    }

    /// Gives `segments` of `biz` back to server `server`.
    ///
    /// # Errors
    /// Why the server did not answer with a give-back summary.
    pub(super) async fn give_back(
        &self,
        server: usize,
        biz: &str,
        segments: &[Returned],
    ) -> Result<GivenBack, String> {
        let Some(server) = self.servers.get(server) else {
            return Err(format!("no server {server}"));
        };
        let body = serde_json::json!({ "client": self.client_id, "segments": segments });
        let response = self
            .http
            .post(format!("{}/v1/segments/{biz}/return", server.base))
            .bearer_auth(&self.token)
            .header(CLIENT_HEADER, &self.client_id)
            .json(&body)
            .send()
            .await
            .map_err(|e| without_url(&e))?;
        let status = response.status();
        let body = response.text().await.map_err(|e| without_url(&e))?;
        if !status.is_success() {
            return Err(format!(
                "{}: HTTP {status}: {}",
                server.base,
                error_message(&body)
            ));
        }
        serde_json::from_str(&body)
            .map_err(|e| format!("{}: not a give-back answer ({e}): {body}", server.base))
    }

    async fn ask(&self, server: &Server, biz: &str, step: Option<i64>) -> Answer {
        let request = match self.protocol {
            Protocol::V1 => {
                let request = self
                    .http
                    .get(format!("{}/v1/segments/{biz}", server.base))
                    .bearer_auth(&self.token)
                    .header(CLIENT_HEADER, &self.client_id);
                match step {
                    Some(step) => request.query(&[("step", step)]),
                    None => request,
                }
            }
            Protocol::Tinyid => self
                .http
                .get(format!("{}/tinyid/id/nextSegmentIdSimple", server.base))
                .query(&[("bizType", biz), ("token", self.token.as_str())]),
        };
        let sent = Instant::now();
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
            Answer::Refused(
                ErrorKind::Refused {
                    biz: biz.to_string(),
                    server: server.base.clone(),
                    status: status.as_u16(),
                    message,
                }
                .into(),
            )
        };
        if status.is_client_error() {
            return refused(error_message(&body));
        }
        let parsed = match self.protocol {
            Protocol::V1 => parse_v1(&body, sent),
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
                _ => parse_tinyid(&body).map(|range| Segment {
                    range,
                    origin: None,
                    expires: None,
                }),
            },
        };
        match parsed {
            Ok(segment) => Answer::Segment(segment),
            Err(reason) => Answer::Refused(
                ErrorKind::InvalidSegment {
                    biz: biz.to_string(),
                    server: server.base.clone(),
                    reason,
                }
                .into(),
            ),
        }
    }
}

/// Why a [`Servers::call`] got no answer.
pub(super) enum Called {
    /// A server refused: a 4xx, or a 503 (the sequence's section is moving).
    Refused {
        server: String,
        status: u16,
        message: String,
    },
    /// No server answered (each one's reason).
    Failed(String),
}

impl Servers {
    /// A JSON request for `path` with `query` (GET, or POST with `body`) to `base`
    /// alone, or to the configured servers in turn (those backing off last) until one
    /// answers. A 503 is a refusal (a sequence's section moving: the caller reads the
    /// routes again), another 5xx or no answer tries the next server.
    pub(super) async fn call(
        &self,
        base: Option<&str>,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value, Called> {
        let bases: Vec<(Option<usize>, &str)> = match base {
            Some(base) => vec![(None, base)],
            None => self
                .in_turn()
                .into_iter()
                .map(|i| (Some(i), self.servers[i].base.as_str()))
                .collect(),
        };
        let mut reasons = Vec::new();
        for (i, base) in bases {
            let url = format!("{base}{path}");
            let request = match body {
                Some(body) => self.http.post(url).json(body),
                None => self.http.get(url),
            };
            let request = request.query(query).bearer_auth(&self.token);
            let failed = match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    match response.text().await {
                        Ok(text) if status.is_success() => {
                            if let Some(i) = i {
                                *self.servers[i].health.lock() = Failures::default();
                            }
                            return serde_json::from_str(&text)
                                .map_err(|e| Called::Failed(format!("{base}: not JSON: {e}")));
                        }
                        Ok(text) if status.is_client_error() || status.as_u16() == 503 => {
                            return Err(Called::Refused {
                                server: base.to_owned(),
                                status: status.as_u16(),
                                message: error_message(&text),
                            });
                        }
                        Ok(text) => format!("HTTP {status}: {}", error_message(&text)),
                        Err(e) => without_url(&e),
                    }
                }
                Err(e) => without_url(&e),
            };
            if let Some(i) = i {
                self.servers[i]
                    .health
                    .lock()
                    .fail(self.backoff, Instant::now());
            }
            reasons.push(format!("{base}: {failed}"));
        }
        Err(Called::Failed(reasons.join("; ")))
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

/// A segment as one server answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment {
    range: SegmentRange,
    origin: Option<(String, i64)>,
    expires: Option<Instant>,
}

/// segmint's `/v1/segments` answer to a request sent at `sent`: the segment, its
/// database and version when the server reports them (servers before give-back did
/// not), and when its period ends for a biz whose counter restarts each period.
fn parse_v1(body: &str, sent: Instant) -> Result<Segment, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("not JSON ({e}): {body}"))?;
    let field = |name: &str| {
        v[name]
            .as_i64()
            .ok_or_else(|| format!("no integer `{name}` in {body}"))
    };
    let range = segment(
        field("current_id")?,
        field("max_id")?,
        field("delta")?,
        field("remainder")?,
    )?;
    let origin = v["database"]
        .as_str()
        .zip(v["version"].as_i64())
        .map(|(db, version)| (db.to_string(), version));
    let expires = match &v["period_left_ms"] {
        serde_json::Value::Null => None,
        left => {
            let left = left
                .as_u64()
                .ok_or_else(|| format!("`period_left_ms` is not a whole number of ms in {body}"))?;
            // Counted from when the request was sent: the period ends no later by this
            // client's reckoning than by the server's.
            Some(sent + std::time::Duration::from_millis(left))
        }
    };
    Ok(Segment {
        range,
        origin,
        expires,
    })
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
            Instant::now(),
        )
        .unwrap();
        let tinyid = parse_tinyid("100,102,110,2,1").unwrap();
        assert_eq!((v1.origin, v1.expires), (None, None));
        let v1 = v1.range;
        assert_eq!(v1, tinyid);
        assert_eq!(v1.ids().collect::<Vec<_>>(), [101, 103, 105, 107, 109]);
    }

    #[test]
    fn a_v1_answer_names_its_database_and_version() {
        let segment = parse_v1(
            r#"{"biz":"a","database":"pg1","version":7,"current_id":0,"max_id":10,"step":10,"delta":1,"remainder":0}"#,
            Instant::now(),
        )
        .unwrap();
        assert_eq!(segment.range.len(), 10);
        assert_eq!(segment.origin, Some(("pg1".to_string(), 7)));
    }

    #[test]
    fn a_periodic_segment_expires_when_its_period_ends_counted_from_the_request() {
        let sent = Instant::now();
        let segment = parse_v1(
            r#"{"biz":"a","current_id":20261125000000,"max_id":20261125000010,"step":10,"delta":1,"remainder":0,"period":"2026-11-25","period_left_ms":1500}"#,
            sent,
        )
        .unwrap();
        assert_eq!(
            segment.origin, None,
            "a carved segment cannot be given back"
        );
        assert_eq!(
            segment.expires,
            Some(sent + std::time::Duration::from_millis(1500))
        );
        assert!(
            parse_v1(
                r#"{"current_id":0,"max_id":1,"delta":1,"remainder":0,"period_left_ms":-1}"#,
                sent
            )
            .is_err()
        );
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
        assert!(parse_v1(r#"{"current_id":1}"#, Instant::now()).is_err());
        assert!(parse_v1("<html>", Instant::now()).is_err());
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

//! Steady traffic on a set of servers while a test changes the cluster under them:
//! Tinyid's `nextIdSimple` and the v1 API, each request tried on the servers in turn
//! until one answers, and the client library; what each stream got is checked for
//! duplicates and gaps.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use segmint::client::Client;

/// What one stream of requests got.
#[derive(Default)]
pub struct Stream {
    pub what: String,
    pub biz: &'static str,
    pub ids: Vec<i64>,
    /// Requests answered, and attempts that failed (then tried on the next server).
    pub answered: u64,
    pub failed: u64,
    pub longest_gap: Duration,
}

/// Steady traffic on every server: Tinyid's `nextIdSimple`, v1 and the client library.
pub struct Traffic {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Stream>>,
    /// Each stream's answers so far, as its task counts them.
    answered: Vec<Arc<AtomicU64>>,
}

/// The answers [`check_streams`] asks of every stream, and that [`Traffic::finish`]
/// waits for: a stream that got fewer says little about the change it ran through.
const ENOUGH_ANSWERS: u64 = 51;

/// How long [`Traffic::finish`] waits for every stream to have had enough answers.
const ENOUGH_WITHIN: Duration = Duration::from_secs(30);

/// The HTTP routes under traffic.
#[derive(Clone, Copy)]
enum Route {
    /// Tinyid's `nextIdSimple` for 10 IDs of `plain`.
    Tinyid,
    /// `/v1/ids/odd?count=10`.
    V1,
}

/// One request on `route` to the server at `base`.
async fn ask(
    http: &reqwest::Client,
    route: Route,
    base: &str,
    token: &str,
) -> Result<Vec<i64>, String> {
    match route {
        Route::Tinyid => {
            let r = http
                .get(format!(
                    "{base}/tinyid/id/nextIdSimple?bizType=plain&token={token}&batchSize=10"
                ))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = r.status();
            let body = r.text().await.map_err(|e| e.to_string())?;
            if !status.is_success() {
                return Err(format!("{status}: {body}"));
            }
            body.trim()
                .split(',')
                .map(|x| x.parse::<i64>().map_err(|e| format!("{e}: {body}")))
                .collect()
        }
        Route::V1 => {
            let r = http
                .get(format!("{base}/v1/ids/odd?count=10"))
                .bearer_auth(token)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = r.status();
            let body: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
            if !status.is_success() {
                return Err(format!("{status}: {body}"));
            }
            serde_json::from_value(body["ids"].clone()).map_err(|e| e.to_string())
        }
    }
}

/// Requests on `route` until `stop`, each to the servers in turn until one answers
/// (a failed attempt is counted, then the next server is tried). Panics when none
/// answers for 20 s.
async fn requests(
    route: Route,
    mut s: Stream,
    bases: Vec<String>,
    token: String,
    (stop, answered): (Arc<AtomicBool>, Arc<AtomicU64>),
) -> Stream {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let (mut next, mut last) = (0, Instant::now());
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let ids = loop {
            let base = &bases[next % bases.len()];
            next += 1;
            match ask(&http, route, base, &token).await {
                Ok(ids) => break ids,
                Err(e) => {
                    s.failed += 1;
                    assert!(
                        started.elapsed() < Duration::from_secs(20),
                        "{}: no server answered for 20 s; last: {e}",
                        s.what
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        s.longest_gap = s.longest_gap.max(last.elapsed());
        last = Instant::now();
        s.answered += 1;
        answered.store(s.answered, Ordering::Relaxed);
        s.ids.extend(ids);
        // Paced, as the client library's stream is: unpaced, each stream takes as much
        // CPU as the servers answer with, from every test running beside it.
        tokio::time::sleep(PACE).await;
    }
    s
}

/// The pause between two requests of one stream: some hundreds a second each.
const PACE: Duration = Duration::from_millis(2);

impl Traffic {
    pub fn start(bases: Vec<String>, plain_token: &str, odd_token: &str) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let answered: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::default()).collect();
        let http = |route, what: &str, biz, token: &str, count: &Arc<AtomicU64>| {
            let stream = Stream {
                what: what.into(),
                biz,
                ..Stream::default()
            };
            tokio::spawn(requests(
                route,
                stream,
                bases.clone(),
                token.to_owned(),
                (stop.clone(), count.clone()),
            ))
        };
        let mut tasks = vec![
            http(
                Route::Tinyid,
                "nextIdSimple",
                "plain",
                plain_token,
                &answered[0],
            ),
            http(
                Route::V1,
                "/v1/ids (odd-only biz)",
                "odd",
                odd_token,
                &answered[1],
            ),
        ];
        // The client library, caching segments of `plain` and failing over by itself.
        {
            let stop = stop.clone();
            let count = answered[2].clone();
            let client = Client::builder()
                .servers(bases.clone())
                .token(plain_token)
                .request_timeout(Duration::from_secs(2))
                .wait_timeout(Duration::from_secs(20))
                .backoff(Duration::from_millis(50), Duration::from_millis(200))
                .build()
                .unwrap();
            tasks.push(tokio::spawn(async move {
                let mut s = Stream {
                    what: "client library".into(),
                    biz: "plain",
                    ..Stream::default()
                };
                let biz = client.biz("plain").unwrap();
                let mut last = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    match biz.next_ids(5).await {
                        Ok(ids) => {
                            s.longest_gap = s.longest_gap.max(last.elapsed());
                            last = Instant::now();
                            s.answered += 1;
                            count.store(s.answered, Ordering::Relaxed);
                            s.ids.extend(ids);
                        }
                        Err(e) => panic!("client library: {e}"),
                    }
                    // Paced: a client that issues from its cache would otherwise take
                    // the whole CPU.
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
                client.close().await;
                s
            }));
        }
        Traffic {
            stop,
            tasks,
            answered,
        }
    }

    /// Stops the traffic, once every stream has had enough answers to judge it by
    /// ([`ENOUGH_ANSWERS`]; waiting at most [`ENOUGH_WITHIN`], after which
    /// [`check_streams`] says which stream fell short): on a loaded machine a phase of
    /// a test may end before a stream got them.
    pub async fn finish(self) -> Vec<Stream> {
        let deadline = Instant::now() + ENOUGH_WITHIN;
        while Instant::now() < deadline
            && self
                .answered
                .iter()
                .any(|a| a.load(Ordering::Relaxed) < ENOUGH_ANSWERS)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.stop.store(true, Ordering::Relaxed);
        let mut streams = Vec::new();
        for t in self.tasks {
            streams.push(t.await.expect("traffic task"));
        }
        streams
    }
}

/// Checks what every stream got: no ID twice per biz (across the streams), the
/// odd-only biz odd, more than 50 answers and no gap of 5 s between two; prints
/// each stream's figures.
pub fn check_streams(streams: &[Stream]) {
    let mut by_biz: std::collections::HashMap<&str, HashSet<i64>> = Default::default();
    for s in streams {
        assert!(
            s.answered >= ENOUGH_ANSWERS,
            "{}: only {} answers",
            s.what,
            s.answered
        );
        let set = by_biz.entry(s.biz).or_default();
        for &id in &s.ids {
            assert!(
                set.insert(id),
                "duplicate ID {id} of `{}` ({})",
                s.biz,
                s.what
            );
            if s.biz == "odd" {
                assert_eq!(id % 2, 1, "{id} of the odd-only biz is even");
            }
        }
        let attempts = s.answered + s.failed;
        eprintln!(
            "{}: {} requests answered, {} attempts failed and were retried on another server (first-try availability {:.3} %), longest gap between answers {:?}, {} IDs",
            s.what,
            s.answered,
            s.failed,
            100.0 * s.answered as f64 / attempts as f64,
            s.longest_gap,
            s.ids.len()
        );
        assert!(
            s.longest_gap < Duration::from_secs(5),
            "{}: no answer for {:?}",
            s.what,
            s.longest_gap
        );
    }
}

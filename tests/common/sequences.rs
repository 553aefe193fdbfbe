//! Clients of a sequence biz `chat` on real servers, and the check every test of them
//! makes: each key's numbers are distinct, and an answer received before a request was
//! sent is below that request's (real-time order).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::http::{Resp, try_send};

/// Keys the clients send, spread over the sections.
pub const KEYS: usize = 40;

/// `segmint biz add` of the sequence biz `chat` these tests serve: a step of 50 and 8
/// sections, so that a few keys cover every section and bounds move often.
pub const ADD_CHAT: [&str; 8] = [
    "biz",
    "add",
    "chat",
    "--sequence",
    "--step",
    "50",
    "--sections",
    "8",
];

/// One answered request.
#[derive(Debug, Clone)]
pub struct Op {
    pub key: usize,
    pub sent: Instant,
    pub received: Instant,
    pub number: i64,
}

impl Op {
    /// The answer `r` (a 200) to a request for `key` sent at `sent`, received now.
    pub fn answered(key: usize, sent: Instant, r: &Resp) -> Op {
        Op {
            key,
            sent,
            received: Instant::now(),
            number: r.json()["number"].as_i64().unwrap(),
        }
    }
}

/// `GET /v1/sequences/chat/next?key=k{key}` on `base`.
pub async fn next(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    key: usize,
) -> Result<Resp, String> {
    let url = format!("{base}/v1/sequences/chat/next?key=k{key}");
    try_send(http.get(url).bearer_auth(token))
        .await
        .map_err(|e| e.to_string())
}

/// Clients sending random keys to random servers until `stop`; every answer recorded.
/// A refusal must be a 503 (the section moving, the databases failing) and a failed
/// request a server gone: anything else fails the test.
pub fn clients(
    bases: Vec<String>,
    token: String,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Op>>> {
    clients_of(KEYS, bases, token, stop)
}

/// [`clients`] of the keys `0..keys`.
pub fn clients_of(
    keys: usize,
    bases: Vec<String>,
    token: String,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Op>>> {
    (0..6)
        .map(|c| {
            let (bases, token, stop) = (bases.clone(), token.clone(), stop.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .build()
                    .unwrap();
                let mut ops = Vec::new();
                let mut n: usize = c * 7919;
                while !stop.load(Ordering::Relaxed) {
                    n = n
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let (key, server) = ((n >> 33) % keys, (n >> 20) % bases.len());
                    let sent = Instant::now();
                    match next(&http, &bases[server], &token, key).await {
                        Ok(r) if r.status == 200 => {
                            ops.push(Op::answered(key, sent, &r));
                            // Paced: unpaced, the clients take as much CPU as the
                            // servers answer with, from every test running beside them.
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        Ok(r) => {
                            assert_eq!(r.status, 503, "{r:?}");
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
                ops
            })
        })
        .collect()
}

/// Every key's numbers are distinct, and each answer received before a request was
/// sent is below that request's number.
pub fn assert_linearizable(ops: &[Op]) {
    let mut by_key: HashMap<usize, Vec<&Op>> = HashMap::new();
    for op in ops {
        by_key.entry(op.key).or_default().push(op);
    }
    for (key, mut list) in by_key {
        let mut numbers: Vec<i64> = list.iter().map(|o| o.number).collect();
        numbers.sort_unstable();
        let before = numbers.len();
        numbers.dedup();
        assert_eq!(numbers.len(), before, "key k{key}: a number answered twice");
        // Sweep the requests by when they were sent, the answers by when they came.
        let mut by_received = list.clone();
        by_received.sort_by_key(|o| o.received);
        list.sort_by_key(|o| o.sent);
        let (mut done, mut highest): (usize, Option<&Op>) = (0, None);
        for op in &list {
            while done < by_received.len() && by_received[done].received < op.sent {
                let earlier = by_received[done];
                if highest.is_none_or(|h| earlier.number > h.number) {
                    highest = Some(earlier);
                }
                done += 1;
            }
            if let Some(h) = highest {
                assert!(
                    h.number < op.number,
                    "key k{key}: {} was answered before a request sent later got {}",
                    h.number,
                    op.number
                );
            }
        }
    }
}

/// Sends every key through `base` (forwarded to the owners) until each is answered;
/// how long that took, and the answers.
pub async fn until_every_key_answers(
    base: &str,
    token: &str,
    limit: Duration,
) -> (Duration, Vec<Op>) {
    until_keys_answer(KEYS, base, token, limit).await
}

/// [`until_every_key_answers`] of the keys `0..keys`.
pub async fn until_keys_answer(
    keys: usize,
    base: &str,
    token: &str,
    limit: Duration,
) -> (Duration, Vec<Op>) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let start = Instant::now();
    let mut waiting: Vec<usize> = (0..keys).collect();
    let mut ops = Vec::new();
    let mut last = String::new();
    while !waiting.is_empty() {
        assert!(
            start.elapsed() < limit,
            "keys {waiting:?} unanswered after {limit:?}; the last answer: {last}"
        );
        let mut still = Vec::new();
        for key in waiting {
            let sent = Instant::now();
            match next(&http, base, token, key).await {
                Ok(r) if r.status == 200 => ops.push(Op::answered(key, sent, &r)),
                Ok(r) => {
                    assert_eq!(r.status, 503, "{r:?}");
                    last = format!("{r:?}");
                    still.push(key);
                }
                Err(e) => {
                    last = e.to_string();
                    still.push(key);
                }
            }
        }
        waiting = still;
    }
    (start.elapsed(), ops)
}

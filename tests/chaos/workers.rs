//! The workers: requests on every API and the client library, and what they received.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/tinyid/id/nextIdSimple?batchSize=N`: comma-separated text.
    NextIdSimple,
    /// `/tinyid/id/nextId?batchSize=N`: Tinyid's JSON envelope.
    NextId,
    /// `/v1/ids/{biz}?count=N`.
    V1Ids,
    /// `/v1/segments/{biz}`: a whole segment.
    V1Segment,
    /// `/tinyid/id/nextSegmentIdSimple`: a whole segment, as text.
    SegmentSimple,
}

/// One kind of request a worker sends: route, biz and the largest count (a random
/// count `1..=max` each time; `max = 1` for single IDs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Op {
    pub(crate) route: Route,
    pub(crate) biz: Biz,
    pub(crate) max: usize,
}

pub(crate) const fn op(route: Route, biz: Biz, max: usize) -> Op {
    Op { route, biz, max }
}

/// What a worker does: HTTP requests drawn from `ops`, or the client library.
pub(crate) enum Plan {
    Http(&'static [Op]),
    /// A client (shared by the workers of `group`) issuing `biz`.
    Client {
        group: usize,
    },
}

pub(crate) struct WorkerSpec {
    pub(crate) name: &'static str,
    pub(crate) api: &'static str,
    pub(crate) plan: Plan,
}

pub(crate) fn worker_specs() -> Vec<WorkerSpec> {
    use Biz::*;
    use Route::*;
    vec![
        WorkerSpec {
            name: "compat-simple",
            api: "Tinyid nextIdSimple, batchSize 1..100",
            plan: Plan::Http(const { &[op(NextIdSimple, Chaos, 100), op(NextIdSimple, Odd, 100)] }),
        },
        WorkerSpec {
            name: "compat-json",
            api: "Tinyid nextId, batchSize 1..100",
            plan: Plan::Http(const { &[op(NextId, Chaos, 100), op(NextId, Odd, 100)] }),
        },
        WorkerSpec {
            name: "compat-single",
            api: "Tinyid nextIdSimple / nextId, one ID",
            plan: Plan::Http(
                const {
                    &[
                        op(NextIdSimple, Chaos, 1),
                        op(NextId, Chaos, 1),
                        op(NextId, Odd, 1),
                    ]
                },
            ),
        },
        WorkerSpec {
            name: "v1-single",
            api: "v1 /v1/ids, one ID",
            plan: Plan::Http(const { &[op(V1Ids, Chaos, 1), op(V1Ids, Odd, 1)] }),
        },
        WorkerSpec {
            name: "v1-batch",
            api: "v1 /v1/ids?count=1..100",
            plan: Plan::Http(const { &[op(V1Ids, Chaos, 100), op(V1Ids, Odd, 100)] }),
        },
        WorkerSpec {
            name: "v1-segments",
            api: "v1 /v1/segments",
            plan: Plan::Http(const { &[op(V1Segment, Chaos, 1), op(V1Segment, Odd, 1)] }),
        },
        WorkerSpec {
            name: "compat-segments",
            api: "Tinyid nextSegmentIdSimple",
            plan: Plan::Http(const { &[op(SegmentSimple, Chaos, 1), op(SegmentSimple, Odd, 1)] }),
        },
        WorkerSpec {
            name: "client-a1",
            api: "client library (v1 protocol), `chaos`",
            plan: Plan::Client { group: 0 },
        },
        WorkerSpec {
            name: "client-a2",
            api: "client library, same client as client-a1",
            plan: Plan::Client { group: 0 },
        },
        WorkerSpec {
            name: "client-b",
            api: "client library (Tinyid protocol), `odd`",
            plan: Plan::Client { group: 1 },
        },
    ]
}

/// The clients: biz and protocol of each group.
pub(crate) const CLIENT_GROUPS: [(Biz, Protocol); 2] =
    [(Biz::Chaos, Protocol::V1), (Biz::Odd, Protocol::Tinyid)];

/// Why a request failed: a category for the report and whether it may happen at all
/// under these faults (an outage may; a refused token or a malformed answer may not).
pub(crate) struct Failure {
    pub(crate) category: String,
    pub(crate) detail: String,
    pub(crate) expected: bool,
}

impl Failure {
    pub(crate) fn outage(category: impl Into<String>, detail: impl Into<String>) -> Failure {
        Failure {
            category: category.into(),
            detail: detail.into(),
            expected: true,
        }
    }

    pub(crate) fn unexpected(category: impl Into<String>, detail: impl Into<String>) -> Failure {
        Failure {
            category: category.into(),
            detail: detail.into(),
            expected: false,
        }
    }

    pub(crate) fn transport(e: &reqwest::Error) -> Failure {
        let category = if e.is_timeout() {
            "no answer within 2 s"
        } else if e.is_connect() {
            "connection refused"
        } else {
            "connection lost"
        };
        Failure::outage(category, e.to_string())
    }

    /// A Tinyid-style error message (code 6): outages are expected, the rest is not.
    pub(crate) fn tinyid(route: &str, message: &str) -> Failure {
        if message.contains("no database reachable") {
            Failure::outage(format!("{route}: unavailable"), message)
        } else if message.contains("compare-and-set") {
            Failure::outage(format!("{route}: contention"), message)
        } else if message.contains("new database layout") {
            Failure::outage(format!("{route}: layout change"), message)
        } else {
            Failure::unexpected(format!("{route}: error"), message)
        }
    }
}

/// A successful answer.
pub(crate) enum Answer {
    Ids(Vec<i64>),
    Segment { seg: Seg, database: Option<String> },
}

pub(crate) async fn request(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    op: Op,
    n: usize,
) -> Result<Answer, Failure> {
    let biz = op.biz.name();
    let req = match op.route {
        Route::NextIdSimple => http.get(format!(
            "{base}/tinyid/id/nextIdSimple?bizType={biz}&token={token}&batchSize={n}"
        )),
        Route::NextId => http.get(format!(
            "{base}/tinyid/id/nextId?bizType={biz}&token={token}&batchSize={n}"
        )),
        Route::V1Ids => http
            .get(format!("{base}/v1/ids/{biz}?count={n}"))
            .bearer_auth(token),
        Route::V1Segment => http
            .get(format!("{base}/v1/segments/{biz}"))
            .bearer_auth(token),
        Route::SegmentSimple => http.get(format!(
            "{base}/tinyid/id/nextSegmentIdSimple?bizType={biz}&token={token}"
        )),
    };
    let r = req.send().await.map_err(|e| Failure::transport(&e))?;
    let status = r.status().as_u16();
    let header = r
        .headers()
        .get("x-segmint-error")
        .map(|v| v.to_str().unwrap_or("?").to_string());
    let body = r.text().await.map_err(|e| Failure::transport(&e))?;
    let route = format!("{:?}", op.route);
    let bad = |what: String| {
        Failure::unexpected(
            format!("{route}: malformed answer"),
            format!("{what}: {body}"),
        )
    };
    let json = || {
        serde_json::from_str::<serde_json::Value>(&body).map_err(|e| bad(format!("not JSON ({e})")))
    };
    match op.route {
        Route::NextIdSimple | Route::SegmentSimple => {
            if let Some(reason) = header {
                return Err(match reason.split_once(": ") {
                    Some(("6", message)) => Failure::tinyid(&route, message),
                    _ => Failure::unexpected(format!("{route}: refused"), reason),
                });
            }
            if status != 200 {
                return Err(Failure::unexpected(format!("{route}: HTTP {status}"), body));
            }
            let numbers: Vec<i64> = body
                .trim()
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(|e| bad(format!("not numbers ({e})")))?;
            if op.route == Route::NextIdSimple {
                return Ok(Answer::Ids(numbers));
            }
            let [current, _loading, max, delta, remainder] = numbers[..] else {
                return Err(bad("not 5 numbers".into()));
            };
            Ok(Answer::Segment {
                seg: Seg {
                    current,
                    max,
                    delta,
                    remainder,
                },
                database: None,
            })
        }
        Route::NextId => {
            let v = json()?;
            match v["code"].as_i64() {
                Some(200) => serde_json::from_value(v["data"].clone())
                    .map(Answer::Ids)
                    .map_err(|e| bad(format!("no IDs ({e})"))),
                Some(6) => Err(Failure::tinyid(&route, v["message"].as_str().unwrap_or(""))),
                _ => Err(Failure::unexpected(format!("{route}: refused"), body)),
            }
        }
        Route::V1Ids | Route::V1Segment => {
            let v = json()?;
            if status != 200 {
                let code = v["error"]["code"].as_str().unwrap_or("?").to_string();
                let category = format!("{route}: HTTP {status} {code}");
                return Err(if status == 503 {
                    Failure::outage(category, body)
                } else {
                    Failure::unexpected(category, body)
                });
            }
            if op.route == Route::V1Ids {
                return serde_json::from_value(v["ids"].clone())
                    .map(Answer::Ids)
                    .map_err(|e| bad(format!("no IDs ({e})")));
            }
            let field = |k: &str| v[k].as_i64().ok_or_else(|| bad(format!("no `{k}`")));
            let seg = Seg {
                current: field("current_id")?,
                max: field("max_id")?,
                delta: field("delta")?,
                remainder: field("remainder")?,
            };
            if field("count")? != seg.count() as i64
                || v["first_id"].as_i64() != seg.bounds().map(|b| b.0)
                || field("step")? != seg.max - seg.current
            {
                return Err(bad(
                    "count, first_id or step disagree with the segment".into()
                ));
            }
            Ok(Answer::Segment {
                seg,
                database: v["database"].as_str().map(str::to_string),
            })
        }
    }
}

/// What one worker saw.
pub(crate) struct Stats {
    pub(crate) name: &'static str,
    pub(crate) api: &'static str,
    pub(crate) requests: u64,
    pub(crate) ok: u64,
    /// IDs received (for a segment, every ID in it).
    pub(crate) ids: u64,
    pub(crate) segments: u64,
    /// Successes once every fault was repaired.
    pub(crate) ok_when_calm: u64,
    pub(crate) failures: BTreeMap<String, u64>,
    /// Failures that no fault explains, and answers that break an invariant.
    pub(crate) unexpected: Vec<String>,
    pub(crate) longest_gap: Duration,
    /// When the longest gap began and ended (seconds into the run).
    pub(crate) gap_at: (f64, f64),
    /// Every gap of a second or more, `(from, to)` in seconds into the run.
    pub(crate) gaps: Vec<(f64, f64)>,
    pub(crate) last_ok: Instant,
    pub(crate) latencies_us: Vec<u32>,
}

impl Stats {
    pub(crate) fn new(name: &'static str, api: &'static str) -> Stats {
        Stats {
            name,
            api,
            requests: 0,
            ok: 0,
            ids: 0,
            segments: 0,
            ok_when_calm: 0,
            failures: BTreeMap::new(),
            unexpected: Vec::new(),
            longest_gap: Duration::ZERO,
            gap_at: (0.0, 0.0),
            gaps: Vec::new(),
            last_ok: Instant::now(),
            latencies_us: Vec::new(),
        }
    }

    pub(crate) fn answered(&mut self, started: Instant) {
        self.requests += 1;
        self.latencies_us
            .push(started.elapsed().as_micros().min(u32::MAX as u128) as u32);
    }

    pub(crate) fn gap_until(&mut self, ctx: &Ctx, now: Instant) {
        let gap = now - self.last_ok;
        let at = (ctx.secs(self.last_ok), ctx.secs(now));
        if gap > self.longest_gap {
            self.longest_gap = gap;
            self.gap_at = at;
        }
        if gap >= Duration::from_secs(1) {
            self.gaps.push(at);
        }
    }

    pub(crate) fn success(&mut self, ctx: &Ctx, started: Instant, ids: u64) {
        self.answered(started);
        let now = Instant::now();
        self.ok += 1;
        self.ids += ids;
        self.gap_until(ctx, now);
        self.last_ok = now;
        if ctx.phase() == CALMING {
            if self.ok_when_calm == 0 {
                ctx.back.fetch_add(1, Ordering::SeqCst);
            }
            self.ok_when_calm += 1;
        }
    }

    pub(crate) fn failure(&mut self, ctx: &Ctx, started: Instant, f: Failure) {
        self.answered(started);
        *self.failures.entry(f.category.clone()).or_default() += 1;
        if !f.expected {
            self.violation(ctx, format!("{}: {}", f.category, f.detail));
        }
    }

    pub(crate) fn violation(&mut self, ctx: &Ctx, msg: String) {
        if self.unexpected.len() < 20 {
            eprintln!("chaos: {} at t={:.1}s: {msg}", self.name, ctx.now());
            self.unexpected
                .push(format!("{} at t={:.1}s: {msg}", self.name, ctx.now()));
        }
    }
}

/// A worker's result: its statistics and the IDs it received.
pub(crate) struct Outcome {
    pub(crate) stats: Stats,
    pub(crate) ledger: Ledger,
    /// For a client worker, its group (its IDs are checked against the client's
    /// segments, which count as received instead).
    pub(crate) group: Option<usize>,
}

pub(crate) async fn http_worker(
    ctx: Arc<Ctx>,
    w: usize,
    spec: &WorkerSpec,
    ops: &'static [Op],
    mut rng: Rng,
) -> Outcome {
    let http = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(REQUEST_TIMEOUT)
        .build()
        .unwrap();
    let mut stats = Stats::new(spec.name, spec.api);
    let mut ledger = Ledger::new();
    let source = w as u32;
    let mut server = w % SERVERS;
    while ctx.phase() != STOPPING {
        let op = ops[rng.below(ops.len())];
        let n = rng.between(1, op.max as u64) as usize;
        let token = &ctx.tokens[op.biz.index()];
        let started = Instant::now();
        match request(&http, &ctx.servers[server].base, token, op, n).await {
            Ok(Answer::Ids(ids)) => {
                if ids.len() != n {
                    stats.violation(
                        &ctx,
                        format!("{op:?}: asked for {n} IDs, got {}", ids.len()),
                    );
                }
                ledger.add_ids(op.biz, &ids, source);
                stats.success(&ctx, started, ids.len() as u64);
            }
            Ok(Answer::Segment { seg, database }) => {
                if let Err(e) = check_segment(op.biz, &seg, database.as_deref(), STEP..=STEP) {
                    stats.violation(&ctx, format!("{op:?}: {e}: {seg:?}"));
                }
                ledger.add_segment(op.biz, &seg, source);
                stats.segments += 1;
                stats.success(&ctx, started, seg.count());
            }
            Err(f) => {
                stats.failure(&ctx, started, f);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // Every request goes to the next server, a retry after a failure too.
        server = (server + 1) % SERVERS;
    }
    stats.gap_until(&ctx, Instant::now());
    Outcome {
        stats,
        ledger,
        group: None,
    }
}

/// A segment's class must be the class of the database it came from, and its step
/// within `steps` (the row's step, or up to the servers' `step_max` for a client that
/// asks for the size of its segments).
pub(crate) fn check_segment(
    biz: Biz,
    seg: &Seg,
    database: Option<&str>,
    steps: std::ops::RangeInclusive<i64>,
) -> Result<(), String> {
    let step = seg.max - seg.current;
    if !steps.contains(&step) {
        return Err(format!("step {step} outside {steps:?}"));
    }
    // The class of one database in some layout the run goes through.
    let class = (seg.delta, seg.remainder);
    let dbs: Vec<usize> = (0..DATABASES)
        .filter(|&db| biz.classes_of(db).contains(&class))
        .collect();
    if dbs.is_empty() {
        return Err(format!(
            "class {} mod {} belongs to no database in any layout",
            seg.remainder, seg.delta
        ));
    }
    if let Some(name) = database
        && !dbs.iter().any(|&db| name == db_name(db))
    {
        return Err(format!(
            "class {} mod {} is not {name}'s in any layout",
            seg.remainder, seg.delta
        ));
    }
    if seg.count() == 0 {
        return Err("no ID in the segment".into());
    }
    Ok(())
}

pub(crate) async fn client_worker(
    ctx: Arc<Ctx>,
    w: usize,
    spec: &WorkerSpec,
    group: usize,
    biz: segmint::client::Biz,
    mut rng: Rng,
) -> Outcome {
    let (biz_kind, _) = CLIENT_GROUPS[group];
    let mut stats = Stats::new(spec.name, spec.api);
    let mut ledger = Ledger::new();
    let source = w as u32;
    while ctx.phase() != STOPPING {
        let started = Instant::now();
        let result = if rng.below(2) == 0 {
            biz.next_id().await.map(|id| vec![id])
        } else {
            biz.next_ids(rng.between(1, 200) as usize).await
        };
        match result {
            Ok(ids) => {
                ledger.add_ids(biz_kind, &ids, source);
                stats.success(&ctx, started, ids.len() as u64);
            }
            Err(e) => {
                let failure = match e.kind() {
                    ErrorKind::Unavailable { .. } => {
                        Failure::outage("client: every server failed", e.to_string())
                    }
                    ErrorKind::Timeout { .. } => {
                        Failure::outage("client: no segment in time", e.to_string())
                    }
                    _ => Failure::unexpected("client: refused", e.to_string()),
                };
                stats.failure(&ctx, started, failure);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // Keeps the clients from spending the whole machine on local IDs: they still
        // fetch a segment every few milliseconds.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    stats.gap_until(&ctx, Instant::now());
    Outcome {
        stats,
        ledger,
        group: Some(group),
    }
}

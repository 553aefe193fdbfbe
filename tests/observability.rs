//! Observability: `/metrics` passes promtool's lint and carries every series of the
//! metrics contract with its labels; a fresh server, before any request, already
//! exports every series the dashboard and the alert rules name; the alert rules pass `promtool check rules` and
//! their unit tests; and a real Prometheus scraping a server under load, then with its
//! databases down, gives a result for every query of the Grafana dashboard and every
//! alert expression, and fires `SegmintRunwayLow`; and a real Prometheus scrapes the
//! operator address with the operator token.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::eventually_every;
use common::*;
use serde_json::Value;
use tokio::task::{JoinHandle, block_in_place};

const BIZ: &str = "order";

/// Snowflake IDs for [`BIZ`], so that their series are part of what is checked.
const SNOWFLAKE: &str = r#"snowflake = { enabled = true, bizs = ["order"] }"#;

/// How often a Prometheus answer is checked again: it scrapes and evaluates every
/// second, so a query's answer changes no more often than that.
const EVALUATION: Duration = Duration::from_millis(500);

/// Every series of the metrics contract: family name, `# TYPE`, and its labels
/// (histogram buckets add `le`).
const CONTRACT: &[(&str, &str, &[&str])] = &[
    ("segmint_ids_issued_total", "counter", &["biz"]),
    ("segmint_cache_waits_total", "counter", &["biz"]),
    ("segmint_segment_ids_total", "counter", &["biz"]),
    ("segmint_biz_rate_ids_per_second", "gauge", &["biz"]),
    ("segmint_biz_peak_rate_ids_per_second", "gauge", &["biz"]),
    ("segmint_biz_step", "gauge", &["biz"]),
    ("segmint_biz_recommended_step", "gauge", &["biz"]),
    ("segmint_biz_cached_ids", "gauge", &["biz"]),
    ("segmint_biz_runway_seconds", "gauge", &["biz"]),
    ("segmint_step_choices_total", "counter", &["biz", "reason"]),
    ("segmint_database_up", "gauge", &["database"]),
    ("segmint_database_fenced", "gauge", &["database"]),
    (
        "segmint_segment_fetches_total",
        "counter",
        &["database", "outcome"],
    ),
    (
        "segmint_segment_fetch_duration_seconds",
        "histogram",
        &["database"],
    ),
    (
        "segmint_http_requests_total",
        "counter",
        &["route", "method", "status"],
    ),
    (
        "segmint_http_request_duration_seconds",
        "histogram",
        &["route"],
    ),
    ("segmint_snowflake_lease_state", "gauge", &["state"]),
    ("segmint_snowflake_worker_id", "gauge", &[]),
    (
        "segmint_snowflake_lease_renewals_total",
        "counter",
        &["outcome"],
    ),
    (
        "segmint_snowflake_lease_acquisitions_total",
        "counter",
        &["outcome"],
    ),
    (
        "segmint_snowflake_clock_back_total",
        "counter",
        &["outcome"],
    ),
    ("segmint_snowflake_ids_total", "counter", &["biz"]),
    ("segmint_build_info", "gauge", &["version"]),
    ("process_cpu_seconds_total", "counter", &[]),
    ("process_resident_memory_bytes", "gauge", &[]),
    ("process_open_fds", "gauge", &[]),
];

const STEP_REASONS: &[&str] = &[
    "fixed",
    "minimum",
    "target",
    "growth_limited",
    "shrink_limited",
    "maximum",
];
const FETCH_OUTCOMES: &[&str] = &["ok", "conflict", "error", "refused"];

/// A file of this repository, e.g. `grafana/alerts.yml`.
fn read_repo_file(relative: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(relative))
        .unwrap_or_else(|e| panic!("read {relative}: {e}"))
}

/// The path of `prometheus` or `promtool`, installing Debian's `prometheus` package
/// (which holds both) when either is missing; panics when that fails.
fn prometheus_tool(name: &str) -> PathBuf {
    fn find(name: &str) -> Option<PathBuf> {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .chain([PathBuf::from("/usr/bin")])
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    }
    static INSTALLED: OnceLock<()> = OnceLock::new();
    if find("prometheus").is_none() || find("promtool").is_none() {
        INSTALLED.get_or_init(|| {
            let root = std::fs::read_to_string("/proc/self/status")
                .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:\t0\t")));
            let apt = |args: &[&str]| {
                let mut cmd = if root {
                    Command::new("apt-get")
                } else {
                    let mut sudo = Command::new("sudo");
                    sudo.args(["-n", "apt-get"]);
                    sudo
                };
                // Tests run in parallel processes: wait for another one's apt-get.
                let out = cmd
                    .args(["-o", "DPkg::Lock::Timeout=300"])
                    .args(args)
                    .env("DEBIAN_FRONTEND", "noninteractive")
                    .output()
                    .expect("run apt-get");
                assert!(
                    out.status.success(),
                    "prometheus/promtool missing and `apt-get {}` failed (run scripts/test, \
                     which installs Debian's prometheus):\n{}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
            };
            apt(&["update"]);
            apt(&["install", "-y", "--no-install-recommends", "prometheus"]);
        });
    }
    find(name).unwrap_or_else(|| panic!("{name} not found, even after installing prometheus"))
}

/// Runs promtool with `args` (and `stdin`); whether it succeeded, and its output.
fn promtool(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let mut child = Command::new(prometheus_tool("promtool"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("promtool {}:\n{text}", args.join(" "));
    (out.status.success(), text)
}

/// One sample of the text exposition format.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of a text exposition, and the type of each family from `# TYPE`.
fn parse_exposition(text: &str) -> (Vec<Sample>, HashMap<String, String>) {
    let mut samples = Vec::new();
    let mut types = HashMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            types.insert(name.to_string(), kind.trim().to_string());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).expect("a sample line has a value");
        let name = line[..name_end].to_string();
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(inner) = rest.strip_prefix('{') {
            let mut chars = inner.char_indices();
            let (mut key, mut value) = (String::new(), String::new());
            let mut in_value = false;
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match (in_value, c) {
                    (false, '}') => {
                        end = Some(i + 1);
                        break;
                    }
                    (false, '=' | ',' | ' ') => {}
                    (false, '"') => in_value = true,
                    (false, c) => key.push(c),
                    (true, '\\') => match chars.next().map(|(_, c)| c) {
                        Some('n') => value.push('\n'),
                        Some(c) => value.push(c),
                        None => {}
                    },
                    (true, '"') => {
                        labels.insert(std::mem::take(&mut key), std::mem::take(&mut value));
                        in_value = false;
                    }
                    (true, c) => value.push(c),
                }
            }
            rest = &inner[end.unwrap_or_else(|| panic!("unterminated labels: {line}"))..];
        }
        let value = rest.split_whitespace().next().unwrap_or_default();
        let value = value
            .parse()
            .unwrap_or_else(|e| panic!("bad value in `{line}`: {e}"));
        samples.push(Sample {
            name,
            labels,
            value,
        });
    }
    (samples, types)
}

/// The value of the one sample named `name` whose labels include `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one sample {name}{labels:?}, found {found:?}"
    );
    found[0].value
}

/// Words in `text` that look like metric names of segmint or of its process collector.
fn metric_names_in(text: &str) -> BTreeSet<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("segmint_") || w.starts_with("process_"))
        .collect()
}

/// Asserts that every metric name in the dashboard and the alert rules is `exported`.
fn assert_grafana_names_only(exported: impl Fn(&str) -> bool) {
    for file in ["grafana/segmint.json", "grafana/alerts.yml"] {
        let text = read_repo_file(file);
        let unknown: Vec<&str> = metric_names_in(&text)
            .into_iter()
            .filter(|name| !exported(name))
            .collect();
        assert!(
            unknown.is_empty(),
            "{file} names series segmint does not export: {unknown:?}"
        );
    }
}

/// Every query of the dashboard, with its panel's title. Checks on the way that every
/// panel and target queries the `$datasource` variable, and the variables themselves.
fn dashboard_queries() -> Vec<(String, String)> {
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for panel in panels.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or_default().to_string();
            walk(&panel["panels"], out);
            let targets = panel["targets"].as_array();
            if panel["type"] == "row" {
                continue;
            }
            let targets = targets.unwrap_or_else(|| panic!("panel {title:?} has no targets"));
            assert!(!targets.is_empty(), "panel {title:?} has no targets");
            for t in std::iter::once(panel).chain(targets) {
                assert_eq!(
                    t["datasource"]["uid"], "${datasource}",
                    "panel {title:?} does not use the datasource variable"
                );
            }
            for t in targets {
                let expr = t["expr"].as_str().expect("a target with an expr");
                out.push((title.clone(), expr.to_string()));
            }
        }
    }
    let dashboard: Value =
        serde_json::from_str(&read_repo_file("grafana/segmint.json")).expect("dashboard JSON");
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    let datasource = variable("datasource");
    assert_eq!(
        (&datasource["type"], &datasource["query"]),
        (&Value::from("datasource"), &Value::from("prometheus"))
    );
    let biz = variable("biz");
    assert_eq!(
        biz["definition"],
        "label_values(segmint_ids_issued_total, biz)"
    );
    assert_eq!(
        (&biz["multi"], &biz["includeAll"]),
        (&true.into(), &true.into())
    );
    let mut queries = Vec::new();
    walk(&dashboard["panels"], &mut queries);
    queries
}

/// A dashboard query as Grafana would send it: `$__rate_interval` at 1 m (enough
/// samples at a 1 s scrape interval), every biz.
fn as_sent(expr: &str) -> String {
    let sent = expr.replace("$__rate_interval", "1m").replace("$biz", ".*");
    assert!(!sent.contains('$'), "unknown variable in {expr}");
    sent
}

/// `alerts.yml` for a test Prometheus, with every `for:` shortened to 2 s, and the
/// names of its alerts in order.
///
/// The real durations (1 min to 1 h) only keep a passing blip from paging anyone; the
/// test checks that each condition holds and that the alert fires, which the same
/// rules with a short `for` show within seconds instead of an hour.
fn rules_for_test() -> (String, Vec<String>) {
    let rules = read_repo_file("grafana/alerts.yml");
    let mut names = Vec::new();
    let mut shortened = 0;
    let lines: Vec<String> = rules
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if let Some(name) = trimmed.strip_prefix("- alert:") {
                names.push(name.trim().to_string());
            }
            if trimmed.starts_with("for:") {
                shortened += 1;
                format!("{}for: 2s", &line[..line.len() - trimmed.len()])
            } else {
                line.to_string()
            }
        })
        .collect();
    assert_eq!(
        shortened,
        names.len(),
        "every alert of alerts.yml has a `for`"
    );
    (lines.join("\n") + "\n", names)
}

/// `/metrics` of a server that issued IDs and a segment: every series of the contract
/// with its type and labels, values matching the traffic, nothing from raw request
/// input in a label, promtool's lint; the dashboard and rules name only exported
/// series; the rules pass `promtool check rules` and their unit tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_accepts_metrics_and_rules() {
    let pg = PgCluster::start();
    let config = config(&[&pg], SNOWFLAKE);
    let token = setup_biz(&config, BIZ, 100, false).await;
    setup_daily_tick(&config).await;
    setup_sequence(&config).await;
    let app = spawn_app(config).await;

    let mut issued = 0;
    for n in [5, 5, 5] {
        issued += app.ids(BIZ, &token, n).await.len();
    }
    for n in [4, 4] {
        let (status, body) = app
            .get(&format!(
                "/tinyid/id/nextIdSimple?bizType={BIZ}&token={token}&batchSize={n}"
            ))
            .await;
        assert_eq!(status, 200, "{body}");
        issued += body.split(',').count();
    }
    let (status, segment) = app
        .get_v1(&format!("/v1/segments/{BIZ}"), Some(&token))
        .await;
    assert_eq!(status, 200, "{segment}");
    let (status, _) = app.get(&format!("/no/such/{token}")).await;
    assert_eq!(status, 404);
    // Under a per-biz prefix, a path that is not exactly one more segment is unmatched,
    // and a method other than GET and POST is the route's own 405.
    let (status, _) = app.get(&format!("/v1/ids/{BIZ}/no/such")).await;
    assert_eq!(status, 404);
    let put = app
        .http
        .put(format!("{}/v1/ids/{BIZ}", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 405);

    let (status, text) = app.get("/metrics").await;
    assert_eq!(status, 200, "{text}");
    let (samples, types) = parse_exposition(&text);

    for (family, kind, labels) in CONTRACT {
        assert_eq!(
            types.get(*family).map(String::as_str),
            Some(*kind),
            "# TYPE of {family}"
        );
        let parts: &[(&str, bool)] = if *kind == "histogram" {
            &[("_bucket", true), ("_sum", false), ("_count", false)]
        } else {
            &[("", false)]
        };
        for (suffix, has_le) in parts {
            let name = format!("{family}{suffix}");
            let mut expected: BTreeSet<&str> = labels.iter().copied().collect();
            if *has_le {
                expected.insert("le");
            }
            let found: Vec<&Sample> = samples.iter().filter(|s| s.name == name).collect();
            assert!(
                !found.is_empty(),
                "{name} is missing from /metrics:\n{text}"
            );
            for s in found {
                let got: BTreeSet<&str> = s.labels.keys().map(String::as_str).collect();
                assert_eq!(got, expected, "labels of {s:?}");
            }
        }
    }

    for s in &samples {
        assert!(
            !s.labels
                .values()
                .any(|v| v.contains(&token) || v.contains("no/such")),
            "a label carries raw request input: {s:?}"
        );
        match s.name.as_str() {
            "segmint_step_choices_total" => {
                assert!(STEP_REASONS.contains(&s.labels["reason"].as_str()), "{s:?}")
            }
            "segmint_segment_fetches_total" => {
                assert!(
                    FETCH_OUTCOMES.contains(&s.labels["outcome"].as_str()),
                    "{s:?}"
                )
            }
            _ => {}
        }
    }
    let biz = [("biz", BIZ)];
    assert_eq!(
        value(&samples, "segmint_ids_issued_total", &biz),
        issued as f64
    );
    // Only the first request found the cache empty: the step of 100 covers the rest.
    assert_eq!(value(&samples, "segmint_cache_waits_total", &biz), 1.0);
    assert_eq!(
        value(&samples, "segmint_segment_ids_total", &biz),
        segment["count"].as_f64().unwrap(),
        "the segment handed out: {segment}"
    );
    assert!(value(&samples, "segmint_biz_step", &biz) > 0.0);
    assert!(value(&samples, "segmint_biz_cached_ids", &biz) > 0.0);
    assert!(value(&samples, "segmint_biz_runway_seconds", &biz) > 0.0);
    assert_eq!(
        value(&samples, "segmint_database_up", &[("database", "pg0")]),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "segmint_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    let requests = |route: &str, status: &str| {
        value(
            &samples,
            "segmint_http_requests_total",
            &[("route", route), ("method", "GET"), ("status", status)],
        )
    };
    assert_eq!(requests("/v1/ids/{biz}", "200"), 3.0);
    assert_eq!(requests("/tinyid/id/nextIdSimple", "200"), 2.0);
    assert_eq!(requests("/v1/segments/{biz}", "200"), 1.0);
    assert_eq!(requests("unmatched", "404"), 2.0);
    assert_eq!(
        value(
            &samples,
            "segmint_http_requests_total",
            &[
                ("route", "/v1/ids/{biz}"),
                ("method", "PUT"),
                ("status", "405")
            ],
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "segmint_http_request_duration_seconds_count",
            &[("route", "/v1/ids/{biz}")]
        ),
        4.0,
        "three GETs and the PUT"
    );
    let bounds: Vec<f64> = samples
        .iter()
        .filter(|s| {
            s.name == "segmint_http_request_duration_seconds_bucket"
                && s.labels["route"] == "/v1/ids/{biz}"
        })
        .map(|s| s.labels["le"].parse().unwrap())
        .filter(|le: &f64| le.is_finite())
        .collect();
    let (low, high) = (
        bounds.iter().copied().fold(f64::INFINITY, f64::min),
        bounds.iter().copied().fold(0.0, f64::max),
    );
    assert!(
        (low - 25e-6).abs() < 1e-12 && high == 10.0,
        "HTTP latency buckets from {low} s to {high} s, not 25 µs to 10 s: {bounds:?}"
    );
    // One observation per reservation attempt: as many as the attempts counted.
    let attempts: f64 = samples
        .iter()
        .filter(|s| s.name == "segmint_segment_fetches_total" && s.labels["database"] == "pg0")
        .map(|s| s.value)
        .sum();
    assert!(attempts >= 2.0, "the cache's and the client's segments");
    assert_eq!(
        value(
            &samples,
            "segmint_segment_fetch_duration_seconds_count",
            &[("database", "pg0")]
        ),
        attempts
    );

    // The dashboard and the rules name only series the server exports.
    let exported: BTreeSet<&str> = samples
        .iter()
        .map(|s| s.name.as_str())
        .chain(types.keys().map(String::as_str))
        .collect();
    assert_grafana_names_only(|name| exported.contains(name));
    assert!(!dashboard_queries().is_empty());

    let (ok, output) = promtool(&["check", "metrics"], Some(&text));
    assert!(ok, "promtool check metrics rejects /metrics:\n{output}");
    let (ok, output) = promtool(&["check", "rules", "grafana/alerts.yml"], None);
    assert!(ok, "promtool check rules grafana/alerts.yml:\n{output}");
    let (ok, output) = promtool(&["test", "rules", "grafana/alerts.test.yml"], None);
    assert!(ok, "promtool test rules grafana/alerts.test.yml:\n{output}");
}

/// A fresh server, before any request: every series the dashboard and the rules name is
/// on `/metrics` already, the counters at zero, so that no panel or alert waits for a
/// first event to have data (Prometheus's instrumentation guide: avoid missing metrics).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_server_exports_every_series_the_dashboard_and_rules_name() {
    let pg = PgCluster::start();
    let config = config(&[&pg], SNOWFLAKE);
    setup_biz(&config, BIZ, 100, false).await;
    setup_daily_tick(&config).await;
    setup_sequence(&config).await;
    let app = spawn_app(config).await;

    let (status, text) = app.get("/metrics").await;
    assert_eq!(status, 200, "{text}");
    let (samples, _) = parse_exposition(&text);
    let series: BTreeSet<&str> = samples.iter().map(|s| s.name.as_str()).collect();
    // A histogram is named by its family in some queries, and has only suffixed series.
    assert_grafana_names_only(|name| {
        series.contains(name) || series.contains(format!("{name}_bucket").as_str())
    });
    let biz = [("biz", BIZ)];
    for counter in [
        "segmint_ids_issued_total",
        "segmint_cache_waits_total",
        "segmint_segment_ids_total",
    ] {
        assert_eq!(value(&samples, counter, &biz), 0.0, "{counter}");
    }
    for reason in STEP_REASONS {
        assert_eq!(
            value(
                &samples,
                "segmint_step_choices_total",
                &[("biz", BIZ), ("reason", reason)]
            ),
            0.0,
            "{reason}"
        );
    }
    for outcome in FETCH_OUTCOMES {
        assert_eq!(
            value(
                &samples,
                "segmint_segment_fetches_total",
                &[("database", "pg0"), ("outcome", outcome)]
            ),
            0.0,
            "{outcome}"
        );
    }
    assert_eq!(
        value(
            &samples,
            "segmint_http_requests_total",
            &[
                ("route", "/v1/ids/{biz}"),
                ("method", "GET"),
                ("status", "200")
            ]
        ),
        0.0
    );
    assert_eq!(value(&samples, "segmint_snowflake_ids_total", &biz), 0.0);
    for outcome in ["ok", "failed", "lost"] {
        let labels = [("outcome", outcome)];
        assert_eq!(
            value(&samples, "segmint_snowflake_lease_renewals_total", &labels),
            0.0,
            "{outcome}"
        );
    }
    for outcome in ["waited", "refused"] {
        let labels = [("outcome", outcome)];
        assert_eq!(
            value(&samples, "segmint_snowflake_clock_back_total", &labels),
            0.0,
            "{outcome}"
        );
    }
}

/// A Prometheus server scraping one segmint server every second, killed on drop.
struct Prometheus {
    /// Declared first so that the process is killed before its directory goes.
    process: ChildGuard,
    dir: tempfile::TempDir,
    base: String,
    http: reqwest::Client,
}

impl Prometheus {
    /// Starts Prometheus on a free port, scraping `target` (`host:port`) and evaluating
    /// `rules` every second; returns once it is ready. With `credentials`, each scrape
    /// carries `Authorization: Bearer <the file's contents>`.
    async fn start(target: &str, rules: &str, credentials: Option<&Path>) -> Prometheus {
        let dir = tempfile::Builder::new()
            .prefix("segmint-prometheus-")
            .tempdir()
            .unwrap();
        let rules_file = dir.path().join("alerts.yml");
        std::fs::write(&rules_file, rules).unwrap();
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(
            &config_file,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: segmint\n{}    static_configs:\n      - targets: ['{target}']\n",
                rules_file.display(),
                credentials.map_or(String::new(), |file| format!(
                    "    authorization:\n      credentials_file: {}\n",
                    file.display()
                )),
            ),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let process = ChildGuard(
            Command::new(prometheus_tool("prometheus"))
                .arg(format!("--config.file={}", config_file.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("spawn prometheus"),
        );
        let mut prometheus = Prometheus {
            process,
            dir,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        };
        eventually(Duration::from_secs(30), "Prometheus ready", async || {
            let ready = prometheus
                .http
                .get(format!("{}/-/ready", prometheus.base))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Ok(());
            }
            // Exited (its port taken, say): say so now, with its log, not in 30 s.
            if let Ok(Some(status)) = prometheus.process.0.try_wait() {
                panic!("Prometheus exited ({status}):\n{}", prometheus.log());
            }
            Err(format!("log:\n{}", prometheus.log()))
        })
        .await;
        prometheus
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// `data` of a successful answer of the HTTP API at `path`; panics on an error.
    async fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let body: Value = self
            .http
            .get(format!("{}{path}", self.base))
            .query(query)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(body["status"], "success", "{path} {query:?}: {body}");
        body["data"].clone()
    }

    /// The series an instant query returns now.
    async fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api("/api/v1/query", &[("query", expr)]).await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `expr` returns a series; panics after `limit`.
    async fn wait_for(&self, expr: &str, limit: Duration) {
        eventually_every(
            EVALUATION,
            limit,
            &format!("a result of {expr}"),
            async || {
                if self.query(expr).await.is_empty() {
                    let targets = self.api("/api/v1/targets", &[]).await;
                    Err(format!("scrape targets: {targets}"))
                } else {
                    Ok(())
                }
            },
        )
        .await;
    }
}

/// Clients requesting IDs (and now and then a segment) until stopped, counting the
/// answers; failures are expected once the databases are down.
struct Load {
    stop: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(app: &Arc<TestApp>, token: &str, clients: usize) -> Load {
        let stop = shared(AtomicBool::new(false));
        let served = shared(AtomicUsize::new(0));
        let tasks = (0..clients)
            .map(|client| {
                let (app, token, stop, served) =
                    (app.clone(), token.to_string(), stop.clone(), served.clone());
                tokio::spawn(async move {
                    let mut kind = client;
                    while !stop.load(Ordering::Relaxed) {
                        let path = match kind % 10 {
                            0 => format!("/v1/segments/{BIZ}"),
                            1..=4 => format!("/v1/ids/{BIZ}?count={}", kind % 5 + 1),
                            5..=7 => format!(
                                "/tinyid/id/nextIdSimple?bizType={BIZ}&token={token}&batchSize=3"
                            ),
                            _ => format!("/tinyid/id/nextId?bizType={BIZ}&token={token}"),
                        };
                        let answered = app
                            .http
                            .get(format!("{}{path}", app.base))
                            .bearer_auth(&token)
                            .send()
                            .await
                            .is_ok_and(|r| r.status().is_success());
                        if answered {
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                        kind += 1;
                        // A few hundred IDs per second: a fetch every few hundred
                        // milliseconds per database, so that the outage's errors soon
                        // outnumber a tenth of the successful fetches.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            })
            .collect();
        Load {
            stop,
            served,
            tasks,
        }
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.expect("load task panicked");
        }
    }
}

/// A real Prometheus scraping a server under load (its clock 10 s ahead of the
/// databases'), then with one database set back in time and both down (the
/// load going on, so requests fail and the cache empties): every dashboard query and
/// every alert expression returns series, every rule evaluates without error, and
/// `SegmintRunwayLow` fires for the biz.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_evaluates_every_panel_and_alert() {
    let started = Instant::now();
    let (a, b) = (PgCluster::start(), PgCluster::start());
    // The databases' clocks 10 s behind the server's (libfaketime):
    // SegmintClockAhead needs a server ahead of every database.
    let behind = common::clock::ShiftedClock::ahead(-10.0);
    let env = behind.env(&common::clock::faketime_lib());
    block_in_place(|| {
        a.restart_with_env(&env);
        b.restart_with_env(&env);
    });
    // Segments of 10 IDs, at most 20: far below the recommendation at any real rate, and
    // a cache that empties at once when the databases go. The cut-off change written
    // below must stay pending, never finished by the server: a finish that froze the
    // biz just before the databases stop would turn every later fetch into a wait for
    // the layout rather than an error, and SegmintFetchErrors would never see its share.
    let config = config(
        &[&a, &b],
        &format!("step_max = 20\n{SNOWFLAKE}\nprotocol = {{ silent_ms = 3600000 }}"),
    );
    let token = setup_biz(&config, BIZ, 10, false).await;
    let tick = setup_daily_tick(&config).await;
    let seq = setup_sequence(&config).await;
    let app = shared(spawn_app(config).await);
    // The sequence panels' series: one number taken.
    let (status, body) = app.get_v1("/v1/sequences/seq/next?key=a", Some(&seq)).await;
    assert_eq!(status, 200, "{body}");
    let (rules, alert_names) = rules_for_test();
    let prometheus = Prometheus::start(app.base.trim_start_matches("http://"), &rules, None).await;
    let load = Load::start(&app, &token, 3);

    // A few scrapes under load: rates, the peak, the recommended step are all set.
    prometheus
        .wait_for(
            &format!(
                "count_over_time(segmint_biz_rate_ids_per_second{{biz=\"{BIZ}\"}}[1m]) >= 5 \
                 and segmint_biz_rate_ids_per_second > 0"
            ),
            Duration::from_secs(30),
        )
        .await;
    let served = load.served.load(Ordering::Relaxed);
    assert!(served > 0, "no request was served under load");
    // 90 of the 99 numbers a two-digit daily counter holds: SegmintPeriodCounterHigh.
    let (status, body) = app.get_v1("/v1/ids/tick?count=90", Some(&tick)).await;
    assert_eq!(status, 200, "{body}");
    // pg0 goes back in time (a restore from backup): it is fenced, and stays so while
    // it is down, which SegmintDatabaseFenced needs.
    block_in_place(|| {
        a.psql(&format!(
            "UPDATE tiny_id_info SET max_id = 0, version = 0 WHERE biz_type = '{BIZ}'"
        ))
    });
    eventually(Duration::from_secs(15), "pg0 fenced", async || {
        let (_, ready) = app.get_v1("/readyz", None).await;
        if ready["databases"][0]["fenced"].is_string() {
            Ok(())
        } else {
            Err(ready.to_string())
        }
    })
    .await;
    // Every worker-ID lease row moves on behind segmint's back, as a restore or a
    // takeover would: the server's next renewal finds its lease gone, which
    // SegmintSnowflakeLeaseLost needs.
    block_in_place(|| {
        for db in [&a, &b] {
            db.psql("UPDATE segmint_worker_lease SET version = version + 1000");
            // A layout change cut off: its epoch written as `moving`, never done.
            db.psql(
                "INSERT INTO segmint_layout (epoch, members, state, changed_ms) \
                 VALUES (1, 'pg0=2:0,pg1=2:1', 'moving', 0)",
            );
        }
    });
    prometheus
        .wait_for(
            "segmint_snowflake_lease_renewals_total{outcome=\"lost\"} > 0",
            Duration::from_secs(30),
        )
        .await;
    // The server must have read the cut-off epoch (and Prometheus scraped it) before
    // the databases stop: on a loaded machine the refresh can come after the renewal.
    prometheus
        .wait_for(
            "segmint_layout_change_pending == 1",
            Duration::from_secs(30),
        )
        .await;
    // And read it on both databases: a refresh that came between the two inserts found
    // pg1 behind pg0's layout, and a database behind is not used; were the databases
    // stopped before the next refresh, pg1 would stay behind, never tried, and
    // SegmintFetchErrors would see no error (a CI run on a loaded machine met that).
    eventually(
        Duration::from_secs(15),
        "both databases' layouts current",
        async || {
            let (_, ready) = app.get_v1("/readyz", None).await;
            let layouts: Vec<&Value> = ready["databases"]
                .as_array()
                .map(|dbs| dbs.iter().map(|d| &d["layout"]).collect())
                .unwrap_or_default();
            if layouts.len() == 2 && layouts.iter().all(|l| *l == "current") {
                Ok(())
            } else {
                Err(ready.to_string())
            }
        },
    )
    .await;
    println!(
        "{:?}: {served} requests served under load; pg0 fenced; a lease lost; stopping both databases",
        started.elapsed()
    );
    block_in_place(|| {
        a.stop();
        b.stop();
    });

    let mut pending: Vec<(String, String)> = dashboard_queries()
        .into_iter()
        .map(|(title, expr)| (format!("panel {title:?}"), as_sent(&expr)))
        .collect();
    let loaded = prometheus.api("/api/v1/rules", &[]).await;
    let rules: Vec<Value> = loaded["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .collect();
    let loaded_names: Vec<&str> = rules.iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(loaded_names, alert_names, "alerts Prometheus loaded");
    pending.extend(rules.iter().map(|r| {
        (
            format!("alert {}", r["name"].as_str().unwrap()),
            r["query"].as_str().unwrap().to_string(),
        )
    }));
    let total = pending.len();
    eventually_every(
        EVALUATION,
        Duration::from_secs(60),
        "every query returns series after the databases stopped",
        async || {
            let mut empty = Vec::new();
            for (what, expr) in pending.drain(..) {
                if prometheus.query(&expr).await.is_empty() {
                    empty.push((what, expr));
                } else {
                    println!("{:?}: {what} returns series", started.elapsed());
                }
            }
            pending = empty;
            if pending.is_empty() {
                Ok(())
            } else {
                // What the fetch counters and the server say, for a failure's reader.
                let fetches: Vec<String> = prometheus
                    .query("segmint_segment_fetches_total")
                    .await
                    .iter()
                    .map(|s| format!("{} {} {}", s["metric"]["database"], s["metric"]["outcome"], s["value"][1]))
                    .collect();
                let (_, ready) = app.get_v1("/readyz", None).await;
                Err(format!(
                    "{} of {total} return nothing: {pending:#?}\nfetches: {fetches:#?}\nreadyz: {ready}",
                    pending.len()
                ))
            }
        },
    )
    .await;
    println!(
        "{:?}: all {total} panel and alert queries returned series",
        started.elapsed()
    );

    eventually_every(
        EVALUATION,
        Duration::from_secs(60),
        &format!("SegmintRunwayLow firing for {BIZ}"),
        async || {
            let alerts = prometheus.api("/api/v1/alerts", &[]).await;
            let firing = alerts["alerts"].as_array().unwrap().iter().any(|a| {
                a["labels"]["alertname"] == "SegmintRunwayLow"
                    && a["labels"]["biz"] == BIZ
                    && a["state"] == "firing"
            });
            if firing {
                Ok(())
            } else {
                Err(alerts.to_string())
            }
        },
    )
    .await;
    println!("{:?}: SegmintRunwayLow is firing", started.elapsed());

    let loaded = prometheus.api("/api/v1/rules", &[]).await;
    for group in loaded["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            assert_eq!(rule["health"], "ok", "rule evaluation failed: {rule}");
        }
    }
    load.stop().await;
}

/// Prometheus scrapes operator routes protected by the operator token and served on
/// their own address, with docs/security.md's `authorization: {credentials_file: …}`.
#[tokio::test(flavor = "multi_thread")]
async fn prometheus_scrapes_the_operator_address_with_the_operator_token() {
    use common::operator::{OPERATOR_TOKEN, spawn_app_with_operator};

    let dbs = Databases::start(Kind::Embedded, 1);
    let config = dbs.config(&format!("operator_token = \"{OPERATOR_TOKEN}\""));
    setup_biz(&config, BIZ, 10, false).await;
    let (_public, operator) = spawn_app_with_operator(config).await;
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), format!("{OPERATOR_TOKEN}\n")).unwrap();
    let prometheus = Prometheus::start(
        operator.base.trim_start_matches("http://"),
        "groups: []\n",
        Some(secret.path()),
    )
    .await;
    prometheus
        .wait_for(
            "up{job=\"segmint\"} == 1 and on() segmint_database_up{database=\"pg0\"} == 1",
            Duration::from_secs(30),
        )
        .await;
    let refused = prometheus
        .query("segmint_http_requests_total{route=\"/metrics\",status=\"401\"}")
        .await;
    assert!(refused.is_empty(), "a scrape was refused: {refused:?}");
}

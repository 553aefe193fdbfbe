//! What the server sees, for operators: Prometheus metrics (`/metrics`), the same
//! per-biz figures as JSON (`/v1/bizs`), a small HTML page (`/status`) for those
//! without Grafana, and the databases' readiness (`/readyz`). They list biz and
//! database names (never a token), so they are the operator routes: behind the
//! operator token when one is configured, on `operator_bind` when that is set.

use actix_web::http::header::ContentType;
use actix_web::{HttpResponse, web};
use serde::Serialize;
use serde_json::json;

use super::AppState;
use super::observe::Observer;
use super::operator;
use crate::config::OperatorToken;
use crate::metrics::{BizStats, BizView};
use crate::store::DatabaseStatus;

/// The operator routes, each behind `token` when one is configured.
pub(super) fn routes(
    cfg: &mut web::ServiceConfig,
    observer: &Observer,
    token: Option<&OperatorToken>,
) {
    for (path, route) in [
        ("/readyz", web::get().to(readyz)),
        ("/metrics", web::get().to(metrics)),
        ("/v1/bizs", web::get().to(bizs)),
        ("/status", web::get().to(status)),
    ] {
        cfg.service(operator::route(observer, token, path, route));
    }
}

/// One biz as `/v1/bizs` shows it.
#[derive(Serialize)]
struct BizReport {
    #[serde(flatten)]
    stats: BizStats,
    /// Why the biz is not served, when its rows are invalid or overlap.
    refused: Option<String>,
}

#[derive(Serialize)]
struct Report {
    bizs: Vec<BizReport>,
    databases: Vec<DatabaseStatus>,
    step_policy: StepPolicyReport,
}

#[derive(Serialize)]
struct StepPolicyReport {
    adaptive: bool,
    target_secs: u64,
    max: i64,
}

/// Every biz of the catalog, with the figures of those that served IDs here.
fn report(state: &AppState) -> Report {
    let mut stats = state.cache.stats();
    let catalog = state.store.catalog();
    let mut bizs: Vec<BizReport> = catalog
        .biz_names()
        .into_iter()
        .map(|name| {
            let stats = match stats.iter().position(|s| s.biz == name) {
                Some(i) => stats.swap_remove(i),
                None => BizStats::idle(name),
            };
            let refused = catalog
                .biz(name)
                .and_then(|e| e.refused.as_ref())
                .map(ToString::to_string);
            BizReport { stats, refused }
        })
        .collect();
    // Bizs removed from the databases while their cache is still in use.
    bizs.extend(stats.into_iter().map(|stats| BizReport {
        stats,
        refused: None,
    }));
    bizs.sort_by(|a, b| a.stats.biz.cmp(&b.stats.biz));
    let policy = state.store.step_policy();
    Report {
        bizs,
        databases: state.store.status(),
        step_policy: StepPolicyReport {
            adaptive: policy.adaptive,
            target_secs: policy.target.as_secs(),
            max: policy.max,
        },
    }
}

async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let databases: Vec<crate::metrics::DatabaseState> = state
        .store
        .status()
        .into_iter()
        .map(|d| crate::metrics::DatabaseState {
            up: d.up,
            fenced: d.fenced.is_some(),
            in_layout: d.in_layout,
            layout_behind: d.layout != "current",
            name: d.name,
        })
        .collect();
    let metrics = state.store.metrics();
    let (epoch, pending) = state.store.layout_epochs();
    metrics.layout().set(epoch, pending.is_some());
    let in_use = state.cache.stats();
    let catalog = state.store.catalog();
    let known = catalog.biz_count();
    // Idle bizs get their series too (at zero) while they all fit under the bound.
    let idle = if known <= metrics.bizs().max_bizs() {
        catalog.biz_names()
    } else {
        Vec::new()
    };
    let view = BizView {
        known,
        in_use: &in_use,
        idle: &idle,
    };
    let text = metrics.render(&view, &databases);
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(text)
}

async fn bizs(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(report(&state))
}

async fn status(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(ContentType::html())
        .body(render_html(&report(&state)))
}

async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let ready = state.store.ready().await;
    let body = json!({
        "status": if ready { "ready" } else { "unavailable" },
        "databases": state.store.status(),
    });
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// Escapes text for HTML element content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A duration in seconds, as people read it: `42 s`, `12 min`, `3.5 h`, `∞`.
fn human_secs(secs: Option<f64>) -> String {
    match secs {
        None => "∞".into(),
        Some(s) if s < 120.0 => format!("{s:.0} s"),
        Some(s) if s < 7200.0 => format!("{:.0} min", s / 60.0),
        Some(s) => format!("{:.1} h", s / 3600.0),
    }
}

fn render_html(report: &Report) -> String {
    let mut bizs = String::new();
    for b in &report.bizs {
        let s = &b.stats;
        let low = s.runway_seconds.is_some_and(|r| r < 300.0) && s.issued > 0;
        let below = s.step > 0 && s.step < s.recommended_step;
        bizs.push_str(&format!(
            "<tr><td>{}</td><td>{:.1}</td><td>{:.1}</td><td{}>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td{}>{}</td><td>{}</td></tr>\n",
            escape(&s.biz),
            s.rate,
            s.peak_rate,
            if below { " class=\"warn\"" } else { "" },
            s.step,
            s.recommended_step,
            s.last_step_reason.map_or("", |r| r.as_str()),
            s.cached_ids,
            if low { " class=\"warn\"" } else { "" },
            human_secs(s.runway_seconds),
            escape(b.refused.as_deref().unwrap_or("")),
        ));
    }
    let mut dbs = String::new();
    for d in &report.databases {
        dbs.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td{}>{}</td><td>{}</td></tr>\n",
            escape(&d.name),
            escape(&d.location),
            escape(d.residue.as_deref().unwrap_or("-")),
            if d.up && d.in_layout {
                ""
            } else {
                " class=\"warn\""
            },
            match (d.up, &d.fenced, d.in_layout) {
                (_, Some(_), _) => "fenced",
                (_, None, false) if d.layout == "behind" => "layout behind another database's",
                (_, None, false) if d.layout == "lost" => "declared lost",
                (_, None, false) if d.layout == "disagrees" =>
                    "layout disagrees with another database's",
                (_, None, false) => "not in the layout",
                (true, None, true) => "up",
                (false, None, true) => "down",
            },
            escape(
                d.fenced
                    .as_deref()
                    .or(d.last_error.as_deref())
                    .unwrap_or("")
            ),
        ));
    }
    let p = &report.step_policy;
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>segmint status</title>
<meta http-equiv="refresh" content="5">
<style>
body {{ font: 14px system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; margin-bottom: 2em; }}
th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
.warn {{ background: #fdd; }}
</style></head>
<body>
<h1>segmint {version}</h1>
<p>Adaptive step: {adaptive}; a segment aims to last {target} s at the peak rate, step at most {max}.
Rates are IDs per second over the last minute; the peak is the highest of the last 24 hours.
This page reloads every 5 seconds; the same figures are at <a href="v1/bizs">/v1/bizs</a> and <a href="metrics">/metrics</a>.</p>
<h2>Bizs</h2>
<table>
<tr><th>biz</th><th>rate</th><th>peak</th><th>step</th><th>recommended step</th><th>last step because</th><th>cached IDs</th><th>runway</th><th>refused</th></tr>
{bizs}</table>
<h2>Databases</h2>
<table>
<tr><th>database</th><th>location</th><th>class</th><th>state</th><th>last error</th></tr>
{dbs}</table>
</body></html>
"#,
        version = env!("CARGO_PKG_VERSION"),
        adaptive = if p.adaptive { "on" } else { "off" },
        target = p.target_secs,
        max = p.max,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape(r#"<b a="x">&'"#),
            "&lt;b a=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_secs(None), "∞");
        assert_eq!(human_secs(Some(42.4)), "42 s");
        assert_eq!(human_secs(Some(720.0)), "12 min");
        assert_eq!(human_secs(Some(12_600.0)), "3.5 h");
    }
}

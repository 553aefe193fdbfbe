//! What the server sees, for operators: Prometheus metrics (`/metrics`), the per-biz
//! figures as JSON a page at a time (`/v1/bizs`), a small HTML page (`/status`) for
//! those without Grafana, and the databases' readiness (`/readyz`). They list biz and
//! database names (never a token), so they are the operator routes: behind the
//! operator token when one is configured, on `operator_bind` when that is set.

use actix_web::http::header::ContentType;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use serde_json::json;

use super::base::AppState;
use super::observe::Observer;
use super::status_page::{self, STATUS_LIMIT};
use super::{Params, operator};
use crate::config::OperatorToken;
use crate::listing::{self, DEFAULT_LIMIT, Query};
use crate::metrics::{BizStats, BizView};
use crate::service::Error;
use crate::store::{DatabaseStatus, Membership};

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
pub(super) struct BizReport {
    #[serde(flatten)]
    pub(super) stats: BizStats,
    /// Why the biz is not served, when its rows are invalid or overlap.
    pub(super) refused: Option<String>,
}

/// A page of bizs with the databases and the step policy: `/v1/bizs`, and what
/// `/status` shows.
#[derive(Serialize)]
pub(super) struct Report {
    pub(super) bizs: Vec<BizReport>,
    /// The cursor of the next page; `None` on the last.
    pub(super) next: Option<String>,
    /// The bizs over all pages: those matching `q`.
    pub(super) total: usize,
    pub(super) databases: Vec<DatabaseStatus>,
    /// The cluster's membership as the databases record it, against this server's
    /// configuration.
    pub(super) membership: Membership,
    pub(super) step_policy: StepPolicyReport,
    /// This server's part in serving sequence bizs.
    pub(super) sequences: SequencesReport,
}

/// This server's address, the live servers it sees, and what it holds of each
/// sequence biz.
#[derive(Serialize)]
pub(super) struct SequencesReport {
    pub(super) address: String,
    pub(super) servers: Vec<String>,
    pub(super) bizs: Vec<SequenceReport>,
}

#[derive(Serialize)]
pub(super) struct SequenceReport {
    pub(super) biz: String,
    pub(super) sections: u32,
    pub(super) step: i64,
    /// Sections this server owns now, and the keys and bytes they hold.
    pub(super) owned: usize,
    pub(super) keys: usize,
    pub(super) key_bytes: usize,
}

#[derive(Serialize)]
pub(super) struct StepPolicyReport {
    pub(super) adaptive: bool,
    pub(super) target_secs: u64,
    pub(super) max: i64,
}

/// The page `query` asks for, with the figures of the bizs that served IDs here.
/// The catalog's name index is rebuilt first if the catalog changed since it was built.
async fn report(state: &AppState, query: &Query) -> Report {
    let catalog = state.store.read_catalog().await;
    let index = state
        .names
        .of(catalog.clone(), || state.cache.names_in_use())
        .await;
    let page = listing::select(&index, query, || state.cache.stats());
    let bizs = page
        .names
        .into_iter()
        .map(|name| {
            let refused = catalog
                .biz(&name)
                .and_then(|e| e.refused.as_ref())
                .map(ToString::to_string);
            let stats = state
                .cache
                .stats_of(&name)
                .unwrap_or_else(|| BizStats::idle(&name));
            BizReport { stats, refused }
        })
        .collect();
    let policy = state.store.step_policy();
    Report {
        bizs,
        next: page.next.map(|c| c.encode()),
        total: page.total,
        databases: state.store.cluster().status(),
        membership: state.store.cluster().membership(),
        step_policy: StepPolicyReport {
            adaptive: policy.adaptive,
            target_secs: policy.target.as_secs(),
            max: policy.max,
        },
        sequences: sequences_report(state),
    }
}

fn sequences_report(state: &AppState) -> SequencesReport {
    let sequencer = &state.sequencer;
    let bizs = sequencer
        .held()
        .into_iter()
        .map(|(biz, held)| SequenceReport {
            biz: biz.name().to_owned(),
            sections: biz.shape().sections,
            step: biz.shape().step,
            owned: held.sections,
            keys: held.keys,
            key_bytes: held.bytes,
        })
        .collect();
    SequencesReport {
        address: sequencer.address().to_owned(),
        servers: sequencer.servers(),
        bizs,
    }
}

async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let databases: Vec<crate::metrics::DatabaseState> = state
        .store
        .cluster()
        .status()
        .into_iter()
        .map(|d| crate::metrics::DatabaseState {
            up: d.up,
            fenced: d.fenced.is_some(),
            in_layout: d.in_layout,
            layout_behind: d.layout != "current",
            clock_ahead_seconds: d.clock_ahead_ms.map(|ms| ms as f64 / 1_000.0),
            name: d.name,
        })
        .collect();
    let metrics = state.store.metrics();
    let (epoch, pending) = state.store.cluster().layout_epochs();
    metrics.layout().set(epoch, pending.is_some());
    let membership = state.store.cluster().membership();
    metrics
        .layout()
        .set_membership(membership.epoch.is_some(), membership.unconfigured.len());
    let in_use = state.cache.stats();
    let catalog = state.store.catalog();
    let known = catalog.biz_count();
    // Idle bizs get their series too (at zero) while they all fit under the bound.
    let idle = if known <= metrics.bizs().max_bizs() {
        catalog.biz_names()
    } else {
        Vec::new()
    };
    let periodic: Vec<&str> = idle
        .iter()
        .copied()
        .filter(|biz| {
            catalog
                .shape_of(biz)
                .flatten()
                .is_some_and(|s| s.period.is_some())
        })
        .collect();
    let view = BizView {
        known,
        in_use: &in_use,
        idle: &idle,
        periodic: &periodic,
    };
    state.sequencer.set_gauges();
    let text = metrics.render(&view, &databases);
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(text)
}

async fn bizs(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, Error> {
    let params = Params::from_query(&req);
    let query = Query::parse(|name| params.get(name), DEFAULT_LIMIT)?;
    Ok(HttpResponse::Ok().json(report(&state, &query).await))
}

async fn status(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, Error> {
    let params = Params::from_query(&req);
    let query = Query::parse(|name| params.get(name), STATUS_LIMIT)?;
    let report = report(&state, &query).await;
    let counts = status_page::Counts {
        known: state.store.read_catalog().await.biz_count(),
        in_use: state.cache.in_use(),
    };
    Ok(HttpResponse::Ok()
        .content_type(ContentType::html())
        .body(status_page::render(&report, &query, counts)))
}

async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let ready = state.store.cluster().ready().await;
    let body = json!({
        "status": if ready { "ready" } else { "unavailable" },
        "databases": state.store.cluster().status(),
        "membership": state.store.cluster().membership(),
        "clock": clock(&state.store),
    });
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// This server's clock against the databases' (see `Cluster::may_begin`): how far ahead
/// of the latest database clock read (negative: behind), and whether that is within
/// the tolerance a period is begun with.
fn clock(store: &crate::store::Store) -> serde_json::Value {
    let tolerance_ms = store.cluster().clock_tolerance_ms();
    match store.cluster().clock_ahead_ms() {
        Some(ahead_ms) => json!({
            "ahead_ms": ahead_ms,
            "tolerance_ms": tolerance_ms,
            "within_tolerance": ahead_ms.abs() <= tolerance_ms,
        }),
        None => json!({ "ahead_ms": null, "tolerance_ms": tolerance_ms }),
    }
}

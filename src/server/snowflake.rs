//! The v1 snowflake routes: `/v1/snowflake/{biz}?count=N` issues IDs from this server's
//! leased worker ID, `/v1/snowflake/{biz}/decode/{id}` shows an ID's parts. Both take
//! the v1 API's token of `biz`.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;

use super::Params;
use super::base::bearer;
use super::base::{AppState, app_state};
use super::observe::Observer;
use crate::biz::{BatchSize, BizTag};
use crate::service::Error;
use crate::service::authorize_for;
use crate::service::{leaf_time, parse_and_decode};

pub(super) fn v1_routes(cfg: &mut web::ServiceConfig, observer: &Observer) {
    cfg.service(
        observer
            .resource("/v1/snowflake/{biz}")
            .route(web::get().to(issue))
            .route(web::post().to(issue)),
    )
    .service(
        observer
            .resource("/v1/snowflake/{biz}/decode/{id}")
            .route(web::get().to(decode)),
    );
}

/// `/v1/snowflake/{biz}?count=N`: `count` (default 1, at most the v1 batch limit)
/// snowflake IDs, increasing, with the worker ID that issued them.
async fn issue(req: HttpRequest) -> Result<HttpResponse, Error> {
    let state = app_state(&req)?;
    let params = Params::from_query(&req);
    let count = BatchSize::parse("count", params.get("count"))?;
    let biz = BizTag::parse(req.match_info().get("biz").unwrap_or_default())?;
    authorize_snowflake(state, &req, &biz).await?;
    let (worker_id, ids) = state.snowflake.next_ids(&biz, count.get()).await?;
    Ok(HttpResponse::Ok().json(SnowflakeIds {
        biz: biz.as_str(),
        worker_id,
        ids: &ids,
    }))
}

/// [`super::authorize`]: a biz of snowflake IDs alone (in `[snowflake] bizs`) needs no row,
/// only a token granted it.
async fn authorize_snowflake(
    state: &AppState,
    req: &HttpRequest,
    biz: &BizTag,
) -> Result<(), Error> {
    let needs_row = !state.snowflake.serves(biz);
    authorize_for(&state.store, bearer(req)?, biz, needs_row).await
}

/// `{"biz": …, "worker_id": …, "ids": […]}`, serialized straight from the slice.
#[derive(serde::Serialize)]
struct SnowflakeIds<'a> {
    biz: &'a str,
    worker_id: u16,
    ids: &'a [i64],
}

/// `GET /v1/snowflake/{biz}/decode/{id}`: the parts of `id` as JSON numbers, in this
/// server's layout, which is shown beside them (`total_bits` at most 53: `js_safe`).
async fn decode(req: HttpRequest) -> Result<HttpResponse, Error> {
    let state = app_state(&req)?;
    let biz = BizTag::parse(req.match_info().get("biz").unwrap_or_default())?;
    let value = req.match_info().get("id").unwrap_or_default();
    let layout = state.snowflake.layout();
    let d =
        parse_and_decode(value, state.snowflake.epoch_ms(), &layout).map_err(Error::BadRequest)?;
    authorize_snowflake(state, &req, &biz).await?;
    Ok(HttpResponse::Ok().json(json!({
        "id": value.parse::<i64>().unwrap_or_default(),
        "timestamp_ms": d.timestamp_ms,
        "time": format!("{}Z", leaf_time(d.timestamp_ms).replacen(' ', "T", 1)),
        "worker_id": d.worker_id,
        "sequence": d.sequence,
        "layout": {
            "name": layout.name(),
            "unit_ms": layout.unit_ms,
            "timestamp_bits": layout.timestamp_bits,
            "worker_bits": layout.worker_bits,
            "sequence_bits": layout.sequence_bits,
            "total_bits": layout.total_bits(),
            "js_safe": layout.js_safe(),
        },
    })))
}

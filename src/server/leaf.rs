//! Leaf's routes, for Leaf callers switching unchanged: `/api/segment/get/{key}` and
//! `/api/snowflake/get/{key}` (one ID as a plain decimal body) and `/decodeSnowflakeId`.
//! Leaf sends no token, so these are served only when `[leaf] enabled`, and the ID
//! routes only for `[leaf] bizs` (snowflake IDs also only for `[snowflake] bizs`).

use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use serde_json::json;

use super::AppState;
use super::Params;
use super::base::app_state;
use super::error::retry_after_secs;
use super::observe::Observer;
use crate::biz::BizTag;
use crate::service::Error;
use crate::service::{leaf_time, parse_and_decode};
use crate::store::StoreError;

/// Leaf's routes. Leaf maps them for every method (`@RequestMapping` without one).
pub(super) fn routes(cfg: &mut web::ServiceConfig, observer: &Observer) {
    cfg.service(
        observer
            .resource("/api/segment/get/{key}")
            .route(web::route().to(segment)),
    )
    .service(
        observer
            .resource("/api/snowflake/get/{key}")
            .route(web::route().to(snowflake_id)),
    )
    .service(
        observer
            .resource("/decodeSnowflakeId")
            .route(web::route().to(decode_leaf)),
    );
}

/// What Spring writes for a `String` answer: Leaf's exact content type.
static LEAF_TEXT: HeaderValue = HeaderValue::from_static("text/plain;charset=UTF-8");

/// A short plain-text answer with `status`, as Leaf callers read them.
fn plain(status: StatusCode, body: String) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((CONTENT_TYPE, LEAF_TEXT.clone()))
        .body(body)
}

/// `/api/segment/get/{key}`: one ID of `key` as a decimal body. Errors are a non-2xx
/// status with a one-line body: 400 for a malformed key, 404 for a key not served here
/// (not in `[leaf] bizs`, or no such biz), 503 while no database can serve it.
async fn segment(req: HttpRequest) -> HttpResponse {
    let (state, biz) = match served_key(&req) {
        Ok(served) => served,
        Err(refused) => return *refused,
    };
    match state.ordered_ids(&biz, 1).await {
        Err(Error::Store(StoreError::NotFound(_))) => not_served(&biz),
        ids => answer(&biz, ids.map(|(ids, _)| ids)),
    }
}

/// `/api/snowflake/get/{key}`: one snowflake ID as a decimal body, from this server's
/// leased worker ID. 404 for a key not in both `[leaf] bizs` and `[snowflake] bizs`;
/// 503 (with `Retry-After`) while no worker ID is held or the clock is behind.
async fn snowflake_id(req: HttpRequest) -> HttpResponse {
    let (state, biz) = match served_key(&req) {
        Ok(served) => served,
        Err(refused) => return *refused,
    };
    if !state.snowflake.serves(&biz) {
        return not_served(&biz);
    }
    answer(
        &biz,
        state
            .snowflake
            .next_ids(&biz, 1)
            .await
            .map(|(_, ids)| ids)
            .map_err(Error::from),
    )
}

/// The key of a Leaf ID route, if Leaf's routes serve it; else the answer refusing it.
fn served_key(req: &HttpRequest) -> Result<(&AppState, BizTag), Box<HttpResponse>> {
    let key = req.match_info().get("key").unwrap_or_default();
    let state = app_state(req).map_err(|e| Box::new(plain(e.status_code(), e.to_string())))?;
    let Ok(biz) = BizTag::parse(key) else {
        return Err(Box::new(plain(
            StatusCode::BAD_REQUEST,
            "key must be 1 to 63 characters of letters, digits, '_', '-' or '.'".into(),
        )));
    };
    if !state.leaf.serves(&biz) {
        return Err(Box::new(not_served(&biz)));
    }
    Ok((state, biz))
}

/// The one ID as Leaf's plain body, or the error as a short plain body.
fn answer(biz: &BizTag, ids: Result<Vec<i64>, Error>) -> HttpResponse {
    match ids {
        Ok(ids) => match ids.first() {
            Some(id) => plain(StatusCode::OK, id.to_string()),
            None => plain(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("no ID for key `{biz}`"),
            ),
        },
        Err(e) => {
            let mut response = plain(e.status_code(), e.to_string());
            if let Error::Snowflake(issue) = &e
                && let Some(wait) = issue.retry_after()
                && let Ok(value) = HeaderValue::from_str(&retry_after_secs(wait))
            {
                response.headers_mut().insert(RETRY_AFTER, value);
            }
            response
        }
    }
}

/// The one answer for a key the Leaf routes do not serve, whether or not the biz exists:
/// the allow-list does not tell which bizs there are.
fn not_served(biz: &BizTag) -> HttpResponse {
    plain(
        StatusCode::NOT_FOUND,
        format!("key `{biz}` is not served here"),
    )
}

/// `/decodeSnowflakeId?snowflakeId=N`: Leaf's JSON, every value a string, `timestamp`
/// as `ms(yyyy-MM-dd HH:mm:ss.SSS)` (in UTC). A missing or malformed value gets 400
/// with Leaf's `errorMsg` key, where Leaf answers 200.
async fn decode_leaf(req: HttpRequest) -> HttpResponse {
    let state = match app_state(&req) {
        Ok(state) => state,
        Err(e) => return e.error_response(),
    };
    let params = Params::from_query(&req);
    let decoded = params
        .get("snowflakeId")
        .ok_or_else(|| "snowflakeId is required".to_owned())
        .and_then(|value| {
            parse_and_decode(value, state.snowflake.epoch_ms(), &state.snowflake.layout())
        });
    match decoded {
        Ok(d) => HttpResponse::Ok().json(json!({
            "timestamp": format!("{}({})", d.timestamp_ms, leaf_time(d.timestamp_ms)),
            "workerId": d.worker_id.to_string(),
            "sequenceId": d.sequence.to_string(),
        })),
        Err(message) => HttpResponse::BadRequest().json(json!({ "errorMsg": message })),
    }
}

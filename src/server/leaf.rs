//! Leaf's routes, for Leaf callers switching unchanged: `/api/segment/get/{key}` and
//! `/api/snowflake/get/{key}` (one ID as a plain decimal body) and `/decodeSnowflakeId`.
//! Leaf sends no token, so these are served only when `[leaf] enabled`, and the ID
//! routes only for `[leaf] bizs` (snowflake IDs also only for `[snowflake] bizs`).

use std::time::{Duration, UNIX_EPOCH};

use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use serde_json::json;

use super::AppState;
use super::error::{ApiError, retry_after_secs};
use super::observe::Observer;
use super::{Params, app_state};
use crate::biz::BizTag;
use crate::snowflake::{self, Decoded, Layout};
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
        Err(ApiError::Store(StoreError::NotFound(_))) => not_served(&biz),
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
            .map_err(ApiError::from),
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
fn answer(biz: &BizTag, ids: Result<Vec<i64>, ApiError>) -> HttpResponse {
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
            if let ApiError::Snowflake(issue) = &e
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

/// Parses `value` as a snowflake ID (a non-negative decimal `i64` within the layout's
/// bits) and decodes it in `layout`.
pub(super) fn parse_and_decode(
    value: &str,
    epoch_ms: i64,
    layout: &Layout,
) -> Result<Decoded, String> {
    let shown: String = value.chars().take(32).collect();
    let id = value
        .parse::<i64>()
        .map_err(|_| format!("snowflakeId must be a decimal integer, got `{shown}`"))?;
    snowflake::decode(id, epoch_ms, layout).map_err(|e| format!("snowflakeId `{shown}`: {e}"))
}

/// `ms` as Leaf's `yyyy-MM-dd HH:mm:ss.SSS`, in UTC. Decoded timestamps are at or
/// after a non-negative epoch; a wide layout's may lie past the year 9999, which the
/// formatter does not hold: those are shown as its last millisecond.
pub(super) fn leaf_time(ms: i64) -> String {
    /// 9999-12-31 23:59:59.999 UTC.
    const LAST_MS: u64 = 253_402_300_799_999;
    let since = Duration::from_millis(u64::try_from(ms).unwrap_or(0).min(LAST_MS));
    humantime::format_rfc3339_millis(UNIX_EPOCH + since)
        .to_string()
        .replacen('T', " ", 1)
        .trim_end_matches('Z')
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_as_leaf_shows_them() {
        // Leaf's own example, 1567733700834, shown at UTC+8 as 2019-09-06 09:35:00.834.
        assert_eq!(leaf_time(1_567_733_700_834), "2019-09-06 01:35:00.834");
        assert_eq!(leaf_time(0), "1970-01-01 00:00:00.000");
    }

    #[test]
    fn malformed_values_are_refused_clearly() {
        for bad in ["", "abc", "1.5", "-1", "99999999999999999999"] {
            let e = parse_and_decode(bad, snowflake::LEAF_EPOCH_MS, &Layout::LEAF).unwrap_err();
            assert!(e.contains("snowflakeId"), "{bad}: {e}");
        }
        let e = parse_and_decode("9007199254740992", 0, &Layout::JS).unwrap_err();
        assert!(e.contains("53 bits"), "{e}");
        assert_eq!(leaf_time(i64::MAX), "9999-12-31 23:59:59.999");
    }
}

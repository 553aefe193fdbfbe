//! The JSON API: real status codes, `{"error":{"code","message"}}` bodies, and the
//! token in `Authorization: Bearer …`.

use std::future::Future;

use actix_web::dev::HttpServiceFactory;
use actix_web::http::Method;
use actix_web::http::header;
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, guard, web};
use serde_json::json;

use super::Params;
use super::base::{AppState, app_state};
use super::base::{bearer, visible_ascii};
use super::clients::GiveBackRequest;
use super::handed_out::ClientId;
use super::observe::Observer;
use crate::biz::{BatchSize, BizTag};
use crate::segment::SegmentRange;
use crate::service::Error;
use crate::service::authorize;

pub(super) fn routes(cfg: &mut web::ServiceConfig, observer: &Observer) {
    cfg.service(per_biz(observer, "/v1/ids", "/v1/ids/{biz}", ids))
        .service(per_biz(
            observer,
            "/v1/segments",
            "/v1/segments/{biz}",
            segment,
        ))
        .service(
            observer
                .resource("/v1/segments/{biz}/return")
                .route(web::post().to(give_back)),
        );
}

/// The header a client library identifies itself with.
const CLIENT_HEADER: &str = "x-segmint-client";

/// `/healthz`, served on every address.
pub(super) fn health(cfg: &mut web::ServiceConfig, observer: &Observer) {
    cfg.service(observer.resource("/healthz").route(web::get().to(healthz)));
}

/// The route `{prefix}/{biz}` (named `template` in metrics and logs) for GET and POST,
/// answering 405 with `Allow: GET, POST` to any other method, as a resource would.
///
/// A resource pattern with a `{biz}` segment is a regular expression the router runs on
/// every request, about 0.25 µs of a 2.6 µs request handled in process. Here the prefix is matched as
/// a constant and a guard counts the path's slashes: the path is one segment longer than
/// the prefix, not empty and without a trailing slash, or the router goes on to the next
/// route and finally to the unmatched answer, as it would for the pattern. Counting in
/// the raw path is counting in the router's decoded one, because the router leaves `%2F`
/// encoded. The segment is the rest of the decoded path (see [`biz_segment`]).
fn per_biz<F, Fut>(
    observer: &Observer,
    prefix: &'static str,
    template: &'static str,
    handler: F,
) -> impl HttpServiceFactory + use<F, Fut>
where
    F: Fn(HttpRequest) -> Fut + Clone + 'static,
    Fut: Future<Output = Result<HttpResponse, Error>> + 'static,
{
    let slashes = prefix.matches('/').count() + 1;
    let one_more_segment = move |ctx: &guard::GuardContext<'_>| {
        let path = ctx.head().uri.path();
        !path.ends_with('/') && path.bytes().filter(|&b| b == b'/').count() == slashes
    };
    let get_or_post = move |req: HttpRequest| {
        let handler = handler.clone();
        async move {
            if matches!(*req.method(), Method::GET | Method::POST) {
                handler(req).await
            } else {
                Ok(HttpResponse::MethodNotAllowed()
                    .insert_header(header::Allow(vec![Method::GET, Method::POST]))
                    .finish())
            }
        }
    };
    web::scope(prefix)
        .guard(guard::fn_guard(one_more_segment))
        .default_service(web::to(get_or_post))
        .wrap(observer.route(template))
}

/// The `{biz}` segment of a [`per_biz`] route: what follows the prefix in the router's
/// decoded path, as the pattern `{prefix}/{biz}` would have captured it.
fn biz_segment(req: &HttpRequest) -> &str {
    let rest = req.match_info().unprocessed();
    rest.strip_prefix('/').unwrap_or(rest)
}

/// Parses the biz of the path and checks the caller may use it. The segment is taken
/// as the router matched it, without an owned copy: the router has already decoded the
/// characters a biz name may hold (`%65` is `e`), and what is still encoded fails
/// `BizTag::parse` as its decoded form would.
async fn authorized(state: &AppState, req: &HttpRequest) -> Result<BizTag, Error> {
    let biz = BizTag::parse(biz_segment(req))?;
    authorize(&state.store, bearer(req)?, &biz).await?;
    Ok(biz)
}

async fn ids(req: HttpRequest) -> Result<HttpResponse, Error> {
    let state = app_state(&req)?;
    let params = Params::from_query(&req);
    let count = BatchSize::parse("count", params.get("count"))?;
    let as_strings = match params.get("as") {
        None => None,
        Some("string") => Some(true),
        Some("number") => Some(false),
        Some(other) => {
            return Err(Error::BadRequest(format!(
                "`as` must be `string` or `number`, got `{}`",
                other.chars().take(32).collect::<String>()
            )));
        }
    };
    let biz = authorized(state, &req).await?;
    // Refused before any ID is taken: a bad request changes nothing.
    if as_strings == Some(false)
        && state
            .shape_of(&biz)
            .await?
            .is_some_and(|s| !s.format.is_plain())
    {
        return Err(Error::BadRequest(format!(
            "biz `{biz}` has a format: its IDs are strings, `as=number` cannot be served"
        )));
    }
    let (ids, shape) = state.ordered_ids(&biz, count.get()).await?;
    let format = shape.as_ref().map(|s| &s.format);
    let formatted = format.is_some_and(|f| !f.is_plain());
    let strings = formatted || as_strings.unwrap_or(shape.as_ref().is_some_and(|s| s.as_string));
    if !strings {
        return Ok(HttpResponse::Ok().json(Ids {
            biz: biz.as_str(),
            ids: &ids,
        }));
    }
    let written = ids
        .iter()
        .map(|&id| match format {
            Some(f) => f.encode(id),
            None => Ok(id.to_string()),
        })
        .collect::<Result<Vec<String>, _>>()
        .map_err(|e| Error::Conflict {
            code: "id_space_exhausted",
            message: format!("biz `{biz}`: {e}"),
        })?;
    Ok(HttpResponse::Ok().json(json!({ "biz": biz.as_str(), "ids": written })))
}

/// `{"biz": …, "ids": […]}`, serialized straight from the slice.
#[derive(serde::Serialize)]
struct Ids<'a> {
    biz: &'a str,
    ids: &'a [i64],
}

/// The `step` parameter: a client's size hint, a positive decimal integer that fits
/// an i64, if given.
///
/// # Errors
/// 400 naming `step` for anything else.
fn asked_step(value: Option<&str>) -> Result<Option<i64>, Error> {
    let Some(value) = value else {
        return Ok(None);
    };
    value
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| value.parse::<i64>().ok())
        .flatten()
        .filter(|&n| n > 0)
        .map(Some)
        .ok_or_else(|| {
            Error::BadRequest(format!(
                "`step` must be a positive whole number of at most {}, got `{}`",
                i64::MAX,
                value.chars().take(32).collect::<String>()
            ))
        })
}

/// The client's id from [`CLIENT_HEADER`], if sent.
///
/// # Errors
/// 400 naming the header when it is not a valid id.
fn client_id(req: &HttpRequest) -> Result<Option<ClientId>, Error> {
    let Some(value) = req.headers().get(CLIENT_HEADER) else {
        return Ok(None);
    };
    let bad = |why: String| Error::BadRequest(format!("`X-Segmint-Client`: {why}"));
    let value = visible_ascii(value.as_bytes())
        .ok_or_else(|| bad("the header must be visible ASCII".into()))?;
    ClientId::parse(value).map(Some).map_err(bad)
}

async fn segment(req: HttpRequest) -> Result<HttpResponse, Error> {
    let state = app_state(&req)?;
    let asked = asked_step(Params::from_query(&req).get("step"))?;
    let client = client_id(&req)?;
    let biz = authorized(state, &req).await?;
    if let Some(shape) = state.shape_of(&biz).await?
        && let Some(period) = &shape.period
    {
        let carved = state.carve_for_client(&biz, asked, period).await?;
        let mut answer = segment_answer(&biz, &carved.range, state.preload_percent);
        answer["period"] = json!(carved.period);
        answer["period_left_ms"] = json!(carved.left_ms);
        return Ok(HttpResponse::Ok().json(answer));
    }
    state.check_segments(&biz).await?;
    let reservation = state.segment_for_client(&biz, asked, client).await?;
    let mut answer = segment_answer(&biz, &reservation.range, state.preload_percent);
    answer["database"] = json!(state.store.database_names()[reservation.database]);
    answer["version"] = json!(reservation.version);
    Ok(HttpResponse::Ok().json(answer))
}

/// The fields of a segment in `/v1/segments`' answer.
fn segment_answer(biz: &BizTag, range: &SegmentRange, preload_percent: u8) -> serde_json::Value {
    json!({
        "biz": biz.as_str(),
        "current_id": range.current_id(),
        "max_id": range.max_id(),
        "step": range.step(),
        "delta": range.residue().delta(),
        "remainder": range.residue().remainder(),
        "first_id": range.first_id(),
        "count": range.len(),
        "loading_id": range.loading_id(preload_percent),
    })
}

/// `POST /v1/segments/{biz}/return`: a client gives back the segments it holds.
async fn give_back(req: HttpRequest, body: Bytes) -> Result<HttpResponse, Error> {
    let state = app_state(&req)?;
    let request: GiveBackRequest = serde_json::from_slice(&body).map_err(|e| {
        Error::BadRequest(format!(
            "the body must be {{\"client\": …, \"segments\": [{{\"database\", \"version\", \"last_issued\"}}]}}: {e}"
        ))
    })?;
    let client = ClientId::parse(&request.client)
        .map_err(|why| Error::BadRequest(format!("`client`: {why}")))?;
    if client_id(&req)?.is_some_and(|header| header != client) {
        return Err(Error::BadRequest(
            "`X-Segmint-Client` and the body's `client` differ".into(),
        ));
    }
    let biz = BizTag::parse(req.match_info().get("biz").unwrap_or_default())?;
    authorize(&state.store, bearer(&req)?, &biz).await?;
    let done = state
        .give_back_for_client(&biz, &client, &request.segments)
        .await;
    Ok(HttpResponse::Ok().json(json!({
        "biz": biz.as_str(),
        "given_back": done.given_back,
        "wasted": done.wasted,
    })))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

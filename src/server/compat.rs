//! Tinyid-compatible routes under `/tinyid/id/`, GET and POST: the same parameters
//! (`bizType`, `token`, `batchSize`), the same response shapes and error codes, so
//! existing Tinyid clients work unchanged.

use actix_web::http::header::{CONTENT_TYPE, HeaderValue};
use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};
use serde::Serialize;

use super::Params;
use super::base::{AppState, app_state};
use super::observe::Observer;
use crate::biz::{BatchSize, BizTag};
use crate::service::Error;
use crate::service::authorize;
use crate::store::Reservation;

pub(super) fn routes(cfg: &mut web::ServiceConfig, observer: &Observer) {
    for (path, handler) in [
        ("/tinyid/id/nextId", Route::Ids),
        ("/tinyid/id/nextIdSimple", Route::IdsSimple),
        ("/tinyid/id/nextSegmentId", Route::Segment),
        ("/tinyid/id/nextSegmentIdSimple", Route::SegmentSimple),
    ] {
        // Only a POST has a form body, as in the servlet API Tinyid is built on. A GET
        // does not extract one: actix reserves 8 KiB for every body it reads.
        let get = move |req: HttpRequest| handle(handler, req, Bytes::new());
        let post = move |req: HttpRequest, body: Bytes| handle(handler, req, body);
        cfg.service(
            observer
                .resource(path)
                .route(web::get().to(get))
                .route(web::post().to(post)),
        );
    }
}

#[derive(Debug, Clone, Copy)]
enum Route {
    /// `nextId`: IDs as JSON.
    Ids,
    /// `nextIdSimple`: IDs as comma-separated text.
    IdsSimple,
    /// `nextSegmentId`: a fresh segment as JSON.
    Segment,
    /// `nextSegmentIdSimple`: a fresh segment as comma-separated text.
    SegmentSimple,
}

/// Tinyid's response envelope; `data` is left out on errors.
#[derive(Serialize)]
struct Envelope<T> {
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<T>,
    code: u32,
    message: String,
}

/// Tinyid's `SegmentId`: `currentId` is the unaligned `maxId - step`; the client aligns.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SegmentId {
    current_id: i64,
    loading_id: i64,
    max_id: i64,
    delta: i64,
    remainder: i64,
}

async fn handle(route: Route, req: HttpRequest, body: Bytes) -> HttpResponse {
    let served = match app_state(&req) {
        Ok(state) => serve(route, state, &Params::from_request(&req, &body)).await,
        Err(e) => Err(e),
    };
    served.unwrap_or_else(|e| tinyid_error(route, &e))
}

/// Tinyid's error shapes: HTTP 200 with `code`/`message` for the JSON routes, an
/// empty body for the simple ones (the reason travels in `X-Segmint-Error`).
fn tinyid_error(route: Route, e: &Error) -> HttpResponse {
    match route {
        Route::Ids | Route::Segment => HttpResponse::Ok().json(Envelope::<()> {
            data: None,
            code: e.tinyid_code(),
            message: e.tinyid_message(),
        }),
        Route::IdsSimple | Route::SegmentSimple => {
            let reason: String = format!("{}: {}", e.tinyid_code(), e.tinyid_message())
                .chars()
                .map(|c| {
                    if c.is_ascii_graphic() || c == ' ' {
                        c
                    } else {
                        '?'
                    }
                })
                .collect();
            HttpResponse::Ok()
                .insert_header(("X-Segmint-Error", reason))
                .insert_header((CONTENT_TYPE, TEXT_PLAIN.clone()))
                .finish()
        }
    }
}

async fn serve(route: Route, state: &AppState, params: &Params<'_>) -> Result<HttpResponse, Error> {
    let biz = BizTag::parse(
        params
            .get("bizType")
            .ok_or_else(|| Error::BadRequest("bizType is required".into()))?,
    )?;
    let batch = match route {
        Route::Ids | Route::IdsSimple => BatchSize::parse("batchSize", params.get("batchSize"))?,
        Route::Segment | Route::SegmentSimple => BatchSize::parse("batchSize", None)?,
    };
    authorize(&state.store, params.get("token"), &biz).await?;
    Ok(match route {
        Route::Ids => {
            let (ids, _) = state.ordered_ids(&biz, batch.get()).await?;
            HttpResponse::Ok().json(Envelope {
                data: Some(ids),
                code: 200,
                message: String::new(),
            })
        }
        Route::IdsSimple => {
            let (ids, _) = state.ordered_ids(&biz, batch.get()).await?;
            text(join(ids.iter()))
        }
        Route::Segment => {
            state.check_segments(&biz).await?;
            let s = segment_id(state, state.segment_for_client(&biz, None, None).await?);
            HttpResponse::Ok().json(Envelope {
                data: Some(s),
                code: 200,
                message: String::new(),
            })
        }
        Route::SegmentSimple => {
            state.check_segments(&biz).await?;
            let s = segment_id(state, state.segment_for_client(&biz, None, None).await?);
            text(join(
                [s.current_id, s.loading_id, s.max_id, s.delta, s.remainder].iter(),
            ))
        }
    })
}

fn segment_id(state: &AppState, r: Reservation) -> SegmentId {
    let range = r.range;
    SegmentId {
        current_id: range.current_id(),
        loading_id: range.loading_id(state.preload_percent),
        max_id: range.max_id(),
        delta: range.residue().delta(),
        remainder: range.residue().remainder(),
    }
}

fn join<'a>(values: impl ExactSizeIterator<Item = &'a i64>) -> String {
    use std::fmt::Write;
    // Room for IDs of up to 19 digits and their commas: written without reallocating.
    let mut out = String::with_capacity(values.len() * 20);
    for (i, v) in values.enumerate() {
        let sep = if i > 0 { "," } else { "" };
        // Writing to a String cannot fail.
        let _ = write!(out, "{sep}{v}");
    }
    out
}

/// `text/plain; charset=utf-8`, shared rather than copied into each response.
static TEXT_PLAIN: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");

fn text(body: String) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, TEXT_PLAIN.clone()))
        .body(body)
}

//! The routes of sequence bizs (`/v1/sequences/{biz}/…`): per-key numbers that only go
//! up. A request for a key whose section another server owns is forwarded there once
//! (one hop); a forwarded request is never forwarded again.

use std::collections::BTreeMap;

use actix_web::http::header::AUTHORIZATION;
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

use super::error::ApiError;
use super::observe::Observer;
use super::v1::bearer;
use super::{AppState, Params, app_state, authorize};
use crate::biz::BizTag;
use crate::sequence::counters::Taken;
use crate::sequence::{MAX_COUNT, check_key};
use crate::sequencer::{Elsewhere, SequenceBiz, route_version};
use crate::store::StoreError;

/// The header a forwarded request carries: the owner answers it or refuses, never
/// forwards it on.
pub const FORWARDED: &str = "x-segmint-forwarded";

pub(super) fn routes(cfg: &mut web::ServiceConfig, observer: &Observer) {
    cfg.service(
        observer
            .resource("/v1/sequences/{biz}/next")
            .route(web::get().to(next))
            .route(web::post().to(next)),
    )
    .service(
        observer
            .resource("/v1/sequences/{biz}/current")
            .route(web::get().to(current)),
    )
    .service(
        observer
            .resource("/v1/sequences/{biz}/routes")
            .route(web::get().to(routes_of)),
    );
}

/// A key as JSON may give it: text, or an integer (written in decimal).
#[derive(Deserialize)]
#[serde(untagged)]
enum KeyValue {
    Text(String),
    Integer(i64),
}

impl KeyValue {
    fn into_key(self) -> String {
        match self {
            KeyValue::Text(t) => t,
            KeyValue::Integer(i) => i.to_string(),
        }
    }
}

/// The body of `POST …/next`: one key or many, and how many numbers each takes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NextBody {
    key: Option<KeyValue>,
    keys: Option<Vec<KeyValue>>,
    count: Option<i64>,
}

/// What a request for numbers asks.
struct Asked {
    keys: Vec<String>,
    /// Whether the keys came as a list (answered as one).
    many: bool,
    count: i64,
}

/// The sequence biz of the path, checked for the caller's token.
///
/// # Errors
/// 400 for a bad name, 401/403 for the token, 404 for an unknown biz, 409
/// `not_a_sequence` for a biz of IDs.
async fn sequence_biz(
    state: &AppState,
    req: &HttpRequest,
) -> Result<std::sync::Arc<SequenceBiz>, ApiError> {
    let biz = BizTag::parse(req.match_info().get("biz").unwrap_or_default())?;
    authorize(&state.store, bearer(req)?, &biz).await?;
    match state.shape_of(&biz).await?.and_then(|s| s.sequence) {
        Some(shape) => Ok(state.sequencer.biz(biz.as_str(), shape)),
        None => Err(ApiError::Conflict {
            code: "not_a_sequence",
            message: format!(
                "biz `{biz}` issues IDs, not per-key sequences: take its IDs from /v1/ids/{biz}"
            ),
        }),
    }
}

fn bad(message: String) -> ApiError {
    ApiError::BadRequest(message)
}

/// The count asked for, 1 when not given.
fn count_of(count: Option<i64>) -> Result<i64, ApiError> {
    let count = count.unwrap_or(1);
    match (1..=MAX_COUNT).contains(&count) {
        true => Ok(count),
        false => Err(bad(format!(
            "`count` must be between 1 and {MAX_COUNT}, got {count}"
        ))),
    }
}

/// A key checked against the rules of keys.
fn checked(key: String) -> Result<String, ApiError> {
    check_key(&key).map_err(|e| {
        let shown: String = key.chars().take(32).collect();
        bad(format!("key `{shown}`: {e}"))
    })?;
    Ok(key)
}

/// What `…/next` asks: `key` and `count` in the query (GET), or a JSON body (POST).
fn asked(req: &HttpRequest, body: &Bytes) -> Result<Asked, ApiError> {
    if req.method() == actix_web::http::Method::GET || body.is_empty() {
        let params = Params::from_query(req);
        let key = params
            .get("key")
            .ok_or_else(|| bad("`key` is missing".into()))?;
        let count = match params.get("count") {
            None => None,
            Some(c) => Some(c.parse::<i64>().map_err(|_| {
                bad(format!(
                    "`count` must be a whole number, got `{}`",
                    c.chars().take(32).collect::<String>()
                ))
            })?),
        };
        return Ok(Asked {
            keys: vec![checked(key.to_owned())?],
            many: false,
            count: count_of(count)?,
        });
    }
    let body: NextBody = serde_json::from_slice(body).map_err(|e| {
        bad(format!(
            "the body must be {{\"key\": …}} or {{\"keys\": […]}}, with an optional \"count\": {e}"
        ))
    })?;
    let count = count_of(body.count)?;
    let (keys, many) = match (body.key, body.keys) {
        (Some(key), None) => (vec![key], false),
        (None, Some(keys)) => (keys, true),
        _ => return Err(bad("give one of `key` and `keys`".into())),
    };
    if keys.is_empty() || keys.len() > MAX_COUNT as usize {
        return Err(bad(format!(
            "`keys` must hold 1 to {MAX_COUNT} keys, got {}",
            keys.len()
        )));
    }
    let keys = keys
        .into_iter()
        .map(|k| checked(k.into_key()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Asked { keys, many, count })
}

/// What a refusal of the sequencer is to the caller.
fn refusal(biz: &SequenceBiz, elsewhere: Elsewhere) -> ApiError {
    match elsewhere {
        Elsewhere::Owner(owner) => ApiError::Elsewhere {
            message: format!(
                "this server does not own the key's section of `{}`{}; try again",
                biz.name(),
                owner
                    .as_deref()
                    .map(|o| format!(" (owner: {o})"))
                    .unwrap_or_default()
            ),
            owner,
        },
        Elsewhere::Unavailable(why) => StoreError::Unavailable(why).into(),
        Elsewhere::Exhausted => ApiError::Conflict {
            code: "sequence_exhausted",
            message: format!(
                "a section of `{}` has no number left below 2^63",
                biz.name()
            ),
        },
    }
}

fn number(key: &str, taken: Taken) -> serde_json::Value {
    json!({"key": key, "number": taken.last, "first": taken.first})
}

/// `GET|POST /v1/sequences/{biz}/next`: the next number (or `count` numbers) of one key
/// or of each of many keys.
async fn next(req: HttpRequest, body: Bytes) -> Result<HttpResponse, ApiError> {
    let state = app_state(&req)?;
    let asked = asked(&req, &body)?;
    let biz = sequence_biz(state, &req).await?;
    let forwarded = req.headers().contains_key(FORWARDED);
    let sequencer = &state.sequencer;
    // Answered here where this server owns the section; the rest grouped by owner.
    let mut answers: Vec<Option<serde_json::Value>> = vec![None; asked.keys.len()];
    let mut remote: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, key) in asked.keys.iter().enumerate() {
        match sequencer.next(&biz, key, asked.count).await {
            Ok(taken) => answers[i] = Some(number(key, taken)),
            Err(Elsewhere::Owner(Some(owner))) if !forwarded && owner != sequencer.address() => {
                remote.entry(owner).or_default().push(i);
            }
            Err(e) => return Err(refusal(&biz, e)),
        }
    }
    for (owner, at) in remote {
        let keys: Vec<&str> = at.iter().map(|&i| asked.keys[i].as_str()).collect();
        let body = json!({"keys": keys, "count": asked.count});
        state.sequencer.note_forwarded(&biz);
        let answered = forward(state, &req, &owner, biz.name(), &body).await?;
        let numbers = answered["numbers"].as_array().cloned().unwrap_or_default();
        if numbers.len() != at.len() {
            return Err(StoreError::Unavailable(format!(
                "the owner {owner} answered {} numbers for {} keys",
                numbers.len(),
                at.len()
            ))
            .into());
        }
        for (i, n) in at.into_iter().zip(numbers) {
            answers[i] = Some(n);
        }
    }
    let numbers: Vec<serde_json::Value> = answers.into_iter().flatten().collect();
    let name = biz.name();
    match asked.many {
        true => Ok(HttpResponse::Ok().json(json!({"biz": name, "numbers": numbers}))),
        false => {
            let mut one = numbers.into_iter().next().unwrap_or_default();
            one["biz"] = json!(name);
            Ok(HttpResponse::Ok().json(one))
        }
    }
}

/// Sends `body` to `owner`'s `…/next` with the caller's token, and returns its answer;
/// an owner's refusal is passed on as it is.
async fn forward(
    state: &AppState,
    req: &HttpRequest,
    owner: &str,
    biz: &str,
    body: &serde_json::Value,
) -> Result<serde_json::Value, ApiError> {
    let mut request = state
        .forward
        .post(format!("{owner}/v1/sequences/{biz}/next"))
        .header(FORWARDED, "1")
        .json(body);
    if let Some(auth) = req.headers().get(AUTHORIZATION) {
        request = request.header(AUTHORIZATION.as_str(), auth.as_bytes());
    }
    let unreachable = |e: reqwest::Error| -> ApiError {
        ApiError::Elsewhere {
            owner: Some(owner.to_owned()),
            message: format!("the owner of the key's section, {owner}, did not answer: {e}"),
        }
    };
    let response = request.send().await.map_err(unreachable)?;
    let status = response.status();
    let answer: serde_json::Value = response.json().await.map_err(unreachable)?;
    if status.is_success() {
        return Ok(answer);
    }
    let message = answer["error"]["message"]
        .as_str()
        .unwrap_or("refused")
        .to_owned();
    Err(match status.as_u16() {
        503 => ApiError::Elsewhere {
            owner: answer["error"]["owner"].as_str().map(str::to_owned),
            message,
        },
        409 => ApiError::Conflict {
            code: "sequence_exhausted",
            message,
        },
        _ => StoreError::Unavailable(format!("the owner {owner} refused: {message}")).into(),
    })
}

/// `GET /v1/sequences/{biz}/current?key=…`: the number a key is at, without taking one.
async fn current(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let state = app_state(&req)?;
    let params = Params::from_query(&req);
    let key = checked(
        params
            .get("key")
            .ok_or_else(|| bad("`key` is missing".into()))?
            .to_owned(),
    )?;
    let biz = sequence_biz(state, &req).await?;
    let forwarded = req.headers().contains_key(FORWARDED);
    match state.sequencer.current(&biz, &key).await {
        Ok(n) => Ok(HttpResponse::Ok().json(json!({"biz": biz.name(), "key": key, "number": n}))),
        Err(Elsewhere::Owner(Some(owner))) if !forwarded && owner != state.sequencer.address() => {
            let mut request = state
                .forward
                .get(format!("{owner}{}", req.uri()))
                .header(FORWARDED, "1");
            if let Some(auth) = req.headers().get(AUTHORIZATION) {
                request = request.header(AUTHORIZATION.as_str(), auth.as_bytes());
            }
            state.sequencer.note_forwarded(&biz);
            let failed = |e: reqwest::Error| ApiError::Elsewhere {
                owner: Some(owner.clone()),
                message: format!("the owner of the key's section did not answer: {e}"),
            };
            let response = request.send().await.map_err(failed)?;
            let status = response.status().as_u16();
            let body = response.bytes().await.map_err(failed)?;
            Ok(HttpResponse::build(
                actix_web::http::StatusCode::from_u16(status)
                    .unwrap_or(actix_web::http::StatusCode::BAD_GATEWAY),
            )
            .content_type("application/json")
            .body(body))
        }
        Err(e) => Err(refusal(&biz, e)),
    }
}

/// `GET /v1/sequences/{biz}/routes`: each section's owner as this server last saw it,
/// with a version that changes whenever an owner does, for clients that go to the
/// owner directly.
async fn routes_of(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let state = app_state(&req)?;
    let biz = sequence_biz(state, &req).await?;
    let owners = state.sequencer.owners(&biz);
    Ok(HttpResponse::Ok().json(json!({
        "biz": biz.name(),
        "sections": biz.shape().sections,
        "version": route_version(&owners),
        "owners": owners,
    })))
}

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
        Elsewhere::Moving(epoch) => ApiError::Elsewhere {
            message: format!(
                "a layout change to epoch {epoch} is carrying the key's section of `{}` to the new databases; try again",
                biz.name()
            ),
            owner: None,
        },
        Elsewhere::Unavailable { answered } => StoreError::Unavailable(format!(
            "no section of `{}` could be claimed: {answered} database(s) answered, fewer than a majority; try again",
            biz.name()
        ))
        .into(),
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

/// The caller's credentials, passed on with a forwarded request: the `Authorization`
/// header's value.
pub(super) type Credentials<'a> = Option<&'a [u8]>;

/// `count` numbers of each of `keys` (in order): forwarded once per other owner (as
/// this server last saw the owners; unless `forwarded`: a request is forwarded once at
/// most), then taken here for the rest. A refused forward refuses the request before
/// anything is taken here; numbers the owners that answered before it took are
/// skipped (their keys' next numbers lie above them).
///
/// # Errors
/// As the owners refuse: 503 while a section moves, 409 when one is exhausted.
pub(super) async fn take(
    state: &AppState,
    biz: &SequenceBiz,
    keys: &[String],
    count: i64,
    (forwarded, auth): (bool, Credentials<'_>),
) -> Result<Vec<Taken>, ApiError> {
    let sequencer = &state.sequencer;
    let mut answers: Vec<Option<Taken>> = vec![None; keys.len()];
    let mut remote: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut local = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        match sequencer.owner(biz, key) {
            Some(owner) if !forwarded && owner != sequencer.address() => {
                remote.entry(owner).or_default().push(i)
            }
            _ => local.push(i),
        }
    }
    for (owner, at) in remote {
        let asked: Vec<&str> = at.iter().map(|&i| keys[i].as_str()).collect();
        let body = json!({"keys": asked, "count": count});
        sequencer.note_forwarded(biz);
        let url = format!("{owner}/v1/sequences/{}/next", biz.name());
        let request = state.forward.post(url).json(&body);
        let answered = forward(request, auth, &owner).await?;
        let numbers: Vec<Taken> = answered["numbers"]
            .as_array()
            .map(|n| {
                n.iter()
                    .filter_map(|n| {
                        Some(Taken {
                            first: n["first"].as_i64()?,
                            last: n["number"].as_i64()?,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
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
    for i in local {
        let taken = sequencer.next(biz, &keys[i], count).await;
        answers[i] = Some(taken.map_err(|e| refusal(biz, e))?);
    }
    Ok(answers.into_iter().flatten().collect())
}

/// The number `key` is at, read here or from its section's owner (once).
///
/// # Errors
/// As [`take`].
pub(super) async fn current_of(
    state: &AppState,
    biz: &SequenceBiz,
    key: &str,
    (forwarded, auth): (bool, Credentials<'_>),
) -> Result<i64, ApiError> {
    let sequencer = &state.sequencer;
    match sequencer.current(biz, key).await {
        Ok(n) => Ok(n),
        Err(Elsewhere::Owner(Some(owner))) if !forwarded && owner != sequencer.address() => {
            sequencer.note_forwarded(biz);
            let url = format!("{owner}/v1/sequences/{}/current", biz.name());
            let request = state.forward.get(url).query(&[("key", key)]);
            let answer = forward(request, auth, &owner).await?;
            answer["number"].as_i64().ok_or_else(|| {
                StoreError::Unavailable(format!("the owner {owner} answered no number")).into()
            })
        }
        Err(e) => Err(refusal(biz, e)),
    }
}

/// `GET|POST /v1/sequences/{biz}/next`: the next number (or `count` numbers) of one key
/// or of each of many keys.
async fn next(req: HttpRequest, body: Bytes) -> Result<HttpResponse, ApiError> {
    let state = app_state(&req)?;
    let asked = asked(&req, &body)?;
    let biz = sequence_biz(state, &req).await?;
    let taken = take(state, &biz, &asked.keys, asked.count, credentials(&req)).await?;
    let mut numbers = asked.keys.iter().zip(taken).map(|(k, t)| number(k, t));
    let name = biz.name();
    match asked.many {
        true => {
            let numbers: Vec<serde_json::Value> = numbers.collect();
            Ok(HttpResponse::Ok().json(json!({"biz": name, "numbers": numbers})))
        }
        false => {
            let mut one = numbers.next().unwrap_or_default();
            one["biz"] = json!(name);
            Ok(HttpResponse::Ok().json(one))
        }
    }
}

/// Whether the request was forwarded already, and its credentials.
fn credentials(req: &HttpRequest) -> (bool, Credentials<'_>) {
    let forwarded = req.headers().contains_key(FORWARDED);
    let auth = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
    (forwarded, auth)
}

/// Sends `request` to `owner` as a forwarded request with the caller's credentials, and
/// returns its answer; an owner's refusal is passed on as it is.
async fn forward(
    request: reqwest::RequestBuilder,
    auth: Credentials<'_>,
    owner: &str,
) -> Result<serde_json::Value, ApiError> {
    let mut request = request.header(FORWARDED, "1");
    if let Some(auth) = auth {
        request = request.header(AUTHORIZATION.as_str(), auth);
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
            // The owner's code, as the owner would have answered it here.
            code: match answer["error"]["code"].as_str() {
                Some("not_a_sequence") => "not_a_sequence",
                _ => "sequence_exhausted",
            },
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
    let n = current_of(state, &biz, &key, credentials(&req)).await?;
    Ok(HttpResponse::Ok().json(json!({"biz": biz.name(), "key": key, "number": n})))
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

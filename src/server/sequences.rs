//! The routes of sequence bizs (`/v1/sequences/{biz}/…`): per-key numbers that only go
//! up, taken by the service ([`Service::take`](crate::service::Service::take)), which
//! forwards a key whose section another server owns there once; a request that carries
//! [`FORWARDED`] is never forwarded again.

use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

use super::Params;
use super::base::bearer;
use super::base::{AppState, app_state};
use super::forward::FORWARDED;
use super::observe::Observer;
use crate::biz::BizTag;
use crate::sequence::counters::Taken;
use crate::sequence::{MAX_COUNT, check_key};
use crate::sequencer::{SequenceBiz, route_version};
use crate::service::{Caller, Error};

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
) -> Result<std::sync::Arc<SequenceBiz>, Error> {
    let biz = BizTag::parse(req.match_info().get("biz").unwrap_or_default())?;
    state.sequence_biz(&biz, bearer(req)?).await
}

fn bad(message: String) -> Error {
    Error::BadRequest(message)
}

/// The count asked for, 1 when not given.
fn count_of(count: Option<i64>) -> Result<i64, Error> {
    let count = count.unwrap_or(1);
    match (1..=MAX_COUNT).contains(&count) {
        true => Ok(count),
        false => Err(bad(format!(
            "`count` must be between 1 and {MAX_COUNT}, got {count}"
        ))),
    }
}

/// A key checked against the rules of keys.
fn checked(key: String) -> Result<String, Error> {
    check_key(&key).map_err(|e| {
        let shown: String = key.chars().take(32).collect();
        bad(format!("key `{shown}`: {e}"))
    })?;
    Ok(key)
}

/// What `…/next` asks: `key` and `count` in the query (GET), or a JSON body (POST).
fn asked(req: &HttpRequest, body: &Bytes) -> Result<Asked, Error> {
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

fn number(key: &str, taken: Taken) -> serde_json::Value {
    json!({"key": key, "number": taken.last, "first": taken.first})
}

/// `GET|POST /v1/sequences/{biz}/next`: the next number (or `count` numbers) of one key
/// or of each of many keys.
async fn next(req: HttpRequest, body: Bytes) -> Result<HttpResponse, Error> {
    let state = app_state(&req)?;
    let asked = asked(&req, &body)?;
    let biz = sequence_biz(state, &req).await?;
    let taken = state
        .take(&biz, &asked.keys, asked.count, caller(&req)?)
        .await?;
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

/// The caller: its token, and whether another server forwarded the request.
fn caller(req: &HttpRequest) -> Result<Caller<'_>, Error> {
    Ok(Caller {
        token: bearer(req)?,
        forwarded: req.headers().contains_key(FORWARDED),
    })
}

/// `GET /v1/sequences/{biz}/current?key=…`: the number a key is at, without taking one.
async fn current(req: HttpRequest) -> Result<HttpResponse, Error> {
    let state = app_state(&req)?;
    let params = Params::from_query(&req);
    let key = checked(
        params
            .get("key")
            .ok_or_else(|| bad("`key` is missing".into()))?
            .to_owned(),
    )?;
    let biz = sequence_biz(state, &req).await?;
    let n = state.current(&biz, &key, caller(&req)?).await?;
    Ok(HttpResponse::Ok().json(json!({"biz": biz.name(), "key": key, "number": n})))
}

/// `GET /v1/sequences/{biz}/routes`: each section's owner as this server last saw it,
/// with a version that changes whenever an owner does, for clients that go to the
/// owner directly.
async fn routes_of(req: HttpRequest) -> Result<HttpResponse, Error> {
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

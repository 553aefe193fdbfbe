//! Requests to the Tinyid-compatible routes and the v1 API, for a server in this process
//! ([`TestApp`]) and a server process ([`Remote`]) alike, and what they answered.

use std::time::Duration;

use reqwest::header::HeaderValue;
use reqwest::{Method, RequestBuilder};
use serde_json::Value;

use super::{ServerProcess, TestApp};

/// A server to send requests to: its address and the client that reaches it.
pub trait Target {
    /// The client to send with (its timeout applies).
    fn http(&self) -> &reqwest::Client;
    /// `http://127.0.0.1:PORT`.
    fn base(&self) -> &str;
}

impl Target for TestApp {
    fn http(&self) -> &reqwest::Client {
        &self.http
    }

    fn base(&self) -> &str {
        &self.base
    }
}

/// A server known by its address only, such as a `segmint serve` process.
#[derive(Clone)]
pub struct Remote {
    /// The client, with the timeout chosen at [`Remote::new`].
    pub http: reqwest::Client,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Remote {
    /// The server at `base`, asked with requests that give up after `timeout`.
    pub fn new(base: &str, timeout: Duration) -> Remote {
        Remote {
            http: reqwest::Client::builder()
                .timeout(timeout)
                .build()
                .expect("an HTTP client"),
            base: base.to_owned(),
        }
    }
}

impl ServerProcess {
    /// A client for this server whose requests give up after `timeout`.
    pub fn remote(&self, timeout: Duration) -> Remote {
        Remote::new(&self.base, timeout)
    }
}

impl TestApp {
    /// This server as a [`Remote`] with the app's client, for a spawned task to own.
    pub fn remote(&self) -> Remote {
        Remote {
            http: self.http.clone(),
            base: self.base.clone(),
        }
    }
}

impl Target for Remote {
    fn http(&self) -> &reqwest::Client {
        &self.http
    }

    fn base(&self) -> &str {
        &self.base
    }
}

/// What a response looked like.
#[derive(Debug, PartialEq, Eq)]
pub struct Resp {
    /// The status code.
    pub status: u16,
    /// `Content-Type`, empty when absent.
    pub content_type: String,
    /// `X-Segmint-Error`: why a Tinyid `…Simple` route refused (its body is empty).
    pub error_header: Option<String>,
    /// `WWW-Authenticate`, which every 401 carries.
    pub www_authenticate: Option<String>,
    /// `Retry-After`, which a 503 carries when the wait is known.
    pub retry_after: Option<String>,
    /// The body as text.
    pub body: String,
}

impl Resp {
    /// The body as JSON; panics when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    /// The body as comma-separated integers, as `nextIdSimple` and
    /// `nextSegmentIdSimple` answer; panics when it is not.
    pub fn numbers(&self) -> Vec<i64> {
        self.body
            .split(',')
            .map(|n| {
                n.parse()
                    .unwrap_or_else(|e| panic!("`{n}` is not an integer ({e}): {self:?}"))
            })
            .collect()
    }
}

/// Sends `req` and reads the whole response.
///
/// # Errors
/// When the request fails or the body cannot be read (the server went away).
pub async fn try_send(req: RequestBuilder) -> Result<Resp, reqwest::Error> {
    let r = req.send().await?;
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().expect("ASCII header").to_string())
    };
    let content_type = header("content-type").unwrap_or_default();
    let error_header = header("x-segmint-error");
    let www_authenticate = header("www-authenticate");
    let retry_after = header("retry-after");
    Ok(Resp {
        status: r.status().as_u16(),
        content_type,
        error_header,
        www_authenticate,
        retry_after,
        body: r.text().await?,
    })
}

/// [`try_send`] to a server that must answer.
pub async fn send(req: RequestBuilder) -> Resp {
    try_send(req).await.expect("request")
}

/// The Tinyid-compatible routes under `/tinyid/id/`.
pub const COMPAT_ROUTES: [&str; 4] = [
    "nextId",
    "nextIdSimple",
    "nextSegmentId",
    "nextSegmentIdSimple",
];

/// How a compat request carries its parameters.
#[derive(Debug, Clone, Copy)]
pub enum Via {
    /// GET with the parameters in the query string.
    Get,
    /// POST with the parameters in the query string and an empty body.
    PostQuery,
    /// POST with an `application/x-www-form-urlencoded` body.
    PostForm,
}

/// Every way of carrying compat parameters.
pub const VIAS: [Via; 3] = [Via::Get, Via::PostQuery, Via::PostForm];

/// Request parameters of a compat route.
pub type Params<'a> = Vec<(&'a str, &'a str)>;

/// The parameters Tinyid's clients send: `bizType`, `token` and, when given,
/// `batchSize`.
pub fn tinyid_params<'a>(biz: &'a str, token: &'a str, batch: Option<&'a str>) -> Params<'a> {
    let mut params = vec![("bizType", biz), ("token", token)];
    params.extend(batch.map(|n| ("batchSize", n)));
    params
}

/// A request to `/tinyid/id/{route}` with `params`, carried `via` query or form.
pub fn compat_request(
    target: &impl Target,
    route: &str,
    via: Via,
    params: &[(&str, &str)],
) -> RequestBuilder {
    let encoded = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    let url = format!("{}/tinyid/id/{route}", target.base());
    let http = target.http();
    match via {
        Via::Get => http.get(format!("{url}?{encoded}")),
        Via::PostQuery => http.post(format!("{url}?{encoded}")),
        Via::PostForm => http
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(encoded),
    }
}

/// Sends [`compat_request`].
pub async fn compat(target: &impl Target, route: &str, via: Via, params: &[(&str, &str)]) -> Resp {
    send(compat_request(target, route, via, params)).await
}

/// Tinyid's `nextIdSimple` for one ID of `biz`, asked by GET as Tinyid's clients do.
pub async fn next_id_simple(target: &impl Target, biz: &str, token: &str) -> Resp {
    compat(
        target,
        "nextIdSimple",
        Via::Get,
        &tinyid_params(biz, token, None),
    )
    .await
}

/// `Authorization: Bearer <token>`, as [`request`] takes it.
pub fn bearer(token: &str) -> Option<HeaderValue> {
    Some(HeaderValue::from_str(&format!("Bearer {token}")).unwrap())
}

/// A request with `method` to `path` (with its query) carrying the raw `Authorization`
/// header `auth`, if any.
pub fn request(
    target: &impl Target,
    method: Method,
    path: &str,
    auth: Option<HeaderValue>,
) -> RequestBuilder {
    let req = target
        .http()
        .request(method, format!("{}{path}", target.base()));
    match auth {
        Some(auth) => req.header("authorization", auth),
        None => req,
    }
}

/// GET `path` (with its query) without credentials: health, metrics, status pages.
pub async fn get(target: &impl Target, path: &str) -> Resp {
    send(request(target, Method::GET, path, None)).await
}

/// Sends [`request`], as a POST when `post`, else as a GET.
pub async fn v1(target: &impl Target, post: bool, path: &str, auth: Option<HeaderValue>) -> Resp {
    let method = if post { Method::POST } else { Method::GET };
    send(request(target, method, path, auth)).await
}

/// `n` IDs of `biz` from `GET /v1/ids/{biz}?count=n`.
///
/// # Errors
/// The answer, when it is not 200 with the IDs.
pub async fn try_v1_ids(
    target: &impl Target,
    biz: &str,
    token: &str,
    n: usize,
) -> Result<Vec<i64>, String> {
    let path = format!("/v1/ids/{biz}?count={n}");
    let r = try_send(request(target, Method::GET, &path, bearer(token)))
        .await
        .map_err(|e| format!("GET {path}: {e}"))?;
    if r.status != 200 {
        return Err(format!("GET {path}: {r:?}"));
    }
    serde_json::from_value(r.json()["ids"].clone()).map_err(|e| format!("GET {path}: {e}: {r:?}"))
}

/// [`try_v1_ids`] from a server that must serve them.
pub async fn v1_ids(target: &impl Target, biz: &str, token: &str, n: usize) -> Vec<i64> {
    try_v1_ids(target, biz, token, n)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The value of the sample `series` (name with labels) in `/metrics`; panics when the
/// series is missing.
pub async fn metric(target: &impl Target, series: &str) -> f64 {
    let r = get(target, "/metrics").await;
    assert_eq!(r.status, 200, "{r:?}");
    let text = r.body;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{series} missing from\n{text}"))
        .parse()
        .unwrap()
}

/// `count` snowflake IDs of `biz` from `/v1/snowflake/{biz}`, or the answer.
pub async fn snowflakes_of(
    target: &impl Target,
    biz: &str,
    token: &str,
    count: usize,
) -> Result<Vec<i64>, Resp> {
    let r = v1(
        target,
        false,
        &format!("/v1/snowflake/{biz}?count={count}"),
        bearer(token),
    )
    .await;
    if r.status != 200 {
        return Err(r);
    }
    Ok(serde_json::from_value(r.json()["ids"].clone()).expect("ids"))
}

//! The service's [`Forward`] port over HTTP: a sequence request sent on to the server
//! that owns its key's section, as a request to that server's `/v1/sequences` routes
//! marked [`FORWARDED`], with the caller's token.

use actix_web::http::header::AUTHORIZATION;
use futures_util::future::BoxFuture;
use serde_json::json;

use crate::sequence::counters::Taken;
use crate::service::{Error, Forward};
use crate::store::StoreError;

/// The header a forwarded request carries: the owner answers it or refuses, never
/// forwards it on.
pub const FORWARDED: &str = "x-segmint-forwarded";

/// Sends sequence requests to their owners.
pub struct HttpForward {
    pub client: reqwest::Client,
}

impl Forward for HttpForward {
    fn next<'a>(
        &'a self,
        owner: &'a str,
        biz: &'a str,
        keys: &'a [&'a str],
        count: i64,
        token: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<Taken>, Error>> {
        Box::pin(async move {
            let url = format!("{owner}/v1/sequences/{biz}/next");
            let body = json!({"keys": keys, "count": count});
            let answer = send(self.client.post(url).json(&body), token, owner).await?;
            Ok(answer["numbers"]
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
                .unwrap_or_default())
        })
    }

    fn current<'a>(
        &'a self,
        owner: &'a str,
        biz: &'a str,
        key: &'a str,
        token: Option<&'a str>,
    ) -> BoxFuture<'a, Result<i64, Error>> {
        Box::pin(async move {
            let url = format!("{owner}/v1/sequences/{biz}/current");
            let request = self.client.get(url).query(&[("key", key)]);
            let answer = send(request, token, owner).await?;
            answer["number"].as_i64().ok_or_else(|| {
                StoreError::Unavailable(format!("the owner {owner} answered no number")).into()
            })
        })
    }
}

/// Sends `request` to `owner` as a forwarded request with the caller's token, and
/// returns its answer; an owner's refusal is passed on as it is.
async fn send(
    request: reqwest::RequestBuilder,
    token: Option<&str>,
    owner: &str,
) -> Result<serde_json::Value, Error> {
    let mut request = request.header(FORWARDED, "1");
    if let Some(token) = token {
        request = request.header(AUTHORIZATION.as_str(), format!("Bearer {token}"));
    }
    let unreachable = |e: reqwest::Error| -> Error {
        Error::Elsewhere {
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
        503 => Error::Elsewhere {
            owner: answer["error"]["owner"].as_str().map(str::to_owned),
            message,
        },
        409 => Error::Conflict {
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

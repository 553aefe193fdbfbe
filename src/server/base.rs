//! The server's base, which every route and the application import: the state the
//! handlers share (the service, and what only the HTTP routes keep), borrowed from the
//! request, and the caller's token as HTTP carries it. Checking a token against a biz
//! is the service's ([`crate::service::authorize`]).

use std::sync::Arc;

use actix_web::http::header::AUTHORIZATION;
use actix_web::{HttpRequest, web};

use super::handed_out::HandedOut;
use crate::config::LeafConfig;
use crate::service::{Error, Service};
use crate::store::StoreError;

/// What every handler shares: the service, and what only the HTTP routes keep.
pub struct AppState {
    pub service: Arc<Service>,
    /// Reported in Tinyid's `loadingId` for segments handed to clients.
    pub preload_percent: u8,
    /// Segments handed to identified clients, for their give-back. Plain mutex: held
    /// for a map operation, never across an await.
    pub handed_out: parking_lot::Mutex<HandedOut>,
    /// Whether and for which bizs Leaf's routes answer.
    pub leaf: LeafConfig,
}

impl std::ops::Deref for AppState {
    type Target = Service;

    fn deref(&self) -> &Service {
        &self.service
    }
}

/// The shared state, borrowed from the request. Extracting `web::Data` instead would
/// clone its `Arc`: a write, on every request, to a counter all HTTP workers share.
pub fn app_state(req: &HttpRequest) -> Result<&AppState, Error> {
    req.app_data::<web::Data<AppState>>()
        .map(|data| data.get_ref())
        .ok_or_else(|| {
            StoreError::Unavailable("the server's state is not configured".into()).into()
        })
}

/// The bearer token, if the header is present.
///
/// # Errors
/// 401 when the header is not of the form `Bearer <token>`.
pub fn bearer(req: &HttpRequest) -> Result<Option<&str>, Error> {
    let Some(value) = req.headers().get(AUTHORIZATION) else {
        return Ok(None);
    };
    visible_ascii(value.as_bytes())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| Some(token.trim()))
        .ok_or(Error::Unauthorized(
            "the Authorization header must be `Bearer <token>`",
        ))
}

/// The header value as text if it is visible ASCII and tabs, as `HeaderValue::to_str`
/// accepts it, checked without a branch per byte (this runs on every request).
pub fn visible_ascii(bytes: &[u8]) -> Option<&str> {
    let visible = bytes.iter().fold(true, |ok, &b| {
        ok & ((b' '..=b'~').contains(&b) | (b == b'\t'))
    });
    visible.then(|| std::str::from_utf8(bytes).ok()).flatten()
}

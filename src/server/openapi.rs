//! The OpenAPI 3.0 description of the HTTP API (the v1 API, health, status and the
//! Tinyid-compatible routes), served at `GET /openapi.json`. The document is
//! `openapi.json` beside this file, compiled in; `tests/fuzz.rs` fuzzes the server
//! against it with schemathesis, so it stays exact.

use actix_web::http::header::ContentType;
use actix_web::{HttpResponse, web};

use super::observe::Observer;

/// The document, as served.
pub const DOCUMENT: &str = include_str!("openapi.json");

pub(super) fn routes(cfg: &mut web::ServiceConfig, observer: &Observer) {
    cfg.service(
        observer
            .resource("/openapi.json")
            .route(web::get().to(openapi)),
    );
}

async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type(ContentType::json())
        .body(DOCUMENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_is_openapi_json() {
        let doc: serde_json::Value = serde_json::from_str(DOCUMENT).expect("valid JSON");
        assert_eq!(doc["openapi"], "3.0.3");
        assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
        for path in [
            "/v1/ids/{biz}",
            "/v1/segments/{biz}",
            "/v1/bizs",
            "/healthz",
            "/readyz",
            "/metrics",
            "/status",
            "/tinyid/id/nextId",
            "/tinyid/id/nextIdSimple",
            "/tinyid/id/nextSegmentId",
            "/tinyid/id/nextSegmentIdSimple",
        ] {
            assert!(doc["paths"][path].is_object(), "{path} is described");
        }
        for path in ["/metrics", "/status", "/v1/bizs", "/readyz"] {
            let get = &doc["paths"][path]["get"];
            assert!(get["responses"]["401"].is_object(), "{path}: 401 described");
            assert_eq!(get["security"][1]["operatorToken"], serde_json::json!([]));
        }
    }
}

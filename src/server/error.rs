//! The service's refusals over HTTP: the one table of statuses, the JSON body of the v1
//! API, and Tinyid's `code`/`message` shape for the compatible routes.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::http::header::RETRY_AFTER;
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;

use crate::service::Error;
use crate::store::StoreError;
use crate::worker::IssueError;

/// A `Retry-After` value: whole seconds, at least 1.
pub(super) fn retry_after_secs(wait: Duration) -> String {
    wait.as_secs_f64().ceil().max(1.0).to_string()
}

impl Error {
    /// Tinyid's error code: 5 for a token problem, 6 for everything else.
    pub fn tinyid_code(&self) -> u32 {
        match self {
            Error::Unauthorized(_) | Error::Forbidden(_) => 5,
            _ => 6,
        }
    }

    /// Tinyid's message: its fixed text for token problems, ours otherwise.
    pub fn tinyid_message(&self) -> String {
        match self.tinyid_code() {
            5 => "token is error".into(),
            _ => self.to_string(),
        }
    }
}

impl ResponseError for Error {
    fn status_code(&self) -> StatusCode {
        // Exhaustive, so that a new variant has to be given its status here.
        match self {
            Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::Store(e) => match e {
                StoreError::NotFound(_) => StatusCode::NOT_FOUND,
                StoreError::Overflow { .. } => StatusCode::CONFLICT,
                StoreError::ResidueConflict { .. } | StoreError::InvalidRow { .. } => {
                    StatusCode::INTERNAL_SERVER_ERROR
                }
                StoreError::Contention(_) | StoreError::Moving(_) | StoreError::Unavailable(_) => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                StoreError::Refused(_) => StatusCode::BAD_REQUEST,
                StoreError::PeriodFull { .. } | StoreError::Periodic(_) => StatusCode::CONFLICT,
                StoreError::PeriodPassed(_) | StoreError::Clock { .. } => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
            },
            Error::Conflict { .. } => StatusCode::CONFLICT,
            Error::Elsewhere { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Error::Snowflake(e) => match e {
                IssueError::NotServed(_) => StatusCode::NOT_FOUND,
                IssueError::NoWorkerId(_) | IssueError::ClockBehind { .. } => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                IssueError::Clock(_) => StatusCode::INTERNAL_SERVER_ERROR,
                IssueError::BatchTooLarge { .. } => StatusCode::BAD_REQUEST,
            },
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        if let Error::Unauthorized(_) = self {
            response.insert_header(("WWW-Authenticate", "Bearer"));
        }
        if let Error::Snowflake(e) = self
            && let Some(wait) = e.retry_after()
        {
            response.insert_header((RETRY_AFTER, retry_after_secs(wait)));
        }
        if let Error::Elsewhere { owner, .. } = self {
            response.insert_header((RETRY_AFTER, "1"));
            return response.json(json!({"error": {
                "code": self.code(), "message": self.to_string(), "owner": owner,
            }}));
        }
        response.json(json!({"error": {"code": self.code(), "message": self.to_string()}}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_variant_has_its_status_and_code() {
        let s = String::new;
        let cases = [
            (Error::BadRequest(s()), 400, "bad_request"),
            (Error::Unauthorized("no token"), 401, "unauthorized"),
            (Error::Forbidden(s()), 403, "forbidden"),
            (StoreError::NotFound(s()).into(), 404, "not_found"),
            (
                StoreError::Overflow {
                    biz: s(),
                    database: s(),
                    max_id: i64::MAX,
                    step: 1,
                }
                .into(),
                409,
                "id_space_exhausted",
            ),
            (
                StoreError::ResidueConflict {
                    biz: s(),
                    first: s(),
                    first_class: s(),
                    second: s(),
                    second_class: s(),
                }
                .into(),
                500,
                "biz_misconfigured",
            ),
            (
                StoreError::InvalidRow {
                    biz: s(),
                    database: s(),
                    reason: s(),
                }
                .into(),
                500,
                "biz_misconfigured",
            ),
            (StoreError::Contention(s()).into(), 503, "contention"),
            (StoreError::Unavailable(s()).into(), 503, "unavailable"),
            (
                StoreError::from(crate::store::Refusal::new(
                    crate::store::Reason::InvalidArgument,
                    s(),
                ))
                .into(),
                400,
                "bad_request",
            ),
            (
                IssueError::NotServed(crate::biz::BizTag::parse("a").unwrap()).into(),
                404,
                "not_found",
            ),
            (IssueError::NoWorkerId(s()).into(), 503, "no_worker_id"),
            (
                IssueError::BatchTooLarge {
                    count: 200,
                    max: 128,
                }
                .into(),
                400,
                "bad_request",
            ),
            (
                Error::Conflict {
                    code: "segments_unavailable",
                    message: s(),
                },
                409,
                "segments_unavailable",
            ),
            (
                Error::Elsewhere {
                    owner: None,
                    message: s(),
                },
                503,
                "not_owner",
            ),
            (
                IssueError::ClockBehind { by: 9 }.into(),
                503,
                "clock_behind",
            ),
            (
                IssueError::Clock(crate::snowflake::SnowflakeError::Negative).into(),
                500,
                "clock_out_of_range",
            ),
        ];
        for (error, status, code) in cases {
            assert_eq!(
                (error.status_code().as_u16(), error.code()),
                (status, code),
                "{error:?}"
            );
        }
    }
}

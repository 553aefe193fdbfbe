//! The service's refusals: one enum, whatever door the request came through. Each
//! door renders it in one table: `server::error` as an HTTP status and JSON body (and
//! Tinyid's `code`/`message`), `server::resp::command` as a Redis error reply.

use crate::biz::InputError;
use crate::listing::BadParam;
use crate::store::StoreError;
use crate::worker::IssueError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("token is not granted biz `{0}`")]
    Forbidden(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Snowflake(#[from] IssueError),
    /// The request cannot be served for this biz as it is (409): `code` says why.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// A sequence key's section is owned by another server, or by none yet (503): its
    /// address, when known, is in the body's `owner`.
    #[error("{message}")]
    Elsewhere {
        owner: Option<String>,
        message: String,
    },
}

impl From<InputError> for Error {
    fn from(e: InputError) -> Self {
        Error::BadRequest(e.to_string())
    }
}

impl From<BadParam> for Error {
    fn from(e: BadParam) -> Self {
        Error::BadRequest(e.to_string())
    }
}

impl Error {
    /// Stable machine-readable code: the v1 error body's `code`, the Redis reply's text.
    pub fn code(&self) -> &'static str {
        match self {
            Error::BadRequest(_) => "bad_request",
            Error::Unauthorized(_) => "unauthorized",
            Error::Forbidden(_) => "forbidden",
            Error::Store(e) => match e {
                StoreError::NotFound(_) => "not_found",
                StoreError::Overflow { .. } => "id_space_exhausted",
                StoreError::ResidueConflict { .. } | StoreError::InvalidRow { .. } => {
                    "biz_misconfigured"
                }
                StoreError::Contention(_) => "contention",
                StoreError::Moving(_) => "layout_change",
                StoreError::Unavailable(_) => "unavailable",
                StoreError::Refused(_) => "bad_request",
                StoreError::PeriodFull { .. } => "period_exhausted",
                StoreError::PeriodPassed(_) => "period_passed",
                StoreError::Clock { fault, .. } => fault.as_str(),
                StoreError::Periodic(_) => "segments_unavailable",
            },
            Error::Conflict { code, .. } => code,
            Error::Elsewhere { .. } => "not_owner",
            Error::Snowflake(e) => match e {
                IssueError::NotServed(_) => "not_found",
                IssueError::NoWorkerId(_) => "no_worker_id",
                IssueError::ClockBehind { .. } => "clock_behind",
                IssueError::Clock(_) => "clock_out_of_range",
                IssueError::BatchTooLarge { .. } => "bad_request",
            },
        }
    }
}

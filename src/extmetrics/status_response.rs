//! Errors as metav1.Status objects, the only error shape the aggregator and the HPA understand.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A Status failure with its HTTP code and Kubernetes reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: StatusCode,
    pub reason: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::NOT_FOUND,
            reason: "NotFound",
            message: message.into(),
        }
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::UNAUTHORIZED,
            reason: "Unauthorized",
            message: message.into(),
        }
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::FORBIDDEN,
            reason: "Forbidden",
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::BAD_REQUEST,
            reason: "BadRequest",
            message: message.into(),
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::INTERNAL_SERVER_ERROR,
            reason: "InternalError",
            message: message.into(),
        }
    }

    pub fn body(&self) -> serde_json::Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.code, Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_code_and_reason() {
        for (error, code, reason) in [
            (ApiError::not_found("x"), 404, "NotFound"),
            (ApiError::unauthorized("x"), 401, "Unauthorized"),
            (ApiError::forbidden("x"), 403, "Forbidden"),
            (ApiError::bad_request("x"), 400, "BadRequest"),
            (ApiError::internal("x"), 500, "InternalError"),
        ] {
            let body = error.body();
            assert_eq!(body["kind"], "Status");
            assert_eq!(body["status"], "Failure");
            assert_eq!(body["code"], code);
            assert_eq!(body["reason"], reason);
            assert_eq!(body["message"], "x");
            assert_eq!(error.code.as_u16(), code);
        }
    }
}

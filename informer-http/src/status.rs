//! kube-apiserver `Status` objects and their mapping to the core's [`Failure`].

use std::time::Duration;

use informer_core::protocol::{Failure, Status};
use serde::Deserialize;

/// The cause type kube-apiserver sets on a "Too large resource version" error
/// (`metav1.CauseTypeResourceVersionTooLarge`).
pub const CAUSE_RESOURCE_VERSION_TOO_LARGE: &str = "ResourceVersionTooLarge";
/// The message fragment of a "Too large resource version" error (servers before 1.18.6 set no
/// cause, only this message).
pub const TOO_LARGE_RESOURCE_VERSION_MESSAGE: &str = "Too large resource version";

/// A `meta/v1 Status` as kube-apiserver sends it (the fields that matter here).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct StatusObject {
    /// `kind` (`Status`).
    pub kind: Option<String>,
    /// `status`: `Success` or `Failure`.
    pub status: Option<String>,
    /// `message`.
    pub message: Option<String>,
    /// `reason`, e.g. `Expired`, `Gone`, `Timeout`, `TooManyRequests`.
    pub reason: Option<String>,
    /// `code`: the HTTP status code.
    pub code: Option<u16>,
    /// `metadata` (holds `continue` on an "inconsistent continue" 410).
    pub metadata: StatusMetadata,
    /// `details`.
    pub details: Option<StatusDetails>,
}

/// `Status.metadata` (a `ListMeta`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct StatusMetadata {
    /// `continue`.
    #[serde(rename = "continue")]
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    #[serde(rename = "resourceVersion")]
    pub resource_version: Option<String>,
}

/// `Status.details`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct StatusDetails {
    /// `name` of the object concerned.
    pub name: Option<String>,
    /// `kind` of the object concerned.
    pub kind: Option<String>,
    /// `retryAfterSeconds`.
    #[serde(rename = "retryAfterSeconds")]
    pub retry_after_seconds: Option<u32>,
    /// `causes`.
    pub causes: Vec<StatusCause>,
}

/// One `Status.details.causes[]` entry.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct StatusCause {
    /// The cause type (serialised as `reason`), e.g. `ResourceVersionTooLarge`.
    pub reason: Option<String>,
    /// `message`.
    pub message: Option<String>,
    /// `field`.
    pub field: Option<String>,
}

impl StatusObject {
    /// The core's [`Status`] for this object; `http_code` is used when the object has no code,
    /// `retry_after_header` (the `Retry-After` header) wins over `details.retryAfterSeconds`.
    pub fn to_status(&self, http_code: u16, retry_after_header: Option<Duration>) -> Status {
        let code = match self.code {
            Some(c) if c != 0 => c,
            _ => http_code,
        };
        let detail_retry = self
            .details
            .as_ref()
            .and_then(|d| d.retry_after_seconds)
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(u64::from(s)));
        Status {
            code,
            reason: self.reason.clone().unwrap_or_default(),
            message: self.message.clone().unwrap_or_default(),
            retry_after: retry_after_header.or(detail_retry),
            continue_token: self
                .metadata
                .continue_token
                .clone()
                .filter(|c| !c.is_empty()),
        }
    }

    fn is_too_large_resource_version(&self) -> bool {
        let causes = self.details.iter().flat_map(|d| d.causes.iter());
        if causes
            .clone()
            .any(|c| c.reason.as_deref() == Some(CAUSE_RESOURCE_VERSION_TOO_LARGE))
        {
            return true;
        }
        if self.reason.as_deref() != Some("Timeout") && self.code != Some(504) {
            return false;
        }
        causes
            .clone()
            .any(|c| c.message.as_deref() == Some(TOO_LARGE_RESOURCE_VERSION_MESSAGE))
            || self
                .message
                .as_deref()
                .is_some_and(|m| m.contains(TOO_LARGE_RESOURCE_VERSION_MESSAGE))
    }

    /// Classifies this status into the reflector's failure categories.
    pub fn to_failure(&self, http_code: u16, retry_after_header: Option<Duration>) -> Failure {
        let status = self.to_status(http_code, retry_after_header);
        if self.is_too_large_resource_version() {
            return Failure::TooLargeResourceVersion(status);
        }
        match (status.code, status.reason.as_str()) {
            (410, _) | (_, "Expired") | (_, "Gone") => Failure::Expired(status),
            (429, _) | (_, "TooManyRequests") => Failure::TooManyRequests(status),
            (401, _) | (_, "Unauthorized") => Failure::Unauthorized(status),
            (403, _) | (_, "Forbidden") => Failure::Forbidden(status),
            _ => Failure::Other(status),
        }
    }
}

/// Parses a `Retry-After` header value given in seconds (the HTTP-date form is not used by
/// kube-apiserver and yields `None`).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// The failure for an HTTP error answer: status `code`, the `Retry-After` header if any, and the
/// body (normally a `Status` object; anything else becomes the message).
pub fn failure_from_response(code: u16, retry_after: Option<&str>, body: &[u8]) -> Failure {
    let header = retry_after.and_then(parse_retry_after);
    match serde_json::from_slice::<StatusObject>(body) {
        Ok(s) if s.kind.as_deref() == Some("Status") || s.message.is_some() => {
            s.to_failure(code, header)
        }
        _ => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            let message = if text.is_empty() {
                http::StatusCode::from_u16(code)
                    .ok()
                    .and_then(|c| c.canonical_reason())
                    .unwrap_or("error")
                    .to_string()
            } else {
                truncate(text, 1024).to_string()
            };
            StatusObject {
                message: Some(message),
                ..StatusObject::default()
            }
            .to_failure(code, header)
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(code: u16, retry: Option<&str>, body: &str) -> Failure {
        failure_from_response(code, retry, body.as_bytes())
    }

    #[test]
    fn expired_410() {
        let f = fail(
            410,
            None,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (203)","reason":"Expired","code":410}"#,
        );
        let Failure::Expired(s) = f else {
            panic!("{f:?}")
        };
        assert_eq!(s.code, 410);
        assert_eq!(s.reason, "Expired");
        assert_eq!(s.message, "too old resource version: 1 (203)");
        assert_eq!(s.continue_token, None);
    }

    #[test]
    fn gone_410() {
        let f = fail(
            410,
            None,
            r#"{"kind":"Status","status":"Failure","message":"too old resource version","reason":"Gone","code":410}"#,
        );
        assert!(
            matches!(f, Failure::Expired(ref s) if s.reason == "Gone"),
            "{f:?}"
        );
        // A 410 whose body is not a Status is still Expired.
        assert!(matches!(fail(410, None, "gone"), Failure::Expired(_)));
    }

    #[test]
    fn inconsistent_continue_410_carries_the_fresh_token() {
        let f = fail(
            410,
            None,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{"continue":"eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAwfQ"},"status":"Failure","message":"The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.","reason":"Expired","code":410}"#,
        );
        let Failure::Expired(s) = f else {
            panic!("{f:?}")
        };
        assert_eq!(
            s.continue_token.as_deref(),
            Some("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAwfQ")
        );
    }

    #[test]
    fn too_large_resource_version() {
        // 1.18.6+: reason Timeout with cause ResourceVersionTooLarge.
        let f = fail(
            504,
            None,
            r#"{"kind":"Status","status":"Failure","message":"Timeout: Too large resource version: 200, current: 100","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#,
        );
        let Failure::TooLargeResourceVersion(s) = f else {
            panic!("{f:?}")
        };
        assert_eq!(s.retry_after, Some(Duration::from_secs(1)));
        // 1.17.0 - 1.18.5: only the message says so.
        let f = fail(
            504,
            None,
            r#"{"kind":"Status","status":"Failure","message":"Timeout: Too large resource version: 200, current: 100","reason":"Timeout","details":{"retryAfterSeconds":1},"code":504}"#,
        );
        assert!(matches!(f, Failure::TooLargeResourceVersion(_)), "{f:?}");
        // A plain timeout is not.
        let f = fail(
            504,
            None,
            r#"{"kind":"Status","status":"Failure","message":"request timed out","reason":"Timeout","code":504}"#,
        );
        assert!(matches!(f, Failure::Other(_)), "{f:?}");
    }

    #[test]
    fn too_many_requests_with_retry_after() {
        let body = r#"{"kind":"Status","status":"Failure","message":"Too many requests, please try again later.","reason":"TooManyRequests","details":{"retryAfterSeconds":3},"code":429}"#;
        let Failure::TooManyRequests(s) = fail(429, Some("7"), body) else {
            panic!()
        };
        assert_eq!(s.retry_after, Some(Duration::from_secs(7)), "header wins");
        let Failure::TooManyRequests(s) = fail(429, None, body) else {
            panic!()
        };
        assert_eq!(s.retry_after, Some(Duration::from_secs(3)), "details");
        let Failure::TooManyRequests(s) = fail(429, Some(" 2 "), "slow down") else {
            panic!()
        };
        assert_eq!(s.retry_after, Some(Duration::from_secs(2)));
        assert_eq!(s.message, "slow down");
        let Failure::TooManyRequests(s) = fail(429, Some("Wed, 21 Oct 2015 07:28:00 GMT"), "")
        else {
            panic!()
        };
        assert_eq!(s.retry_after, None);
        assert_eq!(s.message, "Too Many Requests");
    }

    #[test]
    fn unauthorized_and_forbidden_carry_the_message() {
        let f = fail(
            401,
            None,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#,
        );
        assert!(
            matches!(f, Failure::Unauthorized(ref s) if s.message == "Unauthorized" && s.code == 401)
        );
        let msg = r#"configmaps is forbidden: User \"bob\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope"#;
        let f = fail(
            403,
            None,
            &format!(
                r#"{{"kind":"Status","status":"Failure","message":"{msg}","reason":"Forbidden","details":{{"kind":"configmaps"}},"code":403}}"#
            ),
        );
        let Failure::Forbidden(s) = f else {
            panic!("{f:?}")
        };
        assert_eq!(s.code, 403);
        assert!(
            s.message
                .starts_with("configmaps is forbidden: User \"bob\"")
        );
    }

    #[test]
    fn other_codes_and_garbage() {
        assert!(
            matches!(fail(500, None, "<html>oops</html>"), Failure::Other(ref s) if s.code == 500 && s.message == "<html>oops</html>")
        );
        assert!(
            matches!(fail(404, None, r#"{"kind":"Status","message":"not found","reason":"NotFound","code":404}"#), Failure::Other(ref s) if s.reason == "NotFound")
        );
        let long = "x".repeat(5000);
        let Failure::Other(s) = fail(502, None, &long) else {
            panic!()
        };
        assert_eq!(s.message.len(), 1024);
    }

    #[test]
    fn status_code_from_body_wins_for_error_events() {
        let s: StatusObject = serde_json::from_str(
            r#"{"kind":"Status","status":"Failure","message":"too old","reason":"Expired","code":410}"#,
        )
        .unwrap();
        assert!(matches!(s.to_failure(200, None), Failure::Expired(ref st) if st.code == 410));
    }
}

//! The error body: RFC 9457 problem details (`application/problem+json`), as the origin and the
//! edge both write it.

use serde::{Deserialize, Serialize};

/// The problem type of every bloomgate problem: the status says what kind it is.
pub const ABOUT_BLANK: &str = "about:blank";

/// An error answer (RFC 9457 problem details, `application/problem+json`). The fields are
/// written in the order the origin has always written them (by name), so bodies shown in the
/// documentation stay byte for byte what a server answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    /// What went wrong. Never internals (addresses, causes from the stores).
    pub detail: String,
    /// What to do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The HTTP status.
    pub status: u16,
    /// The status's reason phrase (RFC 9110).
    pub title: String,
    /// Always `about:blank`.
    #[serde(rename = "type")]
    pub kind: String,
}

impl Problem {
    /// A problem with `status` and `detail`, titled by the status's reason phrase.
    pub fn new(status: u16, detail: impl Into<String>) -> Problem {
        Problem {
            kind: ABOUT_BLANK.to_owned(),
            title: reason_phrase(status).to_owned(),
            status,
            detail: detail.into(),
            hint: None,
        }
    }

    /// The same problem with a hint for the person reading it.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Problem {
        self.hint = Some(hint.into());
        self
    }

    /// The body as sent.
    pub fn to_json(&self) -> String {
        // A struct of strings and a number always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The reason phrase RFC 9110 gives a status (the statuses bloomgate answers with); `Error`
/// for any other.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        410 => "Gone",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_problems_with_and_without_a_hint() {
        let problem = Problem::new(404, "no filter named \"f\"").with_hint("Create it first.");
        let text = r#"{"detail":"no filter named \"f\"","hint":"Create it first.","status":404,"title":"Not Found","type":"about:blank"}"#;
        assert_eq!(problem.to_json(), text);
        assert_eq!(serde_json::from_str::<Problem>(text).unwrap(), problem);
        let bare = Problem::new(413, "too many");
        assert_eq!(
            bare.to_json(),
            r#"{"detail":"too many","status":413,"title":"Content Too Large","type":"about:blank"}"#
        );
        assert_eq!(
            serde_json::from_str::<Problem>(&bare.to_json()).unwrap().hint,
            None,
            "a problem without a hint reads back"
        );
    }

    #[test]
    fn titles_are_the_rfc_9110_phrases() {
        assert_eq!(reason_phrase(503), "Service Unavailable");
        assert_eq!(reason_phrase(429), "Too Many Requests");
        assert_eq!(reason_phrase(599), "Error");
    }
}

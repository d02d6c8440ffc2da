//! The refusals many endpoints share, described once for the OpenAPI document: no token, the
//! wrong token, a full gate. An endpoint lists the ones it can answer beside its own answers
//! (`responses((status = 200, ...), ..., NoToken, NotAWriter, Busy)`), so their words live in
//! one place: each one's doc line is its description in the document. None is ever built:
//! `AppError` and admission write the answers they describe.
#![allow(dead_code)]

use bloomgate_client::api::Problem;
use bloomgate_client::media::PROBLEM_JSON;
use utoipa::IntoResponses;

/// no bearer token
#[derive(IntoResponses)]
#[response(status = 401, content_type = PROBLEM_JSON)]
pub(super) struct NoToken(Problem);

/// a token that is not a writer token (an ops token is read-only)
#[derive(IntoResponses)]
#[response(status = 403, content_type = PROBLEM_JSON)]
pub(super) struct NotAWriter(Problem);

/// a token that is neither a writer nor an ops token
#[derive(IntoResponses)]
#[response(status = 403, content_type = PROBLEM_JSON)]
pub(super) struct NeitherToken(Problem);

/// too many requests in flight; retry after Retry-After
#[derive(IntoResponses)]
#[response(status = 429, content_type = PROBLEM_JSON)]
pub(super) struct Busy(Problem);

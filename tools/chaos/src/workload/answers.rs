//! What an answer of the API means for the history: a lookup's "seen" with who answered, a
//! batch's results in request order, or neither (recorded as a status).

use crate::history::{Answer, AnsweredBy};
use serde_json::Value;

/// Parses a lookup answer: 200 `seen:true` or 404 `seen:false`, with who answered.
pub(super) fn single_answer(status: u16, answered_by: Option<&str>, body: &str) -> Option<Answer> {
    let value: Value = serde_json::from_str(body).ok()?;
    let seen = value.get("seen")?.as_bool()?;
    let by = answered_by.or_else(|| value.get("answered_by").and_then(Value::as_str)).and_then(AnsweredBy::parse);
    match (status, seen) {
        (200, true) | (404, false) => Some(Answer { seen, by }),
        _ => None,
    }
}

/// Parses a batch lookup's results, which must name the keys asked, in order.
pub(super) fn batch_answers(body: &str, asked: &[String]) -> Option<Vec<Answer>> {
    let value: Value = serde_json::from_str(body).ok()?;
    let results = value.get("results")?.as_array()?;
    if results.len() != asked.len() {
        return None;
    }
    results
        .iter()
        .zip(asked)
        .map(|(r, key)| {
            let same = r.get("key")?.as_str()?.eq_ignore_ascii_case(key);
            let seen = r.get("seen")?.as_bool()?;
            same.then(|| Answer { seen, by: r.get("answered_by").and_then(Value::as_str).and_then(AnsweredBy::parse) })
        })
        .collect()
}

pub(super) fn detail(body: &str) -> String {
    body.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_answers_count_as_answers() {
        let seen = single_answer(200, Some("database"), r#"{"seen":true}"#).unwrap();
        assert_eq!(seen, Answer { seen: true, by: Some(AnsweredBy::Database) });
        let no = single_answer(404, None, r#"{"seen":false,"answered_by":"edge"}"#).unwrap();
        assert_eq!(no, Answer { seen: false, by: Some(AnsweredBy::Edge) });
        // A 404 problem (unknown filter), or a status that contradicts the body, is not one.
        assert_eq!(single_answer(404, None, r#"{"status":404,"detail":"no filter"}"#), None);
        assert_eq!(single_answer(200, None, r#"{"seen":false}"#), None);
        let asked = vec!["aa".to_owned(), "bb".to_owned()];
        let body = r#"{"results":[{"key":"AA","seen":true,"answered_by":"filter"},{"key":"bb","seen":false}]}"#;
        assert_eq!(batch_answers(body, &asked).unwrap().len(), 2);
        let swapped = r#"{"results":[{"key":"bb","seen":true},{"key":"aa","seen":false}]}"#;
        assert_eq!(batch_answers(swapped, &asked), None);
    }
}

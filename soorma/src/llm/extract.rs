//! Finding the JSON value in a model's reply.

use serde_json::Value;

/// How many `{`/`[` positions in prose are tried before giving up (bounds the work on long,
/// bracket-heavy replies).
const MAX_PROSE_CANDIDATES: usize = 64;

/// Why no JSON value could be taken from a reply.
///
/// ```
/// use soorma::llm::{extract_json, ExtractError};
/// assert_eq!(extract_json("I don't know."), Err(ExtractError::NoJson));
/// assert!(matches!(extract_json("{\"a\": 1,}"), Err(ExtractError::Malformed(_))));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExtractError {
    /// The reply holds nothing that looks like JSON.
    #[error("the reply contains no JSON value")]
    NoJson,
    /// The reply holds something that looks like JSON but does not parse.
    #[error("the reply's JSON does not parse: {0}")]
    Malformed(String),
}

/// Takes the JSON value out of a model's reply, trying in order: the whole reply; the content
/// of each fenced code block (```` ```json ```` or plain ```` ``` ````); each balanced
/// `{...}` or `[...]` in the prose, leftmost first.
///
/// ```
/// use serde_json::json;
/// use soorma::llm::extract_json;
///
/// assert_eq!(extract_json(" {\"a\": 1} ").unwrap(), json!({"a": 1}));
/// assert_eq!(extract_json("Sure:\n```json\n[1, 2]\n```\nDone.").unwrap(), json!([1, 2]));
/// assert_eq!(
///     extract_json("The answer is {\"city\": \"Paris {FR}\"} as requested.").unwrap(),
///     json!({"city": "Paris {FR}"})
/// );
/// ```
pub fn extract_json(reply: &str) -> Result<Value, ExtractError> {
    let trimmed = reply.trim();
    let mut first_error: Option<String> = None;

    match serde_json::from_str::<Value>(trimmed) {
        Ok(value) => return Ok(value),
        Err(e) if trimmed.starts_with(['{', '[']) => first_error = Some(e.to_string()),
        Err(_) => {}
    }

    for block in fenced_blocks(reply) {
        match serde_json::from_str::<Value>(block.trim()) {
            Ok(value) => return Ok(value),
            Err(e) => {
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }

    let mut prose_error = None;
    let starts = reply
        .char_indices()
        .filter(|(_, c)| matches!(c, '{' | '['))
        .map(|(i, _)| i)
        .take(MAX_PROSE_CANDIDATES);
    for start in starts {
        let Some(end) = balanced_end(&reply[start..]) else {
            continue;
        };
        match serde_json::from_str::<Value>(&reply[start..start + end]) {
            Ok(value) => return Ok(value),
            Err(e) => {
                prose_error.get_or_insert_with(|| e.to_string());
            }
        }
    }

    match first_error.or(prose_error) {
        Some(e) => Err(ExtractError::Malformed(e)),
        None => Err(ExtractError::NoJson),
    }
}

/// The contents of the fenced code blocks in `text` (the info string after the opening fence
/// is skipped; an unterminated block runs to the end).
fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after_fence = &rest[open + 3..];
        // Skip the info string (`json`, `JSON`, ...) up to the end of the line.
        let body_start = match after_fence.find('\n') {
            Some(nl) if !after_fence[..nl].contains("```") => nl + 1,
            _ => 0,
        };
        let body = &after_fence[body_start..];
        match body.find("```") {
            Some(close) => {
                blocks.push(&body[..close]);
                rest = &body[close + 3..];
            }
            None => {
                blocks.push(body);
                break;
            }
        }
    }
    blocks
}

/// The length of the balanced JSON-looking value at the start of `text` (which starts with
/// `{` or `[`), honouring strings and escapes; `None` when it never closes or closes with the
/// wrong bracket.
fn balanced_end(text: &str) -> Option<usize> {
    let mut expected = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (i, b) in text.bytes().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => expected.push(b'}'),
            b'[' => expected.push(b']'),
            b'}' | b']' => {
                if expected.pop() != Some(b) {
                    return None;
                }
                if expected.is_empty() {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_json_of_any_kind() {
        assert_eq!(extract_json("{\"a\":1}").unwrap(), json!({"a": 1}));
        assert_eq!(extract_json("\n  [1, 2]\n").unwrap(), json!([1, 2]));
        assert_eq!(extract_json("42").unwrap(), json!(42));
        assert_eq!(extract_json("\"text\"").unwrap(), json!("text"));
    }

    #[test]
    fn fenced_blocks_with_and_without_a_language() {
        let tagged = "Here you go:\n```json\n{\"ok\": true}\n```\nAnything else?";
        assert_eq!(extract_json(tagged).unwrap(), json!({"ok": true}));
        let upper = "```JSON\n{\"ok\": true}\n```";
        assert_eq!(extract_json(upper).unwrap(), json!({"ok": true}));
        let bare = "```\n[\"x\"]\n```";
        assert_eq!(extract_json(bare).unwrap(), json!(["x"]));
        let inline = "```{\"ok\": 1}```";
        assert_eq!(extract_json(inline).unwrap(), json!({"ok": 1}));
        let unterminated = "```json\n{\"ok\": 2}\n";
        assert_eq!(extract_json(unterminated).unwrap(), json!({"ok": 2}));
    }

    #[test]
    fn a_later_block_is_used_when_the_first_is_not_json() {
        let text = "```sh\ncurl example\n```\nthen\n```json\n{\"n\": 3}\n```";
        assert_eq!(extract_json(text).unwrap(), json!({"n": 3}));
    }

    #[test]
    fn first_balanced_value_in_prose() {
        let text =
            "I think the result is {\"a\": {\"b\": [1, 2]}, \"s\": \"}]\\\"{\"}. Also {\"c\": 2}.";
        assert_eq!(
            extract_json(text).unwrap(),
            json!({"a": {"b": [1, 2]}, "s": "}]\"{"})
        );
        let arr = "Top picks: [\"x\", \"y\"] - enjoy";
        assert_eq!(extract_json(arr).unwrap(), json!(["x", "y"]));
    }

    #[test]
    fn non_json_brackets_in_prose_are_skipped() {
        let text = "Options [a] and [b] exist; answer: {\"pick\": \"a\"}";
        assert_eq!(extract_json(text).unwrap(), json!({"pick": "a"}));
        let mismatched = "weird ( [ } then {\"ok\": true}";
        assert_eq!(extract_json(mismatched).unwrap(), json!({"ok": true}));
    }

    #[test]
    fn multibyte_text_around_json() {
        let text = "Résumé 🦀: {\"name\": \"Zoë\"} — fin";
        assert_eq!(extract_json(text).unwrap(), json!({"name": "Zoë"}));
    }

    #[test]
    fn no_json_and_malformed_json_are_told_apart() {
        assert_eq!(
            extract_json("I cannot answer that."),
            Err(ExtractError::NoJson)
        );
        assert_eq!(extract_json(""), Err(ExtractError::NoJson));
        let Err(ExtractError::Malformed(why)) = extract_json("{\"a\": 1, }") else {
            panic!("expected Malformed");
        };
        assert!(why.contains("trailing comma"), "{why}");
        // Truncated output (the model hit its token limit).
        assert!(matches!(
            extract_json("{\"items\": [1, 2"),
            Err(ExtractError::Malformed(_))
        ));
        // A fenced block that does not parse.
        assert!(matches!(
            extract_json("```json\n{name: 'x'}\n```"),
            Err(ExtractError::Malformed(_))
        ));
    }

    #[test]
    fn balanced_end_honours_strings_and_escapes() {
        assert_eq!(balanced_end("{}"), Some(2));
        assert_eq!(balanced_end("{\"a\": \"}\"} tail"), Some(10));
        assert_eq!(balanced_end("[\"\\\\\"] tail"), Some(6));
        assert_eq!(balanced_end("{]"), None);
        assert_eq!(balanced_end("{\"open"), None);
    }
}

//! Structured output: ask for a JSON value of a type's schema, check the reply, retry with the
//! reason.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::error::{Attempt, LlmError};
use super::extract::extract_json;
use super::message::{ChatMessage, Role};
use super::model::{ChatModel, OutputSchema};
use crate::error::Result;

/// How many schema violations one rejection reports.
const MAX_REPORTED_VIOLATIONS: usize = 5;

/// [`ChatModelExt::structured`](super::ChatModelExt::structured).
pub(crate) async fn run<T, M>(model: &M, messages: &[ChatMessage]) -> Result<T>
where
    T: DeserializeOwned + JsonSchema,
    M: ChatModel + ?Sized,
{
    let type_name = std::any::type_name::<T>();
    let schema = OutputSchema::of::<T>();
    let validator = match jsonschema::validator_for(&schema.schema) {
        Ok(validator) => Some(validator),
        Err(error) => {
            tracing::warn!(
                type_name,
                %error,
                "cannot compile the output schema; replies are only deserialized"
            );
            None
        }
    };
    let mut conversation = with_instruction(messages, &schema);
    let max_attempts = model.max_attempts().max(1);
    let mut attempts = Vec::new();
    for attempt in 1..=max_attempts {
        let reply = model.complete_with_schema(&conversation, &schema).await?;
        match parse_reply::<T>(&reply, validator.as_ref()) {
            Ok(value) => {
                tracing::debug!(type_name, attempt, "structured output accepted");
                return Ok(value);
            }
            Err(error) => {
                tracing::warn!(type_name, attempt, max_attempts, %error, "structured output rejected");
                if attempt < max_attempts {
                    conversation.push(ChatMessage::assistant(reply.clone()));
                    conversation.push(ChatMessage::user(retry_prompt(&error)));
                }
                attempts.push(Attempt { reply, error });
            }
        }
    }
    Err(LlmError::StructuredOutput {
        type_name,
        attempts,
    }
    .into())
}

/// The instruction naming the schema.
fn instruction(schema: &OutputSchema) -> String {
    let pretty = serde_json::to_string_pretty(&schema.schema).unwrap_or_default();
    format!(
        "Answer with a single JSON value that conforms to the JSON Schema below. Reply with the \
         JSON only: no explanations and no code fences.\n\nJSON Schema:\n{pretty}"
    )
}

/// The conversation with the instruction added to its leading system message (or as a new
/// leading system message).
fn with_instruction(messages: &[ChatMessage], schema: &OutputSchema) -> Vec<ChatMessage> {
    let mut conversation = messages.to_vec();
    match conversation.first_mut() {
        Some(first) if first.role == Role::System => {
            first.content.push_str("\n\n");
            first.content.push_str(&instruction(schema));
        }
        _ => conversation.insert(0, ChatMessage::system(instruction(schema))),
    }
    conversation
}

/// What the model is told after a rejected reply.
fn retry_prompt(error: &str) -> String {
    format!(
        "Your previous reply was rejected: {error}\nReply again with only the corrected JSON \
         value, conforming to the JSON Schema."
    )
}

/// The reply as a `T`, or why not: the extracted JSON must match the schema (when one could be
/// compiled) and deserialize into `T`.
fn parse_reply<T: DeserializeOwned>(
    reply: &str,
    validator: Option<&jsonschema::Validator>,
) -> std::result::Result<T, String> {
    let value = extract_json(reply).map_err(|e| e.to_string())?;
    if let Some(validator) = validator {
        let violations: Vec<String> = validator
            .iter_errors(&value)
            .take(MAX_REPORTED_VIOLATIONS)
            .map(|e| {
                let path = e.instance_path().as_str();
                format!("at `{}`: {e}", if path.is_empty() { "/" } else { path })
            })
            .collect();
        if !violations.is_empty() {
            return Err(format!(
                "the JSON does not match the schema: {}",
                violations.join("; ")
            ));
        }
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        format!(
            "the JSON does not fit the expected type at `{}`: {}",
            e.path(),
            e.inner()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ChatModelExt, ScriptedLlm};
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Deserialize, JsonSchema)]
    struct Review {
        title: String,
        /// 0 to 1.
        #[schemars(range(min = 0.0, max = 1.0))]
        score: f64,
        tags: Vec<Tag>,
    }

    #[derive(Debug, PartialEq, Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Tag {
        Good,
        Bad,
    }

    fn validator<T: JsonSchema>() -> jsonschema::Validator {
        jsonschema::validator_for(&OutputSchema::of::<T>().schema).unwrap()
    }

    #[test]
    fn a_valid_reply_parses() {
        let v = validator::<Review>();
        let review: Review = parse_reply(
            "```json\n{\"title\": \"t\", \"score\": 0.5, \"tags\": [\"good\"]}\n```",
            Some(&v),
        )
        .unwrap();
        assert_eq!(review.tags, [Tag::Good]);
    }

    #[test]
    fn schema_violations_name_their_paths() {
        let v = validator::<Review>();
        let err = parse_reply::<Review>(
            "{\"title\": \"t\", \"score\": 3, \"tags\": [\"good\", \"meh\"]}",
            Some(&v),
        )
        .unwrap_err();
        assert!(err.contains("`/score`"), "{err}");
        assert!(err.contains("`/tags/1`"), "{err}");
    }

    #[test]
    fn without_a_schema_serde_names_the_path() {
        let err = parse_reply::<Review>(
            "{\"title\": \"t\", \"score\": 0.1, \"tags\": [\"good\", \"meh\"]}",
            None,
        )
        .unwrap_err();
        assert!(err.contains("at `tags[1]`"), "{err}");
        assert!(err.contains("unknown variant `meh`"), "{err}");
    }

    #[test]
    fn extraction_failures_are_reported() {
        let err = parse_reply::<Review>("I'd rather not.", None).unwrap_err();
        assert!(err.contains("no JSON"), "{err}");
    }

    #[test]
    fn instruction_joins_an_existing_system_message() {
        let schema = OutputSchema::of::<Review>();
        let joined = with_instruction(
            &[
                ChatMessage::system("You review films."),
                ChatMessage::user("Dune"),
            ],
            &schema,
        );
        assert_eq!(joined.len(), 2);
        assert!(
            joined[0]
                .content
                .starts_with("You review films.\n\nAnswer with")
        );
        assert!(joined[0].content.contains("\"score\""));
        let inserted = with_instruction(&[ChatMessage::user("Dune")], &schema);
        assert_eq!(inserted.len(), 2);
        assert_eq!(inserted[0].role, Role::System);
        assert_eq!(inserted[1], ChatMessage::user("Dune"));
    }

    #[tokio::test]
    async fn retries_carry_the_rejected_reply_and_the_reason() {
        let model = ScriptedLlm::new([
            "{\"title\": \"Dune\", \"score\": \"high\", \"tags\": []}",
            "{\"title\": \"Dune\", \"score\": 0.9, \"tags\": [\"good\"]}",
        ]);
        let review: Review = model
            .structured(&[ChatMessage::user("Review Dune")])
            .await
            .unwrap();
        assert_eq!(review.score, 0.9);
        let requests = model.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].len(), 2);
        let second = &requests[1];
        assert_eq!(second.len(), 4);
        assert_eq!(second[..2], requests[0][..]);
        assert_eq!(
            second[2],
            ChatMessage::assistant("{\"title\": \"Dune\", \"score\": \"high\", \"tags\": []}")
        );
        assert_eq!(second[3].role, Role::User);
        assert!(
            second[3].content.contains("`/score`"),
            "{}",
            second[3].content
        );
    }

    #[tokio::test]
    async fn every_attempt_is_kept_when_all_fail() {
        let model = ScriptedLlm::new(["nope", "{\"title\": 1}", "```json\n{oops}\n```"])
            .with_max_attempts(3);
        let err = model
            .structured::<Review>(&[ChatMessage::user("Review Dune")])
            .await
            .unwrap_err();
        assert!(!err.is_retryable());
        let Some(LlmError::StructuredOutput {
            type_name,
            attempts,
        }) = err.downcast_ref::<LlmError>()
        else {
            panic!("unexpected error: {err}");
        };
        assert!(type_name.ends_with("Review"));
        let replies: Vec<&str> = attempts.iter().map(|a| a.reply.as_str()).collect();
        assert_eq!(replies, ["nope", "{\"title\": 1}", "```json\n{oops}\n```"]);
        assert!(attempts[0].error.contains("no JSON"));
        assert!(
            attempts[1].error.contains("`/title`"),
            "{}",
            attempts[1].error
        );
        assert!(attempts[2].error.contains("does not parse"));
        // No fourth request; the last failure is not sent back.
        assert_eq!(model.request_count(), 3);
    }

    #[tokio::test]
    async fn one_attempt_means_no_retry() {
        let model = ScriptedLlm::new(["nope", "[]"]).with_max_attempts(1);
        let err = model
            .structured::<Vec<u8>>(&[ChatMessage::user("x")])
            .await
            .unwrap_err();
        assert!(err.to_string().contains("after 1 attempt(s)"), "{err}");
        assert_eq!(model.request_count(), 1);
    }

    #[tokio::test]
    async fn model_errors_end_the_loop() {
        let model = ScriptedLlm::new(["not json"]);
        let err = model
            .structured::<Vec<u8>>(&[ChatMessage::user("x")])
            .await
            .unwrap_err();
        assert!(
            matches!(
                err.downcast_ref::<LlmError>(),
                Some(LlmError::ScriptExhausted { request: 2 })
            ),
            "{err}"
        );
    }
}

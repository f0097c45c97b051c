//! From an A2A message to a soorma action request: the payload and the skill it is for.

use serde_json::{Map, Value};
use soorma_common::a2a::{Message, PartContent};
use soorma_common::{AgentCapability, AgentDefinition};

use super::rpc::RpcError;

/// The request payload of a message: text parts joined into `text`, data parts (objects)
/// merged in; a single non-object data part with no text is the payload itself.
pub(crate) fn payload(message: &Message) -> Result<Value, RpcError> {
    let mut texts = Vec::new();
    let mut merged = Map::new();
    let mut single: Option<Value> = None;
    let data_parts = message
        .parts
        .iter()
        .filter(|p| matches!(p.content, PartContent::Data(_)))
        .count();
    for part in &message.parts {
        match &part.content {
            PartContent::Text(t) => texts.push(t.as_str()),
            PartContent::Data(Value::Object(obj)) => {
                merged.extend(obj.iter().map(|(k, v)| (k.clone(), v.clone())))
            }
            PartContent::Data(other) if data_parts == 1 => single = Some(other.clone()),
            PartContent::Data(_) => {
                return Err(RpcError::invalid_params(
                    "data parts must be JSON objects when a message has several",
                ));
            }
            PartContent::Raw(_) | PartContent::Url(_) => {
                return Err(RpcError::content_type(
                    "this gateway accepts text and data parts (application/json, text/plain), not files",
                ));
            }
            _ => return Err(RpcError::content_type("unknown part kind")),
        }
    }
    if message.parts.is_empty() {
        return Err(RpcError::invalid_params("the message has no parts"));
    }
    if let Some(value) = single {
        if texts.is_empty() && merged.is_empty() {
            return Ok(value);
        }
        return Err(RpcError::invalid_params(
            "a non-object data part cannot be combined with other parts",
        ));
    }
    if !texts.is_empty() {
        merged.insert("text".into(), Value::String(texts.join("\n")));
    }
    Ok(Value::Object(merged))
}

/// The capability a message is for: `metadata.skillId` (a skill id is the consumed event; the
/// capability's task name is accepted too), else the only skill, else the one skill whose
/// input schema the payload matches.
pub(crate) fn pick<'a>(
    agent: &'a AgentDefinition,
    skill_id: Option<&str>,
    payload: &Value,
) -> Result<&'a AgentCapability, RpcError> {
    let skills = || {
        agent
            .capabilities
            .iter()
            .map(|c| c.consumed_event.event_name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(id) = skill_id {
        return agent
            .capabilities
            .iter()
            .find(|c| c.consumed_event.event_name == id)
            .or_else(|| agent.capabilities.iter().find(|c| c.task_name == id))
            .ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "agent `{}` has no skill `{id}`; its skills: {}",
                    agent.name,
                    skills()
                ))
            });
    }
    match agent.capabilities.as_slice() {
        [] => Err(RpcError::unsupported(format!(
            "agent `{}` has no skills",
            agent.name
        ))),
        [only] => Ok(only),
        caps => {
            let matching: Vec<&AgentCapability> = caps
                .iter()
                .filter(|c| schema_accepts(c.consumed_event.payload_schema.as_ref(), payload))
                .collect();
            match matching.as_slice() {
                [one] => Ok(one),
                [] => Err(RpcError::invalid_params(format!(
                    "the message matches no skill's input schema; set `metadata.skillId` to one of: {}",
                    skills()
                ))),
                several => Err(RpcError::invalid_params(format!(
                    "the message matches several skills ({}); set `metadata.skillId` to choose",
                    several
                        .iter()
                        .map(|c| c.consumed_event.event_name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            }
        }
    }
}

#[cfg(feature = "schema-validation")]
fn schema_accepts(schema: Option<&Value>, payload: &Value) -> bool {
    match schema {
        Some(schema) => jsonschema::validator_for(schema).is_ok_and(|v| v.is_valid(payload)),
        None => false,
    }
}

#[cfg(not(feature = "schema-validation"))]
fn schema_accepts(_: Option<&Value>, _: &Value) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use soorma_common::a2a::{Part, Role};
    use soorma_common::{AgentKind, EventDefinition, Topic};

    fn msg(parts: Vec<Part>) -> Message {
        Message::new("m", Role::User, parts)
    }

    #[test]
    fn text_and_data_parts_become_the_payload() {
        let m = msg(vec![
            Part::text("hello"),
            Part::data(json!({"a": 1})),
            Part::text("world"),
            Part::data(json!({"b": 2})),
        ]);
        assert_eq!(
            payload(&m).unwrap(),
            json!({"text": "hello\nworld", "a": 1, "b": 2})
        );
        assert_eq!(
            payload(&msg(vec![Part::data(json!([1, 2]))])).unwrap(),
            json!([1, 2])
        );
        assert_eq!(payload(&msg(vec![])).unwrap_err().code, -32602);
        let file = Part::new(PartContent::Url("https://x/y.pdf".into()));
        assert_eq!(payload(&msg(vec![file])).unwrap_err().code, -32005);
    }

    #[test]
    fn skills_are_picked_by_id_then_by_schema() {
        let cap = |event: &str, schema: Value| {
            AgentCapability::new(
                event.split('.').next().unwrap(),
                EventDefinition::new(event, Topic::ActionRequests).with_payload_schema(schema),
            )
        };
        let agent = AgentDefinition::new("c-1", "calc", AgentKind::Tool)
            .with_capability(cap(
                "add.requested",
                json!({"type": "object", "required": ["a", "b"]}),
            ))
            .with_capability(cap(
                "eval.requested",
                json!({"type": "object", "required": ["text"]}),
            ));
        let by_id = pick(&agent, Some("add.requested"), &json!({})).unwrap();
        assert_eq!(by_id.task_name, "add");
        assert_eq!(
            pick(&agent, Some("eval"), &json!({})).unwrap().task_name,
            "eval"
        );
        let err = pick(&agent, Some("nope"), &json!({})).unwrap_err();
        assert!(
            err.message.contains("add.requested, eval.requested"),
            "{}",
            err.message
        );
        if cfg!(feature = "schema-validation") {
            let by_schema = pick(&agent, None, &json!({"text": "1+1"})).unwrap();
            assert_eq!(by_schema.task_name, "eval");
            let none = pick(&agent, None, &json!({"x": 1})).unwrap_err();
            assert!(
                none.message.contains("matches no skill"),
                "{}",
                none.message
            );
            let both = pick(&agent, None, &json!({"a": 1, "b": 2, "text": "x"})).unwrap_err();
            assert!(both.message.contains("several skills"), "{}", both.message);
        }
    }
}

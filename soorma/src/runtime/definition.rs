//! The registry definition of an agent: its capabilities and consumed events, with schemas.

use serde_json::{Value, json};
use soorma_common::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};

use super::handler::{Advertised, Handler};
use crate::protocol::request::reply_event_for;

/// The schema of a reply envelope's `data` whose `result` follows `result_schema`.
fn reply_schema(result_schema: Value) -> Value {
    let mut result = result_schema;
    let defs = result.as_object_mut().and_then(|o| {
        o.remove("$schema");
        o.remove("$defs")
    });
    let mut schema = json!({
        "type": "object",
        "properties": {
            "request_id": {"type": "string"},
            "success": {"type": "boolean"},
            "result": result,
            "error": {"type": "string"}
        },
        "required": ["request_id", "success"]
    });
    if let Some(defs) = defs {
        schema["$defs"] = defs;
    }
    schema
}

/// The definition an agent publishes to the registry.
pub(crate) fn definition(
    name: &str,
    kind: AgentKind,
    version: &str,
    description: &str,
    tenant: Option<&str>,
    handlers: &[Handler],
    agent_id: String,
) -> AgentDefinition {
    let mut def = AgentDefinition::new(agent_id, name, kind)
        .with_version(version)
        .with_description(description);
    if let Some(t) = tenant {
        def = def.with_tenant_id(t);
    }
    for h in handlers {
        for event in &h.requests {
            def = def.with_requested_event(event.clone());
        }
        let desc = h.description.clone().unwrap_or_default();
        let consumed = EventDefinition::new(&h.event, h.topic)
            .with_description(desc.clone())
            .with_payload_schema(h.payload_schema.get());
        match h.advertised {
            Advertised::Hidden => {}
            Advertised::Capability => {
                let mut consumed = consumed;
                let mut cap_produced = EventDefinition::new(
                    h.reply_event
                        .clone()
                        .map_or_else(|| reply_event_for(&h.event), |e| e.into_owned()),
                    Topic::ActionResults,
                )
                .with_description(format!(
                    "Reply to `{}` (typed callers use this event; string callers name their own)",
                    h.event
                ));
                if let Some(response) = &h.response_schema {
                    let result = response.get();
                    consumed = consumed.with_response_schema(result.clone());
                    cap_produced = cap_produced.with_payload_schema(reply_schema(result));
                } else {
                    cap_produced =
                        cap_produced.with_payload_schema(reply_schema(Value::Bool(true)));
                }
                let task_name = h.name.clone().unwrap_or_else(|| h.event.clone());
                def = def.with_capability(
                    AgentCapability::new(task_name, consumed)
                        .with_description(desc)
                        .with_produced_event(cap_produced),
                );
            }
            Advertised::ConsumedEvent => def = def.with_consumed_event(consumed),
        }
    }
    def
}

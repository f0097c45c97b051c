//! The registry definition of an agent: its capabilities and consumed events, with schemas.

use serde_json::{Value, json};
use soorma_common::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};

use super::handler::{Advertised, Handler};

/// The name of the event a tool's reply schema is published under (the caller picks the
/// actual reply event name; this documents the schema).
fn produced_event_name(event: &str) -> String {
    match event.strip_suffix(".requested") {
        Some(stem) => format!("{stem}.completed"),
        None => format!("{event}.completed"),
    }
}

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
        let desc = h.description.clone().unwrap_or_default();
        let consumed = EventDefinition::new(&h.event, h.topic)
            .with_description(desc.clone())
            .with_payload_schema(h.payload_schema.get());
        match h.advertised {
            Advertised::Hidden => {}
            Advertised::Capability => {
                let mut consumed = consumed;
                let mut cap_produced =
                    EventDefinition::new(produced_event_name(&h.event), Topic::ActionResults)
                        .with_description(format!(
                            "Reply to `{}` (the caller names the event; this is its schema)",
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

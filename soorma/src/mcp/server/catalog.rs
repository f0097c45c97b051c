//! The MCP tools a server offers: the capabilities of the platform's tools and workers, read
//! from the registry.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::{JsonObject, Tool};
use serde_json::{Value, json};
use soorma_common::{AgentCapability, AgentDefinition, AgentKind};

use crate::platform::snapshot::Read;

/// The argument a non-object payload travels in.
pub(super) const INPUT: &str = "input";

/// Where a tool call goes.
#[derive(Debug, Clone)]
pub(super) struct Route {
    /// The event the capability consumes.
    pub event: String,
    /// Whether the payload is the `input` argument (its schema is not an object).
    pub wrapped: bool,
}

/// The tools, in listing order, and their routes by name.
#[derive(Debug, Default)]
pub(super) struct Catalog {
    pub tools: Vec<Tool>,
    pub routes: HashMap<String, Route>,
}

/// Which agents a server offers.
pub(super) struct Scope<'a> {
    /// Only these agents (all tools and workers when empty).
    pub agents: &'a [String],
    /// The tenant the server acts for: agents serving another tenant are left out.
    pub tenant: Option<&'a str>,
}

impl Scope<'_> {
    fn serves(&self, def: &AgentDefinition) -> bool {
        if !matches!(def.kind, AgentKind::Tool | AgentKind::Worker) {
            return false;
        }
        if !self.agents.is_empty() && !self.agents.contains(&def.name) {
            return false;
        }
        match (&def.tenant_id, self.tenant) {
            (Some(agent_tenant), Some(tenant)) => agent_tenant == tenant,
            (Some(_), None) => false,
            (None, _) => true,
        }
    }
}

impl Catalog {
    /// The tools of the agents in `scope`, one per consumed event (instances of an agent share
    /// them), sorted by name.
    pub fn build(agents: &Read, scope: &Scope<'_>) -> Self {
        let mut catalog = Catalog::default();
        // A read lists agents by name, then instance id: the first offering a tool wins.
        for def in agents.iter().filter(|d| scope.serves(d)) {
            for cap in &def.capabilities {
                let name = &cap.consumed_event.event_name;
                if catalog.routes.contains_key(name) {
                    continue;
                }
                if !is_valid_tool_name(name) {
                    tracing::warn!(
                        agent = %def.name,
                        event_type = %name,
                        "not offered over MCP: a tool name is 1-128 characters of A-Z a-z 0-9 _ . -"
                    );
                    continue;
                }
                let (tool, route) = tool(def, cap);
                catalog.routes.insert(name.clone(), route);
                catalog.tools.push(tool);
            }
        }
        catalog.tools.sort_by(|a, b| a.name.cmp(&b.name));
        catalog
    }
}

/// MCP tool names: 1 to 128 of `A-Z a-z 0-9 _ . -`.
pub(super) fn is_valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn tool(def: &AgentDefinition, cap: &AgentCapability) -> (Tool, Route) {
    let event = &cap.consumed_event;
    let description = [&cap.description, &event.description, &def.description]
        .into_iter()
        .find(|d| !d.trim().is_empty())
        .cloned();
    let (input_schema, wrapped) = input_schema(event.payload_schema.as_ref());
    let mut tool = Tool::new_with_raw(
        event.event_name.clone(),
        description.map(Into::into),
        Arc::new(input_schema),
    );
    if cap.task_name != event.event_name && !cap.task_name.is_empty() {
        tool = tool.with_title(cap.task_name.clone());
    }
    if let Some(Value::Object(output)) = &event.response_schema
        && is_object_schema(output)
    {
        tool = tool.with_raw_output_schema(Arc::new(output.clone()));
    }
    let route = Route {
        event: event.event_name.clone(),
        wrapped,
    };
    (tool, route)
}

fn is_object_schema(schema: &JsonObject) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// The tool's input schema for a payload schema, and whether the payload is wrapped as the
/// `input` argument (MCP arguments are an object; other payloads are wrapped).
pub(super) fn input_schema(payload: Option<&Value>) -> (JsonObject, bool) {
    match payload {
        None | Some(Value::Bool(true)) => (object(json!({"type": "object"})), false),
        Some(Value::Object(schema)) if is_object_schema(schema) => (schema.clone(), false),
        Some(other) => {
            let mut inner = other.clone();
            let mut root = JsonObject::new();
            if let Value::Object(inner) = &mut inner {
                // Definitions stay at the root, where the `$ref`s inside point.
                for key in ["$schema", "$defs", "definitions"] {
                    if let Some(v) = inner.remove(key) {
                        root.insert(key.to_owned(), v);
                    }
                }
            }
            root.insert("type".into(), json!("object"));
            root.insert("properties".into(), json!({ INPUT: inner }));
            root.insert("required".into(), json!([INPUT]));
            (root, true)
        }
    }
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use soorma_common::{EventDefinition, Topic};

    fn cap(event: &str, schema: Option<Value>) -> AgentCapability {
        let mut consumed = EventDefinition::new(event, Topic::ActionRequests);
        if let Some(s) = schema {
            consumed = consumed.with_payload_schema(s);
        }
        AgentCapability::new(event, consumed).with_description("Does it.")
    }

    #[test]
    fn object_schemas_are_kept_and_others_wrapped() {
        let object = json!({"type": "object", "properties": {"a": {"type": "number"}}});
        assert_eq!(input_schema(Some(&object)), (self::object(object), false));
        assert_eq!(input_schema(None).0["type"], "object");
        let (wrapped, is_wrapped) = input_schema(Some(&json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "array", "items": {"$ref": "#/$defs/X"}, "$defs": {"X": {"type": "string"}}
        })));
        assert!(is_wrapped);
        assert_eq!(
            Value::Object(wrapped),
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$defs": {"X": {"type": "string"}},
                "type": "object",
                "properties": {"input": {"type": "array", "items": {"$ref": "#/$defs/X"}}},
                "required": ["input"],
            })
        );
    }

    #[test]
    fn tool_names_follow_the_spec() {
        assert!(is_valid_tool_name("calculate.requested"));
        assert!(is_valid_tool_name("a-b_C.9"));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("with space"));
        assert!(!is_valid_tool_name("orders/new"));
        assert!(!is_valid_tool_name(&"x".repeat(129)));
    }

    #[test]
    fn the_catalog_offers_tools_and_workers_in_scope_once() {
        let calc = |id: &str| {
            AgentDefinition::new(id, "calculator", AgentKind::Tool)
                .with_capability(cap("calculate.requested", None))
                .with_capability(cap("bad name", None))
        };
        let worker = AgentDefinition::new("w-1", "batch", AgentKind::Worker)
            .with_capability(cap("batch.requested", Some(json!({"type": "integer"}))));
        let planner = AgentDefinition::new("p-1", "planner", AgentKind::Planner)
            .with_capability(cap("goal.requested", None));
        let other_tenant = AgentDefinition::new("t-1", "private", AgentKind::Tool)
            .with_capability(cap("private.requested", None))
            .with_tenant_id("acme");
        let all = Read::new(
            std::time::Instant::now(),
            vec![calc("c-2"), worker, planner, calc("c-1"), other_tenant],
        );

        let everything = Catalog::build(
            &all,
            &Scope {
                agents: &[],
                tenant: None,
            },
        );
        let names: Vec<&str> = everything.tools.iter().map(|t| &*t.name).collect();
        assert_eq!(names, ["batch.requested", "calculate.requested"]);
        assert!(everything.routes["batch.requested"].wrapped);
        assert_eq!(everything.tools[1].description.as_deref(), Some("Does it."));

        let acme = Catalog::build(
            &all,
            &Scope {
                agents: &["private".into(), "calculator".into()],
                tenant: Some("acme"),
            },
        );
        let names: Vec<&str> = acme.tools.iter().map(|t| &*t.name).collect();
        assert_eq!(names, ["calculate.requested", "private.requested"]);
    }
}

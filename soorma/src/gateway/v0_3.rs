//! A2A v0.3 JSON-RPC on the same interface: its method names map onto the v1.0 handlers, its
//! messages are rewritten to v1.0 on the way in, and results and stream events to v0.3 on the
//! way out (`kind` discriminators, lower-case states and roles, `final` on status updates).

use serde_json::{Map, Value, json};

/// The v1.0 method a v0.3 method is served by.
pub(crate) fn method(name: &str) -> Option<&'static str> {
    Some(match name {
        "message/send" => "SendMessage",
        "message/stream" => "SendStreamingMessage",
        "tasks/get" => "GetTask",
        "tasks/cancel" => "CancelTask",
        "tasks/resubscribe" => "SubscribeToTask",
        "tasks/pushNotificationConfig/set" => "CreateTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/get" => "GetTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/list" => "ListTaskPushNotificationConfigs",
        "tasks/pushNotificationConfig/delete" => "DeleteTaskPushNotificationConfig",
        "agent/getAuthenticatedExtendedCard" => "GetExtendedAgentCard",
        _ => return None,
    })
}

/// v0.3 params as v1.0 params: the message's role and parts, `blocking` as
/// `returnImmediately`.
pub(crate) fn params_in(mut params: Value) -> Value {
    if let Some(message) = params.get_mut("message") {
        message_in(message);
    }
    if let Some(config) = params
        .get_mut("configuration")
        .and_then(Value::as_object_mut)
        && let Some(blocking) = config.remove("blocking").and_then(|b| b.as_bool())
    {
        config.insert("returnImmediately".into(), Value::Bool(!blocking));
    }
    params
}

fn message_in(message: &mut Value) {
    let Some(m) = message.as_object_mut() else {
        return;
    };
    m.remove("kind");
    if let Some(role) = m.get_mut("role")
        && let Some(r) = role.as_str()
    {
        *role = Value::String(format!("ROLE_{}", r.to_ascii_uppercase()));
    }
    if let Some(parts) = m.get_mut("parts").and_then(Value::as_array_mut) {
        for part in parts {
            part_in(part);
        }
    }
}

fn part_in(part: &mut Value) {
    let Some(p) = part.as_object_mut() else {
        return;
    };
    if p.remove("kind").as_ref().and_then(Value::as_str) == Some("file")
        && let Some(Value::Object(mut file)) = p.remove("file")
    {
        for (from, to) in [
            ("uri", "url"),
            ("bytes", "raw"),
            ("mimeType", "mediaType"),
            ("name", "filename"),
        ] {
            if let Some(v) = file.remove(from) {
                p.insert(to.into(), v);
            }
        }
    }
}

/// A v1.0 result as v0.3: `SendMessage`'s `{"task": ..}` is the task itself, tasks and
/// messages get their v0.3 shape.
pub(crate) fn result_out(method: &str, result: Value) -> Value {
    match method {
        "SendMessage" => stream_out(result),
        "GetTask" | "CancelTask" => task_out(result),
        _ => result,
    }
}

/// A v1.0 stream response (`{"task"|"message"|"statusUpdate"|"artifactUpdate": ..}`) as v0.3.
pub(crate) fn stream_out(response: Value) -> Value {
    let Value::Object(mut obj) = response else {
        return response;
    };
    if let Some(task) = obj.remove("task") {
        return task_out(task);
    }
    if let Some(message) = obj.remove("message") {
        return message_out(message);
    }
    if let Some(Value::Object(mut update)) = obj.remove("statusUpdate") {
        let status = update
            .remove("status")
            .map(status_out)
            .unwrap_or(Value::Null);
        let terminal = status["state"]
            .as_str()
            .is_some_and(|s| matches!(s, "completed" | "canceled" | "failed" | "rejected"));
        update.insert("kind".into(), json!("status-update"));
        update.insert("status".into(), status);
        update.insert("final".into(), Value::Bool(terminal));
        return Value::Object(update);
    }
    if let Some(Value::Object(mut update)) = obj.remove("artifactUpdate") {
        if let Some(artifact) = update.remove("artifact") {
            update.insert("artifact".into(), artifact_out(artifact));
        }
        update.insert("kind".into(), json!("artifact-update"));
        return Value::Object(update);
    }
    Value::Object(obj)
}

fn task_out(task: Value) -> Value {
    let Value::Object(mut t) = task else {
        return task;
    };
    t.insert("kind".into(), json!("task"));
    if let Some(status) = t.remove("status") {
        t.insert("status".into(), status_out(status));
    }
    map_array(&mut t, "history", message_out);
    map_array(&mut t, "artifacts", artifact_out);
    Value::Object(t)
}

fn map_array(obj: &mut Map<String, Value>, key: &str, f: fn(Value) -> Value) {
    if let Some(Value::Array(items)) = obj.remove(key) {
        obj.insert(key.into(), items.into_iter().map(f).collect());
    }
}

fn status_out(status: Value) -> Value {
    let Value::Object(mut s) = status else {
        return status;
    };
    if let Some(state) = s.get("state").and_then(Value::as_str) {
        let state = state
            .strip_prefix("TASK_STATE_")
            .unwrap_or(state)
            .to_ascii_lowercase()
            .replace('_', "-");
        s.insert("state".into(), Value::String(state));
    }
    if let Some(message) = s.remove("message") {
        s.insert("message".into(), message_out(message));
    }
    Value::Object(s)
}

fn message_out(message: Value) -> Value {
    let Value::Object(mut m) = message else {
        return message;
    };
    m.insert("kind".into(), json!("message"));
    if let Some(role) = m.get("role").and_then(Value::as_str) {
        let role = role
            .strip_prefix("ROLE_")
            .unwrap_or(role)
            .to_ascii_lowercase();
        m.insert("role".into(), Value::String(role));
    }
    map_array(&mut m, "parts", part_out);
    Value::Object(m)
}

fn artifact_out(artifact: Value) -> Value {
    let Value::Object(mut a) = artifact else {
        return artifact;
    };
    map_array(&mut a, "parts", part_out);
    Value::Object(a)
}

/// A v1.0 part as v0.3; a data part that is not an object (v0.3 wants one) is wrapped as
/// `{"value": ..}`.
fn part_out(part: Value) -> Value {
    let Value::Object(mut p) = part else {
        return part;
    };
    if p.contains_key("text") {
        p.insert("kind".into(), json!("text"));
    } else if let Some(data) = p.remove("data") {
        let data = if data.is_object() {
            data
        } else {
            json!({ "value": data })
        };
        p.insert("kind".into(), json!("data"));
        p.insert("data".into(), data);
    } else {
        let mut file = Map::new();
        for (from, to) in [
            ("url", "uri"),
            ("raw", "bytes"),
            ("mediaType", "mimeType"),
            ("filename", "name"),
        ] {
            if let Some(v) = p.remove(from) {
                file.insert(to.into(), v);
            }
        }
        p.insert("kind".into(), json!("file"));
        p.insert("file".into(), Value::Object(file));
    }
    Value::Object(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_results_are_rewritten() {
        let params = params_in(json!({
            "message": {"kind": "message", "messageId": "m", "role": "user",
                        "parts": [{"kind": "text", "text": "hi"},
                                  {"kind": "file", "file": {"uri": "https://x/a.pdf", "mimeType": "application/pdf"}}]},
            "configuration": {"blocking": false}}));
        assert_eq!(params["message"]["role"], "ROLE_USER");
        assert_eq!(params["message"]["parts"][0], json!({"text": "hi"}));
        assert_eq!(
            params["message"]["parts"][1],
            json!({"url": "https://x/a.pdf", "mediaType": "application/pdf"})
        );
        assert_eq!(params["configuration"]["returnImmediately"], true);
        let task = result_out(
            "SendMessage",
            json!({"task": {"id": "t", "contextId": "c",
                "status": {"state": "TASK_STATE_INPUT_REQUIRED",
                           "message": {"messageId": "s", "role": "ROLE_AGENT", "parts": [{"text": "?"}]}},
                "artifacts": [{"artifactId": "a", "parts": [{"data": 3.0}]}]}}),
        );
        assert_eq!(task["kind"], "task");
        assert_eq!(task["status"]["state"], "input-required");
        assert_eq!(task["status"]["message"]["role"], "agent");
        assert_eq!(task["status"]["message"]["parts"][0]["kind"], "text");
        assert_eq!(
            task["artifacts"][0]["parts"][0],
            json!({"kind": "data", "data": {"value": 3.0}})
        );
        let update = stream_out(json!({"statusUpdate": {"taskId": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED"}}}));
        assert_eq!(
            (update["kind"].as_str(), update["final"].as_bool()),
            (Some("status-update"), Some(true))
        );
        assert_eq!(method("tasks/resubscribe"), Some("SubscribeToTask"));
        assert_eq!(method("tasks/list"), None);
    }
}

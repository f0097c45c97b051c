//! JSON-RPC 2.0 framing and the A2A error codes.

use serde_json::{Value, json};

/// A JSON-RPC error: code, message and optional details.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn parse(detail: impl std::fmt::Display) -> Self {
        Self::new(-32700, format!("Invalid JSON payload: {detail}"))
    }

    pub fn invalid_request(detail: impl std::fmt::Display) -> Self {
        Self::new(
            -32600,
            format!("Request payload validation error: {detail}"),
        )
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(-32601, format!("Method not found: `{method}`"))
    }

    pub fn invalid_params(detail: impl std::fmt::Display) -> Self {
        Self::new(-32602, format!("Invalid parameters: {detail}"))
    }

    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(-32603, format!("Internal error: {detail}"))
    }

    pub fn task_not_found(id: &str) -> Self {
        Self::new(-32001, format!("Task not found: `{id}`"))
    }

    pub fn task_not_cancelable(id: &str, state: impl std::fmt::Debug) -> Self {
        Self::new(
            -32002,
            format!("Task `{id}` cannot be canceled: it is already {state:?}"),
        )
    }

    pub fn push_not_supported() -> Self {
        Self::new(-32003, "Push notifications are not supported by this agent")
    }

    pub fn unsupported(detail: impl std::fmt::Display) -> Self {
        Self::new(-32004, format!("Unsupported operation: {detail}"))
    }

    pub fn content_type(detail: impl std::fmt::Display) -> Self {
        Self::new(-32005, format!("Content type not supported: {detail}"))
    }

    pub fn extended_card_not_configured() -> Self {
        Self::new(-32007, "This agent has no extended agent card")
    }

    pub fn version_not_supported(version: &str) -> Self {
        Self::new(
            -32009,
            format!("A2A version `{version}` is not supported; this interface speaks 1.0"),
        )
    }

    /// Too many tasks in flight: an implementation-defined server error (JSON-RPC reserves
    /// -32000 to -32099 for them; A2A uses none of -32000).
    pub fn busy(in_flight: usize, tenant: Option<&str>) -> Self {
        let whose = tenant.map_or(String::new(), |t| format!(" for tenant `{t}`"));
        Self::new(
            -32000,
            format!(
                "Server busy: {in_flight} tasks are in flight{whose}, this gateway's limit; retry when some have finished"
            ),
        )
    }

    /// Too many streams open for one tenant (the same server-error range as [`busy`](Self::busy)).
    pub fn too_many_streams(open: usize, tenant: &str) -> Self {
        Self::new(
            -32000,
            format!(
                "Server busy: tenant `{tenant}` has {open} task streams open, this gateway's limit; retry when one has ended"
            ),
        )
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// A parsed JSON-RPC request.
#[derive(Debug)]
pub(crate) struct RpcRequest {
    pub id: Value,
    pub method: String,
    pub params: Value,
}

impl RpcRequest {
    /// Parses a request body; on failure returns the error and the id, if one was readable.
    #[cfg(test)]
    pub fn parse(body: &[u8]) -> Result<Self, (Value, RpcError)> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| (Value::Null, RpcError::parse(e)))?;
        Self::from_value(value)
    }

    /// Reads a request from parsed JSON (one element of a batch, or a whole body).
    pub fn from_value(value: Value) -> Result<Self, (Value, RpcError)> {
        let Value::Object(mut obj) = value else {
            return Err((
                Value::Null,
                RpcError::invalid_request("the request must be a JSON object"),
            ));
        };
        let id = obj.remove("id").unwrap_or(Value::Null);
        if !matches!(id, Value::Null | Value::String(_) | Value::Number(_)) {
            return Err((
                Value::Null,
                RpcError::invalid_request("`id` must be a string, a number or null"),
            ));
        }
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err((id, RpcError::invalid_request("`jsonrpc` must be \"2.0\"")));
        }
        let method = match obj.remove("method") {
            Some(Value::String(m)) => m,
            _ => return Err((id, RpcError::invalid_request("`method` must be a string"))),
        };
        let params = obj.remove("params").unwrap_or(Value::Null);
        if !matches!(params, Value::Object(_) | Value::Null) {
            return Err((id, RpcError::invalid_params("`params` must be an object")));
        }
        Ok(Self { id, method, params })
    }
}

/// A JSON-RPC success response.
pub(crate) fn success(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A JSON-RPC error response.
pub(crate) fn failure(id: &Value, error: &RpcError) -> Value {
    let mut err = json!({"code": error.code, "message": error.message});
    if let Some(data) = &error.data {
        err["data"] = data.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "error": err})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_requests() {
        let ok = RpcRequest::parse(
            br#"{"jsonrpc":"2.0","id":7,"method":"GetTask","params":{"id":"t"}}"#,
        )
        .unwrap();
        assert_eq!((ok.id, ok.method.as_str()), (json!(7), "GetTask"));
        assert_eq!(RpcRequest::parse(b"{nope").unwrap_err().1.code, -32700);
        assert_eq!(RpcRequest::parse(b"[1]").unwrap_err().1.code, -32600);
        let (id, e) = RpcRequest::parse(br#"{"jsonrpc":"1.0","id":"a","method":"x"}"#).unwrap_err();
        assert_eq!((id, e.code), (json!("a"), -32600));
        let (_, e) = RpcRequest::parse(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#)
            .unwrap_err();
        assert_eq!(e.code, -32602);
    }

    #[test]
    fn error_responses_carry_code_message_and_data() {
        let e = RpcError::task_not_found("t-1").with_data(json!([{"@type": "x"}]));
        let v = failure(&json!(3), &e);
        assert_eq!(v["error"]["code"], -32001);
        assert_eq!(v["id"], 3);
        assert_eq!(v["error"]["data"][0]["@type"], "x");
    }
}

//! Reply payloads: what a tool or worker sends back on the caller's `response_event`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `data` of a reply: `{request_id, success, result}` or `{request_id, success: false, error}`.
///
/// ```
/// use soorma_common::ActionReply;
/// let ok = ActionReply::success("req-1", serde_json::json!({"result": 3.0}));
/// assert!(ok.success);
/// let err = ActionReply::failure("req-1", "division by zero");
/// assert_eq!(serde_json::to_value(&err).unwrap()["success"], false);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ActionReply {
    /// Id of the request (or task) being answered.
    pub request_id: String,
    /// Whether the request succeeded.
    pub success: bool,
    /// The result, on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error message, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ActionReply {
    /// A success reply.
    ///
    /// ```
    /// # use soorma_common::ActionReply;
    /// assert_eq!(ActionReply::success("r", 1.into()).result, Some(1.into()));
    /// ```
    pub fn success(request_id: impl Into<String>, result: Value) -> Self {
        Self {
            request_id: request_id.into(),
            success: true,
            result: Some(result),
            error: None,
        }
    }

    /// An error reply.
    ///
    /// ```
    /// # use soorma_common::ActionReply;
    /// assert!(!ActionReply::failure("r", "bad").success);
    /// ```
    pub fn failure(request_id: impl Into<String>, error: impl Into<String>) -> Self {
        Self {
            request_id: request_id.into(),
            success: false,
            result: None,
            error: Some(error.into()),
        }
    }
}

impl ActionReply {
    /// Reads the `data` of a reply event: a soorma reply (an object with a boolean `success`
    /// and a string `request_id`) gives its result, or its error as `Err`; any other data is
    /// a successful raw result (a reply from an agent that does not use the SDK). This is the
    /// one place the reply format is decoded.
    ///
    /// ```
    /// use serde_json::json;
    /// use soorma_common::ActionReply;
    ///
    /// let ok = json!({"request_id": "r", "success": true, "result": 3});
    /// assert_eq!(ActionReply::outcome_of(&ok), Ok(json!(3)));
    /// let failed = json!({"request_id": "r", "success": false, "error": "bad"});
    /// assert_eq!(ActionReply::outcome_of(&failed), Err("bad".to_owned()));
    /// let raw = json!({"items": []});
    /// assert_eq!(ActionReply::outcome_of(&raw), Ok(raw.clone()));
    /// ```
    pub fn outcome_of(data: &Value) -> Result<Value, String> {
        if Self::request_id_of(data).is_none() {
            return Ok(data.clone());
        }
        if data.get("success").and_then(Value::as_bool) == Some(true) {
            return Ok(data.get("result").cloned().unwrap_or(Value::Null));
        }
        Err(match data.get("error") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => {
                "the responder reported failure without an error message".to_owned()
            }
            Some(other) => other.to_string(),
        })
    }

    /// The id of the request a reply event's `data` answers, when the data is a soorma reply
    /// (an object with a boolean `success` and a string `request_id`); `None` for raw data,
    /// whatever fields of its own it has.
    ///
    /// ```
    /// use serde_json::json;
    /// use soorma_common::ActionReply;
    ///
    /// let reply = json!({"request_id": "r", "success": true, "result": 3});
    /// assert_eq!(ActionReply::request_id_of(&reply), Some("r"));
    /// assert_eq!(ActionReply::request_id_of(&json!({"request_id": "r", "items": []})), None);
    /// ```
    pub fn request_id_of(data: &Value) -> Option<&str> {
        if !data.get("success").is_some_and(Value::is_boolean) {
            return None;
        }
        data.get("request_id").and_then(Value::as_str)
    }

    /// The reply a reply event's `data` carries, with `request_id` as its id when the data is
    /// a raw result (see [`outcome_of`](Self::outcome_of)).
    ///
    /// ```
    /// use serde_json::json;
    /// use soorma_common::ActionReply;
    ///
    /// let reply = ActionReply::from_data(&json!({"items": []}), "req-7");
    /// assert!(reply.success && reply.request_id == "req-7");
    /// let failed = ActionReply::from_data(&json!({"request_id": "r", "success": false, "error": "x"}), "c");
    /// assert_eq!((failed.request_id.as_str(), failed.error.as_deref()), ("r", Some("x")));
    /// ```
    pub fn from_data(data: &Value, request_id: &str) -> Self {
        let id = data
            .get("request_id")
            .and_then(Value::as_str)
            .unwrap_or(request_id);
        match Self::outcome_of(data) {
            Ok(result) => Self::success(id, result),
            Err(error) => Self::failure(id, error),
        }
    }
}

/// The `data` of a `task.progress` event on `system-events`.
///
/// ```
/// use soorma_common::TaskProgress;
/// let p = TaskProgress::new("task-1", "researcher", 0.5).with_message("halfway");
/// assert_eq!(p.progress, 0.5);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct TaskProgress {
    /// The task.
    pub task_id: String,
    /// The agent working on it.
    pub agent: String,
    /// Fraction done, 0.0..=1.0.
    pub progress: f64,
    /// A status word (`running`, `waiting`, `completed`, `failed`).
    #[serde(default)]
    pub status: String,
    /// A human-readable note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The plan the task belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<String>,
}

impl TaskProgress {
    /// A `running` progress report.
    ///
    /// ```
    /// # use soorma_common::TaskProgress;
    /// assert_eq!(TaskProgress::new("t", "a", 0.1).status, "running");
    /// ```
    pub fn new(task_id: impl Into<String>, agent: impl Into<String>, progress: f64) -> Self {
        Self {
            task_id: task_id.into(),
            agent: agent.into(),
            progress,
            status: "running".to_owned(),
            message: None,
            plan_id: None,
        }
    }

    /// Sets the message.
    ///
    /// ```
    /// # use soorma_common::TaskProgress;
    /// assert!(TaskProgress::new("t", "a", 0.1).with_message("m").message.is_some());
    /// ```
    #[must_use]
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// Sets the status word.
    ///
    /// ```
    /// # use soorma_common::TaskProgress;
    /// assert_eq!(TaskProgress::new("t", "a", 1.0).with_status("completed").status, "completed");
    /// ```
    #[must_use]
    pub fn with_status(mut self, status: impl Into<String>) -> Self {
        self.status = status.into();
        self
    }

    /// Sets the plan id.
    ///
    /// ```
    /// # use soorma_common::TaskProgress;
    /// assert!(TaskProgress::new("t", "a", 1.0).with_plan_id("p").plan_id.is_some());
    /// ```
    #[must_use]
    pub fn with_plan_id(mut self, plan_id: impl Into<String>) -> Self {
        self.plan_id = Some(plan_id.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reply_wire_shape() {
        let ok = ActionReply::success("r", json!({"x": 1}));
        assert_eq!(
            serde_json::to_value(&ok).unwrap(),
            json!({"request_id": "r", "success": true, "result": {"x": 1}})
        );
        let err = ActionReply::failure("r", "boom");
        assert_eq!(
            serde_json::to_value(&err).unwrap(),
            json!({"request_id": "r", "success": false, "error": "boom"})
        );
        let back: ActionReply =
            serde_json::from_value(json!({"request_id": "r", "success": true, "extra": 1}))
                .unwrap();
        assert!(back.result.is_none());
    }
}

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

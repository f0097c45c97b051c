//! A2A v1.0 messages, tasks and the JSON-RPC request/response payloads the gateway speaks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who sent a [`Message`].
///
/// ```
/// use soorma_common::a2a::Role;
/// assert_eq!(serde_json::to_string(&Role::User).unwrap(), "\"ROLE_USER\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub enum Role {
    /// Not given.
    #[default]
    #[serde(rename = "ROLE_UNSPECIFIED")]
    Unspecified,
    /// The client.
    #[serde(rename = "ROLE_USER")]
    User,
    /// The agent.
    #[serde(rename = "ROLE_AGENT")]
    Agent,
}

/// The content of a [`Part`]: exactly one of text, raw bytes (base64), a URL or JSON data.
///
/// ```
/// use soorma_common::a2a::PartContent;
/// let json = serde_json::to_value(PartContent::Text("hi".into())).unwrap();
/// assert_eq!(json, serde_json::json!({"text": "hi"}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum PartContent {
    /// Plain text.
    Text(String),
    /// Bytes, base64-encoded.
    Raw(String),
    /// A link to the content.
    Url(String),
    /// Structured JSON data.
    Data(Value),
}

/// One piece of a message or artifact.
///
/// ```
/// use soorma_common::a2a::Part;
/// let part: Part = serde_json::from_value(serde_json::json!({"data": {"a": 1}})).unwrap();
/// assert_eq!(part.as_data(), Some(&serde_json::json!({"a": 1})));
/// assert_eq!(serde_json::to_value(Part::text("hi")).unwrap(), serde_json::json!({"text": "hi"}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Part {
    /// The content.
    #[serde(flatten)]
    pub content: PartContent,
    /// Extra information about the part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// A file name, for file content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// The media type of the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

impl Part {
    /// A text part.
    ///
    /// ```
    /// assert_eq!(soorma_common::a2a::Part::text("hi").as_text(), Some("hi"));
    /// ```
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(PartContent::Text(text.into()))
    }

    /// A JSON data part.
    ///
    /// ```
    /// let p = soorma_common::a2a::Part::data(serde_json::json!([1, 2]));
    /// assert_eq!(p.as_data(), Some(&serde_json::json!([1, 2])));
    /// ```
    pub fn data(value: Value) -> Self {
        Self::new(PartContent::Data(value))
    }

    /// A part with this content and nothing else.
    ///
    /// ```
    /// use soorma_common::a2a::{Part, PartContent};
    /// let p = Part::new(PartContent::Url("https://example.com/report.pdf".into()));
    /// assert!(p.as_text().is_none());
    /// ```
    pub fn new(content: PartContent) -> Self {
        Self {
            content,
            metadata: None,
            filename: None,
            media_type: None,
        }
    }

    /// Sets the media type.
    ///
    /// ```
    /// let p = soorma_common::a2a::Part::text("# Hi").with_media_type("text/markdown");
    /// assert_eq!(p.media_type.as_deref(), Some("text/markdown"));
    /// ```
    pub fn with_media_type(mut self, media_type: impl Into<String>) -> Self {
        self.media_type = Some(media_type.into());
        self
    }

    /// The text, for a text part.
    ///
    /// ```
    /// assert_eq!(soorma_common::a2a::Part::text("x").as_text(), Some("x"));
    /// ```
    pub fn as_text(&self) -> Option<&str> {
        match &self.content {
            PartContent::Text(t) => Some(t),
            _ => None,
        }
    }

    /// The data, for a data part.
    ///
    /// ```
    /// assert!(soorma_common::a2a::Part::text("x").as_data().is_none());
    /// ```
    pub fn as_data(&self) -> Option<&Value> {
        match &self.content {
            PartContent::Data(v) => Some(v),
            _ => None,
        }
    }
}

/// A message between client and agent.
///
/// ```
/// use soorma_common::a2a::{Message, Part, Role};
/// let m = Message::new("m-1", Role::User, vec![Part::text("2+2?")]);
/// let json = serde_json::to_value(&m).unwrap();
/// assert_eq!(json, serde_json::json!({"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "2+2?"}]}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Message {
    /// The message's id (set by its sender).
    pub message_id: String,
    /// The conversation it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The task it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Who sent it.
    pub role: Role,
    /// The content.
    pub parts: Vec<Part>,
    /// Extra information (`skillId` picks a skill at the soorma gateway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Extensions the message uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    /// Tasks the message refers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
}

impl Message {
    /// A message with these parts.
    ///
    /// ```
    /// use soorma_common::a2a::{Message, Part, Role};
    /// let m = Message::new("m-1", Role::Agent, vec![Part::text("4")]);
    /// assert_eq!(m.parts.len(), 1);
    /// ```
    pub fn new(message_id: impl Into<String>, role: Role, parts: Vec<Part>) -> Self {
        Self {
            message_id: message_id.into(),
            context_id: None,
            task_id: None,
            role,
            parts,
            metadata: None,
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
        }
    }

    /// Sets a metadata entry.
    ///
    /// ```
    /// use soorma_common::a2a::{Message, Part, Role};
    /// let m = Message::new("m-1", Role::User, vec![Part::text("hi")]).with_metadata("skillId", "greet.requested");
    /// assert_eq!(m.metadata.unwrap()["skillId"], "greet.requested");
    /// ```
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata
            .get_or_insert_with(Map::new)
            .insert(key.into(), value.into());
        self
    }
}

/// The lifecycle state of a [`Task`].
///
/// ```
/// use soorma_common::a2a::TaskState;
/// assert_eq!(serde_json::to_string(&TaskState::Completed).unwrap(), "\"TASK_STATE_COMPLETED\"");
/// assert!(TaskState::Failed.is_terminal());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub enum TaskState {
    /// Not given.
    #[default]
    #[serde(rename = "TASK_STATE_UNSPECIFIED")]
    Unspecified,
    /// Accepted, not started.
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    /// Running.
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    /// Finished successfully.
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    /// Finished with an error.
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    /// Canceled by the client.
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    /// Waiting for the client.
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    /// Refused by the agent.
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    /// Waiting for authentication.
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
}

impl TaskState {
    /// Whether the task can no longer change.
    ///
    /// ```
    /// assert!(!soorma_common::a2a::TaskState::Working.is_terminal());
    /// ```
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected
        )
    }
}

/// A task's state, with an optional message and time.
///
/// ```
/// use soorma_common::a2a::{TaskState, TaskStatus};
/// let s = TaskStatus::new(TaskState::Working);
/// assert_eq!(serde_json::to_value(&s).unwrap(), serde_json::json!({"state": "TASK_STATE_WORKING"}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TaskStatus {
    /// The state.
    pub state: TaskState,
    /// A message from the agent about the state (e.g. the error of a failed task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// When the state was entered (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

impl TaskStatus {
    /// A status in `state`.
    ///
    /// ```
    /// let s = soorma_common::a2a::TaskStatus::new(soorma_common::a2a::TaskState::Submitted);
    /// assert!(s.message.is_none());
    /// ```
    pub fn new(state: TaskState) -> Self {
        Self {
            state,
            message: None,
            timestamp: None,
        }
    }
}

/// An output of a task.
///
/// ```
/// use soorma_common::a2a::{Artifact, Part};
/// let a = Artifact::new("result", vec![Part::data(serde_json::json!({"result": 4.0}))]);
/// assert_eq!(serde_json::to_value(&a).unwrap()["artifactId"], "result");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Artifact {
    /// The artifact's id within its task.
    pub artifact_id: String,
    /// A name for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The content.
    pub parts: Vec<Part>,
    /// Extra information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Extensions used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
}

impl Artifact {
    /// An artifact with these parts.
    ///
    /// ```
    /// let a = soorma_common::a2a::Artifact::new("a-1", vec![soorma_common::a2a::Part::text("done")]);
    /// assert_eq!(a.parts.len(), 1);
    /// ```
    pub fn new(artifact_id: impl Into<String>, parts: Vec<Part>) -> Self {
        Self {
            artifact_id: artifact_id.into(),
            name: None,
            description: None,
            parts,
            metadata: None,
            extensions: Vec::new(),
        }
    }
}

/// A unit of work the agent performs for a client.
///
/// ```
/// use soorma_common::a2a::{Task, TaskState, TaskStatus};
/// let t = Task::new("t-1", "c-1", TaskStatus::new(TaskState::Submitted));
/// let json = serde_json::to_value(&t).unwrap();
/// assert_eq!(json["status"]["state"], "TASK_STATE_SUBMITTED");
/// assert!(json.get("artifacts").is_none()); // empty lists are omitted
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Task {
    /// The task's id (set by the agent).
    pub id: String,
    /// The conversation it belongs to.
    #[serde(default)]
    pub context_id: String,
    /// Its current status.
    pub status: TaskStatus,
    /// Its outputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// The messages exchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    /// Extra information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Task {
    /// A task with no artifacts or history.
    ///
    /// ```
    /// use soorma_common::a2a::{Task, TaskState, TaskStatus};
    /// assert_eq!(Task::new("t", "c", TaskStatus::new(TaskState::Working)).id, "t");
    /// ```
    pub fn new(id: impl Into<String>, context_id: impl Into<String>, status: TaskStatus) -> Self {
        Self {
            id: id.into(),
            context_id: context_id.into(),
            status,
            artifacts: Vec::new(),
            history: Vec::new(),
            metadata: None,
        }
    }
}

/// Options of a `SendMessage` call.
///
/// ```
/// let c: soorma_common::a2a::SendMessageConfiguration =
///     serde_json::from_value(serde_json::json!({"returnImmediately": true})).unwrap();
/// assert!(c.return_immediately);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SendMessageConfiguration {
    /// Output media types the client accepts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_output_modes: Vec<String>,
    /// How many history messages to return.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    /// Return at once with the task in progress instead of waiting for it to finish.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub return_immediately: bool,
    /// Push notification settings (not supported by the soorma gateway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_push_notification_config: Option<Value>,
}

/// The parameters of `SendMessage` and `SendStreamingMessage`.
///
/// ```
/// let r: soorma_common::a2a::SendMessageRequest = serde_json::from_value(serde_json::json!({
///     "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "2+2"}]}
/// })).unwrap();
/// assert_eq!(r.message.parts[0].as_text(), Some("2+2"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SendMessageRequest {
    /// The tenant, when the interface serves several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The message.
    pub message: Message,
    /// Options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<SendMessageConfiguration>,
    /// Extra information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// The parameters of `GetTask`, `CancelTask` and `SubscribeToTask`.
///
/// ```
/// let r: soorma_common::a2a::TaskIdParams = serde_json::from_value(serde_json::json!({"id": "t-1"})).unwrap();
/// assert_eq!(r.id, "t-1");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TaskIdParams {
    /// The tenant, when the interface serves several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The task id.
    pub id: String,
    /// How many history messages to return (`GetTask`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
}

/// A change of a task's status, in a stream.
///
/// ```
/// use soorma_common::a2a::{TaskState, TaskStatus, TaskStatusUpdateEvent};
/// let e = TaskStatusUpdateEvent::new("t-1", "c-1", TaskStatus::new(TaskState::Working));
/// assert_eq!(serde_json::to_value(&e).unwrap()["taskId"], "t-1");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TaskStatusUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its conversation.
    pub context_id: String,
    /// The new status.
    pub status: TaskStatus,
    /// Extra information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl TaskStatusUpdateEvent {
    /// A status update.
    ///
    /// ```
    /// use soorma_common::a2a::{TaskState, TaskStatus, TaskStatusUpdateEvent};
    /// let e = TaskStatusUpdateEvent::new("t", "c", TaskStatus::new(TaskState::Completed));
    /// assert!(e.status.state.is_terminal());
    /// ```
    pub fn new(
        task_id: impl Into<String>,
        context_id: impl Into<String>,
        status: TaskStatus,
    ) -> Self {
        Self {
            task_id: task_id.into(),
            context_id: context_id.into(),
            status,
            metadata: None,
        }
    }
}

/// A new or extended artifact, in a stream.
///
/// ```
/// use soorma_common::a2a::{Artifact, Part, TaskArtifactUpdateEvent};
/// let e = TaskArtifactUpdateEvent::new("t", "c", Artifact::new("a", vec![Part::text("x")]));
/// assert!(e.last_chunk);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TaskArtifactUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its conversation.
    pub context_id: String,
    /// The artifact (or the chunk of it).
    pub artifact: Artifact,
    /// Whether this chunk extends an artifact sent before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    /// Whether this is the artifact's last chunk.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub last_chunk: bool,
    /// Extra information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl TaskArtifactUpdateEvent {
    /// A complete artifact (`last_chunk`).
    ///
    /// ```
    /// use soorma_common::a2a::{Artifact, TaskArtifactUpdateEvent};
    /// let e = TaskArtifactUpdateEvent::new("t", "c", Artifact::new("a", vec![]));
    /// assert!(!e.append);
    /// ```
    pub fn new(
        task_id: impl Into<String>,
        context_id: impl Into<String>,
        artifact: Artifact,
    ) -> Self {
        Self {
            task_id: task_id.into(),
            context_id: context_id.into(),
            artifact,
            append: false,
            last_chunk: true,
            metadata: None,
        }
    }
}

/// The result of `SendMessage`: a task or a direct message.
///
/// ```
/// use soorma_common::a2a::{SendMessageResponse, Task, TaskState, TaskStatus};
/// let r = SendMessageResponse::Task(Task::new("t", "c", TaskStatus::new(TaskState::Completed)));
/// assert!(serde_json::to_value(&r).unwrap().get("task").is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum SendMessageResponse {
    /// The task the message started or continued.
    Task(Task),
    /// A direct answer.
    Message(Message),
}

/// One item of a `SendStreamingMessage` / `SubscribeToTask` stream.
///
/// ```
/// use soorma_common::a2a::{StreamResponse, TaskState, TaskStatus, TaskStatusUpdateEvent};
/// let r = StreamResponse::StatusUpdate(TaskStatusUpdateEvent::new("t", "c", TaskStatus::new(TaskState::Working)));
/// assert!(serde_json::to_value(&r).unwrap().get("statusUpdate").is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum StreamResponse {
    /// The task, first.
    Task(Task),
    /// A direct message.
    Message(Message),
    /// A status change.
    StatusUpdate(TaskStatusUpdateEvent),
    /// An artifact.
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

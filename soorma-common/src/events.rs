//! The names of the events the SDK itself publishes, shared by every layer that publishes or
//! reads them (one home for each name).

/// A delivery was given up on; published on `system-events` with the event's id, type, topic,
/// the agent and the reason.
///
/// ```
/// assert_eq!(soorma_common::events::DEAD_LETTERED, "event.dead_lettered");
/// ```
pub const DEAD_LETTERED: &str = "event.dead_lettered";

/// A worker's progress report on `system-events` (data: [`TaskProgress`](crate::TaskProgress)).
///
/// ```
/// assert_eq!(soorma_common::events::TASK_PROGRESS, "task.progress");
/// ```
pub const TASK_PROGRESS: &str = "task.progress";

/// The error result a worker gets when a person did not answer its question in time.
///
/// ```
/// assert_eq!(soorma_common::events::TASK_TIMEOUT, "task.timeout");
/// ```
pub const TASK_TIMEOUT: &str = "task.timeout";

/// A question for a person, on `notification-events` (workers' and plans' human input).
///
/// ```
/// assert_eq!(soorma_common::events::HUMAN_INPUT, "notification.human_input");
/// ```
pub const HUMAN_INPUT: &str = "notification.human_input";

/// A worker task's deadline passed ([`TaskRecord::deadline_at`](crate::TaskRecord::deadline_at)):
/// the task fails unless it ended before. Published on `action-results` with the task id as
/// correlation id.
///
/// ```
/// assert_eq!(soorma_common::events::TASK_DEADLINE, "task.deadline");
/// ```
pub const TASK_DEADLINE: &str = "task.deadline";

/// A request to stop the work started by one request event: published on `system-events` by
/// [`Client::cancel`](https://docs.rs/soorma/latest/soorma/struct.Client.html#method.cancel)
/// with the request's event id as correlation id and `{"request_id": ...}` as data, under the
/// request's tenant. Every instance of every agent receives it; the one handling that request
/// (of that tenant) drops its handler, and a worker marks the task canceled.
///
/// ```
/// assert_eq!(soorma_common::events::CANCEL_REQUESTED, "request.cancel_requested");
/// ```
pub const CANCEL_REQUESTED: &str = "request.cancel_requested";

/// A workflow step's request (or question) went out; data:
/// [`WorkflowStepProgress`](crate::WorkflowStepProgress), on `system-events`.
///
/// ```
/// assert_eq!(soorma_common::events::WORKFLOW_STEP_STARTED, "workflow.step.started");
/// ```
pub const WORKFLOW_STEP_STARTED: &str = "workflow.step.started";

/// A workflow step completed (see [`WORKFLOW_STEP_STARTED`]).
///
/// ```
/// assert_eq!(soorma_common::events::WORKFLOW_STEP_COMPLETED, "workflow.step.completed");
/// ```
pub const WORKFLOW_STEP_COMPLETED: &str = "workflow.step.completed";

/// A workflow step's attempt failed and another (a retry or the fallback) went out (see
/// [`WORKFLOW_STEP_STARTED`]).
///
/// ```
/// assert_eq!(soorma_common::events::WORKFLOW_STEP_RETRYING, "workflow.step.retrying");
/// ```
pub const WORKFLOW_STEP_RETRYING: &str = "workflow.step.retrying";

/// A workflow step failed for good (see [`WORKFLOW_STEP_STARTED`]).
///
/// ```
/// assert_eq!(soorma_common::events::WORKFLOW_STEP_FAILED, "workflow.step.failed");
/// ```
pub const WORKFLOW_STEP_FAILED: &str = "workflow.step.failed";

/// A workflow step was skipped (see [`WORKFLOW_STEP_STARTED`]).
///
/// ```
/// assert_eq!(soorma_common::events::WORKFLOW_STEP_SKIPPED, "workflow.step.skipped");
/// ```
pub const WORKFLOW_STEP_SKIPPED: &str = "workflow.step.skipped";

/// The reply event of workflow steps' requests (and the answers to their questions), on
/// `action-results`: the worker running the workflow records it and starts the steps that
/// became ready.
///
/// ```
/// assert_eq!(soorma_common::events::WORKFLOW_STEP_REPLIED, "workflow.step.replied");
/// ```
pub const WORKFLOW_STEP_REPLIED: &str = "workflow.step.replied";

/// The request event of [`WorkflowSpec`](crate::WorkflowSpec)s: run this definition on this
/// input (served by `Handler::run_workflows`; sub-workflow steps use it too).
///
/// ```
/// assert_eq!(soorma_common::events::WORKFLOW_RUN_REQUESTED, "workflow.run.requested");
/// ```
pub const WORKFLOW_RUN_REQUESTED: &str = "workflow.run.requested";

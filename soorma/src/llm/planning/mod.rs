//! LLM planning (feature `llm`): a model writes the plan, or chooses each next action.
//!
//! Two ways to let a [`ChatModel`] plan, both checked against the capabilities the platform's
//! registry knows (see [`GoalContext::capabilities`]):
//!
//! - **A plan up front** — [`create_plan`] asks the model for a [`PlanDefinition`] for the goal
//!   and the capabilities, validates it as [`Plan::new`] does and checks that every action
//!   requests an event a registered agent consumes (with a payload its schema accepts); every
//!   problem goes back to the model, which tries again. The plan then runs as any state
//!   machine: [`GoalContext::start`] and the default `#[on_transition]`.
//! - **One action at a time** — a *reasoning plan* ([`reasoning_plan`]) has no fixed states:
//!   on the goal and on every event for the plan (the replies to its requests), the planner
//!   asks [`reason_next_action`] for a [`NextAction`] — publish a request, delegate the rest
//!   of the goal, complete, fail or wait — and applies it ([`PlanContext::apply`]). A request
//!   no registered agent consumes is sent back to the model; a plan that keeps asking is
//!   stopped after [`PlanningOptions::max_actions`] requests.
//!
//! [`LlmPlanner`] bundles a model and its options and does the bookkeeping of both, so a
//! planner is two short handlers:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
//! use soorma::prelude::*;
//! use soorma::llm::ScriptedLlm;
//! use soorma::planner::llm::{LlmPlanner, NextAction};
//!
//! /// Adds two numbers.
//! async fn add(req: Invocation<(i64, i64)>) -> Result<i64, ToolError> {
//!     Ok(req.data.0 + req.data.1)
//! }
//!
//! async fn goal(goal: GoalContext, llm: State<LlmPlanner>) -> soorma::Result<PlanContext> {
//!     llm.start_reasoning(&goal).await // asks for the first action
//! }
//!
//! async fn next(mut plan: PlanContext, llm: State<LlmPlanner>) -> soorma::Result<Option<NextAction>> {
//!     llm.step(&mut plan).await // records the reply, asks for the next action
//! }
//!
//! // The model: first add, then answer with the sum it got back.
//! let model = ScriptedLlm::new([
//!     r#"{"action": "publish", "event_type": "add.requested", "data": [2, 3], "response_event": "add.completed"}"#,
//!     r#"{"action": "complete", "result": {"sum": 5}}"#,
//! ]);
//! let platform = Platform::embedded();
//! let tool = Tool::new("adder").use_registered_handlers(false)
//!     .handler(Handler::on_invoke("add.requested", add)).start(&platform).await?;
//! let planner = Planner::new("assistant").use_registered_handlers(false)
//!     .with_state(LlmPlanner::new(model.clone()))
//!     .handler(Handler::on_goal("assist.goal", goal))
//!     .handler(Handler::on_transition(next))
//!     .start(&platform).await?;
//! let out: serde_json::Value = platform.client("docs")
//!     .invoke("assist.goal", serde_json::json!({"task": "add 2 and 3"}), "assist.done").await?;
//! assert_eq!(out["sum"], 5);
//! // The second prompt showed the model the first request and its result.
//! let second = &model.requests()[1];
//! assert!(second[1].content.contains("published `add.requested` [2,3] -> result: 5"));
//! # planner.shutdown().await?; tool.shutdown().await
//! # }
//! ```

mod check;
mod prompt;
mod steps;
mod workflow;

pub use workflow::create_workflow;

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use soorma_common::{
    AgentCapability, EventEnvelope, PlanDefinition, PlanRecord, StateConfig, StateTransition,
};

use crate::error::{Error, Result, SchemaViolation};
use crate::layers::planner::context::{GoalContext, PlanContext};
use crate::layers::planner::definition::Plan;
use crate::layers::planner::machine::Effects;
use crate::llm::{ChatMessage, ChatModel, ChatModelExt, LlmError};

/// The state a reasoning plan stays in while the model chooses its actions.
///
/// ```
/// let plan = soorma::planner::llm::reasoning_plan("assist");
/// assert_eq!(plan.definition().initial_state, soorma::planner::llm::REASONING_STATE);
/// ```
pub const REASONING_STATE: &str = "reasoning";

/// The event that would move a reasoning plan to its terminal state `done`; it exists to make
/// the definition a valid state machine (reasoning plans end by [`NextAction::Complete`] or
/// [`NextAction::Fail`]).
const REASONING_FINISHED: &str = "plan.reasoning.finished";

/// The plan of a planner whose model chooses each next action: one state,
/// [`REASONING_STATE`], that it stays in while the planner applies the model's actions
/// ([`LlmPlanner::step`], or [`reason_next_action`] and [`PlanContext::apply`]).
///
/// ```
/// let plan = soorma::planner::llm::reasoning_plan("assist");
/// assert_eq!(plan.definition().plan_type, "assist");
/// assert!(plan.definition().states["reasoning"].action.is_none());
/// ```
pub fn reasoning_plan(plan_type: impl Into<String>) -> Plan {
    let def = PlanDefinition::new(plan_type, "a model chooses each next action")
        .with_initial_state(REASONING_STATE)
        .with_state(
            StateConfig::new(
                REASONING_STATE,
                "on the goal and on every event for the plan, a model chooses the next action",
            )
            .with_transition(StateTransition::new(REASONING_FINISHED, "done")),
        )
        .with_state(StateConfig::new("done", "finished").terminal());
    Plan::new(def).expect("the reasoning plan is valid")
}

/// Whether `plan` is a reasoning plan in its reasoning state.
fn is_reasoning(plan: &PlanContext) -> bool {
    plan.current_state() == REASONING_STATE
        && plan
            .plan()
            .definition()
            .states
            .get(REASONING_STATE)
            .is_some_and(|s| s.action.is_none())
}

/// How LLM planning asks and what it allows.
///
/// ```
/// use soorma::planner::llm::PlanningOptions;
///
/// let options = PlanningOptions::new()
///     .with_max_attempts(2)
///     .with_max_actions(10)
///     .with_instructions("Prefer the cheapest tool.");
/// assert_eq!(options.max_actions, 10);
/// assert_eq!(PlanningOptions::default().max_attempts, 3);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlanningOptions {
    /// How many proposals (plans or actions) the model may make before planning gives up with
    /// [`PlanningError::GaveUp`]; each rejected one is sent back with its problems. Default 3.
    /// (Replies that are not even JSON of the right shape are retried inside one attempt, by
    /// [`ChatModelExt::structured`], up to the model's own `max_attempts`.)
    pub max_attempts: usize,
    /// How many requests (publish and delegate) a reasoning plan may make; the next one fails
    /// the plan. Default 25; never more than [`MAX_ACTIONS`](crate::layers::planner::MAX_ACTIONS).
    pub max_actions: u32,
    /// Extra instructions appended to the system prompt (domain rules, tone, preferences).
    pub instructions: Option<String>,
}

impl Default for PlanningOptions {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            max_actions: 25,
            instructions: None,
        }
    }
}

impl PlanningOptions {
    /// The defaults: 3 attempts, 25 actions, no extra instructions.
    ///
    /// ```
    /// assert_eq!(soorma::planner::llm::PlanningOptions::new().max_actions, 25);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets how many proposals the model may make (at least 1).
    ///
    /// ```
    /// let o = soorma::planner::llm::PlanningOptions::new().with_max_attempts(0);
    /// assert_eq!(o.max_attempts, 1);
    /// ```
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: usize) -> Self {
        self.max_attempts = max_attempts.max(1);
        self
    }

    /// Sets how many requests a reasoning plan may make.
    ///
    /// ```
    /// let o = soorma::planner::llm::PlanningOptions::new().with_max_actions(5);
    /// assert_eq!(o.max_actions, 5);
    /// ```
    #[must_use]
    pub fn with_max_actions(mut self, max_actions: u32) -> Self {
        self.max_actions = max_actions;
        self
    }

    /// Sets extra instructions for the system prompt.
    ///
    /// ```
    /// let o = soorma::planner::llm::PlanningOptions::new().with_instructions("Answer in French.");
    /// assert_eq!(o.instructions.as_deref(), Some("Answer in French."));
    /// ```
    #[must_use]
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }
}

/// What a reasoning plan does next, as the model chooses it (JSON with an `action` tag:
/// `{"action": "publish", "event_type": .., "data": .., "response_event": ..}`).
///
/// ```
/// use soorma::planner::llm::NextAction;
///
/// let action: NextAction = serde_json::from_str(
///     r#"{"action": "publish", "event_type": "search.requested", "data": {"q": "rust"}, "response_event": "search.completed"}"#,
/// ).unwrap();
/// assert_eq!(action, NextAction::publish("search.requested", serde_json::json!({"q": "rust"}), "search.completed"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "snake_case")]
#[non_exhaustive]
pub enum NextAction {
    /// Publish a request to the capability that consumes `event_type`; its reply comes back to
    /// the plan as `response_event`, and the model chooses again.
    Publish {
        /// The request event: the request event of one of the capabilities.
        event_type: String,
        /// The request's payload, matching the capability's payload schema.
        #[serde(default)]
        data: Value,
        /// The event the reply comes back as (the capability's reply event).
        response_event: String,
    },
    /// Hand the rest of the goal to another agent, typically another planner's goal event (a
    /// sub-goal whose plan records this plan as its parent): its reply ends this plan with its
    /// result, or its error.
    Delegate {
        /// The request event: the request event of one of the capabilities.
        event_type: String,
        /// The request's payload, matching the capability's payload schema.
        #[serde(default)]
        data: Value,
        /// The event the reply comes back as.
        response_event: String,
    },
    /// The goal is achieved: complete the plan with `result` (the answer to the goal).
    Complete {
        /// The answer to the goal.
        #[serde(default)]
        result: Value,
    },
    /// The goal cannot be achieved: fail the plan with `error`.
    Fail {
        /// Why the goal cannot be achieved.
        error: String,
    },
    /// Nothing to do until another event arrives for the plan: pause it (the next event for
    /// the plan resumes it).
    Wait {
        /// What the plan waits for.
        #[serde(default)]
        reason: String,
    },
}

impl NextAction {
    /// A request to the capability consuming `event_type`.
    ///
    /// ```
    /// let a = soorma::planner::llm::NextAction::publish("add.requested", serde_json::json!([1, 2]), "add.completed");
    /// assert!(a.is_request());
    /// ```
    pub fn publish(
        event_type: impl Into<String>,
        data: impl Into<Value>,
        response_event: impl Into<String>,
    ) -> Self {
        Self::Publish {
            event_type: event_type.into(),
            data: data.into(),
            response_event: response_event.into(),
        }
    }

    /// Hands the rest of the goal to the agent consuming `event_type`.
    ///
    /// ```
    /// let a = soorma::planner::llm::NextAction::delegate("research.goal", serde_json::json!({"topic": "tea"}), "research.done");
    /// assert!(a.is_request());
    /// ```
    pub fn delegate(
        event_type: impl Into<String>,
        data: impl Into<Value>,
        response_event: impl Into<String>,
    ) -> Self {
        Self::Delegate {
            event_type: event_type.into(),
            data: data.into(),
            response_event: response_event.into(),
        }
    }

    /// Completes the plan with `result`.
    ///
    /// ```
    /// let a = soorma::planner::llm::NextAction::complete(serde_json::json!({"answer": 42}));
    /// assert!(!a.is_request());
    /// ```
    pub fn complete(result: impl Into<Value>) -> Self {
        Self::Complete {
            result: result.into(),
        }
    }

    /// Fails the plan with `error`.
    ///
    /// ```
    /// let a = soorma::planner::llm::NextAction::fail("no tool can do that");
    /// assert!(matches!(a, soorma::planner::llm::NextAction::Fail { .. }));
    /// ```
    pub fn fail(error: impl Into<String>) -> Self {
        Self::Fail {
            error: error.into(),
        }
    }

    /// Pauses the plan until its next event.
    ///
    /// ```
    /// let a = soorma::planner::llm::NextAction::wait("for the approval");
    /// assert!(matches!(a, soorma::planner::llm::NextAction::Wait { .. }));
    /// ```
    pub fn wait(reason: impl Into<String>) -> Self {
        Self::Wait {
            reason: reason.into(),
        }
    }

    /// Whether the action publishes a request ([`Publish`](Self::Publish) or
    /// [`Delegate`](Self::Delegate)); requests count against
    /// [`PlanningOptions::max_actions`].
    ///
    /// ```
    /// assert!(!soorma::planner::llm::NextAction::wait("").is_request());
    /// ```
    pub fn is_request(&self) -> bool {
        matches!(self, Self::Publish { .. } | Self::Delegate { .. })
    }

    /// Every reason the agents offering `capabilities` cannot carry out this action: a request
    /// event none of them consumes, a payload their schema rejects, a missing or circular
    /// response event, a failure without an error. Empty: it can be applied.
    ///
    /// ```
    /// use soorma::planner::llm::{NextAction, PlanningError};
    /// use soorma::{AgentCapability, EventDefinition, Topic};
    ///
    /// let add = AgentCapability::new("add", EventDefinition::new("add.requested", Topic::ActionRequests)
    ///     .with_payload_schema(serde_json::json!({"type": "array", "items": {"type": "integer"}})));
    /// let caps = [add];
    /// assert!(NextAction::publish("add.requested", serde_json::json!([1, 2]), "add.completed").problems(&caps).is_empty());
    /// let ghost = NextAction::publish("ghost.requested", serde_json::json!({}), "ghost.done").problems(&caps);
    /// assert!(matches!(&ghost[0], PlanningError::UnknownEvent { event, .. } if event == "ghost.requested"));
    /// let bad = NextAction::publish("add.requested", serde_json::json!(["x"]), "add.completed").problems(&caps);
    /// assert!(matches!(&bad[0], PlanningError::InvalidData { .. }));
    /// ```
    pub fn problems(&self, capabilities: &[AgentCapability]) -> Vec<PlanningError> {
        check::action_problems(self, capabilities)
    }
}

/// One rejected proposal: the model's reply (the proposal as JSON, or its last unusable reply)
/// and every problem found in it.
///
/// ```
/// use soorma::planner::llm::PlanningAttempt;
/// let a = PlanningAttempt::new("{}", vec!["the plan has no states".into()]);
/// assert_eq!(a.problems.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlanningAttempt {
    /// The proposal (as JSON), or the model's last reply when it was not usable at all.
    pub reply: String,
    /// Why it was rejected (also what the model was told).
    pub problems: Vec<String>,
}

impl PlanningAttempt {
    /// An attempt with its problems.
    ///
    /// ```
    /// let a = soorma::planner::llm::PlanningAttempt::new("x", vec![]);
    /// assert_eq!(a.reply, "x");
    /// ```
    pub fn new(reply: impl Into<String>, problems: Vec<String>) -> Self {
        Self {
            reply: reply.into(),
            problems,
        }
    }
}

/// Why a model's plan or action was rejected; as a [`soorma::Error`](crate::Error) it is
/// boxed in [`Error::Other`] (get it back with [`Error::downcast_ref`]).
///
/// ```
/// use soorma::planner::llm::PlanningError;
/// let e = PlanningError::UnknownEvent { event: "ghost.requested".into(), known: vec!["add.requested".into()] };
/// assert_eq!(e.to_string(), "no registered agent consumes `ghost.requested`; the request events are: `add.requested`");
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanningError {
    /// A request event no registered agent consumes.
    #[error("no registered agent consumes `{event}`; {}", known_list(known))]
    UnknownEvent {
        /// The requested event.
        event: String,
        /// The request events the registered agents consume.
        known: Vec<String>,
    },
    /// A request payload that the consumer's payload schema rejects.
    #[error(
        "the data of `{event}` does not match its payload schema: {}",
        violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    InvalidData {
        /// The requested event.
        event: String,
        /// Every violation found (at most 5).
        violations: Vec<SchemaViolation>,
    },
    /// An action that cannot be applied as it is (no response event, a failure without an
    /// error, ...).
    #[error("{0}")]
    InvalidAction(String),
    /// Every proposal was rejected; each attempt keeps its problems.
    #[error(
        "no acceptable {what} from the model after {} attempt(s):{}",
        attempts.len(),
        describe_attempts(attempts)
    )]
    GaveUp {
        /// What was asked for: `plan` or `next action`.
        what: &'static str,
        /// Every attempt, in order.
        attempts: Vec<PlanningAttempt>,
    },
}

impl From<PlanningError> for Error {
    /// ```
    /// use soorma::planner::llm::PlanningError;
    /// let err = soorma::Error::from(PlanningError::InvalidAction("`fail` needs an `error`".into()));
    /// assert!(err.downcast_ref::<PlanningError>().is_some());
    /// ```
    fn from(error: PlanningError) -> Self {
        Error::other_with_retry(error, false)
    }
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        "no registered agent takes requests".into()
    } else {
        format!(
            "the request events are: {}",
            known
                .iter()
                .map(|e| format!("`{e}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

fn describe_attempts(attempts: &[PlanningAttempt]) -> String {
    let mut out = String::new();
    for (i, a) in attempts.iter().enumerate() {
        out.push_str(&format!("\n  attempt {}:", i + 1));
        for p in &a.problems {
            out.push_str("\n    - ");
            out.push_str(p);
        }
    }
    out
}

/// One proposal from the model: `Ok(value)`, or `Err(attempt)` when even structured output
/// failed (its problems are those of every reply).
async fn propose<T>(
    model: &dyn ChatModel,
    conversation: &[ChatMessage],
) -> Result<std::result::Result<T, PlanningAttempt>>
where
    T: serde::de::DeserializeOwned + JsonSchema,
{
    match model.structured::<T>(conversation).await {
        Ok(value) => Ok(Ok(value)),
        Err(e) => match e.downcast_ref::<LlmError>() {
            Some(LlmError::StructuredOutput { attempts, .. }) => {
                let reply = attempts.last().map(|a| a.reply.clone()).unwrap_or_default();
                Ok(Err(PlanningAttempt::new(
                    reply,
                    attempts.iter().map(|a| a.error.clone()).collect(),
                )))
            }
            _ => Err(e),
        },
    }
}

/// Asks `model` for a plan for `goal` using `capabilities`, and returns it validated.
///
/// The prompt has the goal, each capability (task name, description, request event, payload
/// and reply schemas, the reply event to use), how plans run, and the rules of conditions and
/// templates; structured output adds the [`PlanDefinition`] JSON Schema. The proposal must pass
/// [`Plan::new`] and request only events a capability consumes, with payloads its schema
/// accepts (literal payloads fully, templates for their required fields), and every action's
/// reply must move the plan. Otherwise all its problems go back to the model, up to
/// [`PlanningOptions::max_attempts`] proposals; then [`PlanningError::GaveUp`] keeps every
/// attempt's problems. Errors of the model itself (HTTP, timeouts) are returned as they are.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::llm::ScriptedLlm;
/// use soorma::planner::llm::{create_plan, PlanningOptions};
/// use soorma::{AgentCapability, EventDefinition, Topic};
///
/// let search = AgentCapability::new("search", EventDefinition::new("search.requested", Topic::ActionRequests))
///     .with_description("Searches the web.");
/// let model = ScriptedLlm::new([r#"{
///   "plan_type": "research",
///   "states": {
///     "start": {"state_name": "start",
///               "action": {"event_type": "search.requested", "response_event": "search.completed",
///                          "data": {"q": "{{goal.topic}}"}},
///               "transitions": [{"on_event": "search.completed", "to_state": "done"}]},
///     "done": {"state_name": "done", "is_terminal": true, "result": "{{results.start}}"}
///   }
/// }"#]);
/// let goal = serde_json::json!({"topic": "rust"});
/// let plan = create_plan(&model, &goal, &[search], &PlanningOptions::default()).await?;
/// assert_eq!(plan.definition().states.len(), 2);
/// assert!(model.requests()[0][1].content.contains("request event: `search.requested`"));
/// # Ok(()) }
/// ```
pub async fn create_plan(
    model: &dyn ChatModel,
    goal: &Value,
    capabilities: &[AgentCapability],
    options: &PlanningOptions,
) -> Result<Plan> {
    let (system, user) = prompt::plan_request(goal, capabilities, options.instructions.as_deref());
    let mut conversation = vec![ChatMessage::system(system), ChatMessage::user(user)];
    let mut attempts = Vec::new();
    for attempt in 1..=options.max_attempts.max(1) {
        let def: PlanDefinition = match propose(model, &conversation).await? {
            Ok(def) => def,
            Err(failed) => {
                tracing::warn!(attempt, problems = ?failed.problems, "the model's plan was not a plan definition");
                attempts.push(failed);
                continue;
            }
        };
        let mut problems = match Plan::new(def.clone()) {
            Ok(_) => Vec::new(),
            Err(Error::InvalidPlan { problems, .. }) => problems,
            Err(e) => return Err(e),
        };
        problems.extend(check::plan_problems(&def, capabilities));
        if problems.is_empty() {
            tracing::debug!(attempt, plan_type = %def.plan_type, "the model's plan was accepted");
            return Plan::new(def);
        }
        tracing::warn!(attempt, ?problems, "the model's plan was rejected");
        let reply = serde_json::to_string(&def).unwrap_or_default();
        conversation.push(ChatMessage::assistant(reply.clone()));
        conversation.push(ChatMessage::user(prompt::plan_rejected(&problems)));
        attempts.push(PlanningAttempt::new(reply, problems));
    }
    Err(PlanningError::GaveUp {
        what: "plan",
        attempts,
    }
    .into())
}

/// Asks `model` what a reasoning plan does next, given its record (the goal and the steps so
/// far: the requests it published and their replies) and the event being handled (`trigger`;
/// `None` for the first action).
///
/// The prompt has the goal, the capabilities, the steps, the event and how many of
/// [`PlanningOptions::max_actions`] requests were used. A request for an event no capability
/// consumes ([`PlanningError::UnknownEvent`]), or with a payload the consumer's schema rejects
/// ([`PlanningError::InvalidData`]), goes back to the model with the reason, up to
/// [`PlanningOptions::max_attempts`] proposals; then [`PlanningError::GaveUp`]. Nothing is
/// changed or published: apply the action with [`PlanContext::apply`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::llm::ScriptedLlm;
/// use soorma::planner::llm::{reason_next_action, NextAction, PlanningOptions};
/// use soorma::common::PlanRecord;
/// use soorma::{AgentCapability, EventDefinition, Topic};
///
/// let add = AgentCapability::new("add", EventDefinition::new("add.requested", Topic::ActionRequests));
/// let model = ScriptedLlm::new([
///     r#"{"action": "publish", "event_type": "sum.requested", "data": [1, 2], "response_event": "sum.completed"}"#,
///     r#"{"action": "publish", "event_type": "add.requested", "data": [1, 2], "response_event": "add.completed"}"#,
/// ]);
/// let mut record = PlanRecord::new("plan-1", "assist", "reasoning");
/// record.goal_data = serde_json::json!({"task": "1 + 2"});
/// let next = reason_next_action(&model, &record, None, &[add], &PlanningOptions::default()).await?;
/// assert_eq!(next, NextAction::publish("add.requested", serde_json::json!([1, 2]), "add.completed"));
/// // The first proposal went back to the model with the reason.
/// assert!(model.requests()[1].last().unwrap().content.contains("no registered agent consumes `sum.requested`"));
/// # Ok(()) }
/// ```
pub async fn reason_next_action(
    model: &dyn ChatModel,
    record: &PlanRecord,
    trigger: Option<&EventEnvelope>,
    capabilities: &[AgentCapability],
    options: &PlanningOptions,
) -> Result<NextAction> {
    let max_actions = options.max_actions.min(crate::layers::planner::MAX_ACTIONS);
    // The model sees the steps with the event already recorded (a reply on its request).
    let (steps, answered) = match trigger {
        Some(t) => steps::observed(record, t),
        None => (steps::steps(record), None),
    };
    let (system, user) = prompt::action_request(
        &record.goal_data,
        &steps,
        trigger.map(|t| (t, answered)),
        (record.actions, max_actions),
        capabilities,
        options.instructions.as_deref(),
    );
    let mut conversation = vec![ChatMessage::system(system), ChatMessage::user(user)];
    let mut attempts = Vec::new();
    for attempt in 1..=options.max_attempts.max(1) {
        let action: NextAction = match propose(model, &conversation).await? {
            Ok(action) => action,
            Err(failed) => {
                tracing::warn!(attempt, problems = ?failed.problems, "the model's reply was not an action");
                attempts.push(failed);
                continue;
            }
        };
        let problems: Vec<String> = check::action_problems(&action, capabilities)
            .iter()
            .map(ToString::to_string)
            .collect();
        if problems.is_empty() {
            tracing::debug!(attempt, plan_id = %record.plan_id, ?action, "next action");
            return Ok(action);
        }
        tracing::warn!(attempt, ?problems, "the model's action was rejected");
        let reply = serde_json::to_string(&action).unwrap_or_default();
        conversation.push(ChatMessage::assistant(reply.clone()));
        conversation.push(ChatMessage::user(prompt::action_rejected(&problems)));
        attempts.push(PlanningAttempt::new(reply, problems));
    }
    Err(PlanningError::GaveUp {
        what: "next action",
        attempts,
    }
    .into())
}

impl PlanContext {
    /// Applies a [`NextAction`] to this (reasoning) plan, saved before anything is published:
    /// the event being handled is recorded first (a reply as the result of the request it
    /// answers), then
    /// - `Publish` / `Delegate` publish the request on `action-requests` with the plan id as
    ///   correlation id (its reply comes back through `#[on_transition]`) and a
    ///   deterministic id (`<plan id>-a<n>`); beyond [`PlanningOptions::max_actions`] requests
    ///   the plan fails instead, with a message saying so;
    /// - `Complete` completes the plan (as [`finalize`](Self::finalize)), `Fail` fails it;
    /// - `Wait` pauses it (the next event for the plan resumes it, in [`LlmPlanner::step`]).
    ///
    /// A paused plan is resumed first. A redelivered event republishes what it caused instead
    /// of applying a second action. A request that no registered agent consumes is refused with
    /// [`PlanningError::UnknownEvent`] (and a payload its schema rejects with
    /// [`PlanningError::InvalidData`]); nothing is changed then.
    ///
    /// ```
    /// use soorma::planner::PlanContext;
    /// use soorma::planner::llm::{NextAction, PlanningOptions};
    ///
    /// async fn search(mut plan: PlanContext) -> soorma::Result<()> {
    ///     let next = NextAction::publish("search.requested", serde_json::json!({"q": "tea"}), "search.completed");
    ///     plan.apply(next, &PlanningOptions::default()).await
    /// }
    /// ```
    pub async fn apply(&mut self, action: NextAction, options: &PlanningOptions) -> Result<()> {
        let capabilities = if action.is_request() {
            self.capabilities().await?
        } else {
            Vec::new()
        };
        apply_checked(self, action, &capabilities, options.max_actions).await
    }
}

async fn apply_checked(
    plan: &mut PlanContext,
    action: NextAction,
    capabilities: &[AgentCapability],
    max_actions: u32,
) -> Result<()> {
    if let Some(problem) = check::action_problems(&action, capabilities)
        .into_iter()
        .next()
    {
        return Err(problem.into());
    }
    let trigger = plan.trigger().cloned();
    let trigger_id = plan.handled_event_id().to_owned();
    plan.transact(move |_, record| {
        steps::apply(record, trigger.as_ref(), &trigger_id, &action, max_actions)
    })
    .await
}

/// A model and its [`PlanningOptions`], with the bookkeeping of LLM planning: discovering the
/// capabilities (the planner's own left out), continuing the plan of a redelivered goal,
/// recording replies, handing delegated replies back to the goal and not asking the model
/// twice for one event. Cheap to clone; register it as the planner's state.
///
/// ```
/// use soorma::prelude::*;
/// use soorma::llm::ScriptedLlm;
/// use soorma::planner::llm::{LlmPlanner, PlanningOptions};
///
/// /// A planner whose model writes a plan for each goal, run as a state machine.
/// async fn goal(goal: GoalContext, llm: State<LlmPlanner>) -> soorma::Result<PlanContext> {
///     llm.start_plan(&goal).await
/// }
///
/// let llm = LlmPlanner::new(ScriptedLlm::new(Vec::<String>::new()))
///     .with_options(PlanningOptions::new().with_max_actions(10));
/// let planner = Planner::new("assistant").with_state(llm).handler(Handler::on_goal("assist.goal", goal));
/// # let _ = planner;
/// ```
#[derive(Clone)]
pub struct LlmPlanner {
    model: Arc<dyn ChatModel>,
    options: PlanningOptions,
}

impl std::fmt::Debug for LlmPlanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmPlanner")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl LlmPlanner {
    /// Plans with `model` (an [`LlmClient`](crate::llm::LlmClient), a
    /// [`ScriptedLlm`](crate::llm::ScriptedLlm), an `Arc<dyn ChatModel>`, ...) and the default
    /// options.
    ///
    /// ```
    /// let llm = soorma::planner::llm::LlmPlanner::new(soorma::llm::ScriptedLlm::new(["{}"]));
    /// assert_eq!(llm.options().max_attempts, 3);
    /// ```
    pub fn new(model: impl ChatModel + 'static) -> Self {
        Self {
            model: Arc::new(model),
            options: PlanningOptions::default(),
        }
    }

    /// Sets the options.
    ///
    /// ```
    /// use soorma::planner::llm::{LlmPlanner, PlanningOptions};
    /// let llm = LlmPlanner::new(soorma::llm::ScriptedLlm::new(["{}"]))
    ///     .with_options(PlanningOptions::new().with_max_actions(3));
    /// assert_eq!(llm.options().max_actions, 3);
    /// ```
    #[must_use]
    pub fn with_options(mut self, options: PlanningOptions) -> Self {
        self.options = options;
        self
    }

    /// The options.
    ///
    /// ```
    /// let llm = soorma::planner::llm::LlmPlanner::new(soorma::llm::ScriptedLlm::new(["{}"]));
    /// assert_eq!(llm.options().max_actions, 25);
    /// ```
    pub fn options(&self) -> &PlanningOptions {
        &self.options
    }

    /// The model.
    ///
    /// ```
    /// let llm = soorma::planner::llm::LlmPlanner::new(soorma::llm::ScriptedLlm::new(["{}"]));
    /// assert_eq!(llm.model().max_attempts(), 3);
    /// ```
    pub fn model(&self) -> &dyn ChatModel {
        &*self.model
    }

    /// [`create_plan`] for `goal`, with the capabilities of the other agents on the platform
    /// ([`GoalContext::capabilities`]).
    ///
    /// ```
    /// # use soorma::planner::{GoalContext, Plan};
    /// # use soorma::planner::llm::LlmPlanner;
    /// async fn plan_for(goal: &GoalContext, llm: &LlmPlanner) -> soorma::Result<Plan> {
    ///     llm.create_plan(goal).await
    /// }
    /// ```
    pub async fn create_plan<T>(&self, goal: &GoalContext<T>) -> Result<Plan> {
        let capabilities = goal.capabilities().await?;
        create_plan(
            &*self.model,
            &goal.envelope().data,
            &capabilities,
            &self.options,
        )
        .await
    }

    /// Asks the model for a plan for `goal` ([`create_plan`](Self::create_plan)) and starts it
    /// ([`GoalContext::start`]); the planner's transitions then run it as any state machine.
    /// A redelivered goal continues the plan it started without asking the model again.
    ///
    /// ```
    /// # use soorma::planner::GoalContext;
    /// # use soorma::planner::llm::LlmPlanner;
    /// async fn on_goal(goal: GoalContext, llm: LlmPlanner) -> soorma::Result<()> {
    ///     let plan = llm.start_plan(&goal).await?;
    ///     println!("{}", serde_json::to_string(plan.plan().definition()).unwrap());
    ///     Ok(())
    /// }
    /// ```
    pub async fn start_plan<T>(&self, goal: &GoalContext<T>) -> Result<PlanContext> {
        let plan = match goal.stored_definition().await? {
            Some(def) => Plan::new(def)?,
            None => self.create_plan(goal).await?,
        };
        goal.start(&plan).await
    }

    /// Starts a [`reasoning_plan`] for `goal` (its plan type is the goal's event type) and
    /// applies the model's first action ([`step`](Self::step)).
    ///
    /// ```
    /// # use soorma::planner::{GoalContext, PlanContext};
    /// # use soorma::planner::llm::LlmPlanner;
    /// async fn on_goal(goal: GoalContext, llm: LlmPlanner) -> soorma::Result<PlanContext> {
    ///     llm.start_reasoning(&goal).await
    /// }
    /// ```
    pub async fn start_reasoning<T>(&self, goal: &GoalContext<T>) -> Result<PlanContext> {
        let mut plan = goal
            .start(&reasoning_plan(goal.envelope().event_type.clone()))
            .await?;
        self.step(&mut plan).await?;
        Ok(plan)
    }

    /// Moves a reasoning plan on by the event being handled, for `#[on_transition]` handlers:
    /// asks [`reason_next_action`] (with the capabilities of the other agents on the platform)
    /// and [applies](PlanContext::apply) the action, which it returns. Without asking the model:
    /// the reply to a [`Delegate`](NextAction::Delegate) request completes (or fails) the
    /// plan with its result (or error); a redelivered event republishes what it caused
    /// (`None`); a finished plan re-sends its reply if it was not sent (`None`). A plan that
    /// is not a reasoning plan runs its state machine ([`PlanContext::execute_next`]; `None`).
    ///
    /// ```
    /// use soorma::prelude::*;
    /// use soorma::planner::llm::LlmPlanner;
    ///
    /// #[on_transition(agent = "assistant")]
    /// async fn next(mut plan: PlanContext, llm: State<LlmPlanner>) -> soorma::Result<()> {
    ///     if let Some(action) = llm.step(&mut plan).await? {
    ///         tracing::info!(plan_id = plan.plan_id(), ?action, "applied");
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub async fn step(&self, plan: &mut PlanContext) -> Result<Option<NextAction>> {
        if plan.is_complete() || !is_reasoning(plan) {
            plan.execute_next().await?;
            return Ok(None);
        }
        let trigger_id = plan.handled_event_id().to_owned();
        if plan.record().last_trigger.as_deref() == Some(trigger_id.as_str()) {
            plan.transact(|_, record| {
                let mut fx = Effects::default();
                steps::resend(record, &mut fx);
                Ok(fx)
            })
            .await?;
            return Ok(None);
        }
        let trigger = plan.trigger().cloned();
        let delegated = trigger.as_ref().and_then(|t| {
            steps::answered_step(plan.record(), t)
                .filter(|s| s.kind == steps::StepKind::Delegate)
                .map(|_| soorma_common::ActionReply::outcome_of(&t.data))
        });
        let capabilities;
        let action = match delegated {
            Some(Ok(result)) => {
                capabilities = Vec::new();
                NextAction::complete(result)
            }
            Some(Err(error)) => {
                capabilities = Vec::new();
                NextAction::fail(error)
            }
            None => {
                capabilities = plan.capabilities().await?;
                reason_next_action(
                    &*self.model,
                    plan.record(),
                    trigger.as_ref(),
                    &capabilities,
                    &self.options,
                )
                .await?
            }
        };
        apply_checked(
            plan,
            action.clone(),
            &capabilities,
            self.options.max_actions,
        )
        .await?;
        Ok(Some(action))
    }
}

#[cfg(test)]
mod tests;

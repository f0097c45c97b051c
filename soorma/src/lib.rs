//! # soorma — an agent SDK for Rust
//!
//! Write event-driven agents as typed async fns; soorma moves their events, persists their
//! state and lets them find each other.
//!
//! Four layers, each an attribute on an `async fn`:
//! - **Agent** — [`#[on_event(topic = .., event = ..)]`](on_event): raw events on a topic.
//! - **Tool** — [`#[on_invoke(event)]`](on_invoke): request → return value; the SDK replies on the
//!   caller's `response_event`.
//! - **Worker** — [`#[on_task(event)]`](on_task) and [`#[on_result(event)]`](on_result):
//!   asynchronous tasks with [`TaskContext`] (save, delegate, fan-out, fan-in, complete).
//! - **Planner** — [`#[on_goal(event)]`](on_goal) and [`#[on_transition]`](on_transition):
//!   goal-driven, event-driven state machines with [`planner::PlanContext`].
//!
//! ```
//! use soorma::prelude::*;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Calculate { a: f64, b: f64 }
//!
//! #[derive(serde::Serialize, schemars::JsonSchema)]
//! struct Calculated { result: f64 }
//!
//! /// Adds two numbers.
//! #[on_invoke("add.requested", agent = "adder")]
//! async fn add(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
//!     Ok(Calculated { result: req.data.a + req.data.b })
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> soorma::Result<()> {
//! let platform = Platform::embedded();
//! let tool = Tool::new("adder").start(&platform).await?;
//! let sum: serde_json::Value = platform
//!     .client("docs")
//!     .invoke("add.requested", serde_json::json!({"a": 1, "b": 2}), "add.completed")
//!     .await?;
//! assert_eq!(sum["result"], 3.0);
//! tool.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! Platforms: [`Platform::embedded`] runs everything in process;
//! [`Platform::from_env`] picks NATS when `SOORMA_NATS_URL` is set.
//!
//! [`expr`] is the expression language of plan-transition conditions and action data templates
//! (`data.count > 0 && data.status == "ok"`, `{"query": "{{goal.topic}}"}`).
//!
//! With the `llm` feature, `soorma::llm` is an OpenAI-compatible LLM client (completions,
//! streaming, validated structured output) and a scripted model for tests, and
//! `soorma::planner::llm` lets a model write plans or choose a plan's next actions.
#![warn(missing_docs)]

// The layered core; each folder imports only from its own layer or lower ones (checked by
// `tests/layering.rs`):
// L0 error, util → L1 spi → L2 engine → L3 platform, protocol → L4 runtime → L5 layers
// (event, tool, worker, planner; no layer imports another) → L6 client, testing → L7 gateway,
// mcp, llm (features). This file is the public API: it re-exports from the layers.
mod client;
mod engine;
pub mod error;
#[cfg(feature = "gateway")]
pub mod gateway;
#[cfg(any(feature = "gateway", feature = "mcp"))]
pub mod http;
mod layers;
#[cfg(feature = "llm")]
pub mod llm;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "memory")]
pub mod memory;
mod platform;
mod protocol;
mod runtime;
mod spi;
pub mod testing;
#[cfg(any(feature = "llm", feature = "mcp"))]
mod tls;
mod util;

pub use client::{Call, Client, Reply, TypedCall};
pub use engine::{EngineParts, NATS_URL_ENV};
pub use error::{Error, Result, SchemaViolation, ToolError};
pub use layers::event::{Agent, Event};
pub use layers::tool::{Invocation, Tool, ToolOutput, ToolReply};
pub use layers::worker::{
    Delegated, Delegation, FanInHandler, FanInOutput, FromReplies, FromReply, ResultContext,
    SUBTASKS_BUCKET, StateMap, SubTaskFailed, TASK_TIMEOUT_EVENT, TASKS_BUCKET, TaskContext,
    TaskState, Worker,
};
pub use platform::Platform;
pub use protocol::publish::{BusClient, Publish};
pub use protocol::request::{OutgoingRequest, Request, RequestSet, reply_event_for};
pub use runtime::agent::{AgentBuilder, AgentHandle};
pub use runtime::extract::State;
pub use runtime::group::{Agents, AgentsHandle};
pub use runtime::handler::{
    Handler, HandlerFn, HandlerFnWith, HandlerKind, HandlerOutput, HandlerPayload,
};
pub use spi::envelope::{MAX_ID_LEN, check_envelope};
pub use spi::tenant::{MAX_TENANT_LEN, validate_tenant};
pub use util::BoxFuture;

/// The expression language of plan-transition conditions and action data templates
/// (the `soorma-expr` crate).
pub use soorma_expr as expr;

/// The event bus: the [`EventBus`](bus::EventBus) trait engines implement, subscriptions and
/// deliveries, and the [`BusClient`] agents publish with.
pub mod bus {
    pub use crate::protocol::publish::{BusClient, Publish};
    pub use crate::spi::bus::*;
}

/// The state store: revision-checked key/value records, scoped by tenant.
pub mod state {
    pub use crate::spi::state::{
        Revision, StateChange, StateKey, StateStore, StateWatch, Versioned,
    };
}

/// The agent registry (who is running and what they can do) and discovery queries over it.
pub mod registry {
    pub use crate::platform::discovery::{
        Discovery, Requirements, UnconsumedRequest, unconsumed_requests,
    };
    pub use crate::spi::registry::Registry;
}

/// Handler inputs and extractors: the arguments a handler takes after its context.
pub mod extract {
    pub use crate::runtime::extract::{Extensions, FromHandlerInput, HandlerInput, State};
}

/// The agent's handler service and the [`tower`] layers around it: add your own with
/// [`AgentBuilder::layer`] (metrics, authorization, rate limits).
///
/// Every handled event is a [`HandlerRequest`](dispatch::HandlerRequest) through the agent's
/// stack, built once per start: the concurrency limit, a tracing span (`soorma.handle`), the
/// settlement (ack, reply, the layer's failure policy, retry with backoff, dead letter), panic
/// capture, then your layers (the last added outermost) around the handler.
///
/// ```
/// use soorma::dispatch::{HandlerError, HandlerRequest, HandlerResponse, HandlerService};
///
/// fn is_service<S: soorma::dispatch::tower::Service<HandlerRequest, Response = HandlerResponse, Error = HandlerError>>() {}
/// is_service::<HandlerService>();
/// ```
pub mod dispatch {
    pub use crate::runtime::service::{
        HandlerError, HandlerRequest, HandlerResponse, HandlerService,
    };
    /// The `tower` crate the handler service and its layers are built on.
    pub use tower;
}

/// The embedded engine: an in-process bus, state store and registry.
///
/// Zero setup and the default. Semantics match the NATS platform: instances of one agent
/// (one consumer group) share work, different agents each receive every event they subscribe
/// to, state writes are revision-checked, and everything is scoped by tenant.
pub mod embedded {
    pub use crate::engine::embedded::{
        EmbeddedBus, EmbeddedConfig, MemoryRegistry, MemoryStore, QueueStats,
    };
}

#[cfg(feature = "nats")]
pub mod nats {
    //! The NATS platform: JetStream streams for events, JetStream KV for state and the registry.
    //!
    //! Selected by [`Platform::from_env`](crate::Platform::from_env) when `SOORMA_NATS_URL` is set,
    //! or built explicitly with [`connect`] (or [`Platform::nats`](crate::Platform::nats)). See
    //! `docs/nats.md` for subjects, streams, consumers, buckets and the delivery guarantees.
    //!
    //! ```no_run
    //! # async fn demo() -> soorma::Result<()> {
    //! use soorma::nats::{NatsAuth, NatsConfig};
    //! let config = NatsConfig::new("nats://127.0.0.1:4222").with_auth(NatsAuth::Token("s3cret".into()));
    //! let platform = soorma::nats::connect(config).await?;
    //! assert_eq!(platform.kind(), "nats");
    //! # Ok(()) }
    //! ```
    pub use crate::engine::nats::{
        BATCH_HEADER, DEAD_LETTER_REASON_HEADER, DEAD_LETTER_TRUNCATED_HEADER, NatsAuth, NatsBus,
        NatsConfig, NatsRegistry, NatsStore, StorageType, async_nats, envelopes_of, redacted_url,
    };
    pub use crate::platform::connect_nats as connect;
}

/// Workflows: a goal and a DAG of capability calls, validated up front.
///
/// A [`WorkflowDefinition`](crate::common::WorkflowDefinition) (JSON, YAML with the `yaml`
/// feature, or builders) becomes a [`Workflow`](workflow::Workflow) when every check passes:
/// unique ids, known dependencies, no cycle (reported with its path), exactly one of
/// operator / human input / sub-workflow per step, valid timeouts, and templates that compile
/// and read only the workflow's input and the outputs of the step's ancestors.
/// [`Workflow::check_against`](workflow::Workflow::check_against) adds the registry's view
/// (capabilities exist, inputs match their schemas, reply fields exist), and
/// [`Workflow::to_mermaid`](workflow::Workflow::to_mermaid) draws it. The guide is
/// `docs/workflows.md`.
///
/// ```
/// let wf = soorma::workflow::Workflow::from_json(r#"{"goal": "g", "steps": [
///   {"id": "a", "operator": "search", "input_mapping": {"q": "{{topic}}"}},
///   {"id": "b", "operator": "summarize", "input_mapping": {"text": "{{a.hits}}"}, "depends_on": ["a"]}
/// ]}"#)?;
/// assert_eq!(wf.order().map(|s| s.id()).collect::<Vec<_>>(), ["a", "b"]);
/// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
/// ```
pub mod workflow {
    pub use crate::layers::worker::workflow::*;
    pub use soorma_common::{FailurePolicy, HumanInput, WorkflowDefinition, WorkflowStep};
}

pub mod planner {
    //! The planner layer: goals start plans, plans are event-driven state machines.
    //!
    //! A [`Plan`] is a validated [`PlanDefinition`](soorma_common::PlanDefinition): states with an
    //! optional action on entry (an action request whose data is a template over the goal and
    //! earlier results), transitions on events with optional conditions, a default next state, and
    //! terminal states that complete (or fail) the plan and reply to the goal.
    //!
    //! `#[on_goal(event)]` handlers get a [`GoalContext`] and start a plan; the events that answer
    //! the plan's actions arrive at the planner's `#[on_transition]` handler as a restored
    //! [`PlanContext`] (a planner without one gets a default that calls
    //! [`execute_next`](PlanContext::execute_next)). Plans are saved with revision-checked updates
    //! before anything is published, restored by plan id (the correlation id of their actions'
    //! replies), and report their lifecycle on `system-events` (`plan.started`,
    //! `plan.state_changed`, `plan.paused`, `plan.resumed`, `plan.completed`, `plan.failed`).
    //!
    //! With the `llm` feature, `planner::llm` lets a model plan: write a plan definition for a goal
    //! (`llm::create_plan`), or choose each next action of a plan (`llm::reason_next_action`).
    //! [`Sessions`] group the plans started in one session, [`Plans`] lists stored plans by session,
    //! status or parent, and a [`Tracker`] is a read model fed by the plans' events: where a plan
    //! is, what happened, which tasks ran. A plan action whose event is a planner's goal event
    //! starts a sub-plan, whose reply moves the parent plan.
    //!
    //! ```
    //! # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    //! use std::sync::Arc;
    //! use soorma::prelude::*;
    //! use soorma::planner::{GoalContext, Plan, PlanContext, Planner};
    //! use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
    //!
    //! async fn search(req: Invocation<serde_json::Value>) -> Result<Vec<String>, ToolError> {
    //!     Ok(vec![format!("about {}", req.data["q"].as_str().unwrap_or(""))])
    //! }
    //!
    //! async fn research(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<PlanContext> {
    //!     goal.start(&plan).await
    //! }
    //!
    //! let plan = Plan::new(
    //!     PlanDefinition::new("research", "search, then done")
    //!         .with_state(StateConfig::new("start", "search")
    //!             .with_action(StateAction::new("search.requested", "search.completed")
    //!                 .with_data(serde_json::json!({"q": "{{goal.topic}}"})))
    //!             .with_transition(StateTransition::new("search.completed", "done")))
    //!         .with_state(StateConfig::new("done", "").terminal()
    //!             .with_result(serde_json::json!({"found": "{{results.start}}"}))),
    //! )?;
    //! let platform = Platform::embedded();
    //! let tool = Tool::new("search").use_registered_handlers(false)
    //!     .handler(Handler::on_invoke("search.requested", search)).start(&platform).await?;
    //! let planner = Planner::new("researcher").use_registered_handlers(false)
    //!     .with_state(Arc::new(plan))
    //!     .handler(Handler::on_goal("research.goal", research))
    //!     .start(&platform).await?;
    //! let out: serde_json::Value = platform.client("docs")
    //!     .invoke("research.goal", serde_json::json!({"topic": "rust"}), "research.done").await?;
    //! assert_eq!(out["found"][0], "about rust");
    //! # planner.shutdown().await?; tool.shutdown().await
    //! # }
    //! ```
    pub use crate::layers::planner::*;
    pub use crate::platform::timers::TIMERS_BUCKET;

    /// LLM planning (feature `llm`): a model writes a plan for a goal, or chooses a plan's
    /// next actions.
    #[cfg(feature = "llm")]
    pub use crate::llm::planning as llm;
}

/// The shared DTO crate.
pub use soorma_common as common;

/// A2A (Agent2Agent v1.0) agent cards: the card types, [`CardBuilder`](a2a::CardBuilder) (a card
/// from an agent's definition, one skill per capability) and the v0.3.0 rendering.
///
/// ```
/// use soorma::prelude::*;
/// use soorma::a2a::CardBuilder;
///
/// /// Adds two numbers.
/// async fn add(req: Invocation<(i64, i64)>) -> Result<i64, ToolError> {
///     Ok(req.data.0 + req.data.1)
/// }
///
/// let tool = Tool::new("calculator")
///     .version("1.0.0")
///     .use_registered_handlers(false)
///     .handler(Handler::on_invoke("add.requested", add));
/// let def = tool.definition();
/// let card = CardBuilder::new(&def, "https://agents.example.com/calculator/a2a")
///     .with_bearer()
///     .build()
///     .unwrap();
/// assert_eq!(card.skills[0].id, "add.requested");
/// let well_known = serde_json::to_string(&card).unwrap(); // serve at /.well-known/agent-card.json
/// let legacy = serde_json::to_string(&card.to_v0_3()).unwrap(); // for A2A v0.3 clients
/// assert!(well_known.contains("\"supportedInterfaces\"") && legacy.contains("\"preferredTransport\""));
/// ```
pub use soorma_common::a2a;
pub use soorma_common::{
    ActionReply, AgentCapability, AgentDefinition, AgentKind, ChunkResult, DelegationGroup,
    EventDefinition, EventEnvelope, MemberPage, MemberRun, ResultChunk, SubTaskInfo, SubTaskStatus,
    TaskProgress, TaskRecord, TaskStatus, Topic,
};

/// `#[derive(Request)]`: a request type names its event and its reply type once.
///
/// `#[request(event = "..", reply = Type)]`, optionally `reply_event = ".."` and
/// `crate = "path"`. The type must also derive `Serialize`, `Deserialize` and `JsonSchema`
/// (a missing one is one error at the type, naming the derives).
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use schemars::JsonSchema;
/// use soorma::Request;
///
/// #[derive(Request, Serialize, Deserialize, JsonSchema)]
/// #[request(event = "sentiment.analyze", reply = f64)]
/// struct AnalyzeSentiment { text: String }
///
/// #[derive(Request, Serialize, Deserialize, JsonSchema)]
/// #[request(event = "order.place", reply = u64, reply_event = "order.placed")]
/// enum PlaceOrder { Book { isbn: String }, GiftCard { amount: u32 } }
///
/// assert_eq!(AnalyzeSentiment::EVENT, "sentiment.analyze");
/// assert_eq!(AnalyzeSentiment::reply_event(), "sentiment.analyze.completed");
/// assert_eq!(PlaceOrder::reply_event(), "order.placed");
/// ```
pub use soorma_macros::Request;

/// `#[on_fan_in(RequestA, RequestB, ..)]`: the handler that runs once, when every reply of a
/// typed `task.fan_out((a, b, ..))` is in.
///
/// Its arguments are the task (`TaskContext<R, S>`), then the replies in the order of the
/// request types (a tuple when there are several; each one the request's reply type, or
/// `Result<Reply, SubTaskFailed>` to handle a failed sub-task), then extractors. Its return
/// value completes the task (`Result<R::Reply, E>`), or it returns `Result<Delegated, E>`
/// after delegating more. Also takes `agent = ".."` and `crate = ".."`.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use schemars::JsonSchema;
/// use soorma::prelude::*;
///
/// #[derive(Request, Serialize, Deserialize, JsonSchema)]
/// #[request(event = "sentiment.analyze", reply = f64)]
/// struct AnalyzeSentiment { text: String }
///
/// #[derive(Request, Serialize, Deserialize, JsonSchema)]
/// #[request(event = "summary.generate", reply = String)]
/// struct Summarize { text: String }
///
/// #[derive(Request, Serialize, Deserialize, JsonSchema)]
/// #[request(event = "research.requested", reply = String)]
/// struct Research { text: String }
///
/// /// Fans the text out to the analyzers.
/// #[on_task]
/// async fn research(mut task: TaskContext<Research>) -> soorma::Result<Delegated> {
///     let text = task.data.text.clone();
///     task.fan_out((AnalyzeSentiment { text: text.clone() }, Summarize { text })).await
/// }
///
/// /// Runs once both replies are in; a failed summary does not fail the task.
/// #[on_fan_in(AnalyzeSentiment, Summarize)]
/// async fn collect(
///     _task: TaskContext<Research>,
///     (score, summary): (f64, Result<String, SubTaskFailed>),
/// ) -> soorma::Result<String> {
///     Ok(format!("{score}: {}", summary.unwrap_or_default()))
/// }
///
/// let worker = Worker::new("researcher").handlers(soorma::handlers![research, collect]);
/// # let _ = worker;
/// ```
pub use soorma_macros::on_fan_in;

/// `#[on_goal]` (typed, the event from `GoalContext<R>`'s request type) or
/// `#[on_goal("event.name")]`: a planner's goal handler.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use schemars::JsonSchema;
/// use soorma::prelude::*;
///
/// #[derive(Request, Serialize, Deserialize, JsonSchema)]
/// #[request(event = "trip.plan", reply = String)]
/// struct PlanTrip { city: String }
///
/// /// Plans a trip.
/// #[on_goal(agent = "trip-planner")]
/// async fn plan_trip(goal: GoalContext<PlanTrip>) -> soorma::Result<()> {
///     let _city = &goal.data.city;
///     Ok(())
/// }
///
/// assert_eq!(soorma::handlers![plan_trip][0].event(), "trip.plan");
/// ```
pub use soorma_macros::on_goal;

/// `#[on_invoke]` (typed, the event from `Invocation<R>`'s request type, replying
/// `R::Reply`) or `#[on_invoke("event.name")]` (any deserializable payload): a tool.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use schemars::JsonSchema;
/// use soorma::prelude::*;
///
/// #[derive(Request, Serialize, Deserialize, JsonSchema)]
/// #[request(event = "sentiment.analyze", reply = f64)]
/// struct AnalyzeSentiment { text: String }
///
/// /// Scores the sentiment of a text.
/// #[on_invoke(agent = "analyzers")]
/// async fn sentiment(req: Invocation<AnalyzeSentiment>) -> Result<f64, ToolError> {
///     Ok(if req.data.text.contains("good") { 1.0 } else { -1.0 })
/// }
///
/// /// Doubles a number (string-named: the event is given, the payload any type).
/// #[on_invoke("double.requested", agent = "analyzers")]
/// async fn double(req: Invocation<i64>) -> Result<i64, ToolError> {
///     Ok(req.data * 2)
/// }
///
/// let events: Vec<String> = soorma::handlers![sentiment, double]
///     .iter().map(|h| h.event().to_owned()).collect();
/// assert_eq!(events, ["sentiment.analyze", "double.requested"]);
/// ```
pub use soorma_macros::on_invoke;

/// `#[on_task]` (typed, the event from `TaskContext<R, S>`'s request type) or
/// `#[on_task("event.name")]`: a worker's task handler.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use schemars::JsonSchema;
/// use soorma::prelude::*;
///
/// #[derive(Request, Serialize, Deserialize, JsonSchema)]
/// #[request(event = "count.requested", reply = usize)]
/// struct Count { words: Vec<String> }
///
/// /// Counts words; the value it completes with is the task's reply.
/// #[on_task(agent = "counter")]
/// async fn count(mut task: TaskContext<Count>) -> soorma::Result<bool> {
///     let n = task.data.words.len();
///     task.complete(n).await
/// }
///
/// assert_eq!(soorma::handlers![count][0].event(), "count.requested");
/// ```
pub use soorma_macros::on_task;

pub use soorma_macros::{on_event, on_result, on_transition};

/// Everything a handler module needs: `use soorma::prelude::*;`.
pub mod prelude {
    pub use crate::planner::{GoalContext, Plan, PlanContext, Planner};
    pub use crate::{
        Agent, AgentBuilder, Agents, BusClient, Client, Delegated, Delegation, Error, Event,
        Handler, Invocation, Platform, Request, ResultContext, State, SubTaskFailed, TaskContext,
        Tool, ToolError, Topic, Worker,
    };
    // `Request` (the trait and its derive) comes with `crate::Request` above.
    pub use crate::handlers;
    /// The derives every payload type needs (the crate still depends on `serde` and
    /// `schemars`, whose derives name them).
    pub use schemars::JsonSchema;
    pub use serde::{Deserialize, Serialize};
    pub use soorma_macros::{
        on_event, on_fan_in, on_goal, on_invoke, on_result, on_task, on_transition,
    };
}

/// Items used by code the macros generate. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::protocol::request::Request;
    pub use crate::runtime::extract::FromHandlerInput;
    pub use crate::runtime::handler::{Handler, HandlerRegistration, HandlerSet};
    pub use inventory;
    pub use schemars;
    pub use serde;
    pub use serde_json;
    pub use soorma_common::Topic;

    /// `R`, when it is a request type. When it is not, the one error is "`R` is not a request
    /// type" where the macro wrote this type (on the user's `R`), and the type is left
    /// undetermined, so that what is built on it does not report the same problem again (a
    /// fan-in's request set, for one).
    pub type RequestType<R> = <(R, <<R as Request>::Reply as Unit>::Unit) as Pick>::Out;

    /// `()` for every type (see [`RequestType`]): undetermined for an undetermined type.
    pub trait Unit {
        /// Always `()`.
        type Unit;
    }

    impl<T: ?Sized> Unit for T {
        type Unit = ();
    }

    /// The first element of a pair whose second is `()` (see [`RequestType`]). The second impl
    /// only makes a pair whose second element is undetermined ambiguous, rather than `()`.
    pub trait Pick {
        /// The first element.
        type Out;
    }

    impl<A> Pick for (A, ()) {
        type Out = A;
    }

    impl<A> Pick for (A, ((),)) {
        type Out = A;
    }

    /// What `#[derive(Request)]` requires of its type (see [`assert_request_payload`]).
    #[diagnostic::on_unimplemented(
        message = "`{Self}` derives `Request`, so it must implement `Serialize`, `Deserialize` and `JsonSchema`",
        label = "add the missing derives: `#[derive(Request, Serialize, Deserialize, JsonSchema)]`",
        note = "a request is sent as JSON, and its schema is registered with the agent that handles it"
    )]
    pub trait RequestPayload:
        serde::Serialize + serde::de::DeserializeOwned + schemars::JsonSchema
    {
    }

    impl<T: serde::Serialize + serde::de::DeserializeOwned + schemars::JsonSchema> RequestPayload
        for T
    {
    }

    /// Called by `#[derive(Request)]` on its type: a missing derive is reported once, at the
    /// type's name, with [`RequestPayload`]'s message.
    pub const fn assert_request_payload<T: RequestPayload>() {}
}

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

mod agent;
pub mod bus;
mod client;
mod context;
pub mod embedded;
mod error;
pub mod expr;
pub mod extract;
#[cfg(feature = "gateway")]
pub mod gateway;
mod handler;
#[cfg(any(feature = "gateway", feature = "mcp"))]
mod http;
#[cfg(feature = "llm")]
pub mod llm;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "nats")]
pub mod nats;
pub mod planner;
mod platform;
pub mod registry;
pub mod state;
mod task;
pub mod testing;
#[cfg(any(feature = "llm", feature = "mcp"))]
mod tls;
mod util;
mod validation;

pub use agent::{Agent, AgentBuilder, AgentHandle, Tool, Worker};
pub use bus::{BusClient, Publish};
pub use client::{Call, Client, Reply};
pub use context::{Event, Invocation, ToolError};
pub use error::{Error, Result, SchemaViolation};
pub use extract::State;
pub use handler::{Handler, HandlerFn, HandlerKind, HandlerOutput, ToolOutput};
pub use platform::{NATS_URL_ENV, Platform};
pub use task::{
    Delegation, ResultContext, SUBTASKS_BUCKET, TASK_TIMEOUT_EVENT, TASKS_BUCKET, TaskContext,
};
pub use util::BoxFuture;

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
    ActionReply, AgentCapability, AgentDefinition, AgentKind, EventDefinition, EventEnvelope,
    SubTaskInfo, SubTaskStatus, TaskProgress, TaskRecord, TaskStatus, Topic,
};

pub use soorma_macros::{on_event, on_goal, on_invoke, on_result, on_task, on_transition};

/// Everything a handler module needs: `use soorma::prelude::*;`.
pub mod prelude {
    pub use crate::planner::{GoalContext, Plan, PlanContext, Planner};
    pub use crate::{
        Agent, AgentBuilder, BusClient, Client, Delegation, Error, Event, Handler, Invocation,
        Platform, ResultContext, State, TaskContext, Tool, ToolError, Topic, Worker,
    };
    pub use soorma_macros::{on_event, on_goal, on_invoke, on_result, on_task, on_transition};
}

/// Items used by code the macros generate. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::extract::FromHandlerInput;
    pub use crate::handler::{Handler, HandlerRegistration};
    pub use inventory;
    pub use schemars;
    pub use serde;
    pub use serde_json;
    pub use soorma_common::Topic;
}

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
//! use soorma::planner::{GoalContext, Plan, Planner};
//! use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
//!
//! async fn search(req: Invocation<serde_json::Value>) -> Result<Vec<String>, ToolError> {
//!     Ok(vec![format!("about {}", req.data["q"].as_str().unwrap_or(""))])
//! }
//!
//! async fn research(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
//!     goal.start(&plan).await.map(drop)
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

mod context;
mod definition;
#[cfg(feature = "llm")]
pub mod llm;
mod machine;
mod sessions;
mod timers;
mod tracker;

pub(crate) use context::fail_plan;
pub use context::{GoalContext, PLANS_BUCKET, PlanContext};
pub use definition::Plan;
pub use machine::MAX_ACTIONS;
pub use sessions::{PlanFilter, Plans, SESSIONS_BUCKET, Sessions};
pub use timers::TIMERS_BUCKET;
pub(crate) use timers::{recover as recover_timers, schedule as schedule_timer};
pub use tracker::{PlanEvent, PlanView, TaskState, TaskView, Tracker, TrackerBuilder, ViewSource};

pub use crate::agent::Planner;

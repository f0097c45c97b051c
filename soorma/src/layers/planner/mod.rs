//! The planner layer (`#[on_goal]`, `#[on_transition]`): goals start plans, plans are
//! event-driven state machines. Public API: `soorma::planner` (see `lib.rs`).

pub(crate) mod context;
pub(crate) mod definition;
pub(crate) mod machine;
mod sessions;
mod tracker;
mod workflow_view;

use std::sync::Arc;

use serde_json::Value;
use soorma_common::{AgentKind, Topic};

use context::fail_plan;
pub use context::{GoalContext, PLANS_BUCKET, PlanContext};
pub use definition::Plan;
pub use machine::MAX_ACTIONS;
pub use sessions::{PlanFilter, Plans, SESSIONS_BUCKET, Sessions};
pub use tracker::{PlanEvent, PlanView, TaskState, TaskView, Tracker, TrackerBuilder, ViewSource};
pub use workflow_view::{WorkflowStepView, WorkflowView};

use crate::error::Result;
use crate::platform::timers;
use crate::protocol::request::Request;
use crate::runtime::agent::AgentBuilder;
use crate::runtime::extract::{Extensions, HandlerInput};
use crate::runtime::handler::{
    Advertised, ErasedFn, Failure, Handler, HandlerFn, HandlerKind, HandlerOutput, HandlerPayload,
    extractor_failure, payload_call, schema_of,
};
use crate::util::BoxFuture;

/// Goal-driven planners (`#[on_goal]`, `#[on_transition]`); see [`crate::planner`].
///
/// ```
/// let planner = soorma::planner::Planner::new("research-planner");
/// assert_eq!(planner.definition().kind, soorma::AgentKind::Planner);
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct Planner;

impl Planner {
    /// A builder for a planner named `name`. Without an `#[on_transition]` handler, the planner
    /// advances its plans with [`PlanContext::execute_next`](crate::layers::planner::PlanContext::execute_next).
    ///
    /// ```
    /// let planner = soorma::planner::Planner::new("research-planner");
    /// # let _ = planner;
    /// ```
    #[allow(clippy::new_ret_no_self)]
    pub fn new(name: impl Into<String>) -> AgentBuilder {
        AgentBuilder::new(name, AgentKind::Planner)
    }
}

impl Handler {
    /// A planner's goal handler for goals of type `event` on `action-requests`; it usually
    /// starts a plan with [`GoalContext::start`]. A failure fails the plan (or, before one was
    /// started, replies to the goal with the error).
    ///
    /// ```
    /// use soorma::prelude::*;
    /// use soorma::planner::{GoalContext, Plan};
    ///
    /// async fn research(goal: GoalContext, plan: State<std::sync::Arc<Plan>>) -> soorma::Result<()> {
    ///     goal.start(&plan).await?;
    ///     Ok(())
    /// }
    ///
    /// let h = Handler::on_goal("research.goal", research);
    /// assert_eq!(h.kind(), soorma::HandlerKind::Goal);
    /// ```
    pub fn on_goal<H, T, Args>(event: impl Into<String>, handler: H) -> Self
    where
        H: HandlerFn<GoalContext<T>, Args>,
        H::Output: HandlerOutput,
        T: HandlerPayload,
    {
        let call = payload_call(handler, GoalContext::new);
        let mut h = Handler::new(
            HandlerKind::Goal,
            Topic::ActionRequests,
            event.into(),
            schema_of::<T>,
            H::checks(),
            call,
        );
        h.advertised = Advertised::Capability;
        h.on_failure = Some(fail_goal);
        h.on_start = Some(timers::ensure_running);
        h.assemble = Some(ensure_transition);
        h.on_cancel = Some(cancel_plan);
        h
    }

    /// A planner's goal handler for the typed request `R`: the event is `R::EVENT`, and the
    /// plan's result is the reply (`R::Reply`) its caller decodes.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde::{Deserialize, Serialize};
    /// use soorma::prelude::*;
    ///
    /// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    /// struct Trip { to: String }
    /// impl Request for Trip { const EVENT: &'static str = "trip.goal"; type Reply = serde_json::Value; }
    ///
    /// async fn plan_trip(goal: GoalContext<Trip>, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    ///     goal.start(&plan).await?;
    ///     Ok(())
    /// }
    ///
    /// let h = Handler::goal(plan_trip);
    /// assert_eq!(h.event(), "trip.goal");
    /// ```
    pub fn goal<H, R, Args>(handler: H) -> Self
    where
        H: HandlerFn<GoalContext<R>, Args>,
        H::Output: HandlerOutput,
        R: Request,
    {
        let mut h = Self::on_goal(R::EVENT, handler);
        h.reply_event = Some(R::reply_event());
        h
    }

    /// A planner's transition handler: every event on `action-results` that belongs to one of
    /// the planner's plans (its correlation id is the plan id) arrives as the restored
    /// [`PlanContext`]; other results are ignored. A planner without one advances its plans
    /// with [`PlanContext::execute_next`].
    ///
    /// ```
    /// use soorma::prelude::*;
    /// use soorma::planner::PlanContext;
    ///
    /// async fn advance(mut plan: PlanContext) -> soorma::Result<()> {
    ///     if plan.trigger().is_some_and(|e| e.event_type == "approval.needed") {
    ///         return plan.pause("waiting for a person").await;
    ///     }
    ///     plan.execute_next().await
    /// }
    ///
    /// let h = Handler::on_transition(advance);
    /// assert_eq!(h.kind(), soorma::HandlerKind::Transition);
    /// ```
    pub fn on_transition<H, Args>(handler: H) -> Self
    where
        H: HandlerFn<PlanContext, Args>,
        H::Output: HandlerOutput,
    {
        let call: ErasedFn = Arc::new(move |input: HandlerInput| {
            let handler = handler.clone();
            Box::pin(async move {
                let plan = PlanContext::for_event(&input)
                    .await
                    .map_err(|e| Failure::Handler {
                        retryable: e.is_retryable(),
                        message: e.to_string(),
                    })?;
                let Some(plan) = plan else {
                    tracing::trace!(event_type = %input.envelope.event_type, "not an event of this planner's plans; ignored");
                    return Ok(None);
                };
                let fut = handler.call(plan, &input).map_err(extractor_failure)?;
                fut.await.into_outcome().map(|()| None)
            })
        });
        let mut h = Handler::new(
            HandlerKind::Transition,
            Topic::ActionResults,
            "*".into(),
            schema_of::<Value>,
            H::checks(),
            call,
        );
        h.advertised = Advertised::Hidden;
        h.on_failure = Some(fail_transition);
        h.on_start = Some(timers::ensure_running);
        h
    }
}

/// A planner without a transition handler gets one that advances its plans with
/// [`PlanContext::execute_next`].
fn ensure_transition(_: &str, handlers: &mut Vec<Handler>, _: &mut Extensions) -> Vec<String> {
    async fn advance_plan(mut plan: PlanContext) -> Result<()> {
        plan.execute_next().await
    }
    if !handlers.iter().any(|h| h.kind == HandlerKind::Transition) {
        handlers.push(Handler::on_transition(advance_plan));
    }
    Vec::new()
}

/// A canceled goal ends its plan: failed with "canceled", without a reply (as a canceled
/// task), and its latest action gets a cancel of its own.
fn cancel_plan(input: &HandlerInput) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let Some(plan_id) = crate::runtime::cancel::request_id(&input.envelope) else {
            return;
        };
        if let Err(e) = context::cancel_plan(input, plan_id).await {
            tracing::warn!(error = %e, plan_id = %plan_id, "could not cancel the plan");
        }
    })
}

/// A goal handler's failure fails its plan (or, before one started, replies with the error).
fn fail_goal(input: &HandlerInput, error: String) -> BoxFuture<'_, Result<bool>> {
    Box::pin(fail_plan(input, error, true))
}

/// A transition handler's failure fails the plan.
fn fail_transition(input: &HandlerInput, error: String) -> BoxFuture<'_, Result<bool>> {
    Box::pin(fail_plan(input, error, false))
}

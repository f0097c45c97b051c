//! `GoalContext` (the goal that starts a plan) and `PlanContext` (a running plan).

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use soorma_common::{
    ActionReply, AgentCapability, EventEnvelope, PlanRecord, PlanStatus, PublishedAction, Topic,
};

use super::definition::Plan;
use super::machine::{self, Effects};
use crate::error::{EngineError, EngineErrorKind, Error, Result};
use crate::platform::timers;
use crate::protocol::reply::{ReplyRoute, publish_reply, send_reply};
use crate::runtime::extract::{AgentRuntime, HandlerInput};
use crate::spi::state::{self, Change, Revision, StateKey, StateStore};

/// The state bucket holding plan records (`<tenant>.<plan id>`).
pub const PLANS_BUCKET: &str = "plans";

pub(crate) fn plan_key(tenant: &str, plan_id: &str) -> StateKey {
    StateKey::new(PLANS_BUCKET, tenant, plan_id)
}

/// A goal: the request that starts a plan, for `#[on_goal]` handlers.
///
/// ```
/// use soorma::prelude::*;
/// use soorma::planner::{GoalContext, Plan};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Research { topic: String }
///
/// #[on_goal("research.goal", agent = "research-planner")]
/// async fn research(goal: GoalContext<Research>, plan: State<std::sync::Arc<Plan>>) -> soorma::Result<()> {
///     let _topic = &goal.data.topic; // templates see it as {{goal.topic}}
///     goal.start(&plan).await?;
///     Ok(())
/// }
/// ```
pub struct GoalContext<T = Value> {
    /// The goal's payload.
    pub data: T,
    envelope: Arc<EventEnvelope>,
    runtime: Arc<AgentRuntime>,
}

impl<T> std::fmt::Debug for GoalContext<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoalContext")
            .field("event_type", &self.envelope.event_type)
            .field("plan_id", &self.envelope.id)
            .finish_non_exhaustive()
    }
}

impl<T> GoalContext<T> {
    pub(crate) fn new(data: T, input: &HandlerInput) -> Self {
        Self {
            data,
            envelope: input.envelope.clone(),
            runtime: input.runtime.clone(),
        }
    }

    /// The goal event.
    ///
    /// ```
    /// # use soorma::planner::GoalContext;
    /// fn event_type(goal: &GoalContext) -> &str { &goal.envelope().event_type }
    /// ```
    pub fn envelope(&self) -> &EventEnvelope {
        &self.envelope
    }

    /// The id the plan for this goal gets (the goal event's id: a redelivered goal finds the
    /// plan it already started).
    ///
    /// ```
    /// # use soorma::planner::GoalContext;
    /// fn plan_id(goal: &GoalContext) -> String { goal.plan_id() }
    /// ```
    pub fn plan_id(&self) -> String {
        self.envelope.id.clone()
    }

    /// The capabilities the plan can request: the capabilities taking action requests (tools,
    /// workers, other planners' goals) of the agents registered on the platform that serve the
    /// goal's tenant (or every tenant), without this planner's own; one per request event, the
    /// first by agent name.
    ///
    /// ```
    /// # use soorma::planner::GoalContext;
    /// async fn tools(goal: &GoalContext) -> soorma::Result<Vec<String>> {
    ///     let caps = goal.capabilities().await?;
    ///     Ok(caps.into_iter().map(|c| c.consumed_event.event_name).collect())
    /// }
    /// ```
    pub async fn capabilities(&self) -> Result<Vec<AgentCapability>> {
        discover_capabilities(&self.runtime, self.envelope.tenant()).await
    }

    /// The definition of the plan already stored for this goal (a redelivered goal), if any.
    #[cfg(feature = "llm")]
    pub(crate) async fn stored_definition(&self) -> Result<Option<soorma_common::PlanDefinition>> {
        let key = plan_key(self.envelope.tenant(), &self.envelope.id);
        Ok(
            state::load::<PlanRecord>(&**self.runtime.platform.state(), "plan", &key)
                .await?
                .and_then(|stored| stored.value.definition),
        )
    }

    /// Starts `plan` for this goal: saves the plan, enters its initial state and publishes that
    /// state's action. Idempotent: a redelivered goal continues the plan it started.
    ///
    /// ```
    /// # use soorma::planner::{GoalContext, Plan};
    /// async fn go(goal: GoalContext, plan: &Plan) -> soorma::Result<()> {
    ///     let running = goal.start(plan).await?;
    ///     assert_eq!(running.plan_id(), goal.plan_id());
    ///     Ok(())
    /// }
    /// ```
    pub async fn start(&self, plan: &Plan) -> Result<PlanContext> {
        let env = &self.envelope;
        let def = plan.definition();
        let mut record = PlanRecord::new(&env.id, &def.plan_type, &def.initial_state);
        record.goal_data = env.data.clone();
        record.correlation_id = Some(env.correlation_id.clone().unwrap_or_else(|| env.id.clone()));
        record.response_event.clone_from(&env.response_event);
        record.response_topic = env.response_event.as_ref().map(|_| env.reply_topic());
        record.session_id.clone_from(&env.session_id);
        record.tenant_id.clone_from(&env.tenant_id);
        record.user_id.clone_from(&env.user_id);
        record.parent_plan_id.clone_from(&env.plan_id);
        record.planner = Some(self.runtime.name.to_string());
        record.definition = Some(def.clone());
        record.created_at = Some(crate::util::now_rfc3339());
        let tenant = record
            .tenant_id
            .clone()
            .unwrap_or_else(|| soorma_common::DEFAULT_TENANT.to_owned());
        let key = plan_key(&tenant, &record.plan_id);
        let store = self.runtime.platform.state();
        let revision = match store.create(&key, state::encode("plan", &record)?).await {
            Ok(rev) => Some(rev),
            Err(Error::Conflict { .. }) => None, // redelivered goal: the plan exists
            Err(e) => return Err(e),
        };
        let mut ctx = PlanContext {
            record,
            revision,
            plan: Arc::new(Plan::new(def.clone())?),
            envelope: self.envelope.clone(),
            runtime: self.runtime.clone(),
            trigger: None,
            asked: 0,
            redelivered: false,
        };
        if ctx.revision.is_none() {
            ctx.reload().await?;
        }
        if let Some(session) = ctx.record.session_id.clone() {
            let user = ctx.record.user_id.as_deref();
            super::sessions::add_plan(store.as_ref(), &tenant, &session, user, &ctx.record.plan_id)
                .await?;
        }
        ctx.transact(machine::start).await?;
        Ok(ctx)
    }
}

/// A running plan: its record, its validated definition and the event being handled. Every
/// change is saved with a revision check before anything is published.
///
/// ```
/// use soorma::prelude::*;
/// use soorma::planner::PlanContext;
///
/// #[on_transition(agent = "research-planner")]
/// async fn advance(mut plan: PlanContext) -> soorma::Result<()> {
///     plan.execute_next().await // follows the definition's transitions
/// }
/// ```
pub struct PlanContext {
    record: PlanRecord,
    revision: Option<Revision>,
    plan: Arc<Plan>,
    envelope: Arc<EventEnvelope>,
    runtime: Arc<AgentRuntime>,
    trigger: Option<Arc<EventEnvelope>>,
    /// Questions asked so far by this handler run (see [`ask_id`]).
    asked: u32,
    /// Whether the plan, as loaded, keeps an action published by an earlier handling of this
    /// event (this run is a redelivery: see [`resume`](Self::resume)).
    redelivered: bool,
}

impl std::fmt::Debug for PlanContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanContext")
            .field("plan_id", &self.record.plan_id)
            .field("state", &self.record.current_state)
            .field("status", &self.record.status)
            .finish_non_exhaustive()
    }
}

impl PlanContext {
    /// Restores the plan an event belongs to (its correlation id is the plan id); `None` when
    /// no plan of the event's tenant has that id. Only the correlation id counts: events that
    /// merely happened within a plan (a worker's own sub-task results carry the plan's
    /// `plan_id` too) are not the plan's to act on.
    pub(crate) async fn for_event(input: &HandlerInput) -> Result<Option<Self>> {
        let env = &input.envelope;
        let Some(plan_id) = env.correlation_id.as_deref() else {
            return Ok(None);
        };
        let Some(plan) = Self::load(input, plan_id, Some(env.clone())).await? else {
            return Ok(None);
        };
        if plan
            .record
            .planner
            .as_deref()
            .is_some_and(|owner| owner != &*input.runtime.name)
        {
            // Another planner's plan (every planner sees every action result).
            return Ok(None);
        }
        Ok(Some(plan))
    }

    /// The stored plan `plan_id` of the handled event's tenant, handling `trigger`.
    async fn load(
        input: &HandlerInput,
        plan_id: &str,
        trigger: Option<Arc<EventEnvelope>>,
    ) -> Result<Option<Self>> {
        let key = plan_key(input.envelope.tenant(), plan_id);
        let Some(stored) =
            state::load::<PlanRecord>(&**input.runtime.platform.state(), "plan", &key).await?
        else {
            return Ok(None);
        };
        let Some(def) = stored.value.definition.clone() else {
            return Err(Error::Handler(format!(
                "plan `{plan_id}` has no stored definition"
            )));
        };
        let redelivered = machine::published_action(&stored.value)
            .is_some_and(|kept| kept.handled_by == input.envelope.id);
        Ok(Some(Self {
            record: stored.value,
            revision: Some(stored.revision),
            plan: Arc::new(Plan::new(def)?),
            envelope: input.envelope.clone(),
            runtime: input.runtime.clone(),
            trigger,
            asked: 0,
            redelivered,
        }))
    }

    /// The plan id.
    ///
    /// ```
    /// # fn f(plan: &soorma::planner::PlanContext) -> &str {
    /// plan.plan_id()
    /// # }
    /// ```
    pub fn plan_id(&self) -> &str {
        &self.record.plan_id
    }

    /// The current state.
    ///
    /// ```
    /// # fn f(plan: &soorma::planner::PlanContext) -> bool {
    /// plan.current_state() == "searching"
    /// # }
    /// ```
    pub fn current_state(&self) -> &str {
        &self.record.current_state
    }

    /// Where the plan stands.
    ///
    /// ```
    /// # fn f(plan: &soorma::planner::PlanContext) -> bool {
    /// plan.status() == soorma::common::PlanStatus::Paused
    /// # }
    /// ```
    pub fn status(&self) -> PlanStatus {
        self.record.status
    }

    /// Whether the plan has finished (completed or failed).
    ///
    /// ```
    /// # fn f(plan: &soorma::planner::PlanContext) -> bool {
    /// plan.is_complete()
    /// # }
    /// ```
    pub fn is_complete(&self) -> bool {
        matches!(
            self.record.status,
            PlanStatus::Completed | PlanStatus::Failed
        )
    }

    /// The plan record (goal, results by state, history, working memory).
    ///
    /// ```
    /// # fn f(plan: &soorma::planner::PlanContext) -> usize {
    /// plan.record().history.len()
    /// # }
    /// ```
    pub fn record(&self) -> &PlanRecord {
        &self.record
    }

    /// The validated plan it runs.
    ///
    /// ```
    /// # fn f(plan: &soorma::planner::PlanContext) -> &str {
    /// &plan.plan().definition().plan_type
    /// # }
    /// ```
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The event being handled, for `#[on_transition]` handlers.
    ///
    /// ```
    /// # fn f(plan: &soorma::planner::PlanContext) -> Option<&str> {
    /// plan.trigger().map(|e| e.event_type.as_str())
    /// # }
    /// ```
    pub fn trigger(&self) -> Option<&EventEnvelope> {
        self.trigger.as_deref()
    }

    /// The capabilities the plan can request; see [`GoalContext::capabilities`].
    ///
    /// ```
    /// # async fn f(plan: &soorma::planner::PlanContext) -> soorma::Result<usize> {
    /// Ok(plan.capabilities().await?.len())
    /// # }
    /// ```
    pub async fn capabilities(&self) -> Result<Vec<AgentCapability>> {
        let tenant = self
            .record
            .tenant_id
            .as_deref()
            .unwrap_or(soorma_common::DEFAULT_TENANT);
        discover_capabilities(&self.runtime, tenant).await
    }

    /// The id of the event being handled: the trigger's, or the goal's for a plan just started.
    #[cfg(feature = "llm")]
    pub(crate) fn handled_event_id(&self) -> &str {
        self.trigger
            .as_deref()
            .map_or(self.envelope.id.as_str(), |t| t.id.as_str())
    }

    /// Applies the event being handled: records it as the result of the current state's
    /// action, follows the first transition whose event and condition match, and runs the next
    /// state's action; reaching a terminal state replies to the goal. A paused plan keeps the
    /// event for when it resumes (or resumes, if it is the awaited human input).
    ///
    /// ```
    /// # async fn f(mut plan: soorma::planner::PlanContext) -> soorma::Result<()> {
    /// plan.execute_next().await
    /// # }
    /// ```
    pub async fn execute_next(&mut self) -> Result<()> {
        let Some(trigger) = self.trigger.clone() else {
            return self.transact(machine::start).await;
        };
        let asked = self.awaiting_id();
        self.transact(move |plan, record| machine::on_event(plan, record, &trigger))
            .await?;
        self.forget_timer(asked).await;
        Ok(())
    }

    fn awaiting_id(&self) -> Option<String> {
        self.record
            .state
            .get("awaiting_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    /// Cancels the timeout of a question that is no longer awaited.
    async fn forget_timer(&self, asked: Option<String>) {
        let Some(asked) = asked else { return };
        if self.awaiting_id().as_deref() == Some(asked.as_str()) {
            return;
        }
        let tenant = self
            .record
            .tenant_id
            .as_deref()
            .unwrap_or(soorma_common::DEFAULT_TENANT);
        let timer = format!("{asked}-timeout");
        if let Err(e) = timers::cancel(&self.runtime.platform, tenant, &timer).await {
            tracing::debug!(error = %e, "could not cancel a human-input timer");
        }
    }

    /// Completes the plan now with `result` (replied to the goal).
    ///
    /// ```
    /// # async fn f(mut plan: soorma::planner::PlanContext) -> soorma::Result<()> {
    /// plan.finalize(serde_json::json!({"answer": 42})).await
    /// # }
    /// ```
    pub async fn finalize(&mut self, result: impl Serialize) -> Result<()> {
        let result =
            serde_json::to_value(result).map_err(|e| Error::serialize("plan result", e))?;
        self.transact(move |_, record| {
            let mut fx = Effects::default();
            if !matches!(record.status, PlanStatus::Completed | PlanStatus::Failed) {
                machine::complete(record, result.clone(), &mut fx);
            }
            Ok(fx)
        })
        .await
    }

    /// Fails the plan with `error` (replied to the goal as an error).
    ///
    /// ```
    /// # async fn f(mut plan: soorma::planner::PlanContext) -> soorma::Result<()> {
    /// plan.fail("no sources found").await
    /// # }
    /// ```
    pub async fn fail(&mut self, error: impl Into<String>) -> Result<()> {
        let error = error.into();
        self.transact(move |_, record| {
            let mut fx = Effects::default();
            machine::fail(record, error.clone(), &mut fx);
            Ok(fx)
        })
        .await
    }

    /// Pauses the plan (e.g. for a person to decide); events that arrive meanwhile are kept and
    /// applied on [`resume`](Self::resume). No timeout.
    ///
    /// ```
    /// # async fn f(mut plan: soorma::planner::PlanContext) -> soorma::Result<()> {
    /// plan.pause("waiting for approval").await
    /// # }
    /// ```
    pub async fn pause(&mut self, reason: impl Into<String>) -> Result<()> {
        let reason = reason.into();
        self.transact(move |_, record| Ok(machine::pause(record, &reason, None)))
            .await
    }

    /// Asks a person: pauses the plan awaiting `response_event` and publishes
    /// `notification.human_input` on `notification-events` with the question, the response
    /// event and the plan id as correlation id. The answer — `response_event` published on
    /// `action-results` with that correlation id — resumes the plan by itself, is recorded as
    /// the current state's result, and moves the plan by the state's transitions on it. No
    /// timeout; see [`request_human_input_within`](Self::request_human_input_within).
    ///
    /// ```
    /// # async fn f(mut plan: soorma::planner::PlanContext) -> soorma::Result<()> {
    /// plan.request_human_input("Publish the report?", "report.approval").await
    /// # }
    /// ```
    pub async fn request_human_input(
        &mut self,
        question: impl Into<String>,
        response_event: impl Into<String>,
    ) -> Result<()> {
        self.ask(question.into(), response_event.into(), None).await
    }

    /// [`request_human_input`](Self::request_human_input) with a deadline: without an answer
    /// after `timeout`, a `plan.timeout` event (on `action-results`, correlated with the plan)
    /// resumes the plan and moves it by the state's transition on `plan.timeout` — or fails it
    /// when the state has none. The timer is durable: it is stored, and fires even if the
    /// planner restarted meanwhile.
    ///
    /// ```
    /// # async fn f(mut plan: soorma::planner::PlanContext) -> soorma::Result<()> {
    /// use std::time::Duration;
    /// plan.request_human_input_within("Publish the report?", "report.approval", Duration::from_secs(3600)).await
    /// # }
    /// ```
    pub async fn request_human_input_within(
        &mut self,
        question: impl Into<String>,
        response_event: impl Into<String>,
        timeout: std::time::Duration,
    ) -> Result<()> {
        self.ask(question.into(), response_event.into(), Some(timeout))
            .await
    }

    async fn ask(
        &mut self,
        question: String,
        response_event: String,
        timeout: Option<std::time::Duration>,
    ) -> Result<()> {
        if response_event.trim().is_empty() {
            return Err(Error::InvalidArgument(
                "request_human_input needs a response_event for the answer".into(),
            ));
        }
        self.asked += 1;
        let ask_id = ask_id(
            &self.record.plan_id,
            &self.envelope.id,
            &self.record.current_state,
            self.asked,
        );
        let (awaited, id, q) = (response_event.clone(), ask_id.clone(), question.clone());
        self.transact(move |_, record| {
            Ok(machine::pause(
                record,
                "waiting for human input",
                Some((&awaited, &id, &q)),
            ))
        })
        .await?;
        let record = &self.record;
        let bus = self.runtime.bus.in_context_of(self.envelope.clone());
        let timeout_seconds = timeout.map(|t| t.as_secs_f64());
        if let Some(after) = timeout {
            let data = serde_json::json!({
                "plan_id": record.plan_id,
                "state": record.current_state,
                "awaiting": response_event,
                "awaiting_id": ask_id,
                "question": question,
                "timeout_seconds": timeout_seconds,
            });
            let mut env = bus.envelope_with_id(
                format!("{ask_id}-timeout"),
                Topic::ActionResults,
                machine::TIMEOUT_EVENT.into(),
                data,
            );
            env.correlation_id = Some(record.plan_id.clone());
            env.plan_id = Some(record.plan_id.clone());
            env.tenant_id.clone_from(&record.tenant_id);
            timers::schedule(&self.runtime.platform, env, after).await?;
        }
        let data = serde_json::json!({
            "plan_id": record.plan_id,
            "state": record.current_state,
            "question": question,
            "response_event": response_event,
            "timeout_seconds": timeout_seconds,
        });
        let mut env = bus.envelope(
            Topic::NotificationEvents,
            "notification.human_input".into(),
            data,
        );
        env.id = ask_id;
        env.correlation_id = Some(record.plan_id.clone());
        env.plan_id = Some(record.plan_id.clone());
        env.response_event = Some(response_event);
        env.response_topic = Some(Topic::ActionResults);
        env.tenant_id.clone_from(&record.tenant_id);
        env.user_id.clone_from(&record.user_id);
        env.session_id.clone_from(&record.session_id);
        bus.publish_envelope(env).await
    }

    /// Resumes a paused plan with `input` (available to templates as `results.user_input`),
    /// then applies the events kept while it was paused.
    ///
    /// ```
    /// # async fn f(mut plan: soorma::planner::PlanContext) -> soorma::Result<()> {
    /// plan.resume(serde_json::json!({"approved": true})).await
    /// # }
    /// ```
    pub async fn resume(&mut self, input: impl Serialize) -> Result<()> {
        let input = serde_json::to_value(input).map_err(|e| Error::serialize("resume input", e))?;
        let asked = self.awaiting_id();
        let handled = self.envelope.id.clone();
        let redelivered = self.redelivered;
        self.transact(move |plan, record| {
            if redelivered
                && machine::published_action(record).is_some_and(|kept| kept.handled_by == handled)
            {
                // An earlier handling of this event resumed the plan already (and left it at
                // the kept action, which `transact` publishes again): a pause since is not
                // resumed with this input. (A pause and resume later in one run are.)
                return Ok(Effects::default());
            }
            machine::resume(plan, record, input.clone())
        })
        .await?;
        self.forget_timer(asked).await;
        Ok(())
    }

    fn store(&self) -> &dyn StateStore {
        &**self.runtime.platform.state()
    }

    fn key(&self) -> StateKey {
        plan_key(
            self.record
                .tenant_id
                .as_deref()
                .unwrap_or(soorma_common::DEFAULT_TENANT),
            &self.record.plan_id,
        )
    }

    async fn reload(&mut self) -> Result<()> {
        let key = self.key();
        let stored = state::load::<PlanRecord>(self.store(), "plan", &key)
            .await?
            .ok_or_else(|| Error::PlanNotFound(self.record.plan_id.clone()))?;
        self.record = stored.value;
        self.revision = Some(stored.revision);
        Ok(())
    }

    /// Applies `step` to the stored record (revision-checked, re-applied to a fresh copy on a
    /// conflict), then publishes its effects: actions, tracker events, the reply.
    pub(crate) async fn transact(
        &mut self,
        step: impl Fn(&Plan, &mut PlanRecord) -> Result<Effects>,
    ) -> Result<()> {
        let plan = self.plan.clone();
        let handled = self.envelope.id.clone();
        let mut effects = None;
        self.update_record(|record| {
            let was_ended = ended(record);
            let mut fx = step(&plan, record)?;
            keep_published_action(&plan, record, &mut fx, &handled);
            if ended(record) {
                if !was_ended {
                    // This write ends the plan: this handler is the one that replies.
                    record.ended_by = Some(handled.clone());
                } else if record.ended_by.as_deref().is_some_and(|by| by != handled) {
                    // Ended by another event's handler, which replies (a redelivery of that
                    // event republishes the reply while it is unsent).
                    fx.reply = None;
                } else if fx.reply.is_none() && !record.reply_sent {
                    // A redelivery of the event that ended the plan, whose reply was not sent
                    // (a crash or a failed publish after the write): `finalize`, `fail` and
                    // `resume` change nothing on an ended plan, so the reply is rebuilt here.
                    fx.reply = Some(match record.status {
                        PlanStatus::Completed => Ok(record.result.clone().unwrap_or(Value::Null)),
                        _ => Err(record.error.clone().unwrap_or_default()),
                    });
                }
            }
            let changed = fx.changed;
            if changed {
                record.updated_at = Some(crate::util::now_rfc3339());
            }
            effects = Some(fx);
            Ok(if changed {
                Change::Write(())
            } else {
                Change::Keep(())
            })
        })
        .await?;
        if let Some(fx) = effects {
            self.publish(fx).await?;
        }
        Ok(())
    }

    async fn publish(&mut self, fx: Effects) -> Result<()> {
        let bus = self.runtime.bus.in_context_of(self.envelope.clone());
        let record = &self.record;
        // Lifecycle events first: the plan's next step can only follow its action's reply, so
        // every plan's events are published in the order they happened.
        for (event_type, data) in fx.tracker {
            let mut env = bus.envelope(Topic::SystemEvents, event_type.to_owned(), data);
            env.plan_id = Some(record.plan_id.clone());
            env.tenant_id.clone_from(&record.tenant_id);
            env.session_id.clone_from(&record.session_id);
            if let Err(e) = bus.publish_envelope(env).await {
                tracing::warn!(error = %e, event_type, "could not publish a plan lifecycle event");
            }
        }
        for action in fx.actions {
            let mut env = bus.envelope(Topic::ActionRequests, action.event_type, action.data);
            env.id = action.id;
            env.correlation_id = Some(record.plan_id.clone());
            env.plan_id = Some(record.plan_id.clone());
            env.response_event = Some(action.response_event);
            env.tenant_id.clone_from(&record.tenant_id);
            env.user_id.clone_from(&record.user_id);
            env.session_id.clone_from(&record.session_id);
            bus.check_request(&env).await?;
            bus.publish_envelope(env).await?;
        }
        if let Some(outcome) = fx.reply {
            self.reply(outcome).await?;
        }
        Ok(())
    }

    /// Replies to the goal (at least once: a stable id, and `reply_sent` once published).
    async fn reply(&mut self, outcome: std::result::Result<Value, String>) -> Result<()> {
        let record = &self.record;
        if record.reply_sent {
            return Ok(());
        }
        let reply = match outcome {
            Ok(result) => ActionReply::success(&record.plan_id, result),
            Err(error) => ActionReply::failure(&record.plan_id, error),
        };
        let route = ReplyRoute {
            event: record.response_event.clone(),
            topic: record.response_topic,
            correlation_id: record.correlation_id.clone(),
            tenant_id: record.tenant_id.clone(),
            user_id: record.user_id.clone(),
            session_id: record.session_id.clone(),
            plan_id: record.parent_plan_id.clone(),
        };
        let bus = self.runtime.bus.in_context_of(self.envelope.clone());
        publish_reply(&bus, &record.plan_id, route, reply).await?;
        self.update_record(|record| {
            if record.reply_sent {
                return Ok(Change::Keep(()));
            }
            record.reply_sent = true;
            Ok(Change::Write(()))
        })
        .await
    }

    /// Read-modify-write of the stored plan record (revision-checked, `f` re-applied to a
    /// fresh copy on a conflict); this context then holds the record as stored.
    async fn update_record(
        &mut self,
        f: impl FnMut(&mut PlanRecord) -> Result<Change<()>>,
    ) -> Result<()> {
        let key = self.key();
        let ((), stored) = state::update_with(
            self.store(),
            "plan",
            &key,
            || Error::PlanNotFound(key.key.clone()),
            f,
        )
        .await?;
        self.record = stored.value;
        self.revision = Some(stored.revision);
        Ok(())
    }
}

/// The action-request capabilities of the other agents registered on the platform, for
/// `tenant` (agents of another tenant are left out), one per request event: the first by agent
/// name (instances of one agent by id). From a registry read begun after this call, shared with
/// the platform's other users (planning calls at once, request checks, the gateway): a flood
/// of goals costs one registry read at a time.
async fn discover_capabilities(
    runtime: &AgentRuntime,
    tenant: &str,
) -> Result<Vec<AgentCapability>> {
    let read = runtime.platform.agents().current().await.map_err(|e| {
        EngineError::new(EngineErrorKind::Registry, "list agents for planning").with_source(e)
    })?;
    let mut seen = std::collections::BTreeSet::new();
    // A read lists agents by name, then instance id.
    Ok(read
        .iter()
        .filter(|a| a.name != *runtime.name)
        .filter(|a| a.tenant_id.as_deref().is_none_or(|t| t == tenant))
        .flat_map(|a| &a.capabilities)
        .filter(|c| c.consumed_event.topic == Topic::ActionRequests)
        .filter(|c| seen.insert(&c.consumed_event.event_name))
        .cloned()
        .collect())
}

/// Fails the plan a failed handler was working on (or replies to a goal whose plan never
/// started); `Ok(false)` when there is no plan and nothing to reply to.
pub(crate) async fn fail_plan(input: &HandlerInput, error: String, goal: bool) -> Result<bool> {
    tracing::warn!(error = %error, "planner handler failed; failing the plan");
    let mut ctx = if goal {
        PlanContext::load(input, &input.envelope.id, None).await?
    } else {
        PlanContext::for_event(input).await?
    };
    match ctx.as_mut() {
        Some(plan) => {
            plan.fail(error).await?;
            Ok(true)
        }
        None if goal && input.envelope.response_event.is_some() => {
            // The goal handler failed before starting a plan: reply with the error.
            let reply = ActionReply::failure(&input.envelope.id, error);
            send_reply(&input.bus(), &input.envelope, reply).await?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// The id of the `n`th question (from 1) that the handler of the event `handled` asks in
/// `state`: the same when that event is redelivered (the bus keeps one copy of the question),
/// another for every other handler run or question, so a second question is neither dropped as
/// a duplicate of the first nor answered by the first's timer.
fn ask_id(plan_id: &str, handled: &str, state: &str, n: u32) -> String {
    let n = n.to_le_bytes();
    let digest = crate::util::digest(&[handled.as_bytes(), state.as_bytes(), &n]);
    format!("{plan_id}-ask-{}", &digest[..16])
}

/// Cancels the plan `plan_id` of the cancel event's tenant (the goal's id is the plan's), when
/// it is this planner's and has not ended: it fails with "the plan was canceled" and replies
/// nothing (a canceled request gets no reply); its latest action gets a cancel of its own.
pub(crate) async fn cancel_plan(input: &HandlerInput, plan_id: &str) -> Result<()> {
    let Some(mut plan) = PlanContext::load(input, plan_id, None).await? else {
        return Ok(());
    };
    if plan
        .record
        .planner
        .as_deref()
        .is_some_and(|owner| owner != &*input.runtime.name)
    {
        return Ok(());
    }
    plan.transact(|_, record| {
        let mut fx = Effects::default();
        if ended(record) {
            return Ok(fx);
        }
        machine::fail(record, "the plan was canceled".into(), &mut fx);
        record.reply_sent = true;
        fx.reply = None;
        Ok(fx)
    })
    .await?;
    // Ended by this cancel (`transact` records it): its latest action, whatever the plan's
    // state or status (a paused plan's action may be out; a reasoning plan's state has no
    // action of its own); canceling one that finished does nothing.
    let record = &plan.record;
    if record.ended_by.as_deref() == Some(input.envelope.id.as_str()) && record.actions > 0 {
        let action = machine::action_id(&record.plan_id, record.actions);
        let tenant = input.envelope.tenant().to_owned();
        plan.runtime
            .bus
            .cancel(action)
            .tenant_id(tenant)
            .await
            .map(drop)?;
    }
    Ok(())
}

/// A published action's data over this many bytes (as JSON) is not kept in the plan record
/// (which holds the plan's results too, within one stored value).
const MAX_KEPT_ACTION_BYTES: usize = 64 * 1024;

/// Keeps the pending action a step published after applying events kept during a pause (its
/// event's redelivery cannot render it again: the kept events are not delivered again) and
/// drops a kept one the plan has moved past. When the event whose handling published it is
/// handled again, [`machine`]'s step publishes it again; a step without an event (`resume`)
/// that changes nothing does so here.
fn keep_published_action(plan: &Plan, record: &mut PlanRecord, fx: &mut Effects, handled: &str) {
    let latest = machine::action_id(&record.plan_id, record.actions);
    // The current state's own action (not one a kept event then moved the plan away from).
    let its_own = plan
        .definition()
        .states
        .get(&record.current_state)
        .and_then(|s| s.action.as_ref())
        .zip(fx.actions.last())
        .filter(|(own, published)| published.id == latest && own.event_type == published.event_type)
        .map(|(_, published)| published);
    if fx.applied_kept
        && record.status == PlanStatus::Running
        && let Some(action) = its_own
    {
        let bytes = serde_json::to_vec(&action.data).map_or(usize::MAX, |b| b.len());
        if bytes <= MAX_KEPT_ACTION_BYTES {
            record.published_action = Some(PublishedAction::new(
                handled,
                u32::try_from(record.history.len()).unwrap_or(u32::MAX),
                &action.id,
                &action.event_type,
                &action.response_event,
                action.data.clone(),
            ));
        } else {
            tracing::warn!(plan_id = %record.plan_id, action = %action.id, bytes, "an action published after applying kept events is too large to keep: a redelivery of the event that published it cannot publish it again");
            record.published_action = None;
        }
        fx.changed = true;
        return;
    }
    match machine::published_action(record) {
        Some(kept)
            if kept.handled_by == handled
                && !fx.changed
                && fx.actions.is_empty()
                && fx.reply.is_none() =>
        {
            tracing::debug!(plan_id = %record.plan_id, action = %kept.id, "the event that published the pending action came again; publishing it again");
            fx.actions.push(kept.into());
        }
        // Moved past it (or none kept): dropped with this step's write.
        None if fx.changed => record.published_action = None,
        _ => {}
    }
}

/// Whether the plan has ended (its reply is due or sent).
fn ended(record: &PlanRecord) -> bool {
    matches!(record.status, PlanStatus::Completed | PlanStatus::Failed)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use soorma_common::{PlanDefinition, PlanStep, StateAction, StateConfig, StateTransition};

    use super::*;
    use crate::layers::planner::machine::ActionIntent;

    /// `summing` asks `sum.requested`; its reply moves the plan to `checking` (no action), and
    /// `check.done` from there ends it.
    fn plan() -> Plan {
        Plan::new(
            PlanDefinition::new("sums", "")
                .with_initial_state("summing")
                .with_state(
                    StateConfig::new("summing", "")
                        .with_action(StateAction::new("sum.requested", "sum.done"))
                        .with_transition(StateTransition::new("sum.done", "checking")),
                )
                .with_state(
                    StateConfig::new("checking", "")
                        .with_transition(StateTransition::new("check.done", "done")),
                )
                .with_state(StateConfig::new("done", "").terminal()),
        )
        .unwrap()
    }

    fn running(actions: u32) -> PlanRecord {
        let mut record = PlanRecord::new("P", "sums", "summing");
        record.status = PlanStatus::Running;
        record.actions = actions;
        record.history = vec![PlanStep::new("summing", None, "t")];
        record
    }

    fn action(n: u32) -> ActionIntent {
        ActionIntent {
            id: machine::action_id("P", n),
            event_type: "sum.requested".into(),
            response_event: "sum.done".into(),
            data: json!({"found": n}),
        }
    }

    fn after_kept_events(actions: Vec<ActionIntent>) -> Effects {
        Effects {
            actions,
            changed: true,
            applied_kept: true,
            ..Effects::default()
        }
    }

    /// The action a step published after applying kept events is kept, published again when
    /// its event is handled again and changes nothing (also through a pause), and dropped once
    /// the plan enters another state.
    #[test]
    fn an_action_published_after_kept_events_is_kept_until_the_plan_moves_past_it() {
        let plan = plan();
        let mut record = running(2);
        let mut fx = after_kept_events(vec![action(1), action(2)]);
        keep_published_action(&plan, &mut record, &mut fx, "answer");
        let kept = record.published_action.clone().expect("kept");
        assert_eq!(
            (kept.id.as_str(), kept.handled_by.as_str(), kept.at_step),
            ("P-a2", "answer", 1)
        );
        assert_eq!(kept.data, json!({"found": 2}));

        // The answer again, changing nothing: the same action, as it was published.
        let mut again = Effects::default();
        keep_published_action(&plan, &mut record, &mut again, "answer");
        assert_eq!(again.actions, vec![action(2)]);
        // Another event changing nothing: nothing.
        let mut other = Effects::default();
        keep_published_action(&plan, &mut record, &mut other, "another");
        assert!(other.actions.is_empty());
        // A pause keeps it (the action is out); the answer again still publishes it.
        record.status = PlanStatus::Paused;
        let mut paused = Effects {
            changed: true,
            ..Effects::default()
        };
        keep_published_action(&plan, &mut record, &mut paused, "another");
        assert!(record.published_action.is_some());
        let mut again = Effects::default();
        keep_published_action(&plan, &mut record, &mut again, "answer");
        assert_eq!(again.actions, vec![action(2)]);
        record.status = PlanStatus::Running;

        // The action's reply moves the plan to `checking`, which has no action: dropped with
        // that write, and the answer again publishes nothing.
        record.current_state = "checking".into();
        record.history.push(PlanStep::new("checking", None, "t"));
        let mut moved = Effects {
            changed: true,
            ..Effects::default()
        };
        keep_published_action(&plan, &mut record, &mut moved, "reply");
        assert!(record.published_action.is_none());
        let mut again = Effects::default();
        keep_published_action(&plan, &mut record, &mut again, "answer");
        assert!(again.actions.is_empty());
    }

    /// Without kept events applied nothing is kept (a redelivery of `last_trigger` renders the
    /// action again); nor when a kept event moved the plan away from the action published; an
    /// ended plan drops what it kept.
    #[test]
    fn only_the_current_states_action_after_kept_events_is_kept() {
        let plan = plan();
        let mut record = running(1);
        let mut fx = Effects {
            actions: vec![action(1)],
            changed: true,
            ..Effects::default()
        };
        keep_published_action(&plan, &mut record, &mut fx, "reply");
        assert!(record.published_action.is_none());

        let mut moved_on = running(1);
        moved_on.current_state = "checking".into();
        keep_published_action(
            &plan,
            &mut moved_on,
            &mut after_kept_events(vec![action(1)]),
            "answer",
        );
        assert!(moved_on.published_action.is_none());

        keep_published_action(
            &plan,
            &mut record,
            &mut after_kept_events(vec![action(1)]),
            "answer",
        );
        assert!(record.published_action.is_some());
        record.status = PlanStatus::Completed;
        let mut ended = Effects {
            changed: true,
            reply: Some(Ok(json!(1))),
            ..Effects::default()
        };
        keep_published_action(&plan, &mut record, &mut ended, "reply");
        assert!(record.published_action.is_none());
    }

    /// An action too large to keep is not kept (the record holds the plan's results too).
    #[test]
    fn a_large_action_is_not_kept() {
        let plan = plan();
        let mut record = running(1);
        let mut big = action(1);
        big.data = json!("x".repeat(MAX_KEPT_ACTION_BYTES));
        keep_published_action(
            &plan,
            &mut record,
            &mut after_kept_events(vec![big]),
            "answer",
        );
        assert!(record.published_action.is_none());
    }
}

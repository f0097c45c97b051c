//! The tracker: a read model of plans (and of workflow runs: [`Tracker::workflow`]), fed by
//! the events they publish.
//!
//! A [`Tracker`] observes `system-events` (the plan lifecycle — `plan.started`,
//! `plan.state_changed`, `plan.paused`, `plan.resumed`, `plan.completed`, `plan.failed` — and
//! `task.progress`), plus the requests and replies on `action-requests` / `action-results` that
//! carry a plan id, and keeps, per plan: where it is, what happened and which tasks ran.
//!
//! It observes the whole bus (one stream of every topic, so events are applied in the order
//! they were published) and keeps the events of its tenant that concern plans; the rest is
//! skipped. It lives in memory and sees events from the moment it started. For a plan it did not watch
//! from its start, [`Tracker::plan`] answers from the stored plan record (status, state,
//! history) and adds whatever tasks it saw.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use soorma_common::{ActionReply, EventEnvelope, PlanRecord, PlanStatus, Topic};
use tokio::sync::watch;

use super::sessions::Plans;
use super::workflow_view::{WorkflowView, WorkflowViews};
use crate::error::{Error, Result};
use crate::platform::Platform;
use crate::protocol::progress::progress_report;
use crate::spi::bus::Subscription;
use soorma_common::events::TASK_PROGRESS as TASK_PROGRESS_EVENT;

/// At most this many plans are kept by default (the least recently updated finished plans go
/// first).
const DEFAULT_MAX_PLANS: usize = 10_000;

/// Where a [`PlanView`]'s answers come from.
///
/// ```
/// use soorma::planner::ViewSource;
/// assert_ne!(ViewSource::Events, ViewSource::Stored);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ViewSource {
    /// Every lifecycle event since `plan.started` was seen.
    Events,
    /// The tracker started after the plan: status, state and history come from the stored
    /// plan record, tasks from the events seen.
    Partial,
    /// Only the stored plan record (the tracker saw no event of the plan).
    Stored,
}

/// Where a task of a plan stands, as far as its events tell.
///
/// ```
/// use soorma::planner::TaskState;
/// assert!(TaskState::Failed.is_finished() && !TaskState::Running.is_finished());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskState {
    /// Requested; nothing heard from the agent yet.
    Requested,
    /// The agent reported progress.
    Running,
    /// The agent reported it waits (e.g. for delegated work).
    Waiting,
    /// Replied with a success.
    Completed,
    /// Replied with an error.
    Failed,
}

impl TaskState {
    /// Whether the task has replied.
    ///
    /// ```
    /// assert!(soorma::planner::TaskState::Completed.is_finished());
    /// ```
    pub fn is_finished(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Failed)
    }

    fn from_word(word: &str) -> Self {
        match word {
            "waiting" => TaskState::Waiting,
            "completed" => TaskState::Completed,
            "failed" => TaskState::Failed,
            _ => TaskState::Running,
        }
    }
}

/// One lifecycle event of a plan.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// # let platform = soorma::Platform::embedded();
/// let tracker = soorma::planner::Tracker::start(&platform).await?;
/// if let Some(plan) = tracker.watched("plan-1") {
///     for e in &plan.events {
///         println!("{} {} {:?}", e.at.as_deref().unwrap_or("?"), e.event_type, e.state);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PlanEvent {
    /// The event's id (`None` for events rebuilt from a stored plan record).
    pub event_id: Option<String>,
    /// `plan.started`, `plan.state_changed`, `plan.paused`, `plan.resumed`, `plan.completed`
    /// or `plan.failed`.
    pub event_type: String,
    /// When it was published (RFC 3339).
    pub at: Option<String>,
    /// The state it concerns (the state entered, for `plan.state_changed`).
    pub state: Option<String>,
    /// The event's data.
    pub data: Value,
}

/// One task a plan ran: a request published with the plan's id (its actions, sub-plan goals
/// and the work delegated for them), with what its agent reported.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// # let platform = soorma::Platform::embedded();
/// let tracker = soorma::planner::Tracker::start(&platform).await?;
/// if let Some(plan) = tracker.watched("plan-1") {
///     for t in &plan.tasks {
///         println!("{} {:?} by {:?}: {:?} {:?}", t.task_id, t.event_type, t.agent, t.state, t.progress);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct TaskView {
    /// The task id (the request's event id).
    pub task_id: String,
    /// The request's event type (when the request was seen).
    pub event_type: Option<String>,
    /// The agent working on it (from its progress reports or its reply).
    pub agent: Option<String>,
    /// Where it stands.
    pub state: TaskState,
    /// The last reported fraction done (1.0 once it succeeded).
    pub progress: Option<f64>,
    /// The last progress message.
    pub message: Option<String>,
    /// The error it replied with.
    pub error: Option<String>,
    /// When it was requested (RFC 3339).
    pub requested_at: Option<String>,
    /// When it was last heard of (RFC 3339).
    pub updated_at: Option<String>,
}

impl TaskView {
    fn new(task_id: &str) -> Self {
        Self {
            task_id: task_id.to_owned(),
            event_type: None,
            agent: None,
            state: TaskState::Requested,
            progress: None,
            message: None,
            error: None,
            requested_at: None,
            updated_at: None,
        }
    }
}

/// What the tracker knows about a plan: where it is, what happened, which tasks ran.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// # let platform = soorma::Platform::embedded();
/// let tracker = soorma::planner::Tracker::start(&platform).await?;
/// if let Some(plan) = tracker.plan("plan-1").await? {
///     println!("{:?} in {:?} since {:?}", plan.status, plan.current_state, plan.updated_at);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PlanView {
    /// The plan id.
    pub plan_id: String,
    /// Its tenant.
    pub tenant: String,
    /// Its plan type, once known.
    pub plan_type: Option<String>,
    /// Where it stands (`Pending` until its start is known).
    pub status: PlanStatus,
    /// The state it is in, once known.
    pub current_state: Option<String>,
    /// Its session.
    pub session_id: Option<String>,
    /// The plan that started it, for a sub-plan.
    pub parent_plan_id: Option<String>,
    /// The sub-plans it started (as far as the tracker saw).
    pub sub_plans: Vec<String>,
    /// When it started (RFC 3339).
    pub started_at: Option<String>,
    /// When it last changed (RFC 3339).
    pub updated_at: Option<String>,
    /// Its result, once completed.
    pub result: Option<Value>,
    /// Its error, once failed.
    pub error: Option<String>,
    /// Its lifecycle events, in order (the tracker keeps the last 256).
    pub events: Vec<PlanEvent>,
    /// How many of its earliest events the tracker no longer keeps.
    pub events_dropped: usize,
    /// The tasks it ran, in the order they were first seen (the tracker keeps the first 1,024).
    pub tasks: Vec<TaskView>,
    /// How many events about tasks past those kept the tracker saw (and did not apply).
    pub tasks_dropped: usize,
    /// Where these answers come from.
    pub source: ViewSource,
}

impl PlanView {
    fn new(plan_id: &str, tenant: &str) -> Self {
        Self {
            plan_id: plan_id.to_owned(),
            tenant: tenant.to_owned(),
            plan_type: None,
            status: PlanStatus::Pending,
            current_state: None,
            session_id: None,
            parent_plan_id: None,
            sub_plans: Vec::new(),
            started_at: None,
            updated_at: None,
            result: None,
            error: None,
            events: Vec::new(),
            events_dropped: 0,
            tasks: Vec::new(),
            tasks_dropped: 0,
            source: ViewSource::Partial,
        }
    }

    /// A view of a stored plan record: its history becomes `plan.state_changed` events (the
    /// record keeps no pause/resume history), its end a `plan.completed` / `plan.failed`.
    ///
    /// ```
    /// use soorma::common::{PlanRecord, PlanStatus, PlanStep};
    /// use soorma::planner::{PlanView, ViewSource};
    ///
    /// let mut record = PlanRecord::new("p1", "research", "start");
    /// record.status = PlanStatus::Running;
    /// record.history.push(PlanStep::new("start", None, "2026-01-01T00:00:00.000Z"));
    /// let view = PlanView::from_record(&record, "default");
    /// assert_eq!(view.source, ViewSource::Stored);
    /// assert_eq!(view.current_state.as_deref(), Some("start"));
    /// assert_eq!(view.events.len(), 2); // started, entered `start`
    /// ```
    pub fn from_record(record: &PlanRecord, tenant: &str) -> Self {
        let mut view = Self::new(&record.plan_id, tenant);
        view.source = ViewSource::Stored;
        view.plan_type = Some(record.plan_type.clone());
        view.status = record.status;
        view.current_state = Some(record.current_state.clone());
        view.session_id.clone_from(&record.session_id);
        view.parent_plan_id.clone_from(&record.parent_plan_id);
        view.started_at.clone_from(&record.created_at);
        view.updated_at = record
            .updated_at
            .clone()
            .or_else(|| record.created_at.clone());
        view.result.clone_from(&record.result);
        view.error.clone_from(&record.error);
        let id = &record.plan_id;
        let mut push = |event_type: &str, at: Option<String>, state: Option<&str>, data: Value| {
            view.events.push(PlanEvent {
                event_id: None,
                event_type: event_type.to_owned(),
                at,
                state: state.map(str::to_owned),
                data,
            });
        };
        if record.status != PlanStatus::Pending {
            let first = record.history.first().map(|s| s.state.as_str());
            push(
                "plan.started",
                record.created_at.clone(),
                first,
                json!({"plan_id": id, "plan_type": record.plan_type, "state": first}),
            );
        }
        let mut from = record.history.first().map(|s| s.state.clone());
        for step in &record.history {
            push(
                "plan.state_changed",
                Some(step.at.clone()),
                Some(&step.state),
                json!({"plan_id": id, "from": from, "to": step.state, "on_event": step.on_event}),
            );
            from = Some(step.state.clone());
        }
        let state = Some(record.current_state.as_str());
        match record.status {
            PlanStatus::Completed => push(
                "plan.completed",
                record.updated_at.clone(),
                state,
                json!({"plan_id": id, "state": record.current_state, "result": record.result}),
            ),
            PlanStatus::Failed => push(
                "plan.failed",
                record.updated_at.clone(),
                state,
                json!({"plan_id": id, "state": record.current_state, "error": record.error}),
            ),
            PlanStatus::Paused => push(
                "plan.paused",
                record.updated_at.clone(),
                state,
                json!({"plan_id": id, "state": record.current_state, "reason": record.state.get("pause_reason")}),
            ),
            _ => {}
        }
        view
    }

    /// Whether the plan has finished (completed or failed).
    ///
    /// ```
    /// let view = soorma::planner::PlanView::from_record(&soorma::common::PlanRecord::new("p", "t", "s"), "default");
    /// assert!(!view.is_finished());
    /// ```
    pub fn is_finished(&self) -> bool {
        matches!(self.status, PlanStatus::Completed | PlanStatus::Failed)
    }

    /// A task of the plan by id.
    ///
    /// ```
    /// let view = soorma::planner::PlanView::from_record(&soorma::common::PlanRecord::new("p", "t", "s"), "default");
    /// assert!(view.task("p-a1").is_none());
    /// ```
    pub fn task(&self, task_id: &str) -> Option<&TaskView> {
        self.tasks.iter().find(|t| t.task_id == task_id)
    }

    /// The task `task_id`, added when new (`None`, counted, when the plan has as many tasks
    /// as the tracker keeps).
    fn task_mut(&mut self, task_id: &str) -> Option<&mut TaskView> {
        let at = match self.tasks.iter().position(|t| t.task_id == task_id) {
            Some(at) => at,
            None if self.tasks.len() >= MAX_TASKS_PER_PLAN => {
                self.tasks_dropped += 1;
                return None;
            }
            None => {
                self.tasks.push(TaskView::new(task_id));
                self.tasks.len() - 1
            }
        };
        Some(&mut self.tasks[at])
    }
}

/// What the tracker keeps of a plan at most: events published on a tenant's subjects (by
/// anyone who may publish there) must not grow its memory without bound.
const MAX_EVENTS_PER_PLAN: usize = 256;
const MAX_TASKS_PER_PLAN: usize = 1024;
const MAX_SUB_PLANS: usize = 1024;
/// An event's data longer than this (as JSON) is kept as `{"truncated": true, "over_bytes": n}`
/// (`n` this limit).
const MAX_EVENT_DATA_BYTES: usize = 2048;
/// A plan's result longer than this (as JSON) is kept the same way.
const MAX_RESULT_BYTES: usize = 64 * 1024;
/// Texts (errors, progress messages) are cut to this.
const MAX_TEXT_BYTES: usize = 1024;
/// What the whole model keeps, counted as JSON bytes: past it, the least recently updated
/// plans (finished ones first) are dropped.
const MODEL_BYTES: usize = 32 << 20;
/// What a plan, a task, an event or a sub-plan counts for besides the lengths of its texts
/// and JSON.
const ITEM_COST: usize = 64;
/// Event ids remembered (hashed with their plan), for all plans together.
const SEEN: usize = 65_536;

fn text_len(text: &Option<String>) -> usize {
    text.as_ref().map_or(0, String::len)
}

/// `value`, or a marker saying it was over `max` bytes of JSON; with what it counts for.
fn kept(value: Value, max: usize) -> (Value, usize) {
    match crate::util::json_len_within(&value, max) {
        Some(len) => (value, len),
        None => (json!({"truncated": true, "over_bytes": max}), 64),
    }
}

fn bounded_text(value: Option<String>) -> Option<String> {
    value.map(|t| crate::util::bounded(&t, MAX_TEXT_BYTES))
}

/// One plan in the model.
struct Entry {
    view: PlanView,
    /// What each kept event counts for, in order.
    event_costs: std::collections::VecDeque<usize>,
    /// What its result counts for.
    result_cost: usize,
    /// What the entry counts for in the model's budget.
    cost: usize,
    /// The model's clock when the entry last changed (for eviction).
    touched: u64,
}

impl Entry {
    /// Keeps one more event (the oldest goes past [`MAX_EVENTS_PER_PLAN`]).
    fn push_event(&mut self, mut event: PlanEvent) {
        let (data, data_cost) = kept(std::mem::take(&mut event.data), MAX_EVENT_DATA_BYTES);
        event.data = data;
        let cost = ITEM_COST
            + data_cost
            + event.event_type.len()
            + text_len(&event.event_id)
            + text_len(&event.at)
            + text_len(&event.state);
        self.view.events.push(event);
        self.event_costs.push_back(cost);
        if self.view.events.len() > MAX_EVENTS_PER_PLAN {
            self.view.events.remove(0);
            self.event_costs.pop_front();
            self.view.events_dropped += 1;
        }
    }

    /// What it counts for now: the lengths of what it holds (its texts, its events' and
    /// result's JSON) and a little for each item.
    fn recount(&mut self) -> usize {
        let v = &self.view;
        let texts = v.plan_id.len()
            + v.tenant.len()
            + [
                &v.plan_type,
                &v.current_state,
                &v.session_id,
                &v.parent_plan_id,
                &v.started_at,
                &v.updated_at,
                &v.error,
            ]
            .into_iter()
            .map(text_len)
            .sum::<usize>();
        let tasks: usize = v
            .tasks
            .iter()
            .map(|t| {
                ITEM_COST
                    + t.task_id.len()
                    + [
                        &t.event_type,
                        &t.agent,
                        &t.message,
                        &t.error,
                        &t.requested_at,
                        &t.updated_at,
                    ]
                    .into_iter()
                    .map(text_len)
                    .sum::<usize>()
            })
            .sum();
        let sub_plans: usize = v.sub_plans.iter().map(|id| ITEM_COST + id.len()).sum();
        self.cost = ITEM_COST
            + texts
            + tasks
            + sub_plans
            + self.event_costs.iter().sum::<usize>()
            + self.result_cost;
        self.cost
    }
}

/// The read model: plans by id, and workflow runs by task id, for one tenant.
struct Model {
    tenant: String,
    plans: HashMap<String, Entry>,
    workflows: WorkflowViews,
    clock: u64,
    max_plans: usize,
    /// What the plans count for together ([`MODEL_BYTES`] at most, past an event).
    cost: usize,
    /// The events applied lately (a duplicate delivery changes nothing).
    seen: crate::util::SeenIds,
}

const LIFECYCLE: [&str; 6] = [
    "plan.started",
    "plan.state_changed",
    "plan.paused",
    "plan.resumed",
    "plan.completed",
    "plan.failed",
];

impl Model {
    fn new(tenant: String, max_plans: usize) -> Self {
        Self {
            tenant,
            plans: HashMap::new(),
            workflows: WorkflowViews::new(max_plans),
            clock: 0,
            max_plans: max_plans.max(1),
            cost: 0,
            seen: crate::util::SeenIds::new(SEEN),
        }
    }

    /// Counts what `plan_id`'s entry holds now, and drops the least recently updated plans
    /// but those of `keep` (finished ones first) while the model holds more than
    /// [`MODEL_BYTES`].
    fn recount(&mut self, plan_id: &str, keep: &[&str]) {
        if let Some(entry) = self.plans.get_mut(plan_id) {
            let before = entry.cost;
            self.cost = self.cost - before + entry.recount();
        }
        while self.cost > MODEL_BYTES {
            let Some(id) = self.least_recent(keep) else {
                break;
            };
            if let Some(gone) = self.plans.remove(&id) {
                self.cost -= gone.cost;
            }
        }
    }

    /// The least recently updated plan not in `keep`, a finished one first.
    fn least_recent(&self, keep: &[&str]) -> Option<String> {
        super::workflow_view::least_recent(&self.plans, keep, |e| (e.view.is_finished(), e.touched))
    }

    /// The entry of `plan_id`, if the event is new to it; `None` for a duplicate delivery. A
    /// plan made room for is not one of `keep`.
    fn entry(&mut self, plan_id: &str, event_id: &str, keep: &[&str]) -> Option<&mut Entry> {
        if !self.seen.first(plan_id, event_id) {
            return None;
        }
        self.clock += 1;
        let clock = self.clock;
        let tenant = self.tenant.clone();
        if !self.plans.contains_key(plan_id) {
            self.evict_for(plan_id, keep);
        }
        let entry = self
            .plans
            .entry(plan_id.to_owned())
            .or_insert_with(|| Entry {
                view: PlanView::new(plan_id, &tenant),
                event_costs: std::collections::VecDeque::new(),
                result_cost: 0,
                cost: 0,
                touched: clock,
            });
        entry.touched = clock;
        Some(entry)
    }

    /// Makes room for one more plan: drops the least recently updated finished plan, or else
    /// the least recently updated one.
    fn evict_for(&mut self, incoming: &str, keep: &[&str]) {
        if self.plans.len() < self.max_plans {
            return;
        }
        let mut kept = keep.to_vec();
        kept.push(incoming);
        if let Some(id) = self.least_recent(&kept)
            && let Some(gone) = self.plans.remove(&id)
        {
            self.cost -= gone.cost;
        }
    }

    /// Applies one event; whether the model changed.
    fn apply(&mut self, env: &EventEnvelope) -> bool {
        if env.tenant() != self.tenant {
            return false;
        }
        let workflow = matches!(env.topic, Topic::SystemEvents | Topic::ActionResults)
            && self.workflows.apply(env);
        workflow
            | match env.topic {
                Topic::SystemEvents if LIFECYCLE.contains(&env.event_type.as_str()) => {
                    self.apply_lifecycle(env)
                }
                Topic::SystemEvents if env.event_type == TASK_PROGRESS_EVENT => {
                    self.apply_progress(env)
                }
                Topic::ActionRequests => self.apply_request(env),
                Topic::ActionResults => self.apply_reply(env),
                _ => false,
            }
    }

    fn apply_lifecycle(&mut self, env: &EventEnvelope) -> bool {
        let data = &env.data;
        let text = |field: &str| {
            data.get(field)
                .and_then(Value::as_str)
                .map(|t| crate::util::bounded(t, MAX_TEXT_BYTES))
        };
        // Ids longer than any the SDK makes name no plan: `Err` for such an id.
        let id = |field: &str| match data.get(field).and_then(Value::as_str) {
            Some(id) if id.len() > crate::spi::envelope::MAX_ID_LEN => Err(()),
            id => Ok(id.map(str::to_owned)),
        };
        let Ok(Some(plan_id)) = id("plan_id").map(|id| id.or_else(|| env.plan_id.clone())) else {
            return false;
        };
        let parent = id("parent_plan_id").ok().flatten();
        let Some(entry) = self.entry(&plan_id, &env.id, &[]) else {
            return false;
        };
        let view = &mut entry.view;
        let state = match env.event_type.as_str() {
            "plan.state_changed" => text("to"),
            _ => text("state"),
        };
        // Events of one plan are published in order, but a late copy (another process, a
        // redelivery) must not take a finished plan back.
        let terminal = matches!(env.event_type.as_str(), "plan.completed" | "plan.failed");
        let moves = terminal || !view.is_finished();
        match env.event_type.as_str() {
            "plan.started" => {
                view.source = ViewSource::Events;
                view.plan_type = text("plan_type");
                view.started_at.clone_from(&env.time);
                view.parent_plan_id.clone_from(&parent);
                view.session_id = text("session_id").or_else(|| env.session_id.clone());
            }
            "plan.paused" if moves => view.status = PlanStatus::Paused,
            "plan.resumed" if moves => view.status = PlanStatus::Running,
            "plan.completed" => {
                view.status = PlanStatus::Completed;
                let (result, cost) = match data.get("result") {
                    Some(result) => {
                        let (result, cost) = kept(result.clone(), MAX_RESULT_BYTES);
                        (Some(result), cost)
                    }
                    None => (None, 0),
                };
                view.result = result;
                entry.result_cost = cost;
            }
            "plan.failed" => {
                view.status = PlanStatus::Failed;
                view.error = text("error");
            }
            _ => {}
        }
        if view.status == PlanStatus::Pending {
            view.status = PlanStatus::Running; // any lifecycle event means it started
        }
        if moves {
            if state.is_some() {
                view.current_state.clone_from(&state);
            }
            view.updated_at.clone_from(&env.time);
        }
        entry.push_event(PlanEvent {
            event_id: Some(env.id.clone()),
            event_type: env.event_type.clone(),
            at: env.time.clone(),
            state,
            data: data.clone(),
        });
        self.recount(&plan_id, &[&plan_id]);
        if let Some(parent) = parent.filter(|p| env.event_type == "plan.started" && *p != plan_id) {
            let child_event = format!("{}#sub-plan", env.id);
            if let Some(parent_entry) = self.entry(&parent, &child_event, &[&plan_id])
                && parent_entry.view.sub_plans.len() < MAX_SUB_PLANS
                && !parent_entry.view.sub_plans.contains(&plan_id)
            {
                parent_entry.view.sub_plans.push(plan_id.clone());
            }
            self.recount(&parent, &[&parent, &plan_id]);
        }
        true
    }

    fn apply_progress(&mut self, env: &EventEnvelope) -> bool {
        let Some(progress) = progress_report(env).filter(|p| {
            p.task_id.len() <= crate::spi::envelope::MAX_ID_LEN
                && p.plan_id
                    .as_ref()
                    .is_none_or(|id| id.len() <= crate::spi::envelope::MAX_ID_LEN)
        }) else {
            return false;
        };
        let Some(plan_id) = progress.plan_id.clone().or_else(|| env.plan_id.clone()) else {
            return false;
        };
        let Some(entry) = self.entry(&plan_id, &env.id, &[]) else {
            return false;
        };
        let Some(task) = entry.view.task_mut(&progress.task_id) else {
            return false;
        };
        task.agent = Some(crate::util::bounded(&progress.agent, MAX_TEXT_BYTES));
        if progress.message.is_some() {
            task.message = bounded_text(progress.message);
        }
        // A report handled after the reply (another process may publish it late) does not
        // reopen the task.
        if !task.state.is_finished() {
            task.state = TaskState::from_word(&progress.status);
            task.progress = Some(progress.progress);
        }
        task.updated_at.clone_from(&env.time);
        self.recount(&plan_id, &[&plan_id]);
        true
    }

    fn apply_request(&mut self, env: &EventEnvelope) -> bool {
        let Some(plan_id) = env.plan_id.clone() else {
            return false;
        };
        if env.response_event.is_none() {
            return false;
        }
        let Some(entry) = self.entry(&plan_id, &env.id, &[]) else {
            return false;
        };
        let Some(task) = entry.view.task_mut(&env.id) else {
            return false;
        };
        task.event_type = Some(env.event_type.clone());
        task.requested_at.clone_from(&env.time);
        if task.updated_at.is_none() {
            task.updated_at.clone_from(&env.time);
        }
        self.recount(&plan_id, &[&plan_id]);
        true
    }

    fn apply_reply(&mut self, env: &EventEnvelope) -> bool {
        let Some(plan_id) = env.plan_id.clone() else {
            return false;
        };
        if env.data.get("request_id").is_none() {
            return false; // not an action reply (e.g. a person's answer to a question)
        }
        let Ok(reply) = serde_json::from_value::<ActionReply>(env.data.clone()) else {
            return false;
        };
        if reply.request_id.len() > crate::spi::envelope::MAX_ID_LEN {
            return false;
        }
        let Some(entry) = self.entry(&plan_id, &env.id, &[]) else {
            return false;
        };
        let Some(task) = entry.view.task_mut(&reply.request_id) else {
            return false;
        };
        task.agent.get_or_insert_with(|| env.source.clone());
        if reply.success {
            task.state = TaskState::Completed;
            task.progress = Some(1.0);
        } else {
            task.state = TaskState::Failed;
            task.error = bounded_text(reply.error);
        }
        task.updated_at.clone_from(&env.time);
        self.recount(&plan_id, &[&plan_id]);
        true
    }
}

struct Shared {
    tenant: String,
    model: Mutex<Model>,
    plans: Plans,
    /// Bumped after every change of the model (waiters watch it).
    version: watch::Sender<u64>,
    /// Set once the observed streams ended (the platform shut down).
    closed: AtomicBool,
}

impl Shared {
    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A tracker for one tenant; start it with [`start`](Self::start).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// let platform = soorma::Platform::embedded();
/// let tracker = soorma::planner::Tracker::builder(&platform)
///     .tenant("acme")
///     .max_plans(1_000)
///     .start()
///     .await?;
/// assert_eq!(tracker.tenant(), "acme");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a tracker builder does nothing until started"]
pub struct TrackerBuilder {
    platform: Platform,
    tenant: String,
    max_plans: usize,
}

impl TrackerBuilder {
    /// Tracks the plans of `tenant` (default: the default tenant).
    ///
    /// ```
    /// # let platform = soorma::Platform::embedded();
    /// let builder = soorma::planner::Tracker::builder(&platform).tenant("acme");
    /// # let _ = builder;
    /// ```
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = tenant.into();
        self
    }

    /// Keeps at most `max_plans` plans (default 10,000); beyond that the least recently
    /// updated finished plan (or, if none finished, the least recently updated plan) is
    /// dropped from memory — [`Tracker::plan`] still answers for it from the store.
    ///
    /// ```
    /// # let platform = soorma::Platform::embedded();
    /// let builder = soorma::planner::Tracker::builder(&platform).max_plans(100);
    /// # let _ = builder;
    /// ```
    pub fn max_plans(mut self, max_plans: usize) -> Self {
        self.max_plans = max_plans;
        self
    }

    /// Starts observing; events published after this returns are seen.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let platform = soorma::Platform::embedded();
    /// let tracker = soorma::planner::Tracker::builder(&platform).start().await?;
    /// assert!(tracker.watched_plans().is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn start(self) -> Result<Tracker> {
        // One stream of every topic keeps the order events were published in (a progress
        // report before the reply that ends the task); the other topics are skipped.
        let sub = self.platform.bus().observe(None).await?;
        let shared = Arc::new(Shared {
            tenant: self.tenant.clone(),
            model: Mutex::new(Model::new(self.tenant.clone(), self.max_plans)),
            plans: self.platform.plans().for_tenant(self.tenant),
            version: watch::channel(0).0,
            closed: AtomicBool::new(false),
        });
        let task = tokio::spawn(feed(sub, shared.clone()));
        Ok(Tracker { shared, task })
    }
}

/// Applies every observed event to the model until the streams end.
async fn feed(mut sub: Box<dyn Subscription>, shared: Arc<Shared>) {
    while let Some(delivery) = sub.next().await {
        if shared.model().apply(&delivery.envelope) {
            shared.version.send_modify(|v| *v += 1);
        }
    }
    shared.closed.store(true, Ordering::SeqCst);
    shared.version.send_modify(|v| *v += 1);
}

/// The read model of plans: where a plan is, what happened, which tasks ran.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use soorma::prelude::*;
/// use soorma::common::{PlanDefinition, PlanStatus, StateAction, StateConfig, StateTransition};
/// use soorma::planner::{TaskState, Tracker};
///
/// async fn fetch(mut task: TaskContext) -> soorma::Result<()> {
///     task.progress(0.5, "half way").await?;
///     task.complete(serde_json::json!({"pages": 3})).await?;
///     Ok(())
/// }
/// async fn goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
///     goal.start(&plan).await?;
///     Ok(())
/// }
///
/// let plan = Plan::new(PlanDefinition::new("crawl", "fetch, then done")
///     .with_state(StateConfig::new("start", "fetch")
///         .with_action(StateAction::new("fetch.requested", "fetch.completed"))
///         .with_transition(StateTransition::new("fetch.completed", "done")))
///     .with_state(StateConfig::new("done", "").terminal()))?;
/// let platform = Platform::embedded();
/// let tracker = Tracker::start(&platform).await?;
/// let worker = Worker::new("fetcher").use_registered_handlers(false)
///     .handler(Handler::on_task("fetch.requested", fetch)).start(&platform).await?;
/// let planner = Planner::new("crawler").use_registered_handlers(false)
///     .with_state(Arc::new(plan))
///     .handler(Handler::on_goal("crawl.goal", goal)).start(&platform).await?;
/// let reply = platform.client("docs").request("crawl.goal", (), "crawl.done").await?;
/// let plan_id = reply.envelope.data["request_id"].as_str().unwrap().to_owned();
///
/// let plan = tracker
///     .wait_for(&plan_id, Duration::from_secs(5), |p| p.is_finished() && p.tasks.iter().all(|t| t.state.is_finished()))
///     .await?;
/// // Where is it?
/// assert_eq!((plan.status, plan.current_state.as_deref()), (PlanStatus::Completed, Some("done")));
/// // What happened?
/// let kinds: Vec<_> = plan.events.iter().map(|e| e.event_type.as_str()).collect();
/// assert_eq!(kinds, ["plan.started", "plan.state_changed", "plan.state_changed", "plan.completed"]);
/// // Which tasks ran?
/// let task = &plan.tasks[0];
/// assert_eq!((task.event_type.as_deref(), task.agent.as_deref()), (Some("fetch.requested"), Some("fetcher")));
/// assert_eq!(task.state, TaskState::Completed);
/// assert_eq!(task.message.as_deref(), Some("half way"));
/// # worker.shutdown().await?; planner.shutdown().await
/// # }
/// ```
pub struct Tracker {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let model = self.shared.model();
        f.debug_struct("Tracker")
            .field("tenant", &self.shared.tenant)
            .field("plans", &model.plans.len())
            .finish_non_exhaustive()
    }
}

impl Tracker {
    /// A builder (tenant, memory bound) for a tracker on `platform`.
    ///
    /// ```
    /// # let platform = soorma::Platform::embedded();
    /// let builder = soorma::planner::Tracker::builder(&platform);
    /// # let _ = builder;
    /// ```
    pub fn builder(platform: &Platform) -> TrackerBuilder {
        TrackerBuilder {
            platform: platform.clone(),
            tenant: soorma_common::DEFAULT_TENANT.to_owned(),
            max_plans: DEFAULT_MAX_PLANS,
        }
    }

    /// Starts a tracker for the default tenant.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let platform = soorma::Platform::embedded();
    /// let tracker = soorma::planner::Tracker::start(&platform).await?;
    /// assert_eq!(tracker.tenant(), "default");
    /// # Ok(()) }
    /// ```
    pub async fn start(platform: &Platform) -> Result<Tracker> {
        Self::builder(platform).start().await
    }

    /// The tenant it tracks.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let platform = soorma::Platform::embedded();
    /// let tracker = soorma::planner::Tracker::builder(&platform).tenant("acme").start().await?;
    /// assert_eq!(tracker.tenant(), "acme");
    /// # Ok(()) }
    /// ```
    pub fn tenant(&self) -> &str {
        &self.shared.tenant
    }

    /// Where plan `plan_id` is, what happened and which tasks ran: from the events when the
    /// tracker watched the plan from its start; otherwise from the stored plan record, with the
    /// tasks the tracker saw ([`ViewSource`] says which). `None` for an unknown plan.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let platform = soorma::Platform::embedded();
    /// let tracker = soorma::planner::Tracker::start(&platform).await?;
    /// assert!(tracker.plan("no-such-plan").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn plan(&self, plan_id: &str) -> Result<Option<PlanView>> {
        let watched = self.watched(plan_id);
        if let Some(view) = &watched
            && view.source == ViewSource::Events
        {
            return Ok(watched);
        }
        let Some(record) = self.shared.plans.get(plan_id).await? else {
            return Ok(watched);
        };
        let mut stored = PlanView::from_record(&record, self.tenant());
        stored.sub_plans = self.sub_plans_seen(plan_id);
        if let Some(seen) = watched {
            stored.source = ViewSource::Partial;
            stored.tasks = seen.tasks;
            for sub in seen.sub_plans {
                if !stored.sub_plans.contains(&sub) {
                    stored.sub_plans.push(sub);
                }
            }
        }
        Ok(Some(stored))
    }

    fn sub_plans_seen(&self, plan_id: &str) -> Vec<String> {
        let model = self.shared.model();
        let mut subs: Vec<_> = model
            .plans
            .values()
            .filter(|e| e.view.parent_plan_id.as_deref() == Some(plan_id))
            .map(|e| (e.view.started_at.clone(), e.view.plan_id.clone()))
            .collect();
        subs.sort();
        subs.into_iter().map(|(_, id)| id).collect()
    }

    /// What the tracker's events say about `plan_id`, without reading the store (`None` if it
    /// saw no event of it).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let platform = soorma::Platform::embedded();
    /// let tracker = soorma::planner::Tracker::start(&platform).await?;
    /// assert!(tracker.watched("plan-1").is_none());
    /// # Ok(()) }
    /// ```
    pub fn watched(&self, plan_id: &str) -> Option<PlanView> {
        self.shared
            .model()
            .plans
            .get(plan_id)
            .map(|e| e.view.clone())
    }

    /// Every plan the tracker has seen events of, in the order they started (plans it saw
    /// only part of last).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let platform = soorma::Platform::embedded();
    /// let tracker = soorma::planner::Tracker::start(&platform).await?;
    /// let running = tracker.watched_plans().into_iter()
    ///     .filter(|p| p.status == soorma::common::PlanStatus::Running)
    ///     .count();
    /// assert_eq!(running, 0);
    /// # Ok(()) }
    /// ```
    pub fn watched_plans(&self) -> Vec<PlanView> {
        let mut all: Vec<PlanView> = self
            .shared
            .model()
            .plans
            .values()
            .map(|e| e.view.clone())
            .collect();
        all.sort_by(|a, b| {
            (a.started_at.is_none(), &a.started_at, &a.plan_id).cmp(&(
                b.started_at.is_none(),
                &b.started_at,
                &b.plan_id,
            ))
        });
        all
    }

    /// Waits until the tracker's view of `plan_id` satisfies `until` (checked after every
    /// change), and returns it. [`Error::Timeout`] after `timeout`; [`Error::Closed`] if the
    /// platform shut down first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let platform = soorma::Platform::embedded();
    /// use std::time::Duration;
    /// let tracker = soorma::planner::Tracker::start(&platform).await?;
    /// let waited = tracker.wait_for("plan-1", Duration::from_millis(10), |p| p.is_finished()).await;
    /// assert!(matches!(waited, Err(soorma::Error::Timeout { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn wait_for(
        &self,
        plan_id: &str,
        timeout: Duration,
        mut until: impl FnMut(&PlanView) -> bool,
    ) -> Result<PlanView> {
        self.wait_until(timeout, &format!("plan `{plan_id}` in the tracker"), || {
            self.watched(plan_id).filter(|p| until(p))
        })
        .await
    }

    /// Waits until `plan_id` has completed or failed; see [`wait_for`](Self::wait_for).
    ///
    /// ```
    /// # async fn f(tracker: soorma::planner::Tracker) -> soorma::Result<()> {
    /// let plan = tracker.wait_until_finished("plan-1", std::time::Duration::from_secs(30)).await?;
    /// println!("{:?}: {:?}", plan.status, plan.result.or(plan.error.map(Into::into)));
    /// # Ok(()) }
    /// ```
    pub async fn wait_until_finished(&self, plan_id: &str, timeout: Duration) -> Result<PlanView> {
        self.wait_for(plan_id, timeout, PlanView::is_finished).await
    }

    /// What the tracker's events say about the workflow run by task `task_id`
    /// ([`Handler::workflow`](crate::Handler::workflow)): each step it heard of (its
    /// `workflow.step.*` events) and whether the task replied. `None` if it saw no step event
    /// of that task.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::time::Duration;
    /// use soorma::prelude::*;
    /// use soorma::common::StepStatus;
    /// use soorma::workflow::Workflow;
    ///
    /// async fn shout(req: Invocation<serde_json::Value>) -> Result<String, ToolError> {
    ///     Ok(req.data["text"].as_str().unwrap_or_default().to_uppercase())
    /// }
    ///
    /// let platform = Platform::embedded();
    /// let tracker = soorma::planner::Tracker::start(&platform).await?;
    /// let workflow = Workflow::from_json(r#"{"goal": "Shout", "steps": [
    ///   {"id": "a", "operator": "shout.requested", "input_mapping": {"text": "{{word}}"}}]}"#).unwrap();
    /// let running = Agents::new()
    ///     .tool("shouter", vec![Handler::on_invoke("shout.requested", shout)])
    ///     .worker("runner", vec![Handler::workflow("loud.requested", workflow)])
    ///     .start(&platform).await?;
    /// let reply = platform.client("docs").request("loud.requested", serde_json::json!({"word": "hi"}), "loud.completed").await?;
    /// let run = tracker.wait_for_workflow(&reply.reply.request_id, Duration::from_secs(5), |w| w.is_finished()).await?;
    /// assert_eq!(run.steps["a"].status, StepStatus::Completed);
    /// assert_eq!(run.steps["a"].calls.as_deref(), Some("shout.requested"));
    /// # running.shutdown().await }
    /// ```
    pub fn workflow(&self, task_id: &str) -> Option<WorkflowView> {
        self.shared.model().workflows.get(task_id)
    }

    /// Waits until the tracker's view of the workflow run by task `task_id` satisfies `until`
    /// (checked after every change); see [`workflow`](Self::workflow) and
    /// [`wait_for`](Self::wait_for).
    ///
    /// See [`workflow`](Self::workflow).
    pub async fn wait_for_workflow(
        &self,
        task_id: &str,
        timeout: Duration,
        mut until: impl FnMut(&WorkflowView) -> bool,
    ) -> Result<WorkflowView> {
        self.wait_until(
            timeout,
            &format!("workflow task `{task_id}` in the tracker"),
            || self.workflow(task_id).filter(|w| until(w)),
        )
        .await
    }

    /// Waits until `found` finds something (checked after every change of the model).
    async fn wait_until<V>(
        &self,
        timeout: Duration,
        what: &str,
        mut found: impl FnMut() -> Option<V>,
    ) -> Result<V> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.shared.version.subscribe();
        loop {
            changes.borrow_and_update();
            if let Some(view) = found() {
                return Ok(view);
            }
            if self.shared.closed.load(Ordering::SeqCst) {
                return Err(Error::Closed);
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::Closed),
                Err(_) => {
                    return Err(Error::Timeout {
                        after: timeout,
                        what: what.to_owned(),
                    });
                }
            }
        }
    }

    /// Stops observing (dropping the tracker does the same).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let platform = soorma::Platform::embedded();
    /// let tracker = soorma::planner::Tracker::start(&platform).await?;
    /// tracker.stop().await;
    /// # Ok(()) }
    /// ```
    pub async fn stop(self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use soorma_common::TaskProgress;

    fn env(id: &str, topic: Topic, event_type: &str, data: Value) -> EventEnvelope {
        EventEnvelope::new(id, "planner", topic, event_type)
            .with_data(data)
            .with_time(format!("2026-01-01T00:00:{:02}.000Z", id.len()))
    }

    fn lifecycle(id: &str, event_type: &str, data: Value) -> EventEnvelope {
        env(id, Topic::SystemEvents, event_type, data)
    }

    #[test]
    fn lifecycle_events_move_the_view_and_duplicates_change_nothing() {
        let mut m = Model::new("default".into(), 10);
        let started = lifecycle(
            "e1",
            "plan.started",
            json!({"plan_id": "p", "plan_type": "research", "state": "start", "session_id": "s"}),
        );
        assert!(m.apply(&started));
        assert!(!m.apply(&started), "a duplicate delivery is ignored");
        m.apply(&lifecycle(
            "e2",
            "plan.state_changed",
            json!({"plan_id": "p", "from": "start", "to": "start"}),
        ));
        m.apply(&lifecycle(
            "e3",
            "plan.paused",
            json!({"plan_id": "p", "state": "start", "reason": "r"}),
        ));
        assert_eq!(m.plans["p"].view.status, PlanStatus::Paused);
        m.apply(&lifecycle(
            "e4",
            "plan.resumed",
            json!({"plan_id": "p", "state": "start"}),
        ));
        m.apply(&lifecycle(
            "e5",
            "plan.state_changed",
            json!({"plan_id": "p", "from": "start", "to": "done"}),
        ));
        m.apply(&lifecycle(
            "e6",
            "plan.completed",
            json!({"plan_id": "p", "state": "done", "result": 42}),
        ));
        let v = &m.plans["p"].view;
        assert_eq!(v.source, ViewSource::Events);
        assert_eq!(v.status, PlanStatus::Completed);
        assert_eq!(v.current_state.as_deref(), Some("done"));
        assert_eq!(v.result, Some(json!(42)));
        assert_eq!(v.session_id.as_deref(), Some("s"));
        assert_eq!(v.events.len(), 6);
        assert_eq!(v.updated_at, v.events[5].at);
    }

    #[test]
    fn one_plan_hammered_with_events_keeps_a_bounded_view() {
        let mut m = Model::new("default".into(), 10);
        let padding = "x".repeat(100_000);
        for i in 0..2 * MAX_EVENTS_PER_PLAN {
            let e = lifecycle(
                &format!("e{i}"),
                "plan.state_changed",
                json!({"plan_id": "p", "to": "s", "padding": padding}),
            );
            assert!(m.apply(&e));
        }
        for i in 0..MAX_TASKS_PER_PLAN + 10 {
            let reply = env(
                &format!("r{i}"),
                Topic::ActionResults,
                "x.done",
                json!({"request_id": format!("t{i}"), "success": false, "error": padding}),
            )
            .with_plan_id("p");
            m.apply(&reply);
        }
        let v = &m.plans["p"].view;
        assert_eq!(v.events.len(), MAX_EVENTS_PER_PLAN);
        assert_eq!(v.events_dropped, MAX_EVENTS_PER_PLAN);
        assert_eq!(v.events[0].event_id.as_deref(), Some("e256"));
        assert_eq!(v.events[0].data["truncated"], true);
        assert_eq!(v.tasks.len(), MAX_TASKS_PER_PLAN);
        assert_eq!(v.tasks_dropped, 10);
        assert!(v.tasks[0].error.as_ref().unwrap().len() <= MAX_TEXT_BYTES);
        assert!(m.cost <= MODEL_BYTES, "{}", m.cost);
        // Event ids seen are remembered within a bound too.
        assert!(m.seen.len() <= SEEN);
        // An id longer than any the SDK makes names no plan (not even the envelope's).
        let long = lifecycle(
            "too-long",
            "plan.state_changed",
            json!({"plan_id": "p".repeat(crate::spi::envelope::MAX_ID_LEN + 1), "to": "s"}),
        )
        .with_plan_id("p");
        assert!(!m.apply(&long));
    }

    /// Making room for a parent plan does not drop the sub-plan whose start names it.
    #[test]
    fn a_parent_made_room_for_keeps_its_sub_plan() {
        let mut m = Model::new("default".into(), 2);
        m.apply(&lifecycle(
            "x1",
            "plan.started",
            json!({"plan_id": "x", "state": "s"}),
        ));
        m.apply(&lifecycle(
            "c1",
            "plan.completed",
            json!({"plan_id": "c", "state": "done"}),
        ));
        // The sub-plan's start arrives late, once it is finished.
        m.apply(&lifecycle(
            "c0",
            "plan.started",
            json!({"plan_id": "c", "state": "s", "parent_plan_id": "p"}),
        ));
        assert!(m.plans.contains_key("c"), "the sub-plan stays");
        assert_eq!(m.plans["p"].view.sub_plans, ["c"]);
        assert!(!m.plans.contains_key("x"));
    }

    #[test]
    fn the_model_drops_the_least_recent_plans_past_its_byte_budget() {
        let mut m = Model::new("default".into(), 100_000);
        let result = json!("r".repeat(MAX_RESULT_BYTES - 16));
        let plans = MODEL_BYTES / MAX_RESULT_BYTES + 50;
        for i in 0..plans {
            m.apply(&lifecycle(
                &format!("c{i}"),
                "plan.completed",
                json!({"plan_id": format!("p{i}"), "state": "done", "result": result}),
            ));
            assert!(m.cost <= MODEL_BYTES, "{} after plan {i}", m.cost);
        }
        assert!(m.plans.len() < plans, "some plans were dropped");
        assert!(
            m.plans.contains_key(&format!("p{}", plans - 1)),
            "the latest stays"
        );
        assert!(!m.plans.contains_key("p0"), "the oldest went first");
        let counted: usize = m.plans.values().map(|e| e.cost).sum();
        assert_eq!(counted, m.cost);
    }

    #[test]
    fn a_late_event_does_not_take_a_finished_plan_back() {
        let mut m = Model::new("default".into(), 10);
        m.apply(&lifecycle(
            "e9",
            "plan.failed",
            json!({"plan_id": "p", "state": "no_results", "error": "none"}),
        ));
        m.apply(&lifecycle(
            "e1",
            "plan.started",
            json!({"plan_id": "p", "plan_type": "research", "state": "start"}),
        ));
        m.apply(&lifecycle(
            "e2",
            "plan.state_changed",
            json!({"plan_id": "p", "from": "start", "to": "start"}),
        ));
        let v = &m.plans["p"].view;
        assert_eq!(v.status, PlanStatus::Failed);
        assert_eq!(v.current_state.as_deref(), Some("no_results"));
        assert_eq!(v.plan_type.as_deref(), Some("research"));
        assert_eq!(v.events.len(), 3, "every event is still listed");
    }

    #[test]
    fn other_tenants_and_other_events_are_ignored() {
        let mut m = Model::new("acme".into(), 10);
        let foreign = lifecycle("e1", "plan.started", json!({"plan_id": "p"}));
        assert!(!m.apply(&foreign));
        let mut mine = foreign.clone();
        mine.tenant_id = Some("acme".into());
        assert!(m.apply(&mine));
        let mut noise = env("e2", Topic::BusinessFacts, "order.placed", json!({}));
        noise.tenant_id = Some("acme".into());
        noise.plan_id = Some("p".into());
        assert!(!m.apply(&noise));
    }

    #[test]
    fn tasks_merge_requests_progress_and_replies_in_any_order() {
        let mut m = Model::new("default".into(), 10);
        let mut reply = env(
            "r1",
            Topic::ActionResults,
            "fetch.completed",
            json!({"request_id": "p-a1", "success": true, "result": 1}),
        );
        reply.source = "fetcher".into();
        reply.plan_id = Some("p".into());
        let mut request = env("p-a1", Topic::ActionRequests, "fetch.requested", json!({}));
        request.plan_id = Some("p".into());
        request.response_event = Some("fetch.completed".into());
        let late_progress = env(
            "g1",
            Topic::SystemEvents,
            "task.progress",
            serde_json::to_value(
                TaskProgress::new("p-a1", "fetcher", 0.5)
                    .with_message("half")
                    .with_plan_id("p"),
            )
            .unwrap(),
        );
        // The reply overtakes the request and the progress report.
        assert!(m.apply(&reply));
        assert!(m.apply(&request));
        assert!(m.apply(&late_progress));
        let t = m.plans["p"].view.task("p-a1").unwrap().clone();
        assert_eq!(
            t.state,
            TaskState::Completed,
            "a late report does not reopen it"
        );
        assert_eq!(t.message.as_deref(), Some("half"));
        assert_eq!(t.event_type.as_deref(), Some("fetch.requested"));
        assert_eq!(t.agent.as_deref(), Some("fetcher"));
        assert_eq!(t.progress, Some(1.0));
        // A failure, and a reply that is no action reply.
        let mut failed = env(
            "r2",
            Topic::ActionResults,
            "x.completed",
            json!({"request_id": "p-a2", "success": false, "error": "boom"}),
        );
        failed.plan_id = Some("p".into());
        assert!(m.apply(&failed));
        let mut answer = env(
            "r3",
            Topic::ActionResults,
            "approval.given",
            json!({"ok": 1}),
        );
        answer.plan_id = Some("p".into());
        assert!(!m.apply(&answer));
        let t = m.plans["p"].view.task("p-a2").unwrap();
        assert_eq!(
            (t.state, t.error.as_deref()),
            (TaskState::Failed, Some("boom"))
        );
        // Requests of no plan, or without a response event, are not tasks of a plan.
        let loose = env("x", Topic::ActionRequests, "a.requested", json!({}));
        assert!(!m.apply(&loose));
    }

    #[test]
    fn sub_plans_are_linked_to_their_parent() {
        let mut m = Model::new("default".into(), 10);
        m.apply(&lifecycle(
            "e1",
            "plan.started",
            json!({"plan_id": "parent", "state": "start"}),
        ));
        m.apply(&lifecycle(
            "e2",
            "plan.started",
            json!({"plan_id": "parent-a1", "state": "start", "parent_plan_id": "parent"}),
        ));
        assert_eq!(m.plans["parent"].view.sub_plans, ["parent-a1"]);
        assert_eq!(
            m.plans["parent-a1"].view.parent_plan_id.as_deref(),
            Some("parent")
        );
    }

    #[test]
    fn the_model_stays_bounded_dropping_finished_plans_first() {
        let mut m = Model::new("default".into(), 2);
        m.apply(&lifecycle("a1", "plan.started", json!({"plan_id": "a"})));
        m.apply(&lifecycle("b1", "plan.started", json!({"plan_id": "b"})));
        m.apply(&lifecycle("a2", "plan.completed", json!({"plan_id": "a"})));
        m.apply(&lifecycle(
            "b2",
            "plan.state_changed",
            json!({"plan_id": "b", "to": "x"}),
        ));
        m.apply(&lifecycle("c1", "plan.started", json!({"plan_id": "c"})));
        let mut ids: Vec<_> = m.plans.keys().cloned().collect();
        ids.sort();
        assert_eq!(
            ids,
            ["b", "c"],
            "finished `a` went first although `b` is older"
        );
        m.apply(&lifecycle("d1", "plan.started", json!({"plan_id": "d"})));
        let mut ids: Vec<_> = m.plans.keys().cloned().collect();
        ids.sort();
        assert_eq!(ids, ["c", "d"]);
    }

    #[test]
    fn a_stored_record_becomes_a_view_with_its_history() {
        let mut r = PlanRecord::new("p", "research", "start");
        r.status = PlanStatus::Failed;
        r.current_state = "no_results".into();
        r.error = Some("nothing".into());
        r.created_at = Some("t0".into());
        r.updated_at = Some("t2".into());
        r.history = vec![
            soorma_common::PlanStep::new("start", None, "t0"),
            soorma_common::PlanStep::new("no_results", Some("search.completed".into()), "t1"),
        ];
        let v = PlanView::from_record(&r, "default");
        let kinds: Vec<_> = v.events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "plan.started",
                "plan.state_changed",
                "plan.state_changed",
                "plan.failed"
            ]
        );
        assert_eq!(v.events[2].data["from"], "start");
        assert_eq!(v.events[2].data["on_event"], "search.completed");
        assert_eq!(v.error.as_deref(), Some("nothing"));
        assert!(v.is_finished());
    }
}

//! The tracker's view of workflow runs, fed by their `workflow.step.*` progress events and the
//! reply that ends their task.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use soorma_common::{ActionReply, EventEnvelope, StepStatus, WorkflowStepProgress};

use super::tracker::TaskState;

/// The `workflow.step.*` events (see [`soorma_common::events`]).
const STEP_EVENTS: [&str; 5] = [
    soorma_common::events::WORKFLOW_STEP_STARTED,
    soorma_common::events::WORKFLOW_STEP_COMPLETED,
    soorma_common::events::WORKFLOW_STEP_RETRYING,
    soorma_common::events::WORKFLOW_STEP_FAILED,
    soorma_common::events::WORKFLOW_STEP_SKIPPED,
];

/// One step of a workflow run, as its progress events tell.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// # let platform = soorma::Platform::embedded();
/// let tracker = soorma::planner::Tracker::start(&platform).await?;
/// if let Some(run) = tracker.workflow("task-1") {
///     for (id, step) in &run.steps {
///         println!("{id}: {:?} (attempt {}) {:?}", step.status, step.attempt, step.error);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct WorkflowStepView {
    /// Where it stands.
    pub status: StepStatus,
    /// Its current attempt (1 for the first).
    pub attempt: u32,
    /// What the attempt calls (an operator, its fallback, the human-input event).
    pub calls: Option<String>,
    /// The attempt's sub-task (its request's correlation id).
    pub sub_task_id: Option<String>,
    /// Why it failed, is retried or was skipped.
    pub error: Option<String>,
    /// When it last changed (RFC 3339).
    pub updated_at: Option<String>,
}

/// What the tracker knows about a workflow run: each step it heard of, and whether the task
/// running it has replied.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// # let platform = soorma::Platform::embedded();
/// let tracker = soorma::planner::Tracker::start(&platform).await?;
/// assert!(tracker.workflow("task-1").is_none());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct WorkflowView {
    /// The task running the workflow.
    pub task_id: String,
    /// The worker running it.
    pub agent: Option<String>,
    /// `Running` until the task replied, then `Completed` or `Failed`.
    pub state: TaskState,
    /// The task's error, once it failed.
    pub error: Option<String>,
    /// The steps it heard of, by id (a step not started yet is not listed).
    pub steps: BTreeMap<String, WorkflowStepView>,
    /// When it last changed (RFC 3339).
    pub updated_at: Option<String>,
}

impl WorkflowView {
    fn new(task_id: &str) -> Self {
        Self {
            task_id: task_id.to_owned(),
            agent: None,
            state: TaskState::Running,
            error: None,
            steps: BTreeMap::new(),
            updated_at: None,
        }
    }

    /// Whether the task running the workflow has replied.
    ///
    /// See [`WorkflowView`].
    pub fn is_finished(&self) -> bool {
        self.state.is_finished()
    }
}

/// What the model keeps of a run at most (step events come from anyone who may publish on the
/// tenant's subjects): its steps, and the event ids it remembers.
const MAX_STEPS_PER_RUN: usize = 256;
/// Event ids remembered (hashed with their run), for all runs together.
const SEEN: usize = 65_536;
/// The steps all runs keep together: past it the least recently updated runs go.
const MAX_STEPS: usize = 65_536;
/// Texts (errors, names) are cut to this.
const MAX_TEXT_BYTES: usize = 1024;

struct Entry {
    view: WorkflowView,
    touched: u64,
}

/// The workflow runs of one tenant, at most `max` (finished ones evicted first).
pub(super) struct WorkflowViews {
    runs: HashMap<String, Entry>,
    clock: u64,
    max: usize,
    /// The steps the runs keep together.
    steps: usize,
    /// The events applied lately (a duplicate delivery changes nothing).
    seen: crate::util::SeenIds,
}

impl WorkflowViews {
    pub(super) fn new(max: usize) -> Self {
        Self {
            runs: HashMap::new(),
            clock: 0,
            max: max.max(1),
            steps: 0,
            seen: crate::util::SeenIds::new(SEEN),
        }
    }

    pub(super) fn get(&self, task_id: &str) -> Option<WorkflowView> {
        self.runs.get(task_id).map(|e| e.view.clone())
    }

    /// Applies a `workflow.step.*` event or the reply of a tracked run's task; whether the
    /// model changed.
    pub(super) fn apply(&mut self, env: &EventEnvelope) -> bool {
        if STEP_EVENTS.contains(&env.event_type.as_str()) {
            return self.apply_step(env);
        }
        self.apply_reply(env)
    }

    fn apply_step(&mut self, env: &EventEnvelope) -> bool {
        let Ok(p) = serde_json::from_value::<WorkflowStepProgress>(env.data.clone()) else {
            return false;
        };
        // Ids and names longer than any the SDK makes name no run or step.
        if p.task_id.len() > crate::spi::envelope::MAX_ID_LEN || p.step.len() > MAX_TEXT_BYTES {
            return false;
        }
        if !self.seen.first(&p.task_id, &env.id) {
            return false;
        }
        self.clock += 1;
        let clock = self.clock;
        if !self.runs.contains_key(&p.task_id) {
            self.evict_for(&p.task_id);
        }
        let entry = self.runs.entry(p.task_id.clone()).or_insert_with(|| Entry {
            view: WorkflowView::new(&p.task_id),
            touched: clock,
        });
        entry.touched = clock;
        let view = &mut entry.view;
        view.agent
            .get_or_insert_with(|| crate::util::bounded(&p.agent, MAX_TEXT_BYTES));
        view.updated_at.clone_from(&env.time);
        let new_step = !view.steps.contains_key(&p.step);
        if new_step && view.steps.len() >= MAX_STEPS_PER_RUN {
            return false;
        }
        let step = view
            .steps
            .entry(p.step)
            .or_insert_with(|| WorkflowStepView {
                status: p.status,
                attempt: 0,
                calls: None,
                sub_task_id: None,
                error: None,
                updated_at: None,
            });
        // A late copy of an earlier attempt's event does not take the step back.
        let older = p.attempt < step.attempt
            || (p.attempt == step.attempt && step.status.is_terminal() && !p.status.is_terminal());
        if older {
            return true;
        }
        step.status = p.status;
        step.attempt = p.attempt;
        if p.calls.is_some() {
            step.calls = p.calls.map(|c| crate::util::bounded(&c, MAX_TEXT_BYTES));
        }
        if p.sub_task_id.is_some() {
            step.sub_task_id = p
                .sub_task_id
                .map(|id| crate::util::bounded(&id, MAX_TEXT_BYTES));
        }
        step.error = p.error.map(|e| crate::util::bounded(&e, MAX_TEXT_BYTES));
        step.updated_at.clone_from(&env.time);
        if new_step {
            self.steps += 1;
            let keep = p.task_id;
            while self.steps > MAX_STEPS {
                let Some(id) = self.least_recent(&keep) else {
                    break;
                };
                self.remove(&id);
            }
        }
        true
    }

    fn apply_reply(&mut self, env: &EventEnvelope) -> bool {
        let Some(task_id) = env.data.get("request_id").and_then(|v| v.as_str()) else {
            return false;
        };
        let Some(entry) = self.runs.get_mut(task_id) else {
            return false;
        };
        let Ok(reply) = serde_json::from_value::<ActionReply>(env.data.clone()) else {
            return false;
        };
        if !self.seen.first(task_id, &env.id) {
            return false;
        }
        let view = &mut entry.view;
        view.state = if reply.success {
            TaskState::Completed
        } else {
            TaskState::Failed
        };
        view.error = reply
            .error
            .map(|e| crate::util::bounded(&e, MAX_TEXT_BYTES));
        view.updated_at.clone_from(&env.time);
        true
    }

    fn evict_for(&mut self, incoming: &str) {
        if self.runs.len() < self.max {
            return;
        }
        if let Some(id) = self.least_recent(incoming) {
            self.remove(&id);
        }
    }

    /// The least recently updated run other than `keep`, a finished one first.
    fn least_recent(&self, keep: &str) -> Option<String> {
        least_recent(&self.runs, &[keep], |e| (e.view.is_finished(), e.touched))
    }

    fn remove(&mut self, task_id: &str) {
        if let Some(gone) = self.runs.remove(task_id) {
            self.steps -= gone.view.steps.len();
        }
    }
}

/// The key of the least recently touched entry not in `keep`, a finished one first
/// (`state` says whether an entry is finished, and when it was last touched).
pub(super) fn least_recent<E>(
    entries: &HashMap<String, E>,
    keep: &[&str],
    state: impl Fn(&E) -> (bool, u64),
) -> Option<String> {
    let oldest = |finished_only: bool| {
        entries
            .iter()
            .filter(|(id, e)| !keep.contains(&id.as_str()) && (!finished_only || state(e).0))
            .min_by_key(|(_, e)| state(e).1)
            .map(|(id, _)| id.clone())
    };
    oldest(true).or_else(|| oldest(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use soorma_common::Topic;

    fn step(id: &str, event: &str, step: &str, status: StepStatus, attempt: u32) -> EventEnvelope {
        let mut p = WorkflowStepProgress::new("t1", "runner", step, status);
        p.attempt = attempt;
        EventEnvelope::new(id, "runner", Topic::SystemEvents, event)
            .with_data(serde_json::to_value(p).unwrap())
    }

    #[test]
    fn steps_move_forward_and_the_reply_ends_the_run() {
        let mut v = WorkflowViews::new(10);
        assert!(v.apply(&step(
            "e1",
            "workflow.step.started",
            "a",
            StepStatus::Running,
            1
        )));
        assert!(
            !v.apply(&step(
                "e1",
                "workflow.step.started",
                "a",
                StepStatus::Running,
                1
            )),
            "duplicate"
        );
        v.apply(&step(
            "e2",
            "workflow.step.retrying",
            "a",
            StepStatus::Running,
            2,
        ));
        v.apply(&step(
            "e3",
            "workflow.step.completed",
            "a",
            StepStatus::Completed,
            2,
        ));
        // A late copy of the first attempt's start changes nothing.
        v.apply(&step(
            "e4",
            "workflow.step.started",
            "a",
            StepStatus::Running,
            1,
        ));
        let run = v.get("t1").unwrap();
        assert_eq!(
            (run.steps["a"].status, run.steps["a"].attempt),
            (StepStatus::Completed, 2)
        );
        assert!(!run.is_finished());
        let reply = EventEnvelope::new("r1", "runner", Topic::ActionResults, "x.completed")
            .with_data(json!({"request_id": "t1", "success": false, "error": "step `a` failed"}));
        assert!(v.apply(&reply));
        let run = v.get("t1").unwrap();
        assert_eq!(run.state, TaskState::Failed);
        assert_eq!(run.error.as_deref(), Some("step `a` failed"));
    }

    #[test]
    fn finished_runs_are_evicted_first() {
        let mut v = WorkflowViews::new(2);
        let mut s = step("e1", "workflow.step.started", "a", StepStatus::Running, 1);
        v.apply(&s);
        let reply = EventEnvelope::new("r1", "runner", Topic::ActionResults, "x.completed")
            .with_data(json!({"request_id": "t1", "success": true, "result": 1}));
        v.apply(&reply);
        for (n, task) in ["t2", "t3"].iter().enumerate() {
            let mut p: WorkflowStepProgress = serde_json::from_value(s.data.clone()).unwrap();
            p.task_id = (*task).to_owned();
            s = EventEnvelope::new(
                format!("e{}", n + 2),
                "runner",
                Topic::SystemEvents,
                "workflow.step.started",
            )
            .with_data(serde_json::to_value(p).unwrap());
            v.apply(&s);
        }
        assert!(v.get("t1").is_none(), "the finished run went first");
        assert!(v.get("t2").is_some() && v.get("t3").is_some());
    }

    #[test]
    fn runs_keep_a_bounded_number_of_steps() {
        let mut v = WorkflowViews::new(100_000);
        for i in 0..MAX_STEPS_PER_RUN + 5 {
            v.apply(&step(
                &format!("e{i}"),
                "workflow.step.started",
                &format!("s{i}"),
                StepStatus::Running,
                1,
            ));
        }
        assert_eq!(v.get("t1").unwrap().steps.len(), MAX_STEPS_PER_RUN);
        // Many runs: past the model's steps, the least recent runs go.
        let runs = MAX_STEPS / MAX_STEPS_PER_RUN + 3;
        for r in 0..runs {
            for i in 0..MAX_STEPS_PER_RUN {
                let mut p = WorkflowStepProgress::new(
                    format!("r{r}"),
                    "runner",
                    format!("s{i}"),
                    StepStatus::Running,
                );
                p.attempt = 1;
                v.apply(
                    &EventEnvelope::new(
                        format!("r{r}-{i}"),
                        "runner",
                        Topic::SystemEvents,
                        "workflow.step.started",
                    )
                    .with_data(serde_json::to_value(p).unwrap()),
                );
            }
        }
        assert!(v.steps <= MAX_STEPS, "{}", v.steps);
        assert!(v.get("t1").is_none(), "the least recent run went");
        assert!(v.get(&format!("r{}", runs - 1)).is_some());
        let counted: usize = v.runs.values().map(|e| e.view.steps.len()).sum();
        assert_eq!(counted, v.steps);
    }
}

//! What a workflow run decides after each recorded reply, as one pure function
//! ([`transition`]): the attempts that ended, retries and fallbacks, failure policies, the
//! steps that became ready and the end. The run ([`run`](super::run)) calls it twice per
//! handling: on a copy, to learn which attempts to prepare, then inside the revision-checked
//! write of the task, where it decides again on the record it finds.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;
use soorma_common::events::{
    WORKFLOW_STEP_COMPLETED, WORKFLOW_STEP_FAILED, WORKFLOW_STEP_RETRYING, WORKFLOW_STEP_SKIPPED,
    WORKFLOW_STEP_STARTED,
};
use soorma_common::{
    FailurePolicy, StepFailure, StepRun, StepStatus, SubTaskGroup, TaskRecord, Topic, WorkflowRun,
    WorkflowStepProgress,
};

use super::{StepKind, Workflow};
use crate::error::{EngineError, EngineErrorKind, Error, Result};

/// How long a step's error may be in the task (a tool's error can be any size).
pub(super) const MAX_ERROR: usize = 4 * 1024;

/// How an attempt ended: its reply's result, or its error.
#[derive(Debug, Clone)]
pub(super) struct Reply {
    pub(super) output: std::result::Result<Value, String>,
}

/// What one attempt of a step sends: the request (or question) to publish, or why it cannot
/// be sent (its input does not render, no capability is called that, the input breaks the
/// capability's schema).
pub(super) type Prepared = std::result::Result<Outgoing, String>;

/// A request (or question) an attempt sends.
#[derive(Debug, Clone)]
pub(super) struct Outgoing {
    pub(super) topic: Topic,
    pub(super) event: String,
    pub(super) data: Value,
    /// What the attempt calls, for progress events.
    pub(super) calls: String,
}

/// Which steps' attempts are prepared: by (step position, whether the attempt calls the
/// fallback). `None`: a dry run, in which every attempt can be sent.
pub(super) type PreparedSet = Option<HashMap<(usize, bool), Prepared>>;

/// An attempt to send.
#[derive(Debug, Clone)]
pub(super) struct Send {
    pub(super) step: usize,
    pub(super) group_id: String,
    pub(super) first_seq: u32,
    pub(super) fallback: bool,
    pub(super) attempt: u32,
}

/// A step that completed: its output is stored before the write that says so.
#[derive(Debug, Clone)]
pub(super) struct Completed {
    pub(super) step: usize,
    pub(super) group_id: String,
    pub(super) attempts: u32,
}

/// What a transition decided, to do after its write.
#[derive(Debug, Default)]
pub(super) struct Actions {
    /// Attempts to send (and, for a redelivered event, to send again).
    pub(super) sends: Vec<Send>,
    /// Steps that completed.
    pub(super) completed: Vec<Completed>,
    /// Progress events, in the order of the changes.
    pub(super) progress: Vec<(&'static str, WorkflowStepProgress)>,
    /// Timers of ended attempts to forget (sub-task ids).
    pub(super) forget_timers: Vec<String>,
    /// Sub-tasks to cancel (failed attempts, which may still run; a failed workflow's steps).
    pub(super) cancel: Vec<String>,
    /// Steps became ready that this writer did not prepare (or failed without being sent):
    /// the run must be looked at again.
    pub(super) again: bool,
    /// Whether the task changes.
    pub(super) changed: bool,
    /// How the workflow ended, when it did.
    pub(super) finish: Option<std::result::Result<(), String>>,
}

/// The group id of attempt `attempt` (from 1) of step `step` (a position) of task `task_id`.
pub(super) fn attempt_group(task_id: &str, step: usize, attempt: u32) -> String {
    format!("{task_id}-s{step}a{attempt}")
}

/// The sub-task id of an attempt's group (its one member).
pub(super) fn sub_task(group_id: &str) -> String {
    super::super::sub_task_id(group_id, 0)
}

pub(super) fn inconsistent(what: String) -> Error {
    EngineError::new(EngineErrorKind::Inconsistent, what).into()
}

/// Why a skipped step did not run: its first dependency that did not complete, or the step
/// whose failure failed the workflow.
pub(super) fn skip_reason(workflow: &Workflow, run: &WorkflowRun, step: usize) -> String {
    let blocked = workflow.steps[step].dep_positions.iter().find(|&&d| {
        let status = run.status(d);
        status == StepStatus::Skipped
            || (status == StepStatus::Failed
                && workflow.steps[d].on_failure != FailurePolicy::Continue)
    });
    match (blocked, &run.failed_by) {
        (Some(&d), _) => format!("skipped: step `{}` did not complete", workflow.steps[d].id),
        (None, Some(failed)) => format!("skipped: the workflow failed at step `{failed}`"),
        (None, None) => "skipped".to_owned(),
    }
}

/// The transition's working set: the run being changed and what the write decided.
struct Pass<'a> {
    workflow: &'a Workflow,
    prepared: &'a PreparedSet,
    by: &'a str,
    task_id: String,
    agent: String,
    run: WorkflowRun,
    next_seq: u32,
    new_groups: Vec<SubTaskGroup>,
    ended_groups: Vec<String>,
    acts: Actions,
}

impl Pass<'_> {
    fn progress(&mut self, event: &'static str, step: usize, status: StepStatus) {
        let id = &self.workflow.steps[step].id;
        let mut p = WorkflowStepProgress::new(&self.task_id, &self.agent, id, status);
        match self.run.running.get(&(step as u32)) {
            Some(s) => {
                p.attempt = s.attempts;
                p.sub_task_id = Some(sub_task(&attempt_group(&self.task_id, step, s.attempts)));
                p.error.clone_from(&s.error);
            }
            None => {
                if let Some(f) = self.run.failed.get(&(step as u32)) {
                    p.attempt = f.attempts;
                    p.error = Some(f.error.clone());
                }
            }
        }
        if status == StepStatus::Skipped {
            p.error = Some(skip_reason(self.workflow, &self.run, step));
        }
        self.acts.progress.push((event, p));
    }

    /// Sends the next attempt of step `i` (`fallback`: calling its fallback): `Some(true)` when
    /// sent, `Some(false)` when this writer did not prepare it (another writer whose record
    /// made it startable did), `None` when it cannot be sent (then tried with the fallback,
    /// if any and not tried yet; the error is the step's).
    fn start(&mut self, i: usize, fallback: bool) -> Option<bool> {
        let mut fallback = fallback;
        let has_fallback = matches!(
            &self.workflow.steps[i].kind,
            StepKind::Operator {
                fallback: Some(_),
                ..
            }
        );
        loop {
            let prepared = match self.prepared {
                None => Some(Ok(())),
                Some(p) => p
                    .get(&(i, fallback))
                    .map(|o| o.as_ref().map(drop).map_err(Clone::clone)),
            };
            let key = i as u32;
            match prepared {
                None => return Some(false),
                Some(Ok(())) => {
                    let run = self.run.running.entry(key).or_default();
                    run.attempts += 1;
                    run.fallback = fallback;
                    run.started_by = Some(self.by.to_owned());
                    let attempt = run.attempts;
                    let group_id = attempt_group(&self.task_id, i, attempt);
                    self.new_groups
                        .push(SubTaskGroup::new(&group_id, self.next_seq, 1));
                    self.acts.sends.push(Send {
                        step: i,
                        group_id,
                        first_seq: self.next_seq,
                        fallback,
                        attempt,
                    });
                    self.next_seq += 1;
                    self.run.set_status(i, StepStatus::Running);
                    self.acts.changed = true;
                    return Some(true);
                }
                Some(Err(why)) => {
                    let run = self.run.running.entry(key).or_default();
                    run.attempts += 1;
                    run.error = Some(crate::util::bounded(&why, MAX_ERROR));
                    self.acts.again = true;
                    self.acts.changed = true;
                    if !fallback && has_fallback {
                        fallback = true;
                        continue;
                    }
                    return None;
                }
            }
        }
    }

    /// Step `i` failed for good: recorded with its error, and its policy applied.
    fn fail(&mut self, i: usize) {
        let key = i as u32;
        let run = self.run.running.remove(&key).unwrap_or_default();
        self.run.failed.insert(
            key,
            StepFailure::new(run.error.unwrap_or_default(), run.attempts),
        );
        self.run.set_status(i, StepStatus::Failed);
        self.acts.changed = true;
        self.progress(WORKFLOW_STEP_FAILED, i, StepStatus::Failed);
        if self.workflow.steps[i].on_failure == FailurePolicy::FailFast {
            if self.run.failed_by.is_none() {
                self.run.failed_by = Some(self.workflow.steps[i].id.clone());
            }
        } else {
            self.acts.again = true;
        }
    }

    /// Settles the attempts whose reply is known; returns the steps that ended.
    fn settle(&mut self, rec: &TaskRecord, replies: &HashMap<String, Reply>) -> Vec<usize> {
        let mut ended = Vec::new();
        let running: Vec<(u32, StepRun)> = self
            .run
            .running
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        for (key, run) in running {
            let i = key as usize;
            let group_id = attempt_group(&self.task_id, i, run.attempts);
            let complete = rec
                .groups
                .get(&group_id)
                .is_some_and(SubTaskGroup::is_complete);
            let Some(reply) = replies.get(&group_id).filter(|_| complete) else {
                // Still running: a redelivery of the event that started it sends it again.
                if !complete
                    && run.started_by.as_deref() == Some(self.by)
                    && let Some(group) = rec.groups.get(&group_id)
                {
                    self.acts.sends.push(Send {
                        step: i,
                        group_id,
                        first_seq: group.first_seq,
                        fallback: run.fallback,
                        attempt: run.attempts,
                    });
                }
                continue;
            };
            let step = &self.workflow.steps[i];
            if step.timeout.is_some() {
                self.acts.forget_timers.push(sub_task(&group_id));
            }
            match &reply.output {
                Ok(_) => {
                    self.progress(WORKFLOW_STEP_COMPLETED, i, StepStatus::Completed);
                    if let Some(p) = self.acts.progress.last_mut() {
                        p.1.error = None;
                    }
                    self.run.running.remove(&key);
                    self.run.set_status(i, StepStatus::Completed);
                    self.acts.completed.push(Completed {
                        step: i,
                        group_id: group_id.clone(),
                        attempts: run.attempts,
                    });
                    self.ended_groups.push(group_id);
                    self.acts.changed = true;
                    ended.push(i);
                }
                Err(error) => {
                    // A timed-out attempt may still run: stop it (a no-op for one that replied).
                    self.acts.cancel.push(sub_task(&group_id));
                    let error = crate::util::bounded(error, MAX_ERROR);
                    if let Some(r) = self.run.running.get_mut(&key) {
                        r.error = Some(error.clone());
                    }
                    let has_fallback = matches!(
                        step.kind,
                        StepKind::Operator {
                            fallback: Some(_),
                            ..
                        }
                    );
                    let next = if !run.fallback && run.attempts <= step.retries {
                        Some(false)
                    } else if !run.fallback && has_fallback {
                        Some(true)
                    } else {
                        None
                    };
                    let sent = match next {
                        Some(fallback) => self.start(i, fallback),
                        None => None,
                    };
                    match sent {
                        // Not prepared here: the writer that prepared it settles it.
                        Some(false) => {
                            if let Some(r) = self.run.running.get_mut(&key) {
                                r.error = run.error.clone();
                            }
                            continue;
                        }
                        Some(true) => {
                            self.progress(WORKFLOW_STEP_RETRYING, i, StepStatus::Running);
                            if let Some(p) = self.acts.progress.last_mut() {
                                p.1.error = Some(error);
                            }
                        }
                        None => {
                            self.fail(i);
                            ended.push(i);
                        }
                    }
                    self.ended_groups.push(group_id);
                    self.acts.changed = true;
                }
            }
        }
        ended
    }

    /// Looks at `candidates` and the steps they lead to: a pending step whose dependencies all
    /// completed (or failed under `continue`) starts; one with a dependency that did not
    /// complete is skipped, and so on down.
    fn reach(&mut self, mut candidates: Vec<usize>) {
        while let Some(i) = candidates.pop() {
            if self.run.failed_by.is_some() {
                return;
            }
            if self.run.status(i) != StepStatus::Pending {
                self.run.ready.remove(&(i as u32));
                continue;
            }
            let mut ready = true;
            let mut blocked = false;
            for &d in &self.workflow.steps[i].dep_positions {
                match self.run.status(d) {
                    StepStatus::Completed => {}
                    StepStatus::Failed
                        if self.workflow.steps[d].on_failure == FailurePolicy::Continue => {}
                    StepStatus::Failed | StepStatus::Skipped => blocked = true,
                    _ => ready = false,
                }
            }
            let dependents = &self.workflow.steps[i].dependent_positions;
            if blocked {
                self.run.set_status(i, StepStatus::Skipped);
                self.run.ready.remove(&(i as u32));
                self.acts.changed = true;
                self.progress(WORKFLOW_STEP_SKIPPED, i, StepStatus::Skipped);
                candidates.extend(dependents.iter().rev());
                continue;
            }
            if !ready {
                continue;
            }
            match self.start(i, false) {
                Some(true) => {
                    self.run.ready.remove(&(i as u32));
                    self.progress(WORKFLOW_STEP_STARTED, i, StepStatus::Running);
                }
                Some(false) => {
                    // Ready, but not prepared by this writer: kept as ready, and looked at again.
                    if self.run.ready.insert(i as u32) {
                        self.acts.changed = true;
                    }
                    self.acts.again = true;
                }
                None => {
                    self.run.ready.remove(&(i as u32));
                    self.fail(i);
                    candidates.extend(dependents.iter().rev());
                }
            }
        }
    }

    /// The workflow failed: nothing more is sent, the running steps are canceled, the rest
    /// skipped.
    fn fail_workflow(&mut self) {
        self.acts.sends.clear();
        for i in 0..self.workflow.steps.len() {
            let status = self.run.status(i);
            if status == StepStatus::Running
                && let Some(r) = self.run.running.get(&(i as u32))
            {
                self.acts
                    .cancel
                    .push(sub_task(&attempt_group(&self.task_id, i, r.attempts)));
            }
            if matches!(status, StepStatus::Pending | StepStatus::Running) {
                self.run.set_status(i, StepStatus::Skipped);
                self.progress(WORKFLOW_STEP_SKIPPED, i, StepStatus::Skipped);
            }
        }
        // Every attempt of the run has ended: their groups go.
        for (key, r) in std::mem::take(&mut self.run.running) {
            self.ended_groups
                .push(attempt_group(&self.task_id, key as usize, r.attempts));
        }
        self.run.ready.clear();
        self.acts.changed = true;
        self.acts.finish = Some(Err(self.failure()));
    }

    /// The error of a failed workflow: the step that failed it, and why.
    fn failure(&self) -> String {
        let failed = self.run.failed_by.clone().unwrap_or_default();
        let error = self
            .workflow
            .index
            .get(&failed)
            .and_then(|&i| self.run.failed.get(&(i as u32)))
            .map(|f| f.error.clone())
            .unwrap_or_default();
        format!("step `{failed}` failed: {error}")
    }
}

/// Decides what changes in the run stored in `rec`, given the replies known (by attempt
/// group) and the attempts prepared (`None`: a dry run, every attempt can be sent); `by` is
/// the id of the event being handled. Pure: the same inputs give the same changes.
pub(super) fn transition(
    rec: &mut TaskRecord,
    workflow: &Workflow,
    replies: &HashMap<String, Reply>,
    prepared: &PreparedSet,
    by: &str,
) -> Result<Actions> {
    if rec.status.is_terminal() {
        return Ok(Actions::default());
    }
    let Some(run) = rec.workflow.take() else {
        return Err(inconsistent(format!(
            "task `{}` runs no workflow",
            rec.task_id
        )));
    };
    if run.statuses.len() != workflow.steps.len() {
        let found = run.statuses.len();
        rec.workflow = Some(run);
        return Err(inconsistent(format!(
            "task `{}`: the run has {found} steps, its workflow {}",
            rec.task_id,
            workflow.steps.len()
        )));
    }
    let mut pass = Pass {
        workflow,
        prepared,
        by,
        task_id: rec.task_id.clone(),
        agent: rec.agent.clone(),
        next_seq: rec.next_seq,
        run,
        new_groups: Vec::new(),
        ended_groups: Vec::new(),
        acts: Actions::default(),
    };
    if pass.run.failed_by.is_none() {
        // 1. The attempts that ended.
        let ended = pass.settle(rec, replies);
        // 2. What they (and the steps ready from before, and the roots) lead to.
        let mut candidates: Vec<usize> = Vec::new();
        for &i in ended.iter().rev() {
            candidates.extend(workflow.steps[i].dependent_positions.iter().rev());
        }
        candidates.extend(pass.run.ready.iter().rev().map(|&i| i as usize));
        candidates.extend(workflow.root_positions.iter().rev());
        if pass.run.failed_by.is_none() {
            pass.reach(candidates);
        }
    }
    // 3. The end.
    if pass.run.failed_by.is_some() {
        if pass.run.statuses.contains(['p', 'r']) {
            pass.fail_workflow();
        } else {
            // Failed by an earlier write whose handling died before failing the task.
            pass.acts.finish = Some(Err(pass.failure()));
        }
    } else if pass.run.is_finished() {
        pass.acts.finish = Some(Ok(()));
    }
    let Pass {
        run,
        next_seq,
        new_groups,
        ended_groups,
        acts,
        ..
    } = pass;
    for g in ended_groups {
        rec.groups.remove(&g);
    }
    for g in new_groups {
        rec.groups.insert(g.group_id.clone(), g);
    }
    rec.next_seq = rec.next_seq.max(next_seq);
    rec.workflow = Some(run);
    Ok(acts)
}

/// Every step's outcome: completed steps' outputs from `outputs` (by position).
pub(super) fn output_of(
    rec: &TaskRecord,
    workflow: &Workflow,
    outputs: &BTreeMap<usize, soorma_common::StepOutcome>,
) -> soorma_common::WorkflowOutput {
    let mut out = soorma_common::WorkflowOutput::new(&workflow.definition.goal);
    let Some(run) = &rec.workflow else {
        return out;
    };
    for (i, step) in workflow.steps.iter().enumerate() {
        let key = i as u32;
        let outcome = match run.status(i) {
            StepStatus::Completed => outputs
                .get(&i)
                .cloned()
                .unwrap_or_else(|| soorma_common::StepOutcome::completed(Value::Null, 0)),
            StepStatus::Failed => {
                let f = run.failed.get(&key);
                soorma_common::StepOutcome::ended(
                    StepStatus::Failed,
                    f.map(|f| f.error.clone()).unwrap_or_default(),
                    f.map_or(0, |f| f.attempts),
                )
            }
            status => soorma_common::StepOutcome::ended(
                status,
                skip_reason(workflow, run, i),
                run.running.get(&key).map_or(0, |r| r.attempts),
            ),
        };
        out.steps.insert(step.id.clone(), outcome);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn workflow(json: &str) -> Workflow {
        Workflow::from_json(json).unwrap()
    }

    fn record(wf: &Workflow) -> TaskRecord {
        let mut rec = TaskRecord::new("t", "runner", "run.requested");
        rec.workflow = Some(soorma_common::WorkflowRun::new("t-wf", wf.steps.len()));
        rec
    }

    /// Every attempt of the dry run, prepared as sendable.
    fn prepare_all(
        rec: &TaskRecord,
        wf: &Workflow,
        replies: &HashMap<String, Reply>,
    ) -> PreparedSet {
        let dry = transition(&mut rec.clone(), wf, replies, &None, "e").unwrap();
        Some(
            dry.sends
                .iter()
                .map(|s| {
                    let out = Outgoing {
                        topic: Topic::ActionRequests,
                        event: "x.requested".into(),
                        data: json!({}),
                        calls: "x".into(),
                    };
                    ((s.step, s.fallback), Ok(out))
                })
                .collect(),
        )
    }

    /// Records the reply of step `id`'s attempt in flight.
    fn reply(
        rec: &mut TaskRecord,
        wf: &Workflow,
        id: &str,
        output: std::result::Result<Value, &str>,
        replies: &mut HashMap<String, Reply>,
    ) {
        let i = wf.index[id];
        let attempts = rec.workflow.as_ref().unwrap().running[&(i as u32)].attempts;
        let g = attempt_group(&rec.task_id, i, attempts);
        let group = rec.groups.get_mut(&g).unwrap();
        let seq = group.first_seq;
        group.mark_finished(seq);
        replies.insert(
            g,
            Reply {
                output: output.map_err(str::to_owned),
            },
        );
    }

    fn step(rec: &TaskRecord, wf: &Workflow, id: &str) -> StepStatus {
        rec.workflow.as_ref().unwrap().status(wf.index[id])
    }

    fn advance(
        rec: &mut TaskRecord,
        wf: &Workflow,
        replies: &HashMap<String, Reply>,
        by: &str,
    ) -> Actions {
        let prepared = prepare_all(rec, wf, replies);
        transition(rec, wf, replies, &prepared, by).unwrap()
    }

    const DIAMOND: &str = r#"{"goal": "g", "steps": [
        {"id": "a", "operator": "x"},
        {"id": "b", "operator": "x", "depends_on": ["a"]},
        {"id": "c", "operator": "x", "depends_on": ["a"]},
        {"id": "d", "operator": "x", "depends_on": ["b", "c"]}]}"#;

    #[test]
    fn a_join_starts_once_whichever_writer_sees_its_last_dependency() {
        let wf = workflow(DIAMOND);
        let mut rec = record(&wf);
        let mut replies = HashMap::new();
        assert_eq!(advance(&mut rec, &wf, &replies, "start").sends.len(), 1);
        reply(&mut rec, &wf, "a", Ok(json!(1)), &mut replies);
        let acts = advance(&mut rec, &wf, &replies, "ra");
        assert_eq!(acts.sends.len(), 2, "b and c start together");
        // b and c reply at once; the writer that saw only b's reply prepared nothing for d,
        // the one that saw both did.
        reply(&mut rec, &wf, "b", Ok(json!(2)), &mut replies);
        let only_b = replies.clone();
        reply(&mut rec, &wf, "c", Ok(json!(3)), &mut replies);
        let prepared_by_b = prepare_all(&rec, &wf, &only_b);
        let both = prepare_all(&rec, &wf, &replies);
        // c's writer goes first, then b's (on the record c's writer left).
        let c_first = transition(&mut rec, &wf, &replies, &both, "rc").unwrap();
        assert_eq!(c_first.sends.len(), 1);
        assert_eq!(step(&rec, &wf, "d"), StepStatus::Running);
        let b_late = transition(&mut rec, &wf, &only_b, &prepared_by_b, "rb").unwrap();
        assert!(b_late.sends.is_empty() && !b_late.changed, "{b_late:?}");
        // The other order: b's writer (knowing only b's reply) first, then c's.
        let mut rec2 = record(&wf);
        let mut replies2 = HashMap::new();
        advance(&mut rec2, &wf, &replies2, "start");
        reply(&mut rec2, &wf, "a", Ok(json!(1)), &mut replies2);
        advance(&mut rec2, &wf, &replies2, "ra");
        reply(&mut rec2, &wf, "b", Ok(json!(2)), &mut replies2);
        let only_b = replies2.clone();
        let prepared_by_b = prepare_all(&rec2, &wf, &only_b);
        reply(&mut rec2, &wf, "c", Ok(json!(3)), &mut replies2);
        let both = prepare_all(&rec2, &wf, &replies2);
        let b_first = transition(&mut rec2, &wf, &only_b, &prepared_by_b, "rb").unwrap();
        assert!(b_first.sends.is_empty(), "d waits for c");
        let c_last = transition(&mut rec2, &wf, &replies2, &both, "rc").unwrap();
        assert_eq!(c_last.sends.len(), 1);
        assert_eq!(c_last.sends[0].step, wf.index["d"]);
    }

    #[test]
    fn a_step_found_ready_but_not_prepared_is_kept_and_started_later() {
        let wf = workflow(DIAMOND);
        let mut rec = record(&wf);
        let mut replies = HashMap::new();
        advance(&mut rec, &wf, &replies, "start");
        reply(&mut rec, &wf, "a", Ok(json!(1)), &mut replies);
        // A writer that prepared nothing (its dry run saw another record).
        let acts = transition(&mut rec, &wf, &replies, &Some(HashMap::new()), "ra").unwrap();
        assert!(acts.again && acts.sends.is_empty());
        let run = rec.workflow.as_ref().unwrap();
        assert_eq!(run.ready.iter().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(step(&rec, &wf, "a"), StepStatus::Completed);
        let acts = advance(&mut rec, &wf, &HashMap::new(), "ra");
        assert_eq!(acts.sends.len(), 2);
        assert!(rec.workflow.as_ref().unwrap().ready.is_empty());
    }

    #[test]
    fn a_redelivered_event_sends_the_attempts_its_write_started_again() {
        let wf = workflow(DIAMOND);
        let mut rec = record(&wf);
        let first = advance(&mut rec, &wf, &HashMap::new(), "start");
        let again = advance(&mut rec, &wf, &HashMap::new(), "start");
        assert_eq!(again.sends[0].group_id, first.sends[0].group_id);
        assert!(!again.changed);
        let other = advance(&mut rec, &wf, &HashMap::new(), "someone-else");
        assert!(other.sends.is_empty());
    }

    #[test]
    fn retries_then_the_fallback_then_the_policy() {
        let wf = workflow(
            r#"{"goal": "g", "steps": [
            {"id": "a", "operator": "x", "retries": 1, "fallback": "y", "on_failure": "skip_descendants"},
            {"id": "b", "operator": "x", "depends_on": ["a"]},
            {"id": "c", "operator": "x", "depends_on": ["b"]},
            {"id": "d", "operator": "x"}]}"#,
        );
        let mut rec = record(&wf);
        let mut replies = HashMap::new();
        advance(&mut rec, &wf, &replies, "start");
        let mut calls = Vec::new();
        for n in 0..3 {
            reply(&mut rec, &wf, "a", Err("down"), &mut replies);
            let acts = advance(&mut rec, &wf, &replies, &format!("r{n}"));
            calls.extend(acts.sends.iter().map(|s| s.fallback));
            assert!(
                acts.cancel.iter().any(|c| c.contains("-s0a")),
                "the failed attempt is canceled"
            );
        }
        assert_eq!(calls, [false, true], "a retry, then the fallback");
        assert_eq!(step(&rec, &wf, "a"), StepStatus::Failed);
        assert_eq!(step(&rec, &wf, "b"), StepStatus::Skipped);
        assert_eq!(step(&rec, &wf, "c"), StepStatus::Skipped);
        assert_eq!(step(&rec, &wf, "d"), StepStatus::Running);
        let run = rec.workflow.as_ref().unwrap();
        assert_eq!(run.failed[&0], soorma_common::StepFailure::new("down", 3));
        assert_eq!(
            skip_reason(&wf, run, 2),
            "skipped: step `b` did not complete"
        );
        assert!(
            rec.groups.keys().all(|g| g.contains("-s3a")),
            "ended attempts' groups are gone: {:?}",
            rec.groups.keys()
        );
        reply(&mut rec, &wf, "d", Ok(json!(4)), &mut replies);
        let acts = advance(&mut rec, &wf, &replies, "rd");
        assert_eq!(acts.finish, Some(Ok(())));
        assert!(rec.groups.is_empty());
    }

    #[test]
    fn fail_fast_cancels_what_runs_and_skips_the_rest_with_events() {
        let wf = workflow(
            r#"{"goal": "g", "steps": [
            {"id": "a", "operator": "x"}, {"id": "slow", "operator": "x"},
            {"id": "b", "operator": "x", "depends_on": ["a"]}]}"#,
        );
        let mut rec = record(&wf);
        let mut replies = HashMap::new();
        advance(&mut rec, &wf, &replies, "start");
        reply(&mut rec, &wf, "a", Err("boom"), &mut replies);
        let acts = advance(&mut rec, &wf, &replies, "ra");
        assert_eq!(acts.finish, Some(Err("step `a` failed: boom".into())));
        assert!(acts.sends.is_empty());
        assert!(
            acts.cancel.iter().any(|c| c == "t-s1a1-0"),
            "{:?}",
            acts.cancel
        );
        let skipped: Vec<&str> = acts
            .progress
            .iter()
            .filter(|(e, _)| *e == WORKFLOW_STEP_SKIPPED)
            .map(|(_, p)| p.step.as_str())
            .collect();
        assert_eq!(skipped, ["slow", "b"]);
        assert_eq!(rec.workflow.as_ref().unwrap().statuses, "fss");
        // A redelivery, the task not failed yet: the same end, nothing else.
        let again = advance(&mut rec, &wf, &replies, "ra");
        assert_eq!(again.finish, Some(Err("step `a` failed: boom".into())));
        assert!(!again.changed && again.progress.is_empty());
    }
}

//! Planners (`on_goal` / `on_transition`): state machines with conditions and templates, pause
//! and resume, asking a person, sessions and plan listings, sub-plans, and the tracker.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use soorma::prelude::*;
use soorma::testing::TestPlatform;
use soorma::{AgentBuilder, EventEnvelope};
use soorma_tests::agents::{approval_agents, research_planner, research_tools};

scenario!(planner_runs_its_state_machine_with_conditions_and_templates);
async fn planner_runs_its_state_machine_with_conditions_and_templates(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(research_tools()).await.unwrap();
    t.start(research_planner(false)).await.unwrap();
    let client = t.client().with_timeout(wait);
    let report: Value = client
        .invoke("research.goal", json!({"topic": "rust"}), "research.done")
        .await
        .unwrap();
    assert_eq!(
        report,
        json!({"summary": "2 sources about rust", "found": 2, "note": "found 2 sources"})
    );
    // The analysis got the search's items through the template (an array, not a string).
    let analyze = t.expect_event("analyze.requested", wait).await.unwrap();
    assert_eq!(analyze.data["items"], json!(["rust book", "rust blog"]));
    // The other branch: a condition sends the plan to a failed terminal state.
    let err = client
        .invoke::<Value>(
            "research.goal",
            json!({"topic": "nothing"}),
            "research.done",
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("nothing found for nothing"),
        "{err}"
    );
    // An action that fails with no transition for it fails the plan with its error.
    let err = client
        .invoke::<Value>("research.goal", json!({"topic": "broken"}), "research.done")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("the search index is down"),
        "{err}"
    );
    // Lifecycle events on system-events, and the persisted plan.
    let completed = t.expect_event("plan.completed", wait).await.unwrap();
    assert_eq!(completed.topic, Topic::SystemEvents);
    let plan_id = completed.data["plan_id"].as_str().unwrap().to_owned();
    let changes: Vec<_> = t
        .events_of_type("plan.state_changed")
        .into_iter()
        .filter(|e| e.data["plan_id"] == plan_id.as_str())
        .map(|e| e.data["to"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(changes, ["start", "analyzing", "done"]);
    // Published before its reply, but seen by another subscription: waited for.
    t.expect_matching(
        |e| {
            e.event_type == "plan.failed"
                && e.data["error"]
                    .as_str()
                    .is_some_and(|error| error.contains("the search index is down"))
        },
        wait,
        "the broken plan's plan.failed",
    )
    .await
    .unwrap();
    assert_eq!(t.events_of_type("plan.failed").len(), 2);
    let key = soorma::state::StateKey::new(soorma::planner::PLANS_BUCKET, "default", &plan_id);
    let stored = t.platform().state().get(&key).await.unwrap().unwrap();
    let record: soorma::common::PlanRecord = serde_json::from_slice(&stored.value).unwrap();
    assert_eq!(record.status, soorma::common::PlanStatus::Completed);
    assert_eq!(record.current_state, "done");
    assert!(record.reply_sent);
    assert_eq!(record.history.len(), 3);
    t.shutdown().await.unwrap();
}

scenario!(planner_pauses_and_resumes_with_input);
async fn planner_pauses_and_resumes_with_input(mut t: TestPlatform, wait: Duration) {
    t.start(research_tools()).await.unwrap();
    t.start(research_planner(true)).await.unwrap();
    let client = t.client().with_timeout(wait * 2);
    let goal = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>("research.goal", json!({"topic": "tea"}), "research.done")
                .await
        }
    });
    let paused = t.expect_event("plan.paused", wait).await.unwrap();
    let plan_id = paused.data["plan_id"].as_str().unwrap().to_owned();
    assert_eq!(paused.data["reason"], "waiting for approval");
    // A stray event while paused is kept, not lost, and moves nothing.
    client
        .bus()
        .publish(Topic::ActionResults, "unrelated.noise", json!({}))
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!goal.is_finished());
    // The approval resumes it.
    client
        .bus()
        .publish(Topic::ActionResults, "approval.given", json!({"by": "ada"}))
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    let report = goal.await.unwrap().unwrap();
    assert_eq!(report["summary"], "2 sources about tea");
    t.expect_event("plan.resumed", wait).await.unwrap();
    let key = soorma::state::StateKey::new(soorma::planner::PLANS_BUCKET, "default", &plan_id);
    let stored = t.platform().state().get(&key).await.unwrap().unwrap();
    let record: soorma::common::PlanRecord = serde_json::from_slice(&stored.value).unwrap();
    assert_eq!(record.results["user_input"], json!({"by": "ada"}));
    assert!(record.deferred.is_empty());
    t.shutdown().await.unwrap();
}

scenario!(planner_asks_a_person_and_handles_the_answer_and_the_timeout);
async fn planner_asks_a_person_and_handles_the_answer_and_the_timeout(
    mut t: TestPlatform,
    wait: Duration,
) {
    for agent in approval_agents() {
        t.start(agent).await.unwrap();
    }
    let client = t.client().with_timeout(wait * 2);
    // Answered: the question goes out on notification-events; the answer resumes the plan.
    let pending = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>(
                    "post.goal",
                    json!({"topic": "kv stores", "timeout_ms": 20_000}),
                    "post.done",
                )
                .await
        }
    });
    let question = t
        .expect_event("notification.human_input", wait)
        .await
        .unwrap();
    assert_eq!(question.topic, Topic::NotificationEvents);
    assert_eq!(question.data["question"], "Publish this draft?");
    assert_eq!(question.data["response_event"], "approval.answered");
    assert_eq!(question.data["timeout_seconds"], 20.0);
    assert_eq!(
        question.response_event.as_deref(),
        Some("approval.answered")
    );
    let plan_id = question.correlation_id.clone().unwrap();
    client
        .bus()
        .publish(
            Topic::ActionResults,
            "approval.answered",
            json!({"approved": true, "by": "grace"}),
        )
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    let post = pending.await.unwrap().unwrap();
    assert_eq!(
        post,
        json!({"text": "A post about kv stores", "approved_by": "grace"})
    );
    // Answered in time: its timer is gone (deleted once the reply is out).
    let answered = std::time::Instant::now();
    loop {
        let timers = t
            .platform()
            .state()
            .keys(soorma::planner::TIMERS_BUCKET, "default")
            .await
            .unwrap();
        if timers.is_empty() {
            break;
        }
        assert!(answered.elapsed() < wait, "{timers:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Not answered: the timeout moves the plan to `expired`, which fails it.
    let err = client
        .invoke::<Value>(
            "post.goal",
            json!({"topic": "queues", "timeout_ms": 300}),
            "post.done",
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("nobody approved \"Publish this draft?\" in time"),
        "{err}"
    );
    let timeout = t.expect_event("plan.timeout", wait).await.unwrap();
    assert_eq!(timeout.topic, Topic::ActionResults);
    // A late answer changes nothing.
    client
        .bus()
        .publish(
            Topic::ActionResults,
            "approval.answered",
            json!({"approved": true, "by": "late"}),
        )
        .correlation_id(timeout.correlation_id.clone().unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(t.events_of_type("post.done").len(), 2);
    t.shutdown().await.unwrap();
}

scenario!(sessions_group_plans_and_plans_are_listed_by_session_and_status);
async fn sessions_group_plans_and_plans_are_listed_by_session_and_status(
    mut t: TestPlatform,
    wait: Duration,
) {
    use soorma::common::{PlanStatus, SessionRecord};
    use soorma::planner::PlanFilter;
    t.start(research_tools()).await.unwrap();
    t.start(research_planner(false)).await.unwrap();
    let sessions = t.platform().sessions();
    let created = sessions
        .create(
            SessionRecord::new("reading-list")
                .with_user_id("ada")
                .with_name("Reading list"),
        )
        .await
        .unwrap();
    assert_eq!(created.tenant_id.as_deref(), Some("default"));
    let ada = t
        .client()
        .with_user("ada")
        .with_session("reading-list")
        .with_timeout(wait);
    let report: Value = ada
        .invoke("research.goal", json!({"topic": "rust"}), "research.done")
        .await
        .unwrap();
    assert_eq!(report["found"], 2);
    ada.invoke::<Value>(
        "research.goal",
        json!({"topic": "nothing"}),
        "research.done",
    )
    .await
    .unwrap_err();
    // A goal in a session nobody created starts the session.
    let bob = t
        .client()
        .with_user("bob")
        .with_session("chat-7")
        .with_timeout(wait);
    bob.invoke::<Value>("research.goal", json!({"topic": "tea"}), "research.done")
        .await
        .unwrap();

    let listed: Vec<_> = sessions
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(listed, ["reading-list", "chat-7"]);
    let of_bob = sessions.list_for_user("bob").await.unwrap();
    assert_eq!(of_bob.len(), 1);
    assert_eq!(of_bob[0].session_id, "chat-7");
    assert_eq!(of_bob[0].plan_ids.len(), 1);
    let reading = sessions.get("reading-list").await.unwrap().unwrap();
    assert_eq!(reading.name.as_deref(), Some("Reading list"));
    assert_eq!(reading.plan_ids.len(), 2);

    let plans = t.platform().plans();
    let in_session = plans.by_session("reading-list").await.unwrap();
    assert_eq!(
        in_session.iter().map(|p| &p.plan_id).collect::<Vec<_>>(),
        reading.plan_ids.iter().collect::<Vec<_>>(),
        "listed oldest first, in the order they started"
    );
    assert!(in_session.iter().all(|p| {
        p.session_id.as_deref() == Some("reading-list")
            && p.user_id.as_deref() == Some("ada")
            && p.planner.as_deref() == Some("research-planner")
    }));
    assert_eq!(in_session[0].status, PlanStatus::Completed);
    assert_eq!(in_session[1].status, PlanStatus::Failed);
    let completed = plans.by_status(PlanStatus::Completed).await.unwrap();
    let topics: Vec<_> = completed
        .iter()
        .map(|p| p.goal_data["topic"].as_str().unwrap())
        .collect();
    assert_eq!(topics, ["rust", "tea"]);
    assert_eq!(plans.by_status(PlanStatus::Failed).await.unwrap().len(), 1);
    assert!(
        plans
            .by_status(PlanStatus::Running)
            .await
            .unwrap()
            .is_empty()
    );
    let failed_in_session = plans
        .list(
            &PlanFilter::new()
                .session("reading-list")
                .status(PlanStatus::Failed),
        )
        .await
        .unwrap();
    assert_eq!(failed_in_session.len(), 1);
    assert_eq!(
        failed_in_session[0].error.as_deref(),
        Some("nothing found for nothing")
    );
    let by_user = plans.list(&PlanFilter::new().user("bob")).await.unwrap();
    assert_eq!(by_user.len(), 1);
    let one = plans.get(&by_user[0].plan_id).await.unwrap().unwrap();
    assert_eq!(one.session_id.as_deref(), Some("chat-7"));
    // Tenants see only their own sessions and plans.
    assert!(sessions.for_tenant("acme").list().await.unwrap().is_empty());
    assert!(
        plans
            .for_tenant("acme")
            .list(&PlanFilter::new())
            .await
            .unwrap()
            .is_empty()
    );
    t.shutdown().await.unwrap();
}

/// Plan ids the report planner's transition handler was called for.
#[derive(Clone, Default)]
struct Handled(Arc<std::sync::Mutex<Vec<String>>>);

async fn report_goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    goal.start(&plan).await?;
    Ok(())
}

async fn report_transition(mut plan: PlanContext, handled: State<Handled>) -> soorma::Result<()> {
    handled.0.0.lock().unwrap().push(plan.plan_id().to_owned());
    plan.execute_next().await
}

/// A planner whose plan hands the research to the research planner (a sub-plan: its action is
/// `research.goal`) and reports on its reply.
fn report_planner(handled: Handled) -> AgentBuilder {
    use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
    let plan = Plan::new(
        PlanDefinition::new("report", "research in a sub-plan, then report")
            .with_state(
                StateConfig::new("start", "have the topic researched")
                    .with_action(
                        StateAction::new("research.goal", "research.done")
                            .with_data(json!({"topic": "{{goal.topic}}"})),
                    )
                    .with_transition(
                        StateTransition::new("research.done", "done")
                            .with_condition("data.success"),
                    ),
            )
            .with_state(
                StateConfig::new("done", "report")
                    .terminal()
                    .with_result(json!({"report": "Report: {{results.start.summary}}"})),
            ),
    )
    .expect("a valid plan");
    Planner::new("report-planner")
        .use_registered_handlers(false)
        .with_state(Arc::new(plan))
        .with_state(handled)
        .handler(Handler::on_goal("report.goal", report_goal))
        .handler(Handler::on_transition(report_transition))
}

scenario!(a_sub_plan_reports_its_completion_into_the_parent_plan);
async fn a_sub_plan_reports_its_completion_into_the_parent_plan(
    mut t: TestPlatform,
    wait: Duration,
) {
    use soorma::common::PlanStatus;
    use soorma::planner::{TaskState, Tracker};
    let tracker = Tracker::start(t.platform()).await.unwrap();
    let handled = Handled::default();
    t.start(research_tools()).await.unwrap();
    t.start(research_planner(false)).await.unwrap();
    t.start(report_planner(handled.clone())).await.unwrap();
    let client = t.client().with_session("trip").with_timeout(wait);
    let reply = client
        .request("report.goal", json!({"topic": "rust"}), "report.done")
        .await
        .unwrap();
    let parent_id = reply.reply.request_id.clone();
    let report: Value = reply.into_result().unwrap();
    assert_eq!(report, json!({"report": "Report: 2 sources about rust"}));

    // The records: the child names its parent, each plan its planner; both are in the session.
    let plans = t.platform().plans();
    let parent = plans.get(&parent_id).await.unwrap().unwrap();
    assert_eq!(parent.planner.as_deref(), Some("report-planner"));
    assert!(parent.parent_plan_id.is_none());
    let children = plans.sub_plans(&parent_id).await.unwrap();
    assert_eq!(children.len(), 1);
    let child = &children[0];
    assert_eq!(
        child.plan_id,
        format!("{parent_id}-a1"),
        "the goal event's id"
    );
    assert_eq!(child.parent_plan_id.as_deref(), Some(parent_id.as_str()));
    assert_eq!(child.planner.as_deref(), Some("research-planner"));
    assert_eq!(child.status, PlanStatus::Completed);
    assert_eq!(child.session_id.as_deref(), Some("trip"));
    // The child's reply moved the parent by its transition and became its state's result.
    let steps: Vec<_> = parent
        .history
        .iter()
        .map(|s| (s.state.as_str(), s.on_event.as_deref()))
        .collect();
    assert_eq!(steps, [("start", None), ("done", Some("research.done"))]);
    assert_eq!(parent.results["start"]["summary"], "2 sources about rust");
    let session = t.platform().sessions().get("trip").await.unwrap().unwrap();
    assert_eq!(session.plan_ids, [parent_id.clone(), child.plan_id.clone()]);
    // Each planner advances only its own plans: the report planner never handled the child's
    // events (its search and analysis replies).
    let seen = handled.0.lock().unwrap().clone();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|p| *p == parent_id), "{seen:?}");

    // The tracker links them: the sub-plan is a task of the parent, and its sub-plan.
    let view = tracker
        .wait_for(&parent_id, wait, |p| {
            p.is_finished() && p.tasks.iter().all(|t| t.state.is_finished())
        })
        .await
        .unwrap();
    assert_eq!(view.sub_plans, std::slice::from_ref(&child.plan_id));
    let task = view.task(&child.plan_id).unwrap();
    assert_eq!(task.event_type.as_deref(), Some("research.goal"));
    assert_eq!(task.agent.as_deref(), Some("research-planner"));
    assert_eq!(task.state, TaskState::Completed);
    let child_view = tracker
        .wait_until_finished(&child.plan_id, wait)
        .await
        .unwrap();
    assert_eq!(
        child_view.parent_plan_id.as_deref(),
        Some(parent_id.as_str())
    );
    assert_eq!(child_view.session_id.as_deref(), Some("trip"));

    // A failed sub-plan fails the parent with its error (no transition takes a failure).
    let err = client
        .invoke::<Value>("report.goal", json!({"topic": "nothing"}), "report.done")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("nothing found for nothing"),
        "{err}"
    );
    assert_eq!(
        plans.by_status(PlanStatus::Failed).await.unwrap().len(),
        2,
        "the sub-plan and its parent"
    );
    t.shutdown().await.unwrap();
}

/// Summarises what was found, reporting progress on the way.
async fn summarize(mut task: TaskContext<Value>) -> soorma::Result<()> {
    let items = task.data["items"].as_array().cloned().unwrap_or_default();
    task.progress(0.5, format!("reading {} sources", items.len()))
        .await?;
    task.complete(json!({"summary": format!("{} sources read", items.len())}))
        .await?;
    Ok(())
}

async fn digest_goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    goal.start(&plan).await?;
    Ok(())
}

/// search (a tool) → summarize (a worker that reports progress) → done.
fn digest_planner() -> AgentBuilder {
    use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
    let plan = Plan::new(
        PlanDefinition::new("digest", "search, then summarize")
            .with_state(
                StateConfig::new("start", "search")
                    .with_action(
                        StateAction::new("search.requested", "search.completed")
                            .with_data(json!({"q": "{{goal.topic}}"})),
                    )
                    .with_transition(StateTransition::new("search.completed", "summarizing")),
            )
            .with_state(
                StateConfig::new("summarizing", "summarize")
                    .with_action(
                        StateAction::new("summarize.requested", "summarize.completed")
                            .with_data(json!({"items": "{{results.start.items}}"})),
                    )
                    .with_transition(StateTransition::new("summarize.completed", "done")),
            )
            .with_state(
                StateConfig::new("done", "")
                    .terminal()
                    .with_result(json!("{{results.summarizing.summary}}")),
            ),
    )
    .expect("a valid plan");
    Planner::new("digest-planner")
        .use_registered_handlers(false)
        .with_state(Arc::new(plan))
        .handler(Handler::on_goal("digest.goal", digest_goal))
}

scenario!(tracker_answers_where_a_plan_is_what_happened_and_which_tasks_ran);
async fn tracker_answers_where_a_plan_is_what_happened_and_which_tasks_ran(
    mut t: TestPlatform,
    wait: Duration,
) {
    use soorma::common::PlanStatus;
    use soorma::planner::{TaskState, Tracker, ViewSource};
    let tracker = Tracker::start(t.platform()).await.unwrap();
    t.start(research_tools()).await.unwrap();
    t.start(
        Worker::new("summarizer")
            .use_registered_handlers(false)
            .handler(Handler::on_task("summarize.requested", summarize)),
    )
    .await
    .unwrap();
    t.start(digest_planner()).await.unwrap();
    let reply = t
        .client()
        .with_timeout(wait)
        .request("digest.goal", json!({"topic": "tea"}), "digest.done")
        .await
        .unwrap();
    let plan_id = reply.reply.request_id.clone();
    assert_eq!(reply.into_result::<String>().unwrap(), "2 sources read");
    // The worker's progress carries the plan's id (its task came from the plan's action).
    let progress = t.expect_event("task.progress", wait).await.unwrap();
    assert_eq!(progress.data["plan_id"], plan_id.as_str());

    let plan = tracker
        .wait_for(&plan_id, wait, |p| {
            p.is_finished() && p.tasks.len() == 2 && p.tasks.iter().all(|t| t.state.is_finished())
        })
        .await
        .unwrap();
    // Where is it?
    assert_eq!(plan.source, ViewSource::Events);
    assert_eq!(plan.status, PlanStatus::Completed);
    assert_eq!(plan.current_state.as_deref(), Some("done"));
    assert_eq!(plan.plan_type.as_deref(), Some("digest"));
    assert_eq!(plan.result, Some(json!("2 sources read")));
    assert!(plan.updated_at.is_some() && plan.started_at <= plan.updated_at);
    // What happened?
    let happened: Vec<_> = plan
        .events
        .iter()
        .map(|e| (e.event_type.as_str(), e.state.as_deref()))
        .collect();
    assert_eq!(
        happened,
        [
            ("plan.started", Some("start")),
            ("plan.state_changed", Some("start")),
            ("plan.state_changed", Some("summarizing")),
            ("plan.state_changed", Some("done")),
            ("plan.completed", Some("done")),
        ]
    );
    assert!(plan.events.iter().all(|e| e.at.is_some()));
    assert!(plan.events.windows(2).all(|w| w[0].at <= w[1].at));
    // Which tasks ran?
    let search = &plan.tasks[0];
    assert_eq!(search.task_id, format!("{plan_id}-a1"));
    assert_eq!(search.event_type.as_deref(), Some("search.requested"));
    assert_eq!(search.agent.as_deref(), Some("research-tools"));
    assert_eq!(search.state, TaskState::Completed);
    let summary = &plan.tasks[1];
    assert_eq!(summary.task_id, format!("{plan_id}-a2"));
    assert_eq!(summary.event_type.as_deref(), Some("summarize.requested"));
    assert_eq!(summary.agent.as_deref(), Some("summarizer"));
    assert_eq!(summary.state, TaskState::Completed);
    assert_eq!(summary.message.as_deref(), Some("reading 2 sources"));
    assert_eq!(summary.progress, Some(1.0));
    assert_eq!(tracker.plan(&plan_id).await.unwrap(), Some(plan.clone()));
    assert_eq!(tracker.watched_plans().len(), 1);

    // A tracker started later answers from the stored plan record.
    let late = Tracker::start(t.platform()).await.unwrap();
    assert!(late.watched(&plan_id).is_none());
    let stored = late.plan(&plan_id).await.unwrap().unwrap();
    assert_eq!(stored.source, ViewSource::Stored);
    assert_eq!(stored.status, PlanStatus::Completed);
    assert_eq!(stored.current_state.as_deref(), Some("done"));
    let states: Vec<_> = stored
        .events
        .iter()
        .filter(|e| e.event_type == "plan.state_changed")
        .map(|e| e.state.as_deref().unwrap())
        .collect();
    assert_eq!(states, ["start", "summarizing", "done"]);
    assert_eq!(stored.events.last().unwrap().event_type, "plan.completed");
    assert!(stored.tasks.is_empty());
    assert!(late.plan("no-such-plan").await.unwrap().is_none());
    // The tracker of another tenant sees nothing of it.
    let other = Tracker::builder(t.platform())
        .tenant("acme")
        .start()
        .await
        .unwrap();
    assert!(other.plan(&plan_id).await.unwrap().is_none());
    t.shutdown().await.unwrap();
}

scenario!(a_late_event_for_an_ended_plan_leaves_the_goal_reply_to_the_handler_that_ended_it);
async fn a_late_event_for_an_ended_plan_leaves_the_goal_reply_to_the_handler_that_ended_it(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(research_tools()).await.unwrap();
    t.start(research_planner(false)).await.unwrap();
    let client = t.client().with_timeout(wait);
    let _: Value = client
        .invoke("research.goal", json!({"topic": "rust"}), "research.done")
        .await
        .unwrap();
    let completed = t.expect_event("plan.completed", wait).await.unwrap();
    let plan_id = completed.data["plan_id"].as_str().unwrap().to_owned();
    // As if the handler that ended the plan had not yet marked its reply sent (it is publishing
    // it, or died doing so).
    let key = soorma::state::StateKey::new(soorma::planner::PLANS_BUCKET, "default", &plan_id);
    let store = t.platform().state().clone();
    let load = || async {
        let stored = store.get(&key).await.unwrap().unwrap();
        serde_json::from_slice::<soorma::common::PlanRecord>(&stored.value).unwrap()
    };
    // The reply is marked sent after it is published: wait for the mark.
    let mut record = tokio::time::timeout(wait, async {
        loop {
            let record = load().await;
            if record.reply_sent {
                return record;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the reply is marked sent");
    assert!(record.ended_by.is_some(), "the ending event is recorded");
    record.reply_sent = false;
    store
        .put(&key, serde_json::to_vec(&record).unwrap())
        .await
        .unwrap();
    // A late copy of the last action's reply, with an id of its own (another publisher's).
    let late = EventEnvelope::new(
        "late-analysis",
        "analyzer",
        Topic::ActionResults,
        "analyze.completed",
    )
    .with_correlation_id(plan_id.clone())
    .with_plan_id(plan_id.clone())
    .with_data(json!({"request_id": plan_id, "success": true, "result": {}}));
    client.bus().publish_envelope(late).await.unwrap();
    t.expect_event("analyze.completed", wait).await.unwrap();
    tokio::time::sleep(wait / 10).await;
    assert!(
        !load().await.reply_sent,
        "the late event's handler republished the goal's reply"
    );
    t.shutdown().await.unwrap();
}

/// `asking` waits for `answer.given`; the goal handler asks a first question.
fn asking_plan() -> Plan {
    use soorma::common::{PlanDefinition, StateConfig, StateTransition};
    Plan::new(
        PlanDefinition::new("asking", "ask until the answer is final")
            .with_initial_state("asking")
            .with_state(
                StateConfig::new("asking", "")
                    .with_transition(StateTransition::new("answer.given", "done")),
            )
            .with_state(
                StateConfig::new("done", "")
                    .terminal()
                    .with_result(json!("{{results.asking.text}}")),
            ),
    )
    .expect("a valid plan")
}

async fn asking_goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    let mut plan = goal.start(&plan).await?;
    plan.request_human_input("First question?", "answer.given")
        .await
}

/// An answer marked `again` is not taken: the same state asks once more.
async fn asking_transition(mut plan: PlanContext) -> soorma::Result<()> {
    let again = plan.trigger().is_some_and(|e| e.data["again"] == true);
    if again {
        plan.request_human_input("Second question?", "answer.given")
            .await
    } else {
        plan.execute_next().await
    }
}

scenario!(a_plan_that_asks_twice_in_one_state_gets_both_questions_out);
async fn a_plan_that_asks_twice_in_one_state_gets_both_questions_out(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(
        Planner::new("asker")
            .use_registered_handlers(false)
            .with_state(Arc::new(asking_plan()))
            .handler(Handler::on_goal("ask.goal", asking_goal))
            .handler(Handler::on_transition(asking_transition)),
    )
    .await
    .unwrap();
    let client = t.client().with_timeout(wait * 2);
    let goal = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>("ask.goal", json!({}), "ask.done")
                .await
        }
    });
    let first = t
        .expect_event("notification.human_input", wait)
        .await
        .unwrap();
    let plan_id = first.correlation_id.clone().unwrap();
    client
        .bus()
        .publish(Topic::ActionResults, "answer.given", json!({"again": true}))
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    // The second question is a notification of its own (not a duplicate of the first).
    let second = t
        .expect_matching(
            |e| {
                e.event_type == "notification.human_input"
                    && e.data["question"] == "Second question?"
            },
            wait,
            "the second question",
        )
        .await
        .unwrap();
    assert_ne!(second.id, first.id);
    client
        .bus()
        .publish(Topic::ActionResults, "answer.given", json!({"text": "yes"}))
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    assert_eq!(goal.await.unwrap().unwrap(), json!("yes"));
    t.shutdown().await.unwrap();
}

async fn finalizing_goal(goal: GoalContext) -> soorma::Result<()> {
    use soorma::common::{PlanDefinition, StateConfig, StateTransition};
    let plan = Plan::new(
        PlanDefinition::new("finalizing", "ended by its handler")
            .with_initial_state("waiting")
            .with_state(
                StateConfig::new("waiting", "")
                    .with_transition(StateTransition::new("go.now", "done")),
            )
            .with_state(StateConfig::new("done", "").terminal()),
    )?;
    goal.start(&plan).await?;
    Ok(())
}

async fn finalizing_transition(mut plan: PlanContext) -> soorma::Result<()> {
    plan.finalize(json!({"ended": "by the handler"})).await
}

scenario!(a_plan_finalized_by_a_handler_whose_reply_failed_replies_when_the_event_comes_again);
async fn a_plan_finalized_by_a_handler_whose_reply_failed_replies_when_the_event_comes_again(
    t: TestPlatform,
    wait: Duration,
) {
    // The planner's first publish of the goal's reply fails (after `finalize` stored the
    // completed plan): its handler fails, retryably, and the event comes again.
    let failing = soorma_tests::slow_bus::FailingPublish::platform(t.platform(), "fin.done", 1);
    let planner = Planner::new("finalizer")
        .use_registered_handlers(false)
        .handler(Handler::on_goal("fin.goal", finalizing_goal))
        .handler(Handler::on_transition(finalizing_transition))
        .start(&failing)
        .await
        .unwrap();
    let client = t.client().with_timeout(wait * 2);
    let goal = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>("fin.goal", json!({}), "fin.done")
                .await
        }
    });
    let started = t.expect_event("plan.started", wait).await.unwrap();
    let plan_id = started.data["plan_id"].as_str().unwrap().to_owned();
    client
        .bus()
        .publish(Topic::ActionResults, "go.now", json!({}))
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    assert_eq!(
        goal.await.unwrap().unwrap(),
        json!({"ended": "by the handler"})
    );
    planner.shutdown().await.unwrap();
    t.shutdown().await.unwrap();
}

scenario!(a_client_that_called_a_plans_tool_itself_gets_the_goals_own_reply);
async fn a_client_that_called_a_plans_tool_itself_gets_the_goals_own_reply(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(research_tools()).await.unwrap();
    t.start(research_planner(false)).await.unwrap();
    let client = t.client().with_timeout(wait);
    // The client listens for `search.completed` from now on.
    let found: Value = client
        .invoke("search.requested", json!({"q": "tea"}), "search.completed")
        .await
        .unwrap();
    assert_eq!(found["count"], 2);
    // The plan's own `search.completed` (correlated with the goal's id, as all its actions'
    // replies are) is not the goal's reply.
    let report: Value = client
        .invoke("research.goal", json!({"topic": "rust"}), "research.done")
        .await
        .unwrap();
    assert_eq!(report["summary"], "2 sources about rust", "{report}");
    t.shutdown().await.unwrap();
}

async fn shout(req: Invocation<Value>) -> Result<Value, ToolError> {
    Ok(json!({"shouted": req.data["text"].as_str().unwrap_or_default().to_uppercase()}))
}

/// One action whose reply event is the goal's reply event too.
fn echo_plan() -> Plan {
    use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
    Plan::new(
        PlanDefinition::new("echo", "an action replying with the goal's reply event")
            .with_initial_state("shouting")
            .with_state(
                StateConfig::new("shouting", "")
                    .with_action(
                        StateAction::new("shout.requested", "echo.done")
                            .with_data(json!({"text": "{{goal.text}}"})),
                    )
                    .with_transition(StateTransition::new("echo.done", "done")),
            )
            .with_state(
                StateConfig::new("done", "")
                    .terminal()
                    .with_result(json!({"echoed": "{{results.shouting.shouted}}"})),
            ),
    )
    .expect("a valid plan")
}

async fn echo_goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    goal.start(&plan).await?;
    Ok(())
}

scenario!(a_goals_caller_does_not_take_an_actions_reply_of_the_same_event_for_the_goals);
async fn a_goals_caller_does_not_take_an_actions_reply_of_the_same_event_for_the_goals(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(
        Tool::new("shouter")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("shout.requested", shout)),
    )
    .await
    .unwrap();
    t.start(
        Planner::new("echoer")
            .use_registered_handlers(false)
            .with_state(Arc::new(echo_plan()))
            .handler(Handler::on_goal("echo.goal", echo_goal)),
    )
    .await
    .unwrap();
    let out: Value = t
        .client()
        .with_timeout(wait)
        .invoke("echo.goal", json!({"text": "hi"}), "echo.done")
        .await
        .unwrap();
    // The tool's `echo.done` (correlated with the goal's id, as all the plan's actions are)
    // came first; the goal's own reply is the plan's result.
    assert_eq!(out, json!({"echoed": "HI"}));
    t.shutdown().await.unwrap();
}

/// `searching` asks `kept.search.requested` (the test plays its tool) and the goal handler asks
/// a person; `go.ahead` moves the plan to `waiting`, where the search's reply (kept while the
/// plan waited for the person) moves it to `summing`, whose action carries the search's count.
fn kept_reply_plan() -> Plan {
    use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
    Plan::new(
        PlanDefinition::new("kept", "a reply kept during a question moves the plan on")
            .with_initial_state("searching")
            .with_state(
                StateConfig::new("searching", "")
                    .with_action(StateAction::new(
                        "kept.search.requested",
                        "kept.search.completed",
                    ))
                    .with_transition(StateTransition::new("go.ahead", "waiting")),
            )
            .with_state(
                StateConfig::new("waiting", "")
                    .with_transition(StateTransition::new("kept.search.completed", "summing")),
            )
            .with_state(
                StateConfig::new("summing", "")
                    .with_action(
                        StateAction::new("kept.sum.requested", "kept.sum.completed")
                            .with_data(json!({"found": "{{event.data.result.count}}"})),
                    )
                    .with_transition(StateTransition::new("kept.sum.completed", "done")),
            )
            .with_state(
                StateConfig::new("done", "")
                    .terminal()
                    .with_result(json!("{{results.summing}}")),
            ),
    )
    .expect("a valid plan")
}

async fn kept_reply_goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    let mut plan = goal.start(&plan).await?;
    plan.request_human_input("Go ahead?", "go.ahead").await
}

async fn kept_reply_transition(mut plan: PlanContext) -> soorma::Result<()> {
    plan.execute_next().await
}

async fn sum(req: Invocation<Value>) -> Result<Value, ToolError> {
    Ok(req.data)
}

scenario!(an_action_that_kept_events_led_to_is_published_when_the_answer_comes_again);
async fn an_action_that_kept_events_led_to_is_published_when_the_answer_comes_again(
    mut t: TestPlatform,
    wait: Duration,
) {
    // The planner's first publish of `kept.sum.requested` fails (after the answer's handler
    // stored the plan in `summing`): the handler fails, retryably, and the answer comes again.
    let failing =
        soorma_tests::slow_bus::FailingPublish::platform(t.platform(), "kept.sum.requested", 1);
    let planner = Planner::new("keeper")
        .use_registered_handlers(false)
        .with_state(Arc::new(kept_reply_plan()))
        .handler(Handler::on_goal("kept.goal", kept_reply_goal))
        .handler(Handler::on_transition(kept_reply_transition))
        .start(&failing)
        .await
        .unwrap();
    t.start(
        Tool::new("summer")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("kept.sum.requested", sum)),
    )
    .await
    .unwrap();
    let client = t.client().with_timeout(wait * 2);
    let goal = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>("kept.goal", json!({}), "kept.done")
                .await
        }
    });
    t.expect_event("notification.human_input", wait)
        .await
        .unwrap();
    let search = t.expect_event("kept.search.requested", wait).await.unwrap();
    let plan_id = search.correlation_id.clone().unwrap();
    // The search's reply comes while the plan waits for the person: kept.
    let reply = soorma::ActionReply::success(&search.id, json!({"count": 3}));
    client
        .bus()
        .publish(Topic::ActionResults, "kept.search.completed", reply)
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    let key = soorma::state::StateKey::new(soorma::planner::PLANS_BUCKET, "default", &plan_id);
    let started = std::time::Instant::now();
    loop {
        let stored = t.platform().state().get(&key).await.unwrap().unwrap();
        let record: soorma::common::PlanRecord = serde_json::from_slice(&stored.value).unwrap();
        if record.deferred.len() == 1 {
            break;
        }
        assert!(started.elapsed() < wait, "the reply was not kept");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client
        .bus()
        .publish(Topic::ActionResults, "go.ahead", json!({"yes": true}))
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    // Rendered with the kept reply (not the answer), published once the answer came again.
    assert_eq!(goal.await.unwrap().unwrap(), json!({"found": 3}));
    let sums = t.events_of_type("kept.sum.requested");
    assert_eq!(sums.len(), 1, "{sums:?}");
    planner.shutdown().await.unwrap();
    t.shutdown().await.unwrap();
}

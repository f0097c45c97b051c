//! Cancellation (`Client::cancel`): the instance running a request drops its handler, a
//! worker's task is marked canceled (and its pending sub-tasks canceled in turn), no reply goes
//! out, and only the request's own tenant can cancel it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use soorma::prelude::*;
use soorma::state::StateKey;
use soorma::testing::TestPlatform;
use soorma::{ActionReply, EventEnvelope, TaskRecord, TaskStatus};
use soorma_tests::agents::{Tracked, sleeper};

async fn task_record(t: &TestPlatform, tenant: &str, id: &str) -> Option<TaskRecord> {
    let key = StateKey::new(soorma::TASKS_BUCKET, tenant, id);
    let stored = t.platform().state().get(&key).await.unwrap()?;
    Some(serde_json::from_slice(&stored.value).unwrap())
}

scenario!(a_canceled_request_drops_its_handler_at_once_and_gets_no_reply);
async fn a_canceled_request_drops_its_handler_at_once_and_gets_no_reply(
    mut t: TestPlatform,
    wait: Duration,
) {
    let slept = Tracked::default();
    t.start(sleeper("sleeper", "sleep.requested", &slept))
        .await
        .unwrap();
    let acme = t.client().with_tenant("acme");
    let call = acme.request("sleep.requested", json!({"nap_ms": 30_000}), "sleep.done");
    let id = call.envelope().unwrap().id.clone();
    let waiting = tokio::spawn(async move { call.timeout(Duration::from_secs(60)).await });
    slept.wait_started(1, wait).await;

    // Another tenant's cancel of the same id (and the default tenant's) changes nothing.
    t.client().with_tenant("globex").cancel(&id).await.unwrap();
    t.client().cancel(&id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(slept.dropped(), 0, "another tenant canceled acme's request");

    acme.cancel(&id).await.unwrap();
    slept.wait_dropped(1, wait, "canceled").await;
    assert_eq!(slept.finished(), 0);
    // Acknowledged without a reply; the agent stops at once (nothing is running).
    tokio::time::sleep(wait / 10).await;
    assert!(
        t.events_of_type("sleep.done").is_empty(),
        "a reply went out"
    );
    assert!(!waiting.is_finished());
    waiting.abort();
    tokio::time::timeout(Duration::from_secs(5), t.shutdown())
        .await
        .expect("shutdown waited for a canceled handler")
        .unwrap();
}

async fn start_job(mut task: TaskContext<Value>) -> soorma::Result<()> {
    task.delegate_with(Delegation::new(
        "part.requested",
        &json!({"nap_ms": 30_000}),
        "part.done",
    ))
    .await?;
    Ok(())
}

async fn part_done(result: ResultContext) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    task.complete(json!("finished")).await?;
    Ok(())
}

scenario!(a_canceled_worker_task_and_its_sub_tasks_stop_and_late_results_change_nothing);
async fn a_canceled_worker_task_and_its_sub_tasks_stop_and_late_results_change_nothing(
    mut t: TestPlatform,
    wait: Duration,
) {
    let part = Tracked::default();
    t.start(sleeper("part", "part.requested", &part))
        .await
        .unwrap();
    t.start(
        Worker::new("jobs")
            .use_registered_handlers(false)
            .handler(Handler::on_task("job.requested", start_job))
            .handler(Handler::on_result("part.done", part_done)),
    )
    .await
    .unwrap();
    let acme = t.client().with_tenant("acme");
    let task_id = acme
        .bus()
        .request("job.requested", json!({}), "job.done")
        .tenant_id("acme")
        .await
        .unwrap();
    // The task waits for its sub-task, whose handler is running.
    part.wait_started(1, wait).await;
    let status = task_record(&t, "acme", &task_id).await.unwrap().status;
    assert_eq!(status, TaskStatus::Waiting);

    // Another tenant's cancel changes nothing.
    t.client()
        .with_tenant("globex")
        .cancel(&task_id)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        task_record(&t, "acme", &task_id).await.unwrap().status,
        TaskStatus::Waiting
    );
    assert!(task_record(&t, "globex", &task_id).await.is_none());
    assert_eq!(part.dropped(), 0);

    // The task is canceled, and its pending sub-task's handler dropped.
    acme.cancel(&task_id).await.unwrap();
    let deadline = Instant::now() + wait;
    loop {
        let record = task_record(&t, "acme", &task_id).await.unwrap();
        if record.status == TaskStatus::Canceled {
            break;
        }
        assert!(Instant::now() < deadline, "task not canceled: {record:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    part.wait_dropped(1, wait, "sub-task of a canceled task")
        .await;
    assert_eq!(part.finished(), 0);

    // A late result of the sub-task is recorded, but neither completes the task nor replies.
    let sub_request = t.events_of_type("part.requested")[0].clone();
    let sub_task_id = sub_request.correlation_id.clone().unwrap();
    let late = EventEnvelope::new(
        format!("late-{sub_task_id}"),
        "part",
        Topic::ActionResults,
        "part.done",
    )
    .with_correlation_id(sub_task_id.clone())
    .with_tenant_id("acme")
    .with_data(serde_json::to_value(ActionReply::success(&sub_request.id, json!(1))).unwrap());
    t.platform().bus().publish(late).await.unwrap();
    let deadline = Instant::now() + wait;
    loop {
        let info = t.sub_task("acme", &sub_task_id).await.unwrap().unwrap();
        if info.is_finished() {
            break;
        }
        assert!(Instant::now() < deadline, "the late result was not handled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(wait / 10).await;
    let record = task_record(&t, "acme", &task_id).await.unwrap();
    assert_eq!(record.status, TaskStatus::Canceled, "{record:?}");
    assert!(record.result.is_none());
    assert!(
        t.events_of_type("job.done").is_empty(),
        "a canceled task replied"
    );
    tokio::time::timeout(Duration::from_secs(5), t.shutdown())
        .await
        .expect("shutdown waited for a canceled handler")
        .unwrap();
}

scenario!(a_request_can_be_canceled_while_its_agent_shuts_down);
async fn a_request_can_be_canceled_while_its_agent_shuts_down(mut t: TestPlatform, wait: Duration) {
    let slept = Tracked::default();
    t.start(sleeper("sleeper", "sleep.requested", &slept))
        .await
        .unwrap();
    let acme = t.client().with_tenant("acme");
    let id = acme
        .bus()
        .request("sleep.requested", json!({"nap_ms": 30_000}), "sleep.done")
        .tenant_id("acme")
        .await
        .unwrap();
    slept.wait_started(1, wait).await;
    // Shutdown waits for the handler in flight...
    let stopping = tokio::spawn(t.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !stopping.is_finished(),
        "shutdown did not wait for the handler"
    );
    // ...which can still be canceled meanwhile.
    acme.cancel(&id).await.unwrap();
    slept
        .wait_dropped(1, wait, "canceled during shutdown")
        .await;
    tokio::time::timeout(Duration::from_secs(5), stopping)
        .await
        .expect("shutdown ends once the handler is dropped")
        .unwrap()
        .unwrap();
    assert_eq!(slept.finished(), 0);
}

async fn start_short_job(mut task: TaskContext<Value>) -> soorma::Result<()> {
    task.delegate_with(Delegation::new(
        "short.requested",
        &json!({"nap_ms": 500}),
        "short.done",
    ))
    .await?;
    Ok(())
}

scenario!(a_cancel_naming_a_results_id_does_not_drop_the_result);
async fn a_cancel_naming_a_results_id_does_not_drop_the_result(
    mut t: TestPlatform,
    wait: Duration,
) {
    let part = Tracked::default();
    t.start(sleeper("short", "short.requested", &part))
        .await
        .unwrap();
    t.start(
        Worker::new("short-jobs")
            .use_registered_handlers(false)
            .handler(Handler::on_task("short-job.requested", start_short_job))
            .handler(Handler::on_result("short.done", part_done)),
    )
    .await
    .unwrap();
    let acme = t.client().with_tenant("acme").with_timeout(wait);
    let job = tokio::spawn({
        let acme = acme.clone();
        async move {
            acme.invoke::<Value>("short-job.requested", json!({}), "short-job.done")
                .await
        }
    });
    let sub_request = t.expect_event("short.requested", wait).await.unwrap();
    // A reply's id is derived from its request's: anyone who saw the sub-task request can
    // name the result before it arrives.
    acme.cancel(&format!("{}-reply", sub_request.id))
        .await
        .unwrap();
    assert_eq!(job.await.unwrap().unwrap(), json!("finished"));
    assert_eq!(part.finished(), 1);
    t.shutdown().await.unwrap();
}

async fn napping_goal(goal: GoalContext) -> soorma::Result<()> {
    use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
    let plan = Plan::new(
        PlanDefinition::new("napping", "one long action")
            .with_initial_state("napping")
            .with_state(
                StateConfig::new("napping", "")
                    .with_action(
                        StateAction::new("long-nap.requested", "long-nap.done")
                            .with_data(json!({"nap_ms": 30_000})),
                    )
                    .with_transition(StateTransition::new("long-nap.done", "done")),
            )
            .with_state(StateConfig::new("done", "").terminal()),
    )?;
    goal.start(&plan).await?;
    Ok(())
}

scenario!(a_canceled_goal_ends_its_plan_without_a_reply_and_cancels_its_pending_action);
async fn a_canceled_goal_ends_its_plan_without_a_reply_and_cancels_its_pending_action(
    mut t: TestPlatform,
    wait: Duration,
) {
    let nap = Tracked::default();
    t.start(sleeper("napper", "long-nap.requested", &nap))
        .await
        .unwrap();
    t.start(
        Planner::new("nap-planner")
            .use_registered_handlers(false)
            .handler(Handler::on_goal("nap.goal", napping_goal)),
    )
    .await
    .unwrap();
    let acme = t.client().with_tenant("acme");
    let call = acme.request("nap.goal", json!({}), "nap.goal.done");
    let goal_id = call.envelope().unwrap().id.clone();
    let waiting = tokio::spawn(async move { call.await });
    nap.wait_started(1, wait).await;
    acme.cancel(&goal_id).await.unwrap();
    // The plan fails as canceled, and its action's handler is dropped.
    let key = StateKey::new(soorma::planner::PLANS_BUCKET, "acme", &goal_id);
    let deadline = Instant::now() + wait;
    let record = loop {
        let stored = t.platform().state().get(&key).await.unwrap().unwrap();
        let record: soorma::common::PlanRecord = serde_json::from_slice(&stored.value).unwrap();
        if record.status == soorma::common::PlanStatus::Failed {
            break record;
        }
        assert!(Instant::now() < deadline, "plan not canceled: {record:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(record.error.as_deref(), Some("the plan was canceled"));
    nap.wait_dropped(1, wait, "the canceled plan's action")
        .await;
    tokio::time::sleep(wait / 10).await;
    assert!(!waiting.is_finished(), "a canceled goal got a reply");
    assert!(t.events_of_type("nap.goal.done").is_empty());
    waiting.abort();
    t.shutdown().await.unwrap();
}

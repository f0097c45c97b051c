//! Cancellation (`Client::cancel`): the instance running a request drops its handler, a
//! worker's task is marked canceled (and its pending sub-tasks canceled in turn), no reply goes
//! out, and only the request's own tenant can cancel it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use soorma::prelude::*;
use soorma::state::StateKey;
use soorma::testing::TestPlatform;
use soorma::{ActionReply, EventEnvelope, TaskRecord, TaskStatus};

use crate::support::wait_until;

/// What a slow handler did: started, was dropped (its Drop guard ran), ran to its end.
#[derive(Clone, Default)]
struct Flags {
    started: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
}

impl Flags {
    fn get(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::SeqCst)
    }
}

/// Counts when dropped: with the handler's future if it is canceled.
struct CountOnDrop(Arc<AtomicUsize>);

impl Drop for CountOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Sleeps 30 s (far longer than any scenario waits) unless dropped.
async fn sleep_30s(_: Invocation<Value>, State(flags): State<Flags>) -> Result<Value, ToolError> {
    flags.started.fetch_add(1, Ordering::SeqCst);
    let _guard = CountOnDrop(flags.dropped.clone());
    tokio::time::sleep(Duration::from_secs(30)).await;
    flags.finished.fetch_add(1, Ordering::SeqCst);
    Ok(json!("woke up"))
}

fn sleeper(event: &str, flags: &Flags) -> AgentBuilder {
    Tool::new(format!("{}-tool", event.replace('.', "-")))
        .use_registered_handlers(false)
        .with_state(flags.clone())
        .handler(Handler::on_invoke(event, sleep_30s))
}

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
    let flags = Flags::default();
    t.start(sleeper("sleep.requested", &flags)).await.unwrap();
    let acme = t.client().with_tenant("acme");
    let call = acme.request("sleep.requested", json!({}), "sleep.done");
    let id = call.envelope().unwrap().id.clone();
    let waiting = tokio::spawn(async move { call.timeout(Duration::from_secs(60)).await });
    wait_until(wait, || Flags::get(&flags.started) == 1).await;

    // Another tenant's cancel of the same id (and the default tenant's) changes nothing.
    t.client().with_tenant("globex").cancel(&id).await.unwrap();
    t.client().cancel(&id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        Flags::get(&flags.dropped),
        0,
        "another tenant canceled acme's request"
    );

    let asked = Instant::now();
    acme.cancel(&id).await.unwrap();
    wait_until(wait, || Flags::get(&flags.dropped) == 1).await;
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "the handler was dropped {took:?} after the cancel"
    );
    assert_eq!(Flags::get(&flags.finished), 0);
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
    task.delegate_with(Delegation::new("part.requested", &json!({}), "part.done"))
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
    let flags = Flags::default();
    t.start(sleeper("part.requested", &flags)).await.unwrap();
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
    wait_until(wait, || Flags::get(&flags.started) == 1).await;
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
    assert_eq!(Flags::get(&flags.dropped), 0);

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
    wait_until(wait, || Flags::get(&flags.dropped) == 1).await;
    assert_eq!(Flags::get(&flags.finished), 0);

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
    let sub_key = StateKey::new(soorma::SUBTASKS_BUCKET, "acme", sub_task_id);
    let deadline = Instant::now() + wait;
    loop {
        let stored = t.platform().state().get(&sub_key).await.unwrap().unwrap();
        let info: soorma::SubTaskInfo = serde_json::from_slice(&stored.value).unwrap();
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

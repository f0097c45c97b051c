//! Workers (`on_task` / `on_result`): delegation, fan-out and fan-in (exactly once, under
//! duplicates and concurrency), failures, and asking a person.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use soorma::prelude::*;
use soorma::testing::TestPlatform;
use soorma::{AgentBuilder, EventEnvelope, TaskStatus};
use soorma_tests::agents::{batcher, fan_in, publisher, result_for, upper_tool};

use crate::support::{reply_of, wait_until};

scenario!(fan_out_with_repeated_event_type_keeps_sub_tasks_distinct_and_in_order);
async fn fan_out_with_repeated_event_type_keeps_sub_tasks_distinct_and_in_order(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(batcher()).await.unwrap();
    t.start(upper_tool()).await.unwrap();
    let out: Vec<String> = t
        .client()
        .invoke(
            "batch.requested",
            json!({"items": ["a", "b", "a", "c"]}),
            "batch.completed",
        )
        .await
        .unwrap();
    assert_eq!(out, ["A", "B", "A", "C"]);
    let progress = t.expect_event("task.progress", wait).await.unwrap();
    assert_eq!(progress.topic, Topic::SystemEvents);
    assert_eq!(progress.data["agent"], "batcher");
    assert_eq!(progress.data["progress"], 0.5);
    // The sub-task requests carried distinct correlation ids.
    let reqs = t.events_of_type("upper.requested");
    let mut ids: Vec<_> = reqs
        .iter()
        .map(|r| r.correlation_id.clone().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4);
    t.shutdown().await.unwrap();
}

scenario!(a_failed_sub_task_is_recorded_as_failed_in_the_group);
async fn a_failed_sub_task_is_recorded_as_failed_in_the_group(
    mut t: TestPlatform,
    _wait: Duration,
) {
    t.start(batcher()).await.unwrap();
    t.start(upper_tool()).await.unwrap();
    let out: Vec<Value> = t
        .client()
        .invoke(
            "batch.requested",
            json!({"items": ["ok", "fail"]}),
            "batch.completed",
        )
        .await
        .unwrap();
    assert_eq!(out, [json!("OK"), Value::Null]);
    t.shutdown().await.unwrap();
}

/// A worker chaining two delegations.
fn chainer() -> AgentBuilder {
    Worker::new("chainer")
        .use_registered_handlers(false)
        .handler(Handler::on_task("chain.requested", chain))
        .handler(Handler::on_result("chain.upper.done", chain_upper))
        .handler(Handler::on_result("chain.reverse.done", chain_reverse))
}

/// Chains two delegations sequentially: upper, then reverse, then completes.
async fn chain(mut task: TaskContext<String>) -> soorma::Result<()> {
    let input = task.data.clone();
    task.set_state("step", "upper")?;
    task.delegate_with(Delegation::new(
        "upper.requested",
        &input,
        "chain.upper.done",
    ))
    .await?;
    Ok(())
}

async fn chain_upper(result: ResultContext<String>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    assert_eq!(
        task.state_value::<String>("step")?.as_deref(),
        Some("upper")
    );
    let upper = result.data.clone().unwrap_or_default();
    task.set_state("step", "reverse")?;
    task.delegate_with(Delegation::new(
        "reverse.requested",
        &upper,
        "chain.reverse.done",
    ))
    .await?;
    Ok(())
}

async fn chain_reverse(result: ResultContext<String>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    assert_eq!(task.sub_tasks().await?.len(), 2);
    task.complete(json!({"final": result.data, "step": task.state_value::<String>("step")?}))
        .await?;
    Ok(())
}

/// A tool reversing text.
fn reverser() -> AgentBuilder {
    Tool::new("reverser")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("reverse.requested", reverse))
}

async fn reverse(req: Invocation<String>) -> Result<String, ToolError> {
    Ok(req.data.chars().rev().collect())
}

scenario!(sequential_delegation_chains_through_saved_task_state);
async fn sequential_delegation_chains_through_saved_task_state(
    mut t: TestPlatform,
    _wait: Duration,
) {
    for a in [chainer(), upper_tool(), reverser()] {
        t.start(a).await.unwrap();
    }
    let out: Value = t
        .client()
        .invoke("chain.requested", "abc", "chain.completed")
        .await
        .unwrap();
    assert_eq!(out, json!({"final": "CBA", "step": "reverse"}));
    t.shutdown().await.unwrap();
}

/// A worker whose task handler fails or panics.
fn exploder() -> AgentBuilder {
    Worker::new("exploder")
        .use_registered_handlers(false)
        .handler(Handler::on_task("explode.requested", explode))
}

async fn explode(task: TaskContext<u32>) -> soorma::Result<()> {
    if task.data == 0 {
        panic!("task handler exploded");
    }
    Err(Error::Handler(format!("cannot do {}", task.data)))
}

scenario!(task_handler_errors_and_panics_fail_the_task_with_an_error_reply);
async fn task_handler_errors_and_panics_fail_the_task_with_an_error_reply(
    mut t: TestPlatform,
    _wait: Duration,
) {
    t.start(exploder()).await.unwrap();
    let client = t.client();
    let e1 = client
        .invoke::<Value>("explode.requested", 7, "explode.done")
        .await
        .unwrap_err();
    assert!(e1.to_string().contains("cannot do 7"), "{e1}");
    let e2 = client
        .invoke::<Value>("explode.requested", 0, "explode.done")
        .await
        .unwrap_err();
    assert!(e2.to_string().contains("task handler exploded"), "{e2}");
    // The failed task is recorded.
    let reqs = t.events_of_type("explode.requested");
    let state = t.platform().state();
    let key = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "default", reqs[0].id.clone());
    let stored = state.get(&key).await.unwrap().unwrap();
    let record: soorma::TaskRecord = serde_json::from_slice(&stored.value).unwrap();
    assert_eq!(record.status, TaskStatus::Failed);
    t.shutdown().await.unwrap();
}

const FAN: usize = 1_000;

scenario!(concurrent_fan_in_of_1000_results_completes_exactly_once_with_all_results);
async fn concurrent_fan_in_of_1000_results_completes_exactly_once_with_all_results(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(fan_in()).await.unwrap();
    let client = t.client();
    client
        .bus()
        .request("big.requested", FAN as u32, "big.completed")
        .await
        .unwrap();
    wait_until(wait, || t.events_of_type("ghost.requested").len() == FAN).await;
    let requests = t.events_of_type("ghost.requested");

    // Every result delivered twice, all at once, from many tasks.
    let bus = client.bus();
    let mut sends = Vec::new();
    for copy in 0..2 {
        for req in &requests {
            let value: i64 = serde_json::from_value(req.data.clone()).unwrap();
            let mut env = result_for(req, value, None);
            if copy == 1 {
                env.id = format!("{}-dup", env.id);
            }
            let bus = bus.clone();
            sends.push(tokio::spawn(async move { bus.publish_envelope(env).await }));
        }
    }
    for s in sends {
        s.await.unwrap().unwrap();
    }
    let done = t.expect_event("big.completed", wait * 4).await.unwrap();
    // Give stragglers (duplicates) time to be handled, then check nothing else completed.
    tokio::time::sleep(wait / 10).await;
    assert_eq!(
        t.events_of_type("big.completed").len(),
        1,
        "exactly one completion"
    );
    let reply = reply_of(&done);
    let mut values: Vec<i64> = serde_json::from_value(reply.result.unwrap()).unwrap();
    assert_eq!(values.len(), FAN);
    assert_eq!(
        values,
        (0..FAN as i64).collect::<Vec<_>>(),
        "results in delegation order"
    );
    values.dedup();
    assert_eq!(values.len(), FAN);

    // A late duplicate with a different value changes nothing.
    bus.publish_envelope(result_for(&requests[0], 999_999, None))
        .await
        .unwrap();
    tokio::time::sleep(wait / 20).await;
    assert_eq!(t.events_of_type("big.completed").len(), 1);
    let task_id = t.events_of_type("big.requested")[0].id.clone();
    // Many results were recorded in the write that completed the group; one handler (or a
    // redelivery) saw it complete, not each of them.
    let saw_complete = soorma_tests::agents::SAW_GROUP_COMPLETE
        .lock()
        .unwrap()
        .iter()
        .filter(|id| **id == task_id)
        .count();
    assert_eq!(
        saw_complete, 1,
        "result handlers that saw the group complete"
    );
    let key = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "default", task_id);
    let stored = t.platform().state().get(&key).await.unwrap().unwrap();
    let record: soorma::TaskRecord = serde_json::from_slice(&stored.value).unwrap();
    assert_eq!(record.status, TaskStatus::Completed);
    assert_eq!(record.groups.len(), 1);
    assert!(
        record
            .groups
            .values()
            .all(|g| g.size == FAN as u32 && g.finished == FAN as u32)
    );
    let first = t
        .sub_task("default", requests[0].correlation_id.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first.result,
        Some(requests[0].data.clone()),
        "the late duplicate did not overwrite the result"
    );
    t.shutdown().await.unwrap();
}

scenario!(worker_asks_a_person_and_handles_the_answer_and_the_timeout);
async fn worker_asks_a_person_and_handles_the_answer_and_the_timeout(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(publisher()).await.unwrap();
    let client = t.client().with_timeout(wait * 2);
    let pending = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>("post.requested", json!({"timeout_ms": 20_000}), "post.done")
                .await
        }
    });
    let question = t
        .expect_event("notification.human_input", wait)
        .await
        .unwrap();
    assert_eq!(question.topic, Topic::NotificationEvents);
    assert_eq!(question.data["question"], "Publish this post?");
    assert_eq!(question.data["response_event"], "post.reviewed");
    let sub_task = question.correlation_id.clone().unwrap();
    client
        .bus()
        .publish(Topic::ActionResults, "post.reviewed", json!({"ok": true}))
        .correlation_id(sub_task.as_str())
        .await
        .unwrap();
    assert_eq!(pending.await.unwrap().unwrap(), json!({"published": true}));

    let err = client
        .invoke::<Value>("post.requested", json!({"timeout_ms": 300}), "post.done")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("no answer to \"Publish this post?\" within 0.3 s"),
        "{err}"
    );
    t.expect_event(soorma::TASK_TIMEOUT_EVENT, wait)
        .await
        .unwrap();
    t.shutdown().await.unwrap();
}

scenario!(results_for_unknown_or_foreign_sub_tasks_are_dead_lettered_without_touching_the_task);
async fn results_for_unknown_or_foreign_sub_tasks_are_dead_lettered_without_touching_the_task(
    mut t: TestPlatform,
    wait: Duration,
) {
    use soorma::state::StateKey;
    // No tool runs: globex's task waits for its one sub-task.
    t.start(batcher()).await.unwrap();
    let globex = t.client().with_tenant("globex").with_timeout(wait * 2);
    let call = tokio::spawn(async move {
        globex
            .invoke::<Vec<String>>(
                "batch.requested",
                json!({"items": ["a"]}),
                "batch.completed",
            )
            .await
    });
    let sub_request = t.expect_event("upper.requested", wait).await.unwrap();
    t.expect_event("task.progress", wait).await.unwrap();
    let sub_task_id = sub_request.correlation_id.clone().unwrap();
    let task_id = t.events_of_type("batch.requested")[0].id.clone();
    let state = t.platform().state().clone();
    let task_key = StateKey::new(soorma::TASKS_BUCKET, "globex", task_id);
    // The sub-task's group record, and every record of what globex's task delegated (a
    // result recorded would add a chunk) or of what acme's did (none).
    let (group_id, _) = sub_task_id.rsplit_once('-').unwrap();
    let group_key = StateKey::new(soorma::SUBTASKS_BUCKET, "globex", group_id);
    let revisions = || async {
        (
            state.get(&task_key).await.unwrap().unwrap().revision,
            state.get(&group_key).await.unwrap().unwrap().revision,
            state.keys(soorma::SUBTASKS_BUCKET, "globex").await.unwrap(),
            state.keys(soorma::SUBTASKS_BUCKET, "acme").await.unwrap(),
        )
    };
    let before = revisions().await;

    let result = |tenant: &str, correlation: &str, value: &str| {
        EventEnvelope::new(
            format!("hostile-{tenant}-{correlation}"),
            "attacker",
            Topic::ActionResults,
            "upper.completed",
        )
        .with_tenant_id(tenant)
        .with_correlation_id(correlation)
        .with_data(
            serde_json::to_value(soorma::ActionReply::success(&sub_request.id, json!(value)))
                .unwrap(),
        )
    };
    // Another tenant names globex's sub-task; a result names a sub-task of no task.
    let bus = t.platform().bus().clone();
    bus.publish(result("acme", &sub_task_id, "HIJACKED"))
        .await
        .unwrap();
    bus.publish(result("globex", "no-such-sub-task", "STRAY"))
        .await
        .unwrap();
    wait_until(wait, || t.events_of_type("event.dead_lettered").len() >= 2).await;
    let notices = t.events_of_type("event.dead_lettered");
    let mut tenants: Vec<&str> = notices.iter().map(|n| n.tenant()).collect();
    tenants.sort_unstable();
    assert_eq!(tenants, ["acme", "globex"]);
    for n in &notices {
        assert_eq!(n.data["agent"], "batcher");
        let reason = n.data["reason"].as_str().unwrap();
        assert!(reason.contains("no parent task"), "{reason}");
    }
    assert_eq!(revisions().await, before, "the task's state was touched");

    // The task still takes its real result.
    bus.publish(result("globex", &sub_task_id, "A"))
        .await
        .unwrap();
    let out = call.await.unwrap().unwrap();
    assert_eq!(out, ["A"]);
    t.shutdown().await.unwrap();
}

/// Sub-tasks per task of [`fanner`].
const PARTS: u32 = 5;

/// A worker fanning each task out to [`PARTS`] sub-tasks, answered concurrently; its result
/// handler completes the task when the group is in (as the guide shows), so concurrent results
/// of one task may all find the group complete.
fn fanner() -> AgentBuilder {
    Worker::new("fanner")
        .use_registered_handlers(false)
        .concurrency(64)
        .handler(Handler::on_task("fan5.requested", fan5))
        .handler(Handler::on_result("fan5.part.done", fan5_part_done))
}

async fn fan5(mut task: TaskContext<u32>) -> soorma::Result<()> {
    let base = task.data;
    let parts: Vec<Delegation> = (0..PARTS)
        .map(|i| Delegation::new("fan5.part.requested", &(base + i), "fan5.part.done"))
        .collect();
    task.delegate_parallel(parts).await?;
    Ok(())
}

async fn fan5_part_done(result: ResultContext<u32>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    if let Some(all) = task.group_results(result.group_id()).await? {
        let sum: u64 = all.iter().filter_map(|s| s.result.as_ref()?.as_u64()).sum();
        task.complete(sum).await?;
    }
    Ok(())
}

/// A tool answering the sub-tasks of [`fanner`] concurrently, after a short delay, so that
/// the results of one task come in at once.
fn part_tool() -> AgentBuilder {
    Tool::new("fan5-part")
        .use_registered_handlers(false)
        .concurrency(64)
        .handler(Handler::on_invoke("fan5.part.requested", part))
}

async fn part(req: Invocation<u32>) -> Result<u32, ToolError> {
    // The parts of one task were requested together: answer them together.
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(req.data)
}

scenario!(each_completion_of_a_concurrent_fan_in_is_published_once);
async fn each_completion_of_a_concurrent_fan_in_is_published_once(
    mut t: TestPlatform,
    wait: Duration,
) {
    const TASKS: u32 = 100;
    t.start(fanner()).await.unwrap();
    t.start(part_tool()).await.unwrap();
    // Every copy delivered, counted per task (the test platform's own log keeps one per id):
    // on NATS a core subscriber, which sees what JetStream's de-duplication hides.
    let mut observer = t
        .platform()
        .bus()
        .observe(Some(Topic::ActionResults))
        .await
        .unwrap();
    let seen: Arc<Mutex<HashMap<String, Vec<Arc<EventEnvelope>>>>> = Arc::default();
    let counting = tokio::spawn({
        let seen = seen.clone();
        async move {
            while let Some(delivery) = observer.next().await {
                let env = delivery.envelope;
                if env.event_type == "fan5.completed" {
                    let id = env.correlation_id.clone().unwrap_or_default();
                    seen.lock().unwrap().entry(id).or_default().push(env);
                }
            }
        }
    });
    let bus = t.client().bus();
    let mut expected = HashMap::new();
    for i in 0..TASKS {
        let base = i * 10;
        let id = bus
            .request("fan5.requested", base, "fan5.completed")
            .await
            .unwrap();
        expected.insert(id, u64::from(PARTS * base + PARTS * (PARTS - 1) / 2));
    }
    wait_until(wait * 3, || seen.lock().unwrap().len() == expected.len()).await;
    // Give a second copy of any completion time to show.
    tokio::time::sleep(wait / 10).await;
    counting.abort();
    let seen = seen.lock().unwrap().clone();
    let doubled = seen.values().filter(|copies| copies.len() > 1).count();
    assert_eq!(
        doubled, 0,
        "{doubled} of {TASKS} completions were published more than once"
    );
    for (id, copies) in &seen {
        let sum: u64 = serde_json::from_value(reply_of(&copies[0]).result.unwrap()).unwrap();
        assert_eq!(Some(&sum), expected.get(id), "the sum of task {id}");
    }
    t.shutdown().await.unwrap();
}

scenario!(a_late_result_for_an_ended_task_leaves_the_reply_to_the_handler_that_ended_it);
async fn a_late_result_for_an_ended_task_leaves_the_reply_to_the_handler_that_ended_it(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(fan_in()).await.unwrap();
    let bus = t.client().bus();
    let task_id = bus
        .request("big.requested", 2u32, "big.completed")
        .await
        .unwrap();
    wait_until(wait, || t.events_of_type("ghost.requested").len() == 2).await;
    let requests = t.events_of_type("ghost.requested");
    for (i, req) in requests.iter().enumerate() {
        bus.publish_envelope(result_for(req, i as i64, None))
            .await
            .unwrap();
    }
    t.expect_event("big.completed", wait).await.unwrap();
    // As if the handler that ended the task had not yet marked its reply sent (it is
    // publishing it, or died doing so).
    let key = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "default", task_id);
    let store = t.platform().state().clone();
    let load = || async {
        let stored = store.get(&key).await.unwrap().unwrap();
        serde_json::from_slice::<soorma::TaskRecord>(&stored.value).unwrap()
    };
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
    // A late copy of a sub-task's result, with an id of its own: its handler finds the group
    // complete and calls `complete` again.
    let mut late = result_for(&requests[0], 0, None);
    late.id = format!("{}-late", late.id);
    let late_id = late.id.clone();
    bus.publish_envelope(late).await.unwrap();
    wait_until(wait, || {
        t.events_of_type("ghost.completed")
            .iter()
            .any(|e| e.id == late_id)
    })
    .await;
    tokio::time::sleep(wait / 10).await;
    assert!(
        !load().await.reply_sent,
        "the late result's handler republished the task's reply"
    );
    t.shutdown().await.unwrap();
}

/// Delegations of [`large_group_worker`]'s one fan-out.
const LARGE_GROUP: u32 = 20_000;
/// Its two kinds of request, alternating, so that the group's members do not fit in one
/// record (each member a run of its own): the group record is paged.
const LARGE_KINDS: [(&str, &str); 2] = [
    (
        "large.group.member.alpha.requested",
        "large.group.member.alpha.done",
    ),
    (
        "large.group.member.bravo.requested",
        "large.group.member.bravo.done",
    ),
];

async fn large_fan_out(mut task: TaskContext<u32>) -> soorma::Result<()> {
    let d: Vec<Delegation> = (0..task.data)
        .map(|i| {
            let (event, reply) = LARGE_KINDS[i as usize % 2];
            Delegation::new(event, &i, reply)
        })
        .collect();
    task.delegate_parallel(d).await?;
    Ok(())
}

async fn large_member_done(result: ResultContext<u32>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    if let Some(all) = task.group_results(result.group_id()).await? {
        let members: Vec<(String, Value)> = all
            .into_iter()
            .map(|s| (s.event_type, s.result.unwrap_or_default()))
            .collect();
        task.complete(members).await?;
    }
    Ok(())
}

fn large_group_worker() -> AgentBuilder {
    Worker::new("large-group")
        .use_registered_handlers(false)
        .concurrency(64)
        .handler(Handler::on_task("large.requested", large_fan_out))
        .handler(Handler::on_result(LARGE_KINDS[0].1, large_member_done))
        .handler(Handler::on_result(LARGE_KINDS[1].1, large_member_done))
}

async fn large_member(req: Invocation<u32>) -> Result<u32, ToolError> {
    Ok(req.data * 3)
}

scenario!(a_fan_out_of_20000_mixed_delegations_completes_with_every_result_in_order);
async fn a_fan_out_of_20000_mixed_delegations_completes_with_every_result_in_order(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(
        Tool::new("large-members")
            .use_registered_handlers(false)
            .concurrency(64)
            .handler(Handler::on_invoke(LARGE_KINDS[0].0, large_member))
            .handler(Handler::on_invoke(LARGE_KINDS[1].0, large_member)),
    )
    .await
    .unwrap();
    t.start(large_group_worker()).await.unwrap();
    let members: Vec<(String, u32)> = t
        .client()
        .with_timeout(wait * 15)
        .invoke("large.requested", LARGE_GROUP, "large.completed")
        .await
        .unwrap();
    assert_eq!(members.len(), LARGE_GROUP as usize);
    for (i, (event, value)) in members.iter().enumerate() {
        assert_eq!(
            (event.as_str(), *value),
            (LARGE_KINDS[i % 2].0, i as u32 * 3),
            "member {i}"
        );
    }
    // One record for the group (and its pages), not one per sub-task.
    let task_id = t.events_of_type("large.requested")[0].id.clone();
    let stored = t
        .platform()
        .state()
        .keys(soorma::SUBTASKS_BUCKET, "default")
        .await
        .unwrap();
    let group = format!("{task_id}-g0");
    let pages = format!("{group}-p");
    // Results chunks: a batch's (`-r`), and those merges write (`-m<level>`, `-f`); and the
    // task's own result (20,000 members, over 256 KiB: stored apart).
    let is_chunk = |k: &str| {
        k.strip_prefix(&format!("{group}-"))
            .is_some_and(|c| c.starts_with(['r', 'm', 'f']))
            || k.starts_with(&format!("{task_id}-out"))
    };
    let not_results: Vec<&String> = stored.iter().filter(|k| !is_chunk(k)).collect();
    let first: Vec<&&String> = not_results.iter().take(5).collect();
    assert!(
        not_results.len() > 2
            && not_results.contains(&&group)
            && not_results
                .iter()
                .all(|k| **k == group || k.starts_with(&pages)),
        "the group's record and its pages, not a record per sub-task: {} records, {first:?}..",
        not_results.len()
    );
    // However many batches the results came in, the task lists a few chunks (runs of 16 of
    // one level are merged).
    let key = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "default", &task_id);
    let stored = t.platform().state().get(&key).await.unwrap().unwrap();
    let task: soorma::TaskRecord = serde_json::from_slice(&stored.value).unwrap();
    let listed = task.groups[&group].chunks.len();
    assert!(listed < 4 * 16, "{listed} chunks listed");
    t.shutdown().await.unwrap();
}

async fn mixed_fan_out(mut task: TaskContext) -> soorma::Result<()> {
    // Nobody serves these: the test plays the sub-agents.
    let d =
        LARGE_KINDS.map(|(event, reply)| Delegation::new(event, &(), reply).skip_consumer_check());
    task.delegate_parallel(d).await?;
    Ok(())
}

scenario!(a_result_with_another_members_reply_event_is_dead_lettered_without_touching_the_task);
async fn a_result_with_another_members_reply_event_is_dead_lettered_without_touching_the_task(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(
        Worker::new("mixed")
            .use_registered_handlers(false)
            .handler(Handler::on_task("mixed.requested", mixed_fan_out))
            .handler(Handler::on_result(LARGE_KINDS[0].1, large_member_done))
            .handler(Handler::on_result(LARGE_KINDS[1].1, large_member_done)),
    )
    .await
    .unwrap();
    let client = t.client().with_timeout(wait * 2);
    let call = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Vec<(String, u32)>>("mixed.requested", (), "mixed.completed")
                .await
        }
    });
    wait_until(wait, || {
        t.events_of_type(LARGE_KINDS[1].0).len() == 1
            && t.events_of_type(LARGE_KINDS[0].0).len() == 1
    })
    .await;
    let alpha = t.events_of_type(LARGE_KINDS[0].0)[0].clone();
    let bravo = t.events_of_type(LARGE_KINDS[1].0)[0].clone();
    let task_id = t.events_of_type("mixed.requested")[0].id.clone();
    let task_key = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "default", task_id);
    let state = t.platform().state().clone();
    let before = state.get(&task_key).await.unwrap().unwrap().revision;
    let reply = |request: &EventEnvelope, event: &str, value: u32| {
        EventEnvelope::new(
            format!("reply-{}-{event}", request.id),
            "sub-agent",
            Topic::ActionResults,
            event,
        )
        .with_correlation_id(request.correlation_id.clone().unwrap())
        .with_data(
            serde_json::to_value(soorma::ActionReply::success(&request.id, json!(value))).unwrap(),
        )
    };
    // Alpha's sub-task answered with bravo's reply event.
    let bus = t.platform().bus().clone();
    bus.publish(reply(&alpha, LARGE_KINDS[1].1, 666))
        .await
        .unwrap();
    let notice = t.expect_event("event.dead_lettered", wait).await.unwrap();
    let reason = notice.data["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!(
            "replies with `{}`, not `{}`",
            LARGE_KINDS[0].1, LARGE_KINDS[1].1
        )),
        "{reason}"
    );
    assert_eq!(
        state.get(&task_key).await.unwrap().unwrap().revision,
        before,
        "the task was touched"
    );
    // The right replies complete the task.
    bus.publish(reply(&alpha, LARGE_KINDS[0].1, 1))
        .await
        .unwrap();
    bus.publish(reply(&bravo, LARGE_KINDS[1].1, 2))
        .await
        .unwrap();
    let members = call.await.unwrap().unwrap();
    assert_eq!(
        members,
        [
            (LARGE_KINDS[0].0.to_owned(), 1),
            (LARGE_KINDS[1].0.to_owned(), 2)
        ]
    );
    t.shutdown().await.unwrap();
}

/// Links of [`long_chain`].
const LINKS: u64 = 120;

/// Delegates `count.requested` once; each reply delegates the next, [`LINKS`] times.
async fn long_chain(mut task: TaskContext<u64>) -> soorma::Result<()> {
    task.delegate_with(Delegation::new("count.requested", &0_u64, "count.done"))
        .await?;
    Ok(())
}

async fn long_chain_link(result: ResultContext<u64>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    let n = result.data.unwrap_or_default();
    if n >= LINKS {
        let longest = result.sub_task_id().map_or(0, str::len);
        task.complete(json!({"links": n, "longest_id": longest}))
            .await?;
    } else {
        task.delegate_with(Delegation::new("count.requested", &n, "count.done"))
            .await?;
    }
    Ok(())
}

async fn count(req: Invocation<u64>) -> Result<u64, ToolError> {
    Ok(req.data + 1)
}

scenario!(a_long_chain_of_delegations_keeps_its_ids_short);
async fn a_long_chain_of_delegations_keeps_its_ids_short(mut t: TestPlatform, wait: Duration) {
    t.start(
        Tool::new("counter")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("count.requested", count)),
    )
    .await
    .unwrap();
    t.start(
        Worker::new("chain-runner")
            .use_registered_handlers(false)
            .handler(Handler::on_task("long.requested", long_chain))
            .handler(Handler::on_result("count.done", long_chain_link)),
    )
    .await
    .unwrap();
    // Each link's group id derives from the reply it handles, which held the previous group
    // id: copied, ids grew with every link (NATS failed past about 90).
    let out: Value = t
        .client()
        .with_timeout(wait * 3)
        .invoke("long.requested", 0, "long.completed")
        .await
        .unwrap();
    assert_eq!(out["links"], LINKS);
    assert!(out["longest_id"].as_u64().unwrap() < 120, "{out}");
    t.shutdown().await.unwrap();
}

async fn staged(mut task: TaskContext) -> soorma::Result<()> {
    task.set_state("stage", 1)?;
    task.delegate_with(Delegation::new(
        "stage-one.requested",
        &json!({"nap_ms": 0}),
        "stage-one.done",
    ))
    .await?;
    Ok(())
}

async fn stage_one_done(result: ResultContext) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    task.set_state("stage", 2)?;
    task.delegate_with(Delegation::new(
        "stage-two.requested",
        &json!({"nap_ms": 400}),
        "stage-two.done",
    ))
    .await?;
    Ok(())
}

async fn stage_two_done(result: ResultContext) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    let stage: i64 = task.state_value("stage")?.unwrap_or_default();
    task.complete(json!({"stage_seen_last": stage})).await?;
    Ok(())
}

scenario!(a_redelivered_request_does_not_undo_the_state_a_result_handler_stored_since);
async fn a_redelivered_request_does_not_undo_the_state_a_result_handler_stored_since(
    mut t: TestPlatform,
    wait: Duration,
) {
    use soorma::dispatch::tower::{ServiceExt, layer::layer_fn, service_fn};
    use soorma::dispatch::{HandlerError, HandlerRequest, HandlerService};
    use soorma_tests::agents::{Tracked, sleeper};

    let (one, two) = (Tracked::default(), Tracked::default());
    t.start(sleeper("stage-one", "stage-one.requested", &one))
        .await
        .unwrap();
    t.start(sleeper("stage-two", "stage-two.requested", &two))
        .await
        .unwrap();
    // The request's first handling stores the task and delegates, then fails retryably (as
    // if its process died before acknowledging it): it comes again 100 ms later, once stage
    // one's result stored `stage: 2`.
    let failed_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fail_first_request = layer_fn(move |inner: HandlerService| {
        let failed_once = failed_once.clone();
        service_fn(move |req: HandlerRequest| {
            let (inner, failed_once) = (inner.clone(), failed_once.clone());
            let is_request = req.envelope().event_type == "staged.requested";
            async move {
                let out = inner.oneshot(req).await?;
                if is_request && !failed_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    return Err(HandlerError::retryable(
                        "an injected failure after delegating",
                    ));
                }
                Ok(out)
            }
        })
    });
    t.start(
        Worker::new("stager")
            .use_registered_handlers(false)
            .handler(Handler::on_task("staged.requested", staged))
            .handler(Handler::on_result("stage-one.done", stage_one_done))
            .handler(Handler::on_result("stage-two.done", stage_two_done))
            .layer(fail_first_request),
    )
    .await
    .unwrap();
    let out: Value = t
        .client()
        .with_timeout(wait)
        .invoke("staged.requested", json!({}), "staged.done")
        .await
        .unwrap();
    assert_eq!(out, json!({"stage_seen_last": 2}));
    assert_eq!((one.finished(), two.finished()), (1, 1));
    t.shutdown().await.unwrap();
}

async fn first_takes(mut task: TaskContext) -> soorma::Result<()> {
    task.delegate_with(Delegation::new(
        "first-nap.requested",
        &json!({"nap_ms": 300}),
        "first-nap.done",
    ))
    .await?;
    Ok(())
}

async fn first_nap_done(result: ResultContext) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    task.complete(json!("first")).await?;
    Ok(())
}

/// Completes at once, once the first worker stored the task (its sub-task has started).
async fn second_takes(
    mut task: TaskContext,
    State(first_nap): State<soorma_tests::agents::Tracked>,
) -> soorma::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while first_nap.started() == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    task.complete(json!("second")).await?;
    Ok(())
}

scenario!(a_second_worker_taking_the_same_request_does_not_touch_the_first_ones_task);
async fn a_second_worker_taking_the_same_request_does_not_touch_the_first_ones_task(
    mut t: TestPlatform,
    wait: Duration,
) {
    use soorma_tests::agents::{Tracked, sleeper};
    let nap = Tracked::default();
    t.start(sleeper("first-napper", "first-nap.requested", &nap))
        .await
        .unwrap();
    t.start(
        Worker::new("first-worker")
            .use_registered_handlers(false)
            .handler(Handler::on_task("shared.requested", first_takes))
            .handler(Handler::on_result("first-nap.done", first_nap_done)),
    )
    .await
    .unwrap();
    t.start(
        Worker::new("second-worker")
            .use_registered_handlers(false)
            .with_state(nap.clone())
            .handler(Handler::on_task("shared.requested", second_takes)),
    )
    .await
    .unwrap();
    let out: Value = t
        .client()
        .with_timeout(wait)
        .invoke("shared.requested", json!({}), "shared.done")
        .await
        .unwrap();
    assert_eq!(out, json!("first"));
    // The second worker's attempt is dead-lettered, naming both agents.
    t.expect_matching(
        |e| {
            e.event_type == "event.dead_lettered"
                && e.data
                    .to_string()
                    .contains("both take `shared.requested` requests")
        },
        wait,
        "the second worker's dead letter",
    )
    .await
    .unwrap();
    t.shutdown().await.unwrap();
}

async fn big_task(mut task: TaskContext<String>) -> soorma::Result<()> {
    task.delegate_parallel(vec![Delegation::new(
        "twin.requested",
        &task.data.len(),
        "twin.done",
    )])
    .await?;
    Ok(())
}

/// Completes the task with a result as large as its request.
async fn big_task_done(result: ResultContext<usize>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    task.complete("y".repeat(result.data.unwrap_or_default()))
        .await?;
    Ok(())
}

async fn twin(req: Invocation<usize>) -> Result<usize, ToolError> {
    Ok(req.data)
}

/// Completes at once with a result as large as its request.
async fn big_direct(mut task: TaskContext<String>) -> soorma::Result<()> {
    let size = task.data.len();
    task.complete("z".repeat(size)).await?;
    Ok(())
}

/// The keys of the results stored apart for task `task_id`.
async fn results_apart(t: &TestPlatform, task_id: &str) -> Vec<String> {
    let keys = t
        .platform()
        .state()
        .keys(soorma::SUBTASKS_BUCKET, "default")
        .await
        .unwrap();
    keys.into_iter()
        .filter(|k| k.starts_with(&format!("{task_id}-out")))
        .collect()
}

scenario!(a_result_as_large_as_its_600_kb_request_is_replied_also_when_the_reply_comes_again);
async fn a_result_as_large_as_its_600_kb_request_is_replied_also_when_the_reply_comes_again(
    mut t: TestPlatform,
    wait: Duration,
) {
    // Together they pass what one stored value holds on NATS (1 MiB): the result is stored
    // apart. The first publish of the reply fails after the task was stored: the result's
    // handler runs again and replies with the stored result.
    let failing =
        soorma_tests::slow_bus::FailingPublish::platform(t.platform(), "big.completed", 1);
    let failing = soorma_tests::slow_bus::FailingPublish::platform(&failing, "direct.done", 1);
    let worker = Worker::new("big")
        .use_registered_handlers(false)
        .handler(Handler::on_task("big.requested", big_task))
        .handler(Handler::on_result("twin.done", big_task_done))
        .handler(Handler::on_task("direct.requested", big_direct))
        .start(&failing)
        .await
        .unwrap();
    t.start(
        Tool::new("twin")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("twin.requested", twin)),
    )
    .await
    .unwrap();
    let size = 600_000;
    let result: String = t
        .client()
        .with_timeout(wait * 2)
        .invoke("big.requested", "x".repeat(size), "big.completed")
        .await
        .unwrap();
    assert_eq!(result.len(), size);
    assert!(result.bytes().all(|b| b == b'y'));
    let task_id = t.events_of_type("big.requested")[0].id.clone();
    let key = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "default", &task_id);
    let stored = t.platform().state().get(&key).await.unwrap().unwrap();
    let task: soorma::TaskRecord = serde_json::from_slice(&stored.value).unwrap();
    assert_eq!(task.status, TaskStatus::Completed);
    assert!(
        task.result.is_none() && task.result_apart.is_some(),
        "{:?}",
        task.result_apart
    );
    assert!(stored.value.len() < 700_000, "{} bytes", stored.value.len());
    assert_eq!(results_apart(&t, &task_id).await.len(), 1);
    // A task completed by its request's handler: the request comes again (its reply's publish
    // failed) and is handled again, storing no second result.
    let result: String = t
        .client()
        .with_timeout(wait * 2)
        .invoke("direct.requested", "x".repeat(size), "direct.done")
        .await
        .unwrap();
    assert_eq!(result.len(), size);
    let task_id = t.events_of_type("direct.requested")[0].id.clone();
    assert_eq!(results_apart(&t, &task_id).await.len(), 1);
    worker.shutdown().await.unwrap();
    t.shutdown().await.unwrap();
}

//! Workflows run in a worker task (`Handler::workflow`, `Handler::run_workflows`): each step
//! starts as soon as its own dependencies are done, failure policies, retries, fallbacks and
//! timeouts, parallel questions to people, sub-workflows, cancellation.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use soorma::common::{StepStatus, WorkflowDefinition, WorkflowOutput, WorkflowSpec, WorkflowStep};
use soorma::prelude::*;
use soorma::testing::TestPlatform;
use soorma::workflow::Workflow;
use soorma::{EventEnvelope, Topic};
use soorma_tests::agents::{Tracked, sleeper};

/// Opened by the test: `wf.gated` calls wait for it.
#[derive(Clone)]
struct Gate(Arc<tokio::sync::Semaphore>);

impl Default for Gate {
    fn default() -> Self {
        Self(Arc::new(tokio::sync::Semaphore::new(0)))
    }
}

impl Gate {
    fn open(&self) {
        self.0.add_permits(1_000);
    }
}

/// Calls of `wf.flaky`.
#[derive(Clone, Default)]
struct Calls(Arc<AtomicUsize>);

/// Echoes `text` and its length.
async fn echo(req: Invocation<Value>) -> Result<Value, ToolError> {
    let text = req.data["text"].as_str().unwrap_or_default().to_owned();
    Ok(json!({"text": text, "len": text.len()}))
}

/// Echoes `text` once the gate is open.
async fn gated(req: Invocation<Value>, State(gate): State<Gate>) -> Result<Value, ToolError> {
    let _permit = gate
        .0
        .acquire()
        .await
        .map_err(|e| ToolError::new(e.to_string()))?;
    Ok(json!({"text": format!("slow {}", req.data["text"].as_str().unwrap_or_default())}))
}

/// Always fails.
async fn fail(_req: Invocation<Value>, State(calls): State<Calls>) -> Result<Value, ToolError> {
    calls.0.fetch_add(1, Ordering::SeqCst);
    Err(ToolError::new("the flaky service is down"))
}

fn tools(gate: &Gate, calls: &Calls) -> AgentBuilder {
    Tool::new("wf-tools")
        .use_registered_handlers(false)
        .with_state(gate.clone())
        .with_state(calls.clone())
        .handler(Handler::on_invoke("wf.echo", echo))
        .handler(Handler::on_invoke("wf.gated", gated))
        .handler(Handler::on_invoke("wf.flaky", fail))
}

fn runner(event: &str, workflow: &str) -> AgentBuilder {
    let workflow = Workflow::from_json(workflow).expect("a valid workflow");
    Worker::new("wf-runner")
        .use_registered_handlers(false)
        .handler(Handler::workflow(event, workflow))
        .handler(Handler::run_workflows())
}

/// The `workflow.step.<what>` event of `step`, when there is one.
fn step_event(t: &TestPlatform, what: &str, step: &str) -> Option<Arc<EventEnvelope>> {
    t.events_of_type(&format!("workflow.step.{what}"))
        .into_iter()
        .find(|e| e.data["step"] == step)
}

async fn expect_step(
    t: &TestPlatform,
    what: &str,
    step: &str,
    wait: Duration,
) -> Arc<EventEnvelope> {
    let event = format!("workflow.step.{what}");
    t.expect_matching(
        |e| e.event_type == event && e.data["step"] == step,
        wait,
        &format!("{event} of `{step}`"),
    )
    .await
    .unwrap()
}

scenario!(a_step_starts_when_its_own_dependencies_are_done_not_when_its_level_is);
async fn a_step_starts_when_its_own_dependencies_are_done_not_when_its_level_is(
    mut t: TestPlatform,
    wait: Duration,
) {
    let (gate, calls) = (Gate::default(), Calls::default());
    t.start(tools(&gate, &calls)).await.unwrap();
    t.start(runner(
        "research.requested",
        r#"{"goal": "Research", "steps": [
          {"id": "rewrite", "operator": "wf.echo", "input_mapping": {"text": "{{topic}}"}},
          {"id": "slow", "operator": "wf.gated", "depends_on": ["rewrite"], "input_mapping": {"text": "{{rewrite.text}}"}},
          {"id": "fast", "operator": "wf.echo", "depends_on": ["rewrite"], "input_mapping": {"text": "{{rewrite.text}}!"}},
          {"id": "after_fast", "operator": "wf.echo", "depends_on": ["fast"], "input_mapping": {"text": "{{fast.text}}?"}},
          {"id": "join", "operator": "wf.echo", "depends_on": ["slow", "after_fast"],
           "input_mapping": {"text": "{{slow.text}} + {{after_fast.text}}"}}
        ]}"#,
    ))
    .await
    .unwrap();
    let client = t.client().with_timeout(wait * 2);
    let run = tokio::spawn(async move {
        client
            .invoke::<WorkflowOutput>(
                "research.requested",
                json!({"topic": "rust"}),
                "research.completed",
            )
            .await
    });
    // `after_fast` is a level below `slow`, which still waits: it ran anyway.
    expect_step(&t, "completed", "after_fast", wait).await;
    assert!(
        step_event(&t, "completed", "slow").is_none(),
        "the slow step cannot have completed"
    );
    assert!(
        step_event(&t, "started", "join").is_none(),
        "`join` waits for `slow`"
    );
    gate.open();
    let out = run.await.unwrap().unwrap();
    assert_eq!(out.goal, "Research");
    assert_eq!(out.steps.len(), 5);
    assert!(
        out.steps
            .values()
            .all(|s| s.status == StepStatus::Completed && s.attempts == 1),
        "{out:?}"
    );
    assert_eq!(out.output("join").unwrap()["text"], "slow rust + rust!?");
    // Progress names what each step called and the sub-task it is.
    let started = step_event(&t, "started", "slow").unwrap();
    assert_eq!(started.topic, Topic::SystemEvents);
    assert_eq!(started.data["calls"], "wf.gated");
    let request = t.events_of_type("wf.gated")[0].clone();
    assert_eq!(started.data["sub_task_id"], json!(request.correlation_id));
    assert_eq!(t.events_of_type("wf.echo").len(), 4, "each step ran once");
    t.shutdown().await.unwrap();
}

scenario!(failure_policies_fail_fast_skip_descendants_and_continue);
async fn failure_policies_fail_fast_skip_descendants_and_continue(
    mut t: TestPlatform,
    wait: Duration,
) {
    let (gate, calls) = (Gate::default(), Calls::default());
    t.start(tools(&gate, &calls)).await.unwrap();
    t.start(runner(
        "policies.requested",
        r#"{"goal": "Policies", "steps": [
          {"id": "broken", "operator": "wf.flaky", "on_failure": "skip_descendants"},
          {"id": "needs_broken", "operator": "wf.echo", "depends_on": ["broken"]},
          {"id": "grandchild", "operator": "wf.echo", "depends_on": ["needs_broken"]},
          {"id": "optional", "operator": "wf.flaky", "on_failure": "continue"},
          {"id": "after_optional", "operator": "wf.echo", "depends_on": ["optional"],
           "input_mapping": {"text": "{{ optional.text | default: 'no optional' }}"}},
          {"id": "fine", "operator": "wf.echo", "input_mapping": {"text": "ok"}}
        ]}"#,
    ))
    .await
    .unwrap();
    let client = t.client().with_timeout(wait * 2);
    let out: WorkflowOutput = client
        .invoke("policies.requested", json!({}), "policies.completed")
        .await
        .unwrap();
    let status = |id: &str| out.steps[id].status;
    assert_eq!(status("broken"), StepStatus::Failed);
    assert_eq!(
        out.steps["broken"].error.as_deref(),
        Some("the flaky service is down")
    );
    assert_eq!(status("needs_broken"), StepStatus::Skipped);
    assert_eq!(status("grandchild"), StepStatus::Skipped);
    assert!(
        out.steps["grandchild"]
            .error
            .as_deref()
            .unwrap()
            .contains("needs_broken")
    );
    assert_eq!(status("optional"), StepStatus::Failed);
    assert_eq!(out.output("after_optional").unwrap()["text"], "no optional");
    assert_eq!(out.output("fine").unwrap()["text"], "ok");
    expect_step(&t, "skipped", "grandchild", wait).await;
    expect_step(&t, "failed", "optional", wait).await;

    // Fail fast (the default): the task fails at once, and the step still running is canceled.
    let slept = Tracked::default();
    t.start(sleeper("wf-sleeper", "wf.nap", &slept))
        .await
        .unwrap();
    let spec = WorkflowSpec::new(
        WorkflowDefinition::new("Fail fast")
            .with_step(WorkflowStep::new("nap", "wf.nap").with_input("nap_ms", 30_000))
            .with_step(WorkflowStep::new("broken", "wf.flaky").depends_on("gate"))
            .with_step(WorkflowStep::new("gate", "wf.echo").with_input("text", "{{input.text}}")),
        json!({"text": "go"}),
    );
    let err = client.call(spec).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("step `broken` failed: the flaky service is down"),
        "{err}"
    );
    slept
        .wait_dropped(1, wait, "the running step of a failed workflow")
        .await;
    t.shutdown().await.unwrap();
}

scenario!(a_failed_step_is_retried_then_its_fallback_is_called);
async fn a_failed_step_is_retried_then_its_fallback_is_called(mut t: TestPlatform, wait: Duration) {
    let (gate, calls) = (Gate::default(), Calls::default());
    t.start(tools(&gate, &calls)).await.unwrap();
    t.start(runner(
        "retry.requested",
        r#"{"goal": "Retry", "steps": [
          {"id": "call", "operator": "wf.flaky", "retries": 2, "fallback": "wf.echo",
           "input_mapping": {"text": "{{q}}"}},
          {"id": "next", "operator": "wf.echo", "depends_on": ["call"], "input_mapping": {"text": "{{call.text}}."}}
        ]}"#,
    ))
    .await
    .unwrap();
    let out: WorkflowOutput = t
        .client()
        .with_timeout(wait * 2)
        .invoke("retry.requested", json!({"q": "hello"}), "retry.completed")
        .await
        .unwrap();
    assert_eq!(
        calls.0.load(Ordering::SeqCst),
        3,
        "the first attempt and two retries"
    );
    assert_eq!(
        out.steps["call"].attempts, 4,
        "three calls of the operator, one of the fallback"
    );
    assert_eq!(out.output("next").unwrap()["text"], "hello.");
    let retrying = t.events_of_type("workflow.step.retrying");
    assert_eq!(retrying.len(), 3, "two retries and the fallback");
    assert_eq!(retrying[2].data["calls"], "wf.echo");
    assert_eq!(retrying[2].data["error"], "the flaky service is down");
    t.shutdown().await.unwrap();
}

scenario!(a_step_that_times_out_is_canceled_and_its_fallback_runs);
async fn a_step_that_times_out_is_canceled_and_its_fallback_runs(
    mut t: TestPlatform,
    wait: Duration,
) {
    let (gate, calls) = (Gate::default(), Calls::default());
    let slept = Tracked::default();
    t.start(tools(&gate, &calls)).await.unwrap();
    t.start(sleeper("wf-sleeper", "wf.nap", &slept))
        .await
        .unwrap();
    t.start(runner(
        "timeout.requested",
        r#"{"goal": "Timeout", "steps": [
          {"id": "nap", "operator": "wf.nap", "timeout": "300ms", "fallback": "wf.echo",
           "input_mapping": {"nap_ms": 60000, "text": "fell back"}}
        ]}"#,
    ))
    .await
    .unwrap();
    let out: WorkflowOutput = t
        .client()
        .with_timeout(wait * 2)
        .invoke("timeout.requested", json!({}), "timeout.completed")
        .await
        .unwrap();
    assert_eq!(out.output("nap").unwrap()["text"], "fell back");
    let retrying = expect_step(&t, "retrying", "nap", wait).await;
    assert!(
        retrying.data["error"]
            .as_str()
            .unwrap()
            .contains("timed out after 300ms"),
        "{retrying:?}"
    );
    slept.wait_dropped(1, wait, "the timed-out attempt").await;
    t.shutdown().await.unwrap();
}

scenario!(parallel_questions_to_people_resume_independently);
async fn parallel_questions_to_people_resume_independently(mut t: TestPlatform, wait: Duration) {
    let (gate, calls) = (Gate::default(), Calls::default());
    t.start(tools(&gate, &calls)).await.unwrap();
    t.start(runner(
        "review.requested",
        r#"{"goal": "Review", "steps": [
          {"id": "draft", "operator": "wf.echo", "input_mapping": {"text": "{{text}}"}},
          {"id": "legal", "depends_on": ["draft"], "input_mapping": {"draft": "{{draft.text}}"},
           "human_input": {"question": "Legal ok?", "response_schema": {"type": "object",
             "required": ["verdict"], "properties": {"verdict": {"enum": ["yes", "no"]}}}}},
          {"id": "brand", "human_input": {"question": "Brand ok?"}, "depends_on": ["draft"]},
          {"id": "after_brand", "operator": "wf.echo", "depends_on": ["brand"],
           "input_mapping": {"text": "brand says {{brand.verdict}}"}},
          {"id": "after_legal", "operator": "wf.echo", "depends_on": ["legal"],
           "input_mapping": {"text": "legal says {{legal.verdict}}"}}
        ]}"#,
    ))
    .await
    .unwrap();
    let client = t.client().with_timeout(wait * 3);
    let run = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<WorkflowOutput>(
                    "review.requested",
                    json!({"text": "launch"}),
                    "review.completed",
                )
                .await
        }
    });
    let question = |step: &'static str| {
        let t = &t;
        async move {
            t.expect_matching(
                |e| e.event_type == "notification.human_input" && e.data["step"] == step,
                wait,
                step,
            )
            .await
            .unwrap()
        }
    };
    let legal = question("legal").await;
    let brand = question("brand").await;
    assert_eq!(legal.topic, Topic::NotificationEvents);
    assert_eq!(legal.data["question"], "Legal ok?");
    assert_eq!(legal.data["context"], json!({"draft": "launch"}));
    assert_ne!(
        legal.correlation_id, brand.correlation_id,
        "each question is its own sub-task"
    );
    let answer = |q: &EventEnvelope, verdict: &str| {
        client
            .bus()
            .publish(
                Topic::ActionResults,
                q.data["response_event"].as_str().unwrap(),
                json!({"verdict": verdict}),
            )
            .correlation_id(q.correlation_id.clone().unwrap())
    };
    answer(&brand, "yes").await.unwrap();
    expect_step(&t, "completed", "after_brand", wait).await;
    assert!(
        step_event(&t, "started", "after_legal").is_none(),
        "legal has not answered"
    );
    answer(&legal, "no").await.unwrap();
    let out = run.await.unwrap().unwrap();
    assert_eq!(out.output("after_legal").unwrap()["text"], "legal says no");
    assert_eq!(out.output("brand").unwrap(), &json!({"verdict": "yes"}));
    t.shutdown().await.unwrap();
}

scenario!(a_sub_workflow_runs_as_a_task_of_its_own_and_its_output_feeds_the_next_step);
async fn a_sub_workflow_runs_as_a_task_of_its_own_and_its_output_feeds_the_next_step(
    mut t: TestPlatform,
    wait: Duration,
) {
    let (gate, calls) = (Gate::default(), Calls::default());
    t.start(tools(&gate, &calls)).await.unwrap();
    t.start(runner(
        "outer.requested",
        r#"{"goal": "Outer", "steps": [
          {"id": "inner", "input_mapping": {"word": "{{topic}}"}, "sub_workflow": {
            "goal": "Inner", "steps": [{"id": "shout", "operator": "wf.echo", "input_mapping": {"text": "{{word}}!"}}]}},
          {"id": "after", "operator": "wf.echo", "depends_on": ["inner"],
           "input_mapping": {"text": "{{inner.steps.shout.output.text}}?"}}
        ]}"#,
    ))
    .await
    .unwrap();
    let out: WorkflowOutput = t
        .client()
        .with_timeout(wait * 2)
        .invoke(
            "outer.requested",
            json!({"topic": "rust"}),
            "outer.completed",
        )
        .await
        .unwrap();
    assert_eq!(out.output("after").unwrap()["text"], "rust!?");
    let run = t.events_of_type("workflow.run.requested");
    assert_eq!(run.len(), 1);
    assert_eq!(run[0].data["input"], json!({"word": "rust"}));

    // A definition that is not valid fails the run with every problem.
    let broken = WorkflowSpec::new(
        WorkflowDefinition::new("")
            .with_step(WorkflowStep::new("a", "wf.echo").depends_on("b"))
            .with_step(WorkflowStep::new("b", "wf.echo").depends_on("a")),
        json!({}),
    );
    let err = t
        .client()
        .with_timeout(wait)
        .call(broken)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`goal` is empty") && err.contains("dependency cycle"),
        "{err}"
    );
    t.shutdown().await.unwrap();
}

scenario!(a_step_whose_input_does_not_render_or_calls_nothing_fails_with_the_reason);
async fn a_step_whose_input_does_not_render_or_calls_nothing_fails_with_the_reason(
    mut t: TestPlatform,
    wait: Duration,
) {
    let (gate, calls) = (Gate::default(), Calls::default());
    t.start(tools(&gate, &calls)).await.unwrap();
    t.start(runner(
        "render.requested",
        r#"{"goal": "Render", "on_failure": "continue", "steps": [
          {"id": "a", "operator": "wf.echo", "input_mapping": {"text": "x"}},
          {"id": "b", "operator": "wf.echo", "depends_on": ["a"], "input_mapping": {"text": "{{a.nope}}"}},
          {"id": "c", "operator": "nobody.serves.this"},
          {"id": "d", "operator": "nobody.serves.this", "fallback": "wf.echo", "input_mapping": {"text": "saved"}}
        ]}"#,
    ))
    .await
    .unwrap();
    let out: WorkflowOutput = t
        .client()
        .with_timeout(wait * 2)
        .invoke("render.requested", json!({}), "render.completed")
        .await
        .unwrap();
    let err = |id: &str| out.steps[id].error.clone().unwrap_or_default();
    assert_eq!(out.steps["b"].status, StepStatus::Failed);
    assert!(
        err("b").contains("its input does not render"),
        "{}",
        err("b")
    );
    assert!(
        err("c").contains("no registered capability is called `nobody.serves.this`"),
        "{}",
        err("c")
    );
    assert_eq!(out.output("d").unwrap()["text"], "saved");
    t.shutdown().await.unwrap();
}

scenario!(canceling_a_workflow_cancels_its_running_steps);
async fn canceling_a_workflow_cancels_its_running_steps(mut t: TestPlatform, wait: Duration) {
    let slept = Tracked::default();
    t.start(sleeper("wf-sleeper", "wf.nap", &slept))
        .await
        .unwrap();
    t.start(runner(
        "naps.requested",
        r#"{"goal": "Naps", "steps": [
          {"id": "one", "operator": "wf.nap", "input_mapping": {"nap_ms": 30000}},
          {"id": "two", "operator": "wf.nap", "input_mapping": {"nap_ms": 30000}},
          {"id": "after", "operator": "wf.nap", "depends_on": ["one", "two"], "input_mapping": {"nap_ms": 1}}
        ]}"#,
    ))
    .await
    .unwrap();
    let client = t.client();
    let call = client.request("naps.requested", json!({}), "naps.completed");
    let id = call.envelope().unwrap().id.clone();
    let waiting = tokio::spawn(async move { call.timeout(Duration::from_secs(60)).await });
    slept.wait_started(2, wait).await;
    client.cancel(&id).await.unwrap();
    slept
        .wait_dropped(2, wait, "the steps of a canceled workflow")
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(slept.started(), 2, "nothing started after the cancel");
    assert!(
        t.events_of_type("naps.completed").is_empty(),
        "a canceled task does not reply"
    );
    waiting.abort();
    t.shutdown().await.unwrap();
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct ShoutReq {
    text: String,
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Shouted {
    loud: String,
}

/// Shouts a text.
async fn shout(req: Invocation<ShoutReq>) -> Result<Shouted, ToolError> {
    Ok(Shouted {
        loud: req.data.text.to_uppercase(),
    })
}

scenario!(a_model_written_workflow_is_checked_against_the_registry_then_runs);
async fn a_model_written_workflow_is_checked_against_the_registry_then_runs(
    mut t: TestPlatform,
    wait: Duration,
) {
    use soorma::llm::ScriptedLlm;
    use soorma::planner::llm::{PlanningOptions, create_workflow};
    t.start(
        Tool::new("shouter")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("wf.shout", shout)),
    )
    .await
    .unwrap();
    t.start(runner(
        "unused.requested",
        r#"{"goal": "g", "steps": [{"id": "a", "operator": "wf.shout"}]}"#,
    ))
    .await
    .unwrap();
    let model = ScriptedLlm::new([
        // The payload misses `text`, and `b` reads a reply field `shout` does not have.
        r#"{"goal": "Shout twice", "steps": [
           {"id": "a", "operator": "wf.shout", "input_mapping": {"txt": "{{input.word}}"}},
           {"id": "b", "operator": "wf.shout", "depends_on": ["a"], "input_mapping": {"text": "{{steps.a.louder}}"}}]}"#,
        r#"{"goal": "Shout twice", "steps": [
           {"id": "a", "operator": "wf.shout", "input_mapping": {"text": "{{input.word}}"}},
           {"id": "b", "operator": "wf.shout", "depends_on": ["a"], "input_mapping": {"text": "{{steps.a.loud}}!"}}]}"#,
    ]);
    let agents = t.platform().discovery().all().await.unwrap();
    let input = json!({"word": "hey"});
    let workflow = create_workflow(
        &model,
        "Shout a word twice",
        &input,
        &agents,
        &PlanningOptions::default(),
    )
    .await
    .unwrap();
    let told = model.requests()[1].last().unwrap().content.clone();
    assert!(told.contains("\"text\" is a required property"), "{told}");
    assert!(told.contains("has no field `louder`"), "{told}");
    assert!(
        model.requests()[0][1]
            .content
            .contains("request event: `wf.shout`")
    );
    let spec = WorkflowSpec::new(workflow.definition().clone(), input);
    let out = t.client().with_timeout(wait * 2).call(spec).await.unwrap();
    assert_eq!(out.output("b").unwrap()["loud"], "HEY!");
    t.shutdown().await.unwrap();
}

scenario!(a_workflow_that_runs_itself_ends_at_the_nesting_limit);
async fn a_workflow_that_runs_itself_ends_at_the_nesting_limit(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(
        Worker::new("wf-runner")
            .use_registered_handlers(false)
            .handler(Handler::run_workflows()),
    )
    .await
    .unwrap();
    // Its one step runs the workflow it was given, on the same input, again and again.
    let again = json!({"goal": "Again", "steps": [{"id": "again", "operator": "workflow.run.requested",
        "input_mapping": {"workflow": "{{input.workflow}}", "input": "{{input}}"}}]});
    let spec = WorkflowSpec::new(
        serde_json::from_value(again.clone()).unwrap(),
        json!({"workflow": again}),
    );
    let err = t
        .client()
        .with_timeout(wait * 3)
        .call(spec)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("workflows nest at most 8 deep"), "{err}");
    assert_eq!(err.matches("step `again` failed").count(), 9, "{err}");
    assert_eq!(
        t.events_of_type("workflow.run.requested").len(),
        10,
        "the first run and 9 nested ones"
    );
    t.shutdown().await.unwrap();
}

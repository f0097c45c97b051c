//! A model writes a workflow: structured output of a [`WorkflowDefinition`], validated as
//! [`Workflow::new`] does and checked against the registry's agents
//! ([`Workflow::check_against`]); every problem goes back to the model.

use serde_json::Value;
use soorma_common::{AgentCapability, AgentDefinition, WorkflowDefinition};

use super::{PlanningAttempt, PlanningError, PlanningOptions, prompt, propose};
use crate::error::Result;
use crate::layers::worker::workflow::Workflow;
use crate::llm::{ChatMessage, ChatModel};

const WORKFLOW_SYSTEM: &str = "\
You design workflows for an event-driven agent system. A workflow is a goal and a DAG of steps \
that the runtime then executes by itself: each step starts as soon as the steps it depends on \
have completed, so independent steps run in parallel.

Each step has:
- `id`: unique; letters, digits and `_`, not starting with a digit (not `input` or `steps`).
- `name`: a short human-readable name.
- exactly one of: `operator` (the task name or request event of one of the capabilities listed \
below; never invent one), `human_input` (`{\"question\": ..., \"response_schema\": ...}`: ask a \
person) or `sub_workflow` (a nested workflow definition).
- `input_mapping`: the step's request data, a JSON object matching the capability's payload \
schema. Strings may be templates: a string that is exactly \"{{path}}\" becomes the value at \
that path (keeping its JSON type); placeholders inside longer strings become text. Paths are \
`input.<field>` (the workflow's input) or `steps.<step id>.<field>` (a field of a step's reply \
result, as its reply result schema lists it). A step may read only steps it depends on, \
directly or through its dependencies.
- `depends_on`: the ids of the steps that must complete first (only what it needs, so that the \
rest runs in parallel).
- optional: `timeout` (\"30s\"), `retries` (a number), `fallback` (another capability tried \
when the retries are exhausted), `on_failure` (`fail_fast`, `skip_descendants` or `continue`).

Rules:
1. Use only the capabilities listed, with inputs their payload schemas accept.
2. Read only fields that a step's reply result schema has.
3. No dependency cycles.";

/// The conversation asking for a workflow.
fn request(
    goal: &str,
    input: &Value,
    capabilities: &[AgentCapability],
    instructions: Option<&str>,
) -> (String, String) {
    let mut system = WORKFLOW_SYSTEM.to_owned();
    if let Some(extra) = instructions.filter(|s| !s.trim().is_empty()) {
        system.push_str("\n\n");
        system.push_str(extra.trim());
    }
    let user = format!(
        "Goal:\n{goal}\n\nThe workflow's input (read it as `{{{{input.<field>}}}}`):\n{}\n\n\
         Capabilities:\n{}\nWrite the workflow definition for this goal.",
        serde_json::to_string_pretty(input).unwrap_or_default(),
        prompt::capabilities(capabilities),
    );
    (system, user)
}

/// What the model is told after a rejected workflow.
fn rejected(problems: &[String]) -> String {
    format!(
        "Your workflow was rejected:\n  - {}\nReply with the corrected workflow definition, as \
         JSON only.",
        problems.join("\n  - ")
    )
}

/// Every problem of `definition`: its validation, then the registry check.
fn problems(definition: &WorkflowDefinition, agents: &[AgentDefinition]) -> Vec<String> {
    let workflow = match Workflow::new(definition.clone()) {
        Ok(workflow) => workflow,
        Err(invalid) => return invalid.problems().iter().map(ToString::to_string).collect(),
    };
    match workflow.check_against(agents) {
        Ok(()) => Vec::new(),
        Err(invalid) => invalid.problems().iter().map(ToString::to_string).collect(),
    }
}

/// Asks `model` for a workflow that achieves `goal` on `input` with the capabilities of
/// `agents` (`platform.discovery().all().await?`), and returns it validated.
///
/// The prompt has the goal, the input, each capability (task name, description, request event,
/// payload and reply result schemas) and the rules of workflows and templates; structured
/// output adds the [`WorkflowDefinition`] JSON Schema. The proposal must pass [`Workflow::new`]
/// (every problem at once: cycles, unknown steps, templates reading non-ancestors, ...) and
/// [`Workflow::check_against`] (operators that exist, inputs their schemas accept, reply fields
/// that exist). Otherwise all its problems go back to the model, up to
/// [`PlanningOptions::max_attempts`] proposals; then [`PlanningError::GaveUp`] keeps every
/// attempt's problems. Errors of the model itself (HTTP, timeouts) are returned as they are.
/// Run the result with [`Handler::run_workflows`](crate::Handler::run_workflows) (as a
/// [`WorkflowSpec`](crate::common::WorkflowSpec)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::llm::ScriptedLlm;
/// use soorma::planner::llm::{create_workflow, PlanningOptions};
/// use soorma::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
///
/// let search = AgentCapability::new("search", EventDefinition::new("search.requested", Topic::ActionRequests))
///     .with_description("Searches the web.");
/// let agents = [AgentDefinition::new("s-1", "searcher", AgentKind::Tool).with_capability(search)];
/// let model = ScriptedLlm::new([
///     // A cycle, and an operator nobody serves: both go back to the model.
///     r#"{"goal": "Research", "steps": [
///        {"id": "a", "operator": "search", "depends_on": ["b"]},
///        {"id": "b", "operator": "browse", "depends_on": ["a"]}]}"#,
///     r#"{"goal": "Research", "steps": [
///        {"id": "a", "operator": "search", "input_mapping": {"q": "{{input.topic}}"}}]}"#,
/// ]);
/// let input = serde_json::json!({"topic": "rust"});
/// let wf = create_workflow(&model, "Research a topic", &input, &agents, &PlanningOptions::default()).await?;
/// assert_eq!(wf.steps().len(), 1);
/// let told = model.requests()[1].last().unwrap().content.clone();
/// assert!(told.contains("dependency cycle: a -> b -> a"), "{told}");
/// # Ok(()) }
/// ```
pub async fn create_workflow(
    model: &dyn ChatModel,
    goal: &str,
    input: &Value,
    agents: &[AgentDefinition],
    options: &PlanningOptions,
) -> Result<Workflow> {
    let capabilities: Vec<AgentCapability> = agents
        .iter()
        .flat_map(|a| a.capabilities.iter().cloned())
        .collect();
    let (system, user) = request(goal, input, &capabilities, options.instructions.as_deref());
    let mut conversation = vec![ChatMessage::system(system), ChatMessage::user(user)];
    let mut attempts = Vec::new();
    for attempt in 1..=options.max_attempts.max(1) {
        let definition: WorkflowDefinition = match propose(model, &conversation).await? {
            Ok(definition) => definition,
            Err(failed) => {
                tracing::warn!(attempt, problems = ?failed.problems, "the model's workflow was not a workflow definition");
                attempts.push(failed);
                continue;
            }
        };
        let problems = problems(&definition, agents);
        if problems.is_empty() {
            tracing::debug!(
                attempt,
                steps = definition.steps.len(),
                "the model's workflow was accepted"
            );
            return Workflow::new(definition).map_err(|e| {
                crate::error::Error::InvalidArgument(format!("the accepted workflow: {e}"))
            });
        }
        tracing::warn!(attempt, ?problems, "the model's workflow was rejected");
        let reply = serde_json::to_string(&definition).unwrap_or_default();
        conversation.push(ChatMessage::assistant(reply.clone()));
        conversation.push(ChatMessage::user(rejected(&problems)));
        attempts.push(PlanningAttempt::new(reply, problems));
    }
    Err(PlanningError::GaveUp {
        what: "workflow",
        attempts,
    }
    .into())
}

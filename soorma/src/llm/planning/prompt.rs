//! The prompts of LLM planning.

use std::fmt::Write as _;

use serde_json::Value;
use soorma_common::{AgentCapability, EventEnvelope, Topic};

use super::steps::{Step, StepKind};

/// At most this many (of the latest) steps are shown to the model.
const MAX_STEPS_SHOWN: usize = 50;

/// Schemas are shown compact and without their `$schema` line.
fn compact(schema: &Value) -> String {
    let mut schema = schema.clone();
    if let Some(o) = schema.as_object_mut() {
        o.remove("$schema");
    }
    schema.to_string()
}

/// The reply event to use for a request: the capability's documented reply event, else
/// `<stem>.completed` (`calculate.requested` → `calculate.completed`).
pub(super) fn reply_event(capability: &AgentCapability) -> String {
    if let Some(produced) = capability
        .produced_events
        .iter()
        .find(|e| e.topic == Topic::ActionResults)
    {
        return produced.event_name.clone();
    }
    let event = &capability.consumed_event.event_name;
    match event.strip_suffix(".requested") {
        Some(stem) => format!("{stem}.completed"),
        None => format!("{event}.completed"),
    }
}

/// One block per capability: what it does, its request event and payload schema, the schema of
/// its reply's result and the reply event to use.
pub(super) fn capabilities(capabilities: &[AgentCapability]) -> String {
    if capabilities.is_empty() {
        return "(none: no agent that takes requests is registered)\n".into();
    }
    let mut out = String::new();
    for c in capabilities {
        let event = &c.consumed_event;
        let description = if c.description.is_empty() {
            event.description.as_str()
        } else {
            c.description.as_str()
        };
        let description = match description.trim() {
            "" => "(no description)",
            d => d,
        };
        let _ = writeln!(out, "- `{}`: {description}", c.task_name);
        let _ = writeln!(out, "  request event: `{}`", event.event_name);
        if let Some(schema) = &event.payload_schema {
            let _ = writeln!(out, "  payload schema: {}", compact(schema));
        }
        if let Some(schema) = &event.response_schema {
            let _ = writeln!(out, "  reply result schema: {}", compact(schema));
        }
        let _ = writeln!(out, "  reply event to use: `{}`", reply_event(c));
    }
    out
}

fn with_instructions(mut system: String, instructions: Option<&str>) -> String {
    if let Some(extra) = instructions.filter(|s| !s.trim().is_empty()) {
        system.push_str("\n\n");
        system.push_str(extra.trim());
    }
    system
}

const PLAN_SYSTEM: &str = "\
You are the planner of an event-driven agent system. You turn a goal into a plan: a state \
machine (a plan definition) that the runtime then executes by itself.

How a plan runs:
- It starts in `initial_state` (use \"start\"). Entering a state that has an `action` publishes \
the request `event_type` with the payload `data` to the capability that consumes it; the reply \
comes back as the event `response_event`.
- The reply moves the plan along the state's `transitions`: the first one whose `on_event` is \
the reply event and whose `condition` (if any) holds is taken, else `default_next`. A failed \
reply that no transition handles fails the plan.
- Entering a state with `is_terminal: true` ends the plan; its `result` template is the answer to \
the goal. Add `fails: true` to a terminal state to end the plan with an error instead (its \
`result` is then the error message).

Rules:
1. Every action's `event_type` must be the request event of one of the capabilities listed \
below. Never invent events.
2. Use the capability's reply event (listed below) as the action's `response_event`, and make a \
transition on it.
3. Every key of `states` equals that state's `state_name`. Every state is reachable from the \
initial state. A non-terminal state has transitions or a `default_next`. Terminal states have \
no action and no transitions.
4. `data` and `result` are JSON templates. A string that is exactly \"{{path}}\" is replaced by \
the value at that path, keeping its JSON type; placeholders inside longer strings are replaced \
by text. Paths start with `goal` (the goal's data, e.g. `goal.topic`), `results` (the result of \
each state's reply by state name, e.g. `results.start.count`) or `state` (e.g. \
`state.visits.start`, how often a state was entered).
5. A `condition` is an expression such as `data.success && data.result.count > 0`. It reads \
`data` (the reply: `data.success` is true or false, `data.result` the result, `data.error` the \
error), `goal`, `results` and `state`, with `==`, `!=`, `<`, `<=`, `>`, `>=`, `&&`, `||`, `!`, \
`in` and parentheses; strings in quotes.
6. Each action's data must match its capability's payload schema.";

/// The conversation asking for a plan.
pub(super) fn plan_request(
    goal: &Value,
    capabilities: &[AgentCapability],
    instructions: Option<&str>,
) -> (String, String) {
    let system = with_instructions(PLAN_SYSTEM.to_owned(), instructions);
    let user = format!(
        "Goal:\n{}\n\nCapabilities:\n{}\nWrite the plan definition for this goal.",
        serde_json::to_string_pretty(goal).unwrap_or_default(),
        self::capabilities(capabilities),
    );
    (system, user)
}

/// What the model is told after a rejected plan.
pub(super) fn plan_rejected(problems: &[String]) -> String {
    format!(
        "Your plan was rejected:\n  - {}\nReply with the corrected plan definition, as JSON only.",
        problems.join("\n  - ")
    )
}

const ACTION_SYSTEM: &str = "\
You are the reasoning planner of an event-driven agent system. You pursue a goal one action at \
a time: after each action, its reply comes back to you and you choose again.

Choose exactly one next action:
- \"publish\": send the request `event_type` with the payload `data` to the capability that \
consumes it. Its reply comes back as `response_event`, and you choose again then.
- \"delegate\": hand the rest of the goal to another agent (for example another planner's goal \
event). Its reply becomes the answer to the goal and ends the plan.
- \"complete\": the goal is achieved; `result` is the answer.
- \"fail\": the goal cannot be achieved; `error` says why.
- \"wait\": there is nothing to do until another event arrives for this plan; `reason` says \
what you are waiting for.

Rules:
1. `event_type` must be the request event of one of the capabilities listed. Never invent events.
2. `data` must match that capability's payload schema. Write the values themselves; there are \
no templates here.
3. Use the capability's reply event as `response_event`.
4. Do not repeat a request whose reply you already have: use its result.";

/// The conversation asking for the next action.
pub(super) fn action_request(
    goal: &Value,
    steps: &[Step],
    trigger: Option<(&EventEnvelope, Option<usize>)>,
    actions: (u32, u32),
    capabilities: &[AgentCapability],
    instructions: Option<&str>,
) -> (String, String) {
    let system = with_instructions(ACTION_SYSTEM.to_owned(), instructions);
    let mut user = format!(
        "Goal:\n{}\n\nCapabilities:\n{}\n",
        serde_json::to_string_pretty(goal).unwrap_or_default(),
        self::capabilities(capabilities),
    );
    if steps.is_empty() {
        user.push_str("Steps so far: none.\n");
    } else {
        user.push_str("Steps so far:\n");
        let skip = steps.len().saturating_sub(MAX_STEPS_SHOWN);
        if skip > 0 {
            let _ = writeln!(user, "({skip} earlier steps not shown)");
        }
        for (i, step) in steps.iter().enumerate().skip(skip) {
            let _ = writeln!(user, "{}. {}", i + 1, describe(step));
        }
    }
    match trigger {
        Some((event, Some(answered))) => {
            let _ = writeln!(
                user,
                "\nThe event that just arrived: `{}`, the reply to step {}.",
                event.event_type,
                answered + 1
            );
        }
        Some((event, None)) => {
            let _ = writeln!(
                user,
                "\nThe event that just arrived: `{}` (step {}).",
                event.event_type,
                steps.len()
            );
        }
        None => user.push_str("\nNothing has happened yet: choose the first action.\n"),
    }
    let (used, max) = actions;
    let _ = write!(
        user,
        "\nActions used: {used} of {max} (publish and delegate count). "
    );
    if used >= max {
        user.push_str("The budget is spent: complete or fail now.");
    } else {
        user.push_str("Choose the next action.");
    }
    (system, user)
}

fn describe(step: &Step) -> String {
    let outcome = match (&step.error, &step.result) {
        _ if step.kind == StepKind::Event => String::new(),
        _ if !step.answered => " -> no reply yet".into(),
        (Some(error), _) => format!(" -> failed: {error}"),
        (None, Some(result)) => format!(" -> result: {result}"),
        (None, None) => " -> result: null".into(),
    };
    match step.kind {
        StepKind::Publish => format!("published `{}` {}{outcome}", step.event_type, step.data),
        StepKind::Delegate => format!("delegated to `{}` {}{outcome}", step.event_type, step.data),
        StepKind::Event => format!("received `{}` {}", step.event_type, step.data),
    }
}

/// What the model is told after a rejected action.
pub(super) fn action_rejected(problems: &[String]) -> String {
    format!(
        "Your action was rejected:\n  - {}\nReply with a corrected action, as JSON only.",
        problems.join("\n  - ")
    )
}

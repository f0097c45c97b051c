//! Workflow DTOs: a goal and a DAG of steps, each calling a capability (or asking a person, or
//! running a nested workflow) with an input built from templates over the workflow's input and
//! the outputs of the steps it depends on.
//!
//! These are plain data; `soorma::workflow::Workflow` validates them (every problem at once)
//! and gives the executor the DAG and the compiled templates.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What happens to the rest of a workflow when a step fails for good (after its retries and
/// its fallback).
///
/// ```
/// use soorma_common::FailurePolicy;
/// assert_eq!(FailurePolicy::default(), FailurePolicy::FailFast);
/// assert_eq!(serde_json::to_string(&FailurePolicy::SkipDescendants).unwrap(), "\"skip_descendants\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailurePolicy {
    /// The workflow fails at once; steps still running are cancelled (the default).
    #[default]
    FailFast,
    /// The steps that depend on the failed one (directly or not) are skipped; the others run.
    SkipDescendants,
    /// The failure is recorded as the step's outcome and the workflow goes on; steps reading
    /// the failed step's output fail to render their input.
    Continue,
}

impl FailurePolicy {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// A step that asks a person instead of calling a capability: the question, and optionally the
/// JSON Schema of the answer (which later steps may read as this step's output).
///
/// ```
/// use soorma_common::HumanInput;
/// let ask = HumanInput::new("Publish this summary?")
///     .with_response_schema(serde_json::json!({"type": "object", "properties": {"approved": {"type": "boolean"}}}));
/// assert_eq!(ask.question, "Publish this summary?");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct HumanInput {
    /// What to ask. The step's `input_mapping` is rendered and shown alongside.
    pub question: String,
    /// JSON Schema of the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
}

impl HumanInput {
    /// A question with no answer schema.
    ///
    /// ```
    /// assert!(soorma_common::HumanInput::new("ok?").response_schema.is_none());
    /// ```
    pub fn new(question: impl Into<String>) -> Self {
        Self {
            question: question.into(),
            response_schema: None,
        }
    }

    /// Sets the JSON Schema of the answer.
    ///
    /// ```
    /// let ask = soorma_common::HumanInput::new("ok?").with_response_schema(serde_json::json!({"type": "boolean"}));
    /// assert!(ask.response_schema.is_some());
    /// ```
    #[must_use]
    pub fn with_response_schema(mut self, schema: Value) -> Self {
        self.response_schema = Some(schema);
        self
    }
}

/// One step of a workflow: exactly one of `operator` (a capability's task name, or the event it
/// consumes), `human_input` or `sub_workflow`, with its input template and dependencies.
///
/// `input_mapping` is a JSON object whose strings may hold `{{ ... }}` placeholders (the
/// `soorma-expr` template language): `{{input.x}}` or `{{x}}` read the workflow's input,
/// `{{steps.a.field}}` or `{{a.field}}` read the output of step `a`, which must be one the step
/// depends on (directly or through its dependencies).
///
/// ```
/// use soorma_common::WorkflowStep;
/// let step = WorkflowStep::new("search", "web.search")
///     .with_name("Search the web")
///     .with_input("query", "{{rewrite.external_query}}")
///     .depends_on("rewrite")
///     .with_timeout(std::time::Duration::from_secs(30))
///     .with_retries(2)
///     .with_fallback("web.search.backup");
/// assert_eq!(step.operator.as_deref(), Some("web.search"));
/// assert_eq!(step.timeout.as_deref(), Some("30s"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct WorkflowStep {
    /// Unique within the workflow; templates and `depends_on` refer to the step by it.
    pub id: String,
    /// A human-readable name.
    #[serde(default)]
    pub name: String,
    /// The capability the step calls: a registered capability's task name or the event it
    /// consumes (`search.requested`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Ask a person instead of calling a capability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human_input: Option<HumanInput>,
    /// Run a nested workflow; its input is this step's rendered `input_mapping`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_workflow: Option<Box<WorkflowDefinition>>,
    /// The step's request data: a JSON object whose strings may be templates.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub input_mapping: Map<String, Value>,
    /// The ids of the steps that must complete before this one starts.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// How long one attempt may take: `"30s"`, `"500ms"`, `"2m"`, `"1h 30m"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// How many times a failed attempt is retried.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
    /// Another operator tried when the retries are exhausted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// What a failure of this step does to the workflow (default: the workflow's `on_failure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<FailurePolicy>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl WorkflowStep {
    /// A step calling `operator`, with no input, dependencies, timeout or retries.
    ///
    /// ```
    /// let step = soorma_common::WorkflowStep::new("a", "summarize");
    /// assert!(step.depends_on.is_empty() && step.input_mapping.is_empty());
    /// ```
    pub fn new(id: impl Into<String>, operator: impl Into<String>) -> Self {
        Self {
            operator: Some(operator.into()),
            ..Self::empty(id.into())
        }
    }

    /// A step asking a person.
    ///
    /// ```
    /// use soorma_common::{HumanInput, WorkflowStep};
    /// let step = WorkflowStep::human("approve", HumanInput::new("Publish?"));
    /// assert!(step.operator.is_none() && step.human_input.is_some());
    /// ```
    pub fn human(id: impl Into<String>, question: HumanInput) -> Self {
        Self {
            human_input: Some(question),
            ..Self::empty(id.into())
        }
    }

    /// A step running a nested workflow.
    ///
    /// ```
    /// use soorma_common::{WorkflowDefinition, WorkflowStep};
    /// let inner = WorkflowDefinition::new("search twice")
    ///     .with_step(WorkflowStep::new("a", "search"));
    /// let step = WorkflowStep::sub_workflow("research", inner);
    /// assert!(step.sub_workflow.is_some());
    /// ```
    pub fn sub_workflow(id: impl Into<String>, workflow: WorkflowDefinition) -> Self {
        Self {
            sub_workflow: Some(Box::new(workflow)),
            ..Self::empty(id.into())
        }
    }

    fn empty(id: String) -> Self {
        Self {
            id,
            name: String::new(),
            operator: None,
            human_input: None,
            sub_workflow: None,
            input_mapping: Map::new(),
            depends_on: Vec::new(),
            timeout: None,
            retries: 0,
            fallback: None,
            on_failure: None,
        }
    }

    /// Sets the name.
    ///
    /// ```
    /// assert_eq!(soorma_common::WorkflowStep::new("a", "op").with_name("A").name, "A");
    /// ```
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets one field of the input mapping (a value, or a string with placeholders).
    ///
    /// ```
    /// let step = soorma_common::WorkflowStep::new("a", "op")
    ///     .with_input("query", "{{input.topic}}")
    ///     .with_input("limit", 5);
    /// assert_eq!(step.input_mapping["limit"], 5);
    /// ```
    #[must_use]
    pub fn with_input(mut self, field: impl Into<String>, value: impl Into<Value>) -> Self {
        self.input_mapping.insert(field.into(), value.into());
        self
    }

    /// Adds a dependency.
    ///
    /// ```
    /// let step = soorma_common::WorkflowStep::new("b", "op").depends_on("a");
    /// assert_eq!(step.depends_on, ["a"]);
    /// ```
    #[must_use]
    pub fn depends_on(mut self, step: impl Into<String>) -> Self {
        self.depends_on.push(step.into());
        self
    }

    /// Sets the timeout of one attempt (written as `"30s"` or `"1500ms"`).
    ///
    /// ```
    /// use std::time::Duration;
    /// let step = soorma_common::WorkflowStep::new("a", "op").with_timeout(Duration::from_millis(1500));
    /// assert_eq!(step.timeout.as_deref(), Some("1500ms"));
    /// ```
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(if timeout.subsec_millis() == 0 {
            format!("{}s", timeout.as_secs())
        } else {
            format!("{}ms", timeout.as_millis())
        });
        self
    }

    /// Sets how many times a failed attempt is retried.
    ///
    /// ```
    /// assert_eq!(soorma_common::WorkflowStep::new("a", "op").with_retries(3).retries, 3);
    /// ```
    #[must_use]
    pub fn with_retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Sets the operator tried when the retries are exhausted.
    ///
    /// ```
    /// let step = soorma_common::WorkflowStep::new("a", "search").with_fallback("search.backup");
    /// assert_eq!(step.fallback.as_deref(), Some("search.backup"));
    /// ```
    #[must_use]
    pub fn with_fallback(mut self, operator: impl Into<String>) -> Self {
        self.fallback = Some(operator.into());
        self
    }

    /// Sets this step's failure policy.
    ///
    /// ```
    /// use soorma_common::{FailurePolicy, WorkflowStep};
    /// let step = WorkflowStep::new("a", "op").on_failure(FailurePolicy::Continue);
    /// assert_eq!(step.on_failure, Some(FailurePolicy::Continue));
    /// ```
    #[must_use]
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.on_failure = Some(policy);
        self
    }
}

/// A workflow: a goal and a DAG of steps.
///
/// ```
/// use soorma_common::{WorkflowDefinition, WorkflowStep};
/// let wf = WorkflowDefinition::new("Compare our pricing to competitors")
///     .with_step(WorkflowStep::new("rewrite", "query_rewriter").with_input("query", "{{user_query}}"))
///     .with_step(
///         WorkflowStep::new("search", "web_searcher")
///             .with_input("query", "{{rewrite.external_query}}")
///             .depends_on("rewrite"),
///     );
/// let json = serde_json::to_value(&wf).unwrap();
/// assert_eq!(serde_json::from_value::<WorkflowDefinition>(json).unwrap(), wf);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct WorkflowDefinition {
    /// What the workflow achieves.
    pub goal: String,
    /// JSON Schema of the workflow's input. When it lists `properties`, templates may read
    /// only those inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// What a step's failure does to the workflow, unless the step says otherwise.
    #[serde(default, skip_serializing_if = "FailurePolicy::is_default")]
    pub on_failure: FailurePolicy,
    /// The steps.
    pub steps: Vec<WorkflowStep>,
}

impl WorkflowDefinition {
    /// A workflow with no steps.
    ///
    /// ```
    /// assert!(soorma_common::WorkflowDefinition::new("g").steps.is_empty());
    /// ```
    pub fn new(goal: impl Into<String>) -> Self {
        Self {
            goal: goal.into(),
            input_schema: None,
            on_failure: FailurePolicy::default(),
            steps: Vec::new(),
        }
    }

    /// Adds a step.
    ///
    /// ```
    /// use soorma_common::{WorkflowDefinition, WorkflowStep};
    /// assert_eq!(WorkflowDefinition::new("g").with_step(WorkflowStep::new("a", "op")).steps.len(), 1);
    /// ```
    #[must_use]
    pub fn with_step(mut self, step: WorkflowStep) -> Self {
        self.steps.push(step);
        self
    }

    /// Sets the JSON Schema of the workflow's input.
    ///
    /// ```
    /// let wf = soorma_common::WorkflowDefinition::new("g")
    ///     .with_input_schema(serde_json::json!({"type": "object", "properties": {"topic": {"type": "string"}}}));
    /// assert!(wf.input_schema.is_some());
    /// ```
    #[must_use]
    pub fn with_input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// Sets the workflow-wide failure policy.
    ///
    /// ```
    /// use soorma_common::{FailurePolicy, WorkflowDefinition};
    /// let wf = WorkflowDefinition::new("g").on_failure(FailurePolicy::SkipDescendants);
    /// assert_eq!(wf.on_failure, FailurePolicy::SkipDescendants);
    /// ```
    #[must_use]
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.on_failure = policy;
        self
    }
}

/// Where one step of a running workflow stands.
///
/// ```
/// use soorma_common::StepStatus;
/// assert_eq!(serde_json::to_string(&StepStatus::Skipped).unwrap(), "\"skipped\"");
/// assert!(StepStatus::Failed.is_terminal() && !StepStatus::Running.is_terminal());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StepStatus {
    /// Waiting for its dependencies.
    #[default]
    Pending,
    /// Its request (or question) is out; waiting for the reply.
    Running,
    /// Replied successfully: its output is the reply.
    Completed,
    /// Failed for good (after its retries and its fallback).
    Failed,
    /// Not run: a step it depends on failed under `skip_descendants`, or the workflow failed.
    Skipped,
}

impl StepStatus {
    /// Whether the step has ended (completed, failed or skipped).
    ///
    /// See [`StepStatus`].
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Skipped)
    }
}

impl StepStatus {
    /// The letter of this status in [`WorkflowRun::statuses`].
    ///
    /// ```
    /// use soorma_common::StepStatus;
    /// assert_eq!(StepStatus::Completed.letter(), 'c');
    /// assert_eq!(StepStatus::from_letter('s'), Some(StepStatus::Skipped));
    /// ```
    pub fn letter(self) -> char {
        match self {
            Self::Pending => 'p',
            Self::Running => 'r',
            Self::Completed => 'c',
            Self::Failed => 'f',
            Self::Skipped => 's',
        }
    }

    /// The status of a letter of [`WorkflowRun::statuses`].
    ///
    /// See [`letter`](Self::letter).
    pub fn from_letter(letter: char) -> Option<Self> {
        Some(match letter {
            'p' => Self::Pending,
            'r' => Self::Running,
            'c' => Self::Completed,
            'f' => Self::Failed,
            's' => Self::Skipped,
            _ => return None,
        })
    }
}

/// The attempt in flight of a running step, as stored in its task ([`WorkflowRun::running`]).
///
/// ```
/// use soorma_common::StepRun;
/// let step = StepRun::default();
/// assert_eq!(step.attempts, 0);
/// assert_eq!(serde_json::to_string(&step).unwrap(), r#"{"attempts":0}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct StepRun {
    /// How many attempts were started (retries and the fallback included); the one in flight
    /// is the last (its delegation group is `<task id>-s<step position>a<attempts>`).
    #[serde(default)]
    pub attempts: u32,
    /// Whether the attempt in flight calls the step's fallback.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fallback: bool,
    /// The id of the handled event whose write started the attempt: a redelivery of that
    /// event sends it again (its first handling may have died before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<String>,
    /// Why the previous attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A step that failed for good, as stored in its task ([`WorkflowRun::failed`]).
///
/// ```
/// let f = soorma_common::StepFailure::new("timed out", 3);
/// assert_eq!((f.error.as_str(), f.attempts), ("timed out", 3));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct StepFailure {
    /// Why (its last attempt's error).
    pub error: String,
    /// After how many attempts.
    #[serde(default)]
    pub attempts: u32,
}

impl StepFailure {
    /// A failure after `attempts` attempts.
    ///
    /// See [`StepFailure`].
    pub fn new(error: impl Into<String>, attempts: u32) -> Self {
        Self {
            error: error.into(),
            attempts,
        }
    }
}

/// A workflow running in a worker task, as stored in the task
/// ([`TaskRecord::workflow`](crate::TaskRecord::workflow)): where each step stands (a letter
/// per step, so the task stays small however many steps there are), the attempts in flight and
/// the failures. Completed steps' outputs are stored apart, one record per step.
///
/// ```
/// use soorma_common::{StepStatus, WorkflowRun};
/// let mut run = WorkflowRun::new("task-1-wf", 2);
/// assert_eq!(run.statuses, "pp");
/// run.set_status(1, StepStatus::Completed);
/// assert_eq!(run.status(1), StepStatus::Completed);
/// assert!(!run.is_finished());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct WorkflowRun {
    /// The key of the [`WorkflowSpec`] (definition and input) in the `subtasks` bucket.
    pub spec: String,
    /// Where each step stands, one letter per step in definition order
    /// ([`StepStatus::letter`]: `p`ending, `r`unning, `c`ompleted, `f`ailed, `s`kipped).
    pub statuses: String,
    /// The attempts in flight, by step position.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub running: std::collections::BTreeMap<u32, StepRun>,
    /// Steps found ready by a write that could not send them yet, by position.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub ready: std::collections::BTreeSet<u32>,
    /// The steps that failed for good, by position.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub failed: std::collections::BTreeMap<u32, StepFailure>,
    /// The step whose failure failed the workflow (policy `fail_fast`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_by: Option<String>,
}

impl WorkflowRun {
    /// A run of `steps` steps, all pending, whose spec is stored at `spec`.
    ///
    /// See [`WorkflowRun`].
    pub fn new(spec: impl Into<String>, steps: usize) -> Self {
        Self {
            spec: spec.into(),
            statuses: "p".repeat(steps),
            running: std::collections::BTreeMap::new(),
            ready: std::collections::BTreeSet::new(),
            failed: std::collections::BTreeMap::new(),
            failed_by: None,
        }
    }

    /// Where step `position` stands (`Pending` for a position out of range).
    ///
    /// See [`WorkflowRun`].
    pub fn status(&self, position: usize) -> StepStatus {
        self.statuses
            .as_bytes()
            .get(position)
            .and_then(|&b| StepStatus::from_letter(char::from(b)))
            .unwrap_or_default()
    }

    /// Sets where step `position` stands (nothing for a position out of range).
    ///
    /// See [`WorkflowRun`].
    pub fn set_status(&mut self, position: usize, status: StepStatus) {
        if position < self.statuses.len() && self.statuses.is_char_boundary(position) {
            let mut buf = [0u8; 4];
            self.statuses
                .replace_range(position..=position, status.letter().encode_utf8(&mut buf));
        }
    }

    /// Whether every step has ended, or a step failed the workflow.
    ///
    /// ```
    /// use soorma_common::{StepStatus, WorkflowRun};
    /// let mut run = WorkflowRun::new("k", 1);
    /// run.set_status(0, StepStatus::Completed);
    /// assert!(run.is_finished());
    /// ```
    pub fn is_finished(&self) -> bool {
        self.failed_by.is_some() || !self.statuses.contains(['p', 'r'])
    }
}

/// What a workflow run is: its definition and its input, stored once when it starts (key:
/// [`WorkflowRun::spec`]), so that any instance of the worker can go on with it.
///
/// ```
/// use soorma_common::{WorkflowDefinition, WorkflowSpec, WorkflowStep};
/// let spec = WorkflowSpec::new(
///     WorkflowDefinition::new("g").with_step(WorkflowStep::new("a", "op")),
///     serde_json::json!({"topic": "rust"}),
/// );
/// assert_eq!(spec.input["topic"], "rust");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct WorkflowSpec {
    /// The definition.
    pub workflow: WorkflowDefinition,
    /// The workflow's input.
    #[serde(default)]
    pub input: Value,
}

impl WorkflowSpec {
    /// A run of `workflow` on `input`.
    ///
    /// See [`WorkflowSpec`].
    pub fn new(workflow: WorkflowDefinition, input: Value) -> Self {
        Self { workflow, input }
    }
}

/// How one step of a finished workflow ended: part of [`WorkflowOutput`].
///
/// ```
/// use soorma_common::{StepOutcome, StepStatus};
/// let done = StepOutcome::completed(serde_json::json!({"hits": 3}), 1);
/// assert_eq!(done.status, StepStatus::Completed);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct StepOutcome {
    /// Completed, failed or skipped.
    pub status: StepStatus,
    /// The reply, for a completed step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Why it failed or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How many attempts were made (retries and the fallback included).
    #[serde(default)]
    pub attempts: u32,
}

impl StepOutcome {
    /// A completed step's outcome.
    ///
    /// See [`StepOutcome`].
    pub fn completed(output: Value, attempts: u32) -> Self {
        Self {
            status: StepStatus::Completed,
            output: Some(output),
            error: None,
            attempts,
        }
    }

    /// A failed or skipped step's outcome.
    ///
    /// ```
    /// use soorma_common::{StepOutcome, StepStatus};
    /// let failed = StepOutcome::ended(StepStatus::Failed, "timed out", 2);
    /// assert_eq!(failed.error.as_deref(), Some("timed out"));
    /// ```
    pub fn ended(status: StepStatus, error: impl Into<String>, attempts: u32) -> Self {
        Self {
            status,
            output: None,
            error: Some(error.into()),
            attempts,
        }
    }
}

/// What a workflow task completes with: every step's outcome, by step id.
///
/// ```
/// use soorma_common::{StepOutcome, WorkflowOutput};
/// let mut out = WorkflowOutput::new("Summarize");
/// out.steps.insert("search".into(), StepOutcome::completed(serde_json::json!(["a"]), 1));
/// assert_eq!(out.output("search"), Some(&serde_json::json!(["a"])));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct WorkflowOutput {
    /// The workflow's goal.
    pub goal: String,
    /// Each step's outcome, by step id.
    pub steps: std::collections::BTreeMap<String, StepOutcome>,
}

impl WorkflowOutput {
    /// An output with no steps yet.
    ///
    /// See [`WorkflowOutput`].
    pub fn new(goal: impl Into<String>) -> Self {
        Self {
            goal: goal.into(),
            steps: std::collections::BTreeMap::new(),
        }
    }

    /// The output of step `id`, if it completed.
    ///
    /// See [`WorkflowOutput`].
    pub fn output(&self, id: &str) -> Option<&Value> {
        self.steps.get(id).and_then(|s| s.output.as_ref())
    }
}

/// A workflow step's progress, on `system-events` as `workflow.step.started`,
/// `workflow.step.completed`, `workflow.step.failed`, `workflow.step.retrying` or
/// `workflow.step.skipped` (see [`events`](crate::events)).
///
/// ```
/// use soorma_common::{StepStatus, WorkflowStepProgress};
/// let p = WorkflowStepProgress::new("task-1", "pricing", "search", StepStatus::Running);
/// assert_eq!(p.step, "search");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct WorkflowStepProgress {
    /// The task running the workflow.
    pub task_id: String,
    /// The worker running it.
    pub agent: String,
    /// The step.
    pub step: String,
    /// Where the step stands now.
    pub status: StepStatus,
    /// Which attempt (1 for the first).
    #[serde(default)]
    pub attempt: u32,
    /// What the attempt calls: the operator or fallback, or the human-input event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<String>,
    /// The sub-task of the attempt (its request's correlation id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_task_id: Option<String>,
    /// Why it failed, is retried or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl WorkflowStepProgress {
    /// A progress report for `step` of `task_id`'s workflow.
    ///
    /// See [`WorkflowStepProgress`].
    pub fn new(
        task_id: impl Into<String>,
        agent: impl Into<String>,
        step: impl Into<String>,
        status: StepStatus,
    ) -> Self {
        Self {
            task_id: task_id.into(),
            agent: agent.into(),
            step: step.into(),
            status,
            attempt: 0,
            calls: None,
            sub_task_id: None,
            error: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_kind_of_step_round_trips() {
        let wf = WorkflowDefinition::new("g")
            .on_failure(FailurePolicy::Continue)
            .with_input_schema(json!({"type": "object"}))
            .with_step(
                WorkflowStep::new("a", "search")
                    .with_input("q", json!(["{{input.q}}", {"x": "{{input.y}}"}]))
                    .with_timeout(Duration::from_secs(30))
                    .with_retries(2)
                    .with_fallback("search.backup")
                    .on_failure(FailurePolicy::SkipDescendants),
            )
            .with_step(WorkflowStep::human("b", HumanInput::new("ok?")).depends_on("a"))
            .with_step(WorkflowStep::sub_workflow(
                "c",
                WorkflowDefinition::new("inner").with_step(WorkflowStep::new("x", "op")),
            ));
        let v = serde_json::to_value(&wf).unwrap();
        assert_eq!(v["on_failure"], "continue");
        assert_eq!(v["steps"][0]["on_failure"], "skip_descendants");
        assert_eq!(serde_json::from_value::<WorkflowDefinition>(v).unwrap(), wf);
    }

    #[test]
    fn optional_fields_default() {
        let wf: WorkflowDefinition =
            serde_json::from_value(json!({"goal": "g", "steps": [{"id": "a", "operator": "op"}]}))
                .unwrap();
        assert_eq!(wf.on_failure, FailurePolicy::FailFast);
        let step = &wf.steps[0];
        assert_eq!((step.retries, step.timeout.as_ref()), (0, None));
        assert!(step.input_mapping.is_empty() && step.depends_on.is_empty());
    }
}

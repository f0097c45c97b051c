//! What can be wrong with a workflow definition: [`WorkflowProblem`], and [`InvalidWorkflow`],
//! the error listing every problem found.

use std::fmt::Write as _;

/// One thing wrong with a workflow definition. Each displays as one line naming the step.
///
/// ```
/// use soorma::workflow::WorkflowProblem;
/// let p = WorkflowProblem::Cycle { path: vec!["a".into(), "b".into(), "a".into()] };
/// assert_eq!(p.to_string(), "dependency cycle: a -> b -> a (each step depends on the next)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkflowProblem {
    /// The text is not a workflow definition (bad JSON or YAML, a field of the wrong type).
    #[error("not a workflow definition: at `{path}`{}: {message}", line_column(*.line, *.column))]
    NotAWorkflow {
        /// Where in the document (`steps[1].depends_on`; `.` for the top).
        path: String,
        /// The 1-based line, when the parser knows it.
        line: Option<usize>,
        /// The 1-based column, when the parser knows it.
        column: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// `goal` is empty.
    #[error("`goal` is empty")]
    EmptyGoal,
    /// The workflow has no steps.
    #[error("the workflow has no steps")]
    NoSteps,
    /// A step's `id` is empty.
    #[error("step {position} has an empty `id`")]
    EmptyStepId {
        /// The step's 1-based position in `steps`.
        position: usize,
    },
    /// A step's `id` cannot be used in templates.
    #[error("step `{id}`: {reason}")]
    InvalidStepId {
        /// The id.
        id: String,
        /// Why it is not usable.
        reason: String,
    },
    /// Two steps have the same `id`.
    #[error("step id `{id}` is used by {count} steps; ids must be unique")]
    DuplicateStepId {
        /// The id.
        id: String,
        /// How many steps use it.
        count: usize,
    },
    /// `depends_on` names no step.
    #[error("step `{step}` depends on unknown step `{dependency}`")]
    UnknownDependency {
        /// The step.
        step: String,
        /// The id that names no step.
        dependency: String,
    },
    /// Steps depend on each other in a circle: `path` starts and ends with the same step.
    #[error("dependency cycle: {} (each step depends on the next)", path.join(" -> "))]
    Cycle {
        /// The steps around the cycle, the first repeated at the end.
        path: Vec<String>,
    },
    /// The step has no `operator`, `human_input` or `sub_workflow`.
    #[error(
        "step `{step}` does nothing: give it an `operator`, a `human_input` or a `sub_workflow`"
    )]
    MissingOperator {
        /// The step.
        step: String,
    },
    /// The step has more than one of `operator`, `human_input` and `sub_workflow`.
    #[error("step `{step}` has {}: a step has exactly one of them", kinds.join(" and "))]
    ConflictingKinds {
        /// The kinds it has (`operator`, `human_input`, `sub_workflow`).
        kinds: Vec<&'static str>,
        /// The step.
        step: String,
    },
    /// A human-input step's question is empty.
    #[error("step `{step}`: the `human_input` question is empty")]
    EmptyQuestion {
        /// The step.
        step: String,
    },
    /// The fallback is the operator itself.
    #[error("step `{step}`: the fallback `{operator}` is the step's own operator")]
    FallbackIsOperator {
        /// The step.
        step: String,
        /// The operator.
        operator: String,
    },
    /// A fallback on a step without an operator (a human-input or sub-workflow step), or an
    /// empty one.
    #[error("step `{step}`: {reason}")]
    InvalidFallback {
        /// The step.
        step: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The timeout is not a duration, or is zero.
    #[error("step `{step}`: invalid timeout `{timeout}`: {reason}")]
    InvalidTimeout {
        /// The step.
        step: String,
        /// The timeout as written.
        timeout: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A template in the step's `input_mapping` does not compile.
    #[error("step `{step}`: the input template at `{pointer}` is invalid: {message}")]
    InvalidTemplate {
        /// The step.
        step: String,
        /// JSON Pointer of the string in `input_mapping`.
        pointer: String,
        /// What is wrong (from the template parser, with the column).
        message: String,
    },
    /// A template reads `steps` without naming a step (`{{steps}}`, `{{steps[0]}}`).
    #[error("step `{step}`: a template reads `{path}`; name a step: `steps.<id>.<field>`")]
    StepsWithoutId {
        /// The step.
        step: String,
        /// The path read.
        path: String,
    },
    /// A template reads `steps.x`, and there is no step `x`.
    #[error("step `{step}`: a template reads `{path}`, but there is no step `{referenced}`")]
    UnknownStepReference {
        /// The step.
        step: String,
        /// The id read.
        referenced: String,
        /// The path read.
        path: String,
    },
    /// A template reads the output of a step that is not an ancestor (not reachable through
    /// `depends_on`), so it may not have run yet.
    #[error(
        "step `{step}`: a template reads `{path}`, but step `{step}` does not depend on `{referenced}` \
         (directly or through its dependencies); add it to `depends_on`"
    )]
    NotAnAncestor {
        /// The step.
        step: String,
        /// The step read.
        referenced: String,
        /// The path read.
        path: String,
    },
    /// An input of the input schema has a step's name, so `{{name}}` would be ambiguous.
    #[error(
        "input `{name}` has the name of a step: `{{{{{name}}}}}` would read the step's output; \
         rename one of them"
    )]
    AmbiguousInput {
        /// The name.
        name: String,
    },
    /// A template reads a field that a known schema (the workflow's input schema, or the reply
    /// schema of the step read) does not have.
    #[error("step `{step}`: a template reads `{path}`, but {reason}")]
    MissingField {
        /// The step.
        step: String,
        /// The path read.
        path: String,
        /// What the schema says (`the reply of step `a` (capability `search`) has no field `x``).
        reason: String,
    },
    /// No registered capability has this task name or consumes this event.
    #[error("step `{step}`: no registered capability is called `{name}` or consumes it ({role})")]
    UnknownCapability {
        /// The step.
        step: String,
        /// The operator or fallback.
        name: String,
        /// `operator` or `fallback`.
        role: &'static str,
    },
    /// The step's input (or the part of it known before running) violates the payload schema
    /// of the capability it calls.
    #[error(
        "step `{step}`: its input does not match the payload schema of `{capability}`: at `{pointer}`: {message}"
    )]
    InputViolatesSchema {
        /// The step.
        step: String,
        /// The capability.
        capability: String,
        /// JSON Pointer into the step's input.
        pointer: String,
        /// The violation.
        message: String,
    },
    /// A sub-workflow step's input (as far as it is known before running) violates the
    /// sub-workflow's `input_schema`.
    #[error(
        "step `{step}`: its input does not match the input schema of its sub-workflow: at `{pointer}`: {message}"
    )]
    SubWorkflowInputViolatesSchema {
        /// The sub-workflow step.
        step: String,
        /// JSON Pointer into the step's input.
        pointer: String,
        /// The violation.
        message: String,
    },
    /// Sub-workflows nest too deeply.
    #[error("step `{step}`: sub-workflows nest deeper than {max} levels")]
    TooDeep {
        /// The step.
        step: String,
        /// The limit.
        max: usize,
    },
    /// A problem of a step's sub-workflow.
    #[error("in sub-workflow `{step}`: {problem}")]
    InSubWorkflow {
        /// The sub-workflow step.
        step: String,
        /// The nested problem.
        problem: Box<WorkflowProblem>,
    },
}

fn line_column(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" (line {l}, column {c})"),
        (Some(l), None) => format!(" (line {l})"),
        _ => String::new(),
    }
}

/// A workflow definition with problems; every problem found is listed.
///
/// `?` turns it into [`Error::Other`](crate::Error::Other) (get it back with
/// [`Error::downcast_ref`](crate::Error::downcast_ref)).
///
/// ```
/// use soorma::workflow::{InvalidWorkflow, Workflow, WorkflowProblem};
/// let err = Workflow::from_json(r#"{"goal": "", "steps": []}"#).unwrap_err();
/// assert_eq!(err.problems(), [WorkflowProblem::EmptyGoal, WorkflowProblem::NoSteps]);
/// assert_eq!(err.to_string(), "the workflow is invalid:\n  - `goal` is empty\n  - the workflow has no steps");
/// let boxed: soorma::Error = err.into();
/// assert!(boxed.downcast_ref::<InvalidWorkflow>().is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", list(problems))]
#[non_exhaustive]
pub struct InvalidWorkflow {
    problems: Vec<WorkflowProblem>,
}

impl InvalidWorkflow {
    pub(super) fn new(problems: Vec<WorkflowProblem>) -> Self {
        Self { problems }
    }

    /// Every problem found, in definition order.
    ///
    /// ```
    /// let err = soorma::workflow::Workflow::from_json("{}").unwrap_err();
    /// assert_eq!(err.problems().len(), 1);
    /// ```
    pub fn problems(&self) -> &[WorkflowProblem] {
        &self.problems
    }

    /// The problems, by value.
    ///
    /// ```
    /// let err = soorma::workflow::Workflow::from_json("[]").unwrap_err();
    /// assert!(err.into_problems()[0].to_string().starts_with("not a workflow definition"));
    /// ```
    pub fn into_problems(self) -> Vec<WorkflowProblem> {
        self.problems
    }
}

fn list(problems: &[WorkflowProblem]) -> String {
    let mut out = String::from("the workflow is invalid:");
    for p in problems {
        let _ = write!(out, "\n  - {p}");
    }
    out
}

impl From<InvalidWorkflow> for crate::error::Error {
    fn from(e: InvalidWorkflow) -> Self {
        crate::error::Error::other_with_retry(e, false)
    }
}

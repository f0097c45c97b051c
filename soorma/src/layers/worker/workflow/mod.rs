//! Workflows, validated up front: a [`Workflow`] is a [`WorkflowDefinition`] whose steps form a
//! DAG, whose templates compile and read only inputs and ancestors' outputs, and whose steps
//! each do exactly one thing. It gives an executor the DAG (roots, dependencies, dependents, a
//! topological order) and each step's compiled input.

mod graph;
mod input;
mod problem;
mod registry;
mod run;
mod schema;
#[cfg(test)]
mod tests;
mod transition;

use std::collections::HashMap;
use std::time::Duration;

use soorma_common::{FailurePolicy, HumanInput, WorkflowDefinition, WorkflowStep};
use soorma_expr::Roots;

pub use input::{Reference, StepInput, StepOutputs};
pub use problem::{InvalidWorkflow, WorkflowProblem};

use input::{INPUT_ROOT, STEPS_ROOT, Scope};
pub(in crate::layers::worker) use run::{starts_workflows, step_handler, unusable_name};

/// How deeply sub-workflows may nest.
pub const MAX_SUB_WORKFLOW_DEPTH: usize = 8;

/// A validated workflow, ready to run.
///
/// Templates in a step's `input_mapping` read the workflow's input and the outputs of the
/// steps it depends on: `{{input.topic}}` and `{{steps.search.results}}`, or the short forms
/// `{{topic}}` and `{{search.results}}`: a first segment that is a step id means that step,
/// anything else is an input.
///
/// ```
/// use soorma::workflow::Workflow;
/// use soorma::common::{WorkflowDefinition, WorkflowStep};
///
/// let wf = Workflow::new(
///     WorkflowDefinition::new("Compare our pricing to competitors")
///         .with_step(WorkflowStep::new("rewrite", "query_rewriter").with_input("query", "{{user_query}}"))
///         .with_step(WorkflowStep::new("internal", "rag_retriever")
///             .with_input("query", "{{rewrite.internal_query}}").depends_on("rewrite"))
///         .with_step(WorkflowStep::new("web", "web_searcher")
///             .with_input("query", "{{rewrite.external_query}}").depends_on("rewrite"))
///         .with_step(WorkflowStep::new("synthesize", "synthesizer")
///             .with_input("sources", serde_json::json!(["{{internal.results}}", "{{web.results}}"]))
///             .depends_on("internal").depends_on("web")),
/// )?;
/// let order: Vec<&str> = wf.order().map(|s| s.id()).collect();
/// assert_eq!(order, ["rewrite", "internal", "web", "synthesize"]);
/// assert_eq!(wf.step("rewrite").unwrap().dependents(), ["internal", "web"]);
/// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
/// ```
#[derive(Debug, Clone)]
pub struct Workflow {
    definition: WorkflowDefinition,
    steps: Vec<Step>,
    index: HashMap<String, usize>,
    order: Vec<usize>,
    /// The positions of the steps without dependencies.
    root_positions: Vec<usize>,
}

/// What a step does.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StepKind {
    /// Call a capability.
    Operator {
        /// The capability's task name, or the event it consumes.
        operator: String,
        /// The operator tried when the retries are exhausted.
        fallback: Option<String>,
    },
    /// Ask a person.
    HumanInput(HumanInput),
    /// Run a nested workflow on the step's rendered input.
    SubWorkflow(Box<Workflow>),
}

/// A validated step: what it does, its compiled input, its place in the DAG.
#[derive(Debug, Clone)]
pub struct Step {
    id: String,
    name: String,
    kind: StepKind,
    input: StepInput,
    dependencies: Vec<String>,
    dependents: Vec<String>,
    /// The positions of `dependencies` and `dependents` (in `Workflow::steps`).
    dep_positions: Vec<usize>,
    dependent_positions: Vec<usize>,
    timeout: Option<Duration>,
    retries: u32,
    on_failure: FailurePolicy,
}

impl Step {
    /// The step id.
    ///
    /// See [`Workflow`].
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The human-readable name (may be empty).
    ///
    /// ```
    /// let wf = soorma::workflow::Workflow::from_json(
    ///     r#"{"goal": "g", "steps": [{"id": "a", "name": "Search", "operator": "op"}]}"#)?;
    /// assert_eq!(wf.step("a").unwrap().name(), "Search");
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the step does.
    ///
    /// ```
    /// use soorma::workflow::{StepKind, Workflow};
    /// let wf = Workflow::from_json(
    ///     r#"{"goal": "g", "steps": [{"id": "a", "operator": "search", "fallback": "search.backup"}]}"#)?;
    /// let StepKind::Operator { fallback, .. } = wf.step("a").unwrap().kind() else { unreachable!() };
    /// assert_eq!(fallback.as_deref(), Some("search.backup"));
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn kind(&self) -> &StepKind {
        &self.kind
    }

    /// The compiled input template.
    ///
    /// See [`StepInput::render`].
    pub fn input(&self) -> &StepInput {
        &self.input
    }

    /// The steps this one waits for, as listed (duplicates dropped).
    ///
    /// See [`Workflow`].
    pub fn dependencies(&self) -> &[String] {
        &self.dependencies
    }

    /// The steps that wait for this one, in definition order.
    ///
    /// See [`Workflow`].
    pub fn dependents(&self) -> &[String] {
        &self.dependents
    }

    /// How long one attempt may take.
    ///
    /// ```
    /// let wf = soorma::workflow::Workflow::from_json(
    ///     r#"{"goal": "g", "steps": [{"id": "a", "operator": "op", "timeout": "1m 30s"}]}"#)?;
    /// assert_eq!(wf.step("a").unwrap().timeout(), Some(std::time::Duration::from_secs(90)));
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// How many times a failed attempt is retried.
    ///
    /// ```
    /// let wf = soorma::workflow::Workflow::from_json(
    ///     r#"{"goal": "g", "steps": [{"id": "a", "operator": "op", "retries": 2}]}"#)?;
    /// assert_eq!(wf.step("a").unwrap().retries(), 2);
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// What this step's failure does: its own `on_failure`, else the workflow's.
    ///
    /// ```
    /// use soorma::common::FailurePolicy;
    /// let wf = soorma::workflow::Workflow::from_json(r#"{"goal": "g", "on_failure": "continue",
    ///   "steps": [{"id": "a", "operator": "op"}, {"id": "b", "operator": "op", "on_failure": "skip_descendants"}]}"#)?;
    /// assert_eq!(wf.step("a").unwrap().on_failure(), FailurePolicy::Continue);
    /// assert_eq!(wf.step("b").unwrap().on_failure(), FailurePolicy::SkipDescendants);
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn on_failure(&self) -> FailurePolicy {
        self.on_failure
    }
}

impl Workflow {
    /// Validates `definition`; [`InvalidWorkflow`] lists every problem found.
    ///
    /// ```
    /// use soorma::workflow::{Workflow, WorkflowProblem};
    /// use soorma::common::{WorkflowDefinition, WorkflowStep};
    ///
    /// let broken = WorkflowDefinition::new("g")
    ///     .with_step(WorkflowStep::new("a", "search").depends_on("c"))
    ///     .with_step(WorkflowStep::new("b", "search").depends_on("a"))
    ///     .with_step(WorkflowStep::new("c", "search").depends_on("b").with_input("q", "{{d.x}}"));
    /// let err = Workflow::new(broken).unwrap_err();
    /// let problems: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
    /// assert!(problems.contains(&"dependency cycle: a -> c -> b -> a (each step depends on the next)".into()), "{problems:?}");
    /// assert_eq!(err.problems().len(), 1);
    /// # let _ = WorkflowProblem::EmptyGoal;
    /// ```
    pub fn new(definition: WorkflowDefinition) -> Result<Self, InvalidWorkflow> {
        Self::build(definition, 0)
    }

    /// Parses and validates a workflow definition in JSON.
    ///
    /// ```
    /// let wf = soorma::workflow::Workflow::from_json(r#"{"goal": "g", "steps": [{"id": "a", "operator": "op"}]}"#)?;
    /// assert_eq!(wf.definition().goal, "g");
    /// let err = soorma::workflow::Workflow::from_json(r#"{"goal": "g", "steps": [{"id": 1}]}"#).unwrap_err();
    /// assert!(err.to_string().contains("at `steps[0].id`"), "{err}");
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn from_json(json: &str) -> Result<Self, InvalidWorkflow> {
        let definition: WorkflowDefinition =
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(json))
                .map_err(|e| {
                    let path = e.path().to_string();
                    let inner = e.into_inner();
                    let (line, column) = match inner.line() {
                        0 => (None, None),
                        l => (Some(l), Some(inner.column())),
                    };
                    InvalidWorkflow::new(vec![WorkflowProblem::NotAWorkflow {
                        path,
                        line,
                        column,
                        message: strip_position(&inner.to_string()),
                    }])
                })?;
        Self::new(definition)
    }

    /// Parses and validates a workflow definition in YAML (feature `yaml`).
    ///
    /// ```
    /// let wf = soorma::workflow::Workflow::from_yaml("
    /// goal: Summarize a topic
    /// steps:
    ///   - id: search
    ///     operator: web.search
    ///     input_mapping: {query: '{{topic}}'}
    ///     timeout: 30s
    ///   - id: summarize
    ///     operator: summarize
    ///     input_mapping: {text: '{{search.results}}'}
    ///     depends_on: [search]
    /// ")?;
    /// assert_eq!(wf.roots().map(|s| s.id()).collect::<Vec<_>>(), ["search"]);
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    #[cfg(feature = "yaml")]
    pub fn from_yaml(yaml: &str) -> Result<Self, InvalidWorkflow> {
        let definition: WorkflowDefinition = serde_path_to_error::deserialize(
            serde_norway::Deserializer::from_str(yaml),
        )
        .map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let location = inner.location();
            let message = strip_position(&inner.to_string());
            // serde_norway starts its message with the path, which the problem says already.
            let message = match message.strip_prefix(&format!("{path}: ")) {
                Some(rest) => rest.to_owned(),
                None => message,
            };
            InvalidWorkflow::new(vec![WorkflowProblem::NotAWorkflow {
                path,
                line: location.as_ref().map(|l| l.line()),
                column: location.as_ref().map(|l| l.column()),
                message,
            }])
        })?;
        Self::new(definition)
    }

    /// The definition.
    ///
    /// See [`Workflow::from_json`].
    pub fn definition(&self) -> &WorkflowDefinition {
        &self.definition
    }

    /// The steps, in definition order.
    ///
    /// ```
    /// let wf = soorma::workflow::Workflow::from_json(r#"{"goal": "g", "steps": [
    ///   {"id": "b", "operator": "op", "depends_on": ["a"]}, {"id": "a", "operator": "op"}]}"#)?;
    /// assert_eq!(wf.steps().iter().map(|s| s.id()).collect::<Vec<_>>(), ["b", "a"]);
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The step with this id.
    ///
    /// See [`Workflow`].
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.index.get(id).map(|&i| &self.steps[i])
    }

    /// The steps in a topological order: each after all its dependencies (ties in definition
    /// order).
    ///
    /// ```
    /// let wf = soorma::workflow::Workflow::from_json(r#"{"goal": "g", "steps": [
    ///   {"id": "b", "operator": "op", "depends_on": ["a"]}, {"id": "a", "operator": "op"}]}"#)?;
    /// assert_eq!(wf.order().map(|s| s.id()).collect::<Vec<_>>(), ["a", "b"]);
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn order(&self) -> impl Iterator<Item = &Step> {
        self.order.iter().map(|&i| &self.steps[i])
    }

    /// The steps without dependencies (ready when the workflow starts), in definition order.
    ///
    /// ```
    /// let wf = soorma::workflow::Workflow::from_json(r#"{"goal": "g", "steps": [
    ///   {"id": "b", "operator": "op", "depends_on": ["a"]}, {"id": "a", "operator": "op"}, {"id": "c", "operator": "op"}]}"#)?;
    /// assert_eq!(wf.roots().map(|s| s.id()).collect::<Vec<_>>(), ["a", "c"]);
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn roots(&self) -> impl Iterator<Item = &Step> {
        self.steps.iter().filter(|s| s.dependencies.is_empty())
    }

    fn build(definition: WorkflowDefinition, depth: usize) -> Result<Self, InvalidWorkflow> {
        let mut problems = Vec::new();
        let built = Builder::new(&definition, depth, &mut problems).build();
        match built {
            Some((steps, index, order)) if problems.is_empty() => {
                let root_positions = (0..steps.len())
                    .filter(|&i| steps[i].dep_positions.is_empty())
                    .collect();
                let workflow = Self {
                    definition,
                    steps,
                    index,
                    order,
                    root_positions,
                };
                workflow.check_sub_workflow_inputs(&mut problems);
                if problems.is_empty() {
                    Ok(workflow)
                } else {
                    Err(InvalidWorkflow::new(problems))
                }
            }
            _ => Err(InvalidWorkflow::new(problems)),
        }
    }
}

/// serde's messages end with ` at line L column C`, which the problem says already.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

/// Validates one definition, collecting every problem.
struct Builder<'d, 'p> {
    def: &'d WorkflowDefinition,
    depth: usize,
    problems: &'p mut Vec<WorkflowProblem>,
    /// Unique, valid ids → position.
    index: HashMap<String, usize>,
    /// Per step: the positions of its (known, distinct) dependencies.
    deps: Vec<Vec<usize>>,
}

type Built = (Vec<Step>, HashMap<String, usize>, Vec<usize>);

impl<'d, 'p> Builder<'d, 'p> {
    fn new(
        def: &'d WorkflowDefinition,
        depth: usize,
        problems: &'p mut Vec<WorkflowProblem>,
    ) -> Self {
        Self {
            def,
            depth,
            problems,
            index: HashMap::new(),
            deps: Vec::new(),
        }
    }

    fn build(mut self) -> Option<Built> {
        if self.def.goal.trim().is_empty() {
            self.problems.push(WorkflowProblem::EmptyGoal);
        }
        if self.def.steps.is_empty() {
            self.problems.push(WorkflowProblem::NoSteps);
            return None;
        }
        self.check_ids();
        let inputs = self.check_inputs();
        self.link();
        let order = self.order();
        let mut kinds = Vec::with_capacity(self.def.steps.len());
        let mut timeouts = Vec::with_capacity(self.def.steps.len());
        for (i, step) in self.def.steps.iter().enumerate() {
            let label = label(step, i);
            kinds.push(self.kind(step, &label));
            timeouts.push(self.timeout(step, &label));
        }
        let scope = Scope {
            index: &self.index,
            inputs: inputs.as_deref(),
        };
        let inputs: Vec<Option<StepInput>> = self
            .def
            .steps
            .iter()
            .enumerate()
            .map(|(i, step)| {
                StepInput::compile(&label(step, i), &step.input_mapping, &scope, self.problems)
            })
            .collect();
        self.check_ancestry(&inputs);
        schema::check_pure(self.def, &inputs, &self.index, self.problems);
        let mut steps = Vec::with_capacity(self.def.steps.len());
        for (i, ((step, kind), input)) in self.def.steps.iter().zip(kinds).zip(inputs).enumerate() {
            let (Some(kind), Some(input)) = (kind, input) else {
                return None;
            };
            steps.push(Step {
                id: step.id.clone(),
                name: step.name.clone(),
                kind,
                input,
                dependencies: self.deps[i]
                    .iter()
                    .map(|&d| self.def.steps[d].id.clone())
                    .collect(),
                dependents: Vec::new(),
                dep_positions: self.deps[i].clone(),
                dependent_positions: Vec::new(),
                timeout: timeouts[i],
                retries: step.retries,
                on_failure: step.on_failure.unwrap_or(self.def.on_failure),
            });
        }
        let order = order?;
        for (i, deps) in self.deps.iter().enumerate() {
            for &d in deps {
                let id = steps[i].id.clone();
                steps[d].dependents.push(id);
                steps[d].dependent_positions.push(i);
            }
        }
        Some((steps, self.index, order))
    }

    fn check_ids(&mut self) {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for step in &self.def.steps {
            *counts.entry(step.id.as_str()).or_default() += 1;
        }
        for (i, step) in self.def.steps.iter().enumerate() {
            let id = step.id.as_str();
            if id.trim().is_empty() {
                self.problems
                    .push(WorkflowProblem::EmptyStepId { position: i + 1 });
                continue;
            }
            if id == INPUT_ROOT || id == STEPS_ROOT {
                self.problems.push(WorkflowProblem::InvalidStepId {
                    id: id.to_owned(),
                    reason: format!(
                        "`{INPUT_ROOT}` and `{STEPS_ROOT}` are reserved: templates read the \
                         workflow's input as `{{{{input.x}}}}` and outputs as `{{{{steps.<id>.x}}}}`"
                    ),
                });
                continue;
            }
            if Roots::new([id]).is_err() {
                self.problems.push(WorkflowProblem::InvalidStepId {
                    id: id.to_owned(),
                    reason: "an id must be an identifier (ASCII letters, digits and `_`, not \
                             starting with a digit, not a keyword such as `in` or `not`): \
                             templates read a step's output as `{{<id>.field}}`"
                        .to_owned(),
                });
                continue;
            }
            match counts.get(id) {
                Some(&count) if count > 1 => {
                    if !self.index.contains_key(id) {
                        self.problems.push(WorkflowProblem::DuplicateStepId {
                            id: id.to_owned(),
                            count,
                        });
                        // Known (for references), but its first definition only.
                        self.index.insert(id.to_owned(), i);
                    }
                }
                _ => {
                    self.index.insert(id.to_owned(), i);
                }
            }
        }
    }

    /// The inputs the input schema lists (`None`: it lists none); an input named like a step
    /// is a problem.
    fn check_inputs(&mut self) -> Option<Vec<String>> {
        let properties = self.def.input_schema.as_ref()?.get("properties")?;
        let names: Vec<String> = properties.as_object()?.keys().cloned().collect();
        for name in &names {
            if self.index.contains_key(name) {
                self.problems
                    .push(WorkflowProblem::AmbiguousInput { name: name.clone() });
            }
        }
        Some(names)
    }

    /// Resolves `depends_on`.
    fn link(&mut self) {
        for (i, step) in self.def.steps.iter().enumerate() {
            let mut deps = Vec::new();
            for dep in &step.depends_on {
                match self.index.get(dep.as_str()) {
                    Some(&d) => {
                        if !deps.contains(&d) {
                            deps.push(d);
                        }
                    }
                    None => self.problems.push(WorkflowProblem::UnknownDependency {
                        step: label(step, i),
                        dependency: dep.clone(),
                    }),
                }
            }
            self.deps.push(deps);
        }
    }

    /// A topological order (Kahn's algorithm, ties in definition order), or the cycles.
    fn order(&mut self) -> Option<Vec<usize>> {
        let n = self.deps.len();
        let mut dependents = vec![Vec::new(); n];
        let mut waiting: Vec<usize> = self.deps.iter().map(Vec::len).collect();
        for (i, deps) in self.deps.iter().enumerate() {
            for &d in deps {
                dependents[d].push(i);
            }
        }
        let mut order: Vec<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
        let mut next = 0;
        while next < order.len() {
            let done = order[next];
            next += 1;
            for &d in &dependents[done] {
                waiting[d] -= 1;
                if waiting[d] == 0 {
                    order.push(d);
                }
            }
        }
        if order.len() == n {
            return Some(order);
        }
        for path in cycles(&self.deps, &waiting) {
            self.problems.push(WorkflowProblem::Cycle {
                path: path
                    .into_iter()
                    .map(|i| label(&self.def.steps[i], i))
                    .collect(),
            });
        }
        None
    }

    fn kind(&mut self, step: &WorkflowStep, label: &str) -> Option<StepKind> {
        let mut kinds = Vec::new();
        if step.operator.is_some() {
            kinds.push("operator");
        }
        if step.human_input.is_some() {
            kinds.push("human_input");
        }
        if step.sub_workflow.is_some() {
            kinds.push("sub_workflow");
        }
        if kinds.len() > 1 {
            self.problems.push(WorkflowProblem::ConflictingKinds {
                kinds,
                step: label.to_owned(),
            });
            return None;
        }
        let invalid_fallback = |reason| WorkflowProblem::InvalidFallback {
            step: label.to_owned(),
            reason,
        };
        if let Some(operator) = &step.operator {
            if operator.trim().is_empty() {
                self.problems.push(WorkflowProblem::MissingOperator {
                    step: label.to_owned(),
                });
                return None;
            }
            match &step.fallback {
                Some(f) if f.trim().is_empty() => {
                    self.problems
                        .push(invalid_fallback("the fallback is empty"));
                }
                Some(f) if f == operator => {
                    self.problems.push(WorkflowProblem::FallbackIsOperator {
                        step: label.to_owned(),
                        operator: operator.clone(),
                    });
                }
                _ => {}
            }
            return Some(StepKind::Operator {
                operator: operator.clone(),
                fallback: step.fallback.clone(),
            });
        }
        if step.fallback.is_some() {
            self.problems.push(invalid_fallback(
                "only a step with an `operator` can have a fallback",
            ));
        }
        if let Some(ask) = &step.human_input {
            if ask.question.trim().is_empty() {
                self.problems.push(WorkflowProblem::EmptyQuestion {
                    step: label.to_owned(),
                });
            }
            return Some(StepKind::HumanInput(ask.clone()));
        }
        let Some(inner) = &step.sub_workflow else {
            self.problems.push(WorkflowProblem::MissingOperator {
                step: label.to_owned(),
            });
            return None;
        };
        if self.depth + 1 > MAX_SUB_WORKFLOW_DEPTH {
            self.problems.push(WorkflowProblem::TooDeep {
                step: label.to_owned(),
                max: MAX_SUB_WORKFLOW_DEPTH,
            });
            return None;
        }
        match Workflow::build((**inner).clone(), self.depth + 1) {
            Ok(wf) => Some(StepKind::SubWorkflow(Box::new(wf))),
            Err(e) => {
                self.problems.extend(e.into_problems().into_iter().map(|p| {
                    WorkflowProblem::InSubWorkflow {
                        step: label.to_owned(),
                        problem: Box::new(p),
                    }
                }));
                None
            }
        }
    }

    fn timeout(&mut self, step: &WorkflowStep, label: &str) -> Option<Duration> {
        let written = step.timeout.as_ref()?;
        let invalid = |reason: String| WorkflowProblem::InvalidTimeout {
            step: label.to_owned(),
            timeout: written.clone(),
            reason,
        };
        match humantime::parse_duration(written.trim()) {
            Ok(d) if d.is_zero() => {
                self.problems
                    .push(invalid("a timeout must be longer than zero".into()));
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.problems.push(invalid(format!(
                    "{e} (write a duration like `30s`, `500ms`, `2m` or `1h 30m`)"
                )));
                None
            }
        }
    }

    /// Every step read by a template must be an ancestor of the reading step.
    /// Walks up `depends_on` from each reading step until every step it reads is found (an
    /// epoch per walk, so nothing is cleared between walks).
    fn check_ancestry(&mut self, inputs: &[Option<StepInput>]) {
        let mut seen = vec![0_usize; self.deps.len()];
        let mut stack = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            let Some(input) = input else {
                continue;
            };
            let mut targets: Vec<usize> = input
                .reads()
                .iter()
                .filter_map(|r| self.index.get(r.step()?).copied())
                .collect();
            targets.sort_unstable();
            targets.dedup();
            if targets.is_empty() {
                continue;
            }
            let epoch = i + 1;
            let mut missing = targets.len();
            stack.clear();
            stack.extend_from_slice(&self.deps[i]);
            while let Some(d) = stack.pop() {
                if seen[d] == epoch {
                    continue;
                }
                seen[d] = epoch;
                if targets.binary_search(&d).is_ok() {
                    missing -= 1;
                    if missing == 0 {
                        break;
                    }
                }
                stack.extend_from_slice(&self.deps[d]);
            }
            for reference in input.reads() {
                let Some(target) = reference.step() else {
                    continue;
                };
                if self.index.get(target).is_some_and(|&t| seen[t] != epoch) {
                    self.problems.push(WorkflowProblem::NotAnAncestor {
                        step: label(&self.def.steps[i], i),
                        referenced: target.to_owned(),
                        path: reference.to_string(),
                    });
                }
            }
        }
    }
}

/// How problems name a step: its id, or `#<position>` when the id is empty.
fn label(step: &WorkflowStep, position: usize) -> String {
    if step.id.trim().is_empty() {
        format!("#{}", position + 1)
    } else {
        step.id.clone()
    }
}

/// One cycle per back edge of a depth-first search over the steps Kahn's algorithm could not
/// order (`waiting > 0`), each as positions from a step back to itself along `depends_on`.
/// Iterative, so a long chain cannot overflow the stack.
fn cycles(deps: &[Vec<usize>], waiting: &[usize]) -> Vec<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark = vec![Mark::New; deps.len()];
    let mut found = Vec::new();
    for start in (0..deps.len()).filter(|&i| waiting[i] > 0) {
        if mark[start] != Mark::New {
            continue;
        }
        // (step, index of the next dependency to visit)
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = Mark::OnPath;
        while let Some(&mut (step, ref mut next)) = path.last_mut() {
            if let Some(&dep) = deps[step].get(*next) {
                *next += 1;
                match mark[dep] {
                    Mark::New => {
                        mark[dep] = Mark::OnPath;
                        path.push((dep, 0));
                    }
                    Mark::OnPath => {
                        let from = path.iter().position(|&(s, _)| s == dep).unwrap_or(0);
                        let mut cycle: Vec<usize> = path[from..].iter().map(|&(s, _)| s).collect();
                        cycle.push(dep);
                        found.push(cycle);
                    }
                    Mark::Done => {}
                }
            } else {
                mark[step] = Mark::Done;
                path.pop();
            }
        }
    }
    found
}

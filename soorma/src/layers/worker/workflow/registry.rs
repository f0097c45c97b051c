//! The registry-aware check: operators that exist, inputs their capabilities accept, reply
//! fields that exist.

use serde_json::Value;
use soorma_common::{AgentCapability, AgentDefinition};

use super::input::Reference;
#[cfg(feature = "schema-validation")]
use super::input::{is_lone, single_path};
use super::problem::{InvalidWorkflow, WorkflowProblem};
use super::schema::{Known, Lookup, base};
#[cfg(feature = "schema-validation")]
use super::schema::{article, known_without_registry, single_type};
use super::{Step, StepKind, Workflow};

/// The capability `name` names: by task name first, then by the event it consumes (as
/// [`Discovery::capability`](crate::registry::Discovery::capability) finds it).
fn capability<'a>(agents: &'a [AgentDefinition], name: &str) -> Option<&'a AgentCapability> {
    let caps = || agents.iter().flat_map(|a| a.capabilities.iter());
    caps()
        .find(|c| c.task_name == name)
        .or_else(|| caps().find(|c| c.consumed_event.event_name == name))
}

/// The JSON Schema of a capability's reply result: its consumed event's `response_schema`, or
/// a produced event's.
fn reply_schema(cap: &AgentCapability) -> Option<&Value> {
    cap.consumed_event.response_schema.as_ref().or_else(|| {
        cap.produced_events
            .iter()
            .find_map(|e| e.response_schema.as_ref())
    })
}

impl Workflow {
    /// Checks the workflow against the agents of a registry (`platform.registry().agents()`):
    /// every operator and fallback must name a capability (its task name, or the event it
    /// consumes); a step's input must match the capability's payload schema as far as it is
    /// known before running (static values, the structure of the template, and the types of
    /// placeholders that read a field whose schema is known); and templates may read only
    /// fields that a known reply schema has. [`InvalidWorkflow`] lists every problem.
    ///
    /// ```
    /// use serde_json::json;
    /// use soorma::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
    /// use soorma::workflow::Workflow;
    ///
    /// let search = AgentCapability::new(
    ///     "search",
    ///     EventDefinition::new("search.requested", Topic::ActionRequests)
    ///         .with_payload_schema(json!({"type": "object", "required": ["query"],
    ///                                     "properties": {"query": {"type": "string"}}}))
    ///         .with_response_schema(json!({"type": "object",
    ///                                      "properties": {"hits": {"type": "array"}}})),
    /// );
    /// let agents = [AgentDefinition::new("s-1", "searcher", AgentKind::Tool).with_capability(search)];
    ///
    /// let wf = Workflow::from_json(r#"{"goal": "g", "steps": [
    ///   {"id": "a", "operator": "search", "input_mapping": {"q": "{{topic}}"}},
    ///   {"id": "b", "operator": "search.requested", "depends_on": ["a"],
    ///    "input_mapping": {"query": "{{a.hit}}"}},
    ///   {"id": "c", "operator": "summarize", "depends_on": ["b"], "input_mapping": {"text": "{{b.hits}}"}}
    /// ]}"#)?;
    /// let problems: Vec<String> = wf.check_against(&agents).unwrap_err()
    ///     .problems().iter().map(ToString::to_string).collect();
    /// assert_eq!(problems, [
    ///     "step `a`: its input does not match the payload schema of `search`: at ``: \"query\" is a required property",
    ///     "step `b`: a template reads `steps.a.hit`, but the reply schema of `search` has no field `hit` in `steps.a` (it has: hits)",
    ///     "step `c`: no registered capability is called `summarize` or consumes it (operator)",
    /// ]);
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn check_against(&self, agents: &[AgentDefinition]) -> Result<(), InvalidWorkflow> {
        let mut problems = Vec::new();
        self.check_registry(agents, &mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(InvalidWorkflow::new(problems))
        }
    }

    fn check_registry(&self, agents: &[AgentDefinition], problems: &mut Vec<WorkflowProblem>) {
        for step in &self.steps {
            match &step.kind {
                StepKind::Operator { operator, fallback } => {
                    let found = capability(agents, operator);
                    if found.is_none() {
                        problems.push(unknown(step, operator, "operator"));
                    }
                    if let Some(fallback) = fallback
                        && capability(agents, fallback).is_none()
                    {
                        problems.push(unknown(step, fallback, "fallback"));
                    }
                    if let Some(schema) =
                        found.and_then(|c| c.consumed_event.payload_schema.as_ref())
                    {
                        problems.extend(
                            self.input_violations(step, schema, agents).into_iter().map(
                                |(pointer, message)| WorkflowProblem::InputViolatesSchema {
                                    step: step.id.clone(),
                                    capability: operator.clone(),
                                    pointer,
                                    message,
                                },
                            ),
                        );
                    }
                }
                StepKind::SubWorkflow(inner) => {
                    let mut nested = Vec::new();
                    inner.check_registry(agents, &mut nested);
                    problems.extend(nested.into_iter().map(|p| WorkflowProblem::InSubWorkflow {
                        step: step.id.clone(),
                        problem: Box::new(p),
                    }));
                }
                StepKind::HumanInput(_) => {}
            }
            for reference in step.input.reads() {
                let Some(known) = self.reply_of(reference, agents) else {
                    continue;
                };
                if let Lookup::Missing(reason) = known.lookup(&base(reference), reference.field()) {
                    problems.push(WorkflowProblem::MissingField {
                        step: step.id.clone(),
                        path: reference.to_string(),
                        reason,
                    });
                }
            }
        }
    }

    /// The reply schema of the capability the step `reference` reads calls.
    fn reply_of<'a>(
        &self,
        reference: &Reference,
        agents: &'a [AgentDefinition],
    ) -> Option<Known<'a>> {
        let StepKind::Operator { operator, .. } = &self.step(reference.step()?)?.kind else {
            return None;
        };
        let cap = capability(agents, operator)?;
        Some(Known {
            schema: reply_schema(cap)?,
            what: format!("the reply schema of `{operator}`"),
        })
    }

    /// What a template reads is known to be of this JSON type (`None`: not known).
    #[cfg(feature = "schema-validation")]
    fn type_of(&self, reference: &Reference, agents: &[AgentDefinition]) -> Option<String> {
        let known = known_without_registry(&self.definition, &self.index, reference)
            .or_else(|| self.reply_of(reference, agents))?;
        match known.lookup(&base(reference), reference.field()) {
            Lookup::Found(schema) => single_type(known.schema, schema).map(str::to_owned),
            _ => None,
        }
    }

    /// Validates a probe of the step's input against `schema`: static values as they
    /// are, placeholders as a value of their known type (or `null`), keeping only the
    /// violations the template decides.
    /// Each violation is `(JSON Pointer, message)`; a schema that is not a valid JSON Schema is
    /// logged and not enforced.
    #[cfg(feature = "schema-validation")]
    fn input_violations(
        &self,
        step: &Step,
        schema: &Value,
        agents: &[AgentDefinition],
    ) -> Vec<(String, String)> {
        let validator = match crate::platform::validation::compile(schema) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(step = %step.id, error = %e, "the schema of a step's input is not a valid JSON Schema; the input is not checked against it");
                return Vec::new();
            }
        };
        let mut violations = Vec::new();
        let mut leaves = Vec::new();
        let probe = self.probe(
            step,
            step.input.template().source(),
            &mut String::new(),
            agents,
            &mut leaves,
        );
        for error in validator.iter_errors(&probe) {
            let at = error.instance_path().to_string();
            let kind = error.kind();
            use jsonschema::error::ValidationErrorKind as K;
            let message = match leaves.iter().find(|l| l.pointer == at) {
                Some(leaf) => match (&leaf.ty, kind) {
                    (Some(ty), K::Type { .. }) => format!(
                        "`{}` gives {} here, which the schema does not allow: {error}",
                        leaf.source,
                        article(ty)
                    ),
                    _ => continue,
                },
                None if leaves.iter().any(|l| is_below(&l.pointer, &at)) => match kind {
                    K::Required { .. }
                    | K::AdditionalProperties { .. }
                    | K::Type { .. }
                    | K::MinItems { .. }
                    | K::MaxItems { .. }
                    | K::MinProperties { .. }
                    | K::MaxProperties { .. } => error.to_string(),
                    _ => continue,
                },
                None if leaves.iter().any(|l| is_below(&at, &l.pointer)) => continue,
                None => error.to_string(),
            };
            violations.push((at, message));
        }
        violations
    }

    #[cfg(not(feature = "schema-validation"))]
    fn input_violations(
        &self,
        _: &Step,
        _: &Value,
        _: &[AgentDefinition],
    ) -> Vec<(String, String)> {
        Vec::new()
    }

    /// A sub-workflow step's input must match the sub-workflow's input schema as far as it is
    /// known without a registry (the registry-free part of validation).
    pub(super) fn check_sub_workflow_inputs(&self, problems: &mut Vec<WorkflowProblem>) {
        for step in &self.steps {
            let StepKind::SubWorkflow(inner) = &step.kind else {
                continue;
            };
            let Some(schema) = &inner.definition.input_schema else {
                continue;
            };
            for (pointer, message) in self.input_violations(step, schema, &[]) {
                problems.push(WorkflowProblem::SubWorkflowInputViolatesSchema {
                    step: step.id.clone(),
                    pointer,
                    message,
                });
            }
        }
    }

    /// The template with each string holding a placeholder replaced by a value of its known
    /// type (`null` when unknown), recorded in `leaves`.
    #[cfg(feature = "schema-validation")]
    fn probe(
        &self,
        step: &Step,
        value: &Value,
        pointer: &mut String,
        agents: &[AgentDefinition],
        leaves: &mut Vec<Leaf>,
    ) -> Value {
        match value {
            Value::String(s) if s.contains("{{") => {
                let ty = self.leaf_type(step, s, agents);
                let probe = match ty.as_deref() {
                    Some("string") => Value::String(String::new()),
                    Some("number" | "integer") => Value::from(0),
                    Some("boolean") => Value::Bool(false),
                    Some("array") => Value::Array(Vec::new()),
                    Some("object") => Value::Object(Default::default()),
                    _ => Value::Null,
                };
                leaves.push(Leaf {
                    pointer: pointer.clone(),
                    source: s.clone(),
                    ty,
                });
                probe
            }
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| {
                        let len = pointer.len();
                        pointer.push('/');
                        pointer.push_str(&i.to_string());
                        let v = self.probe(step, item, pointer, agents, leaves);
                        pointer.truncate(len);
                        v
                    })
                    .collect(),
            ),
            Value::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, item)| {
                        let len = pointer.len();
                        pointer.push('/');
                        pointer.push_str(&k.replace('~', "~0").replace('/', "~1"));
                        let v = self.probe(step, item, pointer, agents, leaves);
                        pointer.truncate(len);
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// The JSON type a template string renders to, when it is known: a string for text with
    /// placeholders, the schema's type for a placeholder that is just a path to a known field.
    #[cfg(feature = "schema-validation")]
    fn leaf_type(&self, step: &Step, source: &str, agents: &[AgentDefinition]) -> Option<String> {
        let template =
            soorma_expr::Template::parse(&Value::String(source.to_owned()), step.input.roots())
                .ok()?;
        if !is_lone(source) {
            return Some("string".to_owned());
        }
        let path = single_path(source, &template)?;
        self.type_of(&step.input.reference(path)?, agents)
    }
}

fn unknown(step: &Step, name: &str, role: &'static str) -> WorkflowProblem {
    WorkflowProblem::UnknownCapability {
        step: step.id.clone(),
        name: name.to_owned(),
        role,
    }
}

/// A string of the template holding a placeholder.
#[cfg(feature = "schema-validation")]
struct Leaf {
    pointer: String,
    source: String,
    ty: Option<String>,
}

/// Whether JSON Pointer `inner` is strictly inside `outer`.
#[cfg(feature = "schema-validation")]
fn is_below(inner: &str, outer: &str) -> bool {
    inner.len() > outer.len() && inner.starts_with(outer) && inner[outer.len()..].starts_with('/')
}

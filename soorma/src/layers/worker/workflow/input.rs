//! A step's compiled input template, what it reads, and rendering it.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde_json::{Map, Value};
use soorma_expr::{EvalError, ExprErrorKind, Path, Roots, Segment, Template};

use super::problem::WorkflowProblem;

/// The root of the workflow's input in templates (`{{input.topic}}`).
pub(super) const INPUT_ROOT: &str = "input";
/// The root of step outputs in templates (`{{steps.search.results}}`).
pub(super) const STEPS_ROOT: &str = "steps";

/// At most this many different short names (`{{topic}}`, `{{search.hits}}`) in one step's
/// template (each is a root, and each new one parses the template again).
const MAX_SHORT_NAMES: usize = 256;

/// What a template reads: part of the workflow's input, or part of a step's output.
///
/// ```
/// use soorma::workflow::{Reference, Workflow};
/// let wf = Workflow::from_json(r#"{"goal": "g", "steps": [
///   {"id": "a", "operator": "search", "input_mapping": {"q": "{{topic}}"}},
///   {"id": "b", "operator": "sum", "input_mapping": {"r": "{{a.results}}", "n": "{{input.n}}"}, "depends_on": ["a"]}
/// ]}"#)?;
/// let reads: Vec<String> = wf.step("b").unwrap().input().reads().iter().map(ToString::to_string).collect();
/// assert_eq!(reads, ["input.n", "steps.a.results"]); // input_mapping keys are sorted
/// assert_eq!(wf.step("a").unwrap().input().reads()[0].step(), None);
/// assert_eq!(wf.step("b").unwrap().input().reads()[1].step(), Some("a"));
/// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reference {
    step: Option<String>,
    field: Vec<Segment>,
}

impl Reference {
    /// The step whose output is read; `None` for the workflow's input.
    ///
    /// See [`Reference`].
    pub fn step(&self) -> Option<&str> {
        self.step.as_deref()
    }

    /// The fields and indexes read inside the input or the step's output (empty: all of it).
    ///
    /// ```
    /// use soorma::expr::Segment;
    /// let wf = soorma::workflow::Workflow::from_json(r#"{"goal": "g", "steps": [
    ///   {"id": "a", "operator": "op", "input_mapping": {"q": "{{user.name}}"}}]}"#)?;
    /// let read = &wf.step("a").unwrap().input().reads()[0];
    /// assert_eq!(read.field(), [Segment::Key("user".into()), Segment::Key("name".into())]);
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn field(&self) -> &[Segment] {
        &self.field
    }
}

/// The canonical long form: `input.x.y` or `steps.a.field`.
impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&match &self.step {
            None => render_path(INPUT_ROOT, &self.field),
            Some(step) => render_path(&format!("{STEPS_ROOT}.{step}"), &self.field),
        })
    }
}

/// `root.a[0]["b c"]`.
pub(super) fn render_path(root: &str, segments: &[Segment]) -> String {
    let mut out = root.to_owned();
    for s in segments {
        match s {
            Segment::Key(k) if Roots::new([k.as_str()]).is_ok() => {
                let _ = write!(out, ".{k}");
            }
            Segment::Key(k) => {
                let _ = write!(out, "[{}]", Value::String(k.clone()));
            }
            Segment::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
            _ => {}
        }
    }
    out
}

/// How one template root is bound when rendering.
#[derive(Debug, Clone)]
enum Binding {
    /// `input`: the whole workflow input.
    Input,
    /// `steps`: the outputs of these steps, by id.
    Steps(Vec<String>),
    /// A step id: that step's output.
    Step(String),
    /// Any other name: that field of the workflow input.
    InputField(String),
}

/// The completed steps' outputs, by step id, as [`StepInput::render`] reads them.
///
/// ```
/// use std::collections::HashMap;
/// use soorma::workflow::StepOutputs;
/// let mut outputs = HashMap::new();
/// outputs.insert("a".to_owned(), serde_json::json!(1));
/// assert_eq!(outputs.output("a"), Some(&serde_json::json!(1)));
/// ```
pub trait StepOutputs {
    /// The output of step `step`, if it completed.
    fn output(&self, step: &str) -> Option<&Value>;
}

impl StepOutputs for HashMap<String, Value> {
    fn output(&self, step: &str) -> Option<&Value> {
        self.get(step)
    }
}

impl StepOutputs for BTreeMap<String, Value> {
    fn output(&self, step: &str) -> Option<&Value> {
        self.get(step)
    }
}

impl StepOutputs for Map<String, Value> {
    fn output(&self, step: &str) -> Option<&Value> {
        self.get(step)
    }
}

/// A step's compiled `input_mapping`: the template, what it reads, and
/// [`render`](Self::render).
#[derive(Debug, Clone)]
pub struct StepInput {
    template: Template,
    #[cfg_attr(not(feature = "schema-validation"), allow(dead_code))]
    roots: Roots,
    bindings: Vec<(String, Binding)>,
    reads: Vec<Reference>,
}

/// What the workflow tells a step's template compiler.
pub(super) struct Scope<'a> {
    /// Step id → position.
    pub index: &'a HashMap<String, usize>,
    /// The inputs the input schema lists, or `None` when it lists none (any name is an input).
    pub inputs: Option<&'a [String]>,
}

impl StepInput {
    /// Compiles `mapping` for step `step`; template and reference problems go to `problems`.
    pub(super) fn compile(
        step: &str,
        mapping: &Map<String, Value>,
        scope: &Scope<'_>,
        problems: &mut Vec<WorkflowProblem>,
    ) -> Option<Self> {
        let value = Value::Object(mapping.clone());
        let (template, roots) = parse(step, &value, scope, problems)?;
        let mut bindings: Vec<(String, Binding)> = Vec::new();
        let mut reads = Vec::new();
        for path in template.paths() {
            let root = path.root();
            let binding = match root {
                INPUT_ROOT => Binding::Input,
                STEPS_ROOT => match path.segments().first() {
                    Some(Segment::Key(id)) if scope.index.contains_key(id) => {
                        Binding::Steps(vec![id.clone()])
                    }
                    Some(Segment::Key(id)) => {
                        problems.push(WorkflowProblem::UnknownStepReference {
                            step: step.to_owned(),
                            referenced: id.clone(),
                            path: path.to_string(),
                        });
                        continue;
                    }
                    _ => {
                        problems.push(WorkflowProblem::StepsWithoutId {
                            step: step.to_owned(),
                            path: path.to_string(),
                        });
                        continue;
                    }
                },
                id if scope.index.contains_key(id) => Binding::Step(id.to_owned()),
                name => Binding::InputField(name.to_owned()),
            };
            let reference = binding.reference(path);
            bind(&mut bindings, root, binding);
            if !reads.contains(&reference) {
                reads.push(reference);
            }
        }
        Some(Self {
            template,
            roots,
            bindings,
            reads,
        })
    }

    /// What the template reads, in template order, without duplicates.
    ///
    /// See [`Reference`].
    pub fn reads(&self) -> &[Reference] {
        &self.reads
    }

    /// The template (the `input_mapping` as an object).
    ///
    /// ```
    /// let wf = soorma::workflow::Workflow::from_json(r#"{"goal": "g", "steps": [
    ///   {"id": "a", "operator": "op", "input_mapping": {"q": "{{topic}}"}}]}"#)?;
    /// assert_eq!(wf.step("a").unwrap().input().template().source()["q"], "{{topic}}");
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn template(&self) -> &Template {
        &self.template
    }

    /// The template roots this step's placeholders may use (`input`, `steps`, the step ids,
    /// the inputs).
    #[cfg(feature = "schema-validation")]
    pub(super) fn roots(&self) -> &Roots {
        &self.roots
    }

    /// What `path`, a path over this step's roots, reads (`None` for a root the step's
    /// template does not use).
    #[cfg(feature = "schema-validation")]
    pub(super) fn reference(&self, path: &Path) -> Option<Reference> {
        let (_, binding) = self.bindings.iter().find(|(r, _)| r == path.root())?;
        Some(binding.reference(path))
    }

    /// Renders the step's request data from the workflow's `inputs` (an object) and the
    /// `outputs` of completed steps. A read of a missing input or of a step without an output
    /// is an [`EvalError`] of kind [`MissingPath`](soorma_expr::EvalErrorKind::MissingPath)
    /// (unless the placeholder has a `default`).
    ///
    /// ```
    /// use serde_json::json;
    /// use std::collections::HashMap;
    /// let wf = soorma::workflow::Workflow::from_json(r#"{"goal": "g", "steps": [
    ///   {"id": "a", "operator": "search", "input_mapping": {"q": "{{topic}}"}},
    ///   {"id": "b", "operator": "search", "input_mapping": {"q": "{{topic}}"}},
    ///   {"id": "c", "operator": "merge", "depends_on": ["a", "b"], "input_mapping": {
    ///     "sources": ["{{a.hits}}", "{{steps.b.hits}}"],
    ///     "meta": {"title": "{{input.topic}} ({{ len(a.hits) + len(b.hits) }} hits)"}
    ///   }}
    /// ]}"#)?;
    /// let outputs = HashMap::from([
    ///     ("a".to_owned(), json!({"hits": [1, 2]})),
    ///     ("b".to_owned(), json!({"hits": [3]})),
    /// ]);
    /// let data = wf.step("c").unwrap().input().render(&json!({"topic": "rust"}), &outputs)?;
    /// assert_eq!(data, json!({"sources": [[1, 2], [3]], "meta": {"title": "rust (3 hits)"}}));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn render(&self, inputs: &Value, outputs: &dyn StepOutputs) -> Result<Value, EvalError> {
        let mut context = Map::new();
        for (root, binding) in &self.bindings {
            let value = match binding {
                Binding::Input => Some(inputs.clone()),
                Binding::InputField(name) => inputs.get(name).cloned(),
                Binding::Step(id) => outputs.output(id).cloned(),
                Binding::Steps(ids) => Some(Value::Object(
                    ids.iter()
                        .filter_map(|id| outputs.output(id).map(|v| (id.clone(), v.clone())))
                        .collect(),
                )),
            };
            if let Some(value) = value {
                context.insert(root.clone(), value);
            }
        }
        self.template.render(&Value::Object(context))
    }
}

impl Binding {
    /// What `path` (whose root is bound to `self`) reads.
    fn reference(&self, path: &Path) -> Reference {
        let segments = path.segments();
        match self {
            Binding::Input => Reference {
                step: None,
                field: segments.to_vec(),
            },
            Binding::InputField(name) => Reference {
                step: None,
                field: std::iter::once(Segment::Key(name.clone()))
                    .chain(segments.iter().cloned())
                    .collect(),
            },
            Binding::Step(id) => Reference {
                step: Some(id.clone()),
                field: segments.to_vec(),
            },
            Binding::Steps(_) => match segments.split_first() {
                Some((Segment::Key(id), rest)) => Reference {
                    step: Some(id.clone()),
                    field: rest.to_vec(),
                },
                // Rejected when compiling.
                _ => Reference {
                    step: None,
                    field: Vec::new(),
                },
            },
        }
    }
}

fn bind(bindings: &mut Vec<(String, Binding)>, root: &str, binding: Binding) {
    match bindings.iter_mut().find(|(r, _)| r == root) {
        Some((_, Binding::Steps(ids))) => {
            if let Binding::Steps(more) = binding {
                for id in more {
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
            }
        }
        Some(_) => {}
        None => bindings.push((root.to_owned(), binding)),
    }
}

/// Compiles the template. The roots start as `input`, `steps` and the inputs the schema
/// lists; a root the parser does not know is added and parsing retried when it is a step id,
/// or (when the schema lists no inputs) any name, which is then an input. So only the names a
/// template uses become roots, however many steps the workflow has.
fn parse(
    step: &str,
    value: &Value,
    scope: &Scope<'_>,
    problems: &mut Vec<WorkflowProblem>,
) -> Option<(Template, Roots)> {
    let invalid = |pointer: Option<&str>, message: String| WorkflowProblem::InvalidTemplate {
        step: step.to_owned(),
        pointer: pointer.unwrap_or("").to_owned(),
        message,
    };
    let mut names: Vec<String> = vec![INPUT_ROOT.to_owned(), STEPS_ROOT.to_owned()];
    if let Some(inputs) = scope.inputs {
        names.extend(
            inputs
                .iter()
                .filter(|n| Roots::new([n.as_str()]).is_ok())
                .cloned(),
        );
    }
    let listed = names.len();
    loop {
        let roots = match Roots::new(names.iter().map(String::as_str)) {
            Ok(roots) => roots,
            Err(e) => {
                problems.push(invalid(None, e.message));
                return None;
            }
        };
        let e = match Template::parse(value, &roots) {
            Ok(template) => return Some((template, roots)),
            Err(e) => e,
        };
        let unknown = (e.kind == ExprErrorKind::UnknownRoot)
            .then(|| e.input.get(e.span.clone()))
            .flatten()
            .filter(|name| scope.inputs.is_none() || scope.index.contains_key(*name));
        match unknown {
            Some(_) if names.len() - listed >= MAX_SHORT_NAMES => {
                problems.push(invalid(
                    e.pointer.as_deref(),
                    format!(
                        "the template uses more than {MAX_SHORT_NAMES} different short names \
                         (`{{{{x}}}}`); write `{{{{input.x}}}}` and `{{{{steps.<id>.x}}}}`"
                    ),
                ));
                return None;
            }
            Some(name) if !names.iter().any(|n| n == name) => names.push(name.to_owned()),
            _ => {
                problems.push(invalid(e.pointer.as_deref(), e.message));
                return None;
            }
        }
    }
}

/// Whether `source` is exactly one placeholder (so it renders as the value itself, keeping its
/// JSON type), not text with placeholders (which renders as a string).
#[cfg(feature = "schema-validation")]
pub(super) fn is_lone(source: &str) -> bool {
    source.starts_with("{{") && source.ends_with("}}") && source.matches("{{").count() == 1
}

/// The path `source` reads when it is one placeholder holding just a path, written canonically
/// (`{{ steps.a.x }}`): then its value is the value at the path, of the path's type.
#[cfg(feature = "schema-validation")]
pub(super) fn single_path<'t>(source: &str, template: &'t Template) -> Option<&'t Path> {
    if !is_lone(source) {
        return None;
    }
    let inner = source.strip_prefix("{{")?.strip_suffix("}}")?;
    match template.paths() {
        [path] if path.to_string() == inner.trim() => Some(path),
        _ => None,
    }
}

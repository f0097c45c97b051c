//! JSON data templates with `{{ ... }}` placeholders (plan action payloads).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::MAX_TEMPLATE_DEPTH;
use super::ast::{Expr, Path};
use super::error::{EvalError, EvalErrorKind, ExprError, ExprErrorKind};
use super::eval::{Env, Missing, eval};
use super::parser::parse_placeholder;
use super::roots::Roots;

/// A compiled JSON template: any JSON value whose strings may hold `{{ ... }}` placeholders.
///
/// - A string that is exactly one placeholder (`"{{results.search.items}}"`) renders as the
///   value itself, keeping its JSON type (array, object, number, ...).
/// - Placeholders inside other text are interpolated: strings as they are, other values as
///   compact JSON.
/// - A placeholder holds a path or any expression of the [condition grammar](super), and may
///   end with a default: `{{ goal.limit | default: 10 }}`, used when a path it reads is
///   missing or its value is `null`. Without a default, a missing path is an
///   [`EvalErrorKind::MissingPath`] error: templates never silently produce `null`.
/// - Object keys are copied as they are; nested arrays and objects are templated.
///
/// ```
/// use serde_json::json;
/// use soorma_expr::{Roots, Template};
///
/// let t = Template::parse(
///     &json!({
///         "query": "{{goal.topic}}",
///         "sources": "{{results.searching.items}}",
///         "title": "Report on {{ goal.topic }} ({{ len(results.searching.items) }} sources)",
///         "limit": "{{ goal.limit | default: 10 }}",
///     }),
///     &Roots::templates(),
/// )?;
/// let ctx = json!({
///     "goal": {"topic": "rust"},
///     "results": {"searching": {"items": ["a", "b"]}},
/// });
/// assert_eq!(
///     t.render(&ctx)?,
///     json!({
///         "query": "rust",
///         "sources": ["a", "b"],
///         "title": "Report on rust (2 sources)",
///         "limit": 10,
///     })
/// );
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Template {
    source: Value,
    node: Node,
    paths: Vec<Path>,
}

#[derive(Debug, Clone)]
enum Node {
    /// No placeholders inside.
    Static(Value),
    Text(Text),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

/// A string with at least one placeholder.
#[derive(Debug, Clone)]
struct Text {
    text: Arc<str>,
    /// JSON Pointer of the string in the template.
    pointer: Arc<str>,
    parts: Vec<Part>,
}

#[derive(Debug, Clone)]
enum Part {
    Literal(String),
    Hole(Hole),
}

#[derive(Debug, Clone)]
struct Hole {
    expr: Expr,
    default: Option<Value>,
}

impl Template {
    /// Compiles `template`; paths may start only with one of `roots`.
    ///
    /// ```
    /// use serde_json::json;
    /// use soorma_expr::{ExprErrorKind, Roots, Template};
    /// let err = Template::parse(&json!({"q": ["{{ gaol.topic }}"]}), &Roots::templates()).unwrap_err();
    /// assert_eq!(err.kind, ExprErrorKind::UnknownRoot);
    /// assert_eq!(err.pointer.as_deref(), Some("/q/0"));
    /// assert!(err.message.contains("(did you mean `goal`?)"));
    /// ```
    pub fn parse(template: &Value, roots: &Roots) -> Result<Self, ExprError> {
        let mut pointer = String::new();
        let node = compile(template, &mut pointer, 0, roots).map_err(|e| *e)?;
        let mut paths = Vec::new();
        node.collect_paths(&mut paths);
        Ok(Self {
            source: template.clone(),
            node,
            paths,
        })
    }

    /// Renders the template against `context`, an object whose fields are the roots
    /// (`{"goal": .., "results": .., ...}`).
    ///
    /// ```
    /// use serde_json::json;
    /// use soorma_expr::{EvalErrorKind, Roots, Template};
    /// let t = Template::parse(&json!({"q": "{{ goal.topic }}"}), &Roots::templates()).unwrap();
    /// assert_eq!(t.render(&json!({"goal": {"topic": 7}})).unwrap(), json!({"q": 7}));
    /// let err = t.render(&json!({"goal": {}})).unwrap_err();
    /// assert_eq!(err.kind, EvalErrorKind::MissingPath);
    /// assert_eq!(err.path.as_deref(), Some("goal.topic"));
    /// ```
    pub fn render(&self, context: &Value) -> Result<Value, EvalError> {
        self.node.render(context)
    }

    /// The template as given to [`parse`](Self::parse).
    ///
    /// ```
    /// use serde_json::json;
    /// use soorma_expr::{Roots, Template};
    /// let t = Template::parse(&json!(["{{state.step}}"]), &Roots::templates()).unwrap();
    /// assert_eq!(t.source(), &json!(["{{state.step}}"]));
    /// ```
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// The paths the placeholders read, in template order, without duplicates (to check them
    /// against the plan: `results.<state>` should name a state, for instance).
    ///
    /// ```
    /// use serde_json::json;
    /// use soorma_expr::{Roots, Template};
    /// let t = Template::parse(
    ///     &json!({"a": "{{ results.search.items }}", "b": "{{goal.n | default: 1}} {{goal.n}}"}),
    ///     &Roots::templates(),
    /// ).unwrap();
    /// let paths: Vec<String> = t.paths().iter().map(ToString::to_string).collect();
    /// assert_eq!(paths, ["results.search.items", "goal.n"]);
    /// ```
    pub fn paths(&self) -> &[Path] {
        &self.paths
    }
}

/// Appends one JSON Pointer reference token.
fn push_token(pointer: &mut String, token: &str) {
    pointer.push('/');
    pointer.push_str(&token.replace('~', "~0").replace('/', "~1"));
}

/// Errors are boxed while compiling: a small `Result` keeps the recursive frames small.
type Compiled = Result<Node, Box<ExprError>>;

fn compile(value: &Value, pointer: &mut String, depth: usize, roots: &Roots) -> Compiled {
    if depth > MAX_TEMPLATE_DEPTH {
        return Err(too_deep(pointer));
    }
    match value {
        Value::String(s) => compile_text(s, pointer, roots),
        Value::Array(items) => compile_array(value, items, pointer, depth, roots),
        Value::Object(fields) => compile_object(value, fields, pointer, depth, roots),
        other => Ok(Node::Static(other.clone())),
    }
}

#[cold]
#[inline(never)]
fn too_deep(pointer: &str) -> Box<ExprError> {
    Box::new(
        ExprError::new(
            ExprErrorKind::TooDeep,
            "",
            0..0,
            format!("the template nests deeper than {MAX_TEMPLATE_DEPTH} levels"),
        )
        .with_pointer(pointer),
    )
}

fn compile_array(
    value: &Value,
    items: &[Value],
    pointer: &mut String,
    depth: usize,
    roots: &Roots,
) -> Compiled {
    let mut nodes = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let len = pointer.len();
        push_token(pointer, &i.to_string());
        nodes.push(compile(item, pointer, depth + 1, roots)?);
        pointer.truncate(len);
    }
    Ok(if nodes.iter().all(Node::is_static) {
        Node::Static(value.clone())
    } else {
        Node::Array(nodes)
    })
}

fn compile_object(
    value: &Value,
    fields: &Map<String, Value>,
    pointer: &mut String,
    depth: usize,
    roots: &Roots,
) -> Compiled {
    let mut nodes = Vec::with_capacity(fields.len());
    for (key, item) in fields {
        let len = pointer.len();
        push_token(pointer, key);
        nodes.push((key.clone(), compile(item, pointer, depth + 1, roots)?));
        pointer.truncate(len);
    }
    Ok(if nodes.iter().all(|(_, n)| n.is_static()) {
        Node::Static(value.clone())
    } else {
        Node::Object(nodes)
    })
}

fn compile_text(text: &str, pointer: &str, roots: &Roots) -> Compiled {
    let mut parts = Vec::new();
    let mut literal_start = 0;
    while let Some(found) = text[literal_start..].find("{{") {
        let open = literal_start + found;
        if open > literal_start {
            parts.push(Part::Literal(text[literal_start..open].to_owned()));
        }
        let placeholder =
            parse_placeholder(text, open, roots).map_err(|e| Box::new(e.with_pointer(pointer)))?;
        parts.push(Part::Hole(Hole {
            expr: placeholder.expr,
            default: placeholder.default,
        }));
        literal_start = placeholder.end;
    }
    if parts.is_empty() {
        return Ok(Node::Static(Value::String(text.to_owned())));
    }
    if literal_start < text.len() {
        parts.push(Part::Literal(text[literal_start..].to_owned()));
    }
    Ok(Node::Text(Text {
        text: Arc::from(text),
        pointer: Arc::from(pointer),
        parts,
    }))
}

impl Node {
    fn is_static(&self) -> bool {
        matches!(self, Node::Static(_))
    }

    fn collect_paths(&self, out: &mut Vec<Path>) {
        match self {
            Node::Static(_) => {}
            Node::Text(text) => {
                for part in &text.parts {
                    if let Part::Hole(hole) = part {
                        hole.expr.collect_paths(out);
                    }
                }
            }
            Node::Array(nodes) => nodes.iter().for_each(|n| n.collect_paths(out)),
            Node::Object(nodes) => nodes.iter().for_each(|(_, n)| n.collect_paths(out)),
        }
    }

    /// Plain loops rather than iterator adapters: fewer, smaller frames per nesting level.
    fn render(&self, context: &Value) -> Result<Value, EvalError> {
        Ok(match self {
            Node::Static(value) => value.clone(),
            Node::Text(text) => text.render(context)?,
            Node::Array(nodes) => {
                let mut items = Vec::with_capacity(nodes.len());
                for node in nodes {
                    items.push(node.render(context)?);
                }
                Value::Array(items)
            }
            Node::Object(nodes) => {
                let mut fields = Map::new();
                for (key, node) in nodes {
                    fields.insert(key.clone(), node.render(context)?);
                }
                Value::Object(fields)
            }
        })
    }
}

impl Text {
    fn render(&self, context: &Value) -> Result<Value, EvalError> {
        if let [Part::Hole(hole)] = self.parts.as_slice() {
            return self.value(hole, context);
        }
        let mut out = String::with_capacity(self.text.len());
        for part in &self.parts {
            match part {
                Part::Literal(s) => out.push_str(s),
                Part::Hole(hole) => match self.value(hole, context)? {
                    Value::String(s) => out.push_str(&s),
                    other => out.push_str(&other.to_string()),
                },
            }
        }
        Ok(Value::String(out))
    }

    /// The placeholder's value, or its default when a path is missing or the value is null.
    fn value(&self, hole: &Hole, context: &Value) -> Result<Value, EvalError> {
        let env = Env {
            src: &self.text,
            pointer: Some(&self.pointer),
            missing: Missing::Error,
        };
        match (eval(&hole.expr, context, &env), &hole.default) {
            (Ok(v), Some(default)) if v.is_null() => Ok(default.clone()),
            (Ok(v), _) => Ok(v.into_owned()),
            (Err(e), Some(default)) if e.kind == EvalErrorKind::MissingPath => Ok(default.clone()),
            (Err(e), _) => Err(*e),
        }
    }
}

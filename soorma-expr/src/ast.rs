//! The syntax tree, and [`Path`], the one piece of it that is public.

use std::fmt;

use serde_json::Value;

use super::lexer::is_identifier;

/// A byte range in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub(crate) fn new(start: usize, end: usize) -> Self {
        Self { start, end }
    }

    pub(crate) fn to(self, other: Span) -> Span {
        Span::new(self.start, other.end)
    }

    pub(crate) fn range(self) -> std::ops::Range<usize> {
        self.start..self.end
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Expr {
    pub node: Node,
    pub span: Span,
}

/// Left-associative chains (`a && b && c`, `a + b - c`) are kept flat and evaluated in a loop,
/// so the tree is only as deep as the source's nesting, which the parser bounds.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    Lit(Value),
    Array(Vec<Expr>),
    Path(Path),
    Not(Box<Expr>),
    Neg(Box<Expr>),
    /// `first op rest[0] op rest[1] ...`, all with the same operator.
    Logic {
        op: LogicOp,
        operands: Vec<Expr>,
    },
    Compare {
        op: CmpOp,
        op_span: Span,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    In {
        negated: bool,
        op_span: Span,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    Arith {
        first: Box<Expr>,
        rest: Vec<(ArithOp, Span, Expr)>,
    },
    Call {
        func: Func,
        args: Vec<Expr>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogicOp {
    And,
    Or,
}

impl LogicOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            LogicOp::And => "&&",
            LogicOp::Or => "||",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl ArithOp {
    /// `+ -` share a level, as do `* / %`.
    pub(crate) fn level(self) -> u8 {
        match self {
            ArithOp::Add | ArithOp::Sub => 0,
            ArithOp::Mul | ArithOp::Div | ArithOp::Rem => 1,
        }
    }

    pub(crate) fn symbol(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Rem => "%",
        }
    }
}

/// The built-in functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Func {
    Len,
    Exists,
    Lower,
    Upper,
    Contains,
    StartsWith,
    EndsWith,
}

impl Func {
    pub(crate) const ALL: [Func; 7] = [
        Func::Contains,
        Func::EndsWith,
        Func::Exists,
        Func::Len,
        Func::Lower,
        Func::StartsWith,
        Func::Upper,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Func::Len => "len",
            Func::Exists => "exists",
            Func::Lower => "lower",
            Func::Upper => "upper",
            Func::Contains => "contains",
            Func::StartsWith => "starts_with",
            Func::EndsWith => "ends_with",
        }
    }

    pub(crate) fn arity(self) -> usize {
        match self {
            Func::Len | Func::Exists | Func::Lower | Func::Upper => 1,
            Func::Contains | Func::StartsWith | Func::EndsWith => 2,
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Func> {
        Func::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl Expr {
    /// Every path in the expression, in source order, without duplicates.
    pub(crate) fn collect_paths(&self, out: &mut Vec<Path>) {
        match &self.node {
            Node::Lit(_) => {}
            Node::Path(p) => {
                if !out.contains(p) {
                    out.push(p.clone());
                }
            }
            Node::Array(items) | Node::Call { args: items, .. } => {
                items.iter().for_each(|e| e.collect_paths(out));
            }
            Node::Logic { operands, .. } => operands.iter().for_each(|e| e.collect_paths(out)),
            Node::Not(e) | Node::Neg(e) => e.collect_paths(out),
            Node::Compare { lhs, rhs, .. } | Node::In { lhs, rhs, .. } => {
                lhs.collect_paths(out);
                rhs.collect_paths(out);
            }
            Node::Arith { first, rest } => {
                first.collect_paths(out);
                rest.iter().for_each(|(_, _, e)| e.collect_paths(out));
            }
        }
    }
}

/// One step of a [`Path`]: an object field or an array index.
///
/// ```
/// use soorma_expr::{Condition, Roots, Segment};
/// let c = Condition::parse(r#"data.items[0]["unit price"] > 2"#, &Roots::conditions()).unwrap();
/// assert_eq!(
///     c.paths()[0].segments(),
///     [Segment::Key("items".into()), Segment::Index(0), Segment::Key("unit price".into())]
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Segment {
    /// An object field: `.name` or `["any key"]`.
    Key(String),
    /// An array index: `[0]`.
    Index(usize),
}

/// A path into the context: a root and the fields and indexes below it, as in
/// `results.search.items[0]["unit price"]`.
///
/// `Display` writes it canonically: `.name` for identifier keys, `["..."]` for other keys.
///
/// ```
/// use serde_json::json;
/// use soorma_expr::{Roots, Template};
/// let t = Template::parse(&json!({"q": "{{ goal['topic'] }}"}), &Roots::templates()).unwrap();
/// let path = &t.paths()[0];
/// assert_eq!((path.root(), path.to_string()), ("goal", "goal.topic".to_owned()));
/// assert_eq!(path.lookup(&json!({"goal": {"topic": "rust"}})), Some(&json!("rust")));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Path {
    root: String,
    segments: Vec<Segment>,
}

impl Path {
    pub(crate) fn new(root: String, segments: Vec<Segment>) -> Self {
        Self { root, segments }
    }

    /// The root name (the context's top-level field).
    ///
    /// ```
    /// use soorma_expr::{Condition, Roots};
    /// let c = Condition::parse("results.search.count > 0", &Roots::conditions()).unwrap();
    /// assert_eq!(c.paths()[0].root(), "results");
    /// ```
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The fields and indexes after the root.
    ///
    /// ```
    /// use soorma_expr::{Condition, Roots, Segment};
    /// let c = Condition::parse("results.search.count > 0", &Roots::conditions()).unwrap();
    /// assert_eq!(c.paths()[0].segments()[0], Segment::Key("search".into()));
    /// ```
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The value at this path in `context`, if there is one (a present `null` is `Some`).
    ///
    /// ```
    /// use serde_json::json;
    /// use soorma_expr::{Condition, Roots};
    /// let c = Condition::parse("data.items[1] == 'b'", &Roots::conditions()).unwrap();
    /// let path = &c.paths()[0];
    /// assert_eq!(path.lookup(&json!({"data": {"items": ["a", "b"]}})), Some(&json!("b")));
    /// assert_eq!(path.lookup(&json!({"data": {"items": ["a"]}})), None);
    /// ```
    pub fn lookup<'v>(&self, context: &'v Value) -> Option<&'v Value> {
        self.resolve(context).ok()
    }

    /// The value at this path, or how many segments resolved before it went missing (`Err(0)`:
    /// the root itself is missing).
    pub(crate) fn resolve<'v>(&self, context: &'v Value) -> Result<&'v Value, usize> {
        let mut value = context.get(&self.root).ok_or(0_usize)?;
        for (i, segment) in self.segments.iter().enumerate() {
            let next = match segment {
                Segment::Key(k) => value.as_object().and_then(|o| o.get(k)),
                Segment::Index(n) => value.as_array().and_then(|a| a.get(*n)),
            };
            value = next.ok_or(i + 1)?;
        }
        Ok(value)
    }

    /// Why the path is missing from `context` (for error messages).
    pub(crate) fn explain_missing(&self, context: &Value) -> String {
        let Err(resolved) = self.resolve(context) else {
            return format!("`{self}` is present");
        };
        if resolved == 0 {
            return format!("the context has no `{}`", self.root);
        }
        let parent = Path::new(self.root.clone(), self.segments[..resolved - 1].to_vec());
        let value = parent.lookup(context).unwrap_or(&Value::Null);
        match (&self.segments[resolved - 1], value) {
            (Segment::Key(k), Value::Object(_)) => {
                format!(
                    "`{parent}` has no field {}",
                    Segment::Key(k.clone()).quoted()
                )
            }
            (Segment::Index(n), Value::Array(a)) => {
                format!("`{parent}` has no index {n} (it has {} items)", a.len())
            }
            (Segment::Key(_), v) => format!("`{parent}` is {}, not an object", article(v)),
            (Segment::Index(_), v) => format!("`{parent}` is {}, not an array", article(v)),
        }
    }
}

impl Segment {
    fn quoted(&self) -> String {
        match self {
            Segment::Key(k) if is_identifier(k) => format!("`{k}`"),
            Segment::Key(k) => format!("`{}`", escape(k)),
            Segment::Index(n) => format!("`[{n}]`"),
        }
    }
}

/// The JSON type of a value, for error messages.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `null`, `a string`, `an array`, ...
pub(crate) fn article(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Array(_) | Value::Object(_) => format!("an {}", type_name(v)),
        _ => format!("a {}", type_name(v)),
    }
}

/// A key as a double-quoted string literal of the language.
fn escape(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 2);
    out.push('"');
    for c in key.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `root.field[0]["other key"]`.
///
/// ```
/// use soorma_expr::{Condition, Roots};
/// let c = Condition::parse(r#"exists(data['a']["b c"][2])"#, &Roots::conditions()).unwrap();
/// assert_eq!(c.paths()[0].to_string(), r#"data.a["b c"][2]"#);
/// ```
impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.root)?;
        for segment in &self.segments {
            match segment {
                Segment::Key(k) if is_identifier(k) => write!(f, ".{k}")?,
                Segment::Key(k) => write!(f, "[{}]", escape(k))?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

//! Parse errors ([`ExprError`]) and evaluation errors ([`EvalError`]), both located in their
//! source text and rendered with a caret under the offending column.

use std::fmt::Write as _;
use std::ops::Range;
use std::sync::Arc;

/// What kind of mistake an [`ExprError`] reports.
///
/// ```
/// use soorma_expr::{Condition, ExprErrorKind, Roots};
/// let err = Condition::parse("dta.count > 0", &Roots::conditions()).unwrap_err();
/// assert_eq!(err.kind, ExprErrorKind::UnknownRoot);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExprErrorKind {
    /// A token other than the one the grammar allows here (including a missing `)`, an unmatched
    /// `)` and tokens left over after a complete expression).
    UnexpectedToken,
    /// A character that starts no token (`#`, a lone `=` or `&`, ...).
    UnexpectedCharacter,
    /// A string literal without its closing quote.
    UnterminatedString,
    /// A backslash escape other than `\\`, `\"`, `\'`, `\n`, `\r`, `\t`.
    InvalidEscape,
    /// A malformed or out-of-range number literal.
    InvalidNumber,
    /// A path starts with a name that is not one of the allowed roots.
    UnknownRoot,
    /// A call to a function that does not exist.
    UnknownFunction,
    /// A function called with the wrong number of arguments.
    WrongArity,
    /// A function argument of the wrong form (`exists` takes a path).
    InvalidArgument,
    /// Comparison operators (or `in`) chained without parentheses: `a < b < c`.
    ChainedComparison,
    /// A template filter other than `default`.
    UnknownFilter,
    /// A template placeholder `{{` without its closing `}}`.
    UnterminatedPlaceholder,
    /// The expression nests deeper than [`MAX_DEPTH`](super::MAX_DEPTH) (or a template deeper
    /// than [`MAX_TEMPLATE_DEPTH`](super::MAX_TEMPLATE_DEPTH)).
    TooDeep,
    /// The expression is longer than [`MAX_SOURCE_LEN`](super::MAX_SOURCE_LEN) bytes.
    TooLong,
    /// A root name given to [`Roots::new`](super::Roots::new) is not an identifier, or is a
    /// keyword.
    InvalidRoot,
}

/// An expression (or template) that cannot be compiled: where, and what was expected.
///
/// `message` names the position (`at column 17`, or `at line 2, column 3` in multi-line
/// sources); `Display` adds the source line with carets under the offending text.
///
/// ```
/// use soorma_expr::{Condition, ExprErrorKind, Roots};
/// let err = Condition::parse("(data.count > 0", &Roots::conditions()).unwrap_err();
/// assert_eq!(err.kind, ExprErrorKind::UnexpectedToken);
/// assert_eq!(err.column, 16);
/// assert!(err.message.starts_with("expected `)` at column 16, found end of input"));
/// assert!(err.to_string().ends_with("  | (data.count > 0\n  |                ^"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(message, input, span, pointer.as_deref()))]
#[non_exhaustive]
pub struct ExprError {
    /// What kind of mistake this is.
    pub kind: ExprErrorKind,
    /// What was expected and what was found, with the position.
    pub message: String,
    /// The text the error is located in: the condition, or the template string holding the
    /// placeholder.
    pub input: Arc<str>,
    /// The byte range of the offending text in `input` (`span.start` is the byte offset).
    pub span: Range<usize>,
    /// The 1-based line of `span.start`.
    pub line: usize,
    /// The 1-based column (in characters) of `span.start` within its line.
    pub column: usize,
    /// For templates: the JSON Pointer of the string holding the placeholder (`""` for the
    /// template itself).
    pub pointer: Option<Arc<str>>,
}

impl ExprError {
    pub(crate) fn new(
        kind: ExprErrorKind,
        input: &str,
        span: Range<usize>,
        message: String,
    ) -> Self {
        let (line, column) = line_column(input, span.start);
        Self {
            kind,
            message,
            input: Arc::from(input),
            span,
            line,
            column,
            pointer: None,
        }
    }

    pub(crate) fn with_pointer(mut self, pointer: &str) -> Self {
        self.pointer = Some(Arc::from(pointer));
        self
    }
}

/// What kind of failure an [`EvalError`] reports.
///
/// ```
/// use serde_json::json;
/// use soorma_expr::{Condition, EvalErrorKind, Roots};
/// let c = Condition::parse("data.n / 0 > 1", &Roots::conditions()).unwrap();
/// let err = c.eval(&json!({"data": {"n": 4}})).unwrap_err();
/// assert_eq!(err.kind, EvalErrorKind::DivisionByZero);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EvalErrorKind {
    /// An operator or function was applied to a value of the wrong type.
    TypeMismatch,
    /// `/` or `%` by zero.
    DivisionByZero,
    /// Arithmetic produced a number JSON cannot hold (infinite or NaN).
    NumberOutOfRange,
    /// A condition evaluated to something other than a boolean.
    NotBoolean,
    /// A template placeholder referenced a path that is not in the context (and has no
    /// `default`).
    MissingPath,
}

/// A condition or template that failed on a particular context: where, and why.
///
/// Located like [`ExprError`]: `message` names the column and `Display` shows the source line
/// with carets.
///
/// ```
/// use serde_json::json;
/// use soorma_expr::{Condition, EvalErrorKind, Roots};
/// let c = Condition::parse("data.count > 'three'", &Roots::conditions()).unwrap();
/// let err = c.eval(&json!({"data": {"count": 3}})).unwrap_err();
/// assert_eq!(err.kind, EvalErrorKind::TypeMismatch);
/// assert_eq!(err.message, "cannot compare number with string using `>` at column 12");
/// assert_eq!(err.column, 12);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(message, input, span, pointer.as_deref()))]
#[non_exhaustive]
pub struct EvalError {
    /// What kind of failure this is.
    pub kind: EvalErrorKind,
    /// What went wrong, with the position.
    pub message: String,
    /// The text the error is located in: the condition, or the template string holding the
    /// placeholder.
    pub input: Arc<str>,
    /// The byte range of the offending text in `input` (`span.start` is the byte offset).
    pub span: Range<usize>,
    /// The 1-based line of `span.start`.
    pub line: usize,
    /// The 1-based column (in characters) of `span.start` within its line.
    pub column: usize,
    /// For templates: the JSON Pointer of the string holding the placeholder.
    pub pointer: Option<Arc<str>>,
    /// For [`EvalErrorKind::MissingPath`]: the missing path, as written canonically
    /// (`results.search.items`).
    pub path: Option<String>,
}

impl EvalError {
    pub(crate) fn new(
        kind: EvalErrorKind,
        input: &Arc<str>,
        span: Range<usize>,
        message: String,
        pointer: Option<&Arc<str>>,
    ) -> Self {
        let (line, column) = line_column(input, span.start);
        Self {
            kind,
            message,
            input: Arc::clone(input),
            span,
            line,
            column,
            pointer: pointer.cloned(),
            path: None,
        }
    }
}

/// The 1-based line and column (in characters) of byte `offset` in `input`.
pub(crate) fn line_column(input: &str, offset: usize) -> (usize, usize) {
    let offset = floor_boundary(input, offset);
    let before = &input[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, input[line_start..offset].chars().count() + 1)
}

/// `at column C`, or `at line L, column C` when `input` has several lines.
pub(crate) fn position(input: &str, offset: usize) -> String {
    let (line, column) = line_column(input, offset);
    if input.contains('\n') {
        format!("at line {line}, column {column}")
    } else {
        format!("at column {column}")
    }
}

fn floor_boundary(s: &str, mut offset: usize) -> usize {
    offset = offset.min(s.len());
    while !s.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// The message, then the source line of `span.start` with carets under the span.
fn render(message: &str, input: &str, span: &Range<usize>, pointer: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(pointer) = pointer {
        let pointer = if pointer.is_empty() { "/" } else { pointer };
        let _ = write!(out, "in template value `{pointer}`: ");
    }
    out.push_str(message);
    let start = floor_boundary(input, span.start);
    let line_start = input[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = input[start..].find('\n').map_or(input.len(), |i| start + i);
    let end = floor_boundary(input, span.end.clamp(start, line_end));
    let line: String = input[line_start..line_end]
        .chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .collect();
    let indent = input[line_start..start].chars().count();
    let width = input[start..end].chars().count().max(1);
    let _ = write!(
        out,
        "\n  | {}\n  | {}{}",
        line.trim_end(),
        " ".repeat(indent),
        "^".repeat(width)
    );
    out
}

//! Boolean conditions (plan transitions).

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::ast::{Expr, Path, type_name};
use super::error::{EvalError, EvalErrorKind, ExprError, position};
use super::eval::{Env, Missing, eval};
use super::parser::parse_condition;
use super::roots::Roots;

/// A compiled boolean expression, such as a plan transition's `condition`.
///
/// Parse once (when the plan is defined: syntax, roots, functions and arity are checked
/// then), evaluate per event. A missing field evaluates to `null`; the result must be a
/// boolean. See the [module docs](super) for the grammar.
///
/// ```
/// use serde_json::json;
/// use soorma_expr::{Condition, Roots};
///
/// let c = Condition::parse(r#"data.count > 0 && data.status == "ok""#, &Roots::conditions())?;
/// assert!(c.eval(&json!({"data": {"count": 3, "status": "ok"}}))?);
/// assert!(!c.eval(&json!({"data": {"count": 0, "status": "ok"}}))?);
/// // A missing field is null, and `null > 0` is a type error: guard with `exists(data.count)`.
/// assert!(c.eval(&json!({"data": {}})).is_err());
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Condition {
    source: Arc<str>,
    expr: Expr,
    paths: Vec<Path>,
}

impl Condition {
    /// Compiles `source`; paths may start only with one of `roots`.
    ///
    /// ```
    /// use soorma_expr::{Condition, Roots};
    /// let roots = Roots::conditions();
    /// assert!(Condition::parse("exists(data.items) and len(data.items) >= 2", &roots).is_ok());
    /// let err = Condition::parse("dat.items", &roots).unwrap_err();
    /// assert!(err.message.contains("unknown root `dat` at column 1"));
    /// ```
    pub fn parse(source: &str, roots: &Roots) -> Result<Self, ExprError> {
        let expr = parse_condition(source, roots)?;
        let mut paths = Vec::new();
        expr.collect_paths(&mut paths);
        Ok(Self {
            source: Arc::from(source),
            expr,
            paths,
        })
    }

    /// Evaluates the condition against `context`, an object whose fields are the roots
    /// (`{"data": .., "goal": .., ...}`).
    ///
    /// ```
    /// use serde_json::json;
    /// use soorma_expr::{Condition, EvalErrorKind, Roots};
    /// let roots = Roots::conditions();
    /// let c = Condition::parse("data.retries < 3 || data.force", &roots).unwrap();
    /// assert!(c.eval(&json!({"data": {"retries": 1}})).unwrap());
    /// // 5 < 3 is false, so `||` evaluates `data.force`: missing, so null, not a boolean.
    /// let err = c.eval(&json!({"data": {"retries": 5}})).unwrap_err();
    /// assert_eq!(err.kind, EvalErrorKind::TypeMismatch);
    /// ```
    pub fn eval(&self, context: &Value) -> Result<bool, EvalError> {
        let env = Env {
            src: &self.source,
            pointer: None,
            missing: Missing::Null,
        };
        match eval(&self.expr, context, &env).map_err(|e| *e)?.as_ref() {
            Value::Bool(b) => Ok(*b),
            other => Err(EvalError::new(
                EvalErrorKind::NotBoolean,
                &self.source,
                self.expr.span.range(),
                format!(
                    "the condition evaluated to {}, not a boolean {}",
                    type_name(other),
                    position(&self.source, self.expr.span.start)
                ),
                None,
            )),
        }
    }

    /// The source text, as given to [`parse`](Self::parse).
    ///
    /// ```
    /// use soorma_expr::{Condition, Roots};
    /// let c = Condition::parse("state.attempts < 3", &Roots::conditions()).unwrap();
    /// assert_eq!(c.source(), "state.attempts < 3");
    /// ```
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The paths the condition reads, in source order, without duplicates.
    ///
    /// ```
    /// use soorma_expr::{Condition, Roots};
    /// let c = Condition::parse("data.n > 0 && data.n < goal.max", &Roots::conditions()).unwrap();
    /// let paths: Vec<String> = c.paths().iter().map(ToString::to_string).collect();
    /// assert_eq!(paths, ["data.n", "goal.max"]);
    /// ```
    pub fn paths(&self) -> &[Path] {
        &self.paths
    }
}

/// The source text.
///
/// ```
/// use soorma_expr::{Condition, Roots};
/// let c = Condition::parse("event.type == 'done'", &Roots::conditions()).unwrap();
/// assert_eq!(c.to_string(), "event.type == 'done'");
/// ```
impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

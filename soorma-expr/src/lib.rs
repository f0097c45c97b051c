//! A small, safe expression language for plan-transition conditions ([`Condition`]) and
//! JSON data templates ([`Template`]).
//!
//! Expressions read a *context*: a JSON object whose fields are the allowed [`Roots`]
//! (`data`, `event`, `goal`, `results`, `state` for the planner's conditions). Everything is
//! checked when an expression is parsed — syntax, root names, function names and arity — so a
//! plan with a typo fails when it is defined, not when it runs. Evaluation is strictly typed:
//! no truthiness, no implicit conversions, and errors say where and why. Full guide:
//! `docs/expressions.md`.
//!
//! ```
//! use serde_json::json;
//! use soorma_expr::{Condition, Roots, Template};
//!
//! let cond = Condition::parse(r#"data.count > 0 && data.status == "ok""#, &Roots::conditions())?;
//! assert!(cond.eval(&json!({"data": {"count": 2, "status": "ok"}}))?);
//!
//! let tmpl = Template::parse(
//!     &json!({"query": "{{goal.topic}}", "items": "{{results.searching.items}}"}),
//!     &Roots::templates(),
//! )?;
//! let ctx = json!({"goal": {"topic": "rust"}, "results": {"searching": {"items": [1, 2]}}});
//! assert_eq!(tmpl.render(&ctx)?, json!({"query": "rust", "items": [1, 2]}));
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```
//!
//! # Grammar
//!
//! Operators from loosest to tightest binding:
//!
//! | precedence | operators | operands | notes |
//! |---|---|---|---|
//! | 1 | `\|\|`, `or` | booleans | short-circuits; left to right |
//! | 2 | `&&`, `and` | booleans | short-circuits; left to right |
//! | 3 | `!`, `not` (prefix) | a boolean | `!a == b` is `!(a == b)` |
//! | 4 | `==` `!=` `<` `<=` `>` `>=` | any / numbers or strings | not chainable |
//! | 5 | `in`, `not in` | any, array / string / object | not chainable |
//! | 6 | `+` `-` | numbers | left to right |
//! | 7 | `*` `/` `%` | numbers | left to right |
//! | 8 | `-`, `!`, `not` (prefix) | a number / a boolean | `a == !b`, `-data.x` |
//!
//! ```text
//! condition  = or_expr
//! or_expr    = and_expr { ("||" | "or") and_expr }
//! and_expr   = not_expr { ("&&" | "and") not_expr }
//! not_expr   = ("!" | "not") not_expr | cmp_expr
//! cmp_expr   = in_expr [ ("==" | "!=" | "<" | "<=" | ">" | ">=") in_expr ]
//! in_expr    = add_expr [ ["not"] "in" add_expr ]
//! add_expr   = mul_expr { ("+" | "-") mul_expr }
//! mul_expr   = unary { ("*" | "/" | "%") unary }
//! unary      = ("-" | "!" | "not") unary | primary
//! primary    = number | string | "true" | "false" | "null"
//!            | "[" [ or_expr { "," or_expr } [","] ] "]"
//!            | function "(" [ or_expr { "," or_expr } ] ")"
//!            | path
//!            | "(" or_expr ")"
//! path       = root { "." name | "[" index "]" | "[" string "]" }
//! number     = digits [ "." digits ] [ ("e" | "E") ["+" | "-"] digits ]
//! string     = '"' ... '"' | "'" ... "'"      (escapes: \\ \" \' \n \r \t)
//! root, name = [A-Za-z_][A-Za-z0-9_]*          (a root must be one of the allowed roots)
//! index      = digits                          (a non-negative integer)
//! ```
//!
//! Keywords (`true false null and or not in`) cannot be roots but may be field names after a
//! dot (`data.in`). Any key can be written quoted: `data["key with space"]`.
//!
//! # Semantics
//!
//! - A path whose field or index is not there evaluates to `null` in conditions, so
//!   `data.x == null` and `exists(data.x)` work; in templates it is an error unless a
//!   `default` is given.
//! - `==` and `!=` are JSON equality, comparing numbers by value at any depth (`1 == 1.0`,
//!   `[1] == [1.0]`).
//! - `<`, `<=`, `>`, `>=` compare two numbers or two strings (by Unicode code point); anything
//!   else is an [`EvalErrorKind::TypeMismatch`].
//! - `x in array`: an element equal to `x`; `s in string`: a substring; `k in object`: a key.
//! - `&&`, `||`, `!` take booleans only (a non-boolean operand is an error, never "truthy");
//!   `&&` and `||` do not evaluate their right side when the left decides.
//! - Arithmetic takes numbers only. Integer results stay exact while they fit an `i64` or a
//!   `u64` (beyond that they become floating point); `/` gives a fraction when the division is
//!   not exact (`7 / 2 == 3.5`). Dividing by zero (`/`, `%`) is an
//!   [`EvalErrorKind::DivisionByZero`]; a non-finite result an
//!   [`EvalErrorKind::NumberOutOfRange`].
//! - A condition must evaluate to a boolean ([`EvalErrorKind::NotBoolean`]).
//!
//! # Functions
//!
//! | function | result |
//! |---|---|
//! | `len(x)` | characters of a string, items of an array, fields of an object |
//! | `exists(path)` | whether the path is present and not `null` (the argument must be a path) |
//! | `lower(s)`, `upper(s)` | the string in lower / upper case |
//! | `contains(haystack, needle)` | `needle in haystack` |
//! | `starts_with(s, p)`, `ends_with(s, p)` | prefix / suffix test on two strings |
//!
//! Unknown functions and wrong argument counts are parse errors.
//!
//! # Limits
//!
//! An expression is at most [`MAX_SOURCE_LEN`] bytes and nests at most [`MAX_DEPTH`] levels
//! (parentheses, brackets, calls and prefix operators each add one); a template nests at most
//! [`MAX_TEMPLATE_DEPTH`] levels of arrays and objects. Beyond that, parsing fails, so hostile
//! input cannot exhaust the stack.
//!
//! # Errors
//!
//! [`ExprError`] (parsing) and [`EvalError`] (evaluation) carry the source text, the byte span,
//! line and column, and a message saying what was expected and what was found; `Display`
//! shows the source line with carets:
//!
//! ```
//! use soorma_expr::{Condition, Roots};
//! let err = Condition::parse("len(data.items > 2", &Roots::conditions()).unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "expected `,` or `)` at column 19, found end of input\n  \
//!        | len(data.items > 2\n  \
//!        |                   ^"
//! );
//! ```

mod ast;
mod condition;
mod error;
mod eval;
mod lexer;
mod parser;
mod roots;
mod template;

#[cfg(test)]
mod tests;

pub use ast::{Path, Segment};
pub use condition::Condition;
pub use error::{EvalError, EvalErrorKind, ExprError, ExprErrorKind};
pub use roots::Roots;
pub use template::Template;

/// The longest expression (a condition, or one placeholder's contents), in bytes.
///
/// ```
/// use soorma_expr::{Condition, ExprErrorKind, MAX_SOURCE_LEN, Roots};
/// let long = format!("data.x == '{}'", "a".repeat(MAX_SOURCE_LEN));
/// let err = Condition::parse(&long, &Roots::conditions()).unwrap_err();
/// assert_eq!(err.kind, ExprErrorKind::TooLong);
/// ```
pub const MAX_SOURCE_LEN: usize = 4096;

/// The deepest nesting of parentheses, brackets, calls and prefix operators in an expression.
///
/// ```
/// use soorma_expr::{Condition, ExprErrorKind, MAX_DEPTH, Roots};
/// let ok = format!("{}true{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
/// assert!(Condition::parse(&ok, &Roots::conditions()).is_ok());
/// let deep = format!("{}true", "!".repeat(MAX_DEPTH + 1));
/// assert_eq!(Condition::parse(&deep, &Roots::conditions()).unwrap_err().kind, ExprErrorKind::TooDeep);
/// ```
pub const MAX_DEPTH: usize = 64;

/// The deepest nesting of arrays and objects in a template (as `serde_json` parses by
/// default).
///
/// ```
/// use serde_json::{json, Value};
/// use soorma_expr::{ExprErrorKind, MAX_TEMPLATE_DEPTH, Roots, Template};
/// let mut deep = json!("{{goal.x}}");
/// for _ in 0..=MAX_TEMPLATE_DEPTH {
///     deep = Value::Array(vec![deep]);
/// }
/// assert_eq!(Template::parse(&deep, &Roots::templates()).unwrap_err().kind, ExprErrorKind::TooDeep);
/// ```
pub const MAX_TEMPLATE_DEPTH: usize = 128;

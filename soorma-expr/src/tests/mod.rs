//! Unit tests of the expression language.

use serde_json::Value;

use super::{Condition, EvalError, ExprError, Roots};

mod conditions;
mod errors;
mod fuzz;
mod templates;

/// Parses with the planner's condition roots, panicking with the rendered error.
fn cond(src: &str) -> Condition {
    Condition::parse(src, &Roots::conditions()).unwrap_or_else(|e| panic!("{src}: {e}"))
}

/// Parses and evaluates, panicking on any error.
fn check(src: &str, ctx: &Value) -> bool {
    cond(src).eval(ctx).unwrap_or_else(|e| panic!("{src}: {e}"))
}

/// Parses and evaluates against an empty context.
fn truth(src: &str) -> bool {
    check(src, &Value::Null)
}

/// The parse error of `src`.
fn parse_err(src: &str) -> ExprError {
    match Condition::parse(src, &Roots::conditions()) {
        Ok(_) => panic!("`{src}` parsed"),
        Err(e) => e,
    }
}

/// The evaluation error of `src` on `ctx`.
fn eval_err(src: &str, ctx: &Value) -> EvalError {
    match cond(src).eval(ctx) {
        Ok(b) => panic!("`{src}` evaluated to {b}"),
        Err(e) => e,
    }
}

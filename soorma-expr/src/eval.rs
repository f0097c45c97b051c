//! The evaluator: strict types, JSON equality, short-circuit logic.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::sync::Arc;

use serde_json::{Number, Value};

use super::ast::{ArithOp, CmpOp, Expr, Func, LogicOp, Node, Path, Span, type_name};
use super::error::{EvalError, EvalErrorKind, position};

/// Errors are boxed inside the evaluator: a small `Result` keeps the recursive frames small.
pub(crate) type Result<T> = std::result::Result<T, Box<EvalError>>;

/// What a path that is not in the context evaluates to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// `null` (conditions).
    Null,
    /// An [`EvalErrorKind::MissingPath`] error (templates).
    Error,
}

/// Where errors are located, and how missing paths behave.
pub(crate) struct Env<'e> {
    pub src: &'e Arc<str>,
    pub pointer: Option<&'e Arc<str>>,
    pub missing: Missing,
}

impl Env<'_> {
    fn error(&self, kind: EvalErrorKind, span: Span, message: String) -> Box<EvalError> {
        Box::new(EvalError::new(
            kind,
            self.src,
            span.range(),
            message,
            self.pointer,
        ))
    }

    fn at(&self, span: Span) -> String {
        position(self.src, span.start)
    }

    #[cold]
    #[inline(never)]
    fn type_error(&self, span: Span, message: std::fmt::Arguments<'_>) -> Box<EvalError> {
        self.error(
            EvalErrorKind::TypeMismatch,
            span,
            format!("{message} {}", self.at(span)),
        )
    }
}

static NULL: Value = Value::Null;

/// Evaluates `expr` against the context object `ctx`.
///
/// Each node kind has its own function so that the frame on the recursion path stays small
/// (the nesting depth is bounded by the parser; this keeps the stack it needs small too).
pub(crate) fn eval<'a>(expr: &'a Expr, ctx: &'a Value, env: &Env<'_>) -> Result<Cow<'a, Value>> {
    match &expr.node {
        Node::Lit(v) => Ok(Cow::Borrowed(v)),
        Node::Path(path) => match path.resolve(ctx) {
            Ok(v) => Ok(Cow::Borrowed(v)),
            Err(_) if env.missing == Missing::Null => Ok(Cow::Borrowed(&NULL)),
            Err(_) => Err(missing_path(path, expr.span, ctx, env)),
        },
        Node::Array(items) => eval_array(items, ctx, env).map(Cow::Owned),
        Node::Not(operand) => eval_not(operand, ctx, env).map(Cow::Owned),
        Node::Neg(operand) => eval_neg(operand, expr.span, ctx, env).map(Cow::Owned),
        Node::Logic { op, operands } => eval_logic(*op, operands, ctx, env).map(Cow::Owned),
        Node::Compare {
            op,
            op_span,
            lhs,
            rhs,
        } => eval_compare(*op, *op_span, lhs, rhs, ctx, env).map(Cow::Owned),
        Node::In {
            negated,
            op_span,
            lhs,
            rhs,
        } => eval_in(*negated, *op_span, lhs, rhs, ctx, env).map(Cow::Owned),
        Node::Arith { first, rest } => eval_arith(first, rest, ctx, env),
        Node::Call { func, args } => call(*func, args, expr.span, ctx, env).map(Cow::Owned),
    }
}

fn eval_array(items: &[Expr], ctx: &Value, env: &Env<'_>) -> Result<Value> {
    let mut values = Vec::with_capacity(items.len());
    for item in items {
        values.push(eval(item, ctx, env)?.into_owned());
    }
    Ok(Value::Array(values))
}

fn eval_not(operand: &Expr, ctx: &Value, env: &Env<'_>) -> Result<Value> {
    match eval(operand, ctx, env)?.as_ref() {
        Value::Bool(b) => Ok(Value::Bool(!b)),
        other => Err(env.type_error(
            operand.span,
            format_args!("`!` needs a boolean, found {}", type_name(other)),
        )),
    }
}

fn eval_neg(operand: &Expr, span: Span, ctx: &Value, env: &Env<'_>) -> Result<Value> {
    match eval(operand, ctx, env)?.as_ref() {
        Value::Number(n) => to_value(negate(n)).ok_or_else(|| out_of_range(span, env)),
        other => Err(env.type_error(
            operand.span,
            format_args!("unary `-` needs a number, found {}", type_name(other)),
        )),
    }
}

fn eval_logic(op: LogicOp, operands: &[Expr], ctx: &Value, env: &Env<'_>) -> Result<Value> {
    // `||` stops at the first `true`, `&&` at the first `false`.
    let decisive = op == LogicOp::Or;
    for operand in operands {
        match eval(operand, ctx, env)?.as_ref() {
            Value::Bool(b) if *b == decisive => return Ok(Value::Bool(decisive)),
            Value::Bool(_) => {}
            other => {
                return Err(env.type_error(
                    operand.span,
                    format_args!(
                        "`{}` needs boolean operands, found {}",
                        op.symbol(),
                        type_name(other)
                    ),
                ));
            }
        }
    }
    Ok(Value::Bool(!decisive))
}

fn eval_compare(
    op: CmpOp,
    op_span: Span,
    lhs: &Expr,
    rhs: &Expr,
    ctx: &Value,
    env: &Env<'_>,
) -> Result<Value> {
    let (l, r) = (eval(lhs, ctx, env)?, eval(rhs, ctx, env)?);
    let result = match op {
        CmpOp::Eq => json_eq(&l, &r),
        CmpOp::Ne => !json_eq(&l, &r),
        _ => {
            let Some(ordering) = order(&l, &r) else {
                return Err(env.type_error(
                    op_span,
                    format_args!(
                        "cannot compare {} with {} using `{}`",
                        type_name(&l),
                        type_name(&r),
                        op.symbol()
                    ),
                ));
            };
            match op {
                CmpOp::Lt => ordering.is_lt(),
                CmpOp::Le => ordering.is_le(),
                CmpOp::Gt => ordering.is_gt(),
                _ => ordering.is_ge(),
            }
        }
    };
    Ok(Value::Bool(result))
}

fn eval_in(
    negated: bool,
    op_span: Span,
    lhs: &Expr,
    rhs: &Expr,
    ctx: &Value,
    env: &Env<'_>,
) -> Result<Value> {
    let (needle, haystack) = (eval(lhs, ctx, env)?, eval(rhs, ctx, env)?);
    match member(&needle, &haystack) {
        Ok(found) => Ok(Value::Bool(found != negated)),
        Err(problem) => Err(env.type_error(
            op_span,
            format_args!(
                "{}",
                problem.describe("`in`", "the right side", "the left side")
            ),
        )),
    }
}

fn eval_arith<'a>(
    first: &'a Expr,
    rest: &'a [(ArithOp, Span, Expr)],
    ctx: &'a Value,
    env: &Env<'_>,
) -> Result<Cow<'a, Value>> {
    let mut acc = eval(first, ctx, env)?;
    for (op, op_span, operand) in rest {
        let r = eval(operand, ctx, env)?;
        let (Value::Number(a), Value::Number(b)) = (acc.as_ref(), r.as_ref()) else {
            return Err(env.type_error(
                *op_span,
                format_args!(
                    "cannot apply `{}` to {} and {}: arithmetic needs numbers",
                    op.symbol(),
                    type_name(&acc),
                    type_name(&r)
                ),
            ));
        };
        acc = match arith(*op, a, b) {
            Ok(v) => Cow::Owned(v),
            Err(ArithError::DivisionByZero) => return Err(division_by_zero(operand.span, env)),
            Err(ArithError::OutOfRange) => return Err(out_of_range(*op_span, env)),
        };
    }
    Ok(acc)
}

#[cold]
#[inline(never)]
fn division_by_zero(span: Span, env: &Env<'_>) -> Box<EvalError> {
    env.error(
        EvalErrorKind::DivisionByZero,
        span,
        format!("division by zero {}", env.at(span)),
    )
}

#[cold]
#[inline(never)]
fn missing_path(path: &Path, span: Span, ctx: &Value, env: &Env<'_>) -> Box<EvalError> {
    let mut err = env.error(
        EvalErrorKind::MissingPath,
        span,
        format!(
            "`{path}` is missing {}: {}; write `{{{{ {path} | default: ... }}}}` to make it optional",
            env.at(span),
            path.explain_missing(ctx)
        ),
    );
    err.path = Some(path.to_string());
    err
}

#[cold]
#[inline(never)]
fn out_of_range(span: Span, env: &Env<'_>) -> Box<EvalError> {
    env.error(
        EvalErrorKind::NumberOutOfRange,
        span,
        format!(
            "arithmetic overflow {}: the result is not a finite number",
            env.at(span)
        ),
    )
}

fn call(func: Func, args: &[Expr], span: Span, ctx: &Value, env: &Env<'_>) -> Result<Value> {
    if let (Func::Exists, Some(Node::Path(path))) = (func, args.first().map(|a| &a.node)) {
        return Ok(Value::Bool(path.lookup(ctx).is_some_and(|v| !v.is_null())));
    }
    let mut values = Vec::with_capacity(args.len());
    for arg in args {
        values.push(eval(arg, ctx, env)?);
    }
    let name = func.name();
    Ok(match func {
        Func::Len => Value::from(match values[0].as_ref() {
            Value::String(s) => s.chars().count(),
            Value::Array(a) => a.len(),
            Value::Object(o) => o.len(),
            other => {
                return Err(env.type_error(
                    args[0].span,
                    format_args!(
                        "`len` needs a string, array or object, found {}",
                        type_name(other)
                    ),
                ));
            }
        }),
        Func::Lower | Func::Upper => match values[0].as_ref() {
            Value::String(s) if func == Func::Lower => Value::String(s.to_lowercase()),
            Value::String(s) => Value::String(s.to_uppercase()),
            other => {
                return Err(env.type_error(
                    args[0].span,
                    format_args!("`{name}` needs a string, found {}", type_name(other)),
                ));
            }
        },
        Func::Contains => {
            let found = member(&values[1], &values[0]).map_err(|problem| {
                env.type_error(
                    span,
                    format_args!(
                        "{}",
                        problem.describe("`contains`", "the first argument", "the second argument")
                    ),
                )
            })?;
            Value::Bool(found)
        }
        Func::StartsWith | Func::EndsWith => match (values[0].as_ref(), values[1].as_ref()) {
            (Value::String(s), Value::String(p)) if func == Func::StartsWith => {
                Value::Bool(s.starts_with(p.as_str()))
            }
            (Value::String(s), Value::String(p)) => Value::Bool(s.ends_with(p.as_str())),
            (a, b) => {
                return Err(env.type_error(
                    span,
                    format_args!(
                        "`{name}` needs two strings, found {} and {}",
                        type_name(a),
                        type_name(b)
                    ),
                ));
            }
        },
        // The parser gives `exists` a path (handled above); any other argument is present
        // when it is not null.
        Func::Exists => Value::Bool(!values[0].is_null()),
    })
}

/// Why a membership test has no answer.
enum MemberProblem {
    /// The haystack is not an array, string or object.
    Haystack(&'static str),
    /// A string or object haystack with a non-string needle.
    Needle(&'static str, &'static str),
}

impl MemberProblem {
    fn describe(&self, op: &str, haystack_name: &str, needle_name: &str) -> String {
        match self {
            MemberProblem::Haystack(found) => {
                format!("{op}: {haystack_name} must be an array, string or object, found {found}")
            }
            MemberProblem::Needle(haystack, found) => format!(
                "{op}: {needle_name} must be a string when {haystack_name} is {haystack}, \
                 found {found}"
            ),
        }
    }
}

/// `needle in haystack`: an element of an array (JSON equality), a substring of a string, a
/// key of an object.
fn member(needle: &Value, haystack: &Value) -> std::result::Result<bool, MemberProblem> {
    match (haystack, needle) {
        (Value::Array(items), _) => Ok(items.iter().any(|item| json_eq(item, needle))),
        (Value::String(s), Value::String(n)) => Ok(s.contains(n.as_str())),
        (Value::Object(o), Value::String(n)) => Ok(o.contains_key(n)),
        (Value::String(_) | Value::Object(_), _) => Err(MemberProblem::Needle(
            if haystack.is_string() {
                "a string"
            } else {
                "an object"
            },
            type_name(needle),
        )),
        _ => Err(MemberProblem::Haystack(type_name(haystack))),
    }
}

/// JSON equality, with numbers compared by value (`1 == 1.0`) at every depth.
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => cmp_numbers(x, y) == Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// The ordering of two numbers or two strings; `None` for anything else.
fn order(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => Some(cmp_numbers(x, y)),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn as_int(n: &Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

fn cmp_numbers(a: &Number, b: &Number) -> Ordering {
    match (as_int(a), as_int(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => {
            let (x, y) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
    }
}

/// A number for arithmetic: integers stay exact while the result fits JSON's integers (`i64`
/// or `u64`), otherwise the operation is done in `f64`.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn of(n: &Number) -> Num {
        match as_int(n) {
            Some(i) => Num::Int(i),
            None => Num::Float(n.as_f64().unwrap_or(f64::NAN)),
        }
    }

    fn float(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    fn is_zero(self) -> bool {
        match self {
            Num::Int(i) => i == 0,
            Num::Float(f) => f == 0.0,
        }
    }
}

/// The JSON number for `n`; `None` when it is not finite.
fn to_value(n: Num) -> Option<Value> {
    match n {
        Num::Int(i) => Some(match (i64::try_from(i), u64::try_from(i)) {
            (Ok(i), _) => Value::from(i),
            (_, Ok(u)) => Value::from(u),
            _ => return Number::from_f64(i as f64).map(Value::Number),
        }),
        Num::Float(f) => Number::from_f64(f).map(Value::Number),
    }
}

fn negate(n: &Number) -> Num {
    match Num::of(n) {
        Num::Int(i) => Num::Int(-i),
        Num::Float(f) => Num::Float(-f),
    }
}

enum ArithError {
    DivisionByZero,
    OutOfRange,
}

fn arith(op: ArithOp, a: &Number, b: &Number) -> std::result::Result<Value, ArithError> {
    let (a, b) = (Num::of(a), Num::of(b));
    if matches!(op, ArithOp::Div | ArithOp::Rem) && b.is_zero() {
        return Err(ArithError::DivisionByZero);
    }
    let exact = match (a, b) {
        (Num::Int(x), Num::Int(y)) => match op {
            ArithOp::Add => x.checked_add(y),
            ArithOp::Sub => x.checked_sub(y),
            ArithOp::Mul => x.checked_mul(y),
            ArithOp::Div => x
                .checked_rem(y)
                .filter(|r| *r == 0)
                .and_then(|_| x.checked_div(y)),
            ArithOp::Rem => x.checked_rem(y),
        },
        _ => None,
    };
    let result = match exact {
        Some(i) => Num::Int(i),
        None => {
            let (x, y) = (a.float(), b.float());
            Num::Float(match op {
                ArithOp::Add => x + y,
                ArithOp::Sub => x - y,
                ArithOp::Mul => x * y,
                ArithOp::Div => x / y,
                ArithOp::Rem => x % y,
            })
        }
    };
    to_value(result).ok_or(ArithError::OutOfRange)
}

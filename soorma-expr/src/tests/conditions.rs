//! Conditions: literals, operators, precedence, short-circuit, functions, paths, semantics.

use serde_json::{Value, json};

use super::{check, cond, eval_err, truth};
use crate::{Condition, EvalErrorKind, Roots, Segment};

fn ctx() -> Value {
    json!({
        "data": {
            "count": 3,
            "status": "ok",
            "ratio": 0.5,
            "name": "Héllo World",
            "tags": ["a", "b", "c"],
            "items": [{"id": 1, "price": 2.5}, {"id": 2, "price": 10}],
            "key with space": "spaced",
            "in": "keyword field",
            "nothing": null,
            "flag": true,
            "meta": {"x": 1, "y": 2},
            "empty": ""
        },
        "event": {"type": "search.completed", "source": "searcher"},
        "goal": {"topic": "rust", "max": 5},
        "results": {"searching": {"items": ["r1", "r2"]}},
        "state": {"attempts": 1}
    })
}

#[test]
fn issue_example() {
    let c = cond(r#"data.count > 0 && data.status == "ok""#);
    assert!(c.eval(&ctx()).unwrap());
    assert!(
        !c.eval(&json!({"data": {"count": 0, "status": "ok"}}))
            .unwrap()
    );
    assert!(
        !c.eval(&json!({"data": {"count": 1, "status": "bad"}}))
            .unwrap()
    );
}

#[test]
fn literals() {
    assert!(truth("true"));
    assert!(!truth("false"));
    assert!(truth("null == null"));
    assert!(truth("42 == 42"));
    assert!(truth("1.5 == 1.5"));
    assert!(truth("2.5e2 == 250"));
    assert!(truth("1E-1 == 0.1"));
    assert!(truth("-3 < 0"));
    assert!(truth("- 3 == -3"));
    assert!(truth("18446744073709551615 > 9223372036854775807"));
    assert!(truth(r#""abc" == 'abc'"#));
    assert!(truth(r#""a\"b" == 'a"b'"#));
    assert!(truth(r#"'it\'s' == "it's""#));
    assert!(truth(r#"len("a\\b") == 3"#));
    assert!(truth(r#"len("a\nb") == 3 && contains("a\nb", "\n")"#));
    assert!(truth(r#"len("\t\r") == 2"#));
    assert!(truth("'' == \"\""));
    assert!(truth("[1, 'a', null, [true]] == [1, \"a\", null, [true]]"));
    assert!(truth("[] == []"));
    assert!(truth("[1, 2,] == [1, 2]"));
}

#[test]
fn equality_is_json_equality() {
    assert!(truth("1 == 1.0"));
    assert!(truth("[1, [2]] == [1.0, [2.0]]"));
    assert!(truth("1 != '1'"));
    assert!(truth("null != false"));
    assert!(truth("0 != false"));
    assert!(truth("'' != null"));
    assert!(truth("[1, 2] != [2, 1]"));
    let c = ctx();
    assert!(check("data.meta == data.meta", &c));
    assert!(check(
        "data.items[0] != data.items[1] && data.items[1].price == 10.0",
        &c
    ));
    assert!(check("data.nothing == null && data.missing == null", &c));
    assert!(check("data.tags == ['a', 'b', 'c']", &c));
}

#[test]
fn ordering_comparisons() {
    assert!(truth("1 < 2 && 2 <= 2 && 3 > 2 && 3 >= 3"));
    assert!(!truth("2 < 1 || 2 <= 1 || 1 > 2 || 1 >= 2"));
    assert!(truth("1 < 1.5 && 1.5 < 2"));
    assert!(truth("-1 < 18446744073709551615"));
    assert!(truth(
        "'a' < 'b' && 'abc' < 'abd' && 'b' > 'abc' && 'a' <= 'a' && 'b' >= 'a'"
    ));
    assert!(truth("'Z' < 'a'"));
    let c = ctx();
    assert!(check(
        "data.ratio < data.count && state.attempts <= goal.max",
        &c
    ));
}

#[test]
fn ordering_across_types_is_an_error() {
    let c = ctx();
    let err = eval_err("data.status < 3", &c);
    assert_eq!(err.kind, EvalErrorKind::TypeMismatch);
    assert_eq!(
        err.message,
        "cannot compare string with number using `<` at column 13"
    );
    assert_eq!((err.column, err.span.clone()), (13, 12..13));
    let err = eval_err("data.missing >= 0", &c);
    assert_eq!(
        err.message,
        "cannot compare null with number using `>=` at column 14"
    );
    let err = eval_err("[1] > [0]", &c);
    assert_eq!(
        err.message,
        "cannot compare array with array using `>` at column 5"
    );
    let err = eval_err("true <= false", &c);
    assert_eq!(
        err.message,
        "cannot compare boolean with boolean using `<=` at column 6"
    );
}

#[test]
fn membership_with_in() {
    let c = ctx();
    assert!(check("'b' in data.tags", &c));
    assert!(check("'z' not in data.tags", &c));
    assert!(check("2 in [1, 2.0, 3]", &c));
    assert!(check("[1] in [[1], [2]]", &c));
    assert!(check("'World' in data.name", &c));
    assert!(check("'' in data.name", &c));
    assert!(check("'x' in data.meta && !('z' in data.meta)", &c));
    assert!(check(
        "event.type in ['search.completed', 'search.failed']",
        &c
    ));
    assert!(check("not 'd' in data.tags", &c));
    let err = eval_err("1 in data.name", &c);
    assert_eq!(err.kind, EvalErrorKind::TypeMismatch);
    assert_eq!(
        err.message,
        "`in`: the left side must be a string when the right side is a string, found number at column 3"
    );
    let err = eval_err("'a' in data.missing", &c);
    assert_eq!(
        err.message,
        "`in`: the right side must be an array, string or object, found null at column 5"
    );
    let err = eval_err("'a' not in 5", &c);
    assert_eq!(err.column, 5);
}

#[test]
fn arithmetic() {
    assert!(truth("1 + 2 == 3"));
    assert!(truth("5 - 7 == -2"));
    assert!(truth("6 * 7 == 42"));
    assert!(truth("8 / 2 == 4"));
    assert!(truth("7 / 2 == 3.5"));
    assert!(truth("7 % 3 == 1"));
    assert!(truth("-7 % 3 == -1"));
    assert!(truth("7.5 % 2 == 1.5"));
    assert!(truth("0.1 + 0.2 > 0.3"));
    assert!(truth("2.5 * 2 == 5"));
    assert!(truth("--5 == 5"));
    assert!(truth("-(2 + 3) == -5"));
    // Integer overflow falls back to floating point instead of wrapping.
    assert!(truth("9223372036854775807 + 1 > 9223372036854775807"));
    assert!(truth("-9223372036854775807 - 2 < 0"));
    assert!(truth("9223372036854775807 + 1 == 9223372036854775808"));
    assert!(truth("18446744073709551615 - 1 == 18446744073709551614"));
    assert!(truth("-(-9223372036854775807 - 1) == 9223372036854775808"));
    let c = ctx();
    assert!(check("data.count * 2 + state.attempts == 7", &c));
    assert!(check("data.items[0].price * 4 == data.items[1].price", &c));
}

#[test]
fn arithmetic_needs_numbers() {
    let c = ctx();
    let err = eval_err("data.status + 1 == 2", &c);
    assert_eq!(err.kind, EvalErrorKind::TypeMismatch);
    assert_eq!(
        err.message,
        "cannot apply `+` to string and number: arithmetic needs numbers at column 13"
    );
    let err = eval_err("1 * data.missing == 0", &c);
    assert_eq!(err.column, 3);
    assert!(err.message.contains("number and null"), "{}", err.message);
    let err = eval_err("-data.status == 1", &c);
    assert_eq!(
        err.message,
        "unary `-` needs a number, found string at column 2"
    );
    let err = eval_err("'a' + 'b' == 'ab'", &c);
    assert!(err.message.contains("string and string"), "{}", err.message);
}

#[test]
fn division_by_zero() {
    let c = ctx();
    let err = eval_err("data.count / 0 > 1", &c);
    assert_eq!(err.kind, EvalErrorKind::DivisionByZero);
    assert_eq!(err.message, "division by zero at column 14");
    assert_eq!(err.span, 13..14);
    let err = eval_err("data.count % (state.attempts - 1) == 0", &c);
    assert_eq!(err.kind, EvalErrorKind::DivisionByZero);
    assert_eq!(err.column, 14);
    let err = eval_err("1.5 / 0.0 == 1", &c);
    assert_eq!(err.kind, EvalErrorKind::DivisionByZero);
}

#[test]
fn number_out_of_range() {
    let err = eval_err("1e308 * 10 > 0", &Value::Null);
    assert_eq!(err.kind, EvalErrorKind::NumberOutOfRange);
    assert_eq!(err.column, 7);
}

#[test]
fn precedence() {
    assert!(truth("1 + 2 * 3 == 7"));
    assert!(truth("(1 + 2) * 3 == 9"));
    assert!(truth("10 - 4 - 3 == 3")); // left-associative
    assert!(truth("16 / 4 / 2 == 2"));
    assert!(truth("2 * 3 % 4 == 2"));
    assert!(truth("-2 * 3 == -6"));
    assert!(truth("1 + 2 in [3]")); // `+` binds tighter than `in`
    assert!(truth("2 in [2] == true")); // `in` binds tighter than `==`
    assert!(truth("true || false && false")); // `&&` binds tighter than `||`
    assert!(!truth("(true || false) && false"));
    assert!(truth("!false && true"));
    assert!(truth("!true == false")); // `!(true == false)`
    assert!(!truth("!(true == true)"));
    assert!(truth("!1 == 2")); // `!(1 == 2)`: no type error
    assert!(truth("false == !true")); // prefix `!` in an operand
    assert!(truth("not 1 > 2 and 2 > 1"));
    assert!(truth("!!true"));
    assert!(truth("((((true))))"));
    // Parenthesized chains keep their grouping.
    assert!(truth("(1 - 2) - 3 == -4"));
    assert!(truth("1 - (2 - 3) == 2"));
    assert!(truth("2 * (3 + 4) == 14"));
    assert!(truth("24 / (4 / 2) == 12"));
    assert!(truth("(false && true) || true"));
    assert!(!truth("false && (true || true)"));
    assert!(truth("(1 == 1) == (2 == 2)"));
}

#[test]
fn keyword_aliases() {
    assert!(truth("true and true"));
    assert!(!truth("true and false"));
    assert!(truth("false or true"));
    assert!(truth("not false"));
    assert!(truth("not false and not false"));
    assert!(truth("true and (false or true) && !false || false"));
    assert!(truth("1 not in [2]"));
}

#[test]
fn short_circuit() {
    let c = ctx();
    // The right side would fail (division by zero, type error, non-boolean) if evaluated.
    assert!(!check("false && 1 / 0 == 1", &c));
    assert!(check("true || 1 / 0 == 1", &c));
    assert!(!check("data.count > 10 && data.status > 1", &c));
    assert!(check("exists(data.count) || data.count", &c));
    assert!(!check("false and 'not a boolean'", &c));
    assert!(check("false || false || true || 1 / 0", &c));
    // ...but when evaluated, every operand must be a boolean.
    let err = eval_err("true && 1", &c);
    assert_eq!(err.kind, EvalErrorKind::TypeMismatch);
    assert_eq!(
        err.message,
        "`&&` needs boolean operands, found number at column 9"
    );
    let err = eval_err("false || data.status", &c);
    assert_eq!(
        err.message,
        "`||` needs boolean operands, found string at column 10"
    );
    let err = eval_err("data.missing && true", &c);
    assert_eq!(
        err.message,
        "`&&` needs boolean operands, found null at column 1"
    );
    let err = eval_err("!data.count", &c);
    assert_eq!(err.message, "`!` needs a boolean, found number at column 2");
}

#[test]
fn the_result_must_be_a_boolean() {
    let c = ctx();
    assert!(check("data.flag", &c));
    for (src, found) in [
        ("data.count", "number"),
        ("data.missing", "null"),
        ("1 + 1", "number"),
        ("data.tags", "array"),
        ("lower('A')", "string"),
    ] {
        let err = eval_err(src, &c);
        assert_eq!(err.kind, EvalErrorKind::NotBoolean, "{src}");
        assert_eq!(
            err.message,
            format!("the condition evaluated to {found}, not a boolean at column 1")
        );
        assert_eq!(err.span, 0..src.len());
    }
}

#[test]
fn function_len() {
    let c = ctx();
    assert!(check("len(data.name) == 11", &c)); // characters, not bytes
    assert!(check("len(data.tags) == 3", &c));
    assert!(check("len(data.meta) == 2", &c));
    assert!(check("len(data.empty) == 0 && len([]) == 0", &c));
    assert!(check("len(data) > 5", &c));
    let err = eval_err("len(data.count) > 0", &c);
    assert_eq!(err.kind, EvalErrorKind::TypeMismatch);
    assert_eq!(
        err.message,
        "`len` needs a string, array or object, found number at column 5"
    );
    let err = eval_err("len(data.missing) > 0", &c);
    assert!(err.message.contains("found null"));
}

#[test]
fn function_exists() {
    let c = ctx();
    assert!(check("exists(data.count)", &c));
    assert!(check("exists(data.items[1].price)", &c));
    assert!(check("exists(data)", &c));
    assert!(check("exists(data.empty)", &c)); // an empty string is there
    assert!(!check("exists(data.nothing)", &c)); // present but null
    assert!(!check("exists(data.missing)", &c));
    assert!(!check("exists(data.missing.deeper[3])", &c));
    assert!(!check("exists(data.items[5])", &c));
    assert!(!check("exists(data.count.x)", &c));
    assert!(!check("exists(data)", &json!({"goal": {}})));
    assert!(check("!exists(data.x) || data.x > 1", &c));
}

#[test]
fn functions_lower_and_upper() {
    let c = ctx();
    assert!(check("lower(data.name) == 'héllo world'", &c));
    assert!(check("upper(data.name) == 'HÉLLO WORLD'", &c));
    assert!(check(
        "lower(event.source) == upper(event.source) || true",
        &c
    ));
    let err = eval_err("upper(data.count) == 'X'", &c);
    assert_eq!(
        err.message,
        "`upper` needs a string, found number at column 7"
    );
    let err = eval_err("lower(data.missing) == 'x'", &c);
    assert_eq!(
        err.message,
        "`lower` needs a string, found null at column 7"
    );
}

#[test]
fn function_contains() {
    let c = ctx();
    assert!(check("contains(data.name, 'World')", &c));
    assert!(!check("contains(data.name, 'world')", &c));
    assert!(check("contains(data.tags, 'c')", &c));
    assert!(check("contains(data.items, data.items[1])", &c));
    assert!(check("contains([1, 2], 2.0)", &c));
    assert!(check("contains(data.meta, 'y')", &c));
    let err = eval_err("contains(data.count, 1)", &c);
    assert_eq!(err.kind, EvalErrorKind::TypeMismatch);
    assert_eq!(
        err.message,
        "`contains`: the first argument must be an array, string or object, found number at column 1"
    );
    let err = eval_err("contains('abc', 1)", &c);
    assert!(
        err.message.contains("the second argument must be a string"),
        "{}",
        err.message
    );
}

#[test]
fn functions_starts_with_and_ends_with() {
    let c = ctx();
    assert!(check("starts_with(event.type, 'search.')", &c));
    assert!(!check("starts_with(event.type, 'web.')", &c));
    assert!(check("ends_with(event.type, '.completed')", &c));
    assert!(check("starts_with('', '') && ends_with('abc', '')", &c));
    let err = eval_err("starts_with(data.tags, 'a')", &c);
    assert_eq!(
        err.message,
        "`starts_with` needs two strings, found array and string at column 1"
    );
    let err = eval_err("ends_with('a', data.missing)", &c);
    assert!(err.message.contains("found string and null"));
}

#[test]
fn paths_indexes_and_quoted_keys() {
    let c = ctx();
    assert!(check("data.tags[0] == 'a' && data.tags[2] == 'c'", &c));
    assert!(check("data.items[1].id == 2", &c));
    assert!(check("data.items[1]['price'] == 10", &c));
    assert!(check(r#"data["key with space"] == "spaced""#, &c));
    assert!(check(r#"data['meta']["x"] == 1"#, &c));
    assert!(check("data.in == 'keyword field'", &c)); // keywords are fine after a dot
    assert!(check("results.searching.items[1] == 'r2'", &c));
    assert!(check("data . meta . y == 2", &c));
    let parsed = cond(r#"data.items[0]["price"] > 1 && data["key with space"] != null"#);
    let paths: Vec<String> = parsed.paths().iter().map(ToString::to_string).collect();
    assert_eq!(paths, ["data.items[0].price", r#"data["key with space"]"#]);
    assert_eq!(parsed.paths()[0].root(), "data");
    assert_eq!(
        parsed.paths()[0].segments(),
        [
            Segment::Key("items".into()),
            Segment::Index(0),
            Segment::Key("price".into())
        ]
    );
}

#[test]
fn missing_fields_are_null() {
    let c = ctx();
    assert!(check("data.x == null", &c));
    assert!(check("data.x.y.z == null", &c));
    assert!(check("data.tags[10] == null", &c)); // index out of range
    assert!(check("data.meta[0] == null", &c)); // index into an object
    assert!(check("data.tags.first == null", &c)); // key into an array
    assert!(check("data.count.digits == null", &c)); // key into a number
    assert!(check("data.name[0] == null", &c)); // strings are not indexable
    assert!(check("data.nothing == null && exists(data.count)", &c));
    // A root missing from the context, or a context that is not an object.
    assert!(check("goal.topic == null", &json!({"data": {}})));
    assert!(check("data.count == null", &Value::Null));
    assert!(check("data == null", &json!([1, 2])));
}

#[test]
fn custom_roots() {
    let roots = Roots::new(["order", "customer"]).unwrap();
    let c = Condition::parse("order.total > 100 and customer.vip", &roots).unwrap();
    assert!(
        c.eval(&json!({"order": {"total": 150}, "customer": {"vip": true}}))
            .unwrap()
    );
    assert!(Condition::parse("data.x", &roots).is_err());
    // No roots: only literals.
    let none = Roots::new(Vec::<String>::new()).unwrap();
    assert!(
        Condition::parse("1 < 2", &none)
            .unwrap()
            .eval(&json!({}))
            .unwrap()
    );
    let err = Condition::parse("x == 1", &none).unwrap_err();
    assert_eq!(
        err.message,
        "unknown root `x` at column 1; no roots are allowed here"
    );
    assert_eq!(Roots::new(["a", "b", "a"]).unwrap().names().count(), 2);
    assert_eq!(Roots::CONDITION_ROOTS.len(), 5);
    assert_eq!(
        Roots::templates().names().collect::<Vec<_>>(),
        ["goal", "results", "state", "event"]
    );
}

#[test]
fn source_and_display() {
    let src = "  data.count   >  1 ";
    let c = cond(src);
    assert_eq!(c.source(), src);
    assert_eq!(c.to_string(), src);
    assert!(c.eval(&ctx()).unwrap());
}

#[test]
fn conditions_are_reusable_and_thread_safe() {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<Condition>();
    assert_send_sync::<crate::Template>();
    assert_send_sync::<crate::ExprError>();
    assert_send_sync::<crate::EvalError>();
    let c = cond("data.n % 2 == 0");
    let evens = (0..10)
        .filter(|n| c.eval(&json!({"data": {"n": n}})).unwrap())
        .count();
    assert_eq!(evens, 5);
}

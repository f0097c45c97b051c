//! Parse errors: every kind, with its column and message, and their rendering.

use serde_json::json;

use super::{cond, parse_err};
use crate::{
    Condition, ExprErrorKind, MAX_DEPTH, MAX_SOURCE_LEN, MAX_TEMPLATE_DEPTH, Roots, Template,
};

/// Asserts the kind, column and exact message of the parse error of `src`.
fn assert_parse_err(src: &str, kind: ExprErrorKind, column: usize, message: &str) {
    let err = parse_err(src);
    assert_eq!(err.kind, kind, "{src}: {err}");
    assert_eq!(err.column, column, "{src}: {err}");
    assert_eq!(err.message, message, "{src}");
    assert_eq!(&*err.input, src);
    assert_eq!(err.line, 1);
    assert!(err.pointer.is_none());
}

#[test]
fn unknown_root_lists_the_roots() {
    assert_parse_err(
        "dta.count > 0",
        ExprErrorKind::UnknownRoot,
        1,
        "unknown root `dta` at column 1; expected one of: data, event, goal, results, state \
         (did you mean `data`?)",
    );
    assert_parse_err(
        "data.a == gaol.b",
        ExprErrorKind::UnknownRoot,
        11,
        "unknown root `gaol` at column 11; expected one of: data, event, goal, results, state \
         (did you mean `goal`?)",
    );
    assert_parse_err(
        "payload.x == 1",
        ExprErrorKind::UnknownRoot,
        1,
        "unknown root `payload` at column 1; expected one of: data, event, goal, results, state",
    );
    assert_parse_err(
        "len > 2",
        ExprErrorKind::UnknownRoot,
        1,
        "unknown root `len` at column 1; expected one of: data, event, goal, results, state \
         (`len` is a function: call it as `len(...)`)",
    );
    // The template roots do not include `data`.
    let err = Condition::parse("data.x == 1", &Roots::templates()).unwrap_err();
    assert_eq!(
        err.message,
        "unknown root `data` at column 1; expected one of: goal, results, state, event"
    );
    assert_eq!(err.span, 0..4);
}

#[test]
fn unbalanced_parentheses() {
    assert_parse_err(
        "(data.count > 0",
        ExprErrorKind::UnexpectedToken,
        16,
        "expected `)` at column 16, found end of input (to close the `(` at column 1)",
    );
    assert_parse_err(
        "data.count > (1 + (2 * 3)",
        ExprErrorKind::UnexpectedToken,
        26,
        "expected `)` at column 26, found end of input (to close the `(` at column 14)",
    );
    assert_parse_err(
        "(1 2)",
        ExprErrorKind::UnexpectedToken,
        4,
        "expected `)` at column 4, found `2` (to close the `(` at column 1)",
    );
    assert_parse_err(
        "data.count > 0)",
        ExprErrorKind::UnexpectedToken,
        15,
        "unmatched `)` at column 15",
    );
    assert_parse_err(
        "len(data.x",
        ExprErrorKind::UnexpectedToken,
        11,
        "expected `,` or `)` at column 11, found end of input",
    );
    assert_parse_err(
        "[1, 2",
        ExprErrorKind::UnexpectedToken,
        6,
        "expected `,` or `]` at column 6, found end of input",
    );
    assert_parse_err(
        "()",
        ExprErrorKind::UnexpectedToken,
        2,
        "expected an expression at column 2, found `)`",
    );
}

#[test]
fn unterminated_string() {
    assert_parse_err(
        r#"data.s == "abc"#,
        ExprErrorKind::UnterminatedString,
        11,
        "unterminated string starting at column 11: expected a closing `\"`, found end of input",
    );
    assert_parse_err(
        r#"'it\'s"#,
        ExprErrorKind::UnterminatedString,
        1,
        "unterminated string starting at column 1: expected a closing `'`, found end of input",
    );
    assert_eq!(
        parse_err(r#""abc\"#).kind,
        ExprErrorKind::UnterminatedString
    );
}

#[test]
fn invalid_escape() {
    assert_parse_err(
        r"data.s == 'a\x'",
        ExprErrorKind::InvalidEscape,
        13,
        r#"invalid escape `\x` at column 13: expected one of \\ \" \' \n \r \t"#,
    );
    assert_eq!(parse_err(r"'\u0041'").kind, ExprErrorKind::InvalidEscape);
}

#[test]
fn unknown_function() {
    assert_parse_err(
        "foo(1)",
        ExprErrorKind::UnknownFunction,
        1,
        "unknown function `foo` at column 1; the functions are: contains, ends_with, exists, \
         len, lower, starts_with, upper",
    );
    let err = parse_err("data.a && size(data.b) > 1");
    assert_eq!((err.kind, err.column), (ExprErrorKind::UnknownFunction, 11));
    // A root name followed by `(` is a call too.
    assert_eq!(parse_err("data(1)").kind, ExprErrorKind::UnknownFunction);
}

#[test]
fn wrong_arity() {
    assert_parse_err(
        "len(1, 2) > 0",
        ExprErrorKind::WrongArity,
        1,
        "wrong number of arguments at column 1: `len` takes 1, found 2",
    );
    assert_parse_err(
        "data.x && contains('a')",
        ExprErrorKind::WrongArity,
        11,
        "wrong number of arguments at column 11: `contains` takes 2, found 1",
    );
    assert_parse_err(
        "exists()",
        ExprErrorKind::WrongArity,
        1,
        "wrong number of arguments at column 1: `exists` takes 1, found 0",
    );
    for src in [
        "lower()",
        "upper('a', 'b')",
        "starts_with('a')",
        "ends_with('a', 'b', 'c')",
    ] {
        assert_eq!(parse_err(src).kind, ExprErrorKind::WrongArity, "{src}");
    }
    let err = parse_err("len(1, 2)");
    assert_eq!(err.span, 0..9); // the whole call
}

#[test]
fn exists_takes_a_path() {
    assert_parse_err(
        "exists(1)",
        ExprErrorKind::InvalidArgument,
        8,
        "`exists` takes a path (like `data.field`) at column 8",
    );
    assert_eq!(
        parse_err("exists(data.a + 1)").kind,
        ExprErrorKind::InvalidArgument
    );
    assert!(
        cond("exists((data.a))")
            .eval(&json!({"data": {"a": 1}}))
            .unwrap()
    );
}

#[test]
fn trailing_tokens() {
    assert_parse_err(
        "data.a data.b",
        ExprErrorKind::UnexpectedToken,
        8,
        "expected an operator or end of input at column 8, found `data`",
    );
    assert_parse_err(
        "data.count > 0 'ok'",
        ExprErrorKind::UnexpectedToken,
        16,
        "expected an operator or end of input at column 16, found `'ok'`",
    );
    assert_parse_err(
        "true | false",
        ExprErrorKind::UnexpectedToken,
        6,
        "expected an operator or end of input at column 6, found `|`",
    );
    assert_parse_err(
        "1 2",
        ExprErrorKind::UnexpectedToken,
        3,
        "expected an operator or end of input at column 3, found `2`",
    );
}

#[test]
fn missing_operands() {
    assert_parse_err(
        "",
        ExprErrorKind::UnexpectedToken,
        1,
        "expected an expression at column 1, found end of input",
    );
    assert_parse_err(
        "   ",
        ExprErrorKind::UnexpectedToken,
        4,
        "expected an expression at column 4, found end of input",
    );
    assert_parse_err(
        "data.count >",
        ExprErrorKind::UnexpectedToken,
        13,
        "expected an expression at column 13, found end of input",
    );
    assert_parse_err(
        "data.x == and",
        ExprErrorKind::UnexpectedToken,
        11,
        "expected an expression at column 11, found `and`",
    );
    assert_parse_err(
        "1 + * 2",
        ExprErrorKind::UnexpectedToken,
        5,
        "expected an expression at column 5, found `*`",
    );
}

#[test]
fn chained_comparisons() {
    assert_parse_err(
        "1 < 2 < 3",
        ExprErrorKind::ChainedComparison,
        7,
        "comparisons cannot be chained at column 7: write `a < b && b < c`, or use parentheses",
    );
    assert_parse_err(
        "'a' in 'ab' in 'abc'",
        ExprErrorKind::ChainedComparison,
        13,
        "`in` cannot be chained at column 13: use parentheses",
    );
    assert!(cond("(1 < 2) == true").eval(&json!({})).unwrap());
}

#[test]
fn unexpected_characters() {
    assert_parse_err(
        "data.a = 1",
        ExprErrorKind::UnexpectedCharacter,
        8,
        "unexpected character `=` at column 8; use `==` to compare",
    );
    assert_parse_err(
        "data.a & true",
        ExprErrorKind::UnexpectedCharacter,
        8,
        "unexpected character `&` at column 8; use `&&` (or `and`)",
    );
    assert_parse_err(
        "data.a # 1",
        ExprErrorKind::UnexpectedCharacter,
        8,
        "unexpected character `#` at column 8",
    );
    assert_parse_err(
        "{a}",
        ExprErrorKind::UnexpectedCharacter,
        1,
        "unexpected character `{` at column 1",
    );
    let err = parse_err("data.é == 1");
    assert_eq!(
        (err.kind, err.column),
        (ExprErrorKind::UnexpectedCharacter, 6)
    );
}

#[test]
fn invalid_numbers() {
    assert_parse_err(
        "1abc == 1",
        ExprErrorKind::InvalidNumber,
        1,
        "invalid number `1abc` at column 1: a number cannot run into letters",
    );
    assert_parse_err(
        "data.n > 1e",
        ExprErrorKind::InvalidNumber,
        10,
        "invalid number `1e` at column 10: the exponent has no digits",
    );
    assert_parse_err(
        "1e999 > 0",
        ExprErrorKind::InvalidNumber,
        1,
        "invalid number `1e999` at column 1: it is out of range",
    );
}

#[test]
fn bad_paths() {
    assert_parse_err(
        "data.items[-1] == 1",
        ExprErrorKind::UnexpectedToken,
        12,
        "expected an index (a non-negative integer) or a quoted key at column 12, found `-`",
    );
    assert_parse_err(
        "data.items[1.5] == 1",
        ExprErrorKind::UnexpectedToken,
        12,
        "expected an index (a non-negative integer) or a quoted key at column 12, found `1.5`",
    );
    assert_parse_err(
        "data.items.0 == 1",
        ExprErrorKind::UnexpectedToken,
        12,
        "expected a field name after `.` at column 12, found `0` (write `[0]` for an array index)",
    );
    assert_parse_err(
        "data.items[0 == 1",
        ExprErrorKind::UnexpectedToken,
        14,
        "expected `]` at column 14, found `==`",
    );
    assert_parse_err(
        "data.",
        ExprErrorKind::UnexpectedToken,
        6,
        "expected a field name after `.` at column 6, found end of input",
    );
    assert_parse_err(
        "data[data.i] == 1",
        ExprErrorKind::UnexpectedToken,
        6,
        "expected an index (a non-negative integer) or a quoted key at column 6, found `data`",
    );
}

#[test]
fn too_deep() {
    let ok = format!("{}true{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
    assert!(cond(&ok).eval(&json!({})).unwrap());
    let deep = format!(
        "{}true{}",
        "(".repeat(MAX_DEPTH + 1),
        ")".repeat(MAX_DEPTH + 1)
    );
    assert_parse_err(
        &deep,
        ExprErrorKind::TooDeep,
        65,
        "expression nests too deeply at column 65: the limit is 64 levels of parentheses, \
         brackets, calls and prefix operators",
    );
    let bangs = format!("{}true", "!".repeat(MAX_DEPTH + 1));
    assert_eq!(parse_err(&bangs).column, 65);
    let minus = format!("{}1 == 1", "-".repeat(MAX_DEPTH + 1));
    assert_eq!(parse_err(&minus).kind, ExprErrorKind::TooDeep);
    let arrays = format!("{}1", "[".repeat(MAX_DEPTH + 1));
    assert_eq!(
        (parse_err(&arrays).kind, parse_err(&arrays).column),
        (ExprErrorKind::TooDeep, 65)
    );
    let calls = format!(
        "{}data{}",
        "len(".repeat(MAX_DEPTH + 1),
        ")".repeat(MAX_DEPTH + 1)
    );
    assert_eq!(parse_err(&calls).kind, ExprErrorKind::TooDeep);
    assert!(
        cond(&format!("{}true", "!".repeat(MAX_DEPTH)))
            .eval(&json!({}))
            .unwrap()
    );
}

#[test]
fn hostile_nesting_fits_a_small_stack() {
    // The deepest input the limits allow, parsed and evaluated (rendered) on a 512 KiB stack
    // in an unoptimized build: a quarter of the 2 MiB default of tokio workers and test threads.
    let worst = [
        format!(
            "{}true{}",
            "(!".repeat(MAX_DEPTH / 2),
            ")".repeat(MAX_DEPTH / 2)
        ),
        format!(
            "{}1{} == 1",
            "(-".repeat(MAX_DEPTH / 2),
            ")".repeat(MAX_DEPTH / 2)
        ),
        format!(
            "len({}1{}) == 1",
            "[".repeat(MAX_DEPTH - 1),
            "]".repeat(MAX_DEPTH - 1)
        ),
        format!("{}1 == 1{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH)),
        "1 + ".repeat(MAX_SOURCE_LEN / 4 - 2) + "1 > 0",
        "true && ".repeat(MAX_SOURCE_LEN / 8 - 1) + "true",
        format!(
            "{}true{}",
            "(".repeat(MAX_DEPTH + 1),
            ")".repeat(MAX_DEPTH + 1)
        ),
        "(".repeat(MAX_SOURCE_LEN),
        "!".repeat(MAX_SOURCE_LEN),
        "[".repeat(MAX_SOURCE_LEN),
        "len(".repeat(MAX_SOURCE_LEN / 4),
    ];
    let mut template = json!(format!("{{{{ {} }}}}", worst[0]));
    for _ in 0..MAX_TEMPLATE_DEPTH {
        template = json!([template]);
    }
    std::thread::Builder::new()
        .stack_size(512 * 1024)
        .spawn(move || {
            for src in &worst {
                if let Ok(c) = Condition::parse(src, &Roots::conditions()) {
                    assert!(c.eval(&json!({})).unwrap(), "{src}");
                }
            }
            let t = Template::parse(&template, &Roots::templates()).unwrap();
            let mut rendered = t.render(&json!({})).unwrap();
            for _ in 0..MAX_TEMPLATE_DEPTH {
                rendered = rendered[0].take();
            }
            assert_eq!(rendered, json!(true));
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn too_long() {
    let at_limit = format!("data.x == '{}'", "a".repeat(MAX_SOURCE_LEN - 12));
    assert_eq!(at_limit.len(), MAX_SOURCE_LEN);
    assert!(cond(&at_limit).eval(&json!({})).is_ok());
    let long = format!("data.x == '{}'", "a".repeat(5000));
    assert_parse_err(
        &long,
        ExprErrorKind::TooLong,
        4097,
        "expression too long: 5012 bytes, the limit is 4096 (the excess starts at column 4097)",
    );
}

#[test]
fn columns_count_characters_not_bytes() {
    let err = parse_err("'é' == dta");
    assert_eq!((err.column, err.span.clone()), (8, 8..11));
    assert!(err.to_string().ends_with("  | 'é' == dta\n  |        ^^^"));
}

#[test]
fn display_shows_the_line_and_a_caret() {
    let err = parse_err("(data.count > 0");
    assert_eq!(
        err.to_string(),
        "expected `)` at column 16, found end of input (to close the `(` at column 1)\n  \
         | (data.count > 0\n  \
         |                ^"
    );
    let err = parse_err("data.count > 0 &&\n  dta.x == 1");
    assert_eq!((err.line, err.column), (2, 3));
    assert_eq!(
        err.to_string(),
        "unknown root `dta` at line 2, column 3; expected one of: data, event, goal, results, \
         state (did you mean `data`?)\n  \
         |   dta.x == 1\n  \
         |   ^^^"
    );
    let eval = cond("data.count / 0 > 1")
        .eval(&json!({"data": {"count": 1}}))
        .unwrap_err();
    assert_eq!(
        eval.to_string(),
        "division by zero at column 14\n  | data.count / 0 > 1\n  |              ^"
    );
}

#[test]
fn invalid_roots() {
    for bad in ["", "my-root", "1st", "a b", "é"] {
        let err = Roots::new([bad]).unwrap_err();
        assert_eq!(err.kind, ExprErrorKind::InvalidRoot, "{bad:?}");
        assert!(
            err.message.contains("must be an identifier"),
            "{}",
            err.message
        );
    }
    for keyword in ["true", "false", "null", "and", "or", "not", "in"] {
        let err = Roots::new([keyword]).unwrap_err();
        assert_eq!(
            err.message,
            format!("invalid root name `{keyword}`: it is a keyword")
        );
    }
    assert!(Roots::new(["_private", "r2d2"]).is_ok());
}

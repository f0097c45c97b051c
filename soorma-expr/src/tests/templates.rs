//! Templates: raw values, interpolation, nesting, defaults, missing paths, parse errors.

use serde_json::{Value, json};

use crate::{
    EvalError, EvalErrorKind, ExprError, ExprErrorKind, MAX_SOURCE_LEN, MAX_TEMPLATE_DEPTH, Roots,
    Template,
};

fn tmpl(template: Value) -> Template {
    Template::parse(&template, &Roots::templates()).unwrap_or_else(|e| panic!("{e}"))
}

fn render(template: Value) -> Value {
    tmpl(template)
        .render(&ctx())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn render_err(template: Value) -> EvalError {
    match tmpl(template.clone()).render(&ctx()) {
        Ok(v) => panic!("{template} rendered as {v}"),
        Err(e) => e,
    }
}

fn parse_err(template: Value) -> ExprError {
    match Template::parse(&template, &Roots::templates()) {
        Ok(_) => panic!("{template} parsed"),
        Err(e) => e,
    }
}

fn ctx() -> Value {
    json!({
        "goal": {
            "topic": "rust",
            "limit": 3,
            "ratio": 0.25,
            "tags": ["a", "b"],
            "opts": {"deep": true},
            "nothing": null,
            "zero": 0,
            "flag": false
        },
        "results": {"searching": {"items": [{"url": "u1"}, {"url": "u2"}], "count": 2}},
        "state": {"step": "search"},
        "event": {"id": "e1"}
    })
}

#[test]
fn issue_examples() {
    assert_eq!(
        render(json!({"query": "{{goal.topic}}", "sources": "{{results.searching.items}}"})),
        json!({"query": "rust", "sources": [{"url": "u1"}, {"url": "u2"}]})
    );
}

#[test]
fn a_lone_placeholder_keeps_the_value_type() {
    assert_eq!(render(json!("{{goal.limit}}")), json!(3));
    assert_eq!(render(json!("{{ goal.ratio }}")), json!(0.25));
    assert_eq!(render(json!("{{goal.tags}}")), json!(["a", "b"]));
    assert_eq!(render(json!("{{goal.opts}}")), json!({"deep": true}));
    assert_eq!(render(json!("{{goal.flag}}")), json!(false));
    assert_eq!(render(json!("{{goal.nothing}}")), json!(null)); // present, so not missing
    assert_eq!(render(json!("{{   results.searching.count\t}}")), json!(2));
    assert_eq!(render(json!("{{goal}}")), ctx()["goal"]);
    assert_eq!(
        render(json!("{{results.searching.items[1].url}}")),
        json!("u2")
    );
}

#[test]
fn interpolation() {
    assert_eq!(
        render(json!("Topic: {{goal.topic}}!")),
        json!("Topic: rust!")
    );
    assert_eq!(render(json!("limit={{goal.limit}}")), json!("limit=3"));
    assert_eq!(render(json!(" {{goal.limit}}")), json!(" 3")); // not exactly one placeholder
    assert_eq!(
        render(json!("{{goal.topic}}{{goal.limit}}")),
        json!("rust3")
    );
    assert_eq!(
        render(json!("tags={{goal.tags}}")),
        json!(r#"tags=["a","b"]"#)
    );
    assert_eq!(
        render(json!("opts={{goal.opts}}")),
        json!(r#"opts={"deep":true}"#)
    );
    assert_eq!(
        render(json!("{{goal.nothing}}/{{goal.flag}}/{{goal.ratio}}")),
        json!("null/false/0.25")
    );
    assert_eq!(
        render(json!("line 1\n{{ state.step }} on {{event.id}}")),
        json!("line 1\nsearch on e1")
    );
}

#[test]
fn nested_arrays_and_objects() {
    let rendered = render(json!({
        "request": {
            "q": "{{goal.topic}}",
            "filters": [{"tag": "{{goal.tags[0]}}"}, "{{goal.limit}}", 7, null],
            "static": {"a": [1, 2, {"b": "c"}]}
        },
        "n": 1.5,
        "ok": true
    }));
    assert_eq!(
        rendered,
        json!({
            "request": {
                "q": "rust",
                "filters": [{"tag": "a"}, 3, 7, null],
                "static": {"a": [1, 2, {"b": "c"}]}
            },
            "n": 1.5,
            "ok": true
        })
    );
}

#[test]
fn object_keys_are_not_templated() {
    assert_eq!(
        render(json!({"{{goal.topic}}": "{{goal.topic}}"})),
        json!({"{{goal.topic}}": "rust"})
    );
}

#[test]
fn text_without_placeholders_is_unchanged() {
    for v in [
        json!("plain"),
        json!("{single} braces }} and { {"),
        json!("} }{ {"),
        json!(42),
        json!(null),
        json!([true, {"a": "}}"}]),
        json!({}),
        json!(""),
    ] {
        assert_eq!(render(v.clone()), v);
    }
}

#[test]
fn default_filter() {
    assert_eq!(render(json!("{{ goal.max | default: 10 }}")), json!(10));
    assert_eq!(render(json!("{{goal.max|default:10}}")), json!(10));
    assert_eq!(render(json!("{{ goal.max | default: -2.5 }}")), json!(-2.5));
    assert_eq!(
        render(json!("{{ goal.max | default: 'none' }}")),
        json!("none")
    );
    assert_eq!(render(json!("{{ goal.max | default: true }}")), json!(true));
    assert_eq!(render(json!("{{ goal.max | default: null }}")), json!(null));
    assert_eq!(
        render(json!("{{ goal.max | default: [1, 'a', [], -3] }}")),
        json!([1, "a", [], -3])
    );
    // A present value wins, even a falsy one; a present null takes the default.
    assert_eq!(render(json!("{{ goal.limit | default: 10 }}")), json!(3));
    assert_eq!(render(json!("{{ goal.zero | default: 10 }}")), json!(0));
    assert_eq!(
        render(json!("{{ goal.flag | default: true }}")),
        json!(false)
    );
    assert_eq!(
        render(json!("{{ goal.nothing | default: 'x' }}")),
        json!("x")
    );
    // Missing at any depth, inside text, and inside a larger expression.
    assert_eq!(render(json!("{{ goal.a.b[3].c | default: 1 }}")), json!(1));
    assert_eq!(
        render(json!("{{ state.missing.x | default: 1 }}")),
        json!(1)
    );
    assert_eq!(render(json!("n={{ goal.n | default: 5 }}")), json!("n=5"));
    assert_eq!(render(json!("{{ goal.n * 2 | default: 0 }}")), json!(0));
    // Other errors are not swallowed by a default.
    let err = render_err(json!("{{ goal.topic * 2 | default: 0 }}"));
    assert_eq!(err.kind, EvalErrorKind::TypeMismatch);
}

#[test]
fn missing_path_is_an_error_naming_the_path() {
    let err = render_err(json!({"q": "{{goal.title}}"}));
    assert_eq!(err.kind, EvalErrorKind::MissingPath);
    assert_eq!(err.path.as_deref(), Some("goal.title"));
    assert_eq!(err.pointer.as_deref(), Some("/q"));
    assert_eq!((err.column, err.span.clone()), (3, 2..12));
    assert_eq!(
        err.message,
        "`goal.title` is missing at column 3: `goal` has no field `title`; \
         write `{{ goal.title | default: ... }}` to make it optional"
    );
    assert_eq!(
        err.to_string(),
        "in template value `/q`: `goal.title` is missing at column 3: `goal` has no field \
         `title`; write `{{ goal.title | default: ... }}` to make it optional\n  \
         | {{goal.title}}\n  \
         |   ^^^^^^^^^^"
    );
    let err = tmpl(json!(["x", "{{results.planning.items}}"]))
        .render(&json!({"goal": {}}))
        .unwrap_err();
    assert_eq!(err.pointer.as_deref(), Some("/1"));
    assert!(
        err.message.contains("the context has no `results`"),
        "{}",
        err.message
    );
    let err = render_err(json!("{{results.searching.items[5].url}}"));
    assert!(
        err.message
            .contains("`results.searching.items` has no index 5 (it has 2 items)"),
        "{}",
        err.message
    );
    let err = render_err(json!("{{goal.topic.name}}"));
    assert!(
        err.message
            .contains("`goal.topic` is a string, not an object"),
        "{}",
        err.message
    );
    let err = render_err(json!("{{goal.nothing[0]}}"));
    assert!(
        err.message.contains("`goal.nothing` is null, not an array"),
        "{}",
        err.message
    );
    let err = render_err(json!({"deep": {"a/b~c": "see {{ goal['odd key'] }}"}}));
    assert_eq!(err.pointer.as_deref(), Some("/deep/a~1b~0c"));
    assert_eq!(err.path.as_deref(), Some(r#"goal["odd key"]"#));
    assert_eq!(err.column, 8);
}

#[test]
fn placeholders_hold_expressions() {
    assert_eq!(
        render(json!("{{ len(results.searching.items) }}")),
        json!(2)
    );
    assert_eq!(render(json!("{{ goal.limit * 2 + 1 }}")), json!(7));
    assert_eq!(
        render(json!("{{ goal.limit > 2 && goal.topic == 'rust' }}")),
        json!(true)
    );
    assert_eq!(render(json!("{{ upper(goal.topic) }}")), json!("RUST"));
    assert_eq!(render(json!("{{ exists(goal.missing) }}")), json!(false));
    assert_eq!(
        render(json!("{{ [goal.limit, state.step] }}")),
        json!([3, "search"])
    );
    assert_eq!(render(json!("{{ '{{' }} literal")), json!("{{ literal"));
    assert_eq!(
        tmpl(json!("{{ goal['a}}b'] }}"))
            .render(&json!({"goal": {"a}}b": 1}}))
            .unwrap(),
        json!(1)
    );
    let err = render_err(json!({"x": "{{ goal.topic + 1 }}"}));
    assert_eq!(err.kind, EvalErrorKind::TypeMismatch);
    assert_eq!(err.pointer.as_deref(), Some("/x"));
    assert_eq!(err.column, 15);
}

#[test]
fn unknown_root_is_a_parse_error() {
    let err = parse_err(json!({"a": {"b": ["x", "hello {{ data.x }}"]}}));
    assert_eq!(err.kind, ExprErrorKind::UnknownRoot);
    assert_eq!(err.pointer.as_deref(), Some("/a/b/1"));
    assert_eq!((err.column, err.span.clone()), (10, 9..13));
    assert_eq!(&*err.input, "hello {{ data.x }}");
    assert_eq!(
        err.message,
        "unknown root `data` at column 10; expected one of: goal, results, state, event"
    );
    assert!(
        err.to_string()
            .starts_with("in template value `/a/b/1`: unknown root `data`")
    );
    let err = parse_err(json!("{{gaol.topic}}"));
    assert_eq!(err.pointer.as_deref(), Some(""));
    assert!(err.message.ends_with("(did you mean `goal`?)"));
    assert!(err.to_string().starts_with("in template value `/`: "));
}

#[test]
fn placeholder_parse_errors() {
    let cases = [
        (
            json!("{{ goal.topic"),
            ExprErrorKind::UnterminatedPlaceholder,
            1,
            "unterminated placeholder: expected `}}` to close the `{{` at column 1, found end of input",
        ),
        (
            json!("a {{}} b"),
            ExprErrorKind::UnexpectedToken,
            5,
            "expected an expression at column 5, found `}}`",
        ),
        (
            json!("{{ goal.a goal.b }}"),
            ExprErrorKind::UnexpectedToken,
            11,
            "expected an operator, `| default: ...` or `}}` to close the placeholder at column 11, found `goal`",
        ),
        (
            json!("{{ goal.x | upper }}"),
            ExprErrorKind::UnknownFilter,
            13,
            "unknown filter `upper` at column 13: the only filter is `default` (as in `| default: 10`)",
        ),
        (
            json!("{{ goal.x | default 3 }}"),
            ExprErrorKind::UnexpectedToken,
            21,
            "expected `:` after `default` at column 21, found `3`",
        ),
        (
            json!("{{ goal.x | default: goal.y }}"),
            ExprErrorKind::UnexpectedToken,
            22,
            "expected a literal (number, string, true, false, null or array) at column 22, found `goal`",
        ),
        (
            json!("{{ goal.x | default: 1 2 }}"),
            ExprErrorKind::UnexpectedToken,
            24,
            "expected an operator, `| default: ...` or `}}` to close the placeholder at column 24, found `2`",
        ),
        (
            json!("{{ goal.x | }}"),
            ExprErrorKind::UnexpectedToken,
            13,
            "expected a filter name (`default`) at column 13, found `}}`",
        ),
        (
            json!("{{ goal.x }"),
            ExprErrorKind::UnexpectedCharacter,
            11,
            "unexpected character `}` at column 11",
        ),
        (
            json!("ok {{ 'abc }}"),
            ExprErrorKind::UnterminatedString,
            7,
            "unterminated string starting at column 7: expected a closing `'`, found end of input",
        ),
        (
            json!("{{ len(goal.x, 1) }}"),
            ExprErrorKind::WrongArity,
            4,
            "wrong number of arguments at column 4: `len` takes 1, found 2",
        ),
    ];
    for (template, kind, column, message) in cases {
        let err = parse_err(template.clone());
        assert_eq!(err.kind, kind, "{template}: {err}");
        assert_eq!(err.column, column, "{template}: {err}");
        assert_eq!(err.message, message, "{template}");
    }
}

#[test]
fn paths_lists_every_referenced_path() {
    let t = tmpl(json!({
        "a": "{{ results.searching.items }}",
        "b": ["{{goal.topic}} and {{ goal.n | default: 1 }}", "{{goal.topic}}"],
        "c": "{{ len(state['step name']) > 0 && exists(event.id) }}",
        "d": "no placeholders"
    }));
    let paths: Vec<String> = t.paths().iter().map(ToString::to_string).collect();
    assert_eq!(
        paths,
        [
            "results.searching.items",
            "goal.topic",
            "goal.n",
            r#"state["step name"]"#,
            "event.id"
        ]
    );
    assert!(tmpl(json!({"x": 1})).paths().is_empty());
}

#[test]
fn source_is_kept() {
    let source = json!({"q": "{{goal.topic}}", "n": 1});
    assert_eq!(tmpl(source.clone()).source(), &source);
}

#[test]
fn custom_roots() {
    let roots = Roots::new(["input"]).unwrap();
    let t = Template::parse(&json!({"echo": "{{input.text}}"}), &roots).unwrap();
    assert_eq!(
        t.render(&json!({"input": {"text": "hi"}})).unwrap(),
        json!({"echo": "hi"})
    );
    assert!(Template::parse(&json!("{{goal.x}}"), &roots).is_err());
}

#[test]
fn limits() {
    let mut deep = json!("{{goal.topic}}");
    for _ in 0..MAX_TEMPLATE_DEPTH {
        deep = json!([deep]);
    }
    assert!(Template::parse(&deep, &Roots::templates()).is_ok());
    let too_deep = json!({"x": deep});
    let err = parse_err(too_deep);
    assert_eq!(err.kind, ExprErrorKind::TooDeep);
    assert!(err.pointer.as_deref().unwrap().starts_with("/x/0/0/"));

    let long = json!(format!("{{{{ '{}' }}}}", "a".repeat(MAX_SOURCE_LEN + 10)));
    let err = parse_err(long);
    assert_eq!(err.kind, ExprErrorKind::TooLong);
    // Long text around placeholders is fine: the limit is per placeholder.
    let text = format!("{} {{{{goal.topic}}}}", "x".repeat(3 * MAX_SOURCE_LEN));
    let rendered = render(json!(text));
    assert!(rendered.as_str().unwrap().ends_with("x rust"));
}

//! Property-style tests: generated input never panics the parser or the evaluator.

use serde_json::{Value, json};

use crate::{Condition, ExprError, Roots, Template};

/// A tiny deterministic generator (Knuth's MMIX LCG); no dependencies, reproducible runs.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

fn context() -> Value {
    json!({
        "data": {"count": 3, "status": "ok", "tags": ["a", "b"], "n": null, "m": {"k": 1.5}},
        "event": {"type": "x.done"},
        "goal": {"topic": "rust", "limit": 0},
        "results": {"s": {"items": [1, 2, 3]}},
        "state": {}
    })
}

/// Checks what an error must always satisfy: a span inside its input, a usable rendering.
fn check_error(err: &ExprError) {
    assert!(err.span.start <= err.input.len(), "{err:?}");
    assert!(err.column >= 1 && err.line >= 1);
    assert!(err.to_string().contains('^'));
}

/// Parses (and, when that succeeds, evaluates and renders) `src` every way it can be used.
fn exercise(src: &str, ctx: &Value) -> bool {
    let parsed = match Condition::parse(src, &Roots::conditions()) {
        Ok(c) => {
            if let Err(e) = c.eval(ctx) {
                assert!(e.span.start <= e.input.len());
                assert!(!e.to_string().is_empty());
            }
            true
        }
        Err(e) => {
            check_error(&e);
            false
        }
    };
    for template in [json!(src), json!({"k": [format!("{{{{{src}}}}}")]})] {
        match Template::parse(&template, &Roots::templates()) {
            Ok(t) => {
                let _ = t.render(ctx);
                let _ = t.paths();
            }
            Err(e) => check_error(&e),
        }
    }
    parsed
}

#[test]
fn random_characters_never_panic() {
    const ALPHABET: &[char] = &[
        'a', 'd', 't', 'x', '_', '0', '1', '9', '.', ',', ' ', '\t', '\n', '(', ')', '[', ']', '{',
        '}', '"', '\'', '\\', '!', '=', '<', '>', '&', '|', '+', '-', '*', '/', '%', ':', 'e', 'E',
        '#', 'é', '€', '😀', '\0',
    ];
    let ctx = context();
    let mut rng = Lcg(0x5EED);
    for _ in 0..600 {
        let len = rng.below(40);
        let src: String = (0..len)
            .map(|_| ALPHABET[rng.below(ALPHABET.len())])
            .collect();
        exercise(&src, &ctx);
    }
}

#[test]
fn random_token_soup_never_panics() {
    const TOKENS: &[&str] = &[
        "data",
        "data.count",
        "data.tags[0]",
        "data['m']",
        "goal.topic",
        "results.s.items",
        "event",
        "state.x",
        "dta",
        "1",
        "0",
        "2.5",
        "-",
        "1e3",
        "'ok'",
        "\"a\\\"b\"",
        "true",
        "false",
        "null",
        "&&",
        "||",
        "and",
        "or",
        "not",
        "!",
        "in",
        "==",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        "+",
        "*",
        "/",
        "%",
        "(",
        ")",
        "[",
        "]",
        ",",
        ".",
        "len(",
        "exists(",
        "lower(",
        "upper(",
        "contains(",
        "starts_with(",
        "ends_with(",
        "nope(",
        "{{",
        "}}",
        "|",
        "default",
        ":",
    ];
    let ctx = context();
    let mut rng = Lcg(42);
    let mut parsed = 0;
    for _ in 0..800 {
        let len = 1 + rng.below(14);
        let src: Vec<&str> = (0..len).map(|_| rng.pick(TOKENS)).collect();
        if exercise(&src.join(" "), &ctx) {
            parsed += 1;
        }
    }
    // Some of the soup is valid, so evaluation is exercised too.
    assert!(parsed > 10, "only {parsed} generated conditions parsed");
}

#[test]
fn generated_valid_conditions_evaluate_without_panicking() {
    /// A random well-formed expression of bounded depth.
    fn gen_expr(rng: &mut Lcg, depth: usize) -> String {
        const LEAVES: &[&str] = &[
            "data.count",
            "data.status",
            "data.tags",
            "data.n",
            "data.m.k",
            "data.missing",
            "goal.limit",
            "results.s.items[1]",
            "1",
            "0",
            "-2.5",
            "'ok'",
            "true",
            "false",
            "null",
            "[1, 'a']",
        ];
        const BINARY: &[&str] = &[
            "&&", "||", "==", "!=", "<", "<=", ">", ">=", "in", "+", "-", "*", "/", "%", "and",
            "or",
        ];
        const UNARY: &[&str] = &["!", "-", "not ", "len", "lower", "upper", "exists"];
        if depth == 0 || rng.below(4) == 0 {
            return rng.pick(LEAVES).to_owned();
        }
        match rng.below(3) {
            0 => format!(
                "({} {} {})",
                gen_expr(rng, depth - 1),
                rng.pick(BINARY),
                gen_expr(rng, depth - 1)
            ),
            1 => match rng.pick(UNARY) {
                "exists" => format!("exists({})", rng.pick(&["data.count", "data.x.y"])),
                f @ ("len" | "lower" | "upper") => format!("{f}({})", gen_expr(rng, depth - 1)),
                op => format!("{op}{}", gen_expr(rng, depth - 1)),
            },
            _ => format!(
                "{}({}, {})",
                rng.pick(&["contains", "starts_with", "ends_with"]),
                gen_expr(rng, depth - 1),
                gen_expr(rng, depth - 1)
            ),
        }
    }
    let ctx = context();
    let mut rng = Lcg(7);
    let (mut ok, mut err) = (0, 0);
    for _ in 0..500 {
        let src = gen_expr(&mut rng, 5);
        let c = Condition::parse(&src, &Roots::conditions())
            .unwrap_or_else(|e| panic!("generated `{src}` must parse: {e}"));
        match c.eval(&ctx) {
            Ok(_) => ok += 1,
            Err(e) => {
                assert_eq!(&*e.input, src);
                err += 1;
            }
        }
    }
    assert!(ok > 0 && err > 0, "ok {ok}, err {err}");
}

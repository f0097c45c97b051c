use std::collections::HashMap;

use serde_json::{Value, json};
use soorma_common::{
    AgentCapability, AgentDefinition, AgentKind, EventDefinition, HumanInput, Topic,
    WorkflowDefinition, WorkflowStep,
};

use super::*;

/// The example workflow of the seed specification (§7), byte for byte (as
/// `docs/workflows/compare_pricing.yaml`, which the CLI's tests check; written out here because
/// the published crate holds no file outside it).
#[cfg(feature = "yaml")]
const SEED_YAML: &str = r#"goal: "Compare our pricing to competitors"
steps:
  - id: "step_1"
    name: "Rewrite Query"
    operator: "query_rewriter"
    input_mapping:
      query: "{{user_query}}"
    depends_on: []
    
  - id: "step_2"
    name: "Search Internal Docs"
    operator: "rag_retriever"
    input_mapping:
      query: "{{step_1.internal_query}}"
    depends_on: ["step_1"]
    
  - id: "step_3"
    name: "Search Web"
    operator: "web_searcher"
    input_mapping:
      query: "{{step_1.external_query}}"
    depends_on: ["step_1"]  # Can run PARALLEL with step_2
    
  - id: "step_4"
    name: "Synthesize"
    operator: "synthesizer"
    input_mapping:
      sources:
        - "{{step_2.results}}"
        - "{{step_3.results}}"
    depends_on: ["step_2", "step_3"]  # Waits for both
"#;

fn problems(def: WorkflowDefinition) -> Vec<WorkflowProblem> {
    match Workflow::new(def) {
        Ok(_) => panic!("expected an invalid workflow"),
        Err(e) => e.into_problems(),
    }
}

fn one(def: WorkflowDefinition) -> WorkflowProblem {
    let mut all = problems(def);
    assert_eq!(all.len(), 1, "{all:#?}");
    all.remove(0)
}

fn wf(steps: impl IntoIterator<Item = WorkflowStep>) -> WorkflowDefinition {
    steps
        .into_iter()
        .fold(WorkflowDefinition::new("g"), WorkflowDefinition::with_step)
}

fn op(id: &str) -> WorkflowStep {
    WorkflowStep::new(id, "search")
}

#[cfg(feature = "yaml")]
#[test]
fn the_seed_example_loads_unchanged() {
    let wf = Workflow::from_yaml(SEED_YAML).unwrap();
    assert_eq!(wf.definition().goal, "Compare our pricing to competitors");
    let ids =
        |it: &mut dyn Iterator<Item = &Step>| it.map(|s| s.id().to_owned()).collect::<Vec<_>>();
    assert_eq!(
        ids(&mut wf.order()),
        ["step_1", "step_2", "step_3", "step_4"]
    );
    assert_eq!(ids(&mut wf.roots()), ["step_1"]);
    assert_eq!(
        wf.step("step_1").unwrap().dependents(),
        ["step_2", "step_3"]
    );
    assert_eq!(
        wf.step("step_4").unwrap().dependencies(),
        ["step_2", "step_3"]
    );
    let reads = |id: &str| -> Vec<String> {
        let step = wf.step(id).unwrap();
        step.input()
            .reads()
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert_eq!(reads("step_1"), ["input.user_query"]);
    assert_eq!(reads("step_2"), ["steps.step_1.internal_query"]);
    assert_eq!(
        reads("step_4"),
        ["steps.step_2.results", "steps.step_3.results"]
    );
    let outputs = HashMap::from([
        ("step_2".to_owned(), json!({"results": ["ours"]})),
        ("step_3".to_owned(), json!({"results": [{"url": "x"}]})),
    ]);
    let data = wf
        .step("step_4")
        .unwrap()
        .input()
        .render(&json!({}), &outputs);
    assert_eq!(
        data.unwrap(),
        json!({"sources": [["ours"], [{"url": "x"}]]})
    );
    let first = wf.step("step_1").unwrap().input();
    assert_eq!(
        first
            .render(&json!({"user_query": "prices"}), &HashMap::new())
            .unwrap(),
        json!({"query": "prices"})
    );
    let missing = first.render(&json!({}), &HashMap::new()).unwrap_err();
    assert_eq!(missing.kind, soorma_expr::EvalErrorKind::MissingPath);
}

#[cfg(feature = "yaml")]
#[test]
fn json_and_yaml_round_trip() {
    let def = wf([
        op("a")
            .with_input("q", json!({"list": ["{{topic}}", 3], "x": "{{input.y}}"}))
            .with_timeout(std::time::Duration::from_millis(1500))
            .with_retries(2)
            .with_fallback("search.backup")
            .on_failure(FailurePolicy::Continue),
        WorkflowStep::human("b", HumanInput::new("ok?")).depends_on("a"),
        WorkflowStep::sub_workflow("c", wf([op("x")])).depends_on("b"),
    ])
    .on_failure(FailurePolicy::SkipDescendants);
    let json = serde_json::to_string(&def).unwrap();
    assert_eq!(Workflow::from_json(&json).unwrap().definition(), &def);
    let yaml = serde_norway::to_string(&def).unwrap();
    assert_eq!(Workflow::from_yaml(&yaml).unwrap().definition(), &def);
    let wf = Workflow::from_json(&json).unwrap();
    assert_eq!(
        wf.step("a").unwrap().timeout(),
        Some(std::time::Duration::from_millis(1500))
    );
    assert_eq!(
        wf.step("b").unwrap().on_failure(),
        FailurePolicy::SkipDescendants
    );
}

#[cfg(feature = "yaml")]
#[test]
fn yaml_errors_name_the_path_and_line() {
    let err = Workflow::from_yaml("goal: g\nsteps:\n  - id: a\n    depends_on: 3\n").unwrap_err();
    let [
        WorkflowProblem::NotAWorkflow {
            path,
            line,
            message,
            ..
        },
    ] = err.problems()
    else {
        panic!("{err}");
    };
    assert_eq!((path.as_str(), *line), ("steps[0].depends_on", Some(4)));
    assert_eq!(message, "invalid type: integer `3`, expected a sequence");
}

#[test]
fn json_errors_name_the_path_and_line() {
    let err =
        Workflow::from_json("{\"goal\": \"g\",\n \"steps\": [{\"id\": \"a\", \"retries\": -1}]}")
            .unwrap_err();
    let [WorkflowProblem::NotAWorkflow { path, line, .. }] = err.problems() else {
        panic!("{err}");
    };
    assert_eq!((path.as_str(), *line), ("steps[0].retries", Some(2)));
}

#[test]
fn an_empty_goal_and_no_steps() {
    assert_eq!(
        problems(WorkflowDefinition::new(" ")),
        [WorkflowProblem::EmptyGoal, WorkflowProblem::NoSteps]
    );
}

#[test]
fn empty_reserved_and_non_identifier_ids() {
    let all = problems(wf([op(""), op("input"), op("step-1"), op("in"), op("ok")]));
    assert_eq!(all[0], WorkflowProblem::EmptyStepId { position: 1 });
    let invalid: Vec<&str> = all
        .iter()
        .filter_map(|p| match p {
            WorkflowProblem::InvalidStepId { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(invalid, ["input", "step-1", "in"]);
    assert_eq!(all.len(), 4, "{all:#?}");
}

#[test]
fn duplicate_ids() {
    assert_eq!(
        one(wf([op("a"), op("b"), op("a")])),
        WorkflowProblem::DuplicateStepId {
            id: "a".into(),
            count: 2
        }
    );
}

#[test]
fn unknown_dependencies() {
    assert_eq!(
        one(wf([op("a"), op("b").depends_on("a").depends_on("z")])),
        WorkflowProblem::UnknownDependency {
            step: "b".into(),
            dependency: "z".into()
        }
    );
}

#[test]
fn cycles_are_reported_with_their_path() {
    let all = problems(wf([
        op("a").depends_on("c"),
        op("b").depends_on("a"),
        op("c").depends_on("b"),
        op("d").depends_on("d"),
        op("e").depends_on("a"),
    ]));
    let cycles: Vec<String> = all.iter().map(ToString::to_string).collect();
    assert_eq!(
        cycles,
        [
            "dependency cycle: a -> c -> b -> a (each step depends on the next)",
            "dependency cycle: d -> d (each step depends on the next)",
        ]
    );
}

#[test]
fn a_step_does_exactly_one_thing() {
    let mut nothing = op("a");
    nothing.operator = None;
    let mut empty = op("b");
    empty.operator = Some(" ".into());
    let mut both = op("c");
    both.human_input = Some(HumanInput::new("ok?"));
    both.sub_workflow = Some(Box::new(wf([op("x")])));
    assert_eq!(
        problems(wf([nothing, empty, both])),
        [
            WorkflowProblem::MissingOperator { step: "a".into() },
            WorkflowProblem::MissingOperator { step: "b".into() },
            WorkflowProblem::ConflictingKinds {
                kinds: vec!["operator", "human_input", "sub_workflow"],
                step: "c".into()
            },
        ]
    );
}

#[test]
fn fallbacks() {
    let human = WorkflowStep::human("c", HumanInput::new("ok?")).with_fallback("x");
    let all = problems(wf([
        op("a").with_fallback("search"),
        op("b").with_fallback(""),
        human,
        op("d").with_fallback("search.backup"),
    ]));
    assert_eq!(
        all,
        [
            WorkflowProblem::FallbackIsOperator {
                step: "a".into(),
                operator: "search".into()
            },
            WorkflowProblem::InvalidFallback {
                step: "b".into(),
                reason: "the fallback is empty"
            },
            WorkflowProblem::InvalidFallback {
                step: "c".into(),
                reason: "only a step with an `operator` can have a fallback"
            },
        ]
    );
}

#[test]
fn empty_questions() {
    assert_eq!(
        one(wf([WorkflowStep::human("a", HumanInput::new(""))])),
        WorkflowProblem::EmptyQuestion { step: "a".into() }
    );
}

#[test]
fn bad_timeouts() {
    let mut soon = op("a");
    soon.timeout = Some("soon".into());
    let mut zero = op("b");
    zero.timeout = Some("0s".into());
    let mut fine = op("c");
    fine.timeout = Some("1h 30m".into());
    let all = problems(wf([soon, zero, fine]));
    let steps: Vec<&str> = all
        .iter()
        .map(|p| match p {
            WorkflowProblem::InvalidTimeout { step, .. } => step.as_str(),
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(steps, ["a", "b"]);
}

#[test]
fn templates_that_do_not_parse() {
    let WorkflowProblem::InvalidTemplate {
        step,
        pointer,
        message,
    } = one(wf([
        op("a").with_input("q", json!({"deep": ["{{ input. }}"]}))
    ]))
    else {
        panic!()
    };
    assert_eq!((step.as_str(), pointer.as_str()), ("a", "/q/deep/0"));
    assert!(message.contains("expected a field name"), "{message}");
}

#[test]
fn templates_read_only_ancestors() {
    let all = problems(wf([
        op("a"),
        op("b").with_input("q", "{{a.x}}"),
        op("c").depends_on("a").with_input("q", "{{steps.c.x}}"),
        op("d")
            .depends_on("c")
            .with_input("q", "{{a.x}} {{steps.zz.y}} {{steps}}"),
    ]));
    let shown: Vec<String> = all.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "step `d`: a template reads `steps.zz.y`, but there is no step `zz`",
            "step `d`: a template reads `steps`; name a step: `steps.<id>.<field>`",
            "step `b`: a template reads `steps.a.x`, but step `b` does not depend on `a` (directly or through its dependencies); add it to `depends_on`",
            "step `c`: a template reads `steps.c.x`, but step `c` does not depend on `c` (directly or through its dependencies); add it to `depends_on`",
        ]
    );
    // `d` reads `a` through `c`: an ancestor, not a problem.
}

#[test]
fn inputs_named_like_steps_are_ambiguous() {
    let def = wf([op("topic")]).with_input_schema(json!({"properties": {"topic": {}}}));
    assert_eq!(
        one(def),
        WorkflowProblem::AmbiguousInput {
            name: "topic".into()
        }
    );
}

#[test]
fn an_input_schema_lists_the_inputs() {
    let schema = json!({"type": "object", "properties": {
        "topic": {"type": "string"},
        "user": {"type": "object", "properties": {"name": {"type": "string"}}}
    }});
    let def = wf([op("a").with_input("q", "{{topc}}")]).with_input_schema(schema.clone());
    let WorkflowProblem::InvalidTemplate { message, .. } = one(def) else {
        panic!()
    };
    assert!(message.contains("did you mean `topic`"), "{message}");
    let def = wf([op("a").with_input("q", "{{input.user.nmae}} {{user.name}}")])
        .with_input_schema(schema.clone());
    assert_eq!(
        one(def).to_string(),
        "step `a`: a template reads `input.user.nmae`, but the workflow's input schema has no field `nmae` in `input.user` (it has: name)"
    );
    let def = wf([op("a").with_input("q", "{{topic.x}}")]).with_input_schema(schema);
    assert!(matches!(one(def), WorkflowProblem::MissingField { .. }));
}

#[test]
fn answers_of_human_input_steps_are_checked_against_their_schema() {
    let ask = HumanInput::new("Publish?").with_response_schema(json!({
        "type": "object", "properties": {"approved": {"type": "boolean"}}
    }));
    let def = wf([
        WorkflowStep::human("ask", ask),
        op("b")
            .depends_on("ask")
            .with_input("ok", "{{ask.aproved}}"),
    ]);
    let WorkflowProblem::MissingField { step, path, reason } = one(def) else {
        panic!()
    };
    assert_eq!((step.as_str(), path.as_str()), ("b", "steps.ask.aproved"));
    assert!(reason.contains("human-input step `ask`"), "{reason}");
}

#[test]
fn sub_workflow_problems_name_their_step() {
    let inner = wf([
        op("x").depends_on("nope"),
        op("y").with_input("q", "{{x.z}}"),
    ]);
    let all = problems(wf([op("a"), WorkflowStep::sub_workflow("research", inner)]));
    let shown: Vec<String> = all.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "in sub-workflow `research`: step `x` depends on unknown step `nope`",
            "in sub-workflow `research`: step `y`: a template reads `steps.x.x`, but step `y` does not depend on `x` (directly or through its dependencies); add it to `depends_on`",
        ]
        .map(|s| s.replace("steps.x.x", "steps.x.z"))
    );
    let mut deep = wf([op("leaf")]);
    for _ in 0..=MAX_SUB_WORKFLOW_DEPTH {
        deep = wf([WorkflowStep::sub_workflow("s", deep)]);
    }
    let p = one(deep).to_string();
    assert!(
        p.ends_with("step `s`: sub-workflows nest deeper than 8 levels"),
        "{p}"
    );
}

#[cfg(feature = "schema-validation")]
#[test]
fn sub_workflow_inputs_are_checked_against_its_input_schema() {
    let inner = wf([op("x").with_input("q", "{{name}}")]).with_input_schema(json!({
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}
    }));
    let ask = HumanInput::new("How many?").with_response_schema(
        json!({"type": "object", "properties": {"count": {"type": "string"}}}),
    );
    let shown: Vec<String> = problems(wf([
        WorkflowStep::human("ask", ask),
        WorkflowStep::sub_workflow("research", inner.clone())
            .depends_on("ask")
            .with_input("n", "{{ask.count}}"),
    ]))
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(shown.len(), 2, "{shown:#?}");
    assert!(shown[0].starts_with("step `research`: its input does not match the input schema of its sub-workflow: at ``: \"name\" is a required property"), "{shown:#?}");
    assert!(shown[1].starts_with("step `research`: its input does not match the input schema of its sub-workflow: at `/n`: `{{ask.count}}` gives a string here"), "{shown:#?}");
    let fine = wf([WorkflowStep::sub_workflow("research", inner).with_input("name", "{{topic}}")]);
    assert!(Workflow::new(fine).is_ok());
}

#[test]
fn every_problem_is_reported_at_once() {
    let mut bad_timeout = op("b").depends_on("ghost").with_input("q", "{{c.x}}");
    bad_timeout.timeout = Some("later".into());
    let all = problems(
        WorkflowDefinition::new("")
            .with_step(op("a").with_fallback("search"))
            .with_step(bad_timeout)
            .with_step(op("c").depends_on("c"))
            .with_step(op("a")),
    );
    assert_eq!(all.len(), 7, "{all:#?}");
}

#[test]
fn rendering_lists_objects_and_text() {
    let wf = Workflow::new(wf([
        op("a"),
        op("b").depends_on("a").with_input(
            "req",
            json!({
                "items": ["{{a.items[0]}}", {"all": "{{steps.a.items}}", "n": 1}],
                "title": "{{ input.topic }}: {{ len(a.items) }} items",
                "limit": "{{ limit | default: 10 }}",
            }),
        ),
    ]))
    .unwrap();
    let outputs: serde_json::Map<String, Value> = [("a".to_owned(), json!({"items": ["x", "y"]}))]
        .into_iter()
        .collect();
    let data = wf
        .step("b")
        .unwrap()
        .input()
        .render(&json!({"topic": "t"}), &outputs)
        .unwrap();
    assert_eq!(
        data,
        json!({"req": {
            "items": ["x", {"all": ["x", "y"], "n": 1}],
            "title": "t: 2 items",
            "limit": 10,
        }})
    );
    let err = wf
        .step("b")
        .unwrap()
        .input()
        .render(&json!({"topic": "t"}), &HashMap::new());
    assert_eq!(
        err.unwrap_err().kind,
        soorma_expr::EvalErrorKind::MissingPath
    );
}

#[test]
fn a_long_chain_validates_without_deep_recursion() {
    let n = 10_000;
    let mut def = wf([op("s0")]);
    for i in 1..n {
        def = def.with_step(
            op(&format!("s{i}"))
                .depends_on(format!("s{}", i - 1))
                .with_input("q", format!("{{{{s{}.x}}}}", i - 1)),
        );
    }
    let wf = Workflow::new(def.clone()).unwrap();
    assert_eq!(wf.order().last().unwrap().id(), format!("s{}", n - 1));
    def.steps[0].depends_on.push(format!("s{}", n - 1));
    let WorkflowProblem::Cycle { path } = one(def) else {
        panic!()
    };
    assert_eq!(path.len(), n + 1);
}

fn registry() -> Vec<AgentDefinition> {
    let search = AgentCapability::new(
        "search",
        EventDefinition::new("search.requested", Topic::ActionRequests)
            .with_payload_schema(json!({
                "type": "object",
                "required": ["query"],
                "additionalProperties": false,
                "properties": {
                    "query": {"type": "string", "minLength": 3},
                    "limit": {"type": "integer"},
                }
            }))
            .with_response_schema(json!({
                "type": "object",
                "properties": {
                    "hits": {"type": "array", "items": {"$ref": "#/$defs/Hit"}},
                    "count": {"type": "integer"},
                },
                "$defs": {"Hit": {"type": "object", "properties": {"url": {"type": "string"}}}}
            })),
    );
    let summarize = AgentCapability::new(
        "summarize",
        EventDefinition::new("summarize.requested", Topic::ActionRequests),
    );
    vec![
        AgentDefinition::new("s-1", "searcher", AgentKind::Tool)
            .with_capability(search)
            .with_capability(summarize),
    ]
}

fn registry_problems(def: WorkflowDefinition) -> Vec<String> {
    let wf = Workflow::new(def).unwrap();
    match wf.check_against(&registry()) {
        Ok(()) => Vec::new(),
        Err(e) => e.problems().iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn a_workflow_the_registry_serves_passes() {
    let def = wf([
        op("a")
            .with_input("query", "{{topic}}")
            .with_input("limit", 5),
        WorkflowStep::new("b", "summarize.requested")
            .depends_on("a")
            .with_input("urls", "{{a.hits[0].url}} {{a.count}}"),
    ]);
    assert_eq!(registry_problems(def), Vec::<String>::new());
}

#[test]
fn unknown_capabilities() {
    let def = wf([op("a")
        .with_input("query", "{{q}}")
        .with_fallback("search.old")
        .with_input("limit", 1)]);
    assert_eq!(
        registry_problems(def),
        ["step `a`: no registered capability is called `search.old` or consumes it (fallback)"]
    );
    let def = wf([WorkflowStep::new("a", "translate")]);
    assert_eq!(
        registry_problems(def),
        ["step `a`: no registered capability is called `translate` or consumes it (operator)"]
    );
}

#[cfg(feature = "schema-validation")]
#[test]
fn static_inputs_are_checked_against_the_payload_schema() {
    let def = wf([op("a")
        .with_input("query", "ab")
        .with_input("limit", "ten")
        .with_input("x", 1)]);
    let all = registry_problems(def);
    assert_eq!(all.len(), 3, "{all:#?}");
    assert!(all.iter().any(|p| p.contains("at `/query`")), "{all:#?}");
    assert!(all.iter().any(|p| p.contains("at `/limit`")), "{all:#?}");
    assert!(
        all.iter()
            .any(|p| p.contains("at ``") && p.contains("'x' was unexpected")),
        "{all:#?}"
    );
}

#[cfg(feature = "schema-validation")]
#[test]
fn templated_inputs_are_checked_where_their_type_is_known() {
    // `a.count` is an integer by the reply schema: not a string query. `{{topic}}` is unknown:
    // no false alarm (even with `minLength`), and `limit` as text is a string: not an integer.
    let def = wf([
        op("a").with_input("query", "{{topic}}"),
        op("b")
            .depends_on("a")
            .with_input("query", "{{a.count}}")
            .with_input("limit", "{{a.count}}!"),
        op("c")
            .depends_on("a")
            .with_input("query", "{{ a.count | default: 'x' }}"),
        // Known to be a string, but not known to be long enough: no `minLength` alarm.
        op("d").with_input("query", "ab{{topic}}"),
    ]);
    let all = registry_problems(def);
    assert_eq!(all.len(), 2, "{all:#?}");
    assert!(all[0].starts_with("step `b`: its input does not match the payload schema of `search`: at `/limit`: `{{a.count}}!` gives a string here"), "{all:#?}");
    assert!(all[1].starts_with("step `b`: its input does not match the payload schema of `search`: at `/query`: `{{a.count}}` gives an integer here"), "{all:#?}");
    // A missing required field is known from the template's shape.
    let all = registry_problems(wf([op("a").with_input("limit", "{{n}}")]));
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(
        all[0].contains("\"query\" is a required property"),
        "{all:#?}"
    );
}

#[test]
fn templates_read_only_fields_of_known_reply_schemas() {
    let def = wf([
        op("a").with_input("query", "{{topic}}"),
        WorkflowStep::new("b", "summarize")
            .depends_on("a")
            .with_input(
                "t",
                "{{a.hits[0].ur}} {{a.count.x}} {{a.hits.url}} {{a.hits[0].url}}",
            ),
    ]);
    assert_eq!(
        registry_problems(def),
        [
            "step `b`: a template reads `steps.a.hits[0].ur`, but the reply schema of `search` has no field `ur` in `steps.a.hits[0]` (it has: url)",
            "step `b`: a template reads `steps.a.count.x`, but `steps.a.count` is an integer in the reply schema of `search`, not an object",
            "step `b`: a template reads `steps.a.hits.url`, but `steps.a.hits` is an array in the reply schema of `search`, not an object",
        ]
    );
}

#[test]
fn sub_workflows_are_checked_against_the_registry() {
    let inner = wf([WorkflowStep::new("x", "translate")]);
    let def = wf([WorkflowStep::sub_workflow("nested", inner)]);
    assert_eq!(
        registry_problems(def),
        [
            "in sub-workflow `nested`: step `x`: no registered capability is called `translate` or consumes it (operator)"
        ]
    );
}

#[test]
fn mermaid_draws_every_kind_of_step_and_escapes_labels() {
    let wf = Workflow::new(wf([
        op("a")
            .with_name("Find \"docs\" <b> [#1]")
            .with_fallback("search.backup"),
        WorkflowStep::human("ok", HumanInput::new("Go?")).depends_on("a"),
        WorkflowStep::sub_workflow("more", wf([op("x"), op("y")]).tap_goal("dig \"deeper\""))
            .depends_on("a")
            .depends_on("ok"),
    ]))
    .unwrap();
    assert_eq!(
        wf.to_mermaid(),
        "flowchart TD\n    \
         s0[\"a: Find #quot;docs#quot; #lt;b#gt; [#35;1]<br/>search\"]\n    \
         s0f([\"fallback: search.backup\"])\n    \
         s0 -. fallback .-> s0f\n    \
         s1[/\"ok<br/>asks: Go?\"/]\n    \
         s0 --> s1\n    \
         s2[[\"more<br/>sub-workflow: dig #quot;deeper#quot; (2 steps)\"]]\n    \
         s0 --> s2\n    \
         s1 --> s2\n"
    );
}

trait TapGoal {
    fn tap_goal(self, goal: &str) -> Self;
}

impl TapGoal for WorkflowDefinition {
    fn tap_goal(mut self, goal: &str) -> Self {
        self.goal = goal.to_owned();
        self
    }
}

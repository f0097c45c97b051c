//! What a JSON Schema says about a path: whether the field exists and what type it has, for
//! checking what templates read against the schemas that are known (the workflow's input
//! schema, a human-input step's answer schema, a capability's reply schema).

use std::collections::HashMap;

use serde_json::Value;
use soorma_common::WorkflowDefinition;
use soorma_expr::Segment;

use super::input::{INPUT_ROOT, Reference, STEPS_ROOT, StepInput, render_path};
use super::label;
use super::problem::WorkflowProblem;

/// How many `$ref`s are followed in a row before giving up (a cycle of references).
const MAX_REFS: usize = 32;

/// What a schema says about a path.
#[derive(Debug)]
pub(super) enum Lookup<'s> {
    /// The schema of the value at the path.
    Found(#[cfg_attr(not(feature = "schema-validation"), allow(dead_code))] &'s Value),
    /// The path cannot exist: why.
    Missing(String),
    /// The schema does not say (no `properties`, a union, a `$ref` outside the document, ...).
    Unknown,
}

/// A known schema of a value templates read, and how problems name it (`the workflow's input
/// schema`).
pub(super) struct Known<'s> {
    pub schema: &'s Value,
    pub what: String,
}

impl<'s> Known<'s> {
    /// What the schema says about `field` below `base` (`input`, `steps.a`: for messages).
    pub(super) fn lookup(&self, base: &str, field: &[Segment]) -> Lookup<'s> {
        let root = self.schema;
        let mut schema = root;
        for (i, segment) in field.iter().enumerate() {
            let Some(here) = resolve(root, schema) else {
                return Lookup::Unknown;
            };
            let at = || render_path(base, &field[..i]);
            let ty = single_type(root, here);
            let next = match segment {
                Segment::Key(k) => {
                    let properties = here.get("properties").and_then(Value::as_object);
                    if let Some(p) = properties.and_then(|p| p.get(k)) {
                        Some(p)
                    } else if ty.is_some_and(|t| t != "object") {
                        return Lookup::Missing(format!(
                            "`{}` is {} in {}, not an object",
                            at(),
                            article(ty.unwrap_or_default()),
                            self.what
                        ));
                    } else if here.get("patternProperties").is_some() {
                        None
                    } else {
                        match (properties, here.get("additionalProperties")) {
                            (_, Some(extra @ Value::Object(_))) => Some(extra),
                            (Some(properties), None | Some(Value::Bool(false))) => {
                                let mut names: Vec<&str> =
                                    properties.keys().map(String::as_str).collect();
                                names.sort_unstable();
                                return Lookup::Missing(format!(
                                    "{} has no field `{k}` in `{}` (it has: {})",
                                    self.what,
                                    at(),
                                    if names.is_empty() {
                                        "none".to_owned()
                                    } else {
                                        names.join(", ")
                                    }
                                ));
                            }
                            _ => None,
                        }
                    }
                }
                Segment::Index(n) => {
                    if ty.is_some_and(|t| t != "array") {
                        return Lookup::Missing(format!(
                            "`{}` is {} in {}, not an array",
                            at(),
                            article(ty.unwrap_or_default()),
                            self.what
                        ));
                    }
                    match (here.get("prefixItems"), here.get("items")) {
                        (Some(Value::Array(prefix)), _) if *n < prefix.len() => prefix.get(*n),
                        (_, Some(items @ Value::Object(_))) => Some(items),
                        _ => None,
                    }
                }
                _ => None,
            };
            match next {
                Some(next) => schema = next,
                None => return Lookup::Unknown,
            }
        }
        resolve(root, schema).map_or(Lookup::Unknown, Lookup::Found)
    }
}

/// `schema` with local `$ref`s followed and a nullable union (`anyOf: [X, {type: null}]`, as
/// schemars writes `Option<X>`) taken as `X`; `None` for a reference it cannot follow.
fn resolve<'s>(root: &'s Value, mut schema: &'s Value) -> Option<&'s Value> {
    for _ in 0..MAX_REFS {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            schema = root.pointer(reference.strip_prefix('#')?)?;
            continue;
        }
        let union = ["anyOf", "oneOf", "allOf"]
            .iter()
            .find_map(|k| schema.get(*k).and_then(Value::as_array));
        if let Some(branches) = union {
            let mut real = branches
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) != Some("null"));
            match (real.next(), real.next()) {
                (Some(only), None) => {
                    schema = only;
                    continue;
                }
                _ => return Some(schema),
            }
        }
        return Some(schema);
    }
    None
}

/// The one JSON type `schema` allows (`["string", "null"]` is none: it may be null).
pub(super) fn single_type<'s>(root: &'s Value, schema: &'s Value) -> Option<&'s str> {
    match resolve(root, schema)?.get("type")? {
        Value::String(t) => Some(t),
        Value::Array(types) => match types.as_slice() {
            [Value::String(t)] => Some(t),
            _ => None,
        },
        _ => None,
    }
}

pub(super) fn article(ty: &str) -> String {
    match ty {
        "array" | "object" | "integer" => format!("an {ty}"),
        "" => "a value".to_owned(),
        _ => format!("a {ty}"),
    }
}

/// What the registry-free checks know about `reference`'s schema: the workflow's input
/// schema, or a human-input step's answer schema.
pub(super) fn known_without_registry<'s>(
    def: &'s WorkflowDefinition,
    index: &HashMap<String, usize>,
    reference: &Reference,
) -> Option<Known<'s>> {
    match reference.step() {
        None => def.input_schema.as_ref().map(|schema| Known {
            schema,
            what: "the workflow's input schema".to_owned(),
        }),
        Some(id) => {
            let step = &def.steps[*index.get(id)?];
            let schema = step.human_input.as_ref()?.response_schema.as_ref()?;
            Some(Known {
                schema,
                what: format!("the answer schema of human-input step `{id}`"),
            })
        }
    }
}

/// How a reference's base is written in messages: `input` or `steps.<id>`.
pub(super) fn base(reference: &Reference) -> String {
    match reference.step() {
        None => INPUT_ROOT.to_owned(),
        Some(id) => format!("{STEPS_ROOT}.{id}"),
    }
}

/// Checks what each template reads against the input schema and the answer schemas of
/// human-input steps.
pub(super) fn check_pure(
    def: &WorkflowDefinition,
    inputs: &[Option<StepInput>],
    index: &HashMap<String, usize>,
    problems: &mut Vec<WorkflowProblem>,
) {
    for (i, input) in inputs.iter().enumerate() {
        let Some(input) = input else {
            continue;
        };
        for reference in input.reads() {
            let Some(known) = known_without_registry(def, index, reference) else {
                continue;
            };
            if let Lookup::Missing(reason) = known.lookup(&base(reference), reference.field()) {
                problems.push(WorkflowProblem::MissingField {
                    step: label(&def.steps[i], i),
                    path: reference.to_string(),
                    reason,
                });
            }
        }
    }
}

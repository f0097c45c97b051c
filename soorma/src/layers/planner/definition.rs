//! Plan definitions, validated up front: a [`Plan`] is a [`PlanDefinition`] whose states,
//! transitions, conditions and templates have all been checked.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::Value;
use soorma_common::PlanDefinition;

use crate::error::{Error, Result};
use soorma_expr::{Condition, Roots, Template};

/// A validated plan definition, ready to run: every target state exists, every state is
/// reachable, some state is terminal, every action names its response event, and every
/// condition and template parses.
///
/// ```
/// use soorma::planner::Plan;
/// use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
///
/// let plan = Plan::new(
///     PlanDefinition::new("research", "search, then done")
///         .with_state(
///             StateConfig::new("start", "search")
///                 .with_action(StateAction::new("search.requested", "search.completed")
///                     .with_data(serde_json::json!({"query": "{{goal.topic}}"})))
///                 .with_transition(StateTransition::new("search.completed", "done")),
///         )
///         .with_state(StateConfig::new("done", "finished").terminal()),
/// )?;
/// assert_eq!(plan.definition().plan_type, "research");
/// # Ok::<(), soorma::Error>(())
/// ```
#[derive(Debug)]
pub struct Plan {
    definition: PlanDefinition,
    /// `(state, transition index)` → the compiled condition.
    conditions: BTreeMap<(String, usize), Condition>,
    /// State → its action's data template.
    actions: BTreeMap<String, Template>,
    /// Terminal state → its result template.
    results: BTreeMap<String, Template>,
}

impl Plan {
    /// Validates `definition`; [`Error::InvalidPlan`] lists every problem found.
    ///
    /// ```
    /// use soorma::planner::Plan;
    /// use soorma::common::{PlanDefinition, StateConfig, StateTransition};
    ///
    /// let broken = PlanDefinition::new("p", "")
    ///     .with_state(StateConfig::new("start", "").with_transition(StateTransition::new("x.done", "nowhere")));
    /// let err = Plan::new(broken).unwrap_err().to_string();
    /// assert!(err.contains("unknown state `nowhere`"), "{err}");
    /// assert!(err.contains("no terminal state"), "{err}");
    /// ```
    pub fn new(definition: PlanDefinition) -> Result<Self> {
        let mut problems = Vec::new();
        let mut plan = Self {
            definition,
            conditions: BTreeMap::new(),
            actions: BTreeMap::new(),
            results: BTreeMap::new(),
        };
        plan.check(&mut problems);
        if problems.is_empty() {
            Ok(plan)
        } else {
            Err(Error::InvalidPlan {
                plan_type: plan.definition.plan_type,
                problems,
            })
        }
    }

    /// Parses and validates a plan definition in JSON.
    ///
    /// ```
    /// let plan = soorma::planner::Plan::from_json(r#"{
    ///   "plan_type": "ping",
    ///   "states": {
    ///     "start": {"state_name": "start",
    ///               "action": {"event_type": "ping.requested", "response_event": "ping.done"},
    ///               "transitions": [{"on_event": "ping.done", "to_state": "done"}]},
    ///     "done": {"state_name": "done", "is_terminal": true}
    ///   }
    /// }"#)?;
    /// assert_eq!(plan.definition().initial_state, "start");
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn from_json(json: &str) -> Result<Self> {
        let definition: PlanDefinition =
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(json))
                .map_err(|e| Error::InvalidPlan {
                    plan_type: String::new(),
                    problems: vec![format!(
                        "not a plan definition: at `{}`: {}",
                        e.path(),
                        e.inner()
                    )],
                })?;
        Self::new(definition)
    }

    /// Parses and validates a plan definition in YAML (feature `yaml`).
    ///
    /// ```
    /// let plan = soorma::planner::Plan::from_yaml("
    /// plan_type: ping
    /// states:
    ///   start:
    ///     state_name: start
    ///     action: {event_type: ping.requested, response_event: ping.done, data: {to: '{{goal.host}}'}}
    ///     transitions:
    ///       - {on_event: ping.done, to_state: done, condition: 'data.success'}
    ///   done: {state_name: done, is_terminal: true}
    /// ")?;
    /// assert_eq!(plan.definition().states.len(), 2);
    /// # Ok::<(), soorma::Error>(())
    /// ```
    #[cfg(feature = "yaml")]
    pub fn from_yaml(yaml: &str) -> Result<Self> {
        let definition: PlanDefinition = serde_path_to_error::deserialize(
            serde_norway::Deserializer::from_str(yaml),
        )
        .map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let at = inner
                .location()
                .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
                .unwrap_or_default();
            Error::InvalidPlan {
                plan_type: String::new(),
                problems: vec![format!("not a plan definition: at `{path}`{at}: {inner}")],
            }
        })?;
        Self::new(definition)
    }

    /// The definition.
    ///
    /// ```
    /// # use soorma::common::{PlanDefinition, StateConfig};
    /// let plan = soorma::planner::Plan::new(PlanDefinition::new("p", "").with_state(StateConfig::new("start", "").terminal()))?;
    /// assert_eq!(plan.definition().states.len(), 1);
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn definition(&self) -> &PlanDefinition {
        &self.definition
    }

    pub(crate) fn condition(&self, state: &str, index: usize) -> Option<&Condition> {
        self.conditions.get(&(state.to_owned(), index))
    }

    pub(crate) fn action_template(&self, state: &str) -> Option<&Template> {
        self.actions.get(state)
    }

    pub(crate) fn result_template(&self, state: &str) -> Option<&Template> {
        self.results.get(state)
    }

    fn check(&mut self, problems: &mut Vec<String>) {
        let def = &self.definition;
        if def.plan_type.trim().is_empty() {
            problems.push("`plan_type` is empty".into());
        }
        if def.states.is_empty() {
            problems.push("the plan has no states".into());
            return;
        }
        if !def.states.contains_key(&def.initial_state) {
            problems.push(format!(
                "the initial state `{}` is not one of the states ({})",
                def.initial_state,
                names(def.states.keys())
            ));
        }
        let conditions = Roots::conditions();
        let templates = Roots::templates();
        let mut terminal = false;
        for (name, state) in &def.states {
            let at = format!("state `{name}`");
            if state.state_name != *name {
                problems.push(format!(
                    "{at}: its `state_name` is `{}`; it must match its key",
                    state.state_name
                ));
            }
            let target = |to: &str, what: &str, problems: &mut Vec<String>| {
                if !def.states.contains_key(to) {
                    problems.push(format!(
                        "{at}: {what} goes to unknown state `{to}` (states: {})",
                        names(def.states.keys())
                    ));
                }
            };
            for (i, t) in state.transitions.iter().enumerate() {
                if t.on_event.trim().is_empty() {
                    problems.push(format!("{at}: transition {} has no `on_event`", i + 1));
                }
                target(
                    &t.to_state,
                    &format!("the transition on `{}`", t.on_event),
                    problems,
                );
                if let Some(src) = &t.condition {
                    match Condition::parse(src, &conditions) {
                        Ok(c) => {
                            self.conditions.insert((name.clone(), i), c);
                        }
                        Err(e) => problems.push(format!(
                            "{at}: the condition of the transition on `{}` is invalid: {e}",
                            t.on_event
                        )),
                    }
                }
            }
            if let Some(next) = &state.default_next {
                target(next, "`default_next`", problems);
            }
            if let Some(action) = &state.action {
                if action.event_type.trim().is_empty() {
                    problems.push(format!("{at}: the action has no `event_type`"));
                }
                if action.response_event.trim().is_empty() {
                    problems.push(format!(
                        "{at}: the action `{}` has no `response_event`; name the event its reply comes back as",
                        action.event_type
                    ));
                }
                let data = action
                    .data
                    .clone()
                    .unwrap_or(Value::Object(Default::default()));
                match Template::parse(&data, &templates) {
                    Ok(t) => {
                        self.actions.insert(name.clone(), t);
                    }
                    Err(e) => {
                        problems.push(format!("{at}: the action's data template is invalid: {e}"))
                    }
                }
            }
            if state.is_terminal {
                terminal = true;
                if !state.transitions.is_empty() || state.default_next.is_some() {
                    problems.push(format!(
                        "{at} is terminal but has transitions; a terminal state ends the plan"
                    ));
                }
                if state.action.is_some() {
                    problems.push(format!(
                        "{at} is terminal but has an action; a terminal state ends the plan"
                    ));
                }
                if let Some(result) = &state.result {
                    match Template::parse(result, &templates) {
                        Ok(t) => {
                            self.results.insert(name.clone(), t);
                        }
                        Err(e) => {
                            problems.push(format!("{at}: the result template is invalid: {e}"))
                        }
                    }
                }
            } else {
                if state.fails {
                    problems.push(format!("{at} fails the plan but is not terminal"));
                }
                if state.result.is_some() {
                    problems.push(format!("{at} has a result template but is not terminal"));
                }
                if state.transitions.is_empty() && state.default_next.is_none() {
                    problems.push(format!(
                        "{at} is a dead end: not terminal, with no transition and no `default_next`"
                    ));
                }
            }
        }
        if !terminal {
            problems.push("the plan has no terminal state (mark one with `is_terminal`)".into());
        }
        for unreachable in self.unreachable() {
            problems.push(format!(
                "state `{unreachable}` is unreachable from the initial state `{}`",
                self.definition.initial_state
            ));
        }
    }

    fn unreachable(&self) -> Vec<String> {
        let def = &self.definition;
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([def.initial_state.clone()]);
        while let Some(name) = queue.pop_front() {
            if !seen.insert(name.clone()) {
                continue;
            }
            if let Some(state) = def.states.get(&name) {
                queue.extend(state.transitions.iter().map(|t| t.to_state.clone()));
                queue.extend(state.default_next.clone());
            }
        }
        if !def.states.contains_key(&def.initial_state) {
            return Vec::new(); // reported already
        }
        def.states
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect()
    }
}

fn names<'a>(it: impl Iterator<Item = &'a String>) -> String {
    it.map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use soorma_common::{StateAction, StateConfig, StateTransition};

    #[test]
    fn every_problem_is_reported() {
        let def = PlanDefinition::new("bad", "")
            .with_initial_state("begin")
            .with_state(
                StateConfig::new("start", "")
                    .with_action(StateAction::new("search.requested", ""))
                    .with_transition(
                        StateTransition::new("search.completed", "ghost")
                            .with_condition("data.count >"),
                    ),
            )
            .with_state(StateConfig::new("island", "").with_default_next("start"))
            .with_state(
                StateConfig::new("end", "")
                    .terminal()
                    .with_transition(StateTransition::new("x", "start")),
            );
        let Err(Error::InvalidPlan { problems, .. }) = Plan::new(def) else {
            panic!("expected an invalid plan");
        };
        let all = problems.join("\n");
        for expected in [
            "initial state `begin` is not one of the states",
            "unknown state `ghost`",
            "no `response_event`",
            "the condition of the transition on `search.completed` is invalid",
            "is terminal but has transitions",
        ] {
            assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
        }
    }

    #[test]
    fn unreachable_and_missing_terminal_states_are_reported() {
        let def = PlanDefinition::new("p", "")
            .with_state(StateConfig::new("start", "").with_default_next("start"))
            .with_state(StateConfig::new("orphan", "").with_default_next("start"));
        let err = Plan::new(def).unwrap_err().to_string();
        assert!(err.contains("`orphan` is unreachable"), "{err}");
        assert!(err.contains("no terminal state"), "{err}");
    }

    #[test]
    fn bad_templates_and_unknown_roots_fail_at_definition_time() {
        let def = PlanDefinition::new("p", "")
            .with_state(
                StateConfig::new("start", "")
                    .with_action(
                        StateAction::new("a.requested", "a.done")
                            .with_data(json!({"q": "{{gaol.topic}}"})),
                    )
                    .with_transition(
                        StateTransition::new("a.done", "done").with_condition("dta.ok == true"),
                    ),
            )
            .with_state(StateConfig::new("done", "").terminal());
        let err = Plan::new(def).unwrap_err().to_string();
        assert!(err.contains("gaol"), "{err}");
        assert!(err.contains("dta"), "{err}");
    }

    #[cfg(feature = "yaml")]
    #[test]
    fn yaml_errors_name_the_path_and_line() {
        let err = Plan::from_yaml("plan_type: p\nstates:\n  start:\n    state_name: [1]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("states.start.state_name"), "{err}");
        assert!(err.contains("line 4"), "{err}");
        let invalid = Plan::from_yaml("plan_type: p\nstates:\n  start: {state_name: start}\n")
            .unwrap_err()
            .to_string();
        assert!(invalid.contains("no terminal state"), "{invalid}");
    }

    #[test]
    fn json_errors_name_the_path() {
        let err = Plan::from_json(r#"{"plan_type": "p", "states": {"start": {"state_name": 3}}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("states.start.state_name"), "{err}");
    }
}

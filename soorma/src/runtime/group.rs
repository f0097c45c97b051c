//! [`Agents`]: several agents of one binary, grouped explicitly and checked before they start.

use std::collections::{BTreeMap, BTreeSet};

use soorma_common::AgentKind;

use super::agent::{AgentBuilder, AgentHandle};
use super::handler::{Handler, HandlerKind, fits, registrations};
use crate::error::{Error, Result};
use crate::platform::Platform;
use crate::util::shutdown_signal;

/// Lists annotated handler functions by path, for [`Agents`] and
/// [`AgentBuilder::handlers`]: `handlers![sentiment, entities, tools::summarize]`. A name
/// that is not an annotated function is a compile error at that name.
///
/// ```
/// use soorma::prelude::*;
///
/// #[on_invoke("ping.requested", agent = "pinger")]
/// async fn ping(_: Invocation) -> Result<String, ToolError> { Ok("pong".into()) }
///
/// # fn main() {
/// let listed = soorma::handlers![ping];
/// assert_eq!(listed[0].event(), "ping.requested");
/// # }
/// ```
#[macro_export]
macro_rules! handlers {
    ($($f:path),* $(,)?) => {{
        let mut all: ::std::vec::Vec<$crate::Handler> = ::std::vec::Vec::new();
        $(all.extend(<$f as $crate::__private::HandlerSet>::handlers());)*
        all
    }};
}

/// The agents a binary hosts, grouped explicitly: each with its handlers (listed with
/// [`handlers!`](crate::handlers), so a typo is a compile error). Before any agent starts,
/// the group checks its wiring and fails naming every problem:
/// - a handler listed for an agent of a kind it does not belong to (an `#[on_task]` in a tool);
/// - an attribute-registered handler of the application that names an agent the group does not
///   start (`agent = "calcualtor"`), or names none and is listed nowhere;
/// - two agents of one name.
///
/// and it warns, naming the event, about a request the group's workers fan out that no agent
/// of the group (or the registry) consumes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::prelude::*;
///
/// async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
/// async fn square(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * req.data) }
///
/// let platform = Platform::embedded();
/// let running = Agents::new()
///     .tool("doubler", vec![Handler::on_invoke("double.requested", double)])
///     .tool("squarer", vec![Handler::on_invoke("square.requested", square)])
///     .start(&platform)
///     .await?;
/// let four: i64 = platform.client("docs").invoke("double.requested", 2, "double.completed").await?;
/// assert_eq!(four, 4);
/// running.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
#[must_use = "agents do nothing until started"]
pub struct Agents {
    agents: Vec<AgentBuilder>,
}

impl Agents {
    /// An empty group.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an agent as configured (version, state, ...). Its attribute-registered handlers
    /// are those naming it, plus those it lists.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn limit(_: Invocation, State(max): State<u32>) -> Result<u32, ToolError> { Ok(max) }
    ///
    /// let agents = Agents::new().with(
    ///     Tool::new("limits").version("2.0.0").with_state(10_u32)
    ///         .handler(Handler::on_invoke("limit.requested", limit)),
    /// );
    /// assert_eq!(agents.names(), ["limits"]);
    /// ```
    pub fn with(mut self, agent: AgentBuilder) -> Self {
        self.agents.push(agent);
        self
    }

    /// Adds a tool with these handlers.
    pub fn tool(self, name: impl Into<String>, handlers: Vec<Handler>) -> Self {
        self.of_kind(name, AgentKind::Tool, handlers)
    }

    /// Adds a worker with these handlers.
    pub fn worker(self, name: impl Into<String>, handlers: Vec<Handler>) -> Self {
        self.of_kind(name, AgentKind::Worker, handlers)
    }

    /// Adds a planner with these handlers.
    pub fn planner(self, name: impl Into<String>, handlers: Vec<Handler>) -> Self {
        self.of_kind(name, AgentKind::Planner, handlers)
    }

    /// Adds an event agent (`#[on_event]` handlers) with these handlers.
    pub fn agent(self, name: impl Into<String>, handlers: Vec<Handler>) -> Self {
        self.of_kind(name, AgentKind::Agent, handlers)
    }

    fn of_kind(self, name: impl Into<String>, kind: AgentKind, handlers: Vec<Handler>) -> Self {
        self.with(
            AgentBuilder::new(name, kind)
                .use_registered_handlers(false)
                .handlers(handlers),
        )
    }

    /// The names of the group's agents.
    pub fn names(&self) -> Vec<&str> {
        self.agents.iter().map(AgentBuilder::name).collect()
    }

    /// Checks the group's wiring (see [`Agents`]) without starting anything.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn plan(task: TaskContext) -> soorma::Result<()> { let _ = task; Ok(()) }
    ///
    /// // An `#[on_task]` handler listed for a tool:
    /// let err = Agents::new().tool("calc", vec![Handler::on_task("plan.requested", plan)]).check().unwrap_err();
    /// assert!(err.to_string().contains("belongs in a worker"));
    /// ```
    pub fn check(&self) -> Result<()> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Misconfigured {
                agent: self.names().join(", "),
                problems,
            })
        }
    }

    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let names: Vec<&str> = self.names();
        let mut seen = BTreeSet::new();
        for name in &names {
            if !seen.insert(*name) {
                problems.push(format!("two agents are named `{name}`"));
            }
        }
        for agent in &self.agents {
            for h in agent.listed_handlers() {
                if !fits(agent.kind(), h.kind) {
                    problems.push(format!(
                        "{} is listed for {} `{}`, but belongs in {}",
                        h.label(),
                        kind_name(agent.kind()),
                        agent.name(),
                        home_of(h.kind)
                    ));
                }
            }
        }
        // The application's crates: those whose handlers the group lists.
        let listed: Vec<&Handler> = self
            .agents
            .iter()
            .flat_map(|a| a.listed_handlers())
            .collect();
        let app_crates: BTreeSet<&str> = listed
            .iter()
            .filter_map(|h| h.module)
            .map(crate_of)
            .collect();
        let inventory_agents: Vec<&AgentBuilder> = self
            .agents
            .iter()
            .filter(|a| a.uses_registered_handlers())
            .collect();
        for reg in registrations() {
            let handler = reg.handler();
            let is_listed = listed
                .iter()
                .any(|l| l.fn_name == handler.fn_name && l.module == handler.module);
            let ours = app_crates.contains(reg.krate());
            match reg.agent {
                Some(agent) if !names.contains(&agent) => {
                    let hint = did_you_mean(agent, &names)
                        .map(|n| format!(" (did you mean `{n}`?)"))
                        .unwrap_or_default();
                    let message = format!(
                        "{} names agent `{agent}`{hint}, which this group does not start; the group's agents: {}",
                        handler.label(),
                        names.join(", ")
                    );
                    if ours {
                        problems.push(message);
                    } else {
                        tracing::warn!("{message}");
                    }
                }
                None if !is_listed
                    && ours
                    && !inventory_agents
                        .iter()
                        .any(|a| fits(a.kind(), handler.kind)) =>
                {
                    problems.push(format!(
                        "{} names no agent and no agent of the group lists it; list it with `handlers![..]` for one agent, or name its agent (`agent = \"...\"`)",
                        handler.label()
                    ));
                }
                _ => {}
            }
        }
        problems
    }

    /// Warnings (logged) about requests the group's workers fan out that no agent of the group
    /// consumes, when the registry does not know a consumer either.
    async fn warn_unconsumed(&self, platform: &Platform) {
        let consumed: BTreeSet<String> = self
            .agents
            .iter()
            .flat_map(|a| a.definition().capabilities)
            .map(|c| c.consumed_event.event_name)
            .collect();
        let mut requested: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for agent in &self.agents {
            for event in agent.definition().requested_events {
                requested
                    .entry(event)
                    .or_default()
                    .push(agent.name().to_owned());
            }
        }
        let registry = platform.discovery();
        for (event, agents) in requested {
            if consumed.contains(&event) {
                continue;
            }
            let known = registry
                .by_consumed_event(&event)
                .await
                .map(|found| !found.is_empty())
                .unwrap_or(false);
            if !known {
                tracing::warn!(
                    event = %event,
                    requested_by = %agents.join(", "),
                    "no agent of this group (or the registry) consumes `{event}`, which {} requests; its delegations will fail with \"no agent consumes\" until one runs",
                    agents.join(", ")
                );
            }
        }
    }

    /// Checks the wiring, then starts every agent.
    pub async fn start(self, platform: &Platform) -> Result<AgentsHandle> {
        let all: Vec<String> = self.names().iter().map(|n| (*n).to_owned()).collect();
        self.start_only(platform, &all).await
    }

    /// Checks the wiring of the whole group, then starts only the agents named (e.g. one agent
    /// per process on NATS).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
    /// async fn square(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * req.data) }
    ///
    /// let platform = Platform::embedded();
    /// let agents = Agents::new()
    ///     .tool("doubler", vec![Handler::on_invoke("double.requested", double)])
    ///     .tool("squarer", vec![Handler::on_invoke("square.requested", square)]);
    /// let running = agents.start_only(&platform, &["squarer"]).await?;
    /// assert_eq!(running.names(), ["squarer"]);
    /// let err = Agents::new().start_only(&platform, &["nobody"]).await.unwrap_err();
    /// assert!(err.to_string().contains("nobody"));
    /// # running.shutdown().await?; Ok(()) }
    /// ```
    pub async fn start_only(
        self,
        platform: &Platform,
        names: &[impl AsRef<str>],
    ) -> Result<AgentsHandle> {
        let mut problems = self.problems();
        let known = self.names();
        for name in names {
            let name = name.as_ref();
            if !known.contains(&name) {
                let hint = did_you_mean(name, &known)
                    .map(|n| format!(" (did you mean `{n}`?)"))
                    .unwrap_or_default();
                problems.push(format!(
                    "there is no agent `{name}` to start{hint}; the group's agents: {}",
                    known.join(", ")
                ));
            }
        }
        if !problems.is_empty() {
            return Err(Error::Misconfigured {
                agent: known.join(", "),
                problems,
            });
        }
        self.warn_unconsumed(platform).await;
        let mut handles = Vec::new();
        for agent in self.agents {
            if !names.iter().any(|n| n.as_ref() == agent.name()) {
                continue;
            }
            match agent.start(platform).await {
                Ok(handle) => handles.push(handle),
                Err(e) => {
                    for started in handles {
                        if let Err(stop) = started.shutdown().await {
                            tracing::warn!(error = %stop, "could not stop an agent after a failed start");
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(AgentsHandle { agents: handles })
    }

    /// Starts every agent and serves until Ctrl-C / SIGTERM, then shuts them down gracefully.
    pub async fn run(self, platform: &Platform) -> Result<()> {
        self.start(platform).await?.shutdown_on_signal().await
    }
}

/// The running agents of a group.
#[derive(Debug)]
pub struct AgentsHandle {
    agents: Vec<AgentHandle>,
}

impl AgentsHandle {
    /// The names of the running agents.
    pub fn names(&self) -> Vec<&str> {
        self.agents.iter().map(AgentHandle::name).collect()
    }

    /// The running agents.
    pub fn agents(&self) -> &[AgentHandle] {
        &self.agents
    }

    /// Stops every agent (each lets its handlers in flight finish); the first error is
    /// returned after all were asked to stop.
    pub async fn shutdown(self) -> Result<()> {
        let mut first = None;
        for agent in self.agents {
            if let Err(e) = agent.shutdown().await {
                tracing::warn!(error = %e, "an agent did not shut down cleanly");
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Serves until Ctrl-C / SIGTERM, then shuts down gracefully.
    pub async fn shutdown_on_signal(self) -> Result<()> {
        shutdown_signal().await;
        tracing::info!(agents = %self.names().join(", "), "shutdown requested");
        self.shutdown().await
    }
}

fn crate_of(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

fn kind_name(kind: AgentKind) -> &'static str {
    match kind {
        AgentKind::Tool => "tool",
        AgentKind::Worker => "worker",
        AgentKind::Planner => "planner",
        _ => "agent",
    }
}

fn home_of(kind: HandlerKind) -> &'static str {
    match kind {
        HandlerKind::Invoke => "a tool (or a worker)",
        HandlerKind::Task | HandlerKind::Result | HandlerKind::FanIn => "a worker",
        HandlerKind::Goal | HandlerKind::Transition => "a planner",
        _ => "any agent",
    }
}

/// The closest name within a small edit distance.
fn did_you_mean<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(name, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min()
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        let names = ["calculator", "researcher", "sentiment"];
        assert_eq!(did_you_mean("calcualtor", &names), Some("calculator"));
        assert_eq!(did_you_mean("researchr", &names), Some("researcher"));
        assert_eq!(did_you_mean("billing", &names), None);
    }
}

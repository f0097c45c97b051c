//! `soorma agents` and `soorma card`: what the registry knows.

use std::fmt::Write as _;

use soorma::a2a::{CardBuilder, CardError};
use soorma::registry::Requirements;
use soorma::{AgentDefinition, AgentKind};

use crate::CliError;
use crate::output::{out, outln};
use crate::platform::connect;

/// `soorma agents [--json]`: prints every registered agent of the shared platform.
pub async fn list(json: bool) -> Result<(), CliError> {
    let connected = connect("agents").await?;
    let agents = connected
        .platform
        .discovery()
        .discover(&Requirements::new())
        .await?;
    if json {
        let text = serde_json::to_string_pretty(&agents).map_err(|source| CliError::Json {
            what: "the agent definitions",
            source,
        })?;
        outln!("{text}")
    } else {
        out!("{}", render_agents(&agents, &connected.url))
    }
}

/// `soorma agents --check [--json]`: every request a registered agent sends that no registered
/// agent consumes; an error (exit status 1) when there is one.
pub async fn check(json: bool) -> Result<(), CliError> {
    let connected = connect("agents --check").await?;
    let discovery = connected.platform.discovery();
    let agents = discovery.discover(&Requirements::new()).await?;
    let missing = soorma::registry::unconsumed_requests(&agents);
    if json {
        let text = serde_json::to_string_pretty(&missing).map_err(|source| CliError::Json {
            what: "the wiring check",
            source,
        })?;
        outln!("{text}")?;
    } else {
        out!("{}", render_check(&agents, &missing, &connected.url))?;
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(CliError::Unwired {
            count: missing.len(),
        })
    }
}

/// The report of `soorma agents --check`.
///
/// ```
/// use soorma::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
/// use soorma::registry::unconsumed_requests;
///
/// let worker = AgentDefinition::new("r-1", "researcher", AgentKind::Worker)
///     .with_requested_event("search.requested")
///     .with_requested_event("summary.requested");
/// let search = AgentCapability::new("search", EventDefinition::new("search.requested", Topic::ActionRequests));
/// let tool = AgentDefinition::new("s-1", "search", AgentKind::Tool).with_capability(search);
/// let agents = [worker, tool];
/// let text = soorma_cli::agents::render_check(&agents, &unconsumed_requests(&agents), "nats://x");
/// assert!(text.contains("`researcher` requests `summary.requested`, which no registered agent consumes"));
/// assert!(text.contains("1 of 2 requests"));
/// ```
pub fn render_check(
    agents: &[AgentDefinition],
    missing: &[soorma::registry::UnconsumedRequest],
    url: &str,
) -> String {
    let requests: usize = agents.iter().map(|a| a.requested_events.len()).sum();
    let mut out = String::new();
    if missing.is_empty() {
        let _ = writeln!(
            out,
            "{url}: {} agent(s); every one of the {requests} request(s) they send has a consumer",
            agents.len()
        );
        return out;
    }
    for m in missing {
        let _ = writeln!(out, "✗ {m}");
    }
    let _ = writeln!(
        out,
        "{url}: {} of {requests} requests have no consumer; start the agents that serve them \
         (or fix the event names)",
        missing.len()
    );
    out
}

/// The wire name of a kind (`tool`).
///
/// ```
/// assert_eq!(soorma_cli::agents::kind_name(soorma::AgentKind::Worker), "worker");
/// ```
pub fn kind_name(kind: AgentKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{kind:?}").to_lowercase())
}

/// The human-readable listing `soorma agents` prints: per agent its name, kind, version, id,
/// description, and each capability as its consumed event (with the task name when it differs)
/// and description.
///
/// ```
/// use soorma::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
///
/// let add = AgentCapability::new("add", EventDefinition::new("add.requested", Topic::ActionRequests))
///     .with_description("Adds two numbers.");
/// let calc = AgentDefinition::new("calc-1", "calculator", AgentKind::Tool)
///     .with_version("1.0.0")
///     .with_capability(add);
/// let text = soorma_cli::agents::render_agents(&[calc], "nats://127.0.0.1:4222");
/// assert!(text.contains("calculator (tool) v1.0.0"));
/// assert!(text.contains("id:          calc-1"));
/// assert!(text.contains("capability:  add.requested (task add): Adds two numbers."));
/// ```
pub fn render_agents(agents: &[AgentDefinition], url: &str) -> String {
    let mut out = String::new();
    if agents.is_empty() {
        let _ = writeln!(
            out,
            "No agents are registered on {url}. Agents register when they start (with \
             SOORMA_NATS_URL set) and drop out about 30 s after they stop."
        );
        return out;
    }
    let count = agents.len();
    let plural = if count == 1 { "" } else { "s" };
    let _ = writeln!(out, "{count} agent{plural} registered on {url}");
    for agent in agents {
        let _ = writeln!(
            out,
            "\n{} ({}) v{}",
            agent.name,
            kind_name(agent.kind),
            agent.version
        );
        let _ = writeln!(out, "  id:          {}", agent.agent_id);
        if !agent.description.is_empty() {
            let _ = writeln!(out, "  description: {}", agent.description);
        }
        if let Some(tenant) = &agent.tenant_id {
            let _ = writeln!(out, "  tenant:      {tenant}");
        }
        for cap in &agent.capabilities {
            let event = &cap.consumed_event.event_name;
            let _ = write!(out, "  capability:  {event}");
            if cap.task_name != *event {
                let _ = write!(out, " (task {})", cap.task_name);
            }
            if !cap.description.is_empty() {
                let _ = write!(out, ": {}", cap.description);
            }
            out.push('\n');
        }
        for event in &agent.consumed_events {
            let _ = writeln!(out, "  listens to:  {} ({})", event.event_name, event.topic);
        }
        if agent.capabilities.is_empty() && agent.consumed_events.is_empty() {
            let _ = writeln!(out, "  (no capabilities)");
        }
    }
    out
}

/// `soorma card <agent> --url <gateway-url> [--v0-3]`: prints the A2A card of a registered
/// agent.
pub async fn card(name: &str, url: &str, v0_3: bool) -> Result<(), CliError> {
    if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() <= "https://".len()
    {
        return Err(CliError::BadUrl(url.to_owned()));
    }
    let connected = connect("card").await?;
    let agents = connected
        .platform
        .discovery()
        .discover(&Requirements::new())
        .await?;
    let def = find_agent(&agents, name, &connected.url)?;
    let text = card_json(def, url, v0_3)?;
    outln!("{text}")
}

/// The first registered instance of the agent called `name` (instances are sorted by id),
/// or [`CliError::UnknownAgent`] listing the registered names.
pub fn find_agent<'a>(
    agents: &'a [AgentDefinition],
    name: &str,
    url: &str,
) -> Result<&'a AgentDefinition, CliError> {
    agents.iter().find(|a| a.name == name).ok_or_else(|| {
        let mut registered: Vec<String> = agents.iter().map(|a| a.name.clone()).collect();
        registered.dedup();
        CliError::UnknownAgent {
            name: name.to_owned(),
            registered,
            url: url.to_owned(),
        }
    })
}

/// The agent's A2A card (v1.0, or the v0.3.0 rendering) as pretty JSON.
///
/// ```
/// use soorma::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
///
/// let add = AgentCapability::new("add", EventDefinition::new("add.requested", Topic::ActionRequests));
/// let calc = AgentDefinition::new("calc-1", "calculator", AgentKind::Tool).with_capability(add);
/// let card: serde_json::Value =
///     serde_json::from_str(&soorma_cli::agents::card_json(&calc, "https://a.example/a2a", false).unwrap()).unwrap();
/// assert_eq!(card["skills"][0]["id"], "add.requested");
/// ```
pub fn card_json(def: &AgentDefinition, url: &str, v0_3: bool) -> Result<String, CliError> {
    let card = CardBuilder::new(def, url).build().map_err(|e| match e {
        CardError::MissingRequired { field } if field == "skills" => CliError::Card(format!(
            "agent `{}` has no capabilities (only raw event handlers), so it offers no A2A skill \
             and has no card; cards describe tools and workers",
            def.name
        )),
        other => CliError::Card(format!("cannot build the card of `{}`: {other}", def.name)),
    })?;
    let text = if v0_3 {
        serde_json::to_string_pretty(&card.to_v0_3())
    } else {
        serde_json::to_string_pretty(&card)
    };
    text.map_err(|source| CliError::Json {
        what: "the card",
        source,
    })
}

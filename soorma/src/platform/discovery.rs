//! Discovery: queries over the registry (by capability, consumed or produced event, kind, name).

use serde_json::Value;
use soorma_common::{AgentCapability, AgentDefinition, AgentKind, EventDefinition};

use crate::error::Result;
use crate::spi::registry::Registry;

/// Discovery queries over a [`Registry`].
///
/// ```
/// # async fn demo() -> soorma::Result<()> {
/// let platform = soorma::Platform::embedded();
/// let tools = platform.discovery().by_consumed_event("calculate.requested").await?;
/// assert!(tools.is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Discovery {
    registry: std::sync::Arc<dyn Registry>,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery").finish_non_exhaustive()
    }
}

/// A request an agent sends (and waits for the reply to) that no registered agent consumes:
/// its delegations fail with "no agent consumes" until a consumer runs.
///
/// ```
/// use soorma::{AgentDefinition, AgentKind};
/// use soorma::registry::unconsumed_requests;
///
/// let researcher = AgentDefinition::new("r-1", "researcher", AgentKind::Worker)
///     .with_requested_event("search.requested");
/// let missing = unconsumed_requests(&[researcher]);
/// assert_eq!(missing[0].event, "search.requested");
/// assert_eq!(missing[0].to_string(), "`researcher` requests `search.requested`, which no registered agent consumes");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct UnconsumedRequest {
    /// The requesting agent's name.
    pub agent: String,
    /// The request event.
    pub event: String,
    /// The requesting agent's tenant, if it serves one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

impl std::fmt::Display for UnconsumedRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` requests `{}`, which no registered agent consumes",
            self.agent, self.event
        )?;
        if let Some(tenant) = &self.tenant {
            write!(f, " for tenant `{tenant}`")?;
        }
        Ok(())
    }
}

/// Every request the `agents` send that none of them consumes (for the requester's tenant),
/// once per agent name and event, sorted.
pub fn unconsumed_requests(agents: &[AgentDefinition]) -> Vec<UnconsumedRequest> {
    let consumes = |a: &AgentDefinition, event: &str| {
        a.capabilities
            .iter()
            .map(|c| &c.consumed_event)
            .chain(a.consumed_events.iter())
            .any(|e| e.event_name == event && e.topic == soorma_common::Topic::ActionRequests)
    };
    let mut found: Vec<UnconsumedRequest> = Vec::new();
    for agent in agents {
        for event in &agent.requested_events {
            let served = agents.iter().any(|c| {
                consumes(c, event)
                    && match (&c.tenant_id, &agent.tenant_id) {
                        (None, _) => true,
                        (Some(ct), Some(at)) => ct == at,
                        (Some(_), None) => false,
                    }
            });
            let missing = UnconsumedRequest {
                agent: agent.name.clone(),
                event: event.clone(),
                tenant: agent.tenant_id.clone(),
            };
            if !served && !found.contains(&missing) {
                found.push(missing);
            }
        }
    }
    found.sort_by(|a, b| (&a.agent, &a.event).cmp(&(&b.agent, &b.event)));
    found
}

impl Discovery {
    /// The requests registered agents send that no registered agent consumes (see
    /// [`unconsumed_requests`]); `soorma agents --check` prints them.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let platform = soorma::Platform::embedded();
    /// assert!(platform.discovery().unconsumed_requests().await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn unconsumed_requests(&self) -> Result<Vec<UnconsumedRequest>> {
        Ok(unconsumed_requests(&self.registry.agents().await?))
    }

    pub(crate) fn new(registry: std::sync::Arc<dyn Registry>) -> Self {
        Self { registry }
    }

    /// Agents with a capability named `task_name`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
    ///
    /// let platform = soorma::Platform::embedded();
    /// let add = AgentCapability::new("add", EventDefinition::new("add.requested", Topic::ActionRequests));
    /// let calc = AgentDefinition::new("calc-1", "calculator", AgentKind::Tool).with_capability(add);
    /// platform.registry().register(calc).await?;
    /// assert_eq!(platform.discovery().by_capability("add").await?[0].name, "calculator");
    /// # Ok(()) }
    /// ```
    pub async fn by_capability(&self, task_name: &str) -> Result<Vec<AgentDefinition>> {
        self.filter(|c| c.task_name == task_name).await
    }

    /// Agents with a capability consuming `event_name`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
    ///
    /// let platform = soorma::Platform::embedded();
    /// let add = AgentCapability::new("add", EventDefinition::new("add.requested", Topic::ActionRequests));
    /// let calc = AgentDefinition::new("calc-1", "calculator", AgentKind::Tool).with_capability(add);
    /// platform.registry().register(calc).await?;
    /// let found = platform.discovery().by_consumed_event("add.requested").await?;
    /// assert_eq!(found[0].agent_id, "calc-1");
    /// # Ok(()) }
    /// ```
    pub async fn by_consumed_event(&self, event_name: &str) -> Result<Vec<AgentDefinition>> {
        self.filter(|c| c.consumed_event.event_name == event_name)
            .await
    }

    /// Every registered agent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::{AgentDefinition, AgentKind};
    ///
    /// let platform = soorma::Platform::embedded();
    /// platform.registry().register(AgentDefinition::new("log-1", "audit-log", AgentKind::Agent)).await?;
    /// assert_eq!(platform.discovery().all().await?.len(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn all(&self) -> Result<Vec<AgentDefinition>> {
        self.registry.agents().await
    }

    /// Agents meeting every requirement, sorted by name (instances of one agent by id).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::registry::Requirements;
    /// use soorma::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
    ///
    /// let platform = soorma::Platform::embedded();
    /// let add = AgentCapability::new("add", EventDefinition::new("add.requested", Topic::ActionRequests));
    /// let calc = AgentDefinition::new("calc-1", "calculator", AgentKind::Tool).with_capability(add);
    /// platform.registry().register(calc).await?;
    ///
    /// let found = platform.discovery().discover(&Requirements::new().consumes("add.requested").kind(AgentKind::Tool)).await?;
    /// assert_eq!(found[0].name, "calculator");
    /// assert!(platform.discovery().discover(&Requirements::new().capability("divide")).await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn discover(&self, requirements: &Requirements) -> Result<Vec<AgentDefinition>> {
        let mut found: Vec<AgentDefinition> = self
            .registry
            .agents()
            .await?
            .into_iter()
            .filter(|a| requirements.matches(a))
            .collect();
        found.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then_with(|| a.agent_id.cmp(&b.agent_id))
        });
        Ok(found)
    }

    /// The capability named `task_name` (or consuming the event `task_name`) of the first
    /// registered agent offering it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
    ///
    /// let platform = soorma::Platform::embedded();
    /// let add = AgentCapability::new("add", EventDefinition::new("add.requested", Topic::ActionRequests))
    ///     .with_description("Adds two numbers.");
    /// platform.registry().register(AgentDefinition::new("calc-1", "calculator", AgentKind::Tool).with_capability(add)).await?;
    /// let cap = platform.discovery().capability("add").await?.unwrap();
    /// assert_eq!(cap.consumed_event.event_name, "add.requested");
    /// assert_eq!(platform.discovery().capability("add.requested").await?.unwrap().task_name, "add");
    /// # Ok(()) }
    /// ```
    pub async fn capability(&self, task_name: &str) -> Result<Option<AgentCapability>> {
        let agents = self.discover(&Requirements::new()).await?;
        let by_name = |c: &&AgentCapability| c.task_name == task_name;
        let by_event = |c: &&AgentCapability| c.consumed_event.event_name == task_name;
        let caps = || agents.iter().flat_map(|a| a.capabilities.iter());
        Ok(caps()
            .find(by_name)
            .or_else(|| caps().find(by_event))
            .cloned())
    }

    /// The JSON Schema of the payload a capability (by task name or consumed event) accepts.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Add { a: f64, b: f64 }
    /// async fn add(req: Invocation<Add>) -> Result<f64, ToolError> { Ok(req.data.a + req.data.b) }
    ///
    /// let platform = Platform::embedded();
    /// let tool = Tool::new("adder").use_registered_handlers(false)
    ///     .handler(Handler::on_invoke("add.requested", add)).start(&platform).await?;
    /// let schema = platform.discovery().request_schema("add.requested").await?.unwrap();
    /// assert_eq!(schema["required"], serde_json::json!(["a", "b"]));
    /// let reply = platform.discovery().response_schema("add.requested").await?.unwrap();
    /// assert_eq!(reply["type"], "number");
    /// # tool.shutdown().await }
    /// ```
    pub async fn request_schema(&self, capability: &str) -> Result<Option<Value>> {
        Ok(self
            .capability(capability)
            .await?
            .and_then(|c| c.consumed_event.payload_schema))
    }

    /// The JSON Schema of the `result` a capability's successful reply carries.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let platform = soorma::Platform::embedded();
    /// assert!(platform.discovery().response_schema("nobody.requested").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn response_schema(&self, capability: &str) -> Result<Option<Value>> {
        Ok(self
            .capability(capability)
            .await?
            .and_then(|c| c.consumed_event.response_schema))
    }

    async fn filter(&self, f: impl Fn(&AgentCapability) -> bool) -> Result<Vec<AgentDefinition>> {
        Ok(self
            .registry
            .agents()
            .await?
            .into_iter()
            .filter(|a| a.capabilities.iter().any(&f))
            .collect())
    }
}

/// What [`Discovery::discover`] looks for; every requirement set must hold.
///
/// ```
/// use soorma::registry::Requirements;
/// use soorma::AgentKind;
///
/// let wanted = Requirements::new().capability("summarize").kind(AgentKind::Tool);
/// # let _ = wanted;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Requirements {
    /// A capability with this task name.
    pub capability: Option<String>,
    /// An agent consuming this event (a capability's request, or a consumed event).
    pub consumes: Option<String>,
    /// An agent producing this event.
    pub produces: Option<String>,
    /// Agents of this kind.
    pub kind: Option<AgentKind>,
    /// Agents with this name.
    pub name: Option<String>,
}

impl Requirements {
    /// No requirements: every agent.
    ///
    /// ```
    /// assert_eq!(soorma::registry::Requirements::new(), Default::default());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires a capability with this task name.
    ///
    /// ```
    /// let r = soorma::registry::Requirements::new().capability("add");
    /// assert_eq!(r.capability.as_deref(), Some("add"));
    /// ```
    #[must_use]
    pub fn capability(mut self, task_name: impl Into<String>) -> Self {
        self.capability = Some(task_name.into());
        self
    }

    /// Requires consuming this event.
    ///
    /// ```
    /// let r = soorma::registry::Requirements::new().consumes("add.requested");
    /// assert_eq!(r.consumes.as_deref(), Some("add.requested"));
    /// ```
    #[must_use]
    pub fn consumes(mut self, event_name: impl Into<String>) -> Self {
        self.consumes = Some(event_name.into());
        self
    }

    /// Requires producing this event.
    ///
    /// ```
    /// let r = soorma::registry::Requirements::new().produces("order.shipped");
    /// assert_eq!(r.produces.as_deref(), Some("order.shipped"));
    /// ```
    #[must_use]
    pub fn produces(mut self, event_name: impl Into<String>) -> Self {
        self.produces = Some(event_name.into());
        self
    }

    /// Requires this kind of agent.
    ///
    /// ```
    /// let r = soorma::registry::Requirements::new().kind(soorma::AgentKind::Worker);
    /// assert_eq!(r.kind, Some(soorma::AgentKind::Worker));
    /// ```
    #[must_use]
    pub fn kind(mut self, kind: AgentKind) -> Self {
        self.kind = Some(kind);
        self
    }

    /// Requires this agent name.
    ///
    /// ```
    /// let r = soorma::registry::Requirements::new().name("calculator");
    /// assert_eq!(r.name.as_deref(), Some("calculator"));
    /// ```
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Whether `agent` meets every requirement.
    ///
    /// ```
    /// use soorma::{AgentDefinition, AgentKind};
    /// let calc = AgentDefinition::new("calc-1", "calculator", AgentKind::Tool);
    /// assert!(soorma::registry::Requirements::new().kind(AgentKind::Tool).matches(&calc));
    /// assert!(!soorma::registry::Requirements::new().capability("add").matches(&calc));
    /// ```
    pub fn matches(&self, agent: &AgentDefinition) -> bool {
        fn event_is(name: &str) -> impl Fn(&EventDefinition) -> bool + '_ {
            move |e| e.event_name == name
        }
        self.kind.is_none_or(|k| agent.kind == k)
            && self.name.as_deref().is_none_or(|n| agent.name == n)
            && self
                .capability
                .as_deref()
                .is_none_or(|t| agent.capabilities.iter().any(|c| c.task_name == t))
            && self.consumes.as_deref().is_none_or(|e| {
                agent
                    .capabilities
                    .iter()
                    .map(|c| &c.consumed_event)
                    .any(event_is(e))
                    || agent.consumed_events.iter().any(event_is(e))
            })
            && self.produces.as_deref().is_none_or(|e| {
                agent
                    .capabilities
                    .iter()
                    .flat_map(|c| c.produced_events.iter())
                    .any(event_is(e))
            })
    }
}

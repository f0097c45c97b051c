//! Agents: collect handlers, subscribe, dispatch events, reply, shut down gracefully.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use soorma_common::{
    ActionReply, AgentCapability, AgentDefinition, AgentKind, EventDefinition, EventEnvelope, Topic,
};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::bus::{Delivery, EventFilter, Settlement, SubscriptionSpec};
use crate::error::{Error, Result};
use crate::extract::{AgentRuntime, Extensions, HandlerInput};
use crate::handler::{Failure, Handler, HandlerKind, registered_for};
use crate::platform::Platform;
use crate::task::fail_task;
use crate::util::{CatchUnwind, new_id};

/// Raw event handlers (`#[on_event]`): the base layer.
///
/// ```
/// let agent = soorma::Agent::new("audit-log");
/// # let _ = agent;
/// ```
#[derive(Debug)]
pub struct Agent;

impl Agent {
    /// A builder for an agent named `name`.
    ///
    /// ```
    /// let agent = soorma::Agent::new("audit-log");
    /// assert_eq!(agent.definition().kind, soorma::AgentKind::Agent);
    /// ```
    #[allow(clippy::new_ret_no_self)]
    pub fn new(name: impl Into<String>) -> AgentBuilder {
        AgentBuilder::new(name, AgentKind::Agent)
    }
}

/// Request → reply tools (`#[on_invoke]`).
///
/// ```no_run
/// # async fn demo() -> soorma::Result<()> {
/// let platform = soorma::Platform::from_env().await?;
/// soorma::Tool::new("calculator").version("1.0.0").run(&platform).await
/// # }
/// ```
#[derive(Debug)]
pub struct Tool;

impl Tool {
    /// A builder for a tool named `name`.
    ///
    /// ```
    /// let tool = soorma::Tool::new("calculator");
    /// assert_eq!(tool.definition().kind, soorma::AgentKind::Tool);
    /// ```
    #[allow(clippy::new_ret_no_self)]
    pub fn new(name: impl Into<String>) -> AgentBuilder {
        AgentBuilder::new(name, AgentKind::Tool)
    }
}

/// Asynchronous task workers (`#[on_task]`, `#[on_result]`).
///
/// ```
/// let worker = soorma::Worker::new("researcher").version("0.3.0");
/// # let _ = worker;
/// ```
#[derive(Debug)]
pub struct Worker;

impl Worker {
    /// A builder for a worker named `name`.
    ///
    /// ```
    /// let worker = soorma::Worker::new("researcher");
    /// assert_eq!(worker.definition().kind, soorma::AgentKind::Worker);
    /// ```
    #[allow(clippy::new_ret_no_self)]
    pub fn new(name: impl Into<String>) -> AgentBuilder {
        AgentBuilder::new(name, AgentKind::Worker)
    }
}

/// Goal-driven planners (`#[on_goal]`, `#[on_transition]`); see [`crate::planner`].
///
/// ```
/// let planner = soorma::planner::Planner::new("research-planner");
/// assert_eq!(planner.definition().kind, soorma::AgentKind::Planner);
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct Planner;

impl Planner {
    /// A builder for a planner named `name`. Without an `#[on_transition]` handler, the planner
    /// advances its plans with [`PlanContext::execute_next`](crate::planner::PlanContext::execute_next).
    ///
    /// ```
    /// let planner = soorma::planner::Planner::new("research-planner");
    /// # let _ = planner;
    /// ```
    #[allow(clippy::new_ret_no_self)]
    pub fn new(name: impl Into<String>) -> AgentBuilder {
        AgentBuilder::new(name, AgentKind::Planner)
    }
}

const DEFAULT_CONCURRENCY: usize = 1024;
const DEFAULT_MAX_DELIVER: u32 = 5;

/// Configures and starts an agent of any layer.
///
/// Handlers come from the attribute macros (those naming this agent with `agent = "..."`, and
/// those naming no agent) and from [`handler`](Self::handler).
///
/// ```
/// use soorma::prelude::*;
///
/// #[derive(Clone)]
/// struct Config { greeting: String }
///
/// async fn greet(req: Invocation<String>, State(cfg): State<Config>) -> Result<String, ToolError> {
///     Ok(format!("{} {}", cfg.greeting, req.data))
/// }
///
/// let tool = Tool::new("greeter")
///     .version("1.0.0")
///     .description("Greets people.")
///     .with_state(Config { greeting: "hello".into() })
///     .handler(Handler::on_invoke("greet.requested", greet));
/// assert_eq!(tool.name(), "greeter");
/// ```
#[must_use = "an agent does nothing until started"]
pub struct AgentBuilder {
    name: String,
    kind: AgentKind,
    version: String,
    description: String,
    tenant: Option<String>,
    handlers: Vec<Handler>,
    from_inventory: bool,
    extensions: Extensions,
    concurrency: usize,
    max_deliver: u32,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("handlers", &self.handlers)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    /// A builder for an agent of `kind`.
    ///
    /// ```
    /// use soorma::{AgentBuilder, AgentKind};
    /// let planner = AgentBuilder::new("trip-planner", AgentKind::Planner);
    /// assert_eq!(planner.definition().kind, AgentKind::Planner);
    /// ```
    pub fn new(name: impl Into<String>, kind: AgentKind) -> Self {
        Self {
            name: name.into(),
            kind,
            version: "0.0.0".into(),
            description: String::new(),
            tenant: None,
            handlers: Vec::new(),
            from_inventory: true,
            extensions: Extensions::default(),
            concurrency: DEFAULT_CONCURRENCY,
            max_deliver: DEFAULT_MAX_DELIVER,
        }
    }

    /// The agent's name.
    ///
    /// ```
    /// assert_eq!(soorma::Tool::new("calculator").name(), "calculator");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the version published to the registry.
    ///
    /// ```
    /// let tool = soorma::Tool::new("calculator").version("1.2.0");
    /// assert_eq!(tool.definition().version, "1.2.0");
    /// ```
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Sets the description published to the registry.
    ///
    /// ```
    /// let tool = soorma::Tool::new("calculator").description("Evaluates arithmetic.");
    /// assert_eq!(tool.definition().description, "Evaluates arithmetic.");
    /// ```
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Serves only events of `tenant` (default: every tenant).
    ///
    /// ```
    /// let tool = soorma::Tool::new("calculator").tenant("acme");
    /// assert_eq!(tool.definition().tenant_id.as_deref(), Some("acme"));
    /// ```
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Attaches typed state, read by handlers through [`State<S>`](crate::State).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn limit(_: Invocation, State(max): State<u32>) -> Result<u32, ToolError> {
    ///     Ok(max)
    /// }
    ///
    /// let platform = Platform::embedded();
    /// let tool = Tool::new("limits").use_registered_handlers(false).with_state(10_u32)
    ///     .handler(Handler::on_invoke("limit.requested", limit)).start(&platform).await?;
    /// let max: u32 = platform.client("docs").invoke("limit.requested", (), "limit.completed").await?;
    /// assert_eq!(max, 10);
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn with_state<S: Clone + Send + Sync + 'static>(mut self, state: S) -> Self {
        self.extensions.insert(state);
        self
    }

    /// Adds a handler built at run time.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn ping(_: Invocation) -> Result<String, ToolError> {
    ///     Ok("pong".into())
    /// }
    ///
    /// let tool = Tool::new("pinger").handler(Handler::on_invoke("ping.requested", ping));
    /// assert_eq!(tool.definition().capabilities[0].task_name, "ping.requested");
    /// ```
    pub fn handler(mut self, handler: Handler) -> Self {
        self.handlers.push(handler);
        self
    }

    /// Whether to include the handlers registered by the attribute macros (default `true`).
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// #[on_invoke("hello.requested", agent = "hello-docs")]
    /// async fn hello(_: Invocation) -> Result<String, ToolError> {
    ///     Ok("hi".into())
    /// }
    ///
    /// # fn main() {
    /// assert_eq!(Tool::new("hello-docs").definition().capabilities.len(), 1);
    /// let bare = Tool::new("hello-docs").use_registered_handlers(false);
    /// assert!(bare.definition().capabilities.is_empty());
    /// # }
    /// ```
    pub fn use_registered_handlers(mut self, yes: bool) -> Self {
        self.from_inventory = yes;
        self
    }

    /// How many events the agent handles at once (default 1024).
    ///
    /// ```
    /// // Render at most 4 documents at a time.
    /// let worker = soorma::Worker::new("renderer").concurrency(4);
    /// # let _ = worker;
    /// ```
    pub fn concurrency(mut self, limit: usize) -> Self {
        self.concurrency = limit.max(1);
        self
    }

    /// How many times a retryable failure is redelivered before dead-lettering (default 5).
    ///
    /// ```
    /// // Dead-letter an event after its third retryable failure.
    /// let agent = soorma::Agent::new("audit-log").max_deliver(3);
    /// # let _ = agent;
    /// ```
    pub fn max_deliver(mut self, attempts: u32) -> Self {
        self.max_deliver = attempts.max(1);
        self
    }

    fn collect_handlers(&self) -> Vec<Handler> {
        let mut all = self.handlers.clone();
        if self.from_inventory {
            all.extend(registered_for(&self.name));
        }
        all
    }

    /// The registry definition the agent publishes: capabilities with their schemas.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn add(req: Invocation<(i64, i64)>) -> Result<i64, ToolError> {
    ///     Ok(req.data.0 + req.data.1)
    /// }
    ///
    /// let tool = Tool::new("calculator").handler(Handler::on_invoke("add.requested", add));
    /// let def = tool.definition();
    /// assert_eq!(def.capabilities[0].consumed_event.event_name, "add.requested");
    /// assert!(def.capabilities[0].consumed_event.response_schema.is_some());
    /// ```
    pub fn definition(&self) -> AgentDefinition {
        definition(
            &self.name,
            self.kind,
            &self.version,
            &self.description,
            self.tenant.as_deref(),
            &self.collect_handlers(),
            String::new(),
        )
    }

    /// Starts the agent: subscribes, registers, and handles events until shut down.
    ///
    /// Fails if no handler was found or the handlers are inconsistent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn ping(_: Invocation) -> Result<String, ToolError> { Ok("pong".into()) }
    ///
    /// let platform = Platform::embedded();
    /// let tool = Tool::new("pinger").use_registered_handlers(false)
    ///     .handler(Handler::on_invoke("ping.requested", ping))
    ///     .start(&platform).await?;
    /// assert_eq!(platform.discovery().by_consumed_event("ping.requested").await?.len(), 1);
    /// # tool.shutdown().await?;
    /// let idle = Tool::new("idle").use_registered_handlers(false);
    /// assert!(idle.start(&platform).await.is_err()); // no handlers
    /// # Ok(()) }
    /// ```
    pub async fn start(self, platform: &Platform) -> Result<AgentHandle> {
        let mut handlers = self.collect_handlers();
        if handlers.iter().any(|h| h.kind == HandlerKind::Goal)
            && !handlers.iter().any(|h| h.kind == HandlerKind::Transition)
        {
            handlers.push(Handler::on_transition(advance_plan));
        }
        if handlers.is_empty() {
            return Err(Error::NoHandlers { agent: self.name });
        }
        let mut problems = Vec::new();
        let mut table = Table::default();
        for h in &handlers {
            for check in &h.checks {
                if let Err(p) = check(&self.extensions) {
                    problems.push(format!("{}: {p}", h.label()));
                }
            }
            let slot = if h.event == "*" {
                table.wildcard.insert(h.topic, Arc::new(h.clone()))
            } else {
                table
                    .exact
                    .entry(h.topic)
                    .or_default()
                    .insert(h.event.clone(), Arc::new(h.clone()))
            };
            if let Some(previous) = slot {
                problems.push(format!(
                    "{} and {} both handle `{}` on `{}`",
                    previous.label(),
                    h.label(),
                    h.event,
                    h.topic
                ));
            }
        }
        if !problems.is_empty() {
            return Err(Error::Misconfigured {
                agent: self.name,
                problems,
            });
        }

        let agent_id = format!("{}-{}", self.name, &new_id()[16..24]);
        let def = definition(
            &self.name,
            self.kind,
            &self.version,
            &self.description,
            self.tenant.as_deref(),
            &handlers,
            agent_id.clone(),
        );
        let runtime = Arc::new(AgentRuntime {
            name: Arc::from(self.name.as_str()),
            kind: self.kind,
            platform: platform.clone(),
            extensions: self.extensions,
            bus: platform.bus_client(&self.name),
        });

        let mut filters: BTreeMap<Topic, EventFilter> = BTreeMap::new();
        for h in &handlers {
            let f = if h.event == "*" {
                EventFilter::All
            } else {
                EventFilter::only([h.event.clone()])
            };
            let merged = match filters.get(&h.topic) {
                Some(existing) => existing.union(&f),
                None => f,
            };
            filters.insert(h.topic, merged);
        }

        let (stop_tx, stop_rx) = watch::channel(false);
        let inflight = Arc::new(Semaphore::new(self.concurrency));
        let table = Arc::new(table);
        let mut loops = Vec::new();
        for (topic, filter) in filters {
            let mut spec = SubscriptionSpec::new(self.name.clone(), topic, filter);
            if let Some(t) = &self.tenant {
                spec = spec.with_tenant(t.clone());
            }
            let sub = platform.bus().subscribe(spec).await?;
            loops.push(tokio::spawn(dispatch_loop(
                sub,
                runtime.clone(),
                table.clone(),
                inflight.clone(),
                stop_rx.clone(),
                self.max_deliver,
            )));
        }
        platform.registry().register(def.clone()).await?;
        if matches!(self.kind, AgentKind::Planner | AgentKind::Worker) {
            // Human-input timers of an instance that stopped fire from here on.
            let tenant = self
                .tenant
                .as_deref()
                .unwrap_or(soorma_common::DEFAULT_TENANT);
            match crate::planner::recover_timers(platform, tenant).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(agent = %self.name, timers = n, "pending timers restored"),
                Err(e) => {
                    tracing::warn!(agent = %self.name, error = %e, "could not restore pending timers")
                }
            }
        }
        tracing::info!(agent = %self.name, agent_id = %agent_id, handlers = handlers.len(), "agent started");
        Ok(AgentHandle {
            definition: def,
            platform: platform.clone(),
            stop: stop_tx,
            loops,
            inflight,
            capacity: self.concurrency,
        })
    }

    /// Starts the agent and serves until Ctrl-C / SIGTERM, then shuts down gracefully.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let platform = soorma::Platform::from_env().await?;
    /// soorma::Worker::new("researcher").run(&platform).await // until Ctrl-C or SIGTERM
    /// # }
    /// ```
    pub async fn run(self, platform: &Platform) -> Result<()> {
        self.start(platform).await?.shutdown_on_signal().await
    }
}

/// The transition handler of planners that define none.
async fn advance_plan(mut plan: crate::planner::PlanContext) -> Result<()> {
    plan.execute_next().await
}

pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        ) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; waiting for Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The name of the event a tool's reply schema is published under (the caller picks the
/// actual reply event name; this documents the schema).
fn produced_event_name(event: &str) -> String {
    match event.strip_suffix(".requested") {
        Some(stem) => format!("{stem}.completed"),
        None => format!("{event}.completed"),
    }
}

/// The schema of a reply envelope's `data` whose `result` follows `result_schema`.
fn reply_schema(result_schema: Value) -> Value {
    let mut result = result_schema;
    let defs = result.as_object_mut().and_then(|o| {
        o.remove("$schema");
        o.remove("$defs")
    });
    let mut schema = json!({
        "type": "object",
        "properties": {
            "request_id": {"type": "string"},
            "success": {"type": "boolean"},
            "result": result,
            "error": {"type": "string"}
        },
        "required": ["request_id", "success"]
    });
    if let Some(defs) = defs {
        schema["$defs"] = defs;
    }
    schema
}

fn definition(
    name: &str,
    kind: AgentKind,
    version: &str,
    description: &str,
    tenant: Option<&str>,
    handlers: &[Handler],
    agent_id: String,
) -> AgentDefinition {
    let mut def = AgentDefinition::new(agent_id, name, kind)
        .with_version(version)
        .with_description(description);
    if let Some(t) = tenant {
        def = def.with_tenant_id(t);
    }
    for h in handlers {
        let desc = h.description.clone().unwrap_or_default();
        let consumed = EventDefinition::new(&h.event, h.topic)
            .with_description(desc.clone())
            .with_payload_schema(h.payload_schema.get());
        match h.kind {
            HandlerKind::Transition => {}
            HandlerKind::Invoke | HandlerKind::Task | HandlerKind::Goal => {
                let mut consumed = consumed;
                let mut cap_produced =
                    EventDefinition::new(produced_event_name(&h.event), Topic::ActionResults)
                        .with_description(format!(
                            "Reply to `{}` (the caller names the event; this is its schema)",
                            h.event
                        ));
                if let Some(response) = &h.response_schema {
                    let result = response.get();
                    consumed = consumed.with_response_schema(result.clone());
                    cap_produced = cap_produced.with_payload_schema(reply_schema(result));
                } else {
                    cap_produced =
                        cap_produced.with_payload_schema(reply_schema(Value::Bool(true)));
                }
                let task_name = h.name.clone().unwrap_or_else(|| h.event.clone());
                def = def.with_capability(
                    AgentCapability::new(task_name, consumed)
                        .with_description(desc)
                        .with_produced_event(cap_produced),
                );
            }
            HandlerKind::Event | HandlerKind::Result => def = def.with_consumed_event(consumed),
        }
    }
    def
}

#[derive(Default)]
struct Table {
    exact: HashMap<Topic, HashMap<String, Arc<Handler>>>,
    wildcard: HashMap<Topic, Arc<Handler>>,
}

impl Table {
    fn find(&self, topic: Topic, event_type: &str) -> Option<&Arc<Handler>> {
        self.exact
            .get(&topic)
            .and_then(|m| m.get(event_type))
            .or_else(|| self.wildcard.get(&topic))
    }
}

async fn dispatch_loop(
    mut sub: Box<dyn crate::bus::Subscription>,
    runtime: Arc<AgentRuntime>,
    table: Arc<Table>,
    inflight: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
    max_deliver: u32,
) {
    loop {
        let delivery = tokio::select! {
            biased;
            _ = stop.changed() => break,
            d = sub.next() => match d {
                Some(d) => d,
                None => break,
            },
        };
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            break;
        };
        let runtime = runtime.clone();
        let table = table.clone();
        tokio::spawn(async move {
            handle_delivery(runtime, table, delivery, max_deliver).await;
            drop(permit);
        });
    }
    // Dropping the subscription stops delivery to this instance; other instances keep serving.
    drop(sub);
}

async fn handle_delivery(
    runtime: Arc<AgentRuntime>,
    table: Arc<Table>,
    delivery: Delivery,
    max_deliver: u32,
) {
    let env = delivery.envelope.clone();
    let Some(handler) = table.find(env.topic, &env.event_type).cloned() else {
        tracing::debug!(agent = %runtime.name, event_type = %env.event_type, "no handler for event; acknowledged");
        settle(delivery, Settlement::Ack).await;
        return;
    };
    let span = tracing::info_span!(
        "soorma.handle",
        agent = %runtime.name,
        event_type = %env.event_type,
        correlation_id = env.correlation_id.as_deref().unwrap_or(""),
        event_id = %env.id,
        handler = handler.kind.attribute(),
    );
    async move {
        let input = HandlerInput { envelope: env.clone(), runtime: runtime.clone() };
        // A slow handler keeps its delivery alive, so the platform does not hand the event to
        // another instance while this one is still working on it.
        let outcome = delivery
            .keep_alive_while(CatchUnwind((handler.call)(input.clone())))
            .await;
        let settlement = match outcome {
            Ok(Ok(value)) => {
                if handler.kind == HandlerKind::Invoke {
                    let value = value.unwrap_or(Value::Null);
                    let reply = ActionReply::success(&env.id, value);
                    reply_or_retry(&input, reply, delivery.attempt, max_deliver).await
                } else {
                    Settlement::Ack
                }
            }
            Ok(Err(Failure::Decode(err))) => {
                tracing::warn!(error = %err, "rejected event: payload does not match the handler's type");
                if env.response_event.is_some()
                    && let Err(e) = send_reply(&input, ActionReply::failure(&env.id, err.to_string())).await
                {
                    tracing::error!(error = %e, "could not publish the error reply");
                }
                dead_letter(&input, err.to_string(), delivery.attempt).await
            }
            Ok(Err(Failure::Handler { message, retryable })) => {
                on_handler_error(&input, handler.kind, message, retryable, delivery.attempt, max_deliver).await
            }
            Err(panic) => {
                let message = format!("handler panicked: {panic}");
                tracing::error!(%message, "handler panicked; the agent keeps serving");
                on_handler_error(&input, handler.kind, message, false, delivery.attempt, max_deliver).await
            }
        };
        settle(delivery, settlement).await;
    }
    .instrument(span)
    .await;
}

async fn on_handler_error(
    input: &HandlerInput,
    kind: HandlerKind,
    message: String,
    retryable: bool,
    attempt: u32,
    max_deliver: u32,
) -> Settlement {
    // A transient failure (the platform briefly unreachable, a lost revision race, a
    // `ToolError::retryable()`) is redelivered while attempts remain; handlers are re-entrant
    // (sub-task ids are derived from the event, publishes are de-duplicated by event id).
    if retryable && attempt < max_deliver {
        tracing::warn!(error = %message, attempt, "transient handler failure; redelivering");
        return retry_or_dead_letter(input, message, retryable, attempt, max_deliver).await;
    }
    match kind {
        HandlerKind::Invoke => {
            tracing::info!(error = %message, "tool returned an error; replying with it");
            let reply = ActionReply::failure(&input.envelope.id, message);
            reply_or_retry(input, reply, attempt, max_deliver).await
        }
        HandlerKind::Task => {
            tracing::warn!(error = %message, "task handler failed; failing the task");
            match fail_task(input, message).await {
                Ok(_) => Settlement::Ack,
                Err(e) => {
                    tracing::error!(error = %e, "could not record the task failure");
                    retry_or_dead_letter(
                        input,
                        e.to_string(),
                        e.is_retryable(),
                        attempt,
                        max_deliver,
                    )
                    .await
                }
            }
        }
        HandlerKind::Goal | HandlerKind::Transition => {
            tracing::warn!(error = %message, "planner handler failed; failing the plan");
            match crate::planner::fail_plan(input, message.clone(), kind == HandlerKind::Goal).await
            {
                Ok(true) => Settlement::Ack,
                Ok(false) => {
                    retry_or_dead_letter(input, message, false, attempt, max_deliver).await
                }
                Err(e) => {
                    tracing::error!(error = %e, "could not record the plan failure");
                    retry_or_dead_letter(
                        input,
                        e.to_string(),
                        e.is_retryable(),
                        attempt,
                        max_deliver,
                    )
                    .await
                }
            }
        }
        HandlerKind::Event | HandlerKind::Result => {
            tracing::warn!(error = %message, retryable, attempt, "handler failed");
            retry_or_dead_letter(input, message, retryable, attempt, max_deliver).await
        }
    }
}

async fn retry_or_dead_letter(
    input: &HandlerInput,
    reason: String,
    retryable: bool,
    attempt: u32,
    max_deliver: u32,
) -> Settlement {
    if retryable && attempt < max_deliver {
        let delay = Duration::from_millis(50u64.saturating_mul(1 << attempt.min(8)));
        Settlement::Retry { delay }
    } else {
        dead_letter(input, reason, attempt).await
    }
}

/// Publishes `event.dead_lettered` on `system-events` and returns the dead-letter settlement.
async fn dead_letter(input: &HandlerInput, reason: String, attempt: u32) -> Settlement {
    let env = &input.envelope;
    let data = json!({
        "event_id": env.id,
        "event_type": env.event_type,
        "topic": env.topic,
        "agent": &*input.runtime.name,
        "reason": reason,
        "attempt": attempt,
    });
    if let Err(e) = input
        .bus()
        .publish(Topic::SystemEvents, "event.dead_lettered", data)
        .await
    {
        tracing::error!(error = %e, "could not publish the dead-letter notice");
    }
    Settlement::DeadLetter { reason }
}

/// Publishes a tool's reply; the request is acknowledged only once the reply is stored, so a
/// failed publish (the platform briefly unreachable) redelivers the request instead of losing
/// the reply.
async fn reply_or_retry(
    input: &HandlerInput,
    reply: ActionReply,
    attempt: u32,
    max_deliver: u32,
) -> Settlement {
    match send_reply(input, reply).await {
        Ok(()) => Settlement::Ack,
        Err(e) => {
            tracing::warn!(error = %e, attempt, "could not publish the reply; redelivering the request");
            retry_or_dead_letter(input, e.to_string(), e.is_retryable(), attempt, max_deliver).await
        }
    }
}

/// Publishes `reply` on the request's `response_event` (nothing to do when none is named).
pub(crate) async fn send_reply(input: &HandlerInput, reply: ActionReply) -> Result<()> {
    let env: &EventEnvelope = &input.envelope;
    let Some(response_event) = env.response_event.clone() else {
        tracing::warn!(event_type = %env.event_type, "request named no response_event; reply dropped");
        return Ok(());
    };
    let bus = input.bus();
    let data = serde_json::to_value(reply).map_err(|e| Error::serialize("reply", e))?;
    let mut out = bus.envelope(env.reply_topic(), response_event, data);
    // One reply per request: a redelivered request's reply keeps the id, so the bus drops it.
    out.id = format!("{}-reply", env.id);
    out.correlation_id = Some(env.correlation_id.clone().unwrap_or_else(|| env.id.clone()));
    bus.publish_envelope(out).await
}

async fn settle(delivery: Delivery, settlement: Settlement) {
    if let Err(e) = delivery.settle(settlement).await {
        tracing::warn!(error = %e, "could not settle delivery");
    }
}

/// A running agent. [`shutdown`](Self::shutdown) stops taking events and waits for the
/// handlers in flight.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::prelude::*;
///
/// async fn audit(event: Event) {
///     println!("saw {}", event.event_type());
/// }
///
/// let platform = Platform::embedded();
/// let handle = Agent::new("auditor").use_registered_handlers(false)
///     .handler(Handler::on_event(Topic::BusinessFacts, "*", audit))
///     .start(&platform).await?;
/// assert_eq!(handle.name(), "auditor");
/// handle.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AgentHandle {
    definition: AgentDefinition,
    platform: Platform,
    stop: watch::Sender<bool>,
    loops: Vec<JoinHandle<()>>,
    inflight: Arc<Semaphore>,
    capacity: usize,
}

impl AgentHandle {
    /// Serves until Ctrl-C / SIGTERM, then shuts down gracefully (in-flight handlers finish).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let platform = soorma::Platform::from_env().await?;
    /// let worker = soorma::Worker::new("researcher").start(&platform).await?;
    /// println!("ready"); // the agent's consumers exist from here on
    /// worker.shutdown_on_signal().await
    /// # }
    /// ```
    pub async fn shutdown_on_signal(self) -> Result<()> {
        shutdown_signal().await;
        tracing::info!(agent = %self.definition.name, "shutdown requested");
        self.shutdown().await
    }

    /// The agent's name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// # async fn ping(_: Invocation) -> Result<String, ToolError> { Ok("pong".into()) }
    /// # let platform = Platform::embedded();
    /// let handle = Tool::new("pinger").use_registered_handlers(false)
    ///     .handler(Handler::on_invoke("ping.requested", ping))
    ///     .start(&platform).await?;
    /// assert_eq!(handle.name(), "pinger");
    /// # handle.shutdown().await?; Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.definition.name
    }

    /// The registry definition the agent published.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// # async fn ping(_: Invocation) -> Result<String, ToolError> { Ok("pong".into()) }
    /// # let platform = Platform::embedded();
    /// let handle = Tool::new("pinger").use_registered_handlers(false)
    ///     .handler(Handler::on_invoke("ping.requested", ping))
    ///     .start(&platform).await?;
    /// // Each running instance gets its own id.
    /// assert!(handle.definition().agent_id.starts_with("pinger-"));
    /// # handle.shutdown().await?; Ok(()) }
    /// ```
    pub fn definition(&self) -> &AgentDefinition {
        &self.definition
    }

    /// Stops taking events, lets in-flight handlers finish, and deregisters.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// # async fn ping(_: Invocation) -> Result<String, ToolError> { Ok("pong".into()) }
    /// let platform = Platform::embedded();
    /// let handle = Tool::new("pinger").use_registered_handlers(false)
    ///     .handler(Handler::on_invoke("ping.requested", ping))
    ///     .start(&platform).await?;
    /// handle.shutdown().await?;
    /// assert!(platform.discovery().all().await?.is_empty()); // deregistered
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        for l in self.loops {
            if let Err(e) = l.await {
                tracing::warn!(error = %e, "dispatch loop ended abnormally");
            }
        }
        // Every permit back = no handler in flight.
        let _all = self
            .inflight
            .acquire_many(u32::try_from(self.capacity).unwrap_or(u32::MAX))
            .await;
        self.platform
            .registry()
            .deregister(&self.definition.agent_id)
            .await?;
        tracing::info!(agent = %self.definition.name, "agent stopped");
        Ok(())
    }
}

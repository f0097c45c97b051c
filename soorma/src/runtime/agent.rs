//! Agents: collect handlers, check them, subscribe, register, and shut down gracefully.

use std::collections::BTreeMap;
use std::sync::Arc;

use soorma_common::events::CANCEL_REQUESTED;
use soorma_common::{AgentDefinition, AgentKind, Topic};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use super::cancel::{InFlight, cancel_loop};
use super::definition::definition;
use super::dispatch::{self, Table, dispatch_loop};
use super::extract::{AgentRuntime, Extensions};
use super::handler::{Assemble, CancelHook, Handler, StartHook, registered_for};
use super::service::{HandlerError, HandlerRequest, HandlerResponse, HandlerService, UserLayer};
use crate::error::{Error, Result};
use crate::platform::Platform;
use crate::spi::bus::{DEFAULT_MAX_DELIVER, EventFilter, SubscriptionSpec};
use crate::spi::tenant::validate_tenant;
use crate::util::{new_id, shutdown_signal};

const DEFAULT_CONCURRENCY: usize = 1024;

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
    layers: Vec<UserLayer>,
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
            layers: Vec::new(),
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

    /// Serves only events of `tenant` (default: every tenant). An invalid tenant id (see
    /// [`validate_tenant`](crate::validate_tenant)) makes [`start`](Self::start) fail with
    /// [`Error::InvalidArgument`].
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

    /// Adds several handlers: those of annotated functions listed with
    /// [`handlers!`](crate::handlers), or any built at run time.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn ping(_: Invocation) -> Result<String, ToolError> { Ok("pong".into()) }
    /// async fn echo(req: Invocation<String>) -> Result<String, ToolError> { Ok(req.data) }
    ///
    /// let tool = Tool::new("utils").use_registered_handlers(false).handlers(vec![
    ///     Handler::on_invoke("ping.requested", ping),
    ///     Handler::on_invoke("echo.requested", echo),
    /// ]);
    /// assert_eq!(tool.definition().capabilities.len(), 2);
    /// ```
    pub fn handlers(mut self, handlers: impl IntoIterator<Item = Handler>) -> Self {
        self.handlers.extend(handlers);
        self
    }

    /// The agent's kind.
    ///
    /// ```
    /// assert_eq!(soorma::Worker::new("w").kind(), soorma::AgentKind::Worker);
    /// ```
    pub fn kind(&self) -> AgentKind {
        self.kind
    }

    /// The handlers given with [`handler`](Self::handler) / [`handlers`](Self::handlers).
    pub(crate) fn listed_handlers(&self) -> &[Handler] {
        &self.handlers
    }

    pub(crate) fn uses_registered_handlers(&self) -> bool {
        self.from_inventory
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

    /// The most events one agent handles at once: the upper bound of
    /// [`concurrency`](Self::concurrency).
    pub const MAX_CONCURRENCY: usize = dispatch::MAX_CONCURRENCY;

    /// How many events the agent handles at once (default 1024; 1 to
    /// [`MAX_CONCURRENCY`](Self::MAX_CONCURRENCY), else [`start`](Self::start) fails with
    /// [`Error::Misconfigured`]). At the limit the agent takes no more events from the bus until
    /// a handler finishes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # use soorma::prelude::*;
    /// # async fn render(_: TaskContext) {}
    /// // Render at most 4 documents at a time.
    /// let worker = soorma::Worker::new("renderer").concurrency(4);
    /// # let _ = worker;
    /// let none = Worker::new("renderer").use_registered_handlers(false)
    ///     .handler(Handler::on_task("render.requested", render)).concurrency(0);
    /// let err = none.start(&Platform::embedded()).await.unwrap_err();
    /// assert!(matches!(err, soorma::Error::Misconfigured { .. }));
    /// # }
    /// ```
    pub fn concurrency(mut self, limit: usize) -> Self {
        self.concurrency = limit;
        self
    }

    /// How many times an event is delivered at most: a retryable failure is redelivered until
    /// then, and dead-lettered after (default 5; at least 1, else [`start`](Self::start) fails
    /// with [`Error::Misconfigured`]). On NATS it is also the durable consumer's `max_deliver`:
    /// an event whose last delivery fails in any way (a handler's retryable error, a dead
    /// letter that cannot be stored yet) is dead-lettered, never dropped or redelivered for ever.
    ///
    /// ```
    /// // Dead-letter an event after its third retryable failure.
    /// let agent = soorma::Agent::new("audit-log").max_deliver(3);
    /// # let _ = agent;
    /// ```
    pub fn max_deliver(mut self, attempts: u32) -> Self {
        self.max_deliver = attempts;
        self
    }

    /// Wraps the agent's handlers in a [`tower::Layer`](crate::dispatch::tower::Layer): metrics,
    /// authorization, rate limits, timeouts... The layer's service sees one
    /// [`HandlerRequest`](crate::dispatch::HandlerRequest) per handled event (the envelope, the
    /// agent, the handler kind, the attempt) and returns the handler's
    /// [`HandlerResponse`](crate::dispatch::HandlerResponse) or a
    /// [`HandlerError`](crate::dispatch::HandlerError). An error (a rejection) is settled like a
    /// handler failure: a tool replies with it, a task fails, a retryable one is redelivered,
    /// anything else is dead-lettered. A panic in a layer is caught like a handler's.
    ///
    /// Layers wrap the handlers in the order they are added: the last one added runs first
    /// (as in axum). As in axum, the layer's service must be `Clone`: each of the agent's
    /// subscriptions (one per topic) calls a clone, so keep shared state behind an `Arc` (tower's
    /// clonable middleware, such as `ConcurrencyLimit`, does). Readiness propagates: while a
    /// layer's `poll_ready` is pending, the agent takes no more events from the bus; an error
    /// from `poll_ready` (a broken service, in tower's contract) stops the agent's dispatch.
    ///
    /// A layer counting every handled event:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use soorma::dispatch::{HandlerRequest, tower::util::MapRequestLayer};
    /// use soorma::prelude::*;
    ///
    /// async fn ping(_: Invocation) -> Result<String, ToolError> { Ok("pong".into()) }
    ///
    /// let handled = Arc::new(AtomicUsize::new(0));
    /// let count = handled.clone();
    /// let platform = Platform::embedded();
    /// let tool = Tool::new("pinger").use_registered_handlers(false)
    ///     .handler(Handler::on_invoke("ping.requested", ping))
    ///     .layer(MapRequestLayer::new(move |req: HandlerRequest| {
    ///         count.fetch_add(1, Ordering::Relaxed);
    ///         req
    ///     }))
    ///     .start(&platform).await?;
    /// let pong: String = platform.client("docs").invoke("ping.requested", (), "ping.done").await?;
    /// assert_eq!((pong.as_str(), handled.load(Ordering::Relaxed)), ("pong", 1));
    /// # tool.shutdown().await }
    /// ```
    ///
    /// A layer rejecting events of anonymous users (a tool replies with the rejection):
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::dispatch::tower::{ServiceExt, layer::layer_fn, service_fn};
    /// use soorma::dispatch::{HandlerError, HandlerRequest, HandlerService};
    /// use soorma::prelude::*;
    ///
    /// async fn whoami(req: Invocation) -> Result<String, ToolError> {
    ///     Ok(req.user_id().unwrap_or_default().to_owned())
    /// }
    ///
    /// let platform = Platform::embedded();
    /// let tool = Tool::new("accounts").use_registered_handlers(false)
    ///     .handler(Handler::on_invoke("whoami.requested", whoami))
    ///     .layer(layer_fn(|inner: HandlerService| {
    ///         service_fn(move |req: HandlerRequest| {
    ///             let inner = inner.clone();
    ///             async move {
    ///                 if req.envelope().user_id.is_none() {
    ///                     return Err(HandlerError::new("sign in first"));
    ///                 }
    ///                 inner.oneshot(req).await
    ///             }
    ///         })
    ///     }))
    ///     .start(&platform).await?;
    /// let client = platform.client("docs");
    /// let denied = client.invoke::<String>("whoami.requested", (), "whoami.done").await;
    /// assert!(denied.unwrap_err().to_string().contains("sign in first"));
    /// let me: String = client.with_user("ann").invoke("whoami.requested", (), "whoami.done").await?;
    /// assert_eq!(me, "ann");
    /// # tool.shutdown().await }
    /// ```
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<HandlerService> + Send + Sync + 'static,
        L::Service: tower::Service<HandlerRequest, Response = HandlerResponse, Error = HandlerError>
            + Clone
            + Send
            + 'static,
        <L::Service as tower::Service<HandlerRequest>>::Future: Send + 'static,
    {
        self.layers.push(Arc::new(move |inner| {
            HandlerService::new(layer.layer(inner))
        }));
        self
    }

    /// The listed handlers, then (unless turned off) the attribute-registered ones for this
    /// agent that are not listed already.
    fn collect_handlers(&self) -> Vec<Handler> {
        let mut all = self.handlers.clone();
        if self.from_inventory {
            let listed = |h: &Handler| {
                h.fn_name.is_some()
                    && self.handlers.iter().any(|l| {
                        l.fn_name == h.fn_name && l.module == h.module && l.event == h.event
                    })
            };
            all.extend(
                registered_for(&self.name, self.kind)
                    .into_iter()
                    .filter(|h| !listed(h)),
            );
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
        let (handlers, _, _) = assemble(&self.name, self.collect_handlers());
        definition(
            &self.name,
            self.kind,
            &self.version,
            &self.description,
            self.tenant.as_deref(),
            &handlers,
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
        if let Some(tenant) = &self.tenant {
            validate_tenant(tenant)?;
        }
        let collected = self.collect_handlers();
        claim_unnamed(&self.name, &collected[self.handlers.len()..])?;
        let (handlers, wiring, mut problems) = assemble(&self.name, collected);
        if handlers.is_empty() {
            return Err(Error::NoHandlers { agent: self.name });
        }
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
        problems.extend(dispatch::limit_problems(self.concurrency, self.max_deliver));
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
            wiring,
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
        let running = Arc::new(InFlight::default());
        let service = dispatch::stack(
            runtime.clone(),
            Arc::new(table),
            inflight.clone(),
            running.clone(),
            self.max_deliver,
            &self.layers,
        );
        let mut loops = Vec::new();
        // Cancel requests: a subscription of this instance's own (each instance sees each one).
        let mut spec = SubscriptionSpec::new(
            format!("{agent_id}-cancel"),
            Topic::SystemEvents,
            EventFilter::only([CANCEL_REQUESTED]),
        )
        .ephemeral();
        if let Some(t) = &self.tenant {
            spec = spec.with_tenant(t.clone());
        }
        let cancels = platform.bus().subscribe(spec).await?;
        let mut cancel_hooks: Vec<CancelHook> = Vec::new();
        for hook in handlers.iter().filter_map(|h| h.on_cancel) {
            if !cancel_hooks.iter().any(|h| std::ptr::fn_addr_eq(*h, hook)) {
                cancel_hooks.push(hook);
            }
        }
        // Stopped after the handlers in flight have finished, so they can still be canceled
        // while the agent shuts down.
        let (cancel_stop, cancel_stop_rx) = watch::channel(false);
        let canceler = tokio::spawn(cancel_loop(
            cancels,
            running,
            runtime.clone(),
            cancel_hooks,
            cancel_stop_rx,
        ));
        for (topic, filter) in filters {
            let mut spec = SubscriptionSpec::new(self.name.clone(), topic, filter)
                .with_max_deliver(self.max_deliver)
                .with_prefetch(self.concurrency);
            if let Some(t) = &self.tenant {
                spec = spec.with_tenant(t.clone());
            }
            let sub = platform.bus().subscribe(spec).await?;
            loops.push(tokio::spawn(dispatch_loop(
                sub,
                service.clone(),
                stop_rx.clone(),
            )));
        }
        platform.registry().register(def.clone()).await?;
        // What the handlers' layers need once per start (e.g. restoring durable timers).
        let mut hooks: Vec<StartHook> = Vec::new();
        for hook in handlers.iter().filter_map(|h| h.on_start) {
            if !hooks.iter().any(|h| std::ptr::fn_addr_eq(*h, hook)) {
                hooks.push(hook);
            }
        }
        for hook in hooks {
            hook(platform).await;
        }
        tracing::info!(agent = %self.name, agent_id = %agent_id, handlers = handlers.len(), "agent started");
        Ok(AgentHandle {
            definition: def,
            platform: platform.clone(),
            stop: stop_tx,
            loops,
            cancel_stop,
            canceler,
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

/// The agent that took the attribute-registered handlers naming no agent, in this process.
static UNNAMED_TAKEN_BY: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Handlers naming no agent join the one agent a process starts from them: a second agent of
/// another name taking them, or unnamed handlers from several crates (a linked library's and
/// the application's), is an error rather than a silent join.
fn claim_unnamed(agent: &str, handlers: &[Handler]) -> Result<()> {
    let unnamed: Vec<&Handler> = handlers
        .iter()
        .filter(|h| h.fn_name.is_some() && h.named_agent.is_none())
        .collect();
    if unnamed.is_empty() {
        return Ok(());
    }
    let crates: std::collections::BTreeSet<&str> = unnamed
        .iter()
        .filter_map(|h| h.module)
        .map(|m| m.split("::").next().unwrap_or(m))
        .collect();
    if crates.len() > 1 {
        return Err(Error::Misconfigured {
            agent: agent.to_owned(),
            problems: vec![format!(
                "handlers naming no agent come from several crates ({}): {}; name their agent (`agent = \"...\"`) or list them with `handlers![..]`",
                crates.iter().copied().collect::<Vec<_>>().join(", "),
                describe(&unnamed)
            )],
        });
    }
    let mut taken = UNNAMED_TAKEN_BY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match taken.as_deref() {
        Some(other) if other != agent => Err(Error::Misconfigured {
            agent: agent.to_owned(),
            problems: vec![format!(
                "{} name no agent and already serve `{other}` in this process; name their agent (`agent = \"...\"`), or group the agents with `Agents` and list each one's handlers with `handlers![..]`",
                describe(&unnamed)
            )],
        }),
        _ => {
            *taken = Some(agent.to_owned());
            Ok(())
        }
    }
}

fn describe(handlers: &[&Handler]) -> String {
    handlers
        .iter()
        .map(|h| h.label())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs each layer's assembly of the handlers once (see [`Assemble`]): the handlers to serve,
/// what the layers recorded about them, and the problems they found.
fn assemble(agent: &str, mut handlers: Vec<Handler>) -> (Vec<Handler>, Extensions, Vec<String>) {
    let mut hooks: Vec<Assemble> = Vec::new();
    for hook in handlers.iter().filter_map(|h| h.assemble) {
        if !hooks.iter().any(|h| std::ptr::fn_addr_eq(*h, hook)) {
            hooks.push(hook);
        }
    }
    let mut wiring = Extensions::default();
    let mut problems = Vec::new();
    for hook in hooks {
        problems.extend(hook(agent, &mut handlers, &mut wiring));
    }
    (handlers, wiring, problems)
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
    /// Stops the cancel-request listener ([`cancel_loop`]).
    cancel_stop: watch::Sender<bool>,
    canceler: JoinHandle<()>,
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
        let _ = self.cancel_stop.send(true);
        if let Err(e) = self.canceler.await {
            tracing::warn!(error = %e, "cancel listener ended abnormally");
        }
        self.platform
            .registry()
            .deregister(&self.definition.agent_id)
            .await?;
        tracing::info!(agent = %self.definition.name, "agent stopped");
        Ok(())
    }
}

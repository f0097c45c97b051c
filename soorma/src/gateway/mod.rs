//! The A2A gateway (feature `gateway`): agents on the platform behind A2A v1.0 JSON-RPC.
//!
//! Every agent behind the gateway has an agent card at
//! `/agents/<name>/.well-known/agent-card.json` and a JSON-RPC interface at `/agents/<name>`;
//! the first agent added is the default, whose card is also served at
//! `/.well-known/agent-card.json` (and, rendered for A2A v0.3 clients, at the legacy
//! `/.well-known/agent.json`).
//!
//! Methods: `SendMessage` (waits for the reply up to [`Gateway::wait`], or returns at once with
//! `configuration.returnImmediately`), `SendStreamingMessage` and `SubscribeToTask`
//! (server-sent events: the task, progress as status updates, the result artifact and the
//! final status), `GetTask`, `ListTasks`, `CancelTask`.
//!
//! A message becomes an action request on the chosen skill's event: text parts are joined into
//! `data.text`, data parts (objects) are merged into `data`. The skill is `metadata.skillId`
//! (a skill id is the consumed event), else the agent's only skill, else the one skill whose
//! input schema the data matches. The reply becomes the task's status and a `result` artifact;
//! an error reply fails the task; a payload its schema rejects is `TASK_STATE_REJECTED`.
//! A2A v0.3 clients are served on the same interface (`message/send`, `tasks/get`, ...), and
//! JSON-RPC batches are answered per request.
//!
//! Tasks belong to the caller that started them ([`Caller`]: the principal its credentials
//! name through [`GatewayAuth`], and its tenant); no one else sees them. Replies count only
//! from the task's tenant and agent. What the gateway keeps and runs is bounded by
//! [`TaskLimits`]. See `docs/security.md` for the threat model.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
//! use soorma::gateway::Gateway;
//!
//! let platform = soorma::Platform::from_env().await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?; // io::Error converts
//! Gateway::new(&platform).agent("calculator").serve(listener).await
//! # }
//! ```

mod auth;
mod methods;
mod rpc;
mod skills;
mod stream;
mod tasks;
mod v0_3;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use soorma_common::AgentDefinition;
use soorma_common::a2a::{AgentCard, CardBuilder};
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::http::{Admission, ErrorStyle, HttpConfig, HttpServer};
use crate::platform::Platform;
use crate::platform::discovery::Requirements;
use crate::platform::snapshot::AgentsSnapshot;
use crate::protocol::publish::BusClient;
use crate::spi::bus::{EventFilter, SubscriptionSpec};
use crate::util::new_id;
use auth::Admitted;
pub use auth::{BearerVerifier, Caller, GatewayAuth};
use methods::rpc;
pub use tasks::TaskLimits;
use tasks::TaskTable;

/// An A2A gateway in front of agents on a platform.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::gateway::Gateway;
/// use std::time::Duration;
///
/// let platform = soorma::Platform::embedded();
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// let gateway = Gateway::new(&platform)
///     .agent("calculator")
///     .wait(Duration::from_secs(10))
///     .spawn(listener)
///     .await?;
/// assert!(gateway.url().starts_with("http://127.0.0.1:"));
/// gateway.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a gateway does nothing until served"]
pub struct Gateway {
    platform: Platform,
    agents: Vec<String>,
    public_url: Option<String>,
    auth: Option<GatewayAuth>,
    wait: Duration,
    task_timeout: Duration,
    limits: TaskLimits,
    provider: Option<(String, String)>,
    http: HttpConfig,
}

impl Gateway {
    /// A gateway for agents on `platform` (add them with [`agent`](Self::agent)).
    ///
    /// ```
    /// let gateway = soorma::gateway::Gateway::new(&soorma::Platform::embedded());
    /// # let _ = gateway;
    /// ```
    pub fn new(platform: &Platform) -> Self {
        Self {
            platform: platform.clone(),
            agents: Vec::new(),
            public_url: None,
            auth: None,
            wait: Duration::from_secs(30),
            task_timeout: Duration::from_secs(3600),
            limits: TaskLimits::default(),
            provider: None,
            http: HttpConfig::default(),
        }
    }

    /// Serves the agent registered as `name`; the first one added is the default agent.
    ///
    /// ```
    /// let g = soorma::gateway::Gateway::new(&soorma::Platform::embedded()).agent("calculator").agent("researcher");
    /// # let _ = g;
    /// ```
    pub fn agent(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        if !self.agents.contains(&name) {
            self.agents.push(name);
        }
        self
    }

    /// The URL clients reach the gateway at, used in the cards (default: `http://<bound address>`).
    ///
    /// ```
    /// let g = soorma::gateway::Gateway::new(&soorma::Platform::embedded()).public_url("https://agents.example.com");
    /// # let _ = g;
    /// ```
    pub fn public_url(mut self, url: impl Into<String>) -> Self {
        self.public_url = Some(url.into().trim_end_matches('/').to_owned());
        self
    }

    /// Requires clients to authenticate (declared in the cards, enforced on JSON-RPC calls).
    ///
    /// ```
    /// use soorma::gateway::{Gateway, GatewayAuth};
    /// let g = Gateway::new(&soorma::Platform::embedded()).auth(GatewayAuth::bearer("t"));
    /// # let _ = g;
    /// ```
    pub fn auth(mut self, auth: GatewayAuth) -> Self {
        self.auth = Some(auth);
        self
    }

    /// How long `SendMessage` waits for the reply before returning the task still working
    /// (default 30 s; the task goes on, `GetTask` shows its outcome).
    ///
    /// ```
    /// let g = soorma::gateway::Gateway::new(&soorma::Platform::embedded()).wait(std::time::Duration::from_secs(5));
    /// # let _ = g;
    /// ```
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// How long a task may take before it fails for want of a reply (default 1 h).
    ///
    /// ```
    /// let g = soorma::gateway::Gateway::new(&soorma::Platform::embedded()).task_timeout(std::time::Duration::from_secs(600));
    /// # let _ = g;
    /// ```
    pub fn task_timeout(mut self, timeout: Duration) -> Self {
        self.task_timeout = timeout;
        self
    }

    /// How many tasks the gateway keeps and runs at once, and how many bytes they may hold
    /// (see [`TaskLimits`] for the defaults).
    ///
    /// ```
    /// use soorma::gateway::{Gateway, TaskLimits};
    /// let g = Gateway::new(&soorma::Platform::embedded()).limits(TaskLimits::default().max_in_flight(32));
    /// # let _ = g;
    /// ```
    pub fn limits(mut self, limits: TaskLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The organization named as provider in the cards.
    ///
    /// ```
    /// let g = soorma::gateway::Gateway::new(&soorma::Platform::embedded()).provider("Example Corp", "https://example.com");
    /// # let _ = g;
    /// ```
    pub fn provider(mut self, organization: impl Into<String>, url: impl Into<String>) -> Self {
        self.provider = Some((organization.into(), url.into()));
        self
    }

    /// The HTTP server's limits and checks: allowed `Host`s, timeouts, body size, connections
    /// (default [`HttpConfig::default`]: loopback hosts only when bound to loopback).
    ///
    /// ```
    /// use soorma::http::HttpConfig;
    /// let g = soorma::gateway::Gateway::new(&soorma::Platform::embedded())
    ///     .http(HttpConfig::default().allowed_host("agents.example.com"));
    /// # let _ = g;
    /// ```
    pub fn http(mut self, config: HttpConfig) -> Self {
        self.http = config;
        self
    }

    /// Serves on `listener` in the background; see [`GatewayHandle`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    /// let gateway = soorma::gateway::Gateway::new(&soorma::Platform::embedded()).agent("a").spawn(listener).await?;
    /// gateway.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn spawn(self, listener: tokio::net::TcpListener) -> Result<GatewayHandle> {
        if self.agents.is_empty() {
            return Err(Error::InvalidArgument(
                "a gateway needs at least one agent: Gateway::new(&platform).agent(\"name\")"
                    .into(),
            ));
        }
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Config(format!("gateway listener: {e}")))?;
        let url = self
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{addr}"));
        let http_config = self.http.clone();
        let (state, background) = GatewayState::start(self, url.clone()).await?;
        let stopping = state.stopping.clone();
        let admission: Admission = match state.gateway.auth.clone() {
            Some(auth) => Box::new(move |routes: Router| {
                routes.layer(axum::middleware::from_fn_with_state(
                    Arc::new(auth),
                    auth::admit,
                ))
            }),
            None => Box::new(|routes| routes),
        };
        let http = HttpServer::spawn(
            listener,
            router(state),
            admission,
            &http_config,
            ErrorStyle::Plain,
            "A2A gateway",
            move || {
                stopping.send_replace(true);
            },
        )
        .map_err(|e| Error::Config(format!("gateway listener: {e}")))?;
        tracing::info!(%url, "A2A gateway listening");
        Ok(GatewayHandle {
            addr,
            url,
            http,
            background,
        })
    }

    /// Serves on `listener` until Ctrl-C / SIGTERM.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await.unwrap();
    /// soorma::gateway::Gateway::new(&soorma::Platform::embedded()).agent("calculator").serve(listener).await
    /// # }
    /// ```
    pub async fn serve(self, listener: tokio::net::TcpListener) -> Result<()> {
        let handle = self.spawn(listener).await?;
        crate::util::shutdown_signal().await;
        handle.shutdown().await;
        Ok(())
    }
}

/// A running gateway. Dropping the handle stops it too, without waiting: requests still open
/// get no answer from their agents (use [`shutdown`](Self::shutdown) to let them finish).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// let gateway = soorma::gateway::Gateway::new(&soorma::Platform::embedded()).agent("a").spawn(listener).await?;
/// println!("cards at {}/.well-known/agent-card.json", gateway.url());
/// gateway.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct GatewayHandle {
    addr: SocketAddr,
    url: String,
    http: HttpServer,
    background: Background,
}

/// The gateway's background tasks (reply and progress routing, task expiry): they end with
/// its handle, stopped or dropped, or when it fails to start.
#[derive(Debug)]
struct Background(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Background {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl GatewayHandle {
    /// The address the gateway listens on.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    /// # let gateway = soorma::gateway::Gateway::new(&soorma::Platform::embedded()).agent("a").spawn(listener).await?;
    /// assert!(gateway.local_addr().ip().is_loopback());
    /// # gateway.shutdown().await; Ok(()) }
    /// ```
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The gateway's base URL (the public URL when one was set).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    /// # let gateway = soorma::gateway::Gateway::new(&soorma::Platform::embedded()).agent("calc").spawn(listener).await?;
    /// let interface = format!("{}/agents/calc", gateway.url());
    /// # let _ = interface; gateway.shutdown().await; Ok(()) }
    /// ```
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops taking connections, ends open streams (and calls waiting for their task) and
    /// waits for open requests to finish (see [`HttpConfig::stop_timeout`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    /// let gateway = soorma::gateway::Gateway::new(&soorma::Platform::embedded()).agent("a").spawn(listener).await?;
    /// gateway.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(self) {
        self.http.stop().await;
        drop(self.background);
    }
}

struct GatewayState {
    gateway: Gateway,
    bus: BusClient,
    reply_event: String,
    tasks: TaskTable,
    url: String,
    /// Set when the gateway stops: open streams end and waiting calls answer at once.
    stopping: watch::Sender<bool>,
    /// The task streams open per tenant.
    streams: Arc<stream::StreamSlots>,
    /// The registry's agents, read for the cards and calls.
    registry: AgentsSnapshot,
}

/// How old a registry read may be for a card or a call to an agent it lists.
const REGISTRY_FRESH: Duration = Duration::from_secs(1);

/// Why a call to `agent` cannot be served: it is not in the registry.
fn not_running(agent: &str) -> String {
    format!("agent `{agent}` is not running (not in the registry)")
}

/// The definition of `agent` among `agents` (of its instances, the lowest id).
fn find_agent<'a>(agents: &'a [AgentDefinition], agent: &str) -> Option<&'a AgentDefinition> {
    let wanted = Requirements::new().name(agent);
    agents
        .iter()
        .filter(|a| wanted.matches(a))
        .min_by(|a, b| a.agent_id.cmp(&b.agent_id))
}

impl GatewayState {
    /// The state, and its background tasks: reply and progress routing, task expiry. The
    /// reply subscription is in place before any request can be sent.
    async fn start(gateway: Gateway, url: String) -> Result<(Arc<Self>, Background)> {
        let reply_event = format!("a2a-gateway.replied.{}", new_id());
        let spec = SubscriptionSpec::new(
            format!("a2a-gateway-{}", new_id()),
            soorma_common::Topic::ActionResults,
            EventFilter::only([reply_event.as_str()]),
        )
        // The reply event is this gateway's own: listened to like a client's, without a
        // durable consumer that would outlive it.
        .ephemeral();
        let replies = gateway.platform.bus().subscribe(spec).await?;
        let state = Arc::new(Self {
            bus: gateway.platform.bus_client("a2a-gateway"),
            reply_event,
            tasks: TaskTable::new(gateway.limits, gateway.task_timeout),
            streams: stream::StreamSlots::new(gateway.limits.max_streams_per_tenant_value()),
            registry: gateway.platform.agents().clone(),
            url,
            gateway,
            stopping: watch::Sender::new(false),
        });
        let background = Background(vec![
            tokio::spawn(stream::route_replies(state.clone(), replies)),
            tokio::spawn(stream::route_progress(state.clone())),
            tokio::spawn(stream::expire_tasks(state.clone())),
        ]);
        Ok((state, background))
    }

    fn default_agent(&self) -> &str {
        &self.gateway.agents[0]
    }

    fn serves(&self, name: &str) -> bool {
        self.gateway.agents.iter().any(|a| a == name)
    }

    fn interface_url(&self, agent: &str) -> String {
        format!("{}/agents/{agent}", self.url)
    }

    /// The registered definition of `agent` (of its instances, the lowest id): from a registry
    /// read at most [`REGISTRY_FRESH`] old, or, when that read lacks it, one begun after this
    /// call (cards are public: requests share reads instead of each making one).
    /// Also says whether that read began after this call.
    async fn definition(
        &self,
        agent: &str,
    ) -> std::result::Result<(AgentDefinition, bool), String> {
        let asked = Instant::now();
        let read = self
            .registry
            .recent_with(REGISTRY_FRESH, |read| find_agent(read, agent).is_some())
            .await?;
        let def = find_agent(&read, agent).ok_or_else(|| not_running(agent))?;
        Ok((def.clone(), read.began() >= asked))
    }

    /// The registered definition of `agent` from a registry read begun after this call.
    async fn current_definition(
        &self,
        agent: &str,
    ) -> std::result::Result<AgentDefinition, String> {
        find_agent(&self.registry.current().await?, agent)
            .cloned()
            .ok_or_else(|| not_running(agent))
    }

    async fn card(&self, agent: &str) -> std::result::Result<AgentCard, String> {
        let (def, _) = self.definition(agent).await?;
        let mut builder = CardBuilder::new(&def, self.interface_url(agent)).with_streaming(true);
        if let Some((org, url)) = &self.gateway.provider {
            builder = builder.with_provider(org, url);
        }
        builder = match &self.gateway.auth {
            Some(auth) => match auth.api_key_header() {
                Some(header) => builder.with_api_key(header),
                None => builder.with_bearer(),
            },
            None => builder,
        };
        builder.build().map_err(|e| e.to_string())
    }
}

fn router(state: Arc<GatewayState>) -> Router {
    Router::new()
        .route("/.well-known/agent-card.json", get(default_card))
        .route("/.well-known/agent.json", get(default_card_v0_3))
        .route(
            "/agents/{agent}/.well-known/agent-card.json",
            get(agent_card),
        )
        .route(
            "/agents/{agent}/.well-known/agent.json",
            get(agent_card_v0_3),
        )
        .route("/agents/{agent}", post(agent_rpc))
        .route("/", post(default_rpc))
        .with_state(state)
}

fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response {
    (status, axum::Json(body)).into_response()
}

async fn card_response(state: &GatewayState, agent: &str, v0_3: bool) -> Response {
    if !state.serves(agent) {
        return json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": format!("no agent `{agent}` behind this gateway")}),
        );
    }
    match state.card(agent).await {
        Ok(card) if v0_3 => json_response(StatusCode::OK, &card.to_v0_3()),
        Ok(card) => json_response(StatusCode::OK, &card),
        Err(e) => json_response(StatusCode::SERVICE_UNAVAILABLE, &json!({"error": e})),
    }
}

async fn default_card(State(state): State<Arc<GatewayState>>) -> Response {
    card_response(&state, state.default_agent(), false).await
}

async fn default_card_v0_3(State(state): State<Arc<GatewayState>>) -> Response {
    card_response(&state, state.default_agent(), true).await
}

async fn agent_card(State(state): State<Arc<GatewayState>>, Path(agent): Path<String>) -> Response {
    card_response(&state, &agent, false).await
}

async fn agent_card_v0_3(
    State(state): State<Arc<GatewayState>>,
    Path(agent): Path<String>,
) -> Response {
    card_response(&state, &agent, true).await
}

async fn default_rpc(
    State(state): State<Arc<GatewayState>>,
    admitted: Option<Extension<Admitted>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let agent = state.default_agent().to_owned();
    rpc(state, agent, admitted.map(|a| a.0), headers, body).await
}

async fn agent_rpc(
    State(state): State<Arc<GatewayState>>,
    Path(agent): Path<String>,
    admitted: Option<Extension<Admitted>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    rpc(state, agent, admitted.map(|a| a.0), headers, body).await
}

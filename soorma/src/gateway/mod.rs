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

mod rpc;
mod skills;
mod tasks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use soorma_common::a2a::{
    AgentCard, CardBuilder, Message, SendMessageRequest, SendMessageResponse, StreamResponse, Task,
    TaskIdParams, TaskState, TaskStatus,
};
use soorma_common::{AgentDefinition, Topic};
use tokio::sync::broadcast;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::http::HttpServer;
use crate::platform::Platform;
use crate::platform::discovery::Requirements;
use crate::spi::tenant::validate_tenant;
use crate::util::{new_id, now_rfc3339};
use rpc::{RpcError, RpcRequest};
use tasks::{Outcome, TaskTable};

/// How the gateway authenticates clients; declared in every card and enforced on every
/// JSON-RPC call (HTTP 401 otherwise). Cards themselves are public.
///
/// ```
/// use soorma::gateway::GatewayAuth;
/// let auth = GatewayAuth::api_key("X-API-Key", "s3cret");
/// # let _ = auth;
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GatewayAuth {
    /// An API key in a request header.
    ApiKey {
        /// The header name, e.g. `X-API-Key`.
        header: String,
        /// The keys accepted.
        keys: Vec<String>,
    },
    /// `Authorization: Bearer <token>`.
    Bearer {
        /// The tokens accepted.
        tokens: Vec<String>,
    },
}

impl std::fmt::Debug for GatewayAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ApiKey { header, keys } => f
                .debug_struct("ApiKey")
                .field("header", header)
                .field("keys", &format!("<{} hidden>", keys.len()))
                .finish(),
            Self::Bearer { tokens } => f
                .debug_struct("Bearer")
                .field("tokens", &format!("<{} hidden>", tokens.len()))
                .finish(),
        }
    }
}

impl GatewayAuth {
    /// One API key, sent in `header`.
    ///
    /// ```
    /// let auth = soorma::gateway::GatewayAuth::api_key("X-API-Key", "k1");
    /// assert!(format!("{auth:?}").contains("hidden"));
    /// ```
    pub fn api_key(header: impl Into<String>, key: impl Into<String>) -> Self {
        Self::ApiKey {
            header: header.into(),
            keys: vec![key.into()],
        }
    }

    /// One bearer token.
    ///
    /// ```
    /// let auth = soorma::gateway::GatewayAuth::bearer("t0ken");
    /// # let _ = auth;
    /// ```
    pub fn bearer(token: impl Into<String>) -> Self {
        Self::Bearer {
            tokens: vec![token.into()],
        }
    }

    fn allows(&self, headers: &HeaderMap) -> bool {
        match self {
            Self::ApiKey { header, keys } => headers
                .get(header.as_str())
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| keys.iter().any(|k| k == v)),
            Self::Bearer { tokens } => headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .is_some_and(|v| tokens.iter().any(|t| t == v.trim())),
        }
    }

    fn challenge(&self) -> &'static str {
        match self {
            Self::ApiKey { .. } => "ApiKey",
            Self::Bearer { .. } => "Bearer",
        }
    }
}

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
    provider: Option<(String, String)>,
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
            provider: None,
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
        let state = Arc::new(GatewayState {
            client: self
                .platform
                .client("a2a-gateway")
                .with_timeout(self.task_timeout),
            reply_event: format!("a2a-gateway.replied.{}", new_id()),
            tasks: TaskTable::default(),
            url: url.clone(),
            gateway: self,
        });
        let progress = tokio::spawn(route_progress(state.clone()));
        let http = HttpServer::spawn(listener, router(state), "A2A gateway", || {});
        tracing::info!(%url, "A2A gateway listening");
        Ok(GatewayHandle {
            addr,
            url,
            http,
            progress,
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

/// A running gateway.
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
    progress: tokio::task::JoinHandle<()>,
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

    /// Stops taking connections and waits for open requests to finish.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    /// let gateway = soorma::gateway::Gateway::new(&soorma::Platform::embedded()).agent("a").spawn(listener).await?;
    /// gateway.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(self) {
        self.progress.abort();
        self.http.stop().await;
    }
}

struct GatewayState {
    gateway: Gateway,
    client: Client,
    reply_event: String,
    tasks: TaskTable,
    url: String,
}

impl GatewayState {
    fn default_agent(&self) -> &str {
        &self.gateway.agents[0]
    }

    fn serves(&self, name: &str) -> bool {
        self.gateway.agents.iter().any(|a| a == name)
    }

    fn interface_url(&self, agent: &str) -> String {
        format!("{}/agents/{agent}", self.url)
    }

    async fn definition(&self, agent: &str) -> std::result::Result<AgentDefinition, String> {
        let found = self
            .gateway
            .platform
            .discovery()
            .discover(&Requirements::new().name(agent))
            .await
            .map_err(|e| format!("cannot read the registry: {e}"))?;
        found
            .into_iter()
            .next()
            .ok_or_else(|| format!("agent `{agent}` is not running (not in the registry)"))
    }

    async fn card(&self, agent: &str) -> std::result::Result<AgentCard, String> {
        let def = self.definition(agent).await?;
        let mut builder = CardBuilder::new(&def, self.interface_url(agent)).with_streaming(true);
        if let Some((org, url)) = &self.gateway.provider {
            builder = builder.with_provider(org, url);
        }
        builder = match &self.gateway.auth {
            Some(GatewayAuth::ApiKey { header, .. }) => builder.with_api_key(header),
            Some(GatewayAuth::Bearer { .. }) => builder.with_bearer(),
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
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let agent = state.default_agent().to_owned();
    rpc(state, agent, headers, body).await
}

async fn agent_rpc(
    State(state): State<Arc<GatewayState>>,
    Path(agent): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    rpc(state, agent, headers, body).await
}

fn rpc_reply(id: &Value, result: std::result::Result<Value, RpcError>) -> Response {
    let body = match result {
        Ok(value) => rpc::success(id, value),
        Err(e) => rpc::failure(id, &e),
    };
    json_response(StatusCode::OK, &body)
}

fn params<T: serde::de::DeserializeOwned>(params: Value) -> std::result::Result<T, RpcError> {
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        let description = e.into_inner().to_string();
        RpcError::invalid_params(format!("at `{path}`: {description}")).with_data(json!([{
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": [{"field": path, "description": description}],
        }]))
    })
}

async fn rpc(state: Arc<GatewayState>, agent: String, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(auth) = &state.gateway.auth
        && !auth.allows(&headers)
    {
        let mut response = json_response(
            StatusCode::UNAUTHORIZED,
            &json!({"error": "authentication required: see the agent card's securitySchemes"}),
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(auth.challenge()),
        );
        return response;
    }
    if !state.serves(&agent) {
        return json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": format!("no agent `{agent}` behind this gateway")}),
        );
    }
    let request = match RpcRequest::parse(&body) {
        Ok(r) => r,
        Err((id, e)) => return rpc_reply(&id, Err(e)),
    };
    if let Some(version) = headers.get("A2A-Version").and_then(|v| v.to_str().ok()) {
        let version = version.trim();
        if !(version == "1" || version == "1.0" || version.starts_with("1.0.")) {
            return rpc_reply(&request.id, Err(RpcError::version_not_supported(version)));
        }
    }
    let id = request.id.clone();
    let span = tracing::info_span!("soorma.a2a", agent = %agent, method = %request.method);
    let _entered = span.enter();
    match request.method.as_str() {
        "SendMessage" => rpc_reply(&id, send_message(&state, &agent, request.params).await),
        "SendStreamingMessage" => match start(&state, &agent, request.params).await {
            Ok((task, rx)) => stream(id, task, rx),
            Err(e) => rpc_reply(&id, Err(e)),
        },
        "SubscribeToTask" => match subscribe(&state, &agent, request.params) {
            Ok((task, rx)) => stream(id, task, rx),
            Err(e) => rpc_reply(&id, Err(e)),
        },
        "GetTask" => rpc_reply(&id, get_task(&state, &agent, request.params)),
        "ListTasks" => rpc_reply(&id, list_tasks(&state, &agent, request.params)),
        "CancelTask" => rpc_reply(&id, cancel_task(&state, &agent, request.params)),
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => rpc_reply(&id, Err(RpcError::push_not_supported())),
        "GetExtendedAgentCard" => rpc_reply(&id, Err(RpcError::extended_card_not_configured())),
        other => rpc_reply(&id, Err(RpcError::method_not_found(other))),
    }
}

/// Starts the task a message asks for; returns it and a receiver of its updates.
async fn start(
    state: &Arc<GatewayState>,
    agent: &str,
    params: Value,
) -> std::result::Result<(Task, broadcast::Receiver<StreamResponse>), RpcError> {
    let request: SendMessageRequest = self::params(params)?;
    if let Some(tenant) = &request.tenant {
        validate_tenant(tenant).map_err(RpcError::invalid_params)?;
    }
    let mut message: Message = request.message;
    if let Some(task_id) = &message.task_id {
        return Err(match state.tasks.get(agent, task_id, Some(0)) {
            None => RpcError::task_not_found(task_id),
            Some(_) => RpcError::unsupported(
                "continuing a task with a new message; send a message without `taskId` to start a new task",
            ),
        });
    }
    let data = skills::payload(&message)?;
    let def = state.definition(agent).await.map_err(RpcError::internal)?;
    let skill_id = message
        .metadata
        .as_ref()
        .and_then(|m| m.get("skillId"))
        .or_else(|| request.metadata.as_ref().and_then(|m| m.get("skillId")))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let capability = skills::pick(&def, skill_id.as_deref(), &data)?;
    let event = capability.consumed_event.event_name.clone();

    let task_id = new_id();
    let context_id = message.context_id.clone().unwrap_or_else(new_id);
    message.task_id = Some(task_id.clone());
    message.context_id = Some(context_id.clone());
    let mut client = state.client.clone();
    if let Some(tenant) = &request.tenant {
        client = client.with_tenant(tenant);
    }
    let call = client
        .request(&event, data, &state.reply_event)
        .correlation_id(&task_id)
        .session_id(&context_id);
    let request_id = call.envelope().map_err(RpcError::internal)?.id.clone();
    let mut status = TaskStatus::new(TaskState::Working);
    status.timestamp = Some(now_rfc3339());
    let mut task = Task::new(&task_id, &context_id, status);
    task.history.push(message);
    let mut metadata = serde_json::Map::new();
    metadata.insert("skillId".into(), Value::String(event.clone()));
    task.metadata = Some(metadata);
    let rx = state.tasks.insert(agent, task.clone(), request_id);
    tracing::info!(task_id = %task_id, event_type = %event, "A2A task started");
    let worker = state.clone();
    tokio::spawn(async move {
        let outcome = match call.await {
            Ok(reply) if reply.reply.success => {
                Outcome::Completed(reply.reply.result.unwrap_or(Value::Null))
            }
            Ok(reply) => Outcome::Failed(reply.reply.error.unwrap_or_default()),
            Err(e @ Error::SchemaViolation { .. }) => Outcome::Rejected(e.to_string()),
            Err(e) => Outcome::Failed(e.to_string()),
        };
        worker.tasks.apply(&task_id, outcome);
    });
    Ok((task, rx))
}

async fn send_message(
    state: &Arc<GatewayState>,
    agent: &str,
    params: Value,
) -> std::result::Result<Value, RpcError> {
    let return_immediately = params
        .get("configuration")
        .and_then(|c| c.get("returnImmediately"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let history_length = params
        .get("configuration")
        .and_then(|c| c.get("historyLength"))
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok());
    let (task, mut rx) = start(state, agent, params).await?;
    if !return_immediately {
        let finished = async {
            loop {
                match rx.recv().await {
                    Ok(StreamResponse::StatusUpdate(u)) if u.status.state.is_terminal() => break,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        };
        let _ = tokio::time::timeout(state.gateway.wait, finished).await;
    }
    let task = state
        .tasks
        .get(agent, &task.id, history_length)
        .unwrap_or(task);
    serde_json::to_value(SendMessageResponse::Task(task)).map_err(RpcError::internal)
}

fn subscribe(
    state: &GatewayState,
    agent: &str,
    params: Value,
) -> std::result::Result<(Task, broadcast::Receiver<StreamResponse>), RpcError> {
    let p: TaskIdParams = self::params(params)?;
    let (task, rx) = state
        .tasks
        .subscribe(agent, &p.id)
        .ok_or_else(|| RpcError::task_not_found(&p.id))?;
    if task.status.state.is_terminal() {
        return Err(RpcError::unsupported(format!(
            "task `{}` has finished ({:?}); use GetTask",
            p.id, task.status.state
        )));
    }
    Ok((task, rx))
}

fn get_task(
    state: &GatewayState,
    agent: &str,
    params: Value,
) -> std::result::Result<Value, RpcError> {
    let p: TaskIdParams = self::params(params)?;
    let task = state
        .tasks
        .get(agent, &p.id, p.history_length)
        .ok_or_else(|| RpcError::task_not_found(&p.id))?;
    serde_json::to_value(task).map_err(RpcError::internal)
}

fn list_tasks(
    state: &GatewayState,
    agent: &str,
    params: Value,
) -> std::result::Result<Value, RpcError> {
    let context = params.get("contextId").and_then(Value::as_str);
    let status: Option<TaskState> = match params.get("status") {
        None | Some(Value::Null) => None,
        Some(s) => Some(
            serde_json::from_value(s.clone())
                .map_err(|e| RpcError::invalid_params(format!("at `status`: {e}")))?,
        ),
    };
    let page = params
        .get("pageSize")
        .and_then(Value::as_u64)
        .map_or(50, |n| n.clamp(1, 100) as usize);
    let tasks = state.tasks.list(agent, context, status, page);
    Ok(json!({"tasks": tasks, "nextPageToken": "", "pageSize": page, "totalSize": tasks.len()}))
}

fn cancel_task(
    state: &GatewayState,
    agent: &str,
    params: Value,
) -> std::result::Result<Value, RpcError> {
    let p: TaskIdParams = self::params(params)?;
    match state.tasks.cancel(agent, &p.id) {
        Ok(Some(task)) => serde_json::to_value(task).map_err(RpcError::internal),
        Ok(None) => Err(RpcError::task_not_found(&p.id)),
        Err(terminal) => Err(RpcError::task_not_cancelable(&p.id, terminal)),
    }
}

/// Server-sent events: the task, then its updates until it finishes.
fn stream(id: Value, task: Task, rx: broadcast::Receiver<StreamResponse>) -> Response {
    let first = rpc::success(
        &id,
        serde_json::to_value(StreamResponse::Task(task)).unwrap_or(Value::Null),
    );
    let events = futures_util::stream::unfold(
        (Some(first), rx, id, false),
        |(first, mut rx, id, done)| async move {
            if let Some(first) = first {
                return Some((sse(&first), (None, rx, id, false)));
            }
            if done {
                return None;
            }
            loop {
                match rx.recv().await {
                    Ok(update) => {
                        let finished = matches!(&update, StreamResponse::StatusUpdate(u) if u.status.state.is_terminal());
                        let body =
                            rpc::success(&id, serde_json::to_value(update).unwrap_or(Value::Null));
                        return Some((sse(&body), (None, rx, id, finished)));
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(skipped = n, "a slow A2A stream missed updates");
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn sse(body: &Value) -> std::result::Result<SseEvent, std::convert::Infallible> {
    Ok(SseEvent::default().data(body.to_string()))
}

/// Routes `task.progress` events of the gateway's tasks to their status.
async fn route_progress(state: Arc<GatewayState>) {
    let mut sub = match state
        .gateway
        .platform
        .bus()
        .observe(Some(Topic::SystemEvents))
        .await
    {
        Ok(sub) => sub,
        Err(e) => {
            tracing::warn!(error = %e, "the A2A gateway cannot observe task progress; streams show start and end only");
            return;
        }
    };
    while let Some(delivery) = sub.next().await {
        let env = &delivery.envelope;
        let Some(progress) = crate::protocol::progress::progress_report(env) else {
            continue;
        };
        let task_id = state.tasks.by_request(&progress.task_id).or_else(|| {
            env.correlation_id
                .clone()
                .filter(|c| state.tasks.contains(c))
        });
        if let Some(task_id) = task_id {
            state.tasks.apply(
                &task_id,
                Outcome::Progress(progress.progress, progress.message),
            );
        }
    }
}

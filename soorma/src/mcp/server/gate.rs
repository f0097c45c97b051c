//! What a streamable HTTP request passes before rmcp sees it: the bearer token, and the
//! session cap for a request that would open a session. Sessions themselves are rmcp's
//! [`LocalSessionManager`], wrapped to refuse a session over the cap.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use serde_json::json;

use crate::util::BoxFuture;

/// Checks the bearer token of a request to the MCP server: the identity it stands for, or
/// `None` to refuse it (HTTP 401). A closure `Fn(&str) -> Option<String>` is one.
///
/// ```
/// use soorma::mcp::McpServer;
///
/// // Tokens of the form `user:<name>`, checked by a closure (an async verifier implements the
/// // trait instead, e.g. to ask an identity provider).
/// let server = McpServer::new(&soorma::Platform::embedded())
///     .token_verifier(|token: &str| token.strip_prefix("user:").map(str::to_owned));
/// # let _ = server;
/// ```
pub trait TokenVerifier: Send + Sync + 'static {
    /// The identity `token` stands for, or `None` when it is not valid.
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Option<String>>;
}

impl<F> TokenVerifier for F
where
    F: Fn(&str) -> Option<String> + Send + Sync + 'static,
{
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Option<String>> {
        Box::pin(std::future::ready(self(token)))
    }
}

/// One fixed token (compared in constant time); its identity is `bearer`.
pub(super) struct StaticToken(pub(super) String);

impl TokenVerifier for StaticToken {
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Option<String>> {
        let (a, b) = (self.0.as_bytes(), token.as_bytes());
        let same =
            a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0;
        Box::pin(std::future::ready(same.then(|| "bearer".to_owned())))
    }
}

/// The identity a request's bearer token stands for: in the HTTP request's extensions, which
/// rmcp hands to the tool call (`RequestContext::extensions`, as `http::request::Parts`).
///
/// ```
/// let who = soorma::mcp::server::McpIdentity("alice".into());
/// assert_eq!(who.0, "alice");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpIdentity(pub String);

/// The gate's settings for one server.
pub(super) struct Gate {
    pub(super) verifier: Option<Arc<dyn TokenVerifier>>,
    pub(super) sessions: Arc<LocalSessionManager>,
    pub(super) max_sessions: usize,
}

fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// Refuses a request without a valid bearer token (when the server wants one), and a request
/// opening a session when the server has as many as it keeps.
pub(super) async fn check(
    State(gate): State<Arc<Gate>>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(verifier) = &gate.verifier {
        let token = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            });
        let identity = match token {
            Some(token) => verifier.verify(token).await,
            None => None,
        };
        let Some(identity) = identity else {
            tracing::info!(
                token_sent = token.is_some(),
                "MCP request without a valid bearer token refused"
            );
            let mut response = rpc_error(
                StatusCode::UNAUTHORIZED,
                -32001,
                "authentication required: send Authorization: Bearer <token>",
            );
            let challenge = if token.is_some() {
                "Bearer error=\"invalid_token\""
            } else {
                "Bearer"
            };
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
            return response;
        };
        request.extensions_mut().insert(McpIdentity(identity));
    }
    let opens_session =
        request.method() == Method::POST && !request.headers().contains_key("mcp-session-id");
    if opens_session && gate.sessions.sessions.read().await.len() >= gate.max_sessions {
        tracing::warn!(
            max = gate.max_sessions,
            "MCP session refused: the server keeps as many as it may"
        );
        let mut response = rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            -32000,
            "too many open sessions: retry later",
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return response;
    }
    next.run(request).await
}

/// Why the session manager refused.
#[derive(Debug, thiserror::Error)]
pub(super) enum SessionsError {
    /// The cap is reached.
    #[error("too many open sessions (at most {0})")]
    Full(usize),
    /// rmcp's session manager failed.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

/// rmcp's in-memory sessions, at most `max` at once (idle ones expire by its `keep_alive`).
pub(super) struct CappedSessions {
    pub(super) inner: Arc<LocalSessionManager>,
    pub(super) max: usize,
}

impl SessionManager for CappedSessions {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        if self.inner.sessions.read().await.len() >= self.max {
            return Err(SessionsError::Full(self.max));
        }
        Ok(self.inner.create_session().await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(self.inner.restore_session(id).await?)
    }
}

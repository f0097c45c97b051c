//! The handler service: what the layers added with
//! [`AgentBuilder::layer`](crate::AgentBuilder::layer) wrap. Its request, response and error
//! types, the innermost service (the handler itself) and the catch-panic layer.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::Value;
use soorma_common::EventEnvelope;
use tower::util::BoxCloneService;
use tower::{Layer, Service};

use super::extract::HandlerInput;
use super::handler::{Failure, Handler, HandlerKind, HandlerOutcome};
use crate::error::{Error, ToolError};
use crate::util::{BoxFuture, CatchUnwind, panic_message};

/// An event on its way to its handler: the request of a [`HandlerService`].
///
/// Layers added with [`AgentBuilder::layer`](crate::AgentBuilder::layer) see one per handled
/// event (events no handler of the agent takes are acknowledged before the stack).
///
/// ```
/// use soorma::dispatch::HandlerRequest;
///
/// /// What a metrics layer would label a handled event with.
/// fn labels(req: &HandlerRequest) -> (String, String, &'static str, u32) {
///     (req.agent().to_owned(), req.envelope().event_type.clone(), req.handler_kind().attribute(), req.attempt())
/// }
/// # let _ = labels;
/// ```
#[derive(Clone)]
pub struct HandlerRequest {
    pub(crate) input: HandlerInput,
    pub(crate) handler: Arc<Handler>,
    pub(crate) attempt: u32,
}

impl std::fmt::Debug for HandlerRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerRequest")
            .field("agent", &self.agent())
            .field("event_type", &self.envelope().event_type)
            .field("event_id", &self.envelope().id)
            .field("handler", &self.handler.kind)
            .field("attempt", &self.attempt)
            .finish()
    }
}

impl HandlerRequest {
    /// The event being handled.
    ///
    /// ```
    /// # fn f(req: &soorma::dispatch::HandlerRequest) {
    /// let is_anonymous = req.envelope().user_id.is_none();
    /// # let _ = is_anonymous; }
    /// ```
    pub fn envelope(&self) -> &Arc<EventEnvelope> {
        &self.input.envelope
    }

    /// The name of the agent handling it.
    ///
    /// ```
    /// # fn f(req: &soorma::dispatch::HandlerRequest) {
    /// let metric = format!("soorma.{}.handled", req.agent());
    /// # let _ = metric; }
    /// ```
    pub fn agent(&self) -> &str {
        self.input.agent()
    }

    /// Which kind of handler takes it (`on_invoke`, `on_task`, ...).
    ///
    /// ```
    /// # fn f(req: &soorma::dispatch::HandlerRequest) {
    /// let is_tool_call = req.handler_kind() == soorma::HandlerKind::Invoke;
    /// # let _ = is_tool_call; }
    /// ```
    pub fn handler_kind(&self) -> HandlerKind {
        self.handler.kind
    }

    /// How many times the event had been delivered when its handling began (1 on first
    /// delivery, more on retries).
    ///
    /// ```
    /// # fn f(req: &soorma::dispatch::HandlerRequest) {
    /// let redelivered = req.attempt() > 1;
    /// # let _ = redelivered; }
    /// ```
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Everything a handler's extractors see: the platform, the agent's state, a bus client
    /// publishing in the context of this event.
    ///
    /// ```
    /// # fn f(req: &soorma::dispatch::HandlerRequest) {
    /// let platform_kind = req.input().platform().kind();
    /// # let _ = platform_kind; }
    /// ```
    pub fn input(&self) -> &HandlerInput {
        &self.input
    }
}

/// What a handler produced: the response of a [`HandlerService`].
///
/// ```
/// use soorma::dispatch::HandlerResponse;
///
/// assert_eq!(HandlerResponse::handled().reply, None);
/// let answer = HandlerResponse::with_reply(serde_json::json!(42));
/// assert_eq!(answer.reply, Some(serde_json::json!(42)));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct HandlerResponse {
    /// The value the runtime replies with on the request's `response_event` (a tool's result);
    /// `None` for handlers that do not reply through their return value.
    pub reply: Option<Value>,
}

impl HandlerResponse {
    /// Handled; nothing to reply.
    ///
    /// ```
    /// assert!(soorma::dispatch::HandlerResponse::handled().reply.is_none());
    /// ```
    pub fn handled() -> Self {
        Self::default()
    }

    /// Handled; reply with `value` (as a tool does).
    ///
    /// ```
    /// let r = soorma::dispatch::HandlerResponse::with_reply(serde_json::json!({"sum": 3}));
    /// assert_eq!(r.reply.unwrap()["sum"], 3);
    /// ```
    pub fn with_reply(value: Value) -> Self {
        Self { reply: Some(value) }
    }
}

/// Why an event was not handled: the error of a [`HandlerService`].
///
/// The runtime settles it as the handler's layer says: a tool replies with the error, a task
/// fails, a retryable error is redelivered with backoff up to `max_deliver`, anything else is
/// dead-lettered. A layer rejecting an event returns one of these.
///
/// ```
/// use soorma::dispatch::HandlerError;
///
/// let denied = HandlerError::new("not authorized");
/// assert!(!denied.is_retryable());
/// assert_eq!(denied.to_string(), "not authorized");
/// assert!(HandlerError::retryable("rate limited").is_retryable());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandlerError {
    /// The payload did not decode into the handler's type ([`Error::InvalidPayload`]): an error
    /// reply when the request names a `response_event`, then dead-lettered; never retried.
    #[error(transparent)]
    InvalidPayload(Error),
    /// The handler, one of its extractors, or a layer failed.
    #[error("{message}")]
    #[non_exhaustive]
    Failed {
        /// What went wrong.
        message: String,
        /// Whether redelivery may succeed.
        retryable: bool,
    },
    /// The handler (or a layer) panicked; the agent keeps serving.
    #[error("handler panicked: {0}")]
    Panicked(String),
}

impl HandlerError {
    /// A failure that is not worth retrying (settled at once: error reply, failed task or dead
    /// letter).
    ///
    /// ```
    /// let e = soorma::dispatch::HandlerError::new("unknown customer");
    /// assert!(!e.is_retryable());
    /// ```
    pub fn new(message: impl std::fmt::Display) -> Self {
        HandlerError::Failed {
            message: message.to_string(),
            retryable: false,
        }
    }

    /// A failure that may pass later: the event is redelivered with backoff while attempts
    /// remain.
    ///
    /// ```
    /// let e = soorma::dispatch::HandlerError::retryable("the database is restarting");
    /// assert!(e.is_retryable());
    /// ```
    pub fn retryable(message: impl std::fmt::Display) -> Self {
        HandlerError::Failed {
            message: message.to_string(),
            retryable: true,
        }
    }

    /// Whether redelivery may succeed.
    ///
    /// ```
    /// use soorma::dispatch::HandlerError;
    /// assert!(!HandlerError::Panicked("boom".into()).is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            HandlerError::Failed {
                retryable: true,
                ..
            }
        )
    }
}

impl From<Error> for HandlerError {
    /// A soorma error, retryable when it says so ([`Error::is_retryable`]).
    ///
    /// ```
    /// use soorma::dispatch::HandlerError;
    /// use soorma::error::{EngineError, EngineErrorKind};
    /// let down = EngineError::new(EngineErrorKind::Publish, "publish `x`");
    /// let e = HandlerError::from(soorma::Error::from(down));
    /// assert!(e.is_retryable());
    /// ```
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidPayload { .. } => HandlerError::InvalidPayload(e),
            e => HandlerError::Failed {
                retryable: e.is_retryable(),
                message: e.to_string(),
            },
        }
    }
}

impl From<ToolError> for HandlerError {
    /// A tool error, retryable when built with [`ToolError::retryable`].
    ///
    /// ```
    /// use soorma::{ToolError, dispatch::HandlerError};
    /// assert!(!HandlerError::from(ToolError::new("bad input")).is_retryable());
    /// ```
    fn from(e: ToolError) -> Self {
        HandlerError::Failed {
            retryable: e.is_retryable(),
            message: e.to_string(),
        }
    }
}

impl From<Failure> for HandlerError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Decode(e) => HandlerError::InvalidPayload(e),
            Failure::Handler { message, retryable } => HandlerError::Failed { message, retryable },
        }
    }
}

/// The erased handler service user layers wrap: `tower::Service<HandlerRequest, Response =
/// HandlerResponse, Error = HandlerError>`, cheap to clone.
///
/// ```
/// use soorma::dispatch::{HandlerRequest, HandlerService, tower::ServiceExt};
///
/// // A layer's service calls the inner one like any tower service.
/// async fn forward(inner: HandlerService, req: HandlerRequest) -> Result<(), soorma::dispatch::HandlerError> {
///     inner.oneshot(req).await?;
///     Ok(())
/// }
/// # let _ = forward;
/// ```
pub type HandlerService = BoxCloneService<HandlerRequest, HandlerResponse, HandlerError>;

/// The innermost service: runs the request's handler.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CallHandler;

impl Service<HandlerRequest> for CallHandler {
    type Response = HandlerResponse;
    type Error = HandlerError;
    type Future = CallFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: HandlerRequest) -> CallFuture {
        CallFuture((req.handler.call)(req.input))
    }
}

/// The handler's future, its outcome as a response or error.
pub(crate) struct CallFuture(BoxFuture<'static, HandlerOutcome>);

impl Future for CallFuture {
    type Output = Result<HandlerResponse, HandlerError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx).map(|outcome| {
            outcome
                .map(|reply| HandlerResponse { reply })
                .map_err(Into::into)
        })
    }
}

/// Turns a panic of the inner service (in `poll_ready`, `call` or its future) into
/// [`HandlerError::Panicked`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CatchPanicLayer;

impl<S> Layer<S> for CatchPanicLayer {
    type Service = CatchPanic<S>;

    fn layer(&self, inner: S) -> CatchPanic<S> {
        CatchPanic(inner)
    }
}

/// See [`CatchPanicLayer`].
#[derive(Debug, Clone)]
pub(crate) struct CatchPanic<S>(S);

impl<S> CatchPanic<S> {
    pub(crate) fn new(inner: S) -> Self {
        CatchPanic(inner)
    }
}

impl<S, R> Service<R> for CatchPanic<S>
where
    S: Service<R, Error = HandlerError>,
    S::Future: Unpin,
{
    type Response = S::Response;
    type Error = HandlerError;
    type Future = CatchPanicFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
        catch_unwind(AssertUnwindSafe(|| self.0.poll_ready(cx)))
            .unwrap_or_else(|p| Poll::Ready(Err(HandlerError::Panicked(panic_message(&*p)))))
    }

    fn call(&mut self, req: R) -> Self::Future {
        match catch_unwind(AssertUnwindSafe(|| self.0.call(req))) {
            Ok(fut) => CatchPanicFuture::Running(CatchUnwind(fut)),
            Err(p) => CatchPanicFuture::Panicked(Some(panic_message(&*p))),
        }
    }
}

/// The future of [`CatchPanic`].
pub(crate) enum CatchPanicFuture<F> {
    Running(CatchUnwind<F>),
    Panicked(Option<String>),
}

impl<F, T> Future for CatchPanicFuture<F>
where
    F: Future<Output = Result<T, HandlerError>> + Unpin,
{
    type Output = Result<T, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            CatchPanicFuture::Running(fut) => Pin::new(fut)
                .poll(cx)
                .map(|r| r.unwrap_or_else(|panic| Err(HandlerError::Panicked(panic)))),
            CatchPanicFuture::Panicked(message) => Poll::Ready(Err(HandlerError::Panicked(
                message.take().unwrap_or_default(),
            ))),
        }
    }
}

/// A layer added with [`AgentBuilder::layer`](crate::AgentBuilder::layer), erased.
pub(crate) type UserLayer = Arc<dyn Fn(HandlerService) -> HandlerService + Send + Sync>;

/// The handler service of an agent: the handler (panics caught), wrapped by the user's layers
/// in the order added (the last added is the outermost).
pub(crate) fn handler_service(layers: &[UserLayer]) -> HandlerService {
    let mut service = HandlerService::new(CatchPanic::new(CallHandler));
    for layer in layers {
        service = layer(service);
    }
    service
}

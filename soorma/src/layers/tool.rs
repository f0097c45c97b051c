//! The tool layer (`#[on_invoke]`): request → reply. The handler's return value is the reply;
//! its error becomes an error reply.

use std::fmt;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use soorma_common::{ActionReply, AgentKind, EventEnvelope, Topic};

use crate::error::{BoxError, Result as SdkResult};
use crate::protocol::decode_payload;
use crate::protocol::reply::send_reply;
use crate::protocol::request::Request;
use crate::runtime::agent::AgentBuilder;
use crate::runtime::context::context_accessors;
use crate::runtime::extract::{AgentRuntime, HandlerInput};
use crate::runtime::handler::{
    Advertised, ErasedFn, Failure, Handler, HandlerFn, HandlerKind, HandlerPayload, SchemaSource,
    extractor_failure, handler_failure, schema_of,
};
use crate::util::BoxFuture;

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

/// A tool invocation, for `#[on_invoke]` handlers. The handler's return value becomes the reply.
///
/// ```
/// use soorma::prelude::*;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add { a: i64, b: i64 }
///
/// /// Adds two numbers.
/// #[on_invoke("add.requested", agent = "checked-adder")]
/// async fn add(req: Invocation<Add>) -> Result<i64, ToolError> {
///     req.data.a.checked_add(req.data.b).ok_or_else(|| ToolError::new("overflow"))
/// }
/// ```
pub struct Invocation<T = Value> {
    /// The decoded request payload.
    pub data: T,
    envelope: Arc<EventEnvelope>,
    runtime: Arc<AgentRuntime>,
}

impl<T> Invocation<T> {
    pub(crate) fn new(data: T, input: &HandlerInput) -> Self {
        Self {
            data,
            envelope: input.envelope.clone(),
            runtime: input.runtime.clone(),
        }
    }

    /// The request id (the request event's id), echoed in the reply.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn which(req: Invocation) -> Result<String, ToolError> {
    ///     Ok(req.request_id().to_owned())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("ids").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("which.requested", which)).start(&platform).await?;
    /// let reply = platform.client("docs").request("which.requested", (), "which.completed").await?;
    /// let request_id = reply.reply.request_id.clone();
    /// assert_eq!(reply.into_result::<String>()?, request_id);
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn request_id(&self) -> &str {
        &self.envelope.id
    }

    /// The event type the caller asked the reply to be published as.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn reply_as(req: Invocation) -> Result<Option<String>, ToolError> {
    ///     Ok(req.response_event().map(str::to_owned))
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("replier").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("reply-as.requested", reply_as)).start(&platform).await?;
    /// let client = platform.client("docs");
    /// let name: Option<String> = client.invoke("reply-as.requested", (), "reply-as.done").await?;
    /// assert_eq!(name.as_deref(), Some("reply-as.done"));
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn response_event(&self) -> Option<&str> {
        self.envelope.response_event.as_deref()
    }
}

context_accessors!(Invocation);

impl<T: fmt::Debug> fmt::Debug for Invocation<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Invocation")
            .field("event_type", &self.envelope.event_type)
            .field("data", &self.data)
            .finish_non_exhaustive()
    }
}

/// What an `#[on_invoke]` handler returns: `Result<T, E>` with `T: Serialize + JsonSchema`
/// (the reply) and an error that converts into `Box<dyn Error + Send + Sync>` (the error reply):
/// [`ToolError`](crate::ToolError), [`soorma::Error`](crate::Error), `String`, any
/// `std::error::Error + Send + Sync`, `anyhow::Error`.
///
/// ```
/// use soorma::ToolOutput;
///
/// fn tool_output<O: ToolOutput>() {}
/// tool_output::<Result<u32, soorma::ToolError>>();
/// tool_output::<soorma::Result<u32>>();
/// tool_output::<Result<Vec<String>, String>>();
/// tool_output::<Result<String, std::io::Error>>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`#[on_invoke]` handlers must return `Result<T, E>` where `T: Serialize + JsonSchema` and `E: Into<Box<dyn Error + Send + Sync>>` (`ToolError`, `soorma::Error`, `String`, any `std::error::Error + Send + Sync`); found `{Self}`"
)]
pub trait ToolOutput: Send + 'static {
    /// The success type (its schema becomes the produced schema).
    type Ok: Serialize + JsonSchema;
    /// Splits into the value or the failure.
    #[doc(hidden)]
    fn into_outcome(self) -> Result<Self::Ok, Failure>;
}

impl<T, E> ToolOutput for Result<T, E>
where
    T: Serialize + JsonSchema + Send + 'static,
    E: Into<BoxError> + Send + 'static,
{
    type Ok = T;

    fn into_outcome(self) -> Result<T, Failure> {
        self.map_err(handler_failure)
    }
}

/// What a tool handler of a typed request returns: `Result<V, E>` where `V` is the request's
/// reply type and `E: Into<Box<dyn Error + Send + Sync>>` ([`Handler::invoke`]).
///
/// ```
/// use soorma::ToolReply;
///
/// fn replies_with<V, O: ToolReply<V>>() {}
/// replies_with::<u32, Result<u32, soorma::ToolError>>();
/// replies_with::<u32, soorma::Result<u32>>();
/// replies_with::<u32, Result<u32, std::io::Error>>();
/// ```
#[diagnostic::on_unimplemented(
    message = "a tool handler of a request replying `{V}` must return `Result<{V}, E>` where `E: Into<Box<dyn Error + Send + Sync>>` (`ToolError`, `soorma::Error`, `String`, any `std::error::Error + Send + Sync`); found `{Self}`",
    label = "expected `Result<{V}, E>`"
)]
pub trait ToolReply<V>: ToolOutput<Ok = V> {}

impl<V, E> ToolReply<V> for Result<V, E>
where
    V: Serialize + JsonSchema + Send + 'static,
    E: Into<BoxError> + Send + 'static,
{
}

impl Handler {
    /// A tool handler for requests of type `event` on `action-requests`.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn upper(req: Invocation<String>) -> Result<String, ToolError> {
    ///     Ok(req.data.to_uppercase())
    /// }
    ///
    /// let h = Handler::on_invoke("upper.requested", upper);
    /// assert_eq!((h.topic(), h.event()), (Topic::ActionRequests, "upper.requested"));
    /// ```
    pub fn on_invoke<H, T, Args>(event: impl Into<String>, handler: H) -> Self
    where
        H: HandlerFn<Invocation<T>, Args>,
        H::Output: ToolOutput,
        T: HandlerPayload,
    {
        let call: ErasedFn = Arc::new(move |input: HandlerInput| {
            let handler = handler.clone();
            Box::pin(async move {
                let data = decode_payload::<T>(&input.envelope.event_type, &input.envelope.data)
                    .map_err(Failure::Decode)?;
                let fut = handler
                    .call(Invocation::new(data, &input), &input)
                    .map_err(extractor_failure)?;
                let value = fut.await.into_outcome()?;
                serde_json::to_value(value)
                    .map(Some)
                    .map_err(|e| Failure::Handler {
                        message: format!("could not serialize the tool's result: {e}"),
                        retryable: false,
                    })
            })
        });
        let mut h = Handler::new(
            HandlerKind::Invoke,
            Topic::ActionRequests,
            event.into(),
            schema_of::<T>,
            H::checks(),
            call,
        );
        h.response_schema = Some(SchemaSource::Of(schema_of::<<H::Output as ToolOutput>::Ok>));
        h.advertised = Advertised::Capability;
        h.on_failure = Some(reply_with_error);
        h
    }

    /// A tool handler for the typed request `R`: the event is `R::EVENT`, and the handler
    /// replies with `R::Reply`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use serde::{Deserialize, Serialize};
    /// use soorma::prelude::*;
    ///
    /// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    /// struct Shout { text: String }
    ///
    /// impl Request for Shout {
    ///     const EVENT: &'static str = "shout.requested";
    ///     type Reply = String;
    /// }
    ///
    /// async fn shout(req: Invocation<Shout>) -> Result<String, ToolError> {
    ///     Ok(req.data.text.to_uppercase())
    /// }
    ///
    /// let h = Handler::invoke(shout);
    /// assert_eq!(h.event(), "shout.requested");
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("shouter").use_registered_handlers(false).handler(h).start(&platform).await?;
    /// let loud = platform.client("docs").call(Shout { text: "hi".into() }).await?;
    /// assert_eq!(loud, "HI");
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn invoke<H, R, Args>(handler: H) -> Self
    where
        H: HandlerFn<Invocation<R>, Args>,
        H::Output: ToolReply<R::Reply>,
        R: Request,
    {
        let mut h = Self::on_invoke(R::EVENT, handler);
        h.reply_event = Some(R::reply_event());
        h
    }
}

/// A tool's failure policy: reply to the caller with the error.
fn reply_with_error(input: &HandlerInput, message: String) -> BoxFuture<'_, SdkResult<bool>> {
    Box::pin(async move {
        tracing::info!(error = %message, "tool returned an error; replying with it");
        let reply = ActionReply::failure(&input.envelope.id, message);
        send_reply(&input.bus(), &input.envelope, reply).await?;
        Ok(true)
    })
}

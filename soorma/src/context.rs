//! Handler contexts for raw events and tool invocations.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;
use soorma_common::{EventEnvelope, Topic};

use crate::error::Error;
use crate::extract::{AgentRuntime, HandlerInput};

/// Decodes an event's `data` into `T`, naming the event, the type and the serde path on failure.
pub(crate) fn decode_payload<T: DeserializeOwned>(event: &str, data: &Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(data).map_err(|e| Error::InvalidPayload {
        event: event.to_owned(),
        type_name: std::any::type_name::<T>(),
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// Accessors every handler context shares.
macro_rules! context_accessors {
    ($ty:ident) => {
        impl<T> $ty<T> {
            /// The envelope of the event being handled.
            ///
            /// ```
            #[doc = concat!("fn log(ctx: &soorma::", stringify!($ty), ") {")]
            ///     let env = ctx.envelope();
            ///     println!("{} {} from {}", env.id, env.event_type, env.source);
            /// }
            /// ```
            pub fn envelope(&self) -> &::std::sync::Arc<::soorma_common::EventEnvelope> {
                &self.envelope
            }

            /// The event type.
            ///
            /// ```
            #[doc = concat!("fn is_urgent(ctx: &soorma::", stringify!($ty), ") -> bool {")]
            ///     ctx.event_type().ends_with(".urgent")
            /// }
            /// ```
            pub fn event_type(&self) -> &str {
                &self.envelope.event_type
            }

            /// The correlation id, if any.
            ///
            /// ```
            #[doc = concat!("fn trace_key(ctx: &soorma::", stringify!($ty), ") -> String {")]
            ///     ctx.correlation_id().unwrap_or("uncorrelated").to_owned()
            /// }
            /// ```
            pub fn correlation_id(&self) -> Option<&str> {
                self.envelope.correlation_id.as_deref()
            }

            /// The tenant (`"default"` when the event names none).
            ///
            /// ```
            #[doc = concat!("fn settings_key(ctx: &soorma::", stringify!($ty), ") -> soorma::state::StateKey {")]
            ///     soorma::state::StateKey::new("settings", ctx.tenant(), "current")
            /// }
            /// ```
            pub fn tenant(&self) -> &str {
                self.envelope.tenant()
            }

            /// The user, if any.
            ///
            /// ```
            #[doc = concat!("fn greeting(ctx: &soorma::", stringify!($ty), ") -> String {")]
            ///     format!("hello {}", ctx.user_id().unwrap_or("guest"))
            /// }
            /// ```
            pub fn user_id(&self) -> Option<&str> {
                self.envelope.user_id.as_deref()
            }

            /// The session, if any.
            ///
            /// ```
            #[doc = concat!("fn in_session(ctx: &soorma::", stringify!($ty), ", session: &str) -> bool {")]
            ///     ctx.session_id() == Some(session)
            /// }
            /// ```
            pub fn session_id(&self) -> Option<&str> {
                self.envelope.session_id.as_deref()
            }

            /// The handling agent's name.
            ///
            /// ```
            #[doc = concat!("fn log(ctx: &soorma::", stringify!($ty), ") {")]
            ///     println!("{} handles {}", ctx.agent(), ctx.event_type());
            /// }
            /// ```
            pub fn agent(&self) -> &str {
                &self.runtime.name
            }

            /// A bus client that publishes in the context of this event (tenant, user,
            /// session and trace inherited; `source` = this agent).
            ///
            /// ```
            #[doc = concat!("async fn notify(ctx: &soorma::", stringify!($ty), ") -> soorma::Result<()> {")]
            ///     // Carries the tenant, user, session and trace of the handled event.
            ///     ctx.bus().announce("work.started", serde_json::json!({})).await?;
            ///     Ok(())
            /// }
            /// ```
            pub fn bus(&self) -> $crate::bus::BusClient {
                self.runtime.bus.in_context_of(self.envelope.clone())
            }

            /// The platform.
            ///
            /// ```
            #[doc = concat!("async fn searchers(ctx: &soorma::", stringify!($ty), ") -> soorma::Result<usize> {")]
            ///     let found = ctx.platform().discovery().by_consumed_event("search.requested").await?;
            ///     Ok(found.len())
            /// }
            /// ```
            pub fn platform(&self) -> &$crate::platform::Platform {
                &self.runtime.platform
            }
        }
    };
}
pub(crate) use context_accessors;

/// A raw event, for `#[on_event]` handlers (the Agent layer).
///
/// ```
/// use soorma::prelude::*;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct OrderPlaced { order_id: String }
///
/// #[on_event(topic = "business-facts", event = "order.placed", agent = "shipping")]
/// async fn ship(event: Event<OrderPlaced>) -> soorma::Result<()> {
///     event.bus().announce("order.shipped", serde_json::json!({"order_id": event.data.order_id})).await?;
///     Ok(())
/// }
/// ```
pub struct Event<T = Value> {
    /// The decoded payload.
    pub data: T,
    envelope: Arc<EventEnvelope>,
    runtime: Arc<AgentRuntime>,
}

impl<T> Event<T> {
    pub(crate) fn new(data: T, input: &HandlerInput) -> Self {
        Self {
            data,
            envelope: input.envelope.clone(),
            runtime: input.runtime.clone(),
        }
    }

    /// The topic the event arrived on.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// async fn audit(event: Event) -> soorma::Result<()> {
    ///     event.bus().publish(Topic::SystemEvents, "audited", event.topic()).await?;
    ///     Ok(())
    /// }
    ///
    /// let mut t = soorma::testing::TestPlatform::new();
    /// t.start(Agent::new("auditor").use_registered_handlers(false)
    ///     .handler(Handler::on_event(Topic::BusinessFacts, "*", audit))).await?;
    /// t.client().publish(Topic::BusinessFacts, "order.placed", ()).await?;
    /// let audited = t.expect_event("audited", std::time::Duration::from_secs(1)).await?;
    /// assert_eq!(audited.data, "business-facts");
    /// # t.shutdown().await }
    /// ```
    pub fn topic(&self) -> Topic {
        self.envelope.topic
    }
}

context_accessors!(Event);

impl<T: fmt::Debug> fmt::Debug for Event<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("event_type", &self.envelope.event_type)
            .field("data", &self.data)
            .finish_non_exhaustive()
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

/// A tool's failure, sent to the caller as `{success: false, error}`.
///
/// Any `E: Display` works as a handler error; `ToolError` is a convenient one.
///
/// ```
/// use soorma::ToolError;
/// let err = ToolError::new("division by zero");
/// assert_eq!(err.to_string(), "division by zero");
/// let from_str: ToolError = "bad input".into();
/// assert_eq!(from_str.message(), "bad input");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    message: String,
    retryable: bool,
}

impl ToolError {
    /// An error with a message.
    ///
    /// ```
    /// let err = soorma::ToolError::new("division by zero");
    /// assert!(!err.is_retryable());
    /// ```
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }

    /// Marks the error as transient: event and result handlers are redelivered.
    ///
    /// ```
    /// assert!(soorma::ToolError::new("busy").retryable().is_retryable());
    /// ```
    #[must_use]
    pub fn retryable(mut self) -> Self {
        self.retryable = true;
        self
    }

    /// The message.
    ///
    /// ```
    /// let err: soorma::ToolError = "bad input".into();
    /// assert_eq!(err.message(), "bad input");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether it is transient.
    ///
    /// ```
    /// use soorma::{Error, ToolError};
    /// assert!(!ToolError::new("bad input").is_retryable());
    /// // soorma's transient errors stay retryable when converted.
    /// assert!(ToolError::from(Error::Bus("connection lost".into())).is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError::new(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        ToolError::new(message)
    }
}

impl From<Error> for ToolError {
    fn from(err: Error) -> Self {
        ToolError {
            retryable: err.is_retryable(),
            message: err.to_string(),
        }
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(err: serde_json::Error) -> Self {
        ToolError::new(err.to_string())
    }
}

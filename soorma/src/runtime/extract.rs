//! Handler inputs and extractors: the arguments a handler takes after its context.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use soorma_common::{AgentKind, EventEnvelope};

use crate::platform::Platform;
use crate::protocol::publish::BusClient;

/// Typed values attached to an agent with [`AgentBuilder::with_state`](crate::AgentBuilder::with_state).
///
/// ```
/// use soorma::extract::Extensions;
///
/// let mut ext = Extensions::default();
/// ext.insert(String::from("postgres://localhost/app"));
/// assert_eq!(ext.get::<String>().map(String::as_str), Some("postgres://localhost/app"));
/// ```
#[derive(Clone, Default)]
pub struct Extensions {
    map: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.map.len())
            .finish()
    }
}

impl Extensions {
    /// Stores a value, replacing one of the same type.
    ///
    /// ```
    /// let mut ext = soorma::extract::Extensions::default();
    /// ext.insert(1_u32);
    /// ext.insert(2_u32); // replaces the first
    /// assert_eq!(ext.get::<u32>(), Some(&2));
    /// ```
    pub fn insert<S: Send + Sync + 'static>(&mut self, value: S) {
        self.map.insert(TypeId::of::<S>(), Arc::new(value));
    }

    /// The value of type `S`, if stored.
    ///
    /// ```
    /// let mut ext = soorma::extract::Extensions::default();
    /// ext.insert(42_u64);
    /// assert_eq!(ext.get::<u64>(), Some(&42));
    /// assert_eq!(ext.get::<u32>(), None);
    /// ```
    pub fn get<S: Send + Sync + 'static>(&self) -> Option<&S> {
        self.map
            .get(&TypeId::of::<S>())
            .and_then(|v| v.downcast_ref())
    }

    /// Whether a value of type `S` is stored.
    ///
    /// ```
    /// let mut ext = soorma::extract::Extensions::default();
    /// ext.insert(0.2_f64);
    /// assert!(ext.contains::<f64>());
    /// assert!(!ext.contains::<String>());
    /// ```
    pub fn contains<S: Send + Sync + 'static>(&self) -> bool {
        self.map.contains_key(&TypeId::of::<S>())
    }
}

/// What an agent's handlers share: its name, platform and state.
pub(crate) struct AgentRuntime {
    pub(crate) name: Arc<str>,
    pub(crate) kind: AgentKind,
    pub(crate) platform: Platform,
    pub(crate) extensions: Extensions,
    /// What the agent's layers derived from its handlers when it started (e.g. which replies
    /// a worker waits for); keyed by type, private to each layer.
    pub(crate) wiring: Extensions,
    pub(crate) bus: BusClient,
}

/// The event being handled and the agent handling it; extractors are built from it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::extract::{FromHandlerInput, HandlerInput};
/// # use soorma::prelude::*;
///
/// struct Me(String); // the name of the agent handling the event
///
/// impl FromHandlerInput for Me {
///     fn from_input(input: &HandlerInput) -> Result<Self, String> {
///         Ok(Me(input.agent().to_owned()))
///     }
/// }
///
/// async fn whoami(_: Invocation, Me(me): Me) -> Result<String, ToolError> { Ok(me) }
///
/// # let platform = Platform::embedded();
/// # let tool = Tool::new("oracle").use_registered_handlers(false)
/// #     .handler(Handler::on_invoke("whoami.requested", whoami)).start(&platform).await?;
/// let me: String = platform.client("docs").invoke("whoami.requested", (), "whoami.completed").await?;
/// assert_eq!(me, "oracle");
/// # tool.shutdown().await?; Ok(()) }
/// ```
#[derive(Clone)]
pub struct HandlerInput {
    pub(crate) envelope: Arc<EventEnvelope>,
    pub(crate) runtime: Arc<AgentRuntime>,
    /// Which delivery of the event this is (1 for the first).
    pub(crate) attempt: u32,
}

impl std::fmt::Debug for HandlerInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerInput")
            .field("agent", &self.runtime.name)
            .field("event", &self.envelope.event_type)
            .finish()
    }
}

impl HandlerInput {
    /// The event being handled.
    ///
    /// ```
    /// use soorma::extract::{FromHandlerInput, HandlerInput};
    ///
    /// /// The id of the event being handled.
    /// struct EventId(String);
    ///
    /// impl FromHandlerInput for EventId {
    ///     fn from_input(input: &HandlerInput) -> Result<Self, String> {
    ///         Ok(EventId(input.envelope().id.clone()))
    ///     }
    /// }
    /// ```
    pub fn envelope(&self) -> &Arc<EventEnvelope> {
        &self.envelope
    }

    /// Which delivery of the event this is: 1 for the first, more when it is redelivered
    /// (after a retryable failure, or after the instance handling it stopped). It is the count
    /// when the handling began: a copy the platform sends while it runs is counted when the
    /// outcome is settled ([`Delivery::current_attempt`](crate::bus::Delivery::current_attempt)).
    ///
    /// ```
    /// use soorma::extract::{FromHandlerInput, HandlerInput};
    ///
    /// /// Whether the event is being handled again.
    /// struct Redelivered(bool);
    ///
    /// impl FromHandlerInput for Redelivered {
    ///     fn from_input(input: &HandlerInput) -> Result<Self, String> {
    ///         Ok(Redelivered(input.attempt() > 1))
    ///     }
    /// }
    /// ```
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The handling agent's name.
    ///
    /// ```
    /// use soorma::extract::{FromHandlerInput, HandlerInput};
    ///
    /// /// A metrics prefix per agent.
    /// struct MetricPrefix(String);
    ///
    /// impl FromHandlerInput for MetricPrefix {
    ///     fn from_input(input: &HandlerInput) -> Result<Self, String> {
    ///         Ok(MetricPrefix(format!("soorma.{}", input.agent())))
    ///     }
    /// }
    /// ```
    pub fn agent(&self) -> &str {
        &self.runtime.name
    }

    /// The handling agent's kind.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::{AgentKind, extract::{FromHandlerInput, HandlerInput}};
    /// # use soorma::prelude::*;
    ///
    /// struct Kind(AgentKind);
    ///
    /// impl FromHandlerInput for Kind {
    ///     fn from_input(input: &HandlerInput) -> Result<Self, String> {
    ///         Ok(Kind(input.agent_kind()))
    ///     }
    /// }
    ///
    /// async fn kind(_: Invocation, Kind(k): Kind) -> Result<AgentKind, ToolError> { Ok(k) }
    ///
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("kinds").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("kind.requested", kind)).start(&platform).await?;
    /// let k: AgentKind = platform.client("docs").invoke("kind.requested", (), "kind.completed").await?;
    /// assert_eq!(k, AgentKind::Tool);
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn agent_kind(&self) -> AgentKind {
        self.runtime.kind
    }

    /// The platform.
    ///
    /// ```
    /// use soorma::extract::{FromHandlerInput, HandlerInput};
    /// use soorma::registry::Discovery;
    ///
    /// /// Registry queries, as a handler argument.
    /// struct Registry(Discovery);
    ///
    /// impl FromHandlerInput for Registry {
    ///     fn from_input(input: &HandlerInput) -> Result<Self, String> {
    ///         Ok(Registry(input.platform().discovery()))
    ///     }
    /// }
    /// ```
    pub fn platform(&self) -> &Platform {
        &self.runtime.platform
    }

    /// A bus client publishing on behalf of this event's handling.
    ///
    /// ```
    /// use soorma::extract::{FromHandlerInput, HandlerInput};
    ///
    /// /// Publishes audit facts in the context of the handled event.
    /// struct Audit(soorma::BusClient);
    ///
    /// impl FromHandlerInput for Audit {
    ///     fn from_input(input: &HandlerInput) -> Result<Self, String> {
    ///         Ok(Audit(input.bus()))
    ///     }
    /// }
    /// ```
    pub fn bus(&self) -> BusClient {
        self.runtime.bus.in_context_of(self.envelope.clone())
    }

    /// The agent's state of type `S`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::extract::{FromHandlerInput, HandlerInput};
    /// # use soorma::prelude::*;
    ///
    /// struct Limit(u32); // the attached `u32`, else 100
    ///
    /// impl FromHandlerInput for Limit {
    ///     fn from_input(input: &HandlerInput) -> Result<Self, String> {
    ///         Ok(Limit(input.extension::<u32>().copied().unwrap_or(100)))
    ///     }
    /// }
    ///
    /// async fn limit(_: Invocation, Limit(n): Limit) -> Result<u32, ToolError> { Ok(n) }
    ///
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("limits").use_registered_handlers(false) // no state attached
    /// #     .handler(Handler::on_invoke("limit.requested", limit)).start(&platform).await?;
    /// let n: u32 = platform.client("docs").invoke("limit.requested", (), "limit.completed").await?;
    /// assert_eq!(n, 100);
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn extension<S: Send + Sync + 'static>(&self) -> Option<&S> {
        self.runtime.extensions.get()
    }
}

/// A handler argument built from the [`HandlerInput`] (after the context argument).
///
/// Implemented for [`State<S>`], [`BusClient`] and [`Platform`]; implement it for your own
/// extractors.
///
/// ```
/// use soorma::extract::{FromHandlerInput, HandlerInput};
///
/// /// The tenant of the handled event.
/// struct Tenant(String);
///
/// impl FromHandlerInput for Tenant {
///     fn from_input(input: &HandlerInput) -> Result<Self, String> {
///         Ok(Tenant(input.envelope().tenant().to_owned()))
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a handler argument",
    label = "not an extractor",
    note = "after the context argument, handlers take extractors such as `State<S>`, `BusClient` or `Platform`"
)]
pub trait FromHandlerInput: Sized + Send + 'static {
    /// Builds the argument; an error fails the handling of this event.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::extract::{FromHandlerInput, HandlerInput};
    /// # use soorma::prelude::*;
    ///
    /// struct User(String);
    ///
    /// impl FromHandlerInput for User {
    ///     fn from_input(input: &HandlerInput) -> Result<Self, String> {
    ///         input.envelope().user_id.clone().map(User).ok_or_else(|| "sign in first".into())
    ///     }
    /// }
    ///
    /// # async fn hello(_: Invocation, User(name): User) -> Result<String, ToolError> {
    /// #     Ok(format!("hello {name}"))
    /// # }
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("greeter").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("hello.requested", hello)).start(&platform).await?;
    /// // `hello(_: Invocation, User(name): User)` fails for anonymous callers:
    /// let outcome = platform.client("docs").invoke::<String>("hello.requested", (), "hello.done").await;
    /// assert!(outcome.unwrap_err().to_string().contains("sign in first"));
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    fn from_input(input: &HandlerInput) -> Result<Self, String>;

    /// Checks at agent start that the argument can be built (e.g. the state is attached).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::extract::{Extensions, FromHandlerInput, HandlerInput};
    /// # use soorma::prelude::*;
    ///
    /// struct DbUrl(String); // attached with `.with_state(DbUrl(..))`
    ///
    /// impl FromHandlerInput for DbUrl {
    /// #   fn from_input(input: &HandlerInput) -> Result<Self, String> {
    /// #       input.extension::<DbUrl>().map(|u| DbUrl(u.0.clone())).ok_or_else(|| "no DbUrl".into())
    /// #   }
    ///     fn check(extensions: &Extensions) -> Result<(), String> {
    ///         if extensions.contains::<DbUrl>() { Ok(()) } else { Err("attach a DbUrl".into()) }
    ///     }
    /// }
    ///
    /// # async fn query(_: Invocation, DbUrl(url): DbUrl) -> Result<String, ToolError> { Ok(url) }
    /// let tool = Tool::new("db").use_registered_handlers(false)
    ///     .handler(Handler::on_invoke("query.requested", query)); // takes a `DbUrl`
    /// assert!(tool.start(&Platform::embedded()).await.is_err()); // fails at start
    /// # Ok(()) }
    /// ```
    fn check(_extensions: &Extensions) -> Result<(), String> {
        Ok(())
    }
}

/// The agent's typed state, attached with
/// [`AgentBuilder::with_state`](crate::AgentBuilder::with_state) (as axum's `State`).
///
/// ```
/// use soorma::prelude::*;
///
/// #[derive(Clone)]
/// struct Rates { vat: f64 }
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Price { net: f64 }
///
/// #[on_invoke("price.gross", agent = "pricing")]
/// async fn gross(req: Invocation<Price>, State(rates): State<Rates>) -> Result<f64, ToolError> {
///     Ok(req.data.net * (1.0 + rates.vat))
/// }
///
/// let agent = Tool::new("pricing").with_state(Rates { vat: 0.2 });
/// # let _ = agent;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct State<S>(pub S);

impl<S> Deref for State<S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.0
    }
}

impl<S> DerefMut for State<S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.0
    }
}

impl<S: Clone + Send + Sync + 'static> FromHandlerInput for State<S> {
    fn from_input(input: &HandlerInput) -> Result<Self, String> {
        input
            .extension::<S>()
            .cloned()
            .map(State)
            .ok_or_else(|| missing_state::<S>())
    }

    fn check(extensions: &Extensions) -> Result<(), String> {
        if extensions.contains::<S>() {
            Ok(())
        } else {
            Err(missing_state::<S>())
        }
    }
}

fn missing_state<S>() -> String {
    let ty = std::any::type_name::<S>();
    format!(
        "a handler takes `State<{ty}>` but the agent has no state of that type; add `.with_state(<{ty}>)`"
    )
}

impl FromHandlerInput for BusClient {
    fn from_input(input: &HandlerInput) -> Result<Self, String> {
        Ok(input.bus())
    }
}

impl FromHandlerInput for Platform {
    fn from_input(input: &HandlerInput) -> Result<Self, String> {
        Ok(input.platform().clone())
    }
}

//! Handlers: typed async fns erased into one callable shape, plus their registration.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use soorma_common::{AgentKind, Topic};

use super::extract::{Extensions, FromHandlerInput, HandlerInput};
use crate::error::{BoxError, Error, Result as SdkResult, is_retryable};
use crate::platform::Platform;
use crate::protocol::decode_payload;
use crate::util::BoxFuture;

/// Which attribute (and layer) a handler comes from: a label for logs, errors and the
/// registry; what a handler does is set by its layer's constructor.
///
/// ```
/// use soorma::prelude::*;
/// use soorma::HandlerKind;
///
/// async fn upper(req: Invocation<String>) -> Result<String, ToolError> {
///     Ok(req.data.to_uppercase())
/// }
///
/// assert_eq!(Handler::on_invoke("upper.requested", upper).kind(), HandlerKind::Invoke);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HandlerKind {
    /// `#[on_event]`: a raw event on an explicit topic.
    Event,
    /// `#[on_invoke]`: a tool request; the return value is the reply.
    Invoke,
    /// `#[on_task]`: a worker task.
    Task,
    /// `#[on_result]`: a sub-task result.
    Result,
    /// `#[on_fan_in]`: the replies of a typed fan-out.
    FanIn,
    /// `#[on_goal]`: a goal that starts a plan.
    Goal,
    /// `#[on_transition]`: an event moving a running plan.
    Transition,
}

impl HandlerKind {
    /// The attribute name (`on_invoke`, ...).
    ///
    /// ```
    /// use soorma::HandlerKind;
    /// assert_eq!(HandlerKind::Invoke.attribute(), "on_invoke");
    /// assert_eq!(HandlerKind::Result.attribute(), "on_result");
    /// ```
    pub fn attribute(self) -> &'static str {
        match self {
            HandlerKind::Event => "on_event",
            HandlerKind::Invoke => "on_invoke",
            HandlerKind::Task => "on_task",
            HandlerKind::Result => "on_result",
            HandlerKind::FanIn => "on_fan_in",
            HandlerKind::Goal => "on_goal",
            HandlerKind::Transition => "on_transition",
        }
    }
}

/// Why a handler did not succeed. Not public API.
#[doc(hidden)]
#[derive(Debug)]
pub enum Failure {
    /// The payload did not decode into the handler's type.
    Decode(Error),
    /// The handler (or an extractor) returned an error.
    Handler {
        /// The error message.
        message: String,
        /// Whether redelivery may succeed.
        retryable: bool,
    },
}

/// A handler's outcome: `Some(value)` asks the runtime to reply with it.
pub(crate) type HandlerOutcome = Result<Option<Value>, Failure>;
pub(crate) type ErasedFn =
    Arc<dyn Fn(HandlerInput) -> BoxFuture<'static, HandlerOutcome> + Send + Sync>;
pub(crate) type SchemaFn = fn() -> Value;

/// Where a handler's schema comes from: its Rust type, or a schema given at run time.
#[derive(Clone)]
pub(crate) enum SchemaSource {
    /// The schema of a type (`schema_of::<T>`).
    Of(SchemaFn),
    /// A schema given with [`Handler::with_payload_schema`] / [`Handler::with_response_schema`].
    Given(Arc<Value>),
}

impl SchemaSource {
    pub(crate) fn get(&self) -> Value {
        match self {
            SchemaSource::Of(f) => f(),
            SchemaSource::Given(v) => Value::clone(v),
        }
    }
}
pub(crate) type CheckFn = fn(&Extensions) -> Result<(), String>;

/// What a layer does when one of its handlers fails for good (not retryable, or out of
/// attempts): `Ok(true)` handled (acknowledge), `Ok(false)` not handled (dead-letter with the
/// handler's error), `Err` the policy itself failed (retried when that error is transient).
pub(crate) type FailurePolicy =
    for<'a> fn(&'a HandlerInput, String) -> BoxFuture<'a, SdkResult<bool>>;

/// What a layer needs done once when an agent with its handlers starts (on the agent's
/// platform); idempotent.
pub(crate) type StartHook = for<'a> fn(&'a Platform) -> BoxFuture<'a, ()>;

/// What a layer does when a request of its agent is canceled
/// ([`CANCEL_REQUESTED`](soorma_common::events::CANCEL_REQUESTED)): `input` holds the cancel
/// event (its tenant, and the request id as correlation id). Runs on every instance of the
/// agent, after the request's handler (if this instance ran it) was dropped; idempotent.
pub(crate) type CancelHook = for<'a> fn(&'a HandlerInput) -> BoxFuture<'a, ()>;

/// A layer's assembly of an agent's handlers when the agent starts (and for its definition):
/// it may add or replace handlers (a planner's default transition, a worker's fan-in routers)
/// and record in `wiring` what its handlers need to know about the agent (which replies a
/// worker waits for). It gets the agent's name. Returns the problems found (they fail the
/// start). Each distinct hook runs once per agent.
pub(crate) type Assemble = fn(&str, &mut Vec<Handler>, &mut Extensions) -> Vec<String>;

/// How a handler appears in the agent's registry definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Advertised {
    /// As a capability: a request it serves, with its payload and reply schemas.
    Capability,
    /// As an event it consumes.
    ConsumedEvent,
    /// Not at all (e.g. a planner's transition handler).
    Hidden,
}

/// The JSON Schema of `T`.
pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    Value::from(schemars::schema_for!(T))
}

/// A handler's error as a failure: its message, and retryable when an error in its chain
/// says so ([`is_retryable`]).
pub(crate) fn handler_failure<E: Into<BoxError>>(err: E) -> Failure {
    let err: BoxError = err.into();
    Failure::Handler {
        message: err.to_string(),
        retryable: is_retryable(&*err),
    }
}

/// What a string-named handler's payload implements (the `T` of `Invocation<T>`,
/// `TaskContext<T>`, `ResultContext<T>`, `Event<T>`, `GoalContext<T>`): it is decoded from
/// JSON, and its schema is registered. Implemented for every `DeserializeOwned + JsonSchema`
/// type; a type that lacks one is reported naming the derives.
///
/// ```
/// use soorma::HandlerPayload;
///
/// fn payload<T: HandlerPayload>() {}
/// payload::<String>();
/// payload::<serde_json::Value>();
/// payload::<Vec<u32>>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a handler payload: it must implement `Deserialize` and `JsonSchema`",
    label = "not `Deserialize + JsonSchema`",
    note = "derive them: `#[derive(Deserialize, JsonSchema)]` (the payload is decoded from JSON, and its schema registered with the agent)"
)]
pub trait HandlerPayload: DeserializeOwned + JsonSchema + Send + 'static {}

impl<T: DeserializeOwned + JsonSchema + Send + 'static> HandlerPayload for T {}

/// What `#[on_event]`, `#[on_task]`, `#[on_result]`, `#[on_goal]` and `#[on_transition]`
/// handlers return: `()`, or `Result<T, E>` for any `T` (the value is ignored, so
/// `task.complete(x).await` can be the last expression) and any error that converts into
/// `Box<dyn Error + Send + Sync>`: [`soorma::Error`](crate::Error), [`ToolError`](crate::ToolError),
/// `String`, `&'static str`, any `std::error::Error + Send + Sync`, `anyhow::Error`.
///
/// An error that is retryable ([`is_retryable`], which looks through the error's
/// `source()` chain) is redelivered; any other fails the event.
///
/// ```
/// use soorma::HandlerOutput;
///
/// fn handler_output<O: HandlerOutput>() {}
/// handler_output::<()>();
/// handler_output::<soorma::Result<()>>();
/// handler_output::<soorma::Result<bool>>();
/// handler_output::<Result<(), soorma::ToolError>>();
/// handler_output::<Result<u32, String>>();
/// handler_output::<Result<(), std::io::Error>>();
/// ```
#[diagnostic::on_unimplemented(
    message = "soorma handlers must return `()` or `Result<T, E>` where `E: Into<Box<dyn Error + Send + Sync>>` (`soorma::Error`, `ToolError`, `String`, any `std::error::Error + Send + Sync`); found `{Self}`"
)]
pub trait HandlerOutput: Send + 'static {
    /// Converts into the SDK's outcome.
    #[doc(hidden)]
    fn into_outcome(self) -> Result<(), Failure>;
}

impl HandlerOutput for () {
    fn into_outcome(self) -> Result<(), Failure> {
        Ok(())
    }
}

impl<T, E> HandlerOutput for Result<T, E>
where
    T: Send + 'static,
    E: Into<BoxError> + Send + 'static,
{
    fn into_outcome(self) -> Result<(), Failure> {
        self.map(drop).map_err(handler_failure)
    }
}

/// An async fn usable as a handler: a context argument `Ctx`, then extractors `Args`.
///
/// ```
/// use soorma::prelude::*;
/// use soorma::HandlerFn;
///
/// async fn greet(req: Invocation<String>, State(hello): State<String>) -> Result<String, ToolError> {
///     Ok(format!("{hello} {}", req.data))
/// }
///
/// fn is_handler<Ctx, Args, H: HandlerFn<Ctx, Args>>(_: H) {}
/// is_handler::<Invocation<String>, _, _>(greet);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a soorma handler for this context",
    note = "a handler is an `async fn` whose first argument is the context (`Invocation<T>`, `TaskContext<T>`, `ResultContext<T>` or `Event<T>`) followed by extractors such as `State<S>`",
    note = "its future must be `Send`: do not hold non-`Send` values (`Rc`, `RefCell` borrows, `MutexGuard` of std) across an `.await`"
)]
pub trait HandlerFn<Ctx, Args>: Clone + Send + Sync + 'static {
    /// The handler's return type.
    type Output: Send + 'static;
    /// The handler's future.
    type Future: Future<Output = Self::Output> + Send + 'static;
    /// Start-time checks of the extractors.
    #[doc(hidden)]
    fn checks() -> Vec<CheckFn>;
    /// Builds the extractors and calls the function.
    #[doc(hidden)]
    fn call(&self, ctx: Ctx, input: &HandlerInput) -> Result<Self::Future, String>;
}

macro_rules! impl_handler_fn {
    ($($x:ident),*) => {
        impl<F, Fut, Ctx, $($x,)*> HandlerFn<Ctx, ($($x,)*)> for F
        where
            F: Fn(Ctx, $($x,)*) -> Fut + Clone + Send + Sync + 'static,
            Fut: Future + Send + 'static,
            Fut::Output: Send + 'static,
            $($x: FromHandlerInput,)*
        {
            type Output = Fut::Output;
            type Future = Fut;

            fn checks() -> Vec<CheckFn> {
                vec![$($x::check as CheckFn,)*]
            }

            #[allow(non_snake_case, unused_variables)]
            fn call(&self, ctx: Ctx, input: &HandlerInput) -> Result<Fut, String> {
                $(let $x = $x::from_input(input)?;)*
                Ok((self)(ctx, $($x,)*))
            }
        }
    };
}

impl_handler_fn!();
impl_handler_fn!(X1);
impl_handler_fn!(X1, X2);
impl_handler_fn!(X1, X2, X3);
impl_handler_fn!(X1, X2, X3, X4);
impl_handler_fn!(X1, X2, X3, X4, X5);
impl_handler_fn!(X1, X2, X3, X4, X5, X6);

/// An async fn usable as a handler that takes, after its context `Ctx`, one more value `A`
/// the layer provides (a fan-in's replies), then extractors `Args`.
///
/// ```
/// use soorma::prelude::*;
/// use soorma::HandlerFnWith;
///
/// async fn collect(task: TaskContext<String>, replies: (u32, String)) -> soorma::Result<()> {
///     let _ = (task, replies);
///     Ok(())
/// }
///
/// fn is_handler<Ctx, A, Args, H: HandlerFnWith<Ctx, A, Args>>(_: H) {}
/// is_handler::<TaskContext<String>, (u32, String), _, _>(collect);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a soorma handler for this context and value",
    note = "the handler is an `async fn` whose first argument is the context, the second the value its attribute provides (e.g. a fan-in's replies), followed by extractors such as `State<S>`",
    note = "its future must be `Send`: do not hold non-`Send` values (`Rc`, `RefCell` borrows, `MutexGuard` of std) across an `.await`"
)]
pub trait HandlerFnWith<Ctx, A, Args>: Clone + Send + Sync + 'static {
    /// The handler's return type.
    type Output: Send + 'static;
    /// The handler's future.
    type Future: Future<Output = Self::Output> + Send + 'static;
    /// Start-time checks of the extractors.
    #[doc(hidden)]
    fn checks() -> Vec<CheckFn>;
    /// Builds the extractors and calls the function.
    #[doc(hidden)]
    fn call(&self, ctx: Ctx, value: A, input: &HandlerInput) -> Result<Self::Future, String>;
}

macro_rules! impl_handler_fn_with {
    ($($x:ident),*) => {
        impl<F, Fut, Ctx, A, $($x,)*> HandlerFnWith<Ctx, A, ($($x,)*)> for F
        where
            F: Fn(Ctx, A, $($x,)*) -> Fut + Clone + Send + Sync + 'static,
            Fut: Future + Send + 'static,
            Fut::Output: Send + 'static,
            $($x: FromHandlerInput,)*
        {
            type Output = Fut::Output;
            type Future = Fut;

            fn checks() -> Vec<CheckFn> {
                vec![$($x::check as CheckFn,)*]
            }

            #[allow(non_snake_case, unused_variables)]
            fn call(&self, ctx: Ctx, value: A, input: &HandlerInput) -> Result<Fut, String> {
                $(let $x = $x::from_input(input)?;)*
                Ok((self)(ctx, value, $($x,)*))
            }
        }
    };
}

impl_handler_fn_with!();
impl_handler_fn_with!(X1);
impl_handler_fn_with!(X1, X2);
impl_handler_fn_with!(X1, X2, X3);
impl_handler_fn_with!(X1, X2, X3, X4);
impl_handler_fn_with!(X1, X2, X3, X4, X5);

/// A registered handler: what it listens to, its schemas and the erased function.
///
/// Built by the attribute macros, or by hand for run-time registration:
///
/// ```
/// use soorma::prelude::*;
///
/// async fn echo(req: Invocation<serde_json::Value>) -> Result<serde_json::Value, ToolError> {
///     Ok(req.data)
/// }
///
/// let tool = Tool::new("echo")
///     .handler(Handler::on_invoke("echo.requested", echo).with_description("Echoes its input."));
/// # let _ = tool;
/// ```
#[derive(Clone)]
pub struct Handler {
    pub(crate) kind: HandlerKind,
    pub(crate) topic: Topic,
    pub(crate) event: String,
    pub(crate) description: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) fn_name: Option<&'static str>,
    /// The module of the annotated function (attribute-registered handlers).
    pub(crate) module: Option<&'static str>,
    /// The agent its attribute names (`agent = "..."`).
    pub(crate) named_agent: Option<&'static str>,
    pub(crate) payload_schema: SchemaSource,
    pub(crate) response_schema: Option<SchemaSource>,
    pub(crate) checks: Vec<CheckFn>,
    pub(crate) call: ErasedFn,
    pub(crate) advertised: Advertised,
    pub(crate) on_failure: Option<FailurePolicy>,
    pub(crate) on_start: Option<StartHook>,
    /// The layer's part of canceling a request (see [`CancelHook`]).
    pub(crate) on_cancel: Option<CancelHook>,
    /// The layer's assembly of the agent's handlers at start (see [`Assemble`]).
    pub(crate) assemble: Option<Assemble>,
    /// What the layer keeps with the handler for its assembly (e.g. a fan-in's typed call).
    pub(crate) layer: Option<Arc<dyn Any + Send + Sync>>,
    /// The reply event of a typed request (default: derived from the event).
    pub(crate) reply_event: Option<std::borrow::Cow<'static, str>>,
    /// The request events whose replies the handler waits for (advertised in the registry).
    pub(crate) requests: Vec<String>,
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler")
            .field("kind", &self.kind)
            .field("topic", &self.topic)
            .field("event", &self.event)
            .field("fn_name", &self.fn_name)
            .finish_non_exhaustive()
    }
}

impl Handler {
    /// A handler of `kind` for `event` on `topic`; its layer sets what it advertises and its
    /// policies.
    pub(crate) fn new(
        kind: HandlerKind,
        topic: Topic,
        event: String,
        payload_schema: SchemaFn,
        checks: Vec<CheckFn>,
        call: ErasedFn,
    ) -> Self {
        Self {
            kind,
            topic,
            event,
            description: None,
            name: None,
            fn_name: None,
            module: None,
            named_agent: None,
            payload_schema: SchemaSource::Of(payload_schema),
            response_schema: None,
            checks,
            call,
            advertised: Advertised::ConsumedEvent,
            on_failure: None,
            on_start: None,
            on_cancel: None,
            assemble: None,
            layer: None,
            reply_event: None,
            requests: Vec::new(),
        }
    }

    /// Sets the capability description (the macros use the doc comment).
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn upper(req: Invocation<String>) -> Result<String, ToolError> {
    ///     Ok(req.data.to_uppercase())
    /// }
    ///
    /// let h = Handler::on_invoke("upper.requested", upper).with_description("Upper-cases text.");
    /// let def = Tool::new("upper").use_registered_handlers(false).handler(h).definition();
    /// assert_eq!(def.capabilities[0].description, "Upper-cases text.");
    /// ```
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets the capability name (default: the event name).
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn upper(req: Invocation<String>) -> Result<String, ToolError> {
    ///     Ok(req.data.to_uppercase())
    /// }
    ///
    /// let h = Handler::on_invoke("upper.requested", upper).with_name("shout");
    /// let def = Tool::new("upper").use_registered_handlers(false).handler(h).definition();
    /// assert_eq!(def.capabilities[0].task_name, "shout");
    /// ```
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Replaces the payload schema the handler registers (default: the schema of its payload
    /// type). For handlers built at run time whose payload is `serde_json::Value` but whose
    /// schema is known, such as bridged MCP tools; requests are validated against it.
    ///
    /// ```
    /// use soorma::prelude::*;
    /// use serde_json::{json, Value};
    ///
    /// async fn add(req: Invocation<Value>) -> Result<f64, ToolError> {
    ///     Ok(req.data["a"].as_f64().unwrap_or(0.0) + req.data["b"].as_f64().unwrap_or(0.0))
    /// }
    ///
    /// let schema = json!({"type": "object", "required": ["a", "b"]});
    /// let h = Handler::on_invoke("add.requested", add).with_payload_schema(schema.clone());
    /// let def = Tool::new("adder").use_registered_handlers(false).handler(h).definition();
    /// assert_eq!(def.capabilities[0].consumed_event.payload_schema, Some(schema));
    /// ```
    #[must_use]
    pub fn with_payload_schema(mut self, schema: Value) -> Self {
        self.payload_schema = SchemaSource::Given(Arc::new(schema));
        self
    }

    /// Replaces the response schema of a tool handler (default: the schema of its result type).
    ///
    /// ```
    /// use soorma::prelude::*;
    /// use serde_json::{json, Value};
    ///
    /// async fn echo(req: Invocation<Value>) -> Result<Value, ToolError> {
    ///     Ok(req.data)
    /// }
    ///
    /// let schema = json!({"type": "object"});
    /// let h = Handler::on_invoke("echo.requested", echo).with_response_schema(schema.clone());
    /// let def = Tool::new("echo").use_registered_handlers(false).handler(h).definition();
    /// assert_eq!(def.capabilities[0].consumed_event.response_schema, Some(schema));
    /// ```
    #[must_use]
    pub fn with_response_schema(mut self, schema: Value) -> Self {
        self.response_schema = Some(SchemaSource::Given(Arc::new(schema)));
        self
    }

    /// The handler's kind.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn audit(_: Event) {}
    ///
    /// assert_eq!(Handler::on_event(Topic::BusinessFacts, "*", audit).kind(), soorma::HandlerKind::Event);
    /// ```
    pub fn kind(&self) -> HandlerKind {
        self.kind
    }

    /// The topic it listens on.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn alert(_: Event) {}
    ///
    /// assert_eq!(Handler::on_event(Topic::SystemEvents, "disk.full", alert).topic(), Topic::SystemEvents);
    /// ```
    pub fn topic(&self) -> Topic {
        self.topic
    }

    /// The event type it handles.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn ping(_: Invocation) -> Result<String, ToolError> {
    ///     Ok("pong".into())
    /// }
    ///
    /// assert_eq!(Handler::on_invoke("ping.requested", ping).event(), "ping.requested");
    /// ```
    pub fn event(&self) -> &str {
        &self.event
    }

    /// A readable name for logs and errors.
    pub(crate) fn label(&self) -> String {
        match self.fn_name {
            Some(f) => format!("`{f}` (#[{}(\"{}\")])", self.kind.attribute(), self.event),
            None => format!("#[{}(\"{}\")]", self.kind.attribute(), self.event),
        }
    }
}

/// The erased call of a handler whose context is built from the decoded payload: decode `T`
/// (a mismatch is a decode failure), build the context, run the handler; no reply value.
pub(crate) fn payload_call<C, T, H, Args>(
    handler: H,
    context: fn(T, &HandlerInput) -> C,
) -> ErasedFn
where
    H: HandlerFn<C, Args>,
    H::Output: HandlerOutput,
    T: DeserializeOwned + Send + 'static,
    C: Send + 'static,
{
    Arc::new(move |input: HandlerInput| {
        let handler = handler.clone();
        Box::pin(async move {
            let data = decode_payload::<T>(&input.envelope.event_type, &input.envelope.data)
                .map_err(Failure::Decode)?;
            let fut = handler
                .call(context(data, &input), &input)
                .map_err(extractor_failure)?;
            fut.await.into_outcome().map(|()| None)
        })
    })
}

/// An extractor that could not be built fails the handling (not retryable).
pub(crate) fn extractor_failure(message: String) -> Failure {
    Failure::Handler {
        message,
        retryable: false,
    }
}

/// A handler registered by an attribute macro, collected with `inventory`.
#[doc(hidden)]
pub struct HandlerRegistration {
    pub(crate) agent: Option<&'static str>,
    pub(crate) module: &'static str,
    pub(crate) fn_name: &'static str,
    pub(crate) build: fn() -> Handler,
}

impl HandlerRegistration {
    /// Used by the macros (without the function's module path).
    pub const fn new(
        agent: Option<&'static str>,
        fn_name: &'static str,
        build: fn() -> Handler,
    ) -> Self {
        Self::at(agent, "", fn_name, build)
    }

    /// Used by the macros: the handler of `fn_name` in `module`, for `agent`.
    pub const fn at(
        agent: Option<&'static str>,
        module: &'static str,
        fn_name: &'static str,
        build: fn() -> Handler,
    ) -> Self {
        Self {
            agent,
            module,
            fn_name,
            build,
        }
    }

    /// Builds the handler.
    pub fn handler(&self) -> Handler {
        let mut h = (self.build)();
        h.fn_name = Some(self.fn_name);
        h.module = (!self.module.is_empty()).then_some(self.module);
        h.named_agent = self.agent;
        h
    }

    /// The crate of the function (the first segment of its module path).
    pub(crate) fn krate(&self) -> &'static str {
        self.module.split("::").next().unwrap_or_default()
    }
}

inventory::collect!(HandlerRegistration);

/// Every handler the attribute macros registered in this binary.
pub(crate) fn registrations() -> impl Iterator<Item = &'static HandlerRegistration> {
    inventory::iter::<HandlerRegistration>.into_iter()
}

/// The handlers the macros registered for `agent`: those naming it, and those naming no
/// agent whose attribute fits an agent of `kind`.
pub(crate) fn registered_for(agent: &str, kind: AgentKind) -> Vec<Handler> {
    registrations()
        .map(|r| (r, r.handler()))
        .filter(|(r, h)| match r.agent {
            Some(a) => a == agent,
            None => fits(kind, h.kind),
        })
        .map(|(_, h)| h)
        .collect()
}

/// Whether a handler of `handler` kind belongs in an agent of `agent` kind.
pub(crate) fn fits(agent: AgentKind, handler: HandlerKind) -> bool {
    use HandlerKind as H;
    match agent {
        AgentKind::Tool => matches!(handler, H::Event | H::Invoke),
        AgentKind::Worker => matches!(
            handler,
            H::Event | H::Invoke | H::Task | H::Result | H::FanIn
        ),
        AgentKind::Planner => matches!(handler, H::Event | H::Goal | H::Transition),
        _ => handler == H::Event,
    }
}

/// The handlers of one annotated function: the attribute macros implement it for a
/// type named like the function, so that [`handlers!`](crate::handlers) can list functions
/// by path (a typo is a compile error).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a function annotated with a soorma handler attribute",
    label = "not an annotated handler function",
    note = "`handlers![..]` lists functions annotated with `#[on_invoke]`, `#[on_task]`, `#[on_fan_in(..)]`, `#[on_result(..)]`, `#[on_event(..)]`, `#[on_goal]` or `#[on_transition]`; add other handlers with `.handler(Handler::on_invoke(..))`"
)]
pub trait HandlerSet {
    /// The function's handlers (one per attribute on it).
    fn handlers() -> Vec<Handler>;
}

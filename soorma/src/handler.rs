//! Handlers: typed async fns erased into one callable shape, plus their registration.

use std::any::Any;
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use soorma_common::Topic;

use crate::context::{Event, Invocation, decode_payload};
use crate::error::Error;
use crate::extract::{Extensions, FromHandlerInput, HandlerInput};
use crate::planner::{GoalContext, PlanContext};
use crate::task::{ResultContext, TaskContext};
use crate::util::BoxFuture;

/// Which layer a handler belongs to.
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

pub(crate) type HandlerOutcome = Result<Option<Value>, Failure>;
type ErasedFn = Arc<dyn Fn(HandlerInput) -> BoxFuture<'static, HandlerOutcome> + Send + Sync>;
type SchemaFn = fn() -> Value;

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
type CheckFn = fn(&Extensions) -> Result<(), String>;

pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    Value::from(schemars::schema_for!(T))
}

/// Whether a handler error is worth retrying: soorma errors and `ToolError`s say so themselves.
fn is_retryable(err: &dyn Any) -> bool {
    if let Some(e) = err.downcast_ref::<Error>() {
        e.is_retryable()
    } else if let Some(e) = err.downcast_ref::<crate::ToolError>() {
        e.is_retryable()
    } else {
        false
    }
}

fn handler_failure<E: Display + 'static>(err: E) -> Failure {
    Failure::Handler {
        message: err.to_string(),
        retryable: is_retryable(&err),
    }
}

/// What an `#[on_invoke]` handler returns: `Result<T, E>` with `T: Serialize + JsonSchema`.
///
/// ```
/// use soorma::ToolOutput;
///
/// fn tool_output<O: ToolOutput>() {}
/// tool_output::<Result<u32, soorma::ToolError>>();
/// tool_output::<Result<Vec<String>, String>>(); // any `E: Display`
/// ```
#[diagnostic::on_unimplemented(
    message = "`#[on_invoke]` handlers must return `Result<T, E>` where `T: Serialize + JsonSchema` and `E: Display`; found `{Self}`"
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
    E: Display + Send + 'static,
{
    type Ok = T;

    fn into_outcome(self) -> Result<T, Failure> {
        self.map_err(handler_failure)
    }
}

/// What `#[on_task]`, `#[on_result]` and `#[on_event]` handlers return: `()` or `Result<(), E>`.
///
/// ```
/// use soorma::HandlerOutput;
///
/// fn handler_output<O: HandlerOutput>() {}
/// handler_output::<()>();
/// handler_output::<soorma::Result<()>>();
/// handler_output::<Result<(), String>>();
/// ```
#[diagnostic::on_unimplemented(
    message = "soorma handlers must return `()` or `Result<(), E>` where `E: Display`; found `{Self}`"
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

impl<E: Display + Send + 'static> HandlerOutput for Result<(), E> {
    fn into_outcome(self) -> Result<(), Failure> {
        self.map_err(handler_failure)
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
    pub(crate) payload_schema: SchemaSource,
    pub(crate) response_schema: Option<SchemaSource>,
    pub(crate) checks: Vec<CheckFn>,
    pub(crate) call: ErasedFn,
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
    fn new(
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
            payload_schema: SchemaSource::Of(payload_schema),
            response_schema: None,
            checks,
            call,
        }
    }

    /// A raw event handler on `topic` for `event` (`"*"` = every event on the topic).
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn audit(event: Event) {
    ///     println!("{} on {}", event.event_type(), event.topic());
    /// }
    ///
    /// let every_fact = Handler::on_event(Topic::BusinessFacts, "*", audit);
    /// assert_eq!((every_fact.topic(), every_fact.event()), (Topic::BusinessFacts, "*"));
    /// ```
    pub fn on_event<H, T, Args>(topic: Topic, event: impl Into<String>, handler: H) -> Self
    where
        H: HandlerFn<Event<T>, Args>,
        H::Output: HandlerOutput,
        T: DeserializeOwned + JsonSchema + Send + 'static,
    {
        let call = payload_call(handler, Event::new);
        Self::new(
            HandlerKind::Event,
            topic,
            event.into(),
            schema_of::<T>,
            H::checks(),
            call,
        )
    }

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
        T: DeserializeOwned + JsonSchema + Send + 'static,
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
        let mut h = Self::new(
            HandlerKind::Invoke,
            Topic::ActionRequests,
            event.into(),
            schema_of::<T>,
            H::checks(),
            call,
        );
        h.response_schema = Some(SchemaSource::Of(schema_of::<<H::Output as ToolOutput>::Ok>));
        h
    }

    /// A worker task handler for requests of type `event` on `action-requests`.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn research(mut task: TaskContext<String>) -> soorma::Result<()> {
    ///     let topic = task.data.clone();
    ///     task.delegate("search.requested", topic, "search.completed").await?;
    ///     Ok(())
    /// }
    ///
    /// let h = Handler::on_task("research.requested", research);
    /// assert_eq!(h.kind(), soorma::HandlerKind::Task);
    /// ```
    pub fn on_task<H, T, Args>(event: impl Into<String>, handler: H) -> Self
    where
        H: HandlerFn<TaskContext<T>, Args>,
        H::Output: HandlerOutput,
        T: DeserializeOwned + JsonSchema + Send + 'static,
    {
        let call = payload_call(handler, TaskContext::from_request);
        Self::new(
            HandlerKind::Task,
            Topic::ActionRequests,
            event.into(),
            schema_of::<T>,
            H::checks(),
            call,
        )
    }

    /// A sub-task result handler for replies of type `event` on `action-results`.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn collect(result: ResultContext<String>) -> soorma::Result<()> {
    ///     let mut task = result.record_in_parent().await?;
    ///     task.complete(result.data).await?;
    ///     Ok(())
    /// }
    ///
    /// let h = Handler::on_result("search.completed", collect);
    /// assert_eq!(h.topic(), Topic::ActionResults);
    /// ```
    pub fn on_result<H, T, Args>(event: impl Into<String>, handler: H) -> Self
    where
        H: HandlerFn<ResultContext<T>, Args>,
        H::Output: HandlerOutput,
        T: DeserializeOwned + JsonSchema + Send + 'static,
    {
        let call: ErasedFn = Arc::new(move |input: HandlerInput| {
            let handler = handler.clone();
            Box::pin(async move {
                let ctx = ResultContext::<T>::decode(&input).map_err(Failure::Decode)?;
                let fut = handler.call(ctx, &input).map_err(extractor_failure)?;
                fut.await.into_outcome().map(|()| None)
            })
        });
        Self::new(
            HandlerKind::Result,
            Topic::ActionResults,
            event.into(),
            schema_of::<T>,
            H::checks(),
            call,
        )
    }

    /// A planner's goal handler for goals of type `event` on `action-requests`; it usually
    /// starts a plan with [`GoalContext::start`]. A failure fails the plan (or, before one was
    /// started, replies to the goal with the error).
    ///
    /// ```
    /// use soorma::prelude::*;
    /// use soorma::planner::{GoalContext, Plan};
    ///
    /// async fn research(goal: GoalContext, plan: State<std::sync::Arc<Plan>>) -> soorma::Result<()> {
    ///     goal.start(&plan).await.map(drop)
    /// }
    ///
    /// let h = Handler::on_goal("research.goal", research);
    /// assert_eq!(h.kind(), soorma::HandlerKind::Goal);
    /// ```
    pub fn on_goal<H, T, Args>(event: impl Into<String>, handler: H) -> Self
    where
        H: HandlerFn<GoalContext<T>, Args>,
        H::Output: HandlerOutput,
        T: DeserializeOwned + JsonSchema + Send + 'static,
    {
        let call = payload_call(handler, GoalContext::new);
        Self::new(
            HandlerKind::Goal,
            Topic::ActionRequests,
            event.into(),
            schema_of::<T>,
            H::checks(),
            call,
        )
    }

    /// A planner's transition handler: every event on `action-results` that belongs to one of
    /// the planner's plans (its correlation id is the plan id) arrives as the restored
    /// [`PlanContext`]; other results are ignored. A planner without one advances its plans
    /// with [`PlanContext::execute_next`].
    ///
    /// ```
    /// use soorma::prelude::*;
    /// use soorma::planner::PlanContext;
    ///
    /// async fn advance(mut plan: PlanContext) -> soorma::Result<()> {
    ///     if plan.trigger().is_some_and(|e| e.event_type == "approval.needed") {
    ///         return plan.pause("waiting for a person").await;
    ///     }
    ///     plan.execute_next().await
    /// }
    ///
    /// let h = Handler::on_transition(advance);
    /// assert_eq!(h.kind(), soorma::HandlerKind::Transition);
    /// ```
    pub fn on_transition<H, Args>(handler: H) -> Self
    where
        H: HandlerFn<PlanContext, Args>,
        H::Output: HandlerOutput,
    {
        let call: ErasedFn = Arc::new(move |input: HandlerInput| {
            let handler = handler.clone();
            Box::pin(async move {
                let plan = PlanContext::for_event(&input)
                    .await
                    .map_err(|e| Failure::Handler {
                        retryable: e.is_retryable(),
                        message: e.to_string(),
                    })?;
                let Some(plan) = plan else {
                    tracing::trace!(event_type = %input.envelope.event_type, "not an event of this planner's plans; ignored");
                    return Ok(None);
                };
                let fut = handler.call(plan, &input).map_err(extractor_failure)?;
                fut.await.into_outcome().map(|()| None)
            })
        });
        Self::new(
            HandlerKind::Transition,
            Topic::ActionResults,
            "*".into(),
            schema_of::<Value>,
            H::checks(),
            call,
        )
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
fn payload_call<C, T, H, Args>(handler: H, context: fn(T, &HandlerInput) -> C) -> ErasedFn
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

fn extractor_failure(message: String) -> Failure {
    Failure::Handler {
        message,
        retryable: false,
    }
}

/// A handler registered by an attribute macro, collected with `inventory`.
#[doc(hidden)]
pub struct HandlerRegistration {
    pub(crate) agent: Option<&'static str>,
    pub(crate) fn_name: &'static str,
    pub(crate) build: fn() -> Handler,
}

impl HandlerRegistration {
    /// Used by the macros.
    pub const fn new(
        agent: Option<&'static str>,
        fn_name: &'static str,
        build: fn() -> Handler,
    ) -> Self {
        Self {
            agent,
            fn_name,
            build,
        }
    }

    /// Builds the handler.
    pub(crate) fn handler(&self) -> Handler {
        let mut h = (self.build)();
        h.fn_name = Some(self.fn_name);
        h
    }
}

inventory::collect!(HandlerRegistration);

/// The handlers the macros registered for `agent` (named for it, or for no agent).
pub(crate) fn registered_for(agent: &str) -> Vec<Handler> {
    inventory::iter::<HandlerRegistration>
        .into_iter()
        .filter(|r| r.agent.is_none_or(|a| a == agent))
        .map(HandlerRegistration::handler)
        .collect()
}

//! Macros for soorma agents: the handler attributes [`macro@on_event`], [`macro@on_invoke`],
//! [`macro@on_task`], [`macro@on_result`], [`macro@on_fan_in`], [`macro@on_goal`],
//! [`macro@on_transition`], and [`derive@Request`].
//!
//! Use them through the `soorma` crate, which re-exports them. Each attribute validates the
//! handler's signature, leaves the function itself unchanged, and registers it twice:
//! - with `inventory`, so that a binary with one agent finds it without listing it
//!   (`Tool::new("calculator").run(&platform)`);
//! - as a handler set named like the function, so that a group of agents lists it by path:
//!   `Agents::new().tool("calculator", handlers![calculate])` (a typo is a compile error).
//!
//! Stacking several attributes on one function (two `#[on_result(..)]`) gives it one handler
//! per attribute, in one handler set. The description of a handler is taken from its `///`
//! doc comment unless `description = "..."` is given. Every attribute (and the derive) takes
//! `crate = "..."` for a renamed dependency: with `sdk = { package = "soorma", .. }` in
//! `Cargo.toml`, write `#[on_invoke(crate = "sdk")]`.
//!
//! # Typed and string-named handlers
//!
//! Requests are types: `#[derive(Request)]` names a request's event and reply type once, and
//! `#[on_invoke]`, `#[on_task]` and `#[on_goal]` without an event name take it from their
//! payload type. With an event name (`#[on_invoke("calculate.requested")]`) the payload is any
//! deserializable type; that form stays for events named at run time.
//!
//! # Diagnostics
//!
//! Misuse is reported once, on the offending token, saying what is allowed: a bad attribute
//! argument or signature by the macro itself; a payload, reply or extractor type that lacks a
//! trait at that type; a handler future that is not `Send` naming the value held across the
//! `.await`.
//!
//! Internally each attribute is expanded in two steps: `parse` turns the attributes and the
//! function into a `model::FnModel` (collecting every problem it finds), and `generate` turns
//! the model into tokens; `request` does the same for the derive.

#![warn(missing_docs)]

mod generate;
mod model;
mod parse;
mod request;

use proc_macro::TokenStream;

use crate::model::HandlerKind;

/// Registers an `async fn` as a handler for events published on a topic.
///
/// The topic is required and is one of `"business-facts"`,
/// `"action-requests"`, `"action-results"`, `"billing-events"`,
/// `"notification-events"`, `"system-events"`, `"plan-events"` or
/// `"task-events"`. The event name is required too, and may be `"*"` to receive every event
/// on the topic. The first argument must be an `Event<T>` (`T`: `Deserialize + JsonSchema`;
/// default `serde_json::Value`); extractors such as `State<S>` may follow. Returns `()` or
/// `Result<T, E>` with `E: Into<Box<dyn Error + Send + Sync>>`.
///
/// Arguments: `topic`, `event` (both also positional, in that order), `agent`,
/// `description`, `crate`.
///
/// ```ignore
/// use soorma::prelude::*;
///
/// /// Sends a confirmation e-mail.
/// #[on_event(topic = "business-facts", event = "order.placed", agent = "mailer")]
/// async fn confirm_order(event: Event<OrderPlaced>) -> soorma::Result<()> {
///     // ...
///     Ok(())
/// }
///
/// // Equivalent positional form:
/// #[on_event("business-facts", "order.placed")]
/// async fn audit(event: Event<OrderPlaced>) {}
/// ```
#[proc_macro_attribute]
pub fn on_event(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(HandlerKind::Event, args, item)
}

/// Registers an `async fn` as a request/response capability (a tool).
///
/// The first argument is an `Invocation<T>` (extractors such as `State<S>` may follow), and
/// the function returns `Result<R, E>` with `E: Into<Box<dyn Error + Send + Sync>>`
/// (`ToolError`, `soorma::Error`, `String`, any `std::error::Error + Send + Sync`); the value
/// is the reply, an error becomes an error reply.
///
/// - **Typed** (no event name): `T` is a request type (`#[derive(Request)]`); the event is
///   `T`'s, and `R` must be `T`'s reply type.
/// - **String-named**: `#[on_invoke("calculate.requested")]`; `T` is any
///   `Deserialize + JsonSchema` type (default `serde_json::Value`) and `R` any
///   `Serialize + JsonSchema` type.
///
/// Arguments: the event name (positional or `event = "..."`, string-named form only),
/// `agent`, `description`, `name` (the capability name), `crate`.
///
/// ```ignore
/// use soorma::prelude::*;
///
/// #[derive(Request, Serialize, Deserialize, JsonSchema)]
/// #[request(event = "calculate.requested", reply = Calculated)]
/// struct Calculate { expression: String }
///
/// /// Evaluates an arithmetic expression.
/// #[on_invoke(agent = "calculator")]
/// async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
///     let value = eval(&req.data.expression)?;
///     Ok(Calculated { value })
/// }
///
/// // String-named: the event is given, the payload is any deserializable type.
/// #[on_invoke("double.requested", agent = "calculator", name = "double")]
/// async fn double(req: Invocation<i64>) -> Result<i64, ToolError> {
///     Ok(req.data * 2)
/// }
/// ```
#[proc_macro_attribute]
pub fn on_invoke(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(HandlerKind::Invoke, args, item)
}

/// Registers an `async fn` as a handler for long-running tasks, which may delegate work to
/// other agents.
///
/// The first argument is a `TaskContext<T, S>` (`S`, the task's typed state, is optional);
/// extractors such as `State<S>` may follow. Returns `()` or `Result<T, E>` with
/// `E: Into<Box<dyn Error + Send + Sync>>`. The task replies when it completes (`task.complete(..)`, or the value its
/// [`macro@on_fan_in`] handler returns).
///
/// - **Typed** (no event name): `T` is a request type (`#[derive(Request)]`) whose event the
///   task handles; the task's reply is `T`'s reply type.
/// - **String-named**: `#[on_task("research.requested")]`; `T` is any
///   `Deserialize + JsonSchema` type (default `serde_json::Value`).
///
/// Arguments: the event name (positional or `event = "..."`, string-named form only),
/// `agent`, `description`, `name` (the task name), `crate`.
///
/// ```ignore
/// use soorma::prelude::*;
///
/// #[derive(Default, Serialize, Deserialize)]
/// struct Notes { topic: String }
///
/// /// Researches a topic by fanning out to the analyzers.
/// #[on_task(agent = "researcher")]
/// async fn research(mut task: TaskContext<Research, Notes>) -> soorma::Result<()> {
///     task.state_mut().topic = task.data.topic.clone();
///     let text = task.data.text.clone();
///     task.fan_out((AnalyzeSentiment { text: text.clone() }, Summarize { text })).await?;
///     Ok(())
/// }
///
/// // String-named:
/// #[on_task("translate.requested", agent = "researcher")]
/// async fn translate(task: TaskContext<String>) -> soorma::Result<()> {
///     task.delegate("search.requested", &task.data, "search.completed").await?;
///     Ok(())
/// }
/// ```
#[proc_macro_attribute]
pub fn on_task(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(HandlerKind::Task, args, item)
}

/// Registers an `async fn` as a handler for the results of work delegated by event name.
///
/// The event name is required. The first argument must be a `ResultContext<T>` (`T`: the
/// result's type; default `serde_json::Value`); extractors such as `State<S>` may follow.
/// Returns `()` or `Result<T, E>` with `E: Into<Box<dyn Error + Send + Sync>>`. Stack the attribute to handle several
/// result events with one function. (For the replies of a typed `fan_out`, use
/// [`macro@on_fan_in`].)
///
/// Arguments: the event name (positional or `event = "..."`), `agent`, `description`,
/// `crate`.
///
/// ```ignore
/// use soorma::prelude::*;
///
/// /// Collects findings from the searchers.
/// #[on_result("search.completed", agent = "researcher")]
/// #[on_result("summary.completed", agent = "researcher")]
/// async fn collect(result: ResultContext<Findings>) -> soorma::Result<()> {
///     // ...
///     Ok(())
/// }
/// ```
#[proc_macro_attribute]
pub fn on_result(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(HandlerKind::Result, args, item)
}

/// Registers an `async fn` as the fan-in of a typed fan-out: it runs once per
/// `task.fan_out((A { .. }, B { .. }))` of exactly the request types it names, when the last
/// reply is recorded.
///
/// The attribute names the request types, in the order of the fan-out (one or more, at most
/// 8). The function takes the task (`TaskContext<T, S>`, `T` its request type), then the
/// replies (`A`'s reply for one request, a tuple of the replies in order for several; each may
/// be taken as `Result<Reply, SubTaskFailed>` to handle a failed sub-task instead of failing
/// the task), then extractors. It returns `Result<R, E>` where `R` is `T`'s reply (which
/// completes the task), or `Result<Delegated, E>` after delegating more.
///
/// Arguments: the request types (positional), `agent`, `description`, `crate`.
///
/// ```ignore
/// use soorma::prelude::*;
///
/// /// Runs once, when both replies are in.
/// #[on_fan_in(AnalyzeSentiment, Summarize, agent = "researcher")]
/// async fn collect(
///     task: TaskContext<Research, Notes>,
///     (sentiment, summary): (Sentiment, Result<Summary, SubTaskFailed>),
/// ) -> soorma::Result<Report> {
///     Ok(Report { topic: task.state().topic.clone(), sentiment, summary: summary.ok() })
/// }
/// ```
#[proc_macro_attribute]
pub fn on_fan_in(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(HandlerKind::FanIn, args, item)
}

/// Registers an `async fn` as a planner's goal handler: a goal request that usually starts a
/// plan.
///
/// The first argument is a `GoalContext<T>`; extractors such as `State<S>` may follow.
/// Returns `()` or `Result<T, E>` with `E: Into<Box<dyn Error + Send + Sync>>`. The plan's result is the goal's reply.
///
/// - **Typed** (no event name): `T` is a request type (`#[derive(Request)]`) whose event is
///   the goal.
/// - **String-named**: `#[on_goal("research.goal")]`; `T` is any `Deserialize + JsonSchema`
///   type (default `serde_json::Value`).
///
/// Arguments: the event name (positional or `event = "..."`, string-named form only),
/// `agent`, `description`, `name`, `crate`.
///
/// ```ignore
/// use soorma::prelude::*;
///
/// /// Plans a trip.
/// #[on_goal(agent = "trip-planner")]
/// async fn plan_trip(goal: GoalContext<Trip>, plan: State<Arc<Plan>>) -> soorma::Result<PlanContext> {
///     goal.start(&plan).await
/// }
///
/// // String-named:
/// #[on_goal("research.goal", agent = "research-planner")]
/// async fn research(goal: GoalContext<Research>, plan: State<Arc<Plan>>) -> soorma::Result<PlanContext> {
///     goal.start(&plan).await
/// }
/// ```
#[proc_macro_attribute]
pub fn on_goal(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(HandlerKind::Goal, args, item)
}

/// Registers an `async fn` as a planner's transition handler: it receives every event that
/// belongs to one of the planner's plans, as the restored `PlanContext`.
///
/// Arguments: `agent`, `description`, `crate` (no event name).
///
/// ```ignore
/// use soorma::prelude::*;
///
/// #[on_transition(agent = "research-planner")]
/// async fn advance(mut plan: PlanContext) -> soorma::Result<()> {
///     plan.execute_next().await
/// }
/// ```
#[proc_macro_attribute]
pub fn on_transition(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(HandlerKind::Transition, args, item)
}

/// Derives `soorma::Request` for a struct or an enum: the event the request is published as
/// and the type its consumer replies with.
///
/// `#[request(event = "...", reply = Type)]` is required; `reply_event = "..."` overrides the
/// reply's event (default: `<stem>.completed` for `<stem>.requested`, else
/// `<event>.completed`), and `crate = "..."` names a renamed soorma dependency. The type must
/// also derive `Serialize`, `Deserialize` and `JsonSchema`, and the reply type implement
/// them. Generic types are supported (the impl requires the instantiation and its reply to
/// serialize); lifetimes are not (a request owns its data).
///
/// ```ignore
/// use soorma::prelude::*;
///
/// #[derive(Request, Serialize, Deserialize, JsonSchema)]
/// #[request(event = "sentiment.analyze", reply = Sentiment)]
/// struct AnalyzeSentiment { text: String }
///
/// #[derive(Request, Serialize, Deserialize, JsonSchema)]
/// #[request(event = "order.place", reply = OrderId, reply_event = "order.placed")]
/// enum PlaceOrder { Book { isbn: String }, GiftCard { amount: u32 } }
/// ```
#[proc_macro_derive(Request, attributes(request))]
pub fn derive_request(input: TokenStream) -> TokenStream {
    request::derive(input.into()).into()
}

/// parse → model → generate. On error, emits the errors plus the function (without its
/// soorma attributes) and an empty handler set, so that one misuse does not cascade into
/// unrelated "cannot find" errors at its uses.
fn expand(kind: HandlerKind, args: TokenStream, item: TokenStream) -> TokenStream {
    let args = proc_macro2::TokenStream::from(args);
    let item = proc_macro2::TokenStream::from(item);
    let krate = parse::find_crate(&args);
    match parse::parse_fn(kind, args, item.clone()) {
        Ok(model) => generate::generate(&model).into(),
        Err(failure) => {
            let mut out = failure.error.to_compile_error();
            match &failure.item_fn {
                Some(item_fn) => out.extend(generate::generate_failure(item_fn, krate.as_ref())),
                None => out.extend(item),
            }
            out.into()
        }
    }
}

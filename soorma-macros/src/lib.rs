//! Attribute macros for soorma agents: [`macro@on_event`], [`macro@on_invoke`],
//! [`macro@on_task`] and [`macro@on_result`].
//!
//! Use them through the `soorma` crate, which re-exports them. Each attribute
//! validates the handler's signature, leaves the function itself unchanged,
//! and registers it (via `inventory`) so that the agent runtime can discover
//! it. Stacking several attributes on one function registers it once per
//! attribute.
//!
//! The description of a handler is taken from its `///` doc comment unless
//! `description = "..."` is given.
//!
//! Internally each attribute is expanded in two steps: `parse` turns the
//! attribute arguments and the function into a `model::HandlerModel`
//! (collecting every problem it finds), and `generate` turns the model into
//! tokens.

#![warn(missing_docs)]

mod generate;
mod model;
mod parse;

use proc_macro::TokenStream;

use crate::model::HandlerKind;

/// Registers an `async fn` as a handler for events published on a topic.
///
/// The topic is required and is one of `"business-facts"`,
/// `"action-requests"`, `"action-results"`, `"billing-events"`,
/// `"notification-events"`, `"system-events"`, `"plan-events"` or
/// `"task-events"`. The event name may be `"*"` to receive every event on
/// the topic. The first argument must be an `Event<T>`; extractors such as
/// `State<S>` may follow.
///
/// Arguments: `topic`, `event` (both also positional, in that order),
/// `agent`, `description`.
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
/// The first argument must be an `Invocation<T>` (extractors such as
/// `State<S>` may follow) and the function must return
/// `Result<T, E>` where `T: Serialize + JsonSchema` and `E: Into<Box<dyn Error + Send + Sync>>`
/// (`ToolError`, `soorma::Error`, `String`, any `std::error::Error + Send + Sync`).
///
/// Arguments: the event name (positional or `event = "..."`), `agent`,
/// `description`, `name` (the capability name).
///
/// ```ignore
/// use soorma::prelude::*;
///
/// /// Evaluates an arithmetic expression.
/// #[on_invoke("calculate.requested", agent = "calculator", name = "calculate")]
/// async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
///     let value = eval(&req.expression)?;
///     Ok(Calculated { value })
/// }
/// ```
#[proc_macro_attribute]
pub fn on_invoke(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(HandlerKind::Invoke, args, item)
}

/// Registers an `async fn` as a handler for long-running tasks, which may
/// delegate work to other agents.
///
/// The first argument must be a `TaskContext<T>`; extractors such as
/// `State<S>` may follow.
///
/// Arguments: the event name (positional or `event = "..."`), `agent`,
/// `description`, `name` (the task name).
///
/// ```ignore
/// use soorma::prelude::*;
///
/// /// Researches a topic by fanning out to searchers.
/// #[on_task("research.requested", agent = "researcher", name = "research")]
/// async fn research(task: TaskContext<Research>) -> soorma::Result<()> {
///     // ... delegate sub-tasks ...
///     Ok(())
/// }
/// ```
#[proc_macro_attribute]
pub fn on_task(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(HandlerKind::Task, args, item)
}

/// Registers an `async fn` as a handler for the results of delegated work.
///
/// The first argument must be a `ResultContext<T>`; extractors such as
/// `State<S>` may follow. Stack the attribute to handle several result
/// events with one function.
///
/// Arguments: the event name (positional or `event = "..."`), `agent`,
/// `description`.
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

/// Registers an `async fn` as a planner's goal handler: a goal request that
/// usually starts a plan.
///
/// The first argument must be a `GoalContext<T>`; extractors such as
/// `State<S>` may follow.
///
/// Arguments: the event name (positional or `event = "..."`), `agent`,
/// `description`, `name`.
///
/// ```ignore
/// use soorma::prelude::*;
///
/// /// Researches a topic.
/// #[on_goal("research.goal", agent = "research-planner")]
/// async fn research(goal: GoalContext<Research>, plan: State<Arc<Plan>>) -> soorma::Result<PlanContext> {
///     goal.start(&plan).await
/// }
/// ```
#[proc_macro_attribute]
pub fn on_goal(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(HandlerKind::Goal, args, item)
}

/// Registers an `async fn` as a planner's transition handler: it receives
/// every event that belongs to one of the planner's plans, as the restored
/// `PlanContext`.
///
/// Arguments: `agent`, `description` (no event name).
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

/// parse → model → generate. On error, emits the errors plus the original
/// item unchanged, so that one misuse does not cascade into unrelated
/// "cannot find function" errors.
fn expand(kind: HandlerKind, args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    match parse::parse_handler(kind, args.into(), item.clone()) {
        Ok(model) => generate::generate(&model).into(),
        Err(error) => {
            let mut out = error.to_compile_error();
            out.extend(item);
            out.into()
        }
    }
}

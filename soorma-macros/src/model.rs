//! The validated model of one handler attribute, produced by [`crate::parse`]
//! and consumed by [`crate::generate`].

use proc_macro2::Ident;
use syn::{ItemFn, LitStr};

/// Which of the four handler attributes is being expanded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandlerKind {
    /// `#[on_event]`: a fact published on a topic.
    Event,
    /// `#[on_invoke]`: a request/response capability (a tool).
    Invoke,
    /// `#[on_task]`: a long-running task that may delegate work.
    Task,
    /// `#[on_result]`: a result of previously delegated work.
    Result,
    /// `#[on_goal]`: a goal that starts a plan.
    Goal,
    /// `#[on_transition]`: an event moving one of the planner's plans.
    Transition,
}

impl HandlerKind {
    /// All kinds, in declaration order.
    pub(crate) const ALL: [HandlerKind; 6] = [
        HandlerKind::Event,
        HandlerKind::Invoke,
        HandlerKind::Task,
        HandlerKind::Result,
        HandlerKind::Goal,
        HandlerKind::Transition,
    ];

    /// The attribute name, which is also the name of the `Handler` constructor.
    pub(crate) fn attr_name(self) -> &'static str {
        match self {
            HandlerKind::Event => "on_event",
            HandlerKind::Invoke => "on_invoke",
            HandlerKind::Task => "on_task",
            HandlerKind::Result => "on_result",
            HandlerKind::Goal => "on_goal",
            HandlerKind::Transition => "on_transition",
        }
    }

    /// The attribute as written by a user, e.g. ``#[on_invoke]``.
    pub(crate) fn attr(self) -> String {
        format!("`#[{}]`", self.attr_name())
    }

    /// The last path segment of the context type the first argument must have.
    pub(crate) fn context_type(self) -> &'static str {
        match self {
            HandlerKind::Event => "Event",
            HandlerKind::Invoke => "Invocation",
            HandlerKind::Task => "TaskContext",
            HandlerKind::Result => "ResultContext",
            HandlerKind::Goal => "GoalContext",
            HandlerKind::Transition => "PlanContext",
        }
    }

    /// The context type as shown in diagnostics: `TaskContext<T>`, or `PlanContext` (not generic).
    pub(crate) fn context_display(self) -> String {
        match self {
            HandlerKind::Transition => self.context_type().to_owned(),
            _ => format!("{}<T>", self.context_type()),
        }
    }

    /// An example first argument of the right type.
    pub(crate) fn context_example(self) -> &'static str {
        match self {
            HandlerKind::Event => "event: Event<OrderPlaced>",
            HandlerKind::Invoke => "req: Invocation<Calculate>",
            HandlerKind::Task => "task: TaskContext<Research>",
            HandlerKind::Result => "result: ResultContext<Findings>",
            HandlerKind::Goal => "goal: GoalContext<Research>",
            HandlerKind::Transition => "plan: PlanContext",
        }
    }

    /// A hint pointing at this kind, used when a user wrote this kind's
    /// context type under a different attribute.
    pub(crate) fn use_hint(self) -> &'static str {
        match self {
            HandlerKind::Event => "use `#[on_event]` to handle events",
            HandlerKind::Invoke => "use `#[on_invoke]` to handle invocations",
            HandlerKind::Task => "use `#[on_task]` to handle tasks",
            HandlerKind::Result => "use `#[on_result]` to handle results",
            HandlerKind::Goal => "use `#[on_goal]` to handle goals",
            HandlerKind::Transition => "use `#[on_transition]` to handle plan transitions",
        }
    }

    /// A complete example of the attribute, used in "missing" diagnostics.
    pub(crate) fn example_attr(self) -> &'static str {
        match self {
            HandlerKind::Event => {
                "`#[on_event(topic = \"business-facts\", event = \"order.placed\")]`"
            }
            HandlerKind::Invoke => "`#[on_invoke(\"calculate.requested\")]`",
            HandlerKind::Task => "`#[on_task(\"research.requested\")]`",
            HandlerKind::Result => "`#[on_result(\"research.completed\")]`",
            HandlerKind::Goal => "`#[on_goal(\"research.goal\")]`",
            HandlerKind::Transition => "`#[on_transition]`",
        }
    }

    /// An example event name for this kind.
    pub(crate) fn example_event(self) -> &'static str {
        match self {
            HandlerKind::Event => "\"order.placed\"",
            HandlerKind::Invoke => "\"calculate.requested\"",
            HandlerKind::Task => "\"research.requested\"",
            HandlerKind::Result => "\"research.completed\"",
            HandlerKind::Goal => "\"research.goal\"",
            HandlerKind::Transition => "\"*\"",
        }
    }

    /// The named arguments this attribute accepts, in the order they are
    /// listed in diagnostics.
    pub(crate) fn allowed_args(self) -> &'static [&'static str] {
        match self {
            HandlerKind::Event => &["topic", "event", "agent", "description"],
            HandlerKind::Invoke | HandlerKind::Task | HandlerKind::Goal => {
                &["event", "agent", "description", "name"]
            }
            HandlerKind::Result => &["event", "agent", "description"],
            HandlerKind::Transition => &["agent", "description"],
        }
    }

    /// Whether the wildcard event `"*"` is accepted.
    pub(crate) fn allows_wildcard(self) -> bool {
        self == HandlerKind::Event
    }

    /// Whether the return type is constrained syntactically (`Result<T, E>`).
    pub(crate) fn requires_result_return(self) -> bool {
        self == HandlerKind::Invoke
    }
}

/// The topics an `#[on_event]` handler may subscribe to: the string users
/// write, and the matching variant of `::soorma::__private::Topic`.
pub(crate) const TOPICS: [(&str, &str); 8] = [
    ("business-facts", "BusinessFacts"),
    ("action-requests", "ActionRequests"),
    ("action-results", "ActionResults"),
    ("billing-events", "BillingEvents"),
    ("notification-events", "NotificationEvents"),
    ("system-events", "SystemEvents"),
    ("plan-events", "PlanEvents"),
    ("task-events", "TaskEvents"),
];

/// A validated topic of an `#[on_event]` handler.
#[derive(Clone, Debug)]
pub(crate) struct TopicModel {
    /// The literal as written by the user (e.g. `"business-facts"`).
    pub(crate) lit: LitStr,
    /// The `Topic` variant name (e.g. `BusinessFacts`), spanned on `lit`.
    pub(crate) variant: Ident,
}

/// Everything needed to generate one handler registration.
#[derive(Clone, Debug)]
pub(crate) struct HandlerModel {
    /// Which attribute this is.
    pub(crate) kind: HandlerKind,
    /// The topic; `Some` exactly for [`HandlerKind::Event`].
    pub(crate) topic: Option<TopicModel>,
    /// The validated event name (`"*"` only for [`HandlerKind::Event`]).
    pub(crate) event: String,
    /// The literal the event name came from, for its span.
    pub(crate) event_lit: LitStr,
    /// The agent this handler belongs to, if given.
    pub(crate) agent: Option<LitStr>,
    /// The description: `description = "..."` or the doc comment; may be empty.
    pub(crate) description: String,
    /// The capability/task name (`#[on_invoke]` and `#[on_task]` only).
    pub(crate) name: Option<LitStr>,
    /// The handler function's name.
    pub(crate) fn_ident: Ident,
    /// The handler function, re-emitted unchanged.
    pub(crate) item_fn: ItemFn,
}

//! The validated model of an annotated handler function, produced by [`crate::parse`] and
//! consumed by [`crate::generate`].

use proc_macro2::{Ident, Span};
use syn::{ItemFn, LitStr, Path, Type};

/// Which handler attribute is being expanded.
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
    /// `#[on_fan_in]`: the replies of a typed fan-out, once all are in.
    FanIn,
    /// `#[on_goal]`: a goal that starts a plan.
    Goal,
    /// `#[on_transition]`: an event moving one of the planner's plans.
    Transition,
}

impl HandlerKind {
    /// All kinds, in declaration order.
    pub(crate) const ALL: [HandlerKind; 7] = [
        HandlerKind::Event,
        HandlerKind::Invoke,
        HandlerKind::Task,
        HandlerKind::Result,
        HandlerKind::FanIn,
        HandlerKind::Goal,
        HandlerKind::Transition,
    ];

    /// The kind whose attribute is named `name` (the last segment of an attribute's path).
    pub(crate) fn from_attr_name(name: &str) -> Option<HandlerKind> {
        Self::ALL.into_iter().find(|k| k.attr_name() == name)
    }

    /// The attribute name, which is also the name of the string-named `Handler` constructor.
    pub(crate) fn attr_name(self) -> &'static str {
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

    /// The typed `Handler` constructor (the event comes from the payload type), for the
    /// kinds that have one.
    pub(crate) fn typed_constructor(self) -> Option<&'static str> {
        match self {
            HandlerKind::Invoke => Some("invoke"),
            HandlerKind::Task => Some("task"),
            HandlerKind::Goal => Some("goal"),
            _ => None,
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
            HandlerKind::Task | HandlerKind::FanIn => "TaskContext",
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
            HandlerKind::Task | HandlerKind::FanIn => "task: TaskContext<Research>",
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
            HandlerKind::Task | HandlerKind::FanIn => "use `#[on_task]` to handle tasks",
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
            HandlerKind::FanIn => "`#[on_fan_in(Search, Summarize)]`",
            HandlerKind::Goal => "`#[on_goal(\"research.goal\")]`",
            HandlerKind::Transition => "`#[on_transition]`",
        }
    }

    /// An example event name for this kind.
    pub(crate) fn example_event(self) -> &'static str {
        match self {
            HandlerKind::Event => "\"order.placed\"",
            HandlerKind::Invoke => "\"calculate.requested\"",
            HandlerKind::Task | HandlerKind::FanIn => "\"research.requested\"",
            HandlerKind::Result => "\"research.completed\"",
            HandlerKind::Goal => "\"research.goal\"",
            HandlerKind::Transition => "\"*\"",
        }
    }

    /// The named arguments this attribute accepts, in the order they are
    /// listed in diagnostics.
    pub(crate) fn allowed_args(self) -> &'static [&'static str] {
        match self {
            HandlerKind::Event => &["topic", "event", "agent", "description", "crate"],
            HandlerKind::Invoke | HandlerKind::Task | HandlerKind::Goal => {
                &["event", "agent", "description", "name", "crate"]
            }
            HandlerKind::Result => &["event", "agent", "description", "crate"],
            HandlerKind::FanIn | HandlerKind::Transition => &["agent", "description", "crate"],
        }
    }

    /// Whether the wildcard event `"*"` is accepted.
    pub(crate) fn allows_wildcard(self) -> bool {
        self == HandlerKind::Event
    }

    /// Whether the event name is required (the typed forms take it from the payload type;
    /// `#[on_transition]` and `#[on_fan_in]` have none).
    pub(crate) fn requires_event(self) -> bool {
        matches!(self, HandlerKind::Event | HandlerKind::Result)
    }

    /// Whether the handler's second argument is a value its layer provides (a fan-in's
    /// replies) rather than an extractor.
    pub(crate) fn takes_value(self) -> bool {
        self == HandlerKind::FanIn
    }

    /// The most extractors a handler of this kind may take (the arities the runtime's
    /// `HandlerFn` / `HandlerFnWith` are implemented for).
    pub(crate) fn max_extractors(self) -> usize {
        if self.takes_value() { 5 } else { 6 }
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

/// The most request types a fan-in collects (the tuple arities `RequestSet` is implemented for).
pub(crate) const MAX_FAN_IN: usize = 8;

/// A validated topic of an `#[on_event]` handler.
#[derive(Clone, Debug)]
pub(crate) struct TopicModel {
    /// The literal as written by the user (e.g. `"business-facts"`).
    pub(crate) lit: LitStr,
    /// The `Topic` variant name (e.g. `BusinessFacts`), spanned on `lit`.
    pub(crate) variant: Ident,
}

/// The types of a handler's signature, as the registration needs them.
#[derive(Clone, Debug)]
pub(crate) struct SignatureModel {
    /// The payload type: the first type argument of the context (`T` in `Invocation<T>`);
    /// `None` when the context has none (its default, `serde_json::Value`).
    pub(crate) payload: Option<Type>,
    /// The task state type (`S` in `TaskContext<T, S>`), if written.
    pub(crate) state: Option<Type>,
    /// The type of the value argument (a fan-in's replies).
    pub(crate) value: Option<Type>,
    /// The extractor types, in order.
    pub(crate) extractors: Vec<Type>,
    /// The return type, if any.
    pub(crate) output: Option<Type>,
    /// The span of the parameter list's closing parenthesis.
    pub(crate) params_close: Span,
}

/// Everything needed to generate one handler registration.
#[derive(Clone, Debug)]
pub(crate) struct HandlerModel {
    /// Which attribute this is.
    pub(crate) kind: HandlerKind,
    /// The topic; `Some` exactly for [`HandlerKind::Event`].
    pub(crate) topic: Option<TopicModel>,
    /// The validated event name; `None` for the typed forms (the event comes from the
    /// payload type), `#[on_transition]` and `#[on_fan_in]`.
    pub(crate) event: Option<LitStr>,
    /// The request types of an `#[on_fan_in(..)]`, in order.
    pub(crate) requests: Vec<Type>,
    /// The agent this handler belongs to, if given.
    pub(crate) agent: Option<LitStr>,
    /// The description: `description = "..."` or the doc comment; may be empty.
    pub(crate) description: String,
    /// The capability/task name (`#[on_invoke]`, `#[on_task]`, `#[on_goal]`).
    pub(crate) name: Option<LitStr>,
    /// The path of the soorma crate (`crate = "..."`; default `::soorma`).
    pub(crate) krate: Option<Path>,
    /// The handler's signature.
    pub(crate) sig: SignatureModel,
}

/// An annotated function: the function (without its soorma attributes) and one handler per
/// soorma attribute on it.
#[derive(Clone, Debug)]
pub(crate) struct FnModel {
    /// The function, re-emitted without its soorma attributes.
    pub(crate) item_fn: ItemFn,
    /// Its handlers, outermost attribute first.
    pub(crate) handlers: Vec<HandlerModel>,
}

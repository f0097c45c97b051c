//! Handler inputs and extractors: the arguments a handler takes after its context.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use soorma_common::{AgentKind, EventEnvelope};

use crate::bus::BusClient;
use crate::platform::Platform;

/// Typed values attached to an agent with [`AgentBuilder::with_state`](crate::AgentBuilder::with_state).
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
    pub fn insert<S: Send + Sync + 'static>(&mut self, value: S) {
        self.map.insert(TypeId::of::<S>(), Arc::new(value));
    }

    /// The value of type `S`, if stored.
    pub fn get<S: Send + Sync + 'static>(&self) -> Option<&S> {
        self.map
            .get(&TypeId::of::<S>())
            .and_then(|v| v.downcast_ref())
    }

    /// Whether a value of type `S` is stored.
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
    pub(crate) bus: BusClient,
}

/// The event being handled and the agent handling it; extractors are built from it.
#[derive(Clone)]
pub struct HandlerInput {
    pub(crate) envelope: Arc<EventEnvelope>,
    pub(crate) runtime: Arc<AgentRuntime>,
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
    pub fn envelope(&self) -> &Arc<EventEnvelope> {
        &self.envelope
    }

    /// The handling agent's name.
    pub fn agent(&self) -> &str {
        &self.runtime.name
    }

    /// The handling agent's kind.
    pub fn agent_kind(&self) -> AgentKind {
        self.runtime.kind
    }

    /// The platform.
    pub fn platform(&self) -> &Platform {
        &self.runtime.platform
    }

    /// A bus client publishing on behalf of this event's handling.
    pub fn bus(&self) -> BusClient {
        self.runtime.bus.in_context_of(self.envelope.clone())
    }

    /// The agent's state of type `S`.
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
    fn from_input(input: &HandlerInput) -> Result<Self, String>;

    /// Checks at agent start that the argument can be built (e.g. the state is attached).
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

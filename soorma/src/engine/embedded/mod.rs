//! The embedded engine: an in-process bus, state store and registry.
//!
//! Zero setup and the default. Semantics match the NATS platform: instances of one agent
//! (one consumer group) share work, different agents each receive every event they subscribe
//! to, state writes are revision-checked, and everything is scoped by tenant.

mod bus;
mod registry;
mod state;

use std::sync::Arc;

pub use bus::{EmbeddedBus, EmbeddedConfig, QueueStats};
pub use registry::MemoryRegistry;
pub use state::MemoryStore;

use super::{EngineParts, Native};

/// The embedded engine's parts: a new in-process bus, state store and registry.
pub(crate) fn parts() -> EngineParts {
    parts_with(EmbeddedBus::new())
}

/// The embedded engine's parts around `bus`, with a new state store and registry.
pub(crate) fn parts_with(bus: EmbeddedBus) -> EngineParts {
    let mut parts = EngineParts::new(
        "embedded",
        Arc::new(bus.clone()),
        Arc::new(MemoryStore::new()),
        Arc::new(MemoryRegistry::new()),
    );
    parts.native = Native::Embedded(bus);
    parts
}

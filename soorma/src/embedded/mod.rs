//! The embedded platform: an in-process bus, state store and registry.
//!
//! Zero setup and the default. Semantics match the NATS platform: instances of one agent
//! (one consumer group) share work, different agents each receive every event they subscribe
//! to, state writes are revision-checked, and everything is scoped by tenant.

mod bus;
mod registry;
mod state;

pub use bus::EmbeddedBus;
pub use registry::MemoryRegistry;
pub use state::MemoryStore;

//! Shared data types for soorma: the event envelope, the topic set, registry DTOs,
//! state-machine and workflow DTOs, memory records ([`memory`]), persisted task / plan / session records, and A2A agent cards ([`a2a`]).
//!
//! These types are plain serde + schemars data with no runtime dependencies, so services
//! written in other languages and the Rust SDK agree on one wire format (snake_case JSON; the
//! [`a2a`] types follow the A2A protocol's camelCase JSON instead).
//!
//! ```
//! use soorma_common::{EventEnvelope, Topic};
//! let env = EventEnvelope::new("e1", "client", Topic::BusinessFacts, "order.placed")
//!     .with_data(serde_json::json!({"order_id": "123"}));
//! let json = serde_json::to_string(&env).unwrap();
//! let back: EventEnvelope = serde_json::from_str(&json).unwrap();
//! assert_eq!(back, env);
//! ```
#![warn(missing_docs)]

pub mod a2a;
mod envelope;
pub mod events;
pub mod memory;
mod records;
mod registry;
mod reply;
mod state_machine;
mod topic;
mod workflow;

pub use envelope::{EventEnvelope, SPEC_VERSION};
pub use records::{
    ChunkResult, DelegationGroup, MemberPage, MemberRun, PlanRecord, PlanStatus, PlanStep,
    PublishedAction, ResultChunk, SessionRecord, SubTaskGroup, SubTaskInfo, SubTaskStatus,
    TaskRecord, TaskStatus,
};
pub use registry::{AgentCapability, AgentDefinition, AgentKind, EventDefinition};
pub use reply::{ActionReply, TaskProgress};
pub use state_machine::{PlanDefinition, StateAction, StateConfig, StateTransition};
pub use topic::{Topic, UnknownTopic};
pub use workflow::{
    FailurePolicy, HumanInput, StepFailure, StepOutcome, StepRun, StepStatus, WorkflowDefinition,
    WorkflowOutput, WorkflowRun, WorkflowSpec, WorkflowStep, WorkflowStepProgress,
};

/// The tenant used when an event names none.
pub const DEFAULT_TENANT: &str = "default";

//! A2A (Agent2Agent protocol v1.0): agent cards, and the messages and tasks of the JSON-RPC
//! binding.
//!
//! The data types mirror the v1.0 protobuf definition (`lf.a2a.v1`, kept in the repository at
//! `spec/a2a/a2a.proto`) in its JSON form: camelCase field names, `oneof`s as an object with
//! one key (`{"apiKeySecurityScheme": {...}}`), optional and empty fields omitted (never `null`),
//! unknown fields ignored on read.
//!
//! [`CardBuilder`] turns a soorma [`AgentDefinition`](crate::AgentDefinition) into a card with
//! one [`AgentSkill`] per capability; [`AgentCard::to_v0_3`] renders a card for clients that
//! still speak A2A v0.3.0.
//!
//! ```
//! use soorma_common::a2a::{AgentCard, CardBuilder};
//! use soorma_common::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
//!
//! let def = AgentDefinition::new("calc-1", "calculator", AgentKind::Tool)
//!     .with_description("Does arithmetic.")
//!     .with_version("1.0.0")
//!     .with_capability(
//!         AgentCapability::new("add", EventDefinition::new("add.requested", Topic::ActionRequests))
//!             .with_description("Adds two numbers."),
//!     );
//! let card = CardBuilder::new(&def, "https://agents.example.com/a2a")
//!     .with_api_key("X-API-Key")
//!     .build()
//!     .unwrap();
//! assert_eq!(card.skills[0].id, "add.requested");
//!
//! let json = serde_json::to_value(&card).unwrap();
//! assert_eq!(json["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
//! assert_eq!(serde_json::from_value::<AgentCard>(json).unwrap(), card);
//! ```

mod builder;
mod capabilities;
mod card;
mod error;
mod extension;
mod interface;
mod provider;
mod security;
mod signature;
mod skill;
mod task;
mod v0_3;
mod validate;

pub use builder::{CardBuilder, SKILL_SCHEMAS_EXTENSION_URI};
pub use capabilities::AgentCapabilities;
pub use card::AgentCard;
pub use error::CardError;
pub use extension::AgentExtension;
pub use interface::{AgentInterface, GRPC, HTTP_JSON, JSONRPC, PROTOCOL_VERSION};
pub use provider::AgentProvider;
pub use security::{
    ApiKeyLocation, ApiKeySecurityScheme, AuthorizationCodeOAuthFlow, ClientCredentialsOAuthFlow,
    DeviceCodeOAuthFlow, HttpAuthSecurityScheme, ImplicitOAuthFlow, MutualTlsSecurityScheme,
    OAuth2SecurityScheme, OAuthFlows, OpenIdConnectSecurityScheme, PasswordOAuthFlow,
    SecurityRequirement, SecurityScheme, StringList,
};
pub use signature::AgentCardSignature;
pub use skill::AgentSkill;
pub use task::{
    Artifact, Message, Part, PartContent, Role, SendMessageConfiguration, SendMessageRequest,
    SendMessageResponse, StreamResponse, Task, TaskArtifactUpdateEvent, TaskIdParams, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};
pub use v0_3::{AgentCardV03, V0_3_PROTOCOL_VERSION};

/// The media type of the JSON documents soorma agents exchange (`application/json`).
///
/// ```
/// assert_eq!(soorma_common::a2a::MEDIA_TYPE_JSON, "application/json");
/// ```
pub const MEDIA_TYPE_JSON: &str = "application/json";

/// The media type of plain text (`text/plain`).
///
/// ```
/// assert_eq!(soorma_common::a2a::MEDIA_TYPE_TEXT, "text/plain");
/// ```
pub const MEDIA_TYPE_TEXT: &str = "text/plain";

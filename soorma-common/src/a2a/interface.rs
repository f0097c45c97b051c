//! `AgentInterface`: one URL + protocol binding + protocol version an agent is reachable at.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The A2A protocol version the v1.0 types describe (`"1.0"`).
///
/// ```
/// assert_eq!(soorma_common::a2a::PROTOCOL_VERSION, "1.0");
/// ```
pub const PROTOCOL_VERSION: &str = "1.0";

/// The JSON-RPC 2.0 protocol binding (`"JSONRPC"`).
///
/// ```
/// assert_eq!(soorma_common::a2a::JSONRPC, "JSONRPC");
/// ```
pub const JSONRPC: &str = "JSONRPC";

/// The gRPC protocol binding (`"GRPC"`).
///
/// ```
/// assert_eq!(soorma_common::a2a::GRPC, "GRPC");
/// ```
pub const GRPC: &str = "GRPC";

/// The HTTP+JSON (REST) protocol binding (`"HTTP+JSON"`).
///
/// ```
/// assert_eq!(soorma_common::a2a::HTTP_JSON, "HTTP+JSON");
/// ```
pub const HTTP_JSON: &str = "HTTP+JSON";

/// A URL, protocol binding and protocol version at which the agent can be reached.
///
/// ```
/// use soorma_common::a2a::AgentInterface;
/// let iface = AgentInterface::jsonrpc("https://agents.example.com/a2a");
/// assert_eq!(
///     serde_json::to_value(&iface).unwrap(),
///     serde_json::json!({
///         "url": "https://agents.example.com/a2a",
///         "protocolBinding": "JSONRPC",
///         "protocolVersion": "1.0"
///     })
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AgentInterface {
    /// Where the interface is served (an absolute HTTPS URL in production; `host:port` for gRPC).
    pub url: String,
    /// The protocol binding: [`JSONRPC`], [`GRPC`], [`HTTP_JSON`] or a custom binding's URI.
    pub protocol_binding: String,
    /// Opaque routing value clients must copy into the `tenant` field of every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The A2A protocol version spoken at this URL (`"1.0"`, `"0.3"`).
    pub protocol_version: String,
}

impl AgentInterface {
    /// An interface speaking protocol version [`PROTOCOL_VERSION`] with the given binding.
    ///
    /// ```
    /// use soorma_common::a2a::{AgentInterface, HTTP_JSON};
    /// let iface = AgentInterface::new("https://agents.example.com/rest", HTTP_JSON);
    /// assert_eq!(iface.protocol_version, "1.0");
    /// ```
    pub fn new(url: impl Into<String>, protocol_binding: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            protocol_binding: protocol_binding.into(),
            tenant: None,
            protocol_version: PROTOCOL_VERSION.to_owned(),
        }
    }

    /// A [`JSONRPC`] interface speaking protocol version [`PROTOCOL_VERSION`].
    ///
    /// ```
    /// use soorma_common::a2a::AgentInterface;
    /// assert_eq!(AgentInterface::jsonrpc("https://a.example/a2a").protocol_binding, "JSONRPC");
    /// ```
    pub fn jsonrpc(url: impl Into<String>) -> Self {
        Self::new(url, JSONRPC)
    }

    /// Sets the tenant clients must send in their requests.
    ///
    /// ```
    /// use soorma_common::a2a::AgentInterface;
    /// let iface = AgentInterface::jsonrpc("https://a.example/a2a").with_tenant("acme");
    /// assert_eq!(iface.tenant.as_deref(), Some("acme"));
    /// ```
    #[must_use]
    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Sets the protocol version (for example `"0.3"` for an endpoint serving v0.3 clients).
    ///
    /// ```
    /// use soorma_common::a2a::AgentInterface;
    /// let iface = AgentInterface::jsonrpc("https://a.example/a2a/v0").with_protocol_version("0.3");
    /// assert_eq!(iface.protocol_version, "0.3");
    /// ```
    #[must_use]
    pub fn with_protocol_version(mut self, protocol_version: impl Into<String>) -> Self {
        self.protocol_version = protocol_version.into();
        self
    }
}

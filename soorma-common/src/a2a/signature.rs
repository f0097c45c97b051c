//! `AgentCardSignature`: a JWS signature over a card.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A JSON Web Signature (RFC 7515) computed over the canonicalized card.
///
/// soorma does not sign cards itself; this type carries signatures made elsewhere.
///
/// ```
/// use soorma_common::a2a::AgentCardSignature;
/// let sig = AgentCardSignature::new("eyJhbGciOiJFUzI1NiJ9", "c2lnbmF0dXJl");
/// assert_eq!(
///     serde_json::to_value(&sig).unwrap(),
///     serde_json::json!({"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "c2lnbmF0dXJl"})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AgentCardSignature {
    /// The protected JWS header, base64url-encoded JSON.
    pub protected: String,
    /// The signature, base64url-encoded.
    pub signature: String,
    /// Unprotected JWS header values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<Map<String, Value>>,
}

impl AgentCardSignature {
    /// A signature with no unprotected header.
    ///
    /// ```
    /// use soorma_common::a2a::AgentCardSignature;
    /// assert!(AgentCardSignature::new("p", "s").header.is_none());
    /// ```
    pub fn new(protected: impl Into<String>, signature: impl Into<String>) -> Self {
        Self {
            protected: protected.into(),
            signature: signature.into(),
            header: None,
        }
    }

    /// Sets the unprotected header.
    ///
    /// ```
    /// use soorma_common::a2a::AgentCardSignature;
    /// let mut header = serde_json::Map::new();
    /// header.insert("kid".into(), "key-1".into());
    /// let sig = AgentCardSignature::new("p", "s").with_header(header);
    /// assert_eq!(sig.header.unwrap()["kid"], "key-1");
    /// ```
    #[must_use]
    pub fn with_header(mut self, header: Map<String, Value>) -> Self {
        self.header = Some(header);
        self
    }
}

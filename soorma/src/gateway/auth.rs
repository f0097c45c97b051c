//! Gateway credentials: how callers authenticate.

use axum::http::{HeaderMap, header};

/// How the gateway authenticates clients; declared in every card and enforced on every
/// JSON-RPC call (HTTP 401 otherwise). Cards themselves are public.
///
/// ```
/// use soorma::gateway::GatewayAuth;
/// let auth = GatewayAuth::api_key("X-API-Key", "s3cret");
/// # let _ = auth;
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GatewayAuth {
    /// An API key in a request header.
    ApiKey {
        /// The header name, e.g. `X-API-Key`.
        header: String,
        /// The keys accepted.
        keys: Vec<String>,
    },
    /// `Authorization: Bearer <token>`.
    Bearer {
        /// The tokens accepted.
        tokens: Vec<String>,
    },
}

impl std::fmt::Debug for GatewayAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ApiKey { header, keys } => f
                .debug_struct("ApiKey")
                .field("header", header)
                .field("keys", &format!("<{} hidden>", keys.len()))
                .finish(),
            Self::Bearer { tokens } => f
                .debug_struct("Bearer")
                .field("tokens", &format!("<{} hidden>", tokens.len()))
                .finish(),
        }
    }
}

impl GatewayAuth {
    /// One API key, sent in `header`.
    ///
    /// ```
    /// let auth = soorma::gateway::GatewayAuth::api_key("X-API-Key", "k1");
    /// assert!(format!("{auth:?}").contains("hidden"));
    /// ```
    pub fn api_key(header: impl Into<String>, key: impl Into<String>) -> Self {
        Self::ApiKey {
            header: header.into(),
            keys: vec![key.into()],
        }
    }

    /// One bearer token.
    ///
    /// ```
    /// let auth = soorma::gateway::GatewayAuth::bearer("t0ken");
    /// # let _ = auth;
    /// ```
    pub fn bearer(token: impl Into<String>) -> Self {
        Self::Bearer {
            tokens: vec![token.into()],
        }
    }

    pub(super) fn allows(&self, headers: &HeaderMap) -> bool {
        match self {
            Self::ApiKey { header, keys } => headers
                .get(header.as_str())
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| keys.iter().any(|k| k == v)),
            Self::Bearer { tokens } => headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .is_some_and(|v| tokens.iter().any(|t| t == v.trim())),
        }
    }

    pub(super) fn challenge(&self) -> &'static str {
        match self {
            Self::ApiKey { .. } => "ApiKey",
            Self::Bearer { .. } => "Bearer",
        }
    }
}

//! Gateway credentials: how callers authenticate, and who they are once they have.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use soorma_common::DEFAULT_TENANT;

use crate::spi::tenant::validate_tenant;

/// Who is calling: the principal a credential names, and the tenant it acts for.
///
/// A caller with a tenant acts only for it (a request naming another tenant is refused); a
/// caller without one acts for the tenant its requests name (`tenant`, else the default
/// tenant). Tasks belong to the tenant and principal that started them.
///
/// ```
/// use soorma::gateway::Caller;
/// let ci = Caller::new("acme-ci").tenant("acme");
/// assert_eq!((ci.principal(), ci.tenant_id()), ("acme-ci", Some("acme")));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Caller {
    principal: String,
    tenant: Option<String>,
}

impl Caller {
    /// A caller named `principal` (a user, a service, a key's name), acting for any tenant.
    ///
    /// ```
    /// let caller = soorma::gateway::Caller::new("alice");
    /// assert_eq!(caller.tenant_id(), None);
    /// ```
    pub fn new(principal: impl Into<String>) -> Self {
        Self {
            principal: principal.into(),
            tenant: None,
        }
    }

    /// The caller acts for `tenant` only.
    ///
    /// ```
    /// let caller = soorma::gateway::Caller::new("bob").tenant("globex");
    /// assert_eq!(caller.tenant_id(), Some("globex"));
    /// ```
    #[must_use]
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// The principal's name.
    ///
    /// ```
    /// assert_eq!(soorma::gateway::Caller::new("alice").principal(), "alice");
    /// ```
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// The tenant the caller is bound to, if any.
    ///
    /// ```
    /// assert_eq!(soorma::gateway::Caller::new("alice").tenant_id(), None);
    /// ```
    pub fn tenant_id(&self) -> Option<&str> {
        self.tenant.as_deref()
    }
}

/// Maps a bearer token to a [`Caller`], or rejects it (`None`): the deployer's hook for JWTs,
/// opaque tokens checked against an identity provider's cache, and so on. Any
/// `Fn(&str) -> Option<Caller>` is one.
///
/// ```
/// use soorma::gateway::{BearerVerifier, Caller};
///
/// let verifier = |token: &str| (token == "acme-token").then(|| Caller::new("acme-app").tenant("acme"));
/// assert_eq!(verifier.verify("acme-token").unwrap().tenant_id(), Some("acme"));
/// assert!(verifier.verify("forged").is_none());
/// ```
pub trait BearerVerifier: Send + Sync + 'static {
    /// The caller `token` identifies, or `None` to reject it (HTTP 401).
    fn verify(&self, token: &str) -> Option<Caller>;
}

impl<F> BearerVerifier for F
where
    F: Fn(&str) -> Option<Caller> + Send + Sync + 'static,
{
    fn verify(&self, token: &str) -> Option<Caller> {
        self(token)
    }
}

#[derive(Clone)]
enum Scheme {
    ApiKey {
        header: String,
        keys: Vec<(String, Caller)>,
    },
    Bearer(Arc<dyn BearerVerifier>),
}

/// How the gateway authenticates clients and who they are; declared in every card and
/// enforced on every JSON-RPC call (HTTP 401 otherwise). Cards themselves are public.
///
/// Each credential maps to a [`Caller`]: tasks are visible only to the caller (tenant and
/// principal) that started them.
///
/// ```
/// use soorma::gateway::{Caller, GatewayAuth};
/// let auth = GatewayAuth::api_key("X-API-Key", "s3cret")
///     .with_key("acme-key", Caller::new("acme-ci").tenant("acme"));
/// assert!(format!("{auth:?}").contains("hidden"));
/// ```
#[derive(Clone)]
pub struct GatewayAuth {
    scheme: Scheme,
}

impl std::fmt::Debug for GatewayAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.scheme {
            Scheme::ApiKey { header, keys } => f
                .debug_struct("ApiKey")
                .field("header", header)
                .field("keys", &format!("<{} hidden>", keys.len()))
                .finish(),
            Scheme::Bearer(_) => f
                .debug_struct("Bearer")
                .field("verifier", &"<hidden>")
                .finish(),
        }
    }
}

impl GatewayAuth {
    /// One API key, sent in `header`; its holder is the principal `api-key`, acting for the
    /// tenant its requests name. Add keys of their own with [`with_key`](Self::with_key).
    ///
    /// ```
    /// let auth = soorma::gateway::GatewayAuth::api_key("X-API-Key", "k1");
    /// assert!(format!("{auth:?}").contains("hidden"));
    /// ```
    pub fn api_key(header: impl Into<String>, key: impl Into<String>) -> Self {
        Self::api_keys(header, [(key.into(), Caller::new("api-key"))])
    }

    /// API keys sent in `header`, each mapped to its caller.
    ///
    /// ```
    /// use soorma::gateway::{Caller, GatewayAuth};
    /// let auth = GatewayAuth::api_keys("X-API-Key", [
    ///     ("k-acme", Caller::new("acme-ci").tenant("acme")),
    ///     ("k-globex", Caller::new("globex-ci").tenant("globex")),
    /// ]);
    /// # let _ = auth;
    /// ```
    pub fn api_keys<K: Into<String>>(
        header: impl Into<String>,
        keys: impl IntoIterator<Item = (K, Caller)>,
    ) -> Self {
        Self {
            scheme: Scheme::ApiKey {
                header: header.into(),
                keys: keys.into_iter().map(|(k, c)| (k.into(), c)).collect(),
            },
        }
    }

    /// Adds an API key for `caller` (API-key auth only; a bearer scheme is left as it is).
    ///
    /// ```
    /// use soorma::gateway::{Caller, GatewayAuth};
    /// let auth = GatewayAuth::api_key("X-API-Key", "k1").with_key("k2", Caller::new("ops"));
    /// assert!(format!("{auth:?}").contains("<2 hidden>"));
    /// ```
    #[must_use]
    pub fn with_key(mut self, key: impl Into<String>, caller: Caller) -> Self {
        if let Scheme::ApiKey { keys, .. } = &mut self.scheme {
            keys.push((key.into(), caller));
        }
        self
    }

    /// One static bearer token; its holder is the principal `bearer`, acting for the tenant
    /// its requests name.
    ///
    /// ```
    /// let auth = soorma::gateway::GatewayAuth::bearer("t0ken");
    /// # let _ = auth;
    /// ```
    pub fn bearer(token: impl Into<String>) -> Self {
        let token = token.into();
        Self::bearer_verifier(move |presented: &str| {
            constant_time_eq(presented.as_bytes(), token.as_bytes()).then(|| Caller::new("bearer"))
        })
    }

    /// `Authorization: Bearer <token>`, each token mapped to its caller by `verifier` (a JWT
    /// check, a lookup): the deployer's identity provider decides.
    ///
    /// ```
    /// use soorma::gateway::{Caller, GatewayAuth};
    /// let auth = GatewayAuth::bearer_verifier(|token: &str| {
    ///     token.strip_prefix("acme.").map(|user| Caller::new(user).tenant("acme"))
    /// });
    /// # let _ = auth;
    /// ```
    pub fn bearer_verifier(verifier: impl BearerVerifier) -> Self {
        Self {
            scheme: Scheme::Bearer(Arc::new(verifier)),
        }
    }

    /// The API key header, if this is API-key auth (for the cards).
    pub(super) fn api_key_header(&self) -> Option<&str> {
        match &self.scheme {
            Scheme::ApiKey { header, .. } => Some(header),
            Scheme::Bearer(_) => None,
        }
    }

    /// The caller the request's credentials identify, if they are valid.
    pub(super) fn authenticate(&self, headers: &HeaderMap) -> Option<Caller> {
        match &self.scheme {
            Scheme::ApiKey { header, keys } => {
                let presented = headers.get(header.as_str())?.as_bytes();
                // Every key is compared, in constant time, so timing tells nothing.
                keys.iter().fold(None, |found, (key, caller)| {
                    let matches = constant_time_eq(presented, key.as_bytes());
                    found.or(matches.then(|| caller.clone()))
                })
            }
            Scheme::Bearer(verifier) => {
                let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
                let token = value.strip_prefix("Bearer ")?.trim();
                verifier.verify(token)
            }
        }
    }

    pub(super) fn challenge(&self) -> &'static str {
        match &self.scheme {
            Scheme::ApiKey { .. } => "ApiKey",
            Scheme::Bearer(_) => "Bearer",
        }
    }
}

/// The caller a request was admitted as (in its extensions, put there by [`admit`]).
#[derive(Debug, Clone)]
pub(super) struct Admitted(pub(super) Caller);

/// The gateway's admission: a JSON-RPC call (a `POST`) must carry valid credentials, checked
/// before its body is read (cards are public). Admitted calls carry their [`Admitted`] caller.
pub(super) async fn admit(
    State(auth): State<Arc<GatewayAuth>>,
    mut request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    match auth.authenticate(request.headers()) {
        Some(caller) => {
            request.extensions_mut().insert(Admitted(caller));
            next.run(request).await
        }
        None => unauthorized(&auth, &format!("POST {}", request.uri().path())),
    }
}

/// HTTP 401 with the scheme's challenge, for `what` (a request) without valid credentials.
pub(super) fn unauthorized(auth: &GatewayAuth, what: &str) -> Response {
    tracing::info!(
        request = what,
        "an A2A call without valid credentials, refused"
    );
    let mut response = (
        StatusCode::UNAUTHORIZED,
        axum::Json(
            json!({"error": "authentication required: see the agent card's securitySchemes"}),
        ),
    )
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(auth.challenge()),
    );
    response
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whose a request is: the tenant it acts for and the principal behind it. Tasks are owned by
/// one; every view is filtered by it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Owner {
    pub tenant: String,
    pub principal: String,
}

impl Owner {
    /// The owner of a request by `caller` (`None`: no auth configured) naming `tenant`;
    /// `Err` with a reason when the caller is bound to another tenant.
    pub fn resolve(caller: Option<&Caller>, tenant: Option<&str>) -> Result<Self, String> {
        let tenant = tenant.filter(|t| !t.is_empty());
        let principal = caller.map_or("anonymous", |c| c.principal()).to_owned();
        let tenant = match (caller.and_then(Caller::tenant_id), tenant) {
            (Some(bound), Some(asked)) if bound != asked => {
                return Err(format!(
                    "these credentials act for tenant `{bound}`, not `{asked}`"
                ));
            }
            (Some(bound), _) => bound.to_owned(),
            (None, Some(asked)) => asked.to_owned(),
            (None, None) => DEFAULT_TENANT.to_owned(),
        };
        validate_tenant(&tenant).map_err(|e| e.to_string())?;
        Ok(Self { tenant, principal })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_their_callers() {
        let auth = GatewayAuth::api_keys(
            "X-API-Key",
            [
                ("ka", Caller::new("a").tenant("acme")),
                ("kg", Caller::new("g").tenant("globex")),
            ],
        );
        let mut headers = HeaderMap::new();
        assert_eq!(auth.authenticate(&headers), None);
        headers.insert("x-api-key", "kg".parse().unwrap());
        assert_eq!(auth.authenticate(&headers).unwrap().principal(), "g");
        headers.insert("x-api-key", "k".parse().unwrap());
        assert_eq!(auth.authenticate(&headers), None);
    }

    #[test]
    fn owners_follow_the_credentials_tenant() {
        let acme = Caller::new("ci").tenant("acme");
        let owner = Owner::resolve(Some(&acme), None).unwrap();
        assert_eq!(
            (owner.tenant.as_str(), owner.principal.as_str()),
            ("acme", "ci")
        );
        assert!(Owner::resolve(Some(&acme), Some("globex")).is_err());
        let anon = Owner::resolve(None, Some("globex")).unwrap();
        assert_eq!(
            (anon.tenant.as_str(), anon.principal.as_str()),
            ("globex", "anonymous")
        );
        assert_eq!(Owner::resolve(None, None).unwrap().tenant, DEFAULT_TENANT);
    }
}

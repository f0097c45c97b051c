//! The checks every request passes before the app sees it: `Host` and `Content-Type` first,
//! then (after the server's admission) the body's size, read time and share of the bytes all
//! bodies being read may hold.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How a server words the errors of these checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorStyle {
    /// `{"error": "..."}` (the A2A gateway's HTTP errors).
    #[cfg_attr(not(feature = "gateway"), allow(dead_code))]
    Plain,
    /// A JSON-RPC error response with a null id (the MCP server).
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    JsonRpc,
}

/// Which `Host` headers a server accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HostPolicy {
    /// Any (bound off loopback, no allowlist).
    Any,
    /// `localhost`, `127.0.0.1`, `[::1]` with any port.
    Loopback,
    /// These entries (lower case; `name` any port, `name:port` that port).
    List(Vec<String>),
}

impl HostPolicy {
    fn allows(&self, host: Option<&str>) -> bool {
        let Some(authority) = host.map(|h| h.trim().to_ascii_lowercase()) else {
            return matches!(self, Self::Any);
        };
        let name = host_name(&authority);
        match self {
            Self::Any => true,
            Self::Loopback => matches!(name, "localhost" | "127.0.0.1" | "[::1]" | "::1"),
            Self::List(entries) => entries
                .iter()
                .any(|entry| *entry == authority || (host_name(entry) == entry && entry == name)),
        }
    }
}

/// The name of `name[:port]` (an IPv6 address keeps its brackets).
fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    match authority.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => authority,
    }
}

/// The checks' settings for one server.
#[derive(Debug)]
pub(super) struct Guard {
    pub(super) hosts: HostPolicy,
    pub(super) max_body_bytes: usize,
    pub(super) body_timeout: Duration,
    /// One permit per byte the bodies being read may hold in all.
    pub(super) buffered: Arc<Semaphore>,
    pub(super) style: ErrorStyle,
}

impl Guard {
    fn reject(&self, status: StatusCode, message: &str) -> Response {
        let body = match self.style {
            ErrorStyle::Plain => json!({"error": message}),
            ErrorStyle::JsonRpc => json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {"code": -32600, "message": message},
            }),
        };
        (status, axum::Json(body)).into_response()
    }

    /// A rejection after which the connection is closed (the rest of the body is not read).
    fn reject_and_close(&self, status: StatusCode, message: &str) -> Response {
        let mut response = self.reject(status, message);
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        response
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// Rejects a request with a foreign `Host`, a `POST` that is not JSON, or one declaring a body
/// too large; otherwise hands it on (to the server's admission, then [`read_body`]).
pub(super) async fn check_headers(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if !guard.hosts.allows(host) {
        tracing::warn!(host = ?host, "HTTP request for a host this server does not serve refused (DNS rebinding?)");
        return guard.reject(
            StatusCode::FORBIDDEN,
            "Host not allowed: this server does not serve that host name",
        );
    }
    if request.method() == Method::POST && !is_json(request.headers()) {
        tracing::debug!("HTTP POST without Content-Type: application/json refused");
        return guard.reject(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > guard.max_body_bytes as u64) {
        return guard.too_large();
    }
    // Only a `POST` (which the server's admission checks) carries a body: another method's
    // body would be read past the credentials (cards are public).
    let has_body = declared.is_some_and(|n| n > 0)
        || request.headers().contains_key(header::TRANSFER_ENCODING);
    if request.method() != Method::POST && has_body {
        tracing::debug!(method = %request.method(), "HTTP request with a body other than a POST refused");
        return guard.reject_and_close(
            StatusCode::BAD_REQUEST,
            "only a POST request carries a body here",
        );
    }
    next.run(request).await
}

/// Why a body was not read.
enum Unread {
    TooLarge,
    Busy,
    Unreadable(axum::Error),
}

impl Guard {
    fn too_large(&self) -> Response {
        tracing::info!(limit = self.max_body_bytes, "HTTP request body too large");
        self.reject_and_close(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "request body too large: at most {} bytes",
                self.max_body_bytes
            ),
        )
    }

    /// Reads `body` whole, taking a permit of [`buffered`](Self::buffered) per byte of room
    /// it holds as it grows; the permits are held by the returned bytes (released when they
    /// are dropped).
    async fn collect(&self, mut body: Body) -> Result<Bytes, Unread> {
        let mut bytes: Vec<u8> = Vec::new();
        let mut held: Option<OwnedSemaphorePermit> = None;
        let mut room = 0usize;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(Unread::Unreadable)?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            let needed = bytes.len() + data.len();
            if needed > self.max_body_bytes {
                return Err(Unread::TooLarge);
            }
            if needed > room {
                // Grown as a `Vec` grows (doubling), never past the limit; each byte of room
                // taken from the budget first.
                let grown = needed.max(room.saturating_mul(2)).min(self.max_body_bytes);
                let more = u32::try_from(grown - room).map_err(|_| Unread::TooLarge)?;
                let permit = self
                    .buffered
                    .clone()
                    .try_acquire_many_owned(more)
                    .map_err(|_| Unread::Busy)?;
                match &mut held {
                    Some(all) => all.merge(permit),
                    None => held = Some(permit),
                }
                bytes.reserve_exact(grown - bytes.len());
                room = grown;
            }
            bytes.extend_from_slice(&data);
        }
        Ok(match held {
            Some(permit) => Bytes::from_owner(Budgeted {
                bytes,
                _permit: permit,
            }),
            None => Bytes::new(),
        })
    }
}

/// A body's bytes and the budget's permits for them: released together.
struct Budgeted {
    bytes: Vec<u8>,
    _permit: OwnedSemaphorePermit,
}

impl AsRef<[u8]> for Budgeted {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Reads the request's body within the size limit, the read time and the bytes all bodies
/// being read may hold, then hands the request on; the body's bytes count against that total
/// until the app drops them.
pub(super) async fn read_body(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(guard.body_timeout, guard.collect(body)).await {
        Ok(Ok(read)) => read,
        Ok(Err(Unread::TooLarge)) => return guard.too_large(),
        Ok(Err(Unread::Busy)) => {
            tracing::warn!(
                available = guard.buffered.available_permits(),
                "HTTP request body refused: the bodies being read hold as many bytes as they may"
            );
            let mut response = guard.reject_and_close(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is receiving as much request data as it may: retry later",
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return response;
        }
        Ok(Err(Unread::Unreadable(e))) => {
            tracing::debug!(error = %e, "HTTP request body could not be read");
            return guard.reject_and_close(StatusCode::BAD_REQUEST, "request body unreadable");
        }
        Err(_) => {
            tracing::info!(timeout = ?guard.body_timeout, "HTTP request body too slow");
            return guard.reject_and_close(
                StatusCode::REQUEST_TIMEOUT,
                "request body not received in time",
            );
        }
    };
    // The bytes hold their permits until the app drops them (the gateway once it has
    // parsed the request), not until the response: a call waiting for its agent holds none.
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let loopback = HostPolicy::Loopback;
        for ok in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1:1",
            "[::1]:80",
            "[::1]",
        ] {
            assert!(loopback.allows(Some(ok)), "{ok}");
        }
        for no in [
            "evil.example",
            "evil.example:80",
            "127.0.0.1.evil.example",
            "[::2]:80",
        ] {
            assert!(!loopback.allows(Some(no)), "{no}");
        }
        assert!(!loopback.allows(None));
        let list = HostPolicy::List(vec!["a.example".into(), "b.example:8443".into()]);
        assert!(list.allows(Some("A.example:9")));
        assert!(list.allows(Some("b.example:8443")));
        assert!(!list.allows(Some("b.example:80")));
        assert!(!list.allows(Some("b.example")));
        assert!(!list.allows(Some("localhost")));
        assert!(HostPolicy::Any.allows(Some("anything")));
        assert!(HostPolicy::Any.allows(None));
    }

    #[test]
    fn json_content_types() {
        let mut headers = HeaderMap::new();
        assert!(!is_json(&headers));
        for (value, json) in [
            ("application/json", true),
            ("Application/JSON; charset=utf-8", true),
            ("text/plain", false),
            ("application/x-www-form-urlencoded", false),
            ("application/jsonx", false),
        ] {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(value));
            assert_eq!(is_json(&headers), json, "{value}");
        }
    }
}

//! [`LlmClient`]: chat completions over HTTP against an OpenAI-compatible server.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::config::LlmConfig;
use super::error::LlmError;
use super::message::ChatMessage;
use super::model::{ChatModel, ChatStream, OutputSchema};
use super::sse::SseDecoder;
use crate::error::Result;
use crate::util::BoxFuture;

/// How much of an unexpected response body errors quote.
const BODY_EXCERPT_BYTES: usize = 1024;

/// A client for an OpenAI-compatible `POST {base_url}/chat/completions`. Cheap to clone
/// (clones share the connection pool).
///
/// ```
/// use soorma::llm::{ChatMessage, LlmClient, LlmConfig};
///
/// # fn serve_once(body: &'static str) -> String {
/// #     use std::io::{Read, Write};
/// #     let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
/// #     let url = format!("http://{}/v1", listener.local_addr().unwrap());
/// #     std::thread::spawn(move || {
/// #         let (mut socket, _) = listener.accept().unwrap();
/// #         let (mut request, mut buf) = (Vec::new(), [0u8; 4096]);
/// #         while !request.ends_with(b"}") {
/// #             let n = socket.read(&mut buf).unwrap(); request.extend_from_slice(&buf[..n]);
/// #         }
/// #         write!(socket, "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}", body.len()).unwrap();
/// #     });
/// #     url
/// # }
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// # let base_url = serve_once(r#"{"choices":[{"message":{"role":"assistant","content":"Hi!"}}]}"#);
/// let client = LlmClient::new(LlmConfig::new("gpt-4o-mini").with_base_url(base_url))?;
/// let reply = client.complete(&[ChatMessage::user("Say hi")]).await?;
/// assert_eq!(reply, "Hi!");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LlmClient {
    http: reqwest::Client,
    config: Arc<LlmConfig>,
    url: Arc<str>,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The request body.
#[derive(Serialize)]
struct CompletionRequest<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<serde_json::Value>,
}

/// A completion (or a stream chunk): only what this client reads.
#[derive(Deserialize)]
struct Completion {
    #[serde(default)]
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<Content>,
    #[serde(default)]
    delta: Option<Content>,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
}

impl LlmClient {
    /// A client for `config`. Fails when the base URL is not an absolute `http(s)` URL, or
    /// when the base URL is `https` and the system has no CA certificates.
    ///
    /// ```
    /// use soorma::llm::{LlmClient, LlmConfig};
    /// let client = LlmClient::new(LlmConfig::new("m").with_base_url("http://127.0.0.1:8000/v1"))?;
    /// assert_eq!(client.config().model, "m");
    /// assert!(LlmClient::new(LlmConfig::new("m").with_base_url("not a url")).is_err());
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn new(config: LlmConfig) -> Result<Self> {
        let url = config.completions_url();
        let parsed = reqwest::Url::parse(&url).map_err(|e| {
            LlmError::Config(format!("invalid base URL `{}`: {e}", config.base_url))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(LlmError::Config(format!(
                "base URL `{}` must be http or https",
                config.base_url
            ))
            .into());
        }
        let tls =
            crate::tls::client_config(parsed.scheme() == "https").map_err(LlmError::Config)?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .build()
            .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            config: Arc::new(config),
            url: url.into(),
        })
    }

    /// A client configured by [`LlmConfig::from_env`].
    ///
    /// ```
    /// // SAFETY: doc tests run in their own process, single-threaded here.
    /// unsafe { std::env::set_var("SOORMA_LLM_MODEL", "llama3.1") };
    /// let client = soorma::llm::LlmClient::from_env()?;
    /// assert_eq!(client.config().model, "llama3.1");
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn from_env() -> Result<Self> {
        Self::new(LlmConfig::from_env()?)
    }

    /// The configuration.
    ///
    /// ```
    /// let client = soorma::llm::LlmClient::new(soorma::llm::LlmConfig::new("m"))?;
    /// assert_eq!(client.config().base_url, "https://api.openai.com/v1");
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// Sends the conversation; returns the assistant's reply (`choices[0].message.content`).
    ///
    /// ```
    /// use soorma::llm::{ChatMessage, LlmClient, LlmConfig, LlmError};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// // Nothing listens on port 9 (discard): a transport error, worth retrying.
    /// let client = LlmClient::new(LlmConfig::new("m").with_base_url("http://127.0.0.1:9/v1"))?;
    /// let err = client.complete(&[ChatMessage::user("Hi")]).await.unwrap_err();
    /// assert!(matches!(err.downcast_ref::<LlmError>(), Some(LlmError::Transport { .. })));
    /// assert!(err.is_retryable());
    /// # Ok(()) }
    /// ```
    pub async fn complete(&self, messages: &[ChatMessage]) -> Result<String> {
        Ok(self.completion(messages, None).await?)
    }

    /// Sends the conversation with `stream: true`; returns the reply's text deltas
    /// (`choices[0].delta.content` of each server-sent event, until `data: [DONE]`).
    ///
    /// ```
    /// use futures_util::StreamExt;
    /// use soorma::llm::{ChatMessage, LlmClient, LlmConfig};
    ///
    /// # fn serve_once(body: &'static str) -> String {
    /// #     use std::io::{Read, Write};
    /// #     let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// #     let url = format!("http://{}/v1", listener.local_addr().unwrap());
    /// #     std::thread::spawn(move || {
    /// #         let (mut socket, _) = listener.accept().unwrap();
    /// #         let (mut request, mut buf) = (Vec::new(), [0u8; 4096]);
    /// #         while !request.ends_with(b"}") {
    /// #             let n = socket.read(&mut buf).unwrap(); request.extend_from_slice(&buf[..n]);
    /// #         }
    /// #         write!(socket, "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}", body.len()).unwrap();
    /// #     });
    /// #     url
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let base_url = serve_once(concat!(
    /// #     "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
    /// #     "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n",
    /// #     "data: [DONE]\n\n",
    /// # ));
    /// let client = LlmClient::new(LlmConfig::new("m").with_base_url(base_url))?;
    /// let mut stream = client.stream(&[ChatMessage::user("Say hello")]).await?;
    /// let mut text = String::new();
    /// while let Some(delta) = stream.next().await {
    ///     text.push_str(&delta?);
    /// }
    /// assert_eq!(text, "Hello");
    /// # Ok(()) }
    /// ```
    pub async fn stream(&self, messages: &[ChatMessage]) -> Result<ChatStream> {
        let body = self.request_body(messages, true, None);
        let timeout = self.config.timeout;
        let response = tokio::time::timeout(timeout, self.send(&body))
            .await
            .map_err(|_| self.timeout_error())??;
        let state = StreamState {
            response,
            decoder: SseDecoder::default(),
            pending: VecDeque::new(),
            eof: false,
            url: self.url.clone(),
            timeout,
        };
        Ok(ChatStream::new(futures_util::stream::unfold(
            state,
            StreamState::next,
        )))
    }

    /// Asks for a `T` (see [`ChatModelExt::structured`](super::ChatModelExt::structured)):
    /// the schema goes into a system instruction, the reply is validated, and rejected replies
    /// are retried with the reason up to [`LlmConfig::max_attempts`] replies in all.
    ///
    /// ```
    /// use soorma::llm::{ChatMessage, LlmClient, LlmConfig};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct City { name: String, population: u64 }
    ///
    /// # fn serve_once(body: &'static str) -> String {
    /// #     use std::io::{Read, Write};
    /// #     let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// #     let url = format!("http://{}/v1", listener.local_addr().unwrap());
    /// #     std::thread::spawn(move || {
    /// #         let (mut socket, _) = listener.accept().unwrap();
    /// #         let (mut request, mut buf) = (Vec::new(), [0u8; 4096]);
    /// #         while !request.ends_with(b"}") {
    /// #             let n = socket.read(&mut buf).unwrap(); request.extend_from_slice(&buf[..n]);
    /// #         }
    /// #         write!(socket, "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}", body.len()).unwrap();
    /// #     });
    /// #     url
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let base_url = serve_once(r#"{"choices":[{"message":{"content":"{\"name\":\"Oslo\",\"population\":709037}"}}]}"#);
    /// let client = LlmClient::new(LlmConfig::new("m").with_base_url(base_url))?;
    /// let city: City = client.structured(&[ChatMessage::user("The capital of Norway?")]).await?;
    /// assert_eq!(city.name, "Oslo");
    /// # Ok(()) }
    /// ```
    pub async fn structured<T: DeserializeOwned + JsonSchema>(
        &self,
        messages: &[ChatMessage],
    ) -> Result<T> {
        super::structured::run::<T, Self>(self, messages).await
    }

    fn request_body<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        stream: bool,
        schema: Option<&OutputSchema>,
    ) -> CompletionRequest<'a> {
        let response_format = schema
            .filter(|_| self.config.json_schema_response_format)
            .map(|s| {
                serde_json::json!({
                    "type": "json_schema",
                    "json_schema": { "name": s.name, "schema": s.schema, "strict": false },
                })
            });
        CompletionRequest {
            model: &self.config.model,
            messages,
            temperature: self.config.temperature,
            stream,
            response_format,
        }
    }

    /// A non-streaming completion, the whole exchange bounded by the timeout.
    async fn completion(
        &self,
        messages: &[ChatMessage],
        schema: Option<&OutputSchema>,
    ) -> Result<String, LlmError> {
        let body = self.request_body(messages, false, schema);
        tracing::debug!(url = %self.url, model = %self.config.model, messages = messages.len(), "chat completion");
        let exchange = async {
            let response = self.send(&body).await?;
            response.bytes().await.map_err(|e| self.transport_error(&e))
        };
        let bytes = tokio::time::timeout(self.config.timeout, exchange)
            .await
            .map_err(|_| self.timeout_error())??;
        parse_completion(&bytes, &self.url)
    }

    /// Sends the request; a non-2xx status becomes [`LlmError::Http`].
    async fn send(&self, body: &CompletionRequest<'_>) -> Result<reqwest::Response, LlmError> {
        let mut request = self.http.post(&*self.url).json(body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        if body.stream {
            request = request.header(reqwest::header::ACCEPT, "text/event-stream");
        }
        let mut response = request.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let mut excerpt = Vec::new();
        while excerpt.len() < BODY_EXCERPT_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => excerpt.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        tracing::debug!(url = %self.url, status = status.as_u16(), "chat completion failed");
        Err(LlmError::Http {
            url: self.url.to_string(),
            status: status.as_u16(),
            body: body_excerpt(&excerpt),
        })
    }

    fn transport_error(&self, error: &reqwest::Error) -> LlmError {
        transport_error(&self.url, self.config.timeout, error)
    }

    fn timeout_error(&self) -> LlmError {
        LlmError::Timeout {
            url: self.url.to_string(),
            after: self.config.timeout,
        }
    }
}

impl ChatModel for LlmClient {
    fn complete<'a>(&'a self, messages: &'a [ChatMessage]) -> BoxFuture<'a, Result<String>> {
        Box::pin(async move { Ok(self.completion(messages, None).await?) })
    }

    /// Sends `response_format: {"type": "json_schema", ..}` when
    /// [`LlmConfig::json_schema_response_format`] is on.
    fn complete_with_schema<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        schema: &'a OutputSchema,
    ) -> BoxFuture<'a, Result<String>> {
        Box::pin(async move { Ok(self.completion(messages, Some(schema)).await?) })
    }

    fn stream<'a>(&'a self, messages: &'a [ChatMessage]) -> BoxFuture<'a, Result<ChatStream>> {
        Box::pin(LlmClient::stream(self, messages))
    }

    fn max_attempts(&self) -> usize {
        self.config.max_attempts
    }
}

/// Reads a streamed completion.
struct StreamState {
    response: reqwest::Response,
    decoder: SseDecoder,
    /// Event payloads decoded but not yet yielded.
    pending: VecDeque<String>,
    eof: bool,
    url: Arc<str>,
    timeout: Duration,
}

impl StreamState {
    /// The next delta, or `None` at `[DONE]`, at the end of the body, or after an error.
    async fn next(mut self) -> Option<(Result<String>, Self)> {
        loop {
            while let Some(data) = self.pending.pop_front() {
                if data.trim() == "[DONE]" {
                    return None;
                }
                match parse_chunk(&data, &self.url) {
                    Ok(Some(delta)) => return Some((Ok(delta), self)),
                    Ok(None) => {}
                    Err(e) => {
                        self.pending.clear();
                        self.eof = true;
                        return Some((Err(e.into()), self));
                    }
                }
            }
            if self.eof {
                return None;
            }
            let chunk = match tokio::time::timeout(self.timeout, self.response.chunk()).await {
                Ok(Ok(chunk)) => chunk,
                Ok(Err(e)) => {
                    self.eof = true;
                    let error = transport_error(&self.url, self.timeout, &e);
                    return Some((Err(error.into()), self));
                }
                Err(_) => {
                    self.eof = true;
                    let error = LlmError::Timeout {
                        url: self.url.to_string(),
                        after: self.timeout,
                    };
                    return Some((Err(error.into()), self));
                }
            };
            match chunk {
                Some(bytes) => self.pending.extend(self.decoder.push(&bytes)),
                None => {
                    self.eof = true;
                    self.pending.extend(self.decoder.finish());
                    if !self.pending.iter().any(|d| d.trim() == "[DONE]") {
                        tracing::warn!(url = %self.url, "completion stream ended without [DONE]");
                    }
                }
            }
        }
    }
}

/// `choices[0].message.content` of a completion body.
fn parse_completion(body: &[u8], url: &str) -> Result<String, LlmError> {
    let malformed = |message: String| LlmError::Malformed {
        url: url.to_owned(),
        message,
    };
    if let Some(message) = provider_error(body) {
        return Err(LlmError::Provider {
            url: url.to_owned(),
            message,
        });
    }
    let completion: Completion = serde_json::from_slice(body).map_err(|e| {
        malformed(format!(
            "not a chat completion ({e}); body: {}",
            body_excerpt(body)
        ))
    })?;
    let Some(choice) = completion.choices.into_iter().next() else {
        return Err(malformed(format!(
            "no choices; body: {}",
            body_excerpt(body)
        )));
    };
    match choice.message {
        Some(Content {
            content: Some(content),
            ..
        }) => Ok(content),
        Some(Content {
            refusal: Some(refusal),
            ..
        }) => Err(malformed(format!("the model refused: {refusal}"))),
        _ => Err(malformed(format!(
            "choices[0].message has no content; body: {}",
            body_excerpt(body)
        ))),
    }
}

/// `choices[0].delta.content` of a stream chunk; `None` for chunks without text (the role
/// chunk, the finish chunk, usage chunks).
fn parse_chunk(data: &str, url: &str) -> Result<Option<String>, LlmError> {
    if let Some(message) = provider_error(data.as_bytes()) {
        return Err(LlmError::Provider {
            url: url.to_owned(),
            message,
        });
    }
    let chunk: Completion = serde_json::from_str(data).map_err(|e| LlmError::Malformed {
        url: url.to_owned(),
        message: format!(
            "not a completion chunk ({e}); data: {}",
            body_excerpt(data.as_bytes())
        ),
    })?;
    Ok(chunk
        .choices
        .into_iter()
        .next()
        .and_then(|c| c.delta)
        .and_then(|d| d.content)
        .filter(|text| !text.is_empty()))
}

/// The message of an `{"error": ...}` body.
fn provider_error(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: serde_json::Value,
    }
    let parsed: ErrorBody = serde_json::from_slice(body).ok()?;
    Some(match &parsed.error {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => o
            .get("message")
            .and_then(|m| m.as_str())
            .map_or_else(|| parsed.error.to_string(), str::to_owned),
        serde_json::Value::Null => return None,
        other => other.to_string(),
    })
}

fn transport_error(url: &str, timeout: Duration, error: &reqwest::Error) -> LlmError {
    if error.is_timeout() {
        return LlmError::Timeout {
            url: url.to_owned(),
            after: timeout,
        };
    }
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    LlmError::Transport {
        url: url.to_owned(),
        message,
    }
}

/// At most [`BODY_EXCERPT_BYTES`] of `body` as text (cut at a character boundary).
fn body_excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.len() <= BODY_EXCERPT_BYTES {
        return text.to_owned();
    }
    let mut end = BODY_EXCERPT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://llm/v1/chat/completions";

    #[test]
    fn completion_content_is_read() {
        let body = br#"{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{}}"#;
        assert_eq!(parse_completion(body, URL).unwrap(), "hi");
    }

    #[test]
    fn malformed_completions_are_typed() {
        for body in [
            &b"<html>busy</html>"[..],
            b"{\"choices\":[]}",
            b"{\"choices\":[{\"message\":{\"content\":null}}]}",
        ] {
            let err = parse_completion(body, URL).unwrap_err();
            assert!(matches!(err, LlmError::Malformed { .. }), "{err}");
            assert!(!err.is_retryable());
        }
        let refused =
            br#"{"choices":[{"message":{"content":null,"refusal":"I can't help with that."}}]}"#;
        assert!(
            parse_completion(refused, URL)
                .unwrap_err()
                .to_string()
                .contains("can't help")
        );
    }

    #[test]
    fn provider_errors_in_a_2xx_body_are_typed() {
        let err = parse_completion(
            br#"{"error":{"message":"overloaded","type":"server_error"}}"#,
            URL,
        )
        .unwrap_err();
        assert!(matches!(&err, LlmError::Provider { message, .. } if message == "overloaded"));
        let err = parse_chunk(r#"{"error":"boom"}"#, URL).unwrap_err();
        assert!(matches!(&err, LlmError::Provider { message, .. } if message == "boom"));
    }

    #[test]
    fn chunks_without_text_are_skipped() {
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        assert_eq!(parse_chunk(role, URL).unwrap(), None);
        let finish = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        assert_eq!(parse_chunk(finish, URL).unwrap(), None);
        let usage = r#"{"choices":[],"usage":{"total_tokens":3}}"#;
        assert_eq!(parse_chunk(usage, URL).unwrap(), None);
        let text = r#"{"choices":[{"delta":{"content":"ok"}}]}"#;
        assert_eq!(parse_chunk(text, URL).unwrap().as_deref(), Some("ok"));
        assert!(matches!(
            parse_chunk("{not json", URL),
            Err(LlmError::Malformed { .. })
        ));
    }

    #[test]
    fn excerpts_are_bounded_at_char_boundaries() {
        let long = "é".repeat(BODY_EXCERPT_BYTES);
        let excerpt = body_excerpt(long.as_bytes());
        assert!(excerpt.len() <= BODY_EXCERPT_BYTES + '…'.len_utf8());
        assert!(excerpt.ends_with('…'));
        assert_eq!(body_excerpt(b"  short \n"), "short");
    }

    #[test]
    fn request_body_fields() {
        let client = LlmClient::new(
            LlmConfig::new("m")
                .with_base_url("http://127.0.0.1:1/v1")
                .with_temperature(0.5),
        )
        .unwrap();
        let messages = [ChatMessage::user("q")];
        let schema = OutputSchema::of::<Vec<u8>>();
        let plain =
            serde_json::to_value(client.request_body(&messages, false, Some(&schema))).unwrap();
        assert_eq!(
            plain,
            serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "q"}], "temperature": 0.5})
        );
        let with_format = LlmClient::new(
            client
                .config()
                .clone()
                .with_json_schema_response_format(true),
        )
        .unwrap();
        let body =
            serde_json::to_value(with_format.request_body(&messages, true, Some(&schema))).unwrap();
        assert_eq!(body["stream"], true);
        assert_eq!(body["response_format"]["type"], "json_schema");
        assert_eq!(
            body["response_format"]["json_schema"]["name"],
            "Array_of_uint8"
        );
        assert_eq!(
            body["response_format"]["json_schema"]["schema"]["type"],
            "array"
        );
    }

    #[test]
    fn https_clients_build_and_bad_urls_are_rejected() {
        LlmClient::new(LlmConfig::new("m")).unwrap();
        for bad in ["not a url", "ftp://host/v1", "/v1"] {
            let err = LlmClient::new(LlmConfig::new("m").with_base_url(bad)).unwrap_err();
            assert!(
                matches!(err.downcast_ref::<LlmError>(), Some(LlmError::Config(_))),
                "{bad}: {err}"
            );
        }
    }
}

//! The chat-model abstraction: [`ChatModel`] (object safe) and [`ChatModelExt`] (typed
//! structured output over any model).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::{Stream, StreamExt};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::config::DEFAULT_MAX_ATTEMPTS;
use super::message::ChatMessage;
use crate::error::Result;
use crate::util::BoxFuture;

/// The JSON Schema a structured-output request asks for.
///
/// ```
/// #[derive(schemars::JsonSchema)]
/// struct Weather { city: String, celsius: f64 }
///
/// let schema = soorma::llm::OutputSchema::of::<Weather>();
/// assert_eq!(schema.name, "Weather");
/// assert_eq!(schema.schema["required"], serde_json::json!(["city", "celsius"]));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OutputSchema {
    /// A name for the schema (letters, digits, `_` and `-`; at most 64 characters).
    pub name: String,
    /// The JSON Schema (draft 2020-12, as schemars generates it).
    pub schema: serde_json::Value,
}

impl OutputSchema {
    /// The schema of `T`.
    ///
    /// ```
    /// let schema = soorma::llm::OutputSchema::of::<Vec<u8>>();
    /// assert_eq!(schema.name, "Array_of_uint8");
    /// assert_eq!(schema.schema["type"], "array");
    /// ```
    pub fn of<T: JsonSchema>() -> Self {
        let name: String = T::schema_name()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        Self {
            name,
            schema: schemars::schema_for!(T).to_value(),
        }
    }
}

/// A stream of text deltas from a model; concatenated, they are the reply.
///
/// ```
/// use futures_util::StreamExt;
/// use soorma::llm::ChatStream;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// let mut stream = ChatStream::from_chunks(["Hel", "lo"]);
/// assert_eq!(stream.next().await.transpose()?, Some("Hel".to_owned()));
/// assert_eq!(stream.text().await?, "lo");
/// # Ok(()) }
/// ```
pub struct ChatStream {
    inner: Pin<Box<dyn Stream<Item = Result<String>> + Send>>,
}

impl ChatStream {
    /// Wraps any stream of deltas.
    ///
    /// ```
    /// let stream = soorma::llm::ChatStream::new(futures_util::stream::iter([Ok("hi".to_owned())]));
    /// # let _ = stream;
    /// ```
    pub fn new(stream: impl Stream<Item = Result<String>> + Send + 'static) -> Self {
        Self {
            inner: Box::pin(stream),
        }
    }

    /// A stream that yields the given chunks.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let text = soorma::llm::ChatStream::from_chunks(["a", "b"]).text().await?;
    /// assert_eq!(text, "ab");
    /// # Ok(()) }
    /// ```
    pub fn from_chunks<S: Into<String>>(chunks: impl IntoIterator<Item = S>) -> Self {
        let chunks: Vec<Result<String>> = chunks.into_iter().map(|c| Ok(c.into())).collect();
        Self::new(futures_util::stream::iter(chunks))
    }

    /// Reads the rest of the stream and returns it concatenated (the first error ends it).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let text = soorma::llm::ChatStream::from_chunks(["4", "2"]).text().await?;
    /// assert_eq!(text, "42");
    /// # Ok(()) }
    /// ```
    pub async fn text(mut self) -> Result<String> {
        let mut text = String::new();
        while let Some(chunk) = self.inner.next().await {
            text.push_str(&chunk?);
        }
        Ok(text)
    }
}

impl Stream for ChatStream {
    type Item = Result<String>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatStream").finish_non_exhaustive()
    }
}

/// A chat model: [`LlmClient`](super::LlmClient) over HTTP, or
/// [`ScriptedLlm`](super::ScriptedLlm) in tests. Object safe: hold an `Arc<dyn ChatModel>` to
/// switch between them; [`ChatModelExt::structured`] works over any of them.
///
/// ```
/// use std::sync::Arc;
/// use soorma::llm::{ChatMessage, ChatModel, ScriptedLlm};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// let model: Arc<dyn ChatModel> = Arc::new(ScriptedLlm::new(["Paris"]));
/// let reply = model.complete(&[ChatMessage::user("Capital of France?")]).await?;
/// assert_eq!(reply, "Paris");
/// # Ok(()) }
/// ```
pub trait ChatModel: Send + Sync {
    /// Sends the conversation; returns the assistant's reply.
    ///
    /// ```
    /// use soorma::llm::{ChatMessage, ChatModel, ScriptedLlm};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let model = ScriptedLlm::from_fn(|messages| messages.len().to_string());
    /// let model: &dyn ChatModel = &model;
    /// assert_eq!(model.complete(&[ChatMessage::user("a"), ChatMessage::user("b")]).await?, "2");
    /// # Ok(()) }
    /// ```
    fn complete<'a>(&'a self, messages: &'a [ChatMessage]) -> BoxFuture<'a, Result<String>>;

    /// Like [`complete`](Self::complete), for a reply that should match `schema` (the
    /// conversation already asks for it); models that can constrain their output use the
    /// schema. The default ignores it.
    ///
    /// ```
    /// use soorma::llm::{ChatMessage, ChatModel, OutputSchema, ScriptedLlm};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let model = ScriptedLlm::new(["[1, 2]"]);
    /// let schema = OutputSchema::of::<Vec<u32>>();
    /// let reply = ChatModel::complete_with_schema(&model, &[ChatMessage::user("two numbers")], &schema).await?;
    /// assert_eq!(reply, "[1, 2]");
    /// # Ok(()) }
    /// ```
    fn complete_with_schema<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        schema: &'a OutputSchema,
    ) -> BoxFuture<'a, Result<String>> {
        let _ = schema;
        self.complete(messages)
    }

    /// Sends the conversation; returns the reply as a stream of text deltas. The default
    /// yields the whole [`complete`](Self::complete) reply as one chunk.
    ///
    /// ```
    /// use soorma::llm::{ChatMessage, ChatModel, ScriptedLlm};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let model = ScriptedLlm::new(["Hello there"]);
    /// let stream = ChatModel::stream(&model, &[ChatMessage::user("Hi")]).await?;
    /// assert_eq!(stream.text().await?, "Hello there");
    /// # Ok(()) }
    /// ```
    fn stream<'a>(&'a self, messages: &'a [ChatMessage]) -> BoxFuture<'a, Result<ChatStream>> {
        Box::pin(async move {
            let reply = self.complete(messages).await?;
            Ok(ChatStream::from_chunks([reply]))
        })
    }

    /// How many replies [`ChatModelExt::structured`] asks for before giving up.
    ///
    /// ```
    /// use soorma::llm::{ChatModel, ScriptedLlm};
    /// assert_eq!(ScriptedLlm::new(["x"]).max_attempts(), soorma::llm::DEFAULT_MAX_ATTEMPTS);
    /// ```
    fn max_attempts(&self) -> usize {
        DEFAULT_MAX_ATTEMPTS
    }
}

impl<M: ChatModel + ?Sized> ChatModel for Arc<M> {
    fn complete<'a>(&'a self, messages: &'a [ChatMessage]) -> BoxFuture<'a, Result<String>> {
        (**self).complete(messages)
    }

    fn complete_with_schema<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        schema: &'a OutputSchema,
    ) -> BoxFuture<'a, Result<String>> {
        (**self).complete_with_schema(messages, schema)
    }

    fn stream<'a>(&'a self, messages: &'a [ChatMessage]) -> BoxFuture<'a, Result<ChatStream>> {
        (**self).stream(messages)
    }

    fn max_attempts(&self) -> usize {
        (**self).max_attempts()
    }
}

/// Typed structured output over any [`ChatModel`] (implemented for all of them).
///
/// ```
/// use soorma::llm::{ChatMessage, ChatModelExt, ScriptedLlm};
///
/// #[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
/// struct Sentiment { label: String, score: f64 }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// let model = ScriptedLlm::new(["```json\n{\"label\": \"positive\", \"score\": 0.9}\n```"]);
/// let s: Sentiment = model.structured(&[ChatMessage::user("I love it")]).await?;
/// assert_eq!(s, Sentiment { label: "positive".into(), score: 0.9 });
/// # Ok(()) }
/// ```
pub trait ChatModelExt: ChatModel {
    /// Asks for a `T`: the request carries `T`'s JSON Schema in a system instruction; the JSON
    /// in the reply (plain, fenced, or the first balanced value in prose) is checked against
    /// the schema and deserialized. A rejected reply is sent back with the reason, up to
    /// [`max_attempts`](ChatModel::max_attempts) replies in all; then the error is
    /// [`LlmError::StructuredOutput`](super::LlmError::StructuredOutput) with every attempt.
    ///
    /// ```
    /// use soorma::llm::{ChatMessage, ChatModelExt, ScriptedLlm};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let model = ScriptedLlm::new(["three", "[1, 2, 3]"]);
    /// let numbers: Vec<u32> = model.structured(&[ChatMessage::user("Count to three.")]).await?;
    /// assert_eq!(numbers, [1, 2, 3]);
    /// assert!(model.requests()[1].last().unwrap().content.contains("no JSON"));
    /// # Ok(()) }
    /// ```
    fn structured<'a, T>(
        &'a self,
        messages: &'a [ChatMessage],
    ) -> impl Future<Output = Result<T>> + Send + 'a
    where
        T: DeserializeOwned + JsonSchema + 'a,
    {
        super::structured::run::<T, Self>(self, messages)
    }
}

impl<M: ChatModel + ?Sized> ChatModelExt for M {}

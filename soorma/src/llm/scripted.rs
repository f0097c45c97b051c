//! A [`ChatModel`] with canned replies, for tests and examples.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

use super::config::DEFAULT_MAX_ATTEMPTS;
use super::error::LlmError;
use super::message::ChatMessage;
use super::model::{ChatModel, ChatStream};
use crate::error::Result;
use crate::util::BoxFuture;

type Responder = dyn Fn(&[ChatMessage]) -> String + Send + Sync;

struct Script {
    queue: Mutex<VecDeque<String>>,
    responder: Option<Box<Responder>>,
    requests: Mutex<Vec<Vec<ChatMessage>>>,
}

/// A chat model that answers from a script: queued replies first, in order, then the
/// responder closure (if any). Records every request so tests can check the prompts. Clones
/// share the script and the record.
///
/// ```
/// use soorma::llm::{ChatMessage, ChatModel, ScriptedLlm};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// let model = ScriptedLlm::new(["first"]);
/// assert_eq!(model.complete(&[ChatMessage::user("1")]).await?, "first");
/// model.push_reply("second");
/// assert_eq!(model.complete(&[ChatMessage::user("2")]).await?, "second");
/// assert!(model.complete(&[ChatMessage::user("3")]).await.is_err()); // script exhausted
/// assert_eq!(model.requests()[1], [ChatMessage::user("2")]);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ScriptedLlm {
    script: Arc<Script>,
    max_attempts: usize,
}

impl ScriptedLlm {
    /// A model that gives these replies, one per request, then fails with
    /// [`LlmError::ScriptExhausted`].
    ///
    /// ```
    /// let model = soorma::llm::ScriptedLlm::new(["a", "b"]);
    /// assert_eq!(model.remaining(), 2);
    /// ```
    pub fn new<S: Into<String>>(replies: impl IntoIterator<Item = S>) -> Self {
        Self::build(replies.into_iter().map(Into::into).collect(), None)
    }

    /// A model that computes each reply from the conversation (after any queued replies).
    ///
    /// ```
    /// use soorma::llm::{ChatMessage, ChatModel, ScriptedLlm};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let echo = ScriptedLlm::from_fn(|messages| {
    ///     messages.last().map(|m| m.content.to_uppercase()).unwrap_or_default()
    /// });
    /// assert_eq!(echo.complete(&[ChatMessage::user("hi")]).await?, "HI");
    /// # Ok(()) }
    /// ```
    pub fn from_fn(responder: impl Fn(&[ChatMessage]) -> String + Send + Sync + 'static) -> Self {
        Self::build(VecDeque::new(), Some(Box::new(responder)))
    }

    fn build(queue: VecDeque<String>, responder: Option<Box<Responder>>) -> Self {
        Self {
            script: Arc::new(Script {
                queue: Mutex::new(queue),
                responder,
                requests: Mutex::new(Vec::new()),
            }),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }

    /// Sets how many replies structured output asks for (at least 1).
    ///
    /// ```
    /// use soorma::llm::{ChatModel, ScriptedLlm};
    /// assert_eq!(ScriptedLlm::new(["x"]).with_max_attempts(5).max_attempts(), 5);
    /// ```
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: usize) -> Self {
        self.max_attempts = max_attempts.max(1);
        self
    }

    /// Queues one more reply.
    ///
    /// ```
    /// let model = soorma::llm::ScriptedLlm::new(Vec::<String>::new());
    /// model.push_reply("later");
    /// assert_eq!(model.remaining(), 1);
    /// ```
    pub fn push_reply(&self, reply: impl Into<String>) {
        self.queue().push_back(reply.into());
    }

    /// How many queued replies are left (the responder, if any, is not counted).
    ///
    /// ```
    /// assert_eq!(soorma::llm::ScriptedLlm::new(["a"]).remaining(), 1);
    /// ```
    pub fn remaining(&self) -> usize {
        self.queue().len()
    }

    /// Every conversation received so far, in order.
    ///
    /// ```
    /// use soorma::llm::{ChatMessage, ChatModel, ScriptedLlm};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let model = ScriptedLlm::new(["ok"]);
    /// model.complete(&[ChatMessage::system("Be brief."), ChatMessage::user("Hi")]).await?;
    /// assert_eq!(model.requests(), [vec![ChatMessage::system("Be brief."), ChatMessage::user("Hi")]]);
    /// # Ok(()) }
    /// ```
    pub fn requests(&self) -> Vec<Vec<ChatMessage>> {
        self.recorded().clone()
    }

    /// How many requests were received.
    ///
    /// ```
    /// assert_eq!(soorma::llm::ScriptedLlm::new(["a"]).request_count(), 0);
    /// ```
    pub fn request_count(&self) -> usize {
        self.recorded().len()
    }

    /// The last conversation received.
    ///
    /// ```
    /// use soorma::llm::{ChatMessage, ChatModel, ScriptedLlm};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let model = ScriptedLlm::from_fn(|_| "ok".into());
    /// assert!(model.last_request().is_none());
    /// model.complete(&[ChatMessage::user("Hi")]).await?;
    /// assert_eq!(model.last_request().unwrap()[0].content, "Hi");
    /// # Ok(()) }
    /// ```
    pub fn last_request(&self) -> Option<Vec<ChatMessage>> {
        self.recorded().last().cloned()
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        self.script.queue.lock().expect("scripted llm queue lock")
    }

    fn recorded(&self) -> std::sync::MutexGuard<'_, Vec<Vec<ChatMessage>>> {
        self.script
            .requests
            .lock()
            .expect("scripted llm requests lock")
    }

    fn reply(&self, messages: &[ChatMessage]) -> Result<String> {
        let request = {
            let mut requests = self.recorded();
            requests.push(messages.to_vec());
            requests.len()
        };
        let queued = self.queue().pop_front();
        let reply = match (queued, &self.script.responder) {
            (Some(reply), _) => reply,
            (None, Some(responder)) => responder(messages),
            (None, None) => return Err(LlmError::ScriptExhausted { request }.into()),
        };
        tracing::debug!(request, reply_len = reply.len(), "scripted llm replied");
        Ok(reply)
    }
}

impl ChatModel for ScriptedLlm {
    fn complete<'a>(&'a self, messages: &'a [ChatMessage]) -> BoxFuture<'a, Result<String>> {
        let reply = self.reply(messages);
        Box::pin(async move { reply })
    }

    /// Streams the reply word by word (each chunk keeps its trailing whitespace).
    fn stream<'a>(&'a self, messages: &'a [ChatMessage]) -> BoxFuture<'a, Result<ChatStream>> {
        let reply = self.reply(messages);
        Box::pin(async move {
            let reply = reply?;
            Ok(ChatStream::from_chunks(
                reply.split_inclusive(char::is_whitespace),
            ))
        })
    }

    fn max_attempts(&self) -> usize {
        self.max_attempts
    }
}

impl fmt::Debug for ScriptedLlm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedLlm")
            .field("remaining", &self.remaining())
            .field("responder", &self.script.responder.is_some())
            .field("requests", &self.request_count())
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    #[tokio::test]
    async fn queued_replies_come_before_the_responder() {
        let model = ScriptedLlm::from_fn(|m| format!("computed {}", m.len()));
        model.push_reply("queued");
        let ask = [ChatMessage::user("q")];
        assert_eq!(model.complete(&ask).await.unwrap(), "queued");
        assert_eq!(model.complete(&ask).await.unwrap(), "computed 1");
        assert_eq!(model.request_count(), 2);
    }

    #[tokio::test]
    async fn exhaustion_is_a_typed_error_naming_the_request() {
        let model = ScriptedLlm::new(["only"]);
        let ask = [ChatMessage::user("q")];
        model.complete(&ask).await.unwrap();
        let err = model.complete(&ask).await.unwrap_err();
        assert!(matches!(
            err.downcast_ref::<LlmError>(),
            Some(LlmError::ScriptExhausted { request: 2 })
        ));
        assert!(!err.is_retryable());
    }

    #[tokio::test]
    async fn clones_share_the_script_and_the_record() {
        let model = ScriptedLlm::new(["a", "b"]);
        let clone = model.clone();
        let ask = [ChatMessage::user("q")];
        assert_eq!(clone.complete(&ask).await.unwrap(), "a");
        assert_eq!(model.complete(&ask).await.unwrap(), "b");
        assert_eq!(model.request_count(), 2);
        assert_eq!(clone.remaining(), 0);
    }

    #[tokio::test]
    async fn streams_word_by_word() {
        let model = ScriptedLlm::new(["Hello big  world"]);
        let chunks: Vec<String> = model
            .stream(&[ChatMessage::user("q")])
            .await
            .unwrap()
            .map(|c| c.unwrap())
            .collect()
            .await;
        assert_eq!(chunks, ["Hello ", "big ", " ", "world"]);
        assert_eq!(model.request_count(), 1);
    }
}

//! Chat messages, as the chat-completions API spells them.

use serde::{Deserialize, Serialize};

/// Who wrote a message.
///
/// ```
/// use soorma::llm::Role;
/// assert_eq!(serde_json::to_value(Role::Assistant).unwrap(), "assistant");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The user (or the calling program).
    User,
    /// The model.
    Assistant,
}

/// One message of a conversation.
///
/// ```
/// use soorma::llm::{ChatMessage, Role};
/// let m = ChatMessage::user("Hello");
/// assert_eq!(m.role, Role::User);
/// assert_eq!(serde_json::to_value(&m).unwrap(), serde_json::json!({"role": "user", "content": "Hello"}));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatMessage {
    /// The author.
    pub role: Role,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message with any role.
    ///
    /// ```
    /// use soorma::llm::{ChatMessage, Role};
    /// assert_eq!(ChatMessage::new(Role::System, "Be brief."), ChatMessage::system("Be brief."));
    /// ```
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
        }
    }

    /// A system (instruction) message.
    ///
    /// ```
    /// assert_eq!(soorma::llm::ChatMessage::system("Be brief.").role, soorma::llm::Role::System);
    /// ```
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user message.
    ///
    /// ```
    /// assert_eq!(soorma::llm::ChatMessage::user("Hi").content, "Hi");
    /// ```
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant (model) message, e.g. an earlier reply in a multi-turn conversation.
    ///
    /// ```
    /// assert_eq!(soorma::llm::ChatMessage::assistant("Hello!").role, soorma::llm::Role::Assistant);
    /// ```
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }
}

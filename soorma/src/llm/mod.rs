//! An OpenAI-compatible LLM client (feature `llm`): plain completions, streaming, and typed
//! structured output with validation and retries.
//!
//! - [`LlmClient`] talks to `POST {base_url}/chat/completions` (OpenAI, vLLM, Ollama,
//!   llama.cpp, LiteLLM, ...), configured by [`LlmConfig`] or the environment
//!   ([`LlmConfig::from_env`]).
//! - [`ChatModel`] is the object-safe abstraction over it; [`ScriptedLlm`] implements it with
//!   canned replies for tests and examples.
//! - [`ChatModelExt::structured`] asks any model for a `T: DeserializeOwned + JsonSchema`.
//!
//! ```
//! use soorma::llm::{ChatMessage, ChatModelExt, ScriptedLlm};
//!
//! #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
//! struct Plan { steps: Vec<String> }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
//! // First reply is prose, so the model is told why and asked again.
//! let model = ScriptedLlm::new([
//!     "Let me think about it.",
//!     "Here it is: {\"steps\": [\"search\", \"summarize\"]}",
//! ]);
//! let plan: Plan = model
//!     .structured(&[ChatMessage::system("You plan research."), ChatMessage::user("Rust async")])
//!     .await?;
//! assert_eq!(plan.steps, ["search", "summarize"]);
//! assert_eq!(model.request_count(), 2);
//! # Ok(()) }
//! ```

mod client;
mod config;
mod error;
mod extract;
mod message;
mod model;
pub mod planning;
mod scripted;
mod sse;
mod structured;

pub use client::LlmClient;
pub use config::{
    API_KEY_ENV, BASE_URL_ENV, DEFAULT_BASE_URL, DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT, LlmConfig,
    MODEL_ENV,
};
pub use error::{Attempt, LlmError};
pub use extract::{ExtractError, extract_json};
pub use message::{ChatMessage, Role};
pub use model::{ChatModel, ChatModelExt, ChatStream, OutputSchema};
pub use scripted::ScriptedLlm;

//! [`Delegation`]: one sub-task of a fan-out.

use serde::Serialize;
use serde_json::Value;
use soorma_common::Topic;

/// One sub-task to delegate in a fan-out.
///
/// Two delegations with the same event type stay distinct sub-tasks.
///
/// ```
/// use soorma::Delegation;
/// let d = Delegation::new("sentiment.analyze", &serde_json::json!({"text": "hi"}), "sentiment.completed");
/// assert_eq!(d.event_type(), "sentiment.analyze");
/// ```
#[derive(Debug, Clone)]
pub struct Delegation {
    pub(crate) event_type: String,
    pub(crate) data: std::result::Result<Value, String>,
    pub(crate) response_event: String,
    pub(crate) validate: bool,
    pub(crate) check_consumer: bool,
    pub(crate) topic: Topic,
}

impl Delegation {
    /// A delegation of `data` as `event_type`, answered with `response_event`.
    ///
    /// ```
    /// use soorma::Delegation;
    ///
    /// let chapters = ["intro", "setup"].map(|c| Delegation::new("summarize.requested", &c, "summary.completed"));
    /// assert_eq!(chapters.len(), 2); // two sub-tasks, though the event type is the same
    /// ```
    pub fn new(
        event_type: impl Into<String>,
        data: &impl Serialize,
        response_event: impl Into<String>,
    ) -> Self {
        Self {
            event_type: event_type.into(),
            data: serde_json::to_value(data).map_err(|e| e.to_string()),
            response_event: response_event.into(),
            validate: true,
            check_consumer: true,
            topic: Topic::ActionRequests,
        }
    }

    /// Publishes the request even when no registered agent consumes its event (by default
    /// the delegation fails with [`Error::NoConsumer`](crate::Error::NoConsumer) before anything
    /// is saved) — for a consumer that starts later and picks the request up then.
    ///
    /// ```
    /// let d = soorma::Delegation::new("batch.requested", &"nightly", "batch.completed").skip_consumer_check();
    /// # let _ = d;
    /// ```
    #[must_use]
    pub fn skip_consumer_check(mut self) -> Self {
        self.check_consumer = false;
        self
    }

    /// Publishes the request without checking its payload against the schema its consumer
    /// registered (checked by default: a mismatch fails the delegation with
    /// [`Error::SchemaViolation`](crate::Error::SchemaViolation) before anything is saved or published).
    ///
    /// ```
    /// let d = soorma::Delegation::new("legacy.requested", &"free-form", "legacy.done").skip_validation();
    /// # let _ = d;
    /// ```
    #[must_use]
    pub fn skip_validation(mut self) -> Self {
        self.validate = false;
        self
    }

    /// The request's event type.
    ///
    /// ```
    /// let d = soorma::Delegation::new("sentiment.analyze", &"great product", "sentiment.completed");
    /// assert_eq!(d.event_type(), "sentiment.analyze");
    /// ```
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The reply event.
    ///
    /// ```
    /// let d = soorma::Delegation::new("sentiment.analyze", &"great product", "sentiment.completed");
    /// assert_eq!(d.response_event(), "sentiment.completed");
    /// ```
    pub fn response_event(&self) -> &str {
        &self.response_event
    }
}

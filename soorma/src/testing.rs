//! Testing helpers for SDK users: run several agents on an embedded platform, capture every
//! published event, await an expected event with a timeout.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
//! use std::time::Duration;
//! use soorma::prelude::*;
//! use soorma::testing::TestPlatform;
//!
//! async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
//!
//! let mut t = TestPlatform::new();
//! t.start(Tool::new("doubler").use_registered_handlers(false)
//!     .handler(Handler::on_invoke("double.requested", double))).await?;
//! t.client().bus().request("double.requested", 21, "double.completed").await?;
//! let reply = t.expect_event("double.completed", Duration::from_secs(1)).await?;
//! assert_eq!(reply.data["result"], 42);
//! t.shutdown().await?;
//! # Ok(()) }
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use soorma_common::EventEnvelope;
use tokio::sync::Notify;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::platform::Platform;
use crate::runtime::agent::{AgentBuilder, AgentHandle};

/// Every distinct event, in publication order (a republished event id is recorded once, as a
/// durable stream keeps it once).
#[derive(Default)]
struct EventLog {
    events: Mutex<Vec<Arc<EventEnvelope>>>,
    seen: Mutex<std::collections::HashSet<String>>,
    notify: Notify,
}

impl EventLog {
    fn record(&self, env: &Arc<EventEnvelope>) {
        if self
            .seen
            .lock()
            .expect("event log lock")
            .insert(env.id.clone())
        {
            self.events
                .lock()
                .expect("event log lock")
                .push(env.clone());
            self.notify.notify_waiters();
        }
    }
}

/// An embedded platform that records every published event.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::testing::TestPlatform;
///
/// let t = TestPlatform::new();
/// t.client().bus().announce("order.placed", serde_json::json!({"id": 1})).await?;
/// assert_eq!(t.events_of_type("order.placed").len(), 1);
/// # Ok(()) }
/// ```
pub struct TestPlatform {
    platform: Platform,
    log: Arc<EventLog>,
    agents: Vec<AgentHandle>,
    collector: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for TestPlatform {
    fn drop(&mut self) {
        if let Some(c) = self.collector.take() {
            c.abort();
        }
    }
}

impl std::fmt::Debug for TestPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPlatform")
            .field("agents", &self.agents.len())
            .field(
                "events",
                &self.log.events.lock().map(|e| e.len()).unwrap_or(0),
            )
            .finish()
    }
}

impl Default for TestPlatform {
    fn default() -> Self {
        Self::new()
    }
}

impl TestPlatform {
    /// A fresh embedded platform with event capture.
    ///
    /// ```
    /// let t = soorma::testing::TestPlatform::new();
    /// assert_eq!(t.platform().kind(), "embedded");
    /// assert!(t.events().is_empty());
    /// ```
    pub fn new() -> Self {
        let platform = Platform::embedded();
        let log = Arc::new(EventLog::default());
        let sink = log.clone();
        platform
            .embedded_bus()
            .expect("Platform::embedded has an embedded bus")
            .tap(move |env| sink.record(env));
        Self {
            platform,
            log,
            agents: Vec::new(),
            collector: None,
        }
    }

    /// Records every event published on any platform (NATS included) from now on, by
    /// observing its bus.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let t = soorma::testing::TestPlatform::with_platform(soorma::Platform::embedded()).await?;
    /// t.client().bus().announce("hello", 1).await?;
    /// t.expect_event("hello", std::time::Duration::from_secs(1)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_platform(platform: Platform) -> Result<Self> {
        let mut observer = platform.bus().observe(None).await?;
        let log = Arc::new(EventLog::default());
        let sink = log.clone();
        let collector = tokio::spawn(async move {
            while let Some(delivery) = observer.next().await {
                sink.record(&delivery.envelope);
            }
        });
        Ok(Self {
            platform,
            log,
            agents: Vec::new(),
            collector: Some(collector),
        })
    }

    /// The platform, to start agents or clients on directly.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let t = soorma::testing::TestPlatform::new();
    /// let agents = t.platform().discovery().all().await?;
    /// assert!(agents.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn platform(&self) -> &Platform {
        &self.platform
    }

    /// Starts an agent; it is shut down by [`shutdown`](Self::shutdown).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
    ///
    /// let mut t = soorma::testing::TestPlatform::new();
    /// let tool = Tool::new("doubler").use_registered_handlers(false)
    ///     .handler(Handler::on_invoke("double.requested", double));
    /// assert_eq!(t.start(tool).await?.name(), "doubler");
    /// # t.shutdown().await }
    /// ```
    pub async fn start(&mut self, agent: AgentBuilder) -> Result<&AgentHandle> {
        let handle = agent.start(&self.platform).await?;
        self.agents.push(handle);
        Ok(self.agents.last().expect("just pushed"))
    }

    /// The sub-task `sub_task_id` (a delegated request's correlation id) of `tenant` as
    /// stored: what it delegates and, once recorded in its task, its result; `None` when no
    /// task of `tenant` delegated it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn plan(mut task: TaskContext) -> soorma::Result<String> {
    ///     // Nobody serves `search.requested` here: this test plays the searcher.
    ///     let search = Delegation::new("search.requested", &"rust", "search.completed").skip_consumer_check();
    ///     task.delegate_with(search).await
    /// }
    /// # async fn searched(_: ResultContext) {}
    ///
    /// let mut t = soorma::testing::TestPlatform::new();
    /// # t.start(Worker::new("planner").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("plan.requested", plan))
    /// #     .handler(Handler::on_result("search.completed", searched))).await?;
    /// t.client().bus().request("plan.requested", (), "plan.completed").await?;
    /// let search = t.expect_event("search.requested", std::time::Duration::from_secs(1)).await?;
    /// let id = search.correlation_id.as_deref().unwrap();
    /// let sub_task = t.sub_task("default", id).await?.unwrap();
    /// assert_eq!((sub_task.event_type.as_str(), sub_task.is_finished()), ("search.requested", false));
    /// assert!(t.sub_task("globex", id).await?.is_none());
    /// # t.shutdown().await }
    /// ```
    pub async fn sub_task(
        &self,
        tenant: &str,
        sub_task_id: &str,
    ) -> Result<Option<soorma_common::SubTaskInfo>> {
        crate::layers::worker::group::stored_sub_task(&self.platform, tenant, sub_task_id).await
    }

    /// A client named `test-client`.
    ///
    /// ```
    /// let t = soorma::testing::TestPlatform::new();
    /// assert_eq!(t.client().bus().source(), "test-client");
    /// ```
    pub fn client(&self) -> Client {
        self.platform.client("test-client")
    }

    /// Every event published so far, in order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let t = soorma::testing::TestPlatform::new();
    /// let bus = t.client().bus();
    /// bus.announce("cart.created", ()).await?;
    /// bus.announce("cart.checked_out", ()).await?;
    /// let types: Vec<String> = t.events().iter().map(|e| e.event_type.clone()).collect();
    /// assert_eq!(types, ["cart.created", "cart.checked_out"]);
    /// # Ok(()) }
    /// ```
    pub fn events(&self) -> Vec<Arc<EventEnvelope>> {
        self.log.events.lock().expect("event log lock").clone()
    }

    /// The events of one type published so far.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let t = soorma::testing::TestPlatform::new();
    /// let bus = t.client().bus();
    /// for item in ["apple", "pear"] {
    ///     bus.announce("item.added", item).await?;
    /// }
    /// bus.announce("cart.checked_out", ()).await?;
    /// assert_eq!(t.events_of_type("item.added").len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn events_of_type(&self, event_type: &str) -> Vec<Arc<EventEnvelope>> {
        self.events()
            .into_iter()
            .filter(|e| e.event_type == event_type)
            .collect()
    }

    /// Waits for an event of `event_type` (already published or still to come).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::time::Duration;
    ///
    /// let t = soorma::testing::TestPlatform::new();
    /// t.client().bus().announce("order.placed", 7).await?;
    /// let placed = t.expect_event("order.placed", Duration::from_secs(1)).await?;
    /// assert_eq!(placed.data, 7);
    /// assert!(t.expect_event("order.cancelled", Duration::from_millis(10)).await.is_err());
    /// # Ok(()) }
    /// ```
    pub async fn expect_event(
        &self,
        event_type: &str,
        timeout: Duration,
    ) -> Result<Arc<EventEnvelope>> {
        self.expect_matching(|e| e.event_type == event_type, timeout, event_type)
            .await
    }

    /// Waits for an event matching `predicate`; `what` names it in the timeout error.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::time::Duration;
    ///
    /// let t = soorma::testing::TestPlatform::new();
    /// let acme_client = t.client().with_tenant("acme");
    /// acme_client.publish(soorma::Topic::BusinessFacts, "order.placed", 7).await?;
    /// let acme = t.expect_matching(|e| e.tenant() == "acme", Duration::from_secs(1), "an acme event").await?;
    /// assert_eq!(acme.event_type, "order.placed");
    /// # Ok(()) }
    /// ```
    pub async fn expect_matching(
        &self,
        predicate: impl Fn(&EventEnvelope) -> bool,
        timeout: Duration,
        what: &str,
    ) -> Result<Arc<EventEnvelope>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.log.notify.notified();
            if let Some(found) = self
                .log
                .events
                .lock()
                .expect("event log lock")
                .iter()
                .find(|e| predicate(e))
            {
                return Ok(found.clone());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Error::Timeout {
                    after: timeout,
                    what: format!("an event matching {what}"),
                });
            }
        }
    }

    /// Shuts every started agent down gracefully.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
    ///
    /// let mut t = soorma::testing::TestPlatform::new();
    /// t.start(Tool::new("doubler").use_registered_handlers(false)
    ///     .handler(Handler::on_invoke("double.requested", double))).await?;
    /// let platform = t.platform().clone();
    /// t.shutdown().await?;
    /// assert!(platform.discovery().all().await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(mut self) -> Result<()> {
        for agent in std::mem::take(&mut self.agents) {
            agent.shutdown().await?;
        }
        Ok(())
    }
}

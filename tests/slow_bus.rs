//! A bus whose publishes of one event type are slow: the wait comes before the publish (a
//! reply retried through a cluster's failover) or after it (a publish that returns late, while
//! its event is already being handled).

use std::sync::Arc;
use std::time::Duration;

use soorma::bus::{EventBus, Subscription, SubscriptionSpec};
use soorma::{BoxFuture, EngineParts, EventEnvelope, Platform, Result, Topic};

/// Where a slow publish waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Before the event is published.
    Before,
    /// After it is published, before the publish returns.
    After,
}

/// `platform` with `bus` for its bus (the same state and registry).
fn with_bus(platform: &Platform, bus: Arc<dyn EventBus>) -> Platform {
    Platform::from_parts(EngineParts::new(
        platform.kind(),
        bus,
        platform.state().clone(),
        platform.registry().clone(),
    ))
}

/// Wraps a bus: publishes of `event_type` wait `delay` ([`Wait::Before`] or [`Wait::After`]
/// publishing); everything else goes straight through.
pub struct SlowPublish {
    inner: Arc<dyn EventBus>,
    event_type: String,
    wait: Wait,
    delay: Duration,
}

impl SlowPublish {
    /// `platform` with its publishes of `event_type` slowed (the same state and registry).
    ///
    /// ```text
    /// let late = SlowPublish::platform(&platform, "calculate.requested", Wait::After, Duration::from_millis(500));
    /// ```
    pub fn platform(
        platform: &Platform,
        event_type: &str,
        wait: Wait,
        delay: Duration,
    ) -> Platform {
        let bus = Self {
            inner: platform.bus().clone(),
            event_type: event_type.to_owned(),
            wait,
            delay,
        };
        with_bus(platform, Arc::new(bus))
    }
}

impl EventBus for SlowPublish {
    fn publish(&self, envelope: EventEnvelope) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let slow = envelope.event_type == self.event_type;
            if slow && self.wait == Wait::Before {
                tokio::time::sleep(self.delay).await;
            }
            self.inner.publish(envelope).await?;
            if slow && self.wait == Wait::After {
                tokio::time::sleep(self.delay).await;
            }
            Ok(())
        })
    }

    fn subscribe(&self, spec: SubscriptionSpec) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
        self.inner.subscribe(spec)
    }

    fn observe(&self, topic: Option<Topic>) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
        self.inner.observe(topic)
    }

    fn redelivery_delay(&self) -> Option<Duration> {
        self.inner.redelivery_delay()
    }
}

/// Wraps a bus: the first `failures` publishes of `event_type` fail with a retryable error
/// ([`soorma::Error::Timeout`]) without publishing (a publish lost in a leader change);
/// everything else goes straight through.
pub struct FailingPublish {
    inner: Arc<dyn EventBus>,
    event_type: String,
    failures: std::sync::atomic::AtomicUsize,
}

impl FailingPublish {
    /// `platform` with its first `failures` publishes of `event_type` failing (the same state
    /// and registry).
    pub fn platform(platform: &Platform, event_type: &str, failures: usize) -> Platform {
        let bus = Self {
            inner: platform.bus().clone(),
            event_type: event_type.to_owned(),
            failures: failures.into(),
        };
        with_bus(platform, Arc::new(bus))
    }
}

impl EventBus for FailingPublish {
    fn publish(&self, envelope: EventEnvelope) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            use std::sync::atomic::Ordering;
            let fails = envelope.event_type == self.event_type
                && self
                    .failures
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
            if fails {
                return Err(soorma::Error::Timeout {
                    after: Duration::ZERO,
                    what: format!("publishing `{}` (an injected failure)", self.event_type),
                });
            }
            self.inner.publish(envelope).await
        })
    }

    fn subscribe(&self, spec: SubscriptionSpec) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
        self.inner.subscribe(spec)
    }

    fn observe(&self, topic: Option<Topic>) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
        self.inner.observe(topic)
    }

    fn redelivery_delay(&self) -> Option<Duration> {
        self.inner.redelivery_delay()
    }
}

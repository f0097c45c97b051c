//! Routes the `task.progress` events of the platform to the tool calls waiting for them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use soorma_common::{TaskProgress, Topic};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::platform::Platform;

/// A request's progress route, by its tenant and event id: another tenant's `task.progress`
/// naming the same id is not forwarded.
type RouteKey = (String, String);
/// Each call holds its latest progress report not yet forwarded to its client (one slot: a
/// newer report replaces it).
type RouteMap = HashMap<RouteKey, watch::Sender<Option<TaskProgress>>>;
type Routes = Arc<Mutex<RouteMap>>;

/// One observer of `system-events` per server, started on the first call that wants progress.
#[derive(Default)]
pub(super) struct ProgressRouter {
    routes: Routes,
    observer: tokio::sync::Mutex<Option<AbortHandle>>,
}

impl Drop for ProgressRouter {
    fn drop(&mut self) {
        if let Some(task) = self.observer.get_mut().take() {
            task.abort();
        }
    }
}

/// The progress of one request, until dropped.
pub(super) struct Subscription {
    key: RouteKey,
    routes: Routes,
    pub rx: watch::Receiver<Option<TaskProgress>>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        lock(&self.routes).remove(&self.key);
    }
}

fn lock(routes: &Mutex<RouteMap>) -> std::sync::MutexGuard<'_, RouteMap> {
    routes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ProgressRouter {
    /// The progress events of `tenant`'s request whose event id is `request_id`; `None`
    /// (logged) when the platform cannot be observed.
    pub async fn subscribe(
        &self,
        platform: &Platform,
        tenant: &str,
        request_id: &str,
    ) -> Option<Subscription> {
        {
            let mut observer = self.observer.lock().await;
            // Started on first use, and again if its subscription ended.
            if observer.as_ref().is_none_or(AbortHandle::is_finished) {
                match platform.bus().observe(Some(Topic::SystemEvents)).await {
                    Ok(sub) => {
                        let routes = Arc::downgrade(&self.routes);
                        *observer = Some(tokio::spawn(route(sub, routes)).abort_handle());
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot observe task progress; MCP calls get no progress notifications");
                        return None;
                    }
                }
            }
        }
        let (tx, rx) = watch::channel(None);
        let key = (tenant.to_owned(), request_id.to_owned());
        lock(&self.routes).insert(key.clone(), tx);
        Some(Subscription {
            key,
            routes: self.routes.clone(),
            rx,
        })
    }
}

async fn route(mut sub: Box<dyn crate::spi::bus::Subscription>, routes: Weak<Mutex<RouteMap>>) {
    while let Some(delivery) = sub.next().await {
        let Some(progress) = crate::protocol::progress::progress_report(&delivery.envelope) else {
            continue;
        };
        let Some(routes) = routes.upgrade() else {
            return;
        };
        let key = (
            delivery.envelope.tenant().to_owned(),
            progress.task_id.clone(),
        );
        if let Some(tx) = lock(&routes).get(&key) {
            tx.send_replace(Some(progress));
        }
    }
    tracing::warn!(
        "the task progress subscription ended; the next call that wants progress starts a new one"
    );
}

//! A spawned axum server that stops gracefully: the A2A gateway and the MCP server.

use tokio::sync::watch;

/// A server running in the background until [`stop`](Self::stop).
#[derive(Debug)]
pub(crate) struct HttpServer {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpServer {
    /// Serves `app` on `listener`. When stopped, `on_stop` runs first (to end long-lived
    /// streams), then the server stops taking connections and waits for open requests.
    pub(crate) fn spawn(
        listener: tokio::net::TcpListener,
        app: axum::Router,
        what: &'static str,
        on_stop: impl FnOnce() + Send + 'static,
    ) -> Self {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
                on_stop();
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %e, "the {what} stopped");
            }
        });
        Self { stop, task }
    }

    /// Stops the server and waits until it has.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

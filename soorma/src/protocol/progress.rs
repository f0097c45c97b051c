//! Progress reports: `task.progress` on `system-events`, whose data is a [`TaskProgress`].

use soorma_common::events::TASK_PROGRESS;
use soorma_common::{EventEnvelope, TaskProgress, Topic};

/// The progress report an event carries; `None` for any other event.
pub(crate) fn progress_report(env: &EventEnvelope) -> Option<TaskProgress> {
    if env.topic != Topic::SystemEvents || env.event_type != TASK_PROGRESS {
        return None;
    }
    serde_json::from_value(env.data.clone()).ok()
}

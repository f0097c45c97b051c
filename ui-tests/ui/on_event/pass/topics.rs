// Raw events: named and positional arguments, the `"*"` wildcard, extractors.
use soorma::prelude::*;

/// Sends a confirmation e-mail.
#[on_event(topic = "business-facts", event = "order.placed", agent = "mailer")]
async fn confirm_order(event: Event<serde_json::Value>) -> soorma::Result<()> {
    event
        .bus()
        .announce("mail.sent", serde_json::json!({ "order": event.data }))
        .await?;
    Ok(())
}

// Positional form: topic, then event name.
#[on_event("business-facts", "order.cancelled")]
async fn audit(event: Event) {
    let _: Topic = event.topic();
    let _: &str = event.event_type();
}

// One positional plus a named event: the positional is the topic.
#[on_event("billing-events", event = "invoice.paid", description = "Marks invoices as paid.")]
async fn invoice_paid(event: Event<String>, _platform: Platform) -> Result<(), ToolError> {
    let _: String = event.data;
    Ok(())
}

// One positional plus a named topic: the positional is the event name.
#[on_event("user.signed_up", topic = "notification-events")]
async fn welcome(_event: Event<serde_json::Value>, _bus: BusClient) {}

// Every event on a topic.
#[derive(Clone)]
struct Counter;

#[on_event("system-events", "*")]
async fn everything(_event: Event, _counter: State<Counter>) {}

#[on_event(topic = "task-events", event = "*", agent = "auditor")]
async fn every_task_event(_event: Event) {}

fn main() {
    let _ = (confirm_order, audit, invoice_paid, welcome, everything, every_task_event);
}

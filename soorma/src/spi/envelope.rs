//! What an envelope's names and ids may be: the one rule every platform applies when an
//! envelope is published and when one is received from outside (a NATS subject anyone with
//! credentials can publish on).
//!
//! Ids and names travel in every copy of an event, in its replies, its state keys and its
//! de-duplication ids, so each has a bound: an id or name of up to [`MAX_ID_LEN`] bytes without
//! control characters. The ids the SDK derives from an event's id (its reply's, its sub-tasks'
//! and their timers') add a few dozen bytes to it per delegation: the bound leaves room for
//! that, and an event whose id is within that room of the bound gets a derived event refused
//! (a dead letter with the reason, not a loop). Event types (and the reply event a request names) are also subject
//! tokens on NATS, so the embedded platform takes exactly what NATS can route.

use soorma_common::EventEnvelope;

use crate::error::{Error, Result};
use crate::spi::tenant::validate_tenant;

/// The longest id or name an envelope may carry (event id, correlation id, event type,
/// source, ...), in bytes.
pub const MAX_ID_LEN: usize = 1024;

/// Checks `envelope`'s tenant ([`validate_tenant`]), event type and reply event (dot-separated
/// tokens without spaces, `*` or `>`) and the length of every id and name (at most
/// [`MAX_ID_LEN`] bytes, no control characters, the event id not empty). Anything else is
/// [`Error::InvalidArgument`] naming the field.
///
/// ```
/// use soorma::{EventEnvelope, Topic};
/// use soorma::check_envelope;
///
/// let env = EventEnvelope::new("evt-1", "shop", Topic::BusinessFacts, "order.placed");
/// assert!(check_envelope(&env).is_ok());
/// let long = env.clone().with_correlation_id("x".repeat(10_000));
/// assert!(matches!(check_envelope(&long), Err(soorma::Error::InvalidArgument(_))));
/// let spaced = EventEnvelope::new("evt-2", "shop", Topic::BusinessFacts, "order placed");
/// assert!(check_envelope(&spaced).is_err());
/// ```
pub fn check_envelope(envelope: &EventEnvelope) -> Result<()> {
    validate_tenant(envelope.tenant())?;
    event_tokens(&envelope.event_type)?;
    if let Some(reply) = &envelope.response_event {
        event_tokens(reply).map_err(|e| field_error("response_event", &e.to_string()))?;
    }
    if envelope.id.is_empty() {
        return Err(Error::InvalidArgument(
            "an event's id must not be empty".into(),
        ));
    }
    let fields = [
        ("id", Some(&envelope.id)),
        ("source", Some(&envelope.source)),
        ("correlation_id", envelope.correlation_id.as_ref()),
        ("subject", envelope.subject.as_ref()),
        ("user_id", envelope.user_id.as_ref()),
        ("session_id", envelope.session_id.as_ref()),
        ("goal_id", envelope.goal_id.as_ref()),
        ("plan_id", envelope.plan_id.as_ref()),
        (
            "response_schema_name",
            envelope.response_schema_name.as_ref(),
        ),
        ("trace_id", envelope.trace_id.as_ref()),
        ("parent_event_id", envelope.parent_event_id.as_ref()),
        ("payload_schema_name", envelope.payload_schema_name.as_ref()),
        ("time", envelope.time.as_ref()),
        ("specversion", Some(&envelope.specversion)),
    ];
    for (name, value) in fields {
        if let Some(problem) = value.and_then(|v| id_problem(v)) {
            return Err(field_error(name, &problem));
        }
    }
    Ok(())
}

/// What is wrong with one of an envelope's ids or names, if anything: more than
/// [`MAX_ID_LEN`] bytes, or control characters.
pub(crate) fn id_problem(value: &str) -> Option<String> {
    let control = value.chars().any(char::is_control);
    (value.len() > MAX_ID_LEN || control).then(|| {
        format!(
            "{} bytes{}; an envelope's ids and names are at most {MAX_ID_LEN} bytes without control characters",
            value.len(),
            if control { " with control characters" } else { "" }
        )
    })
}

/// Checks that `event_type` can be the tail of a NATS subject: at most [`MAX_ID_LEN`] bytes of
/// dot-separated, non-empty tokens without whitespace, `*` or `>`.
pub(crate) fn event_tokens(event_type: &str) -> Result<&str> {
    let ok = !event_type.is_empty()
        && event_type.len() <= MAX_ID_LEN
        && event_type.split('.').all(|t| {
            !t.is_empty()
                && t.chars()
                    .all(|c| !c.is_whitespace() && !c.is_control() && c != '*' && c != '>')
        });
    if ok {
        Ok(event_type)
    } else {
        let shown: String = event_type.chars().take(64).collect();
        let more = if shown.len() < event_type.len() {
            "…"
        } else {
            ""
        };
        Err(Error::InvalidArgument(format!(
            "event type {shown:?}{more} cannot be a subject: use at most {MAX_ID_LEN} bytes of dot-separated tokens without spaces, `*` or `>`"
        )))
    }
}

fn field_error(field: &str, problem: &str) -> Error {
    Error::InvalidArgument(format!("the envelope's `{field}`: {problem}"))
}

#[cfg(test)]
mod tests {
    use soorma_common::Topic;

    use super::*;

    fn env() -> EventEnvelope {
        EventEnvelope::new("evt", "src", Topic::ActionRequests, "a.requested")
            .with_response_event("a.done")
    }

    #[test]
    fn every_id_and_name_is_bounded() {
        assert!(check_envelope(&env()).is_ok());
        let long = "x".repeat(MAX_ID_LEN + 1);
        let at_limit = "x".repeat(MAX_ID_LEN);
        type Setter = fn(&mut EventEnvelope, String);
        let setters: [(&str, Setter); 6] = [
            ("id", |e, v| e.id = v),
            ("source", |e, v| e.source = v),
            ("correlation_id", |e, v| e.correlation_id = Some(v)),
            ("user_id", |e, v| e.user_id = Some(v)),
            ("parent_event_id", |e, v| e.parent_event_id = Some(v)),
            ("trace_id", |e, v| e.trace_id = Some(v)),
        ];
        for (field, set) in setters {
            let mut ok = env();
            set(&mut ok, at_limit.clone());
            assert!(check_envelope(&ok).is_ok(), "{field} at the limit");
            let mut bad = env();
            set(&mut bad, long.clone());
            let err = check_envelope(&bad).unwrap_err().to_string();
            assert!(err.contains(field) && err.contains("1025 bytes"), "{err}");
            let mut control = env();
            set(&mut control, "a\nb".into());
            let err = check_envelope(&control).unwrap_err().to_string();
            assert!(err.contains("control characters"), "{err}");
        }
    }

    #[test]
    fn event_types_are_subject_tokens() {
        assert!(event_tokens("order.placed").is_ok());
        for bad in [
            "",
            "order placed",
            "order.*",
            "order.>",
            "order..placed",
            ".order",
            "a\u{7}",
        ] {
            assert!(event_tokens(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn types_tenants_and_empty_ids_are_checked() {
        let mut e = env();
        e.id = String::new();
        assert!(check_envelope(&e).is_err());
        let mut e = env();
        e.response_event = Some("a done".into());
        assert!(
            check_envelope(&e)
                .unwrap_err()
                .to_string()
                .contains("response_event")
        );
        let mut e = env();
        e.event_type = format!("a.{}", "b".repeat(MAX_ID_LEN));
        assert!(check_envelope(&e).is_err());
        let e = env().with_tenant_id("a.b");
        assert!(check_envelope(&e).is_err());
    }
}

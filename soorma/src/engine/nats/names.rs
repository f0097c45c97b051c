//! Subject, stream, consumer, bucket and key names.

use soorma_common::Topic;

use crate::error::Result;
use crate::spi::envelope::event_tokens;
use crate::spi::tenant::validate_tenant;

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// Checks a tenant id can be one subject token / key token (the one tenant rule,
/// [`validate_tenant`]).
pub(crate) fn tenant_token(tenant: &str) -> Result<&str> {
    validate_tenant(tenant)
}

/// `<prefix>.<tenant>.<topic>.<event.type>`
pub(crate) fn subject(
    prefix: &str,
    tenant: &str,
    topic: Topic,
    event_type: &str,
) -> Result<String> {
    Ok(format!(
        "{prefix}.{}.{topic}.{}",
        tenant_token(tenant)?,
        event_tokens(event_type)?
    ))
}

/// Whether `subject` is [`subject`]`(prefix, tenant, topic, event_type)` (without building it:
/// checked on every delivery).
pub(crate) fn is_subject(
    prefix: &str,
    subject: &str,
    tenant: &str,
    topic: Topic,
    event_type: &str,
) -> bool {
    let tail = subject
        .strip_prefix(prefix)
        .and_then(|s| s.strip_prefix('.'))
        .and_then(|s| s.strip_prefix(tenant))
        .and_then(|s| s.strip_prefix('.'))
        .and_then(|s| s.strip_prefix(topic.as_str()))
        .and_then(|s| s.strip_prefix('.'));
    tail == Some(event_type)
}

/// A subscription filter; `None` tenant = every tenant, `None` event = every event.
pub(crate) fn filter(
    prefix: &str,
    tenant: Option<&str>,
    topic: Topic,
    event_type: Option<&str>,
) -> Result<String> {
    let tenant = match tenant {
        Some(t) => tenant_token(t)?,
        None => "*",
    };
    let event = match event_type {
        Some(e) => event_tokens(e)?,
        None => ">",
    };
    Ok(format!("{prefix}.{tenant}.{topic}.{event}"))
}

/// `SOORMA_ACTION_REQUESTS`
pub(crate) fn stream_name(prefix: &str, topic: Topic) -> String {
    format!(
        "{prefix}_{}",
        topic.as_str().replace('-', "_").to_uppercase()
    )
}

/// The longest group part of a consumer name kept as it is.
const MAX_GROUP_IN_NAME: usize = 64;
/// Hex digits of a group's SHA-256 in its consumer name (128 bits).
const GROUP_HASH_HEX: usize = 32;

/// A durable consumer name for a consumer group on a topic (and tenant):
/// `<group>__<topic>[__<tenant>]`. A group that is not one token (`[-_A-Za-z0-9]`), holds
/// `__`, is over 64 bytes, or ends like a written hash (`-` and 32 hex digits) is written as
/// its first 64
/// characters with the others replaced by `_`, then `-` and 32 hex digits of its SHA-256: two
/// groups never share a consumer (`orders.v1` and `orders_v1` would steal each other's events),
/// short of a SHA-256 collision.
pub(crate) fn consumer_name(group: &str, topic: Topic, tenant: Option<&str>) -> String {
    debug_assert!(
        tenant.is_none_or(|t| validate_tenant(t).is_ok()),
        "checked by the subscription"
    );
    joined(&consumer_group_part(group), topic, tenant)
}

/// `<group>__<topic>[__<tenant>]`: a consumer name's parts.
fn joined(group: &str, topic: Topic, tenant: Option<&str>) -> String {
    match tenant {
        Some(t) => format!("{group}__{topic}__{t}"),
        None => format!("{group}__{topic}"),
    }
}

/// The name an older release gave the consumer of `group` on `topic` (each character outside
/// a token replaced by `_`), when it differs from [`consumer_name`]'s.
pub(crate) fn legacy_consumer_name(
    group: &str,
    topic: Topic,
    tenant: Option<&str>,
) -> Option<String> {
    let legacy = sanitized(&joined(group, topic, tenant));
    (legacy != consumer_name(group, topic, tenant)).then_some(legacy)
}

/// `name` with each character outside a token replaced by `_` (how an older release wrote a
/// group in its consumer's name).
pub(crate) fn sanitized(name: &str) -> String {
    name.chars()
        .map(|c| if is_token_char(c) { c } else { '_' })
        .collect()
}

/// Whether `group` ends like a written hash: `-` and [`GROUP_HASH_HEX`] lowercase hex digits.
fn looks_hashed(group: &str) -> bool {
    let Some(split) = group.len().checked_sub(GROUP_HASH_HEX + 1) else {
        return false;
    };
    let tail = &group.as_bytes()[split..];
    tail[0] == b'-'
        && tail[1..]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

fn consumer_group_part(group: &str) -> String {
    // `__` separates the name's parts: a group holding it could pass for another group's
    // name with a tenant.
    if group.len() <= MAX_GROUP_IN_NAME
        && group.chars().all(is_token_char)
        && !group.contains("__")
        && !looks_hashed(group)
    {
        return group.to_owned();
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(group.as_bytes());
    let shown: String = sanitized(group).chars().take(MAX_GROUP_IN_NAME).collect();
    let hash = crate::util::hex(&digest[..GROUP_HASH_HEX / 2]);
    format!("{shown}-{hash}")
}

/// A KV bucket name.
pub(crate) fn bucket_name(prefix: &str, bucket: &str) -> String {
    format!("{prefix}_{bucket}")
        .chars()
        .map(|c| if is_token_char(c) { c } else { '_' })
        .collect()
}

/// A KV key: `<tenant>.<key>`; keys outside `[-_A-Za-z0-9]` (or starting with `=`) are hex-encoded
/// behind a `=` so every key is one token and round-trips.
pub(crate) fn kv_key(tenant: &str, key: &str) -> Result<String> {
    let tenant = tenant_token(tenant)?;
    if !key.is_empty() && !key.starts_with('=') && key.chars().all(is_token_char) {
        Ok(format!("{tenant}.{key}"))
    } else {
        Ok(format!("{tenant}.={}", crate::util::hex(key.as_bytes())))
    }
}

/// The record key of a KV key within `tenant`, if it belongs to it.
pub(crate) fn kv_key_decode(tenant: &str, kv_key: &str) -> Option<String> {
    let rest = kv_key.strip_prefix(tenant)?.strip_prefix('.')?;
    match rest.strip_prefix('=') {
        None => Some(rest.to_owned()),
        Some(hex) => {
            let bytes: Option<Vec<u8>> = (0..hex.len())
                .step_by(2)
                .map(|i| {
                    hex.get(i..i + 2)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                })
                .collect();
            String::from_utf8(bytes?).ok()
        }
    }
}

/// A W3C `traceparent` for a 32-hex trace id (`None` for other trace ids).
pub(crate) fn traceparent(trace_id: &str, span_seed: &str) -> Option<String> {
    let valid = trace_id.len() == 32
        && trace_id.chars().all(|c| c.is_ascii_hexdigit())
        && trace_id.chars().any(|c| c != '0');
    if !valid {
        return None;
    }
    // A span id derived from the event id (16 hex digits, not all zero).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in span_seed.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    Some(format!(
        "00-{}-{:016x}-01",
        trace_id.to_ascii_lowercase(),
        h.max(1)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_and_filters() {
        assert_eq!(
            subject(
                "soorma",
                "acme",
                Topic::ActionRequests,
                "calculate.requested"
            )
            .unwrap(),
            "soorma.acme.action-requests.calculate.requested"
        );
        assert_eq!(
            filter("soorma", None, Topic::BusinessFacts, None).unwrap(),
            "soorma.*.business-facts.>"
        );
        assert!(subject("soorma", "a.b", Topic::ActionRequests, "x").is_err());
        assert!(subject("soorma", "a", Topic::ActionRequests, "x y").is_err());
        assert!(subject("soorma", "a", Topic::ActionRequests, "x..y").is_err());
        assert!(subject("soorma", "a", Topic::ActionRequests, "x.*").is_err());
        assert_eq!(
            stream_name("SOORMA", Topic::ActionRequests),
            "SOORMA_ACTION_REQUESTS"
        );
        assert_eq!(
            consumer_name("my_agent", Topic::ActionResults, Some("t1")),
            "my_agent__action-results__t1"
        );
    }

    #[test]
    fn consumer_names_never_collide_and_stay_valid() {
        let dotted = consumer_name("orders.v1", Topic::ActionRequests, None);
        let plain = consumer_name("orders_v1", Topic::ActionRequests, None);
        assert_ne!(dotted, plain);
        assert_eq!(plain, "orders_v1__action-requests");
        assert!(dotted.starts_with("orders_v1-"), "{dotted}");
        let long = "a".repeat(300);
        let longer = format!("{long}b");
        let (a, b) = (
            consumer_name(&long, Topic::ActionRequests, Some("acme")),
            consumer_name(&longer, Topic::ActionRequests, Some("acme")),
        );
        assert_ne!(a, b);
        for name in [
            &dotted,
            &a,
            &b,
            &consumer_name("ünï cödé", Topic::BusinessFacts, None),
        ] {
            assert!(name.len() < 160, "{name}");
            assert!(name.chars().all(is_token_char), "{name}");
        }
        // Stable across processes and releases: the name of an existing consumer.
        assert_eq!(
            dotted,
            "orders_v1-2c443d9ac404233a3be92ac497dceb7f__action-requests"
        );
        // A name written like another's hashed form is hashed too: no collision by choice.
        let lookalike = dotted.trim_end_matches("__action-requests");
        assert_ne!(
            consumer_name(lookalike, Topic::ActionRequests, None),
            dotted
        );
        // What an older release named them, for taking over their place in the stream.
        assert_eq!(
            legacy_consumer_name("orders.v1", Topic::ActionRequests, None).as_deref(),
            Some("orders_v1__action-requests")
        );
        assert_eq!(
            legacy_consumer_name("orders_v1", Topic::ActionRequests, None),
            None
        );
        // `__` is the parts' separator: group `a__business-facts` on its own is not group `a`
        // for tenant `business-facts`.
        assert_ne!(
            consumer_name("a__business-facts", Topic::BusinessFacts, None),
            consumer_name("a", Topic::BusinessFacts, Some("business-facts"))
        );
    }

    #[test]
    fn kv_keys_round_trip() {
        for key in ["abc-1_2", "with.dot", "=starts", "sp ace", "ünï"] {
            let k = kv_key("acme", key).unwrap();
            assert!(
                k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_=.".contains(c)),
                "{k}"
            );
            assert_eq!(k.matches('.').count(), 1, "{k}");
            assert_eq!(kv_key_decode("acme", &k).as_deref(), Some(key));
        }
        assert_eq!(kv_key_decode("other", "acme.x"), None);
    }

    #[test]
    fn traceparent_format() {
        let tp = traceparent("0123456789abcdef0123456789abcdef", "e1").unwrap();
        assert!(tp.starts_with("00-0123456789abcdef0123456789abcdef-") && tp.ends_with("-01"));
        assert_eq!(tp.len(), 55);
        assert!(traceparent("short", "e").is_none());
    }
}

//! Opening the streams and KV buckets the SDK uses: an existing one is adopted as it is (its
//! configuration is never rewritten), a missing one is created from the SDK's settings, and an
//! existing one the SDK cannot work with is an [`Error::Config`] naming it and the field.

use async_nats::jetstream::{self, ErrorCode, context, kv, stream};

use super::engine_error;
use crate::error::{BoxError, EngineErrorKind, Error, Result};

/// What makes an existing stream unusable: `Err(field and why)`.
pub(crate) type Check<'a> = &'a (dyn Fn(&stream::Config) -> std::result::Result<(), String> + Sync);

/// The stream `wanted.name`: adopted when it exists (after `check`), created from `wanted` when
/// it does not. Failures are `kind` engine errors, or configuration errors when the server
/// refuses the configuration (e.g. more replicas than servers, subjects another stream has).
pub(crate) async fn open_stream(
    js: &jetstream::Context,
    wanted: stream::Config,
    check: Check<'_>,
    kind: EngineErrorKind,
) -> Result<stream::Stream> {
    let name = wanted.name.clone();
    let what = format!("stream `{name}`");
    if let Some(s) = existing(js, &name, &what, check, kind).await? {
        return Ok(s);
    }
    match js.create_stream(wanted).await {
        Ok(s) => {
            tracing::info!(stream = %name, "created NATS stream");
            Ok(s)
        }
        Err(create) => {
            // Another process may have created it meanwhile.
            if let Ok(Some(s)) = existing(js, &name, &what, check, kind).await {
                return Ok(s);
            }
            Err(creation_error(&what, create, kind))
        }
    }
}

/// The KV bucket `wanted.bucket`, as [`open_stream`] opens streams; `check` sees the bucket's
/// stream configuration.
pub(crate) async fn open_bucket(
    js: &jetstream::Context,
    wanted: kv::Config,
    check: Check<'_>,
    kind: EngineErrorKind,
) -> Result<kv::Store> {
    let name = wanted.bucket.clone();
    let stream_name = format!("KV_{name}");
    let what = format!("KV bucket `{name}`");
    let get = || async {
        js.get_key_value(name.clone())
            .await
            .map_err(|e| engine_error(kind, format!("cannot open KV bucket `{name}`"), e))
    };
    if existing(js, &stream_name, &what, check, kind)
        .await?
        .is_some()
    {
        return get().await;
    }
    match js.create_key_value(wanted).await {
        Ok(s) => {
            tracing::info!(bucket = %name, "created NATS KV bucket");
            Ok(s)
        }
        Err(create) => {
            if let Ok(Some(_)) = existing(js, &stream_name, &what, check, kind).await {
                return get().await;
            }
            Err(creation_error(&what, create, kind))
        }
    }
}

/// The stream `name` (described as `what` in errors) if it exists and passes `check`.
async fn existing(
    js: &jetstream::Context,
    name: &str,
    what: &str,
    check: Check<'_>,
    kind: EngineErrorKind,
) -> Result<Option<stream::Stream>> {
    match js.get_stream(name).await {
        Ok(s) => {
            let config = &s.cached_info().config;
            check(config).map_err(|why| {
                Error::Config(format!(
                    "the existing NATS {what} cannot be used: {why}; change it, or delete it \
                     for soorma to create it"
                ))
            })?;
            tracing::debug!(
                replicas = config.num_replicas,
                "adopted the existing NATS {what}"
            );
            Ok(Some(s))
        }
        Err(e) => match e.kind() {
            context::GetStreamErrorKind::JetStream(err)
                if err.error_code() == ErrorCode::STREAM_NOT_FOUND =>
            {
                Ok(None)
            }
            _ => Err(engine_error(
                kind,
                format!("cannot read the NATS {what}"),
                e,
            )),
        },
    }
}

/// The server refusing a configuration (a JetStream API error: more replicas than servers,
/// subjects another stream has) is a configuration error; anything else (timeouts, a cluster
/// without a leader or short of servers for now: 503) an engine error to retry.
fn creation_error(what: &str, e: impl Into<BoxError>, kind: EngineErrorKind) -> Error {
    let e = e.into();
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(&*e);
    while let Some(err) = current {
        if let Some(create) = err.downcast_ref::<context::CreateStreamError>()
            && let context::CreateStreamErrorKind::JetStream(js) = create.kind()
            && js.code() != 503
        {
            return Error::Config(format!("cannot create the NATS {what}: {js}"));
        }
        current = err.source();
    }
    engine_error(kind, format!("cannot create the NATS {what}"), e)
}

/// Whether the subject filter `pattern` matches every subject `filter` matches.
pub(crate) fn covers(pattern: &str, filter: &str) -> bool {
    let mut p = pattern.split('.');
    let mut f = filter.split('.');
    loop {
        match (p.next(), f.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(t)) if t != ">" => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// What the SDK needs of any stream it publishes to and consumes from: it keeps `subject`,
/// acknowledges publishes and is not sealed.
pub(crate) fn usable_stream(
    config: &stream::Config,
    subject: &str,
) -> std::result::Result<(), String> {
    if !config.subjects.iter().any(|s| covers(s, subject)) {
        return Err(format!(
            "field `subjects` ({:?}) does not include `{subject}`",
            config.subjects
        ));
    }
    if config.no_ack {
        return Err("field `no_ack` is true: soorma needs publish acknowledgements".into());
    }
    if config.sealed {
        return Err("field `sealed` is true: soorma writes to it".into());
    }
    Ok(())
}

/// Room beyond a batch's envelopes an event stream's `max_msg_size` must allow (its headers).
const BATCH_HEADROOM: usize = 16 * 1024;

/// What the SDK needs of an event stream: [`usable_stream`]; not a work queue (every consumer
/// group gets every event); no rollups a publisher could purge it with (any tenant that may
/// publish on one of its subjects); a de-duplication window longer than a publish is retried
/// through a failover (`retried_for`, plus its last acknowledgement's timeout), so a retried
/// publish is stored once; messages as large as a batch (`batch_bytes` of envelopes).
pub(crate) fn usable_event_stream(
    config: &stream::Config,
    subject: &str,
    retried_for: std::time::Duration,
    batch_bytes: usize,
) -> std::result::Result<(), String> {
    usable_stream(config, subject)?;
    if config.retention == stream::RetentionPolicy::WorkQueue {
        return Err(
            "field `retention` is `workqueue`: soorma's consumer groups each read every event; \
             use `limits` or `interest`"
                .into(),
        );
    }
    if config.allow_rollup && !config.deny_purge {
        return Err(
            "field `allow_rollup_hdrs` is true (and `deny_purge` false): a publisher on any of \
             its subjects, of any tenant, could purge every tenant's events with a \
             `Nats-Rollup` header"
                .into(),
        );
    }
    let window = retried_for + super::DUPLICATE_WINDOW_MARGIN;
    if config.duplicate_window < window {
        return Err(format!(
            "field `duplicate_window` ({:?}) is shorter than {window:?}: a publish is retried \
             through a failover for {retried_for:?} (SOORMA_NATS_FAILOVER_RETRY), and its last \
             acknowledgement may take {:?} more; a retried publish could be stored twice",
            config.duplicate_window,
            super::DUPLICATE_WINDOW_MARGIN
        ));
    }
    let smallest = batch_bytes + BATCH_HEADROOM;
    if usize::try_from(config.max_message_size).is_ok_and(|max| max < smallest) {
        return Err(format!(
            "field `max_msg_size` ({}) is below {smallest} bytes: soorma stores envelopes in \
             batches of up to {batch_bytes} bytes",
            config.max_message_size
        ));
    }
    Ok(())
}

/// Why an existing dead-letter stream keeps dead letters without bound or refuses new ones
/// when full (`None`: it is bounded and drops the oldest). Adopted all the same (the operator
/// chose it), with a warning: a flood of bad input fills such a stream's disk, or, once it is
/// full, the newest dead letters are only logged.
pub(crate) fn unbounded_dead_letters(config: &stream::Config) -> Option<String> {
    if config.max_bytes <= 0 && config.max_messages <= 0 {
        return Some(
            "has neither `max_bytes` nor `max_messages`: a flood of bad input grows it without \
             bound until its `max_age` (soorma creates it with SOORMA_NATS_DLQ_MAX_BYTES)"
                .into(),
        );
    }
    if config.discard == stream::DiscardPolicy::New {
        return Some(
            "has `discard: new`: once full it refuses new dead letters, which are then only \
             logged (soorma creates it with `discard: old`)"
                .into(),
        );
    }
    None
}

/// What the SDK needs of a KV bucket: it is a KV bucket (keeps at least the last value of each
/// key), allows purges (rollups) and is not sealed.
pub(crate) fn usable_bucket(config: &stream::Config) -> std::result::Result<(), String> {
    if config.max_messages_per_subject < 1 {
        return Err(format!(
            "field `history` (max_msgs_per_subject) is {}: not a KV bucket",
            config.max_messages_per_subject
        ));
    }
    if !config.allow_rollup {
        return Err("field `allow_rollup_hdrs` is false: soorma purges keys".into());
    }
    if config.sealed {
        return Err("field `sealed` is true: soorma writes to it".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn subject_filters_cover_what_they_match() {
        assert!(covers(
            "soorma.*.action-requests.>",
            "soorma.*.action-requests.>"
        ));
        assert!(covers("soorma.>", "soorma.*.action-requests.>"));
        assert!(covers(">", "soorma.*.x.>"));
        assert!(covers("soorma.*.x.*", "soorma.acme.x.y"));
        assert!(!covers("soorma.*.x.*", "soorma.*.x.>"));
        assert!(!covers("soorma.acme.x.>", "soorma.*.x.>"));
        assert!(!covers("soorma.*.other.>", "soorma.*.x.>"));
        assert!(!covers("soorma", "soorma.*.x.>"));
        assert!(!covers("soorma.*.x.>", "soorma.*.x"));
    }

    #[test]
    fn unusable_streams_and_buckets_name_the_field() {
        let subject = "soorma.*.action-requests.>";
        let mut config = stream::Config {
            name: "SOORMA_ACTION_REQUESTS".into(),
            subjects: vec![subject.into()],
            duplicate_window: Duration::from_secs(120),
            max_message_size: -1,
            ..Default::default()
        };
        let retried = Duration::from_secs(15);
        assert_eq!(
            usable_event_stream(&config, subject, retried, 256 * 1024),
            Ok(())
        );
        config.retention = stream::RetentionPolicy::WorkQueue;
        assert!(
            usable_event_stream(&config, subject, retried, 256 * 1024)
                .unwrap_err()
                .contains("`retention`")
        );
        config.retention = stream::RetentionPolicy::Interest;
        config.allow_rollup = true;
        assert!(
            usable_event_stream(&config, subject, retried, 256 * 1024)
                .unwrap_err()
                .contains("`allow_rollup_hdrs`")
        );
        config.deny_purge = true;
        assert_eq!(
            usable_event_stream(&config, subject, retried, 256 * 1024),
            Ok(())
        );
        config.duplicate_window = Duration::from_secs(10);
        assert!(
            usable_event_stream(&config, subject, retried, 256 * 1024)
                .unwrap_err()
                .contains("`duplicate_window`")
        );
        config.duplicate_window = retried + Duration::from_secs(19);
        assert!(
            usable_event_stream(&config, subject, retried, 256 * 1024)
                .unwrap_err()
                .contains("`duplicate_window`"),
            "the last retry's acknowledgement needs room too"
        );
        config.duplicate_window = retried + Duration::from_secs(20);
        assert_eq!(
            usable_event_stream(&config, subject, retried, 100 * 1024),
            Ok(()),
            "a small server's batches"
        );
        config.max_message_size = 200 * 1024;
        assert_eq!(
            usable_event_stream(&config, subject, retried, 128 * 1024),
            Ok(())
        );
        config.max_message_size = 64 * 1024;
        assert!(
            usable_event_stream(&config, subject, retried, 256 * 1024)
                .unwrap_err()
                .contains("`max_msg_size`")
        );
        config.max_message_size = 1 << 20;
        assert_eq!(
            usable_event_stream(&config, subject, retried, 256 * 1024),
            Ok(())
        );
        config.subjects = vec!["soorma.acme.action-requests.>".into()];
        let err = usable_event_stream(&config, subject, retried, 256 * 1024).unwrap_err();
        assert!(err.contains("`subjects`") && err.contains(subject), "{err}");
        config.subjects = vec!["soorma.>".into()];
        config.no_ack = true;
        assert!(
            usable_stream(&config, subject)
                .unwrap_err()
                .contains("`no_ack`")
        );

        let mut bucket = stream::Config {
            max_messages_per_subject: 5,
            allow_rollup: true,
            ..Default::default()
        };
        assert_eq!(usable_bucket(&bucket), Ok(()));
        bucket.allow_rollup = false;
        assert!(usable_bucket(&bucket).unwrap_err().contains("allow_rollup"));
        bucket.allow_rollup = true;
        bucket.max_messages_per_subject = 0;
        assert!(usable_bucket(&bucket).unwrap_err().contains("`history`"));
    }

    #[test]
    fn unbounded_dead_letter_streams_are_told_apart() {
        let mut dlq = stream::Config {
            max_bytes: 1 << 20,
            discard: stream::DiscardPolicy::Old,
            ..Default::default()
        };
        assert_eq!(unbounded_dead_letters(&dlq), None);
        dlq.max_bytes = -1;
        assert!(
            unbounded_dead_letters(&dlq)
                .unwrap()
                .contains("`max_bytes`")
        );
        dlq.max_age = std::time::Duration::from_secs(86_400);
        assert!(
            unbounded_dead_letters(&dlq).is_some(),
            "an age alone bounds no flood"
        );
        dlq.max_messages = 100_000;
        assert_eq!(unbounded_dead_letters(&dlq), None);
        dlq.discard = stream::DiscardPolicy::New;
        assert!(
            unbounded_dead_letters(&dlq)
                .unwrap()
                .contains("discard: new")
        );
    }
}

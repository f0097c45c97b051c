//! Typed fan-in: an `#[on_fan_in(A, B, ..)]` handler gets the task and the replies of a
//! [`TaskContext::fan_out`] of exactly those request types, once, when the last reply is in.
//!
//! Underneath, each reply event gets one router handler: it records the result in its task
//! (the revision-checked fan-in), and the one result that completes the group calls the
//! fan-in handler whose request types made the group.

use std::collections::BTreeSet;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use soorma_common::{SubTaskInfo, SubTaskStatus, Topic};

use super::WorkerWiring;
use super::result::ResultContext;
use super::task::{Delegated, TaskContext, TaskState};
use crate::error::{Error, Result};
use crate::platform::timers;
use crate::protocol::decode_payload;
use crate::protocol::request::{Request, RequestSet};
use crate::runtime::extract::HandlerInput;
use crate::runtime::handler::{
    Advertised, ErasedFn, Failure, Handler, HandlerFnWith, HandlerKind, HandlerOutcome,
    extractor_failure, handler_failure, schema_of,
};
use crate::util::BoxFuture;

/// A sub-task that failed: what a fan-in handler gets in place of a reply it takes as
/// `Result<T, SubTaskFailed>`. A reply taken as plain `T` fails the task instead.
///
/// ```
/// use soorma::prelude::*;
/// use soorma::SubTaskFailed;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize, schemars::JsonSchema)] struct Research;
/// # impl Request for Research { const EVENT: &'static str = "research.requested"; type Reply = String; }
///
/// // Sentiment is optional: a failed analysis does not fail the report.
/// async fn collect(
///     _task: TaskContext<Research>,
///     (summary, sentiment): (String, Result<f64, SubTaskFailed>),
/// ) -> soorma::Result<String> {
///     Ok(match sentiment {
///         Ok(score) => format!("{summary} ({score:+.1})"),
///         Err(failed) => format!("{summary} (no sentiment: {})", failed.error),
///     })
/// }
/// # let _ = collect;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubTaskFailed {
    /// The sub-task's id.
    pub sub_task_id: String,
    /// The request event of the sub-task.
    pub event: String,
    /// The error its consumer replied with.
    pub error: String,
}

impl fmt::Display for SubTaskFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sub-task `{}` (`{}`) failed: {}",
            self.sub_task_id, self.event, self.error
        )
    }
}

impl std::error::Error for SubTaskFailed {}

/// How a fan-in handler takes the reply of one request: as the reply type `V` (a failed
/// sub-task fails the task), or as `Result<V, SubTaskFailed>` (a failure is the handler's to
/// handle).
#[diagnostic::on_unimplemented(
    message = "a fan-in handler cannot take `{Self}` for a reply of type `{V}`",
    note = "take each reply as the request's reply type (`{V}`), or as `Result<{V}, SubTaskFailed>` to handle a failed sub-task"
)]
pub trait FromReply<V>: Sized + Send + 'static {
    /// The value for the sub-task `member`.
    #[doc(hidden)]
    fn from_reply(member: &SubTaskInfo) -> Result<Self>;
}

fn failure_of(member: &SubTaskInfo) -> Option<SubTaskFailed> {
    (member.status == SubTaskStatus::Failed).then(|| SubTaskFailed {
        sub_task_id: member.sub_task_id.clone(),
        event: member.event_type.clone(),
        error: member.error.clone().unwrap_or_default(),
    })
}

fn decode_reply<V: DeserializeOwned>(member: &SubTaskInfo) -> Result<V> {
    decode_payload(
        &format!("reply to `{}`", member.event_type),
        member.result.as_ref().unwrap_or(&Value::Null),
    )
}

impl<V: DeserializeOwned + Send + 'static> FromReply<V> for V {
    fn from_reply(member: &SubTaskInfo) -> Result<Self> {
        match failure_of(member) {
            Some(failed) => Err(Error::Handler(failed.to_string())),
            None => decode_reply(member),
        }
    }
}

impl<V: DeserializeOwned + Send + 'static> FromReply<V> for std::result::Result<V, SubTaskFailed> {
    fn from_reply(member: &SubTaskInfo) -> Result<Self> {
        match failure_of(member) {
            Some(failed) => Ok(Err(failed)),
            None => decode_reply(member).map(Ok),
        }
    }
}

/// What a fan-in handler takes for the replies of the request set `Q`: for one request, one
/// [`FromReply`] value; for a tuple of requests, a tuple of them, in order.
#[diagnostic::on_unimplemented(
    message = "a fan-in handler of `{Q}` cannot take `{Self}` for its replies",
    note = "take the replies in the order of the requests: one request's reply type, a tuple of reply types, or for a batch (`Vec<R>`) a `Vec` of them (each may be `Result<T, SubTaskFailed>`)"
)]
pub trait FromReplies<Q: RequestSet>: Sized + Send + 'static {
    /// The value for the group's members (in delegation order).
    #[doc(hidden)]
    fn from_replies(members: &[SubTaskInfo]) -> Result<Self>;
}

fn member(members: &[SubTaskInfo], i: usize) -> Result<&SubTaskInfo> {
    members.get(i).ok_or_else(|| {
        Error::Handler(format!(
            "the fan-in group has {} replies, the handler takes more",
            members.len()
        ))
    })
}

impl<R: Request, P: FromReply<R::Reply>> FromReplies<R> for P {
    fn from_replies(members: &[SubTaskInfo]) -> Result<Self> {
        P::from_reply(member(members, 0)?)
    }
}

/// The replies of a batch (`Vec<R>`), in the order of its requests.
impl<R: Request, P: FromReply<R::Reply>> FromReplies<Vec<R>> for Vec<P> {
    fn from_replies(members: &[SubTaskInfo]) -> Result<Self> {
        members.iter().map(P::from_reply).collect()
    }
}

macro_rules! from_replies_tuple {
    ($(($r:ident, $p:ident, $i:tt)),+) => {
        impl<$($r: Request,)+ $($p: FromReply<$r::Reply>,)+> FromReplies<($($r,)+)> for ($($p,)+) {
            fn from_replies(members: &[SubTaskInfo]) -> Result<Self> {
                Ok(($($p::from_reply(member(members, $i)?)?,)+))
            }
        }
    };
}

from_replies_tuple!((A, PA, 0));
from_replies_tuple!((A, PA, 0), (B, PB, 1));
from_replies_tuple!((A, PA, 0), (B, PB, 1), (C, PC, 2));
from_replies_tuple!((A, PA, 0), (B, PB, 1), (C, PC, 2), (D, PD, 3));
from_replies_tuple!((A, PA, 0), (B, PB, 1), (C, PC, 2), (D, PD, 3), (E, PE, 4));
from_replies_tuple!(
    (A, PA, 0),
    (B, PB, 1),
    (C, PC, 2),
    (D, PD, 3),
    (E, PE, 4),
    (F, PF, 5)
);
from_replies_tuple!(
    (A, PA, 0),
    (B, PB, 1),
    (C, PC, 2),
    (D, PD, 3),
    (E, PE, 4),
    (F, PF, 5),
    (G, PG, 6)
);
from_replies_tuple!(
    (A, PA, 0),
    (B, PB, 1),
    (C, PC, 2),
    (D, PD, 3),
    (E, PE, 4),
    (F, PF, 5),
    (G, PG, 6),
    (H, PH, 7)
);

/// What a fan-in handler does with the task: complete it with the value returned (the
/// task's reply type), or leave it running after delegating more (`Result<Delegated, E>`).
#[diagnostic::on_unimplemented(
    message = "a fan-in handler of a task replying `{R}` cannot return `{Self}`",
    note = "return `Result<{R}, E>` to complete the task with the value, or `Result<Delegated, E>` after delegating more (`task.fan_out(..).await`)"
)]
pub trait FanInOutput<R>: Send + 'static {
    /// The completion value, `None` to leave the task running, or the failure.
    #[doc(hidden)]
    fn into_completion(self) -> std::result::Result<Option<Value>, Failure>;
}

impl<R, E> FanInOutput<R> for std::result::Result<R, E>
where
    R: Serialize + Send + 'static,
    E: Into<crate::error::BoxError> + Send + 'static,
{
    fn into_completion(self) -> std::result::Result<Option<Value>, Failure> {
        let value = self.map_err(handler_failure)?;
        serde_json::to_value(value)
            .map(Some)
            .map_err(|e| Failure::Handler {
                message: format!("could not serialize the task's result: {e}"),
                retryable: false,
            })
    }
}

impl<R, E> FanInOutput<R> for std::result::Result<Delegated, E>
where
    E: Into<crate::error::BoxError> + Send + 'static,
{
    fn into_completion(self) -> std::result::Result<Option<Value>, Failure> {
        self.map(|_| None).map_err(handler_failure)
    }
}

/// Calls one fan-in handler with a restored task and its group's members.
type FanInCall = Arc<
    dyn Fn(
            TaskContext<Value>,
            Arc<Vec<SubTaskInfo>>,
            HandlerInput,
        ) -> BoxFuture<'static, HandlerOutcome>
        + Send
        + Sync,
>;

/// A fan-in handler, as its worker's assembly sees it.
pub(crate) struct FanInSpec {
    /// The request events of its fan-out, comma-separated ([`RequestSet::key`]).
    pub(crate) key: String,
    /// The reply events it waits for.
    pub(crate) reply_events: Vec<String>,
    /// For problems and logs.
    pub(crate) label: String,
    call: FanInCall,
}

/// Builds a fan-in handler for the request set `Q`: [`Handler::fan_in`].
#[derive(Debug)]
#[must_use = "call `.handle(f)` to build the handler"]
pub struct FanInHandler<Q> {
    requests: PhantomData<fn() -> Q>,
}

impl Handler {
    /// A fan-in handler for the replies of a [`TaskContext::fan_out`] of the request set `Q`
    /// (one request type, or a tuple of them, in order). `.handle(f)` takes an async fn of the
    /// task and the replies that returns the task's reply (which completes the task) or
    /// [`Delegated`] after delegating more. It runs once per fan-out, when the last reply is
    /// recorded.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use soorma::prelude::*;
    ///
    /// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    /// struct Search { q: String }
    /// impl Request for Search { const EVENT: &'static str = "search.requested"; type Reply = Vec<String>; }
    ///
    /// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    /// struct Research { topic: String }
    /// impl Request for Research { const EVENT: &'static str = "research.requested"; type Reply = usize; }
    ///
    /// async fn count(_task: TaskContext<Research>, hits: Vec<String>) -> soorma::Result<usize> {
    ///     Ok(hits.len())
    /// }
    ///
    /// let h = Handler::fan_in::<Search>().handle(count);
    /// assert_eq!(h.kind(), soorma::HandlerKind::FanIn);
    /// ```
    pub fn fan_in<Q: RequestSet>() -> FanInHandler<Q> {
        FanInHandler {
            requests: PhantomData,
        }
    }
}

impl<Q: RequestSet> FanInHandler<Q> {
    /// The handler calling `handler` with the task and the replies.
    pub fn handle<H, T, S, P, Args>(self, handler: H) -> Handler
    where
        H: HandlerFnWith<TaskContext<T, S>, P, Args>,
        H::Output: FanInOutput<T::Reply>,
        T: Request,
        S: TaskState,
        P: FromReplies<Q>,
    {
        let key = Q::key();
        let reply_events: Vec<String> = Q::reply_events()
            .into_iter()
            .map(std::borrow::Cow::into_owned)
            .collect();
        let call: FanInCall = Arc::new(move |task, members, input| {
            let handler = handler.clone();
            Box::pin(async move {
                let mut task = task
                    .into_typed::<T>()
                    .and_then(TaskContext::with_state::<S>)
                    .map_err(Failure::Decode)?;
                let replies = match P::from_replies(&members) {
                    Ok(replies) => replies,
                    Err(e) => {
                        // A failed sub-task the handler does not take as a `Result`, or a
                        // reply of the wrong shape: the task fails, naming it.
                        fail(&mut task, e.to_string()).await?;
                        return Ok(None);
                    }
                };
                let (tenant, id) = (task.tenant().to_owned(), task.task_id().to_owned());
                let fut = handler
                    .call(task, replies, &input)
                    .map_err(extractor_failure)?;
                match fut.await.into_completion() {
                    Ok(Some(value)) => {
                        // The handler took the task; complete it as stored now.
                        let mut done = TaskContext::load(&input, &tenant, &id)
                            .await
                            .map_err(retryable)?;
                        done.complete(value).await.map_err(retryable)?;
                        tracing::debug!(task_id = %id, "fan-in completed the task");
                        Ok(None)
                    }
                    Ok(None) => Ok(None),
                    Err(failure) => Err(failure),
                }
            })
        });
        let spec = FanInSpec {
            label: format!("#[on_fan_in({})]", key.replace(',', ", ")),
            key,
            reply_events,
            call,
        };
        let first = spec.reply_events.first().cloned().unwrap_or_default();
        let not_dispatched: ErasedFn = Arc::new(|_| {
            Box::pin(async {
                Err(Failure::Handler {
                    message: "a fan-in handler is called through its worker's router".into(),
                    retryable: false,
                })
            })
        });
        let mut h = Handler::new(
            HandlerKind::FanIn,
            Topic::ActionResults,
            first,
            schema_of::<Value>,
            H::checks(),
            not_dispatched,
        );
        h.advertised = Advertised::Hidden;
        h.assemble = Some(super::assemble_worker);
        h.on_start = Some(timers::ensure_running);
        h.layer = Some(Arc::new(spec));
        h
    }
}

fn retryable(e: Error) -> Failure {
    Failure::Handler {
        retryable: e.is_retryable(),
        message: e.to_string(),
    }
}

async fn fail<T, S: TaskState>(task: &mut TaskContext<T, S>, error: String) -> HandlerOutcome {
    tracing::warn!(task_id = %task.task_id(), %error, "fan-in failed the task");
    task.fail(error).await.map_err(retryable)?;
    Ok(None)
}

/// The worker's fan-in handlers, taken out of its handler list and replaced by one router per
/// reply event.
pub(crate) fn assemble(
    handlers: &mut Vec<Handler>,
    wiring: &mut WorkerWiring,
    problems: &mut Vec<String>,
) {
    let mut specs: Vec<Arc<FanInSpec>> = Vec::new();
    let mut labels: Vec<String> = Vec::new();
    handlers.retain(|h| {
        if h.kind != HandlerKind::FanIn {
            return true;
        }
        if let Some(spec) = h.layer.clone().and_then(|l| l.downcast::<FanInSpec>().ok()) {
            labels.push(h.label());
            specs.push(spec);
        }
        false
    });
    for (i, spec) in specs.iter().enumerate() {
        if let Some(j) = specs[..i].iter().position(|s| s.key == spec.key) {
            problems.push(format!(
                "{} and {} both take the replies of `{}`; one fan-in handler per fan-out",
                labels[j], labels[i], spec.key
            ));
        }
    }
    let events: BTreeSet<String> = specs
        .iter()
        .flat_map(|s| s.reply_events.iter().cloned())
        .collect();
    for event in &events {
        if wiring.results.contains(event) {
            problems.push(format!(
                "`{event}` is handled by an `#[on_result]` handler and is also a reply a fan-in waits for; a reply event has one handler"
            ));
        }
    }
    let specs = Arc::new(specs);
    for event in events {
        handlers.push(router(event, specs.clone()));
    }
    wiring.fan_ins.extend(specs.iter().map(|s| s.key.clone()));
}

/// The handler of one reply event of the worker's fan-ins.
fn router(event: String, specs: Arc<Vec<Arc<FanInSpec>>>) -> Handler {
    let requests: Vec<String> = specs
        .iter()
        .filter(|s| s.reply_events.contains(&event))
        .flat_map(|s| s.key.split(',').map(str::to_owned))
        .collect();
    let call: ErasedFn = Arc::new(move |input: HandlerInput| {
        let specs = specs.clone();
        Box::pin(route(input, specs))
    });
    let mut h = Handler::new(
        HandlerKind::Result,
        Topic::ActionResults,
        event,
        schema_of::<Value>,
        Vec::new(),
        call,
    );
    h.description = Some("A reply a typed fan-in waits for.".into());
    h.on_start = Some(timers::ensure_running);
    h.on_failure = Some(fail_fan_in);
    h.requests = requests;
    h
}

/// A fan-in that fails for good (it panicked, or failed retryably on every delivery) fails its
/// task, once, when the failed result is the one whose handler runs the fan-in; any other
/// result's failure is dead-lettered (a result cannot fail a task it does not complete).
fn fail_fan_in(input: &HandlerInput, error: String) -> BoxFuture<'_, Result<bool>> {
    Box::pin(async move {
        let Ok(result) = ResultContext::<Value>::decode(input) else {
            return Ok(false);
        };
        let Some(mut task) = result.parent_if_completed_by_this().await? else {
            return Ok(false);
        };
        if task.status().is_terminal() {
            // Ended already (by this policy on an earlier delivery, or otherwise).
            task.resend_owed_reply().await?;
            return Ok(true);
        }
        tracing::warn!(task_id = %task.task_id(), %error, "fan-in failed for good; failing the task");
        task.fail(format!("the fan-in failed: {error}")).await?;
        Ok(true)
    })
}

async fn route(input: HandlerInput, specs: Arc<Vec<Arc<FanInSpec>>>) -> HandlerOutcome {
    let result = ResultContext::<Value>::decode(&input).map_err(Failure::Decode)?;
    let recorded = result.record().await.map_err(retryable)?;
    let stored = recorded.task;
    let Some(group) = result
        .group_id()
        .and_then(|g| stored.value.groups.get(g))
        .cloned()
    else {
        return Ok(None);
    };
    // The result that completed the group runs the fan-in; a redelivery of that result, while
    // its task is still running, runs it again (its first run was cut short). Another result's
    // redelivery does not: the fan-in would run twice, delegating its next stage again.
    let rerun = input.attempt > 1 && recorded.completes && !stored.value.status.is_terminal();
    if input.attempt > 1 && stored.value.status.is_terminal() && !stored.value.reply_sent {
        // A redelivery of the result whose fan-in ended the task, cut short before the reply
        // was known to be out: reply again (no other result replies for it).
        let stored = Arc::unwrap_or_clone(stored);
        let mut task = TaskContext::restored(
            stored.value,
            stored.revision,
            input.envelope.clone(),
            input.runtime.clone(),
        );
        task.resend_owed_reply().await.map_err(retryable)?;
        return Ok(None);
    }
    if !(recorded.completed_now || rerun) {
        // Every other result stops here, without a copy of the task (see `Marked::task`).
        return Ok(None);
    }
    let stored = Arc::unwrap_or_clone(stored);
    let task = TaskContext::restored(
        stored.value,
        stored.revision,
        input.envelope.clone(),
        input.runtime.clone(),
    );
    let Some(key) = group.fan_in.as_deref() else {
        tracing::warn!(task_id = %task.task_id(), group = %group.group_id, "a group not made by a typed fan-out got a reply a fan-in waits for; ignored");
        return Ok(None);
    };
    let Some(spec) = specs.iter().find(|s| s.key == key) else {
        let mut task = task;
        let reason = format!("no `#[on_fan_in]` handler takes the replies of `{key}`");
        return fail(&mut task, reason).await;
    };
    let members = task
        .group_results(Some(&group.group_id))
        .await
        .map_err(retryable)?
        .unwrap_or_default();
    tracing::debug!(task_id = %task.task_id(), fan_in = %spec.label, "running the fan-in");
    let (tenant, id) = (task.tenant().to_owned(), task.task_id().to_owned());
    match (spec.call)(task, Arc::new(members), input.clone()).await {
        // The result was decoded above: what does not decode here is the stored task (its
        // request or state after a change of types), which no redelivery mends.
        Err(Failure::Decode(e)) => {
            let mut task = TaskContext::load(&input, &tenant, &id)
                .await
                .map_err(retryable)?;
            fail(&mut task, format!("the fan-in cannot read its task: {e}")).await
        }
        Err(Failure::Handler {
            message,
            retryable: false,
        }) => {
            // A fan-in that fails for good fails its task (a retryable failure is redelivered
            // and runs the fan-in again).
            let mut task = TaskContext::load(&input, &tenant, &id)
                .await
                .map_err(retryable)?;
            fail(&mut task, message).await
        }
        other => other,
    }
}

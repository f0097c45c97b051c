//! The JSON-RPC methods: authentication, dispatch (single requests and batches), and one
//! handler per A2A method. Every handler acts for the caller's [`Owner`]: it sees only the
//! tasks that owner started.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use soorma_common::a2a::{
    Message, SendMessageRequest, SendMessageResponse, StreamResponse, Task, TaskIdParams,
    TaskState, TaskStatus,
};
use tokio::sync::broadcast;
use tracing::Instrument;

use super::auth::{Admitted, Caller, Owner, unauthorized};
use super::rpc::{self, RpcError, RpcRequest};
use super::skills;
use super::stream::{StreamSlot, stream};
use super::tasks::{ListQuery, Outcome};
use super::v0_3;
use super::{GatewayState, json_response};
use crate::error::Error;
use crate::spi::envelope::id_problem;
use crate::util::{new_id, now_rfc3339};

/// The most requests one JSON-RPC batch may hold.
pub(crate) const MAX_BATCH: usize = 100;

fn rpc_reply(id: &Value, result: std::result::Result<Value, RpcError>) -> Response {
    let body = match result {
        Ok(value) => rpc::success(id, value),
        Err(e) => rpc::failure(id, &e),
    };
    json_response(StatusCode::OK, &body)
}

fn params<T: serde::de::DeserializeOwned>(params: Value) -> std::result::Result<T, RpcError> {
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        let description = e.into_inner().to_string();
        RpcError::invalid_params(format!("at `{path}`: {description}")).with_data(json!([{
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": [{"field": path, "description": description}],
        }]))
    })
}

/// The owner a request acts for: the caller's tenant, else the `tenant` its params name.
fn owner(caller: Option<&Caller>, params: &Value) -> std::result::Result<Owner, RpcError> {
    let tenant = params.get("tenant").and_then(Value::as_str);
    Owner::resolve(caller, tenant).map_err(RpcError::invalid_params)
}

/// A method's answer: a JSON-RPC result or error, or a stream of them.
enum Answer {
    Json(std::result::Result<Value, RpcError>),
    /// The task, its updates, whether to render them for v0.3, and the tenant's place for
    /// one more stream.
    Stream(
        Box<Task>,
        broadcast::Receiver<StreamResponse>,
        bool,
        StreamSlot,
    ),
}

pub(super) async fn rpc(
    state: Arc<GatewayState>,
    agent: String,
    admitted: Option<Admitted>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // Credentials were checked before the body was read ([`super::auth::admit`]); a call
    // without them here is refused all the same.
    let caller = match (&state.gateway.auth, admitted) {
        (None, _) => None,
        (Some(_), Some(Admitted(caller))) => Some(caller),
        (Some(auth), None) => return unauthorized(auth, &format!("a call to `{agent}`")),
    };
    if !state.serves(&agent) {
        return json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": format!("no agent `{agent}` behind this gateway")}),
        );
    }
    let version = headers
        .get("A2A-Version")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let who = Call {
        caller: caller.as_ref(),
        version,
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return rpc_reply(&Value::Null, Err(RpcError::parse(e))),
    };
    // Parsed: the body's bytes go back to the server's budget
    // (`HttpConfig::max_buffered_body_bytes`) before the call waits for its agent.
    drop(body);
    let Value::Array(batch) = value else {
        let request = match RpcRequest::from_value(value) {
            Ok(r) => r,
            Err((id, e)) => return rpc_reply(&id, Err(e)),
        };
        let id = request.id.clone();
        return match call(&state, &agent, &who, request).await {
            Answer::Json(result) => rpc_reply(&id, result),
            Answer::Stream(task, rx, v0_3, slot) => {
                stream(id, *task, rx, v0_3, state.stopping.subscribe(), slot)
            }
        };
    };
    batch_reply(&state, &agent, &who, batch).await
}

/// Who calls, and the A2A version they asked for (the `A2A-Version` header).
struct Call<'a> {
    caller: Option<&'a Caller>,
    version: Option<&'a str>,
}

/// A JSON-RPC 2.0 batch: an array of answers in request order, notifications (no `id`)
/// answered by nothing; an empty batch is one invalid request; streaming methods are refused
/// inside a batch.
async fn batch_reply(
    state: &Arc<GatewayState>,
    agent: &str,
    caller: &Call<'_>,
    batch: Vec<Value>,
) -> Response {
    if batch.is_empty() {
        return rpc_reply(
            &Value::Null,
            Err(RpcError::invalid_request("an empty batch")),
        );
    }
    if batch.len() > MAX_BATCH {
        return rpc_reply(
            &Value::Null,
            Err(RpcError::invalid_request(format!(
                "a batch of {} requests; at most {MAX_BATCH} are taken",
                batch.len()
            ))),
        );
    }
    // The requests run concurrently (a batch of blocking sends takes as long as the slowest,
    // not their sum); the answers keep the requests' order.
    let answers = batch.into_iter().map(|item| async move {
        let notification = item.as_object().is_some_and(|o| !o.contains_key("id"));
        let answer = match RpcRequest::from_value(item) {
            Err((id, e)) => rpc::failure(&id, &e),
            Ok(request) if is_streaming(&request.method) => rpc::failure(
                &request.id,
                &RpcError::invalid_request(
                    "a streaming method cannot be part of a batch; send it on its own",
                ),
            ),
            Ok(request) => {
                let id = request.id.clone();
                match self::call(state, agent, caller, request).await {
                    Answer::Json(Ok(v)) => rpc::success(&id, v),
                    Answer::Json(Err(e)) => rpc::failure(&id, &e),
                    Answer::Stream(..) => rpc::failure(
                        &id,
                        &RpcError::internal("a stream where a single answer was expected"),
                    ),
                }
            }
        };
        (!notification).then_some(answer)
    });
    let answers: Vec<Value> = futures_util::future::join_all(answers)
        .await
        .into_iter()
        .flatten()
        .collect();
    if answers.is_empty() {
        return StatusCode::NO_CONTENT.into_response();
    }
    json_response(StatusCode::OK, &Value::Array(answers))
}

/// Whether `method` answers with a stream (v1.0 or v0.3 name).
fn is_streaming(method: &str) -> bool {
    let method = v0_3::method(method).unwrap_or(method);
    matches!(method, "SendStreamingMessage" | "SubscribeToTask")
}

/// Runs one request (a v0.3 method by the v1.0 handler it maps to).
async fn call(
    state: &Arc<GatewayState>,
    agent: &str,
    call: &Call<'_>,
    request: RpcRequest,
) -> Answer {
    let span = tracing::info_span!("soorma.a2a", agent = %agent, method = %request.method);
    let (method, v0_3, params) = match v0_3::method(&request.method) {
        Some(method) => (method, true, v0_3::params_in(request.params)),
        None => (request.method.as_str(), false, request.params),
    };
    if let Some(version) = call.version
        && !v0_3
        && !(version == "1" || version == "1.0" || version.starts_with("1.0."))
    {
        return Answer::Json(Err(RpcError::version_not_supported(version)));
    }
    let owner = match owner(call.caller, &params) {
        Ok(owner) => owner,
        Err(e) => return Answer::Json(Err(e)),
    };
    let answer = async move {
        let json = match method {
            "SendMessage" => send_message(state, agent, &owner, params).await,
            "SendStreamingMessage" => {
                let slot = match state.streams.open(&owner.tenant) {
                    Ok(slot) => slot,
                    Err(e) => return Answer::Json(Err(e)),
                };
                return match start(state, agent, &owner, params).await {
                    Ok((task, rx)) => Answer::Stream(Box::new(task), rx, v0_3, slot),
                    Err(e) => Answer::Json(Err(e)),
                };
            }
            "SubscribeToTask" => {
                let slot = match state.streams.open(&owner.tenant) {
                    Ok(slot) => slot,
                    Err(e) => return Answer::Json(Err(e)),
                };
                return match subscribe(state, agent, &owner, params) {
                    Ok((task, rx)) => Answer::Stream(Box::new(task), rx, v0_3, slot),
                    Err(e) => Answer::Json(Err(e)),
                };
            }
            "GetTask" => get_task(state, agent, &owner, params),
            "ListTasks" => list_tasks(state, agent, &owner, params),
            "CancelTask" => cancel_task(state, agent, &owner, params).await,
            "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig" => Err(RpcError::push_not_supported()),
            "GetExtendedAgentCard" => Err(RpcError::extended_card_not_configured()),
            other => Err(RpcError::method_not_found(other)),
        };
        Answer::Json(json)
    }
    .instrument(span)
    .await;
    match answer {
        Answer::Json(Ok(result)) if v0_3 => Answer::Json(Ok(v0_3::result_out(method, result))),
        other => other,
    }
}

/// Starts the task a message asks for; returns it and a receiver of its updates.
async fn start(
    state: &Arc<GatewayState>,
    agent: &str,
    owner: &Owner,
    params: Value,
) -> std::result::Result<(Task, broadcast::Receiver<StreamResponse>), RpcError> {
    let request: SendMessageRequest = self::params(params)?;
    let mut message: Message = request.message;
    if let Some(task_id) = &message.task_id {
        return Err(match state.tasks.get(agent, owner, task_id, Some(0)) {
            None => RpcError::task_not_found(task_id),
            Some(_) => RpcError::unsupported(
                "continuing a task with a new message; send a message without `taskId` to start a new task",
            ),
        });
    }
    let data = skills::payload(&message)?;
    let (def, fresh) = state.definition(agent).await.map_err(RpcError::internal)?;
    let skill_id = message
        .metadata
        .as_ref()
        .and_then(|m| m.get("skillId"))
        .or_else(|| request.metadata.as_ref().and_then(|m| m.get("skillId")))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let capability = match skills::pick(&def, skill_id.as_deref(), &data) {
        Ok(capability) => capability.clone(),
        Err(e) if fresh => return Err(e),
        // The definition may be up to a second old: the agent may have restarted with
        // another skill since.
        Err(_) => {
            let def = state
                .current_definition(agent)
                .await
                .map_err(RpcError::internal)?;
            skills::pick(&def, skill_id.as_deref(), &data)?.clone()
        }
    };
    let event = capability.consumed_event.event_name.clone();

    let task_id = new_id();
    // The client's `contextId` becomes the request's session id: one the bus would refuse is
    // the client's mistake (invalid params), not a task that fails.
    if let Some(problem) = message.context_id.as_deref().and_then(id_problem) {
        return Err(RpcError::invalid_params(format!(
            "message.contextId: {problem}"
        )));
    }
    let context_id = message.context_id.clone().unwrap_or_else(new_id);
    message.task_id = Some(task_id.clone());
    message.context_id = Some(context_id.clone());
    let publish = state
        .bus
        .request(&event, data, &state.reply_event)
        .tenant_id(&owner.tenant)
        .correlation_id(&task_id)
        .session_id(&context_id);
    let envelope = publish.envelope().map_err(RpcError::internal)?.clone();
    let mut status = TaskStatus::new(TaskState::Working);
    status.timestamp = Some(now_rfc3339());
    let mut task = Task::new(&task_id, &context_id, status);
    task.history.push(message);
    let mut metadata = serde_json::Map::new();
    metadata.insert("skillId".into(), Value::String(event.clone()));
    task.metadata = Some(metadata);
    let rx = state
        .tasks
        .insert(agent, owner, task, envelope.id.clone())
        .map_err(|busy| RpcError::busy(busy.in_flight, busy.tenant.as_deref()))?;
    tracing::info!(task_id = %task_id, event_type = %event, tenant = %owner.tenant, "A2A task started");
    // The task as it starts: a stream begins with it, and what happens next (the publish
    // failing, or the agent answering before the publish returns) follows as updates from
    // `rx`. Read after the publish, a fast agent's task could already be completed, and its
    // stream would begin with the end.
    let task = state
        .tasks
        .get(agent, owner, &task_id, None)
        .ok_or_else(|| RpcError::internal("the task was evicted at once"))?;
    // The reply comes to the reply router (see `stream::route_replies`), not to this call: no
    // task is spawned per message, and nothing is left running when the client goes away.
    let sent = match state.bus.check_consumer(&envelope).await {
        Ok(()) => publish.await.map(drop),
        Err(e) => Err(e),
    };
    if let Err(e) = sent {
        let outcome = match e {
            e @ Error::SchemaViolation { .. } => Outcome::Rejected(e.to_string()),
            e => Outcome::Failed(e.to_string()),
        };
        state.tasks.apply(&task_id, outcome);
    }
    Ok((task, rx))
}

async fn send_message(
    state: &Arc<GatewayState>,
    agent: &str,
    owner: &Owner,
    params: Value,
) -> std::result::Result<Value, RpcError> {
    let return_immediately = params
        .get("configuration")
        .and_then(|c| c.get("returnImmediately"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let history_length = params
        .get("configuration")
        .and_then(|c| c.get("historyLength"))
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok());
    let (task, mut rx) = start(state, agent, owner, params).await?;
    if !return_immediately && !task.status.state.is_terminal() {
        let finished = async {
            loop {
                match rx.recv().await {
                    Ok(StreamResponse::StatusUpdate(u)) if u.status.state.is_terminal() => break,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        };
        // The gateway stopping answers at once, with the task as it is.
        let mut stopping = state.stopping.subscribe();
        let stopped = stopping.wait_for(|stopping| *stopping);
        tokio::select! {
            _ = tokio::time::timeout(state.gateway.wait, finished) => {}
            _ = stopped => {}
        }
    }
    let task = state
        .tasks
        .get(agent, owner, &task.id, history_length)
        .unwrap_or(task);
    serde_json::to_value(SendMessageResponse::Task(task)).map_err(RpcError::internal)
}

fn subscribe(
    state: &GatewayState,
    agent: &str,
    owner: &Owner,
    params: Value,
) -> std::result::Result<(Task, broadcast::Receiver<StreamResponse>), RpcError> {
    let p: TaskIdParams = self::params(params)?;
    let (task, rx) = state
        .tasks
        .subscribe(agent, owner, &p.id)
        .ok_or_else(|| RpcError::task_not_found(&p.id))?;
    if task.status.state.is_terminal() {
        return Err(RpcError::unsupported(format!(
            "task `{}` has finished ({:?}); use GetTask",
            p.id, task.status.state
        )));
    }
    Ok((task, rx))
}

fn get_task(
    state: &GatewayState,
    agent: &str,
    owner: &Owner,
    params: Value,
) -> std::result::Result<Value, RpcError> {
    let p: TaskIdParams = self::params(params)?;
    let task = state
        .tasks
        .get(agent, owner, &p.id, p.history_length)
        .ok_or_else(|| RpcError::task_not_found(&p.id))?;
    serde_json::to_value(task).map_err(RpcError::internal)
}

fn list_tasks(
    state: &GatewayState,
    agent: &str,
    owner: &Owner,
    params: Value,
) -> std::result::Result<Value, RpcError> {
    let status: Option<TaskState> = match params.get("status") {
        None | Some(Value::Null) => None,
        Some(s) => Some(
            serde_json::from_value(s.clone())
                .map_err(|e| RpcError::invalid_params(format!("at `status`: {e}")))?,
        ),
    };
    let page_size = params
        .get("pageSize")
        .and_then(Value::as_u64)
        .map_or(50, |n| n.clamp(1, 100) as usize);
    let page_token = match params.get("pageToken").and_then(Value::as_str) {
        None | Some("") => None,
        Some(token) => Some(token.parse::<u64>().map_err(|_| {
            RpcError::invalid_params("at `pageToken`: not a token this gateway gave out")
        })?),
    };
    let query = ListQuery {
        context_id: params.get("contextId").and_then(Value::as_str),
        state: status,
        page_size,
        page_token,
        history_length: params
            .get("historyLength")
            .and_then(Value::as_i64)
            .map(|n| i32::try_from(n.max(0)).unwrap_or(i32::MAX)),
        include_artifacts: params
            .get("includeArtifacts")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    };
    let page = state.tasks.list(agent, owner, &query);
    Ok(json!({
        "tasks": page.tasks,
        "nextPageToken": page.next_page_token,
        "pageSize": page_size,
        "totalSize": page.total_size,
    }))
}

/// Cancels the caller's task: the task is settled as canceled at once, and the agent is told
/// to stop the work ([`BusClient::cancel`](crate::BusClient::cancel), as
/// [`Client::cancel`](crate::Client::cancel) does, for the task's tenant).
async fn cancel_task(
    state: &GatewayState,
    agent: &str,
    owner: &Owner,
    params: Value,
) -> std::result::Result<Value, RpcError> {
    let p: TaskIdParams = self::params(params)?;
    match state.tasks.cancel(agent, owner, &p.id) {
        Ok(Some((task, request_id))) => {
            // The gateway's bus client (no `Client` per request): what `Client::cancel` sends.
            let cancel = state.bus.cancel(&request_id).tenant_id(&owner.tenant);
            if let Err(e) = cancel.await {
                // The task is canceled for the caller either way; the work runs to its end.
                tracing::warn!(error = %e, task_id = %p.id, "could not tell the agent to stop the canceled task");
            }
            serde_json::to_value(task).map_err(RpcError::internal)
        }
        Ok(None) => Err(RpcError::task_not_found(&p.id)),
        Err(terminal) => Err(RpcError::task_not_cancelable(&p.id, terminal)),
    }
}

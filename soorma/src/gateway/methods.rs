//! The JSON-RPC methods: dispatch, and one handler per A2A method.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};
use soorma_common::a2a::{
    Message, SendMessageRequest, SendMessageResponse, StreamResponse, Task, TaskIdParams,
    TaskState, TaskStatus,
};
use tokio::sync::broadcast;

use super::rpc::{self, RpcError, RpcRequest};
use super::skills;
use super::stream::stream;
use super::tasks::Outcome;
use super::{GatewayState, json_response};
use crate::error::Error;
use crate::util::{new_id, now_rfc3339};

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

pub(super) async fn rpc(
    state: Arc<GatewayState>,
    agent: String,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(auth) = &state.gateway.auth
        && !auth.allows(&headers)
    {
        let mut response = json_response(
            StatusCode::UNAUTHORIZED,
            &json!({"error": "authentication required: see the agent card's securitySchemes"}),
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(auth.challenge()),
        );
        return response;
    }
    if !state.serves(&agent) {
        return json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": format!("no agent `{agent}` behind this gateway")}),
        );
    }
    let request = match RpcRequest::parse(&body) {
        Ok(r) => r,
        Err((id, e)) => return rpc_reply(&id, Err(e)),
    };
    if let Some(version) = headers.get("A2A-Version").and_then(|v| v.to_str().ok()) {
        let version = version.trim();
        if !(version == "1" || version == "1.0" || version.starts_with("1.0.")) {
            return rpc_reply(&request.id, Err(RpcError::version_not_supported(version)));
        }
    }
    let id = request.id.clone();
    let span = tracing::info_span!("soorma.a2a", agent = %agent, method = %request.method);
    let _entered = span.enter();
    match request.method.as_str() {
        "SendMessage" => rpc_reply(&id, send_message(&state, &agent, request.params).await),
        "SendStreamingMessage" => match start(&state, &agent, request.params).await {
            Ok((task, rx)) => stream(id, task, rx),
            Err(e) => rpc_reply(&id, Err(e)),
        },
        "SubscribeToTask" => match subscribe(&state, &agent, request.params) {
            Ok((task, rx)) => stream(id, task, rx),
            Err(e) => rpc_reply(&id, Err(e)),
        },
        "GetTask" => rpc_reply(&id, get_task(&state, &agent, request.params)),
        "ListTasks" => rpc_reply(&id, list_tasks(&state, &agent, request.params)),
        "CancelTask" => rpc_reply(&id, cancel_task(&state, &agent, request.params)),
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => rpc_reply(&id, Err(RpcError::push_not_supported())),
        "GetExtendedAgentCard" => rpc_reply(&id, Err(RpcError::extended_card_not_configured())),
        other => rpc_reply(&id, Err(RpcError::method_not_found(other))),
    }
}

/// Starts the task a message asks for; returns it and a receiver of its updates.
async fn start(
    state: &Arc<GatewayState>,
    agent: &str,
    params: Value,
) -> std::result::Result<(Task, broadcast::Receiver<StreamResponse>), RpcError> {
    let request: SendMessageRequest = self::params(params)?;
    let mut message: Message = request.message;
    if let Some(task_id) = &message.task_id {
        return Err(match state.tasks.get(agent, task_id, Some(0)) {
            None => RpcError::task_not_found(task_id),
            Some(_) => RpcError::unsupported(
                "continuing a task with a new message; send a message without `taskId` to start a new task",
            ),
        });
    }
    let data = skills::payload(&message)?;
    let def = state.definition(agent).await.map_err(RpcError::internal)?;
    let skill_id = message
        .metadata
        .as_ref()
        .and_then(|m| m.get("skillId"))
        .or_else(|| request.metadata.as_ref().and_then(|m| m.get("skillId")))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let capability = skills::pick(&def, skill_id.as_deref(), &data)?;
    let event = capability.consumed_event.event_name.clone();

    let task_id = new_id();
    let context_id = message.context_id.clone().unwrap_or_else(new_id);
    message.task_id = Some(task_id.clone());
    message.context_id = Some(context_id.clone());
    let mut client = state.client.clone();
    if let Some(tenant) = &request.tenant {
        client = client.with_tenant(tenant);
    }
    let call = client
        .request(&event, data, &state.reply_event)
        .correlation_id(&task_id)
        .session_id(&context_id);
    let request_id = call.envelope().map_err(RpcError::internal)?.id.clone();
    let mut status = TaskStatus::new(TaskState::Working);
    status.timestamp = Some(now_rfc3339());
    let mut task = Task::new(&task_id, &context_id, status);
    task.history.push(message);
    let mut metadata = serde_json::Map::new();
    metadata.insert("skillId".into(), Value::String(event.clone()));
    task.metadata = Some(metadata);
    let rx = state.tasks.insert(agent, task.clone(), request_id);
    tracing::info!(task_id = %task_id, event_type = %event, "A2A task started");
    let worker = state.clone();
    tokio::spawn(async move {
        let outcome = match call.await {
            Ok(reply) if reply.reply.success => {
                Outcome::Completed(reply.reply.result.unwrap_or(Value::Null))
            }
            Ok(reply) => Outcome::Failed(reply.reply.error.unwrap_or_default()),
            Err(e @ Error::SchemaViolation { .. }) => Outcome::Rejected(e.to_string()),
            Err(e) => Outcome::Failed(e.to_string()),
        };
        worker.tasks.apply(&task_id, outcome);
    });
    Ok((task, rx))
}

async fn send_message(
    state: &Arc<GatewayState>,
    agent: &str,
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
    let (task, mut rx) = start(state, agent, params).await?;
    if !return_immediately {
        let finished = async {
            loop {
                match rx.recv().await {
                    Ok(StreamResponse::StatusUpdate(u)) if u.status.state.is_terminal() => break,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        };
        let _ = tokio::time::timeout(state.gateway.wait, finished).await;
    }
    let task = state
        .tasks
        .get(agent, &task.id, history_length)
        .unwrap_or(task);
    serde_json::to_value(SendMessageResponse::Task(task)).map_err(RpcError::internal)
}

fn subscribe(
    state: &GatewayState,
    agent: &str,
    params: Value,
) -> std::result::Result<(Task, broadcast::Receiver<StreamResponse>), RpcError> {
    let p: TaskIdParams = self::params(params)?;
    let (task, rx) = state
        .tasks
        .subscribe(agent, &p.id)
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
    params: Value,
) -> std::result::Result<Value, RpcError> {
    let p: TaskIdParams = self::params(params)?;
    let task = state
        .tasks
        .get(agent, &p.id, p.history_length)
        .ok_or_else(|| RpcError::task_not_found(&p.id))?;
    serde_json::to_value(task).map_err(RpcError::internal)
}

fn list_tasks(
    state: &GatewayState,
    agent: &str,
    params: Value,
) -> std::result::Result<Value, RpcError> {
    let context = params.get("contextId").and_then(Value::as_str);
    let status: Option<TaskState> = match params.get("status") {
        None | Some(Value::Null) => None,
        Some(s) => Some(
            serde_json::from_value(s.clone())
                .map_err(|e| RpcError::invalid_params(format!("at `status`: {e}")))?,
        ),
    };
    let page = params
        .get("pageSize")
        .and_then(Value::as_u64)
        .map_or(50, |n| n.clamp(1, 100) as usize);
    let tasks = state.tasks.list(agent, context, status, page);
    Ok(json!({"tasks": tasks, "nextPageToken": "", "pageSize": page, "totalSize": tasks.len()}))
}

fn cancel_task(
    state: &GatewayState,
    agent: &str,
    params: Value,
) -> std::result::Result<Value, RpcError> {
    let p: TaskIdParams = self::params(params)?;
    match state.tasks.cancel(agent, &p.id) {
        Ok(Some(task)) => serde_json::to_value(task).map_err(RpcError::internal),
        Ok(None) => Err(RpcError::task_not_found(&p.id)),
        Err(terminal) => Err(RpcError::task_not_cancelable(&p.id, terminal)),
    }
}

//! An MCP server (stdio) for fault tests of soorma's MCP coordinator and bridge.
//!
//! Tools: `echo {text}`, `slow {ms}` (notices cancellation), `flaky {fail}` (an error result
//! when `fail`), `crash {}` (the process exits without answering), `pid {}`, `counters {}`
//! (calls and cancellations seen), `media {}` (an image and an embedded resource), `huge {mb}`
//! (a text result of `mb` MiB). Prompt:
//! `tool-descriptions`. Writes a line to stderr on start. With the argument `--endless-pages`,
//! every `tools/list` page names a next page, for ever.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, ListPromptsResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    cancelled: AtomicU64,
}

#[derive(Clone, Default)]
struct FaultServer {
    counters: Arc<Counters>,
}

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid MCP model value")
}

fn text(t: impl Into<String>) -> CallToolResult {
    from_json(json!({"content": [{"type": "text", "text": t.into()}]}))
}

fn tools() -> Value {
    let object = |props: Value, required: Value| json!({"type": "object", "properties": props, "required": required});
    json!([
        {"name": "echo", "description": "Echoes `text`.",
         "inputSchema": object(json!({"text": {"type": "string", "description": "What to echo"}}), json!(["text"]))},
        {"name": "slow", "description": "Answers after `ms` milliseconds unless cancelled.",
         "inputSchema": object(json!({"ms": {"type": "integer", "minimum": 0}}), json!(["ms"]))},
        {"name": "flaky", "description": "Fails when `fail` is true.",
         "inputSchema": object(json!({"fail": {"type": "boolean"}}), json!(["fail"]))},
        {"name": "crash", "description": "Exits the server process without answering.",
         "inputSchema": object(json!({}), json!([]))},
        {"name": "pid", "description": "The server's process id.",
         "inputSchema": object(json!({}), json!([]))},
        {"name": "counters", "description": "Calls and cancellations seen.",
         "inputSchema": object(json!({}), json!([])),
         "outputSchema": object(json!({"calls": {"type": "integer"}, "cancelled": {"type": "integer"}}), json!(["calls", "cancelled"]))},
        {"name": "media", "description": "An image and an embedded text resource.",
         "inputSchema": object(json!({}), json!([]))},
        {"name": "huge", "description": "A text result of `mb` MiB.",
         "inputSchema": object(json!({"mb": {"type": "integer", "minimum": 0}}), json!(["mb"]))}
    ])
}

impl ServerHandler for FaultServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .build(),
        );
        info.server_info = rmcp::model::Implementation::new("soorma-fault-server", "1.0.0");
        info
    }

    async fn list_tools(
        &self,
        params: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        if std::env::args().any(|a| a == "--endless-pages") {
            let page: u64 = params
                .and_then(|p| p.cursor)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            return Ok(from_json(
                json!({"tools": tools(), "nextCursor": (page + 1).to_string()}),
            ));
        }
        Ok(from_json(json!({"tools": tools()})))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.counters.calls.fetch_add(1, Ordering::SeqCst);
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = match request.name.as_ref() {
            "echo" => text(args["text"].as_str().unwrap_or_default()),
            "slow" => {
                let ms = args["ms"].as_u64().unwrap_or(0);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => text(format!("slept {ms} ms")),
                    _ = context.ct.cancelled() => {
                        self.counters.cancelled.fetch_add(1, Ordering::SeqCst);
                        eprintln!("slow call cancelled");
                        text("cancelled")
                    }
                }
            }
            "flaky" if args["fail"] == json!(true) => from_json(json!({
                "content": [{"type": "text", "text": "flaky failed on purpose"}], "isError": true
            })),
            "flaky" => text("flaky worked"),
            "crash" => {
                eprintln!("crashing on purpose");
                std::process::exit(3);
            }
            "pid" => text(std::process::id().to_string()),
            "huge" => {
                let mb = args["mb"].as_u64().unwrap_or(0) as usize;
                text("x".repeat(mb * 1024 * 1024))
            }
            "counters" => {
                let c = json!({
                    "calls": self.counters.calls.load(Ordering::SeqCst),
                    "cancelled": self.counters.cancelled.load(Ordering::SeqCst),
                });
                from_json(
                    json!({"content": [{"type": "text", "text": c.to_string()}], "structuredContent": c}),
                )
            }
            "media" => from_json(json!({"content": [
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://notes.txt", "mimeType": "text/plain", "text": "a note"}}
            ]})),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool `{other}`"),
                    None,
                ));
            }
        };
        Ok(CallToolResponse::Complete(result))
    }

    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(from_json(json!({"prompts": [
            {"name": "tool-descriptions", "description": "How to use this server's tools."}
        ]})))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != "tool-descriptions" {
            return Err(ErrorData::invalid_params("no such prompt", None));
        }
        let result: GetPromptResult = from_json(json!({"messages": [
            {"role": "user", "content": {"type": "text", "text": "The fault server: echo repeats text; slow waits; flaky fails on request."}}
        ]}));
        Ok(GetPromptResponse::Complete(result))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    eprintln!("fault server {} ready", std::process::id());
    let service = match FaultServer::default().serve(rmcp::transport::stdio()).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot start: {e}");
            std::process::exit(1);
        }
    };
    let _ = service.waiting().await;
}

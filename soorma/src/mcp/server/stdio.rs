//! The MCP server's newline-delimited JSON-RPC transport over a byte stream (stdio): rmcp's,
//! but a line that is not JSON gets a -32700 parse error (JSON-RPC 2.0 §5.1) instead of being
//! dropped without a word, and JSON that is no JSON-RPC message a -32600.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// The largest message read (longer lines are skipped and answered with -32700).
pub(super) const MAX_LINE: usize = 16 * 1024 * 1024;

/// Error replies in a row after which unreadable lines are only logged, until a valid message
/// arrives: a peer that echoes what it gets cannot start an endless exchange of errors.
const ERROR_REPLIES_IN_A_ROW: u32 = 8;

pub(super) struct LineTransport<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    /// Skipping the rest of an oversized line (kept here: `receive` can be cancelled).
    discarding: bool,
    write: Arc<Mutex<W>>,
    errors_in_a_row: u32,
}

enum Line {
    Complete,
    Oversized,
    End,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    pub(super) fn new(read: R, write: W) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            write: Arc::new(Mutex::new(write)),
            errors_in_a_row: 0,
        }
    }

    /// Reads up to the next newline into `self.line`, never holding more than [`MAX_LINE`]
    /// bytes. Cancel-safe: bytes are moved into `self.line` and consumed without an await
    /// between.
    async fn read_line(&mut self) -> Line {
        loop {
            let (taken, done) = {
                let available = match self.read.fill_buf().await {
                    Ok([]) | Err(_) => return Line::End,
                    Ok(available) => available,
                };
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |at| at + 1);
                if self.discarding {
                    (take, newline.map(|_| None))
                } else if self.line.len() + take > MAX_LINE {
                    self.line.clear();
                    self.discarding = newline.is_none();
                    (take, Some(Some(Line::Oversized)))
                } else {
                    self.line.extend_from_slice(&available[..take]);
                    (take, newline.map(|_| Some(Line::Complete)))
                }
            };
            self.read.consume(taken);
            match done {
                Some(Some(line)) => return line,
                Some(None) => self.discarding = false,
                None => {}
            }
        }
    }

    /// Answers an unreadable line with `code`, unless too many were answered in a row.
    async fn reply_error(&mut self, code: i64, message: String, id: Value) {
        self.errors_in_a_row += 1;
        if self.errors_in_a_row > ERROR_REPLIES_IN_A_ROW {
            tracing::debug!(code, %message, "unreadable MCP message not answered (too many in a row)");
            return;
        }
        tracing::info!(code, %message, "unreadable MCP message");
        let reply =
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
        let mut bytes = reply.to_string().into_bytes();
        bytes.push(b'\n');
        let mut write = self.write.lock().await;
        if let Err(e) = async {
            write.write_all(&bytes).await?;
            write.flush().await
        }
        .await
        {
            tracing::debug!(error = %e, "could not answer an unreadable MCP message");
        }
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = self.write.clone();
        async move {
            let mut bytes = serde_json::to_vec(&item)?;
            bytes.push(b'\n');
            let mut write = write.lock().await;
            write.write_all(&bytes).await?;
            write.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                Line::End => return None,
                Line::Oversized => {
                    let message = format!("parse error: message longer than {MAX_LINE} bytes");
                    self.reply_error(-32700, message, Value::Null).await;
                    continue;
                }
                Line::Complete => {}
            }
            let line = std::mem::take(&mut self.line);
            let text = line.trim_ascii();
            if text.is_empty() {
                continue;
            }
            match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(text) {
                Ok(message) => {
                    self.errors_in_a_row = 0;
                    return Some(message);
                }
                Err(e) if e.is_syntax() || e.is_eof() => {
                    self.reply_error(-32700, format!("parse error: {e}"), Value::Null)
                        .await;
                }
                Err(e) => {
                    // JSON, but no JSON-RPC message: answer with its id when it has one.
                    let id = serde_json::from_slice::<Value>(text)
                        .ok()
                        .and_then(|v| v.get("id").cloned())
                        .filter(|id| id.is_string() || id.is_number())
                        .unwrap_or(Value::Null);
                    self.reply_error(-32600, format!("invalid request: {e}"), id)
                        .await;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.write.lock().await.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncBufReadExt;

    /// Feeds `input` to a transport: the lines it wrote back, and how many messages it passed on.
    async fn run(input: Vec<u8>) -> (Vec<Value>, usize) {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(server);
        let receiver = tokio::spawn(async move {
            let mut transport = LineTransport::new(read, write);
            let mut passed = 0;
            while transport.receive().await.is_some() {
                passed += 1;
            }
            passed
        });
        let (client_read, mut client_write) = tokio::io::split(client);
        let writer = tokio::spawn(async move {
            client_write.write_all(&input).await.unwrap();
            client_write.shutdown().await.unwrap();
            client_write
        });
        let mut replies = Vec::new();
        let mut lines = BufReader::new(client_read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            replies.push(serde_json::from_str(&line).unwrap());
        }
        let _ = writer.await;
        (replies, receiver.await.unwrap())
    }

    #[tokio::test]
    async fn unreadable_lines_are_answered() {
        let mut input = b"garbage\n{\"id\": 7, \"no\": \"method\"}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
        input.extend(b"\n{\"jsonrpc\": \"2.0\", \"method\": \"notifications/initialized\"}\n");
        let (replies, passed) = run(input).await;
        let codes: Vec<_> = replies
            .iter()
            .map(|r| (r["error"]["code"].clone(), r["id"].clone()))
            .collect();
        assert_eq!(
            codes,
            [
                (json!(-32700), Value::Null),
                (json!(-32600), json!(7)),
                (json!(-32700), Value::Null)
            ]
        );
        assert_eq!(passed, 1, "the valid notification after them is passed on");
    }

    #[tokio::test]
    async fn an_echoing_peer_gets_a_bounded_number_of_answers() {
        let input = b"nope\n".repeat(50);
        let (replies, passed) = run(input).await;
        assert_eq!(replies.len(), ERROR_REPLIES_IN_A_ROW as usize);
        assert_eq!(passed, 0);
    }
}

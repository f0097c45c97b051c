//! HTTP/1.1 by hand over a `TcpStream`, for what an HTTP client library will not do: a foreign
//! `Host`, headers sent a byte at a time, idle sockets, a body larger than declared limits.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response read off the wire.
#[derive(Debug)]
pub struct RawResponse {
    /// The status code.
    pub status: u16,
    /// The header block, names in lower case.
    pub headers: String,
    /// The body (as much as arrived).
    pub body: String,
}

/// Connects to `addr`.
///
/// # Panics
/// When the connection fails.
pub async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.expect("connect")
}

/// Sends `request` (the whole HTTP/1.1 text) on `stream` and reads one response; `None` when the
/// server closed the connection (or sent nothing) within `wait`.
///
/// # Panics
/// When writing fails for another reason than the server closing.
pub async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    wait: Duration,
) -> Option<RawResponse> {
    if stream.write_all(request).await.is_err() {
        return None;
    }
    read_response(stream, wait).await
}

/// Reads one response within `wait`: its headers, then `Content-Length` bytes of body; a
/// response without a length (a stream) is returned with what arrived with its headers.
pub async fn read_response(stream: &mut TcpStream, wait: Duration) -> Option<RawResponse> {
    let deadline = Instant::now() + wait;
    let mut data = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = find(&data, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|n| n.trim().parse::<usize>().ok());
            if length.is_none_or(|n| data.len() >= end + 4 + n) {
                return Some(parse(&data, end));
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => {
                return find(&data, b"\r\n\r\n").map(|end| parse(&data, end));
            }
            Ok(Ok(n)) => data.extend_from_slice(&chunk[..n]),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn parse(data: &[u8], end: usize) -> RawResponse {
    let head = String::from_utf8_lossy(&data[..end]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    RawResponse {
        status,
        headers: head.to_ascii_lowercase(),
        body: String::from_utf8_lossy(&data[end + 4..]).to_string(),
    }
}

/// Whether the server closes `stream` within `wait` (reads are discarded).
pub async fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut chunk = [0u8; 1024];
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

/// Sends `request` one byte every `every` until the server closes the connection (`true`) or
/// it has all been sent (`false`).
pub async fn trickle(stream: &mut TcpStream, request: &[u8], every: Duration) -> bool {
    for byte in request {
        if stream.write_all(&[*byte]).await.is_err() {
            return true;
        }
        tokio::time::sleep(every).await;
        if closed_within(stream, Duration::from_millis(1)).await {
            return true;
        }
    }
    false
}

//! A connection's writes must keep moving: while the server's output waits on its client, at
//! least a minimum of bytes must go out within each write timeout (of waiting), or the
//! connection fails. A client that stops reading, or reads a trickle just often enough to reset a plain
//! write timeout (a "slow read" attack), cannot hold its connection slot.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `inner`, whose writes fail with [`io::ErrorKind::TimedOut`] once they have waited on the
/// client for `timeout` in all (time spent idle, with nothing to write, does not count) while
/// fewer than `min_bytes` went out; every `min_bytes` written start the count again.
pub(super) struct WriteProgress<S> {
    inner: S,
    timeout: Duration,
    min_bytes: usize,
    /// Bytes written since the count started.
    written: usize,
    /// Time writes spent waiting since the count started, not counting the current wait.
    waited: Duration,
    /// When the current wait began (a write returned `Pending` and none has gone through).
    waiting_since: Option<Instant>,
    deadline: Pin<Box<Sleep>>,
}

impl<S> WriteProgress<S> {
    pub(super) fn new(inner: S, timeout: Duration, min_bytes: usize) -> Self {
        Self {
            inner,
            timeout,
            min_bytes,
            written: 0,
            waited: Duration::ZERO,
            waiting_since: None,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    /// Counts a write's outcome: a write that waits adds to the time waited (failing once it
    /// reaches the timeout); bytes written end the wait and, once `min_bytes` are reached,
    /// start the count again.
    fn account(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if written.is_pending() {
            if self.waiting_since.is_none() {
                let now = Instant::now();
                self.waiting_since = Some(now);
                let left = self.timeout.saturating_sub(self.waited);
                // A timeout too long to add is as good as none.
                let far = now + Duration::from_secs(86_400 * 365 * 30);
                self.deadline
                    .as_mut()
                    .reset(now.checked_add(left).unwrap_or(far));
            }
            ready!(self.deadline.as_mut().poll(cx));
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took too little of the response within the write timeout",
            )));
        }
        if let Some(since) = self.waiting_since.take() {
            self.waited += since.elapsed();
        }
        if let Poll::Ready(Ok(n)) = written {
            self.written += n;
            if self.written >= self.min_bytes {
                self.written = 0;
                self.waited = Duration::ZERO;
            }
        }
        written
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteProgress<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteProgress<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.account(cx, written)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.account(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Writes 1 MiB through a 1 KiB pipe whose reader takes `chunk` bytes every 20 ms.
    async fn write_to_reader_taking(chunk: usize) -> io::Result<()> {
        let (client, server) = tokio::io::duplex(1024);
        let mut server = WriteProgress::new(server, Duration::from_millis(200), 4096);
        let reader = tokio::spawn(async move {
            let mut client = client;
            let mut buf = vec![0; chunk];
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                match client.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        });
        let written = server.write_all(&vec![7; 1 << 20]).await;
        reader.abort();
        written
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickling_reader_is_cut_and_a_steady_one_served() {
        // 100 bytes per 20 ms: 1,000 bytes per 200 ms window, under the 4,096 asked for.
        let cut = write_to_reader_taking(100).await.unwrap_err();
        assert_eq!(cut.kind(), io::ErrorKind::TimedOut);
        // 1,024 bytes per 20 ms: 10 KiB per window.
        write_to_reader_taking(1024).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn time_with_nothing_to_write_does_not_count() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut server = WriteProgress::new(server, Duration::from_millis(200), 4096);
        // 2 KiB through a 1 KiB pipe the client empties after 150 ms: 150 ms waited.
        let reader = tokio::spawn(async move {
            let mut buf = vec![0; 2048];
            tokio::time::sleep(Duration::from_millis(150)).await;
            client.read_exact(&mut buf).await.unwrap();
            client
        });
        server.write_all(&[1; 2048]).await.unwrap();
        let mut client = reader.await.unwrap();
        // Two minutes with nothing to write, then 4 KiB the client reads at once: only the
        // time spent waiting counts, so this is not over the 200 ms.
        tokio::time::sleep(Duration::from_secs(120)).await;
        let reader = tokio::spawn(async move {
            let mut buf = vec![0; 4096];
            client.read_exact(&mut buf).await.unwrap();
        });
        server.write_all(&[2; 4096]).await.unwrap();
        reader.await.unwrap();
    }
}

//! The accept loop. Every connection is accepted at once; its first request head must arrive
//! within `header_timeout` (a late one is answered `408` naming `header_timeout`). Only a
//! connection whose request head has arrived counts against `max_connections`: one beyond
//! the cap is answered `503` with `Retry-After`, so idle or half-open connections never keep
//! requests waiting. Then hyper serves the connection; an idle keep-alive connection is closed
//! once `header_timeout` passes without a new request.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::Watcher;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::api::ApiError;

/// Largest request head read before hyper takes over (hyper refuses a longer one with 431).
const MAX_HEAD: usize = 64 << 10;

/// How long a refused client is given to read its answer before the socket is dropped.
const LINGER: Duration = Duration::from_secs(1);

/// What every connection task shares.
pub(crate) struct Listen {
    /// The routes.
    pub app: axum::Router,
    /// The HTTP/1 settings.
    pub builder: hyper::server::conn::http1::Builder,
    /// `max_connections` slots, taken once a request head has arrived.
    pub slots: Arc<Semaphore>,
    /// `header_timeout`.
    pub header_timeout: Duration,
    /// Becomes `true` on shutdown.
    pub stop: watch::Receiver<bool>,
}

/// Connections waiting for their first request head, at most (beyond: `503` at once).
pub(crate) fn max_pending(max_connections: usize) -> usize {
    max_connections.saturating_mul(4).max(1024)
}

/// Bytes read ahead, then the stream.
struct Rewind {
    pre: Vec<u8>,
    pos: usize,
    io: TcpStream,
}

impl AsyncRead for Rewind {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if me.pos < me.pre.len() {
            let n = (me.pre.len() - me.pos).min(buf.remaining());
            buf.put_slice(&me.pre[me.pos..me.pos + n]);
            me.pos += n;
            if me.pos == me.pre.len() {
                me.pre = Vec::new();
                me.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// How the wait for a request head ended.
enum Head {
    /// The head is complete (or too long to wait for: hyper answers it); the bytes read.
    Complete(Vec<u8>),
    /// The client closed (or the socket failed) first.
    Closed,
    /// `header_timeout` passed first.
    Late,
}

/// Whether `buf` holds a blank line (the end of a head) other than leading blank lines.
fn head_complete(buf: &[u8]) -> bool {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let b = &buf[start..];
    b.windows(4).any(|w| w == b"\r\n\r\n") || b.windows(2).any(|w| w == b"\n\n")
}

async fn read_head(tcp: &mut TcpStream, timeout: Duration) -> Head {
    let mut buf = Vec::with_capacity(1024);
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            let n = match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() >= MAX_HEAD || head_complete(&buf) {
                return true;
            }
        }
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(true) => Head::Complete(buf),
        Ok(false) => Head::Closed,
        Err(_) => Head::Late,
    }
}

/// A whole HTTP/1.1 response carrying `e`'s JSON, closing the connection.
fn raw_response(e: &ApiError) -> Vec<u8> {
    let body = e.body().to_string();
    let mut head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n",
        e.status.as_u16(),
        e.status.canonical_reason().unwrap_or(""),
        body.len()
    );
    if let Some(s) = e.retry_after {
        head.push_str(&format!("retry-after: {s}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Write `e`, close the sending side, and read (discarding) until the client closes or
/// [`LINGER`] passes, so the answer is not lost to a reset.
async fn refuse(mut tcp: TcpStream, e: ApiError) {
    let send = async {
        tcp.write_all(&raw_response(&e)).await?;
        tcp.shutdown().await?;
        let mut sink = [0u8; 4096];
        while tcp.read(&mut sink).await? > 0 {}
        Ok::<_, io::Error>(())
    };
    let _ = tokio::time::timeout(LINGER, send).await;
}

/// `503` at the connection cap.
pub(crate) fn busy(max: usize) -> ApiError {
    ApiError {
        retry_after: Some(1),
        ..ApiError::limit(
            "max_connections",
            format!("the server is serving its max_connections = {max} connections; retry"),
        )
    }
}

/// Refuse a connection at once (too many connections are waiting for a request head).
pub(crate) fn refuse_now(tcp: TcpStream, max: usize) {
    tokio::spawn(refuse(tcp, busy(max)));
}

/// Serve one accepted connection: its first request head within `header_timeout`, a slot
/// under `max_connections`, then hyper.
pub(crate) async fn connection(
    l: Arc<Listen>,
    mut tcp: TcpStream,
    waiting: OwnedSemaphorePermit,
    watcher: Watcher,
    max: usize,
) {
    let mut stop = l.stop.clone();
    let head = tokio::select! {
        h = read_head(&mut tcp, l.header_timeout) => h,
        _ = stop.wait_for(|s| *s) => return,
    };
    drop(waiting);
    let pre = match head {
        Head::Closed => return,
        Head::Late => {
            let t = l.header_timeout.as_secs_f64();
            let e = ApiError::limit(
                "header_timeout",
                format!("the request headers did not arrive within header_timeout = {t:.1} s"),
            );
            refuse(tcp, e).await;
            return;
        }
        Head::Complete(pre) => pre,
    };
    let Ok(permit) = l.slots.clone().try_acquire_owned() else {
        refuse(tcp, busy(max)).await;
        return;
    };
    let io = Rewind {
        pre,
        pos: 0,
        io: tcp,
    };
    let svc = TowerToHyperService::new(l.app.clone());
    let conn = l.builder.serve_connection(TokioIo::new(io), svc);
    let _ = watcher.watch(conn).await;
    drop(permit);
}

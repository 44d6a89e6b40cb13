//! Connections: the accept loop, its cap, the per-connection timeouts, and graceful shutdown.
//!
//! `axum::serve` takes none of these settings, so connections are served here with hyper's
//! HTTP/1 connection directly (the router is the same), under a watchdog per connection.
//! hyper's own `header_read_timeout` is not used: its clock also runs while a connection sits
//! idle between requests, so it would cut keep-alive short. What each limit bounds:
//!
//! - header: a request's head must be complete within this time of its first byte (of the
//!   connection opening, for the first request); a stalled head is dropped after it.
//! - body: the whole body must arrive within this time of its head (`routes::read_body`, 408).
//! - keep-alive: a connection with no request in flight and not a byte received since its
//!   last response is closed after this long.
//! - max connections: past this many open connections a new one gets a 503 and is closed, so
//!   stalled clients cannot take every socket the process may hold.

use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tower_service::Service;

use super::metrics::Metrics;
use std::sync::atomic::Ordering::Relaxed;

/// The limits of the connection layer.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest wait for a complete request head.
    pub header_timeout: Duration,
    /// Longest wait for a request body, from its head.
    pub body_timeout: Duration,
    /// Longest idle time between requests on one connection.
    pub keep_alive: Duration,
    /// Most connections open at once (at least 1).
    pub max_connections: usize,
    /// On SIGINT/SIGTERM, how long in-flight requests may run on before they are cut.
    pub shutdown_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            keep_alive: Duration::from_secs(5),
            max_connections: 256,
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

/// Parses a duration flag: a number with an optional unit, `ms`, `s` (the default) or `m`
/// (`500ms`, `10s`, `1.5`, `2m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * scale <= 1e9 => {
            Ok(Duration::from_secs_f64(v * scale))
        }
        _ => Err(format!(
            "{s:?} is not a duration (a number of seconds, or with ms / s / m)"
        )),
    }
}

/// What a connection is doing, for its watchdog.
struct Activity {
    /// Requests whose responses are not finished.
    busy: usize,
    /// When the connection last became idle (its last response ended, nothing read since).
    idle_since: Option<Instant>,
    /// When the head being received began (its first byte, or the connection's opening).
    head_since: Option<Instant>,
}

/// Why the watchdog ends a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expired {
    /// Idle past `--keep-alive`: closed gracefully.
    KeepAlive,
    /// A head slower than `--timeout-header`: dropped.
    Header,
}

struct ConnState {
    activity: Mutex<Activity>,
    /// Woken when a response ends (the idle clock starts then).
    changed: Notify,
}

impl ConnState {
    fn new() -> ConnState {
        ConnState {
            activity: Mutex::new(Activity {
                busy: 0,
                idle_since: None,
                head_since: Some(Instant::now()),
            }),
            changed: Notify::new(),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Activity) -> R) -> R {
        // A poisoned lock only means a panic elsewhere; the fields are still usable.
        let mut a = self.activity.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut a)
    }

    fn read_bytes(&self) {
        self.with(|a| {
            if a.busy == 0 && a.head_since.is_none() {
                a.idle_since = None;
                a.head_since = Some(Instant::now());
            }
        });
    }

    fn request_started(&self) {
        self.with(|a| {
            a.busy += 1;
            a.idle_since = None;
            a.head_since = None;
        });
    }

    fn response_ended(&self) {
        self.with(|a| {
            a.busy -= 1;
            if a.busy == 0 {
                a.idle_since = Some(Instant::now());
            }
        });
        self.changed.notify_one();
    }

    /// The next deadline: none while a request is in flight (its body is bounded by the
    /// router, its response runs as long as it takes); no keep-alive one once `closing`.
    fn deadline(&self, limits: &Limits, closing: bool) -> Option<(Instant, Expired)> {
        self.with(|a| {
            if a.busy > 0 {
                None
            } else if let Some(t) = a.head_since {
                Some((t + limits.header_timeout, Expired::Header))
            } else if closing {
                None
            } else {
                a.idle_since
                    .map(|t| (t + limits.keep_alive, Expired::KeepAlive))
            }
        })
    }

    /// Returns when a deadline passes. Wakes at each deadline (or response end) and looks
    /// again: what the connection did meanwhile may have moved it.
    async fn expired(&self, limits: &Limits, closing: bool) -> Expired {
        loop {
            match self.deadline(limits, closing) {
                Some((t, why)) if Instant::now() >= t => return why,
                Some((t, _)) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(t.into()) => {}
                        _ = self.changed.notified() => {}
                    }
                }
                None => self.changed.notified().await,
            }
        }
    }
}

/// Counts a request as in flight until its response body is dropped (sent, or abandoned).
struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.response_ended();
    }
}

/// A response body that holds its request's [`InFlight`].
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, noting every byte received (a new request ends the idle time).
struct Watched {
    io: TcpStream,
    state: Arc<ConnState>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut me.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            me.state.read_bytes();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// Serves one connection until it closes, its keep-alive runs out, or the server stops
/// (then in-flight requests finish first: hyper's graceful shutdown).
async fn serve_conn(
    io: TcpStream,
    router: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
    metrics: &Metrics,
) {
    let state = Arc::new(ConnState::new());
    let svc_state = state.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let mut router = router.clone();
        svc_state.request_started();
        let in_flight = InFlight(svc_state.clone());
        async move {
            // The router is always ready (axum), so `call` needs no `poll_ready` first.
            let resp = router.call(req).await?;
            Ok::<_, std::convert::Infallible>(resp.map(|body| {
                Body::new(Tracked {
                    body,
                    _in_flight: in_flight,
                })
            }))
        }
    });
    let io = TokioIo::new(Watched {
        io,
        state: state.clone(),
    });
    // No timer: hyper's header timeout (30 s by default once a timer is set) stays off.
    let mut conn = pin!(hyper::server::conn::http1::Builder::new().serve_connection(io, svc));
    let mut closing = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = stop.changed(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            why = state.expired(&limits, closing) => match why {
                // Half a head can never be answered: drop the connection.
                Expired::Header => {
                    metrics.timeouts.fetch_add(1, Relaxed);
                    return;
                }
                Expired::KeepAlive => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
            },
        }
    }
}

/// Answers a connection over the cap with a 503 and closes it.
async fn refuse(mut io: TcpStream) {
    const BODY: &str = r#"{"error":{"message":"too many open connections; retry later","type":"server_error","code":"too_many_connections"}}"#;
    let resp = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let bye = async {
        io.write_all(resp.as_bytes()).await?;
        io.shutdown().await?;
        // Read what the client sent until it closes: closing with unread data would reset
        // the connection, and the client might never see the 503.
        let mut sink = [0u8; 4096];
        while tokio::io::AsyncReadExt::read(&mut io, &mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), bye).await;
}

/// Accepts connections on `listener` until `stop` resolves, then lets the open ones finish
/// (at most `limits.shutdown_timeout`, or until `hurry` resolves), calling `cut` when they
/// cannot wait: the scheduler then ends every request before its next step, and the
/// connections get a moment more to send those last answers.
pub async fn accept_loop(
    listener: TcpListener,
    router: Router,
    metrics: Arc<Metrics>,
    limits: Limits,
    stop: impl Future<Output = ()>,
    hurry: impl Future<Output = ()>,
    cut: impl FnOnce(),
) {
    let cap = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(cap));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut stop = pin!(stop);
    loop {
        tokio::select! {
            _ = stop.as_mut() => break,
            r = listener.accept() => match r {
                Ok((io, _)) => match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let _ = io.set_nodelay(true);
                        let (router, stop_rx) = (router.clone(), stop_rx.clone());
                        let metrics = metrics.clone();
                        metrics.connections.fetch_add(1, Relaxed);
                        tokio::spawn(async move {
                            serve_conn(io, router, limits, stop_rx, &metrics).await;
                            metrics.connections.fetch_sub(1, Relaxed);
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        metrics.connections_refused.fetch_add(1, Relaxed);
                        tokio::spawn(refuse(io));
                    }
                },
                // Out of file descriptors and the like: wait a moment rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
        }
    }
    drop(listener);
    drop(router);
    let _ = stop_tx.send(true);
    let all_closed = || permits.acquire_many(cap as u32);
    tokio::select! {
        _ = all_closed() => return,
        _ = tokio::time::sleep(limits.shutdown_timeout) => {}
        _ = hurry => {}
    }
    cut();
    let _ = tokio::time::timeout(Duration::from_secs(5), all_closed()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit_or_seconds() {
        let d = |s| parse_duration(s).unwrap();
        assert_eq!(d("10s"), Duration::from_secs(10));
        assert_eq!(d("250ms"), Duration::from_millis(250));
        assert_eq!(d("1.5"), Duration::from_millis(1500));
        assert_eq!(d("2m"), Duration::from_secs(120));
        assert_eq!(d(" 0 "), Duration::ZERO);
        for bad in ["", "s", "-1s", "ten", "1h", "nan", "1e300"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}

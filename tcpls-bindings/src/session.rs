//! A session as a binding holds it: the `tcpls::Session`, the streams the peer opened and the
//! events, both collected by a small task (the pump), and the readiness descriptor.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tcpls::{PathOptions, RecvStream, SendStream, Session, TcplsConnector};
use tokio::sync::mpsc;

use crate::config::ConfigSpec;
use crate::error::{Error, ErrorKind, Result};
use crate::events::{AppEvent, EventKind, MAX_QUEUED_EVENTS};
use crate::readiness::Readiness;
use crate::runtime::{block_on, runtime, Wait};
use crate::stream::StreamCore;

/// Streams the peer opened that the application has not accepted yet, at most this many (the
/// pump waits beyond; the peer's stream limit bounds them anyway).
const MAX_PENDING_STREAMS: usize = 1024;

/// How often the pump looks for new core events. The core wakes nobody for most of them, so
/// they are collected at this pace: an event reaches the application at most this late.
const EVENT_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// How long a close waits for the peer's close_notify before it aborts the session.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// One TCP connection of a session, with the kernel's view of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionStats {
    pub id: u32,
    pub usable: bool,
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Smoothed RTT and its variation in microseconds, congestion window in segments,
    /// retransmitted segments, delivery rate in bytes/s: 0 when the socket is gone.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub cwnd: u32,
    pub total_retrans: u32,
    pub delivery_rate: u64,
}

/// A session with its pump.
pub struct SessionCore {
    session: Session,
    /// Closed by the application; shared with the session's streams, whose calls fail then.
    closed: Arc<AtomicBool>,
    readiness: Arc<Readiness>,
    streams: tokio::sync::Mutex<mpsc::Receiver<(SendStream, RecvStream)>>,
    events: tokio::sync::Mutex<mpsc::Receiver<AppEvent>>,
    /// Events the pump could not queue (the application did not pull them).
    dropped_events: Arc<Mutex<u64>>,
    pump: tokio::task::JoinHandle<()>,
}

/// A session whose last handle goes without a close is aborted: nobody could close it later.
impl Drop for SessionCore {
    fn drop(&mut self) {
        self.pump.abort();
        if !self.closed.load(Ordering::Acquire) {
            self.session.abort();
        }
    }
}

impl SessionCore {
    /// Wraps an established session and starts its pump (on the bindings' runtime).
    pub fn new(session: Session) -> Result<Arc<SessionCore>> {
        let readiness = Readiness::new()?;
        let (stream_tx, stream_rx) = mpsc::channel(MAX_PENDING_STREAMS);
        let (event_tx, event_rx) = mpsc::channel(MAX_QUEUED_EVENTS);
        let dropped_events = Arc::new(Mutex::new(0));
        let pump = Pump {
            session: session.clone(),
            streams: stream_tx,
            events: event_tx,
            readiness: readiness.clone(),
            dropped: dropped_events.clone(),
        };
        let pump = runtime()?.spawn(pump.run());
        Ok(Arc::new(SessionCore {
            session,
            closed: Arc::new(AtomicBool::new(false)),
            readiness,
            streams: tokio::sync::Mutex::new(stream_rx),
            events: tokio::sync::Mutex::new(event_rx),
            dropped_events,
            pump,
        }))
    }

    /// Connects to `addr` (`HOST:PORT`) and completes the handshake within `wait`.
    pub fn connect(config: &ConfigSpec, addr: &str, server_name: Option<&str>, wait: Wait) -> Result<Arc<SessionCore>> {
        let addrs = crate::pathspec::resolve(addr)?;
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
        let name = server_name.unwrap_or(host);
        let name = tcpls::server_name_for(name)
            .map_err(|e| Error::invalid(format!("'{name}' is not a valid server name: {e}")))?;
        let connector = TcplsConnector::new(config.client_config()?);
        let what = format!("cannot connect to {addr}");
        let session = block_on(wait, &what, async {
            if addrs.len() == 1 {
                connector.connect(addrs[0], name).await
            } else {
                connector.connect_any(&addrs, name, tcpls::HappyEyeballs::default()).await
            }
        })?
        .map_err(|e| Error::connecting(&what, &e))?;
        SessionCore::new(session)
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    pub fn readiness(&self) -> &Arc<Readiness> {
        &self.readiness
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::Closed, "the session was closed by the application"));
        }
        Ok(())
    }

    /// Adds a TCP connection over `spec` (`[LOCAL@]REMOTE`); returns its connection ID.
    pub fn add_path(&self, spec: &str, wait: Wait) -> Result<u32> {
        self.check_open()?;
        let (remote, mut options): (SocketAddr, PathOptions) = crate::pathspec::parse_path(spec)?;
        if let Wait::For(limit) = wait {
            options = options.timeout(limit.max(Duration::from_millis(1)));
        }
        let what = format!("cannot add path {spec}");
        block_on(wait, &what, self.session.join_with(remote, &options))?.map_err(|e| Error::connecting(&what, &e))
    }

    /// Opens a stream.
    pub fn open_stream(self: &Arc<Self>) -> Result<Arc<StreamCore>> {
        self.check_open()?;
        let (send, recv) = self.session.open_stream().map_err(|e| Error::io("cannot open a stream", &e))?;
        Ok(StreamCore::new(send, recv, self.readiness.clone(), self.closed.clone()))
    }

    /// The next stream the peer opened, waiting at most `wait` (a zero wait: `WouldBlock` when
    /// there is none). Concurrent accepts on one session: `Busy`.
    pub fn accept_stream(self: &Arc<Self>, wait: Wait) -> Result<Arc<StreamCore>> {
        self.check_open()?;
        let mut streams = self
            .streams
            .try_lock()
            .map_err(|_| Error::new(ErrorKind::Busy, "another thread is accepting a stream on this session"))?;
        if wait == Wait::For(Duration::ZERO) {
            return match streams.try_recv() {
                Ok((send, recv)) => Ok(StreamCore::new(send, recv, self.readiness.clone(), self.closed.clone())),
                Err(mpsc::error::TryRecvError::Empty) => {
                    Err(Error::new(ErrorKind::WouldBlock, "no stream opened by the peer is waiting"))
                }
                Err(mpsc::error::TryRecvError::Disconnected) => Err(ended("no more streams")),
            };
        }
        match block_on(wait, "no stream opened by the peer", streams.recv())? {
            Some((send, recv)) => Ok(StreamCore::new(send, recv, self.readiness.clone(), self.closed.clone())),
            None => Err(ended("no more streams")),
        }
    }

    /// The next event, waiting at most `wait`; after the session-closed event, `SessionEnded`.
    pub fn next_event(&self, wait: Wait) -> Result<AppEvent> {
        let mut events = self
            .events
            .try_lock()
            .map_err(|_| Error::new(ErrorKind::Busy, "another thread is waiting for this session's events"))?;
        if wait == Wait::For(Duration::ZERO) {
            return match events.try_recv() {
                Ok(e) => Ok(e),
                Err(mpsc::error::TryRecvError::Empty) => Err(Error::new(ErrorKind::WouldBlock, "no event is waiting")),
                Err(mpsc::error::TryRecvError::Disconnected) => Err(ended("no more events")),
            };
        }
        block_on(wait, "no event", events.recv())?.ok_or_else(|| ended("no more events"))
    }

    /// Events dropped because the queue was full.
    pub fn dropped_events(&self) -> u64 {
        self.dropped_events.lock().map(|n| *n).unwrap_or(0)
    }

    /// Every TCP connection of the session.
    pub fn connections(&self) -> Vec<ConnectionStats> {
        self.session
            .connections()
            .into_iter()
            .map(|c| {
                let info = c.tcp_info.unwrap_or_default();
                ConnectionStats {
                    id: c.id,
                    usable: c.usable,
                    local: c.local,
                    remote: c.remote,
                    bytes_sent: c.bytes_sent,
                    bytes_received: c.bytes_received,
                    rtt_us: info.rtt_us,
                    rttvar_us: info.rttvar_us,
                    cwnd: info.cwnd,
                    total_retrans: info.total_retrans,
                    delivery_rate: info.delivery_rate,
                }
            })
            .collect()
    }

    /// Drops connection `conn` at once as if it had failed: what it carried is re-sent on the
    /// others (for a path known to be dead).
    pub fn abandon_path(&self, conn: u32) -> Result<()> {
        self.check_open()?;
        if !self.session.connections().iter().any(|c| c.id == conn) {
            return Err(Error::invalid(format!("the session has no connection {conn}")));
        }
        self.session.abandon_connection(conn, "abandoned by the application");
        Ok(())
    }

    /// Moves the streams steered to `from` over to `to` and closes `from` gracefully.
    pub fn migrate(&self, from: u32, to: u32) -> Result<()> {
        self.check_open()?;
        self.session.migrate(from, to).map_err(|e| Error::io(&format!("cannot migrate from {from} to {to}"), &e))
    }

    /// How streams that are not steered spread over the connections: by lowest RTT (the
    /// default) or round-robin (every connection carries data, e.g. to use two paths at once).
    pub fn set_round_robin(&self, round_robin: bool) -> Result<()> {
        self.check_open()?;
        if round_robin {
            self.session.set_scheduler(Box::new(tcpls::RoundRobin::default()));
        } else {
            self.session.set_scheduler(Box::new(tcpls::LowestRtt));
        }
        Ok(())
    }

    pub fn is_fallback(&self) -> bool {
        self.session.is_fallback()
    }

    /// Graceful close: queued bytes go out, then close_notify; waits for the peer's (at most
    /// `CLOSE_TIMEOUT`, 10 s, then the session is aborted). A second close: `Closed`.
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Err(Error::new(ErrorKind::Closed, "the session was already closed"));
        }
        let outcome = block_on(Wait::For(CLOSE_TIMEOUT), "closing the session", self.session.close());
        match outcome {
            Ok(None) => Ok(()),
            Ok(Some(e)) => Err(Error::new(ErrorKind::SessionEnded, format!("the session ended with an error: {e}"))),
            Err(e) => {
                self.session.abort();
                Err(Error::new(e.kind, format!("{e}: aborted")))
            }
        }
    }

    /// Ends the session at once, dropping what is queued.
    pub fn abort(&self) {
        self.closed.store(true, Ordering::Release);
        self.session.abort();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.session.is_closed()
    }
}

fn ended(what: &str) -> Error {
    Error::new(ErrorKind::SessionEnded, format!("the session is over: {what}"))
}

/// Collects the session's peer streams and events for the application.
struct Pump {
    session: Session,
    streams: mpsc::Sender<(SendStream, RecvStream)>,
    events: mpsc::Sender<AppEvent>,
    readiness: Arc<Readiness>,
    dropped: Arc<Mutex<u64>>,
}

impl Pump {
    async fn run(self) {
        let mut accepting = true;
        let mut closed_reported = false;
        loop {
            // `accept_stream` takes a stream only when it returns it: dropping it when the
            // timer fires first loses nothing.
            let accepted = tokio::select! {
                s = self.session.accept_stream(), if accepting => Some(s),
                _ = tokio::time::sleep(EVENT_POLL_INTERVAL) => None,
            };
            match accepted {
                Some(Some((send, recv))) => {
                    let mut event = AppEvent::new(EventKind::StreamOpened);
                    event.stream = send.id();
                    if self.streams.send((send, recv)).await.is_err() {
                        return;
                    }
                    self.queue(event);
                }
                Some(None) => accepting = false,
                None => {}
            }
            for core in self.session.poll_events() {
                if let Some(event) = AppEvent::from_core(&core) {
                    if event.kind == EventKind::SessionClosed {
                        if closed_reported {
                            continue;
                        }
                        closed_reported = true;
                    }
                    self.queue(event);
                }
            }
            if self.session.is_closed() && !accepting {
                if !closed_reported {
                    let error = self.session.closed().await;
                    let mut event = AppEvent::new(EventKind::SessionClosed);
                    event.detail = error.map(|e| e.to_string()).unwrap_or_default();
                    let _ = self.events.send(event).await;
                    self.readiness.signal();
                }
                return;
            }
        }
    }

    fn queue(&self, event: AppEvent) {
        if self.events.try_send(event).is_err() {
            if let Ok(mut n) = self.dropped.lock() {
                *n += 1;
            }
        }
        self.readiness.signal();
    }
}

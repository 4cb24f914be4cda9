//! The multiplexer shared by the local and the remote proxy: a set of pipes, a table of
//! connections, the pipe scheduler, the reorder buffers, and the per-connection TCP relays.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tcpls_proto::sync::LockExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify};
use tracing::{debug, error, info, warn};

use super::codec::{self, Message, MAX_PAYLOAD, REASON_FIN, REASON_RST};
use super::reorder::{Reorder, ReorderError, ENTRY_OVERHEAD};
use crate::{Config, Stats};

/// Which side of the tunnel this multiplexer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Local,
    Remote,
}

struct Pipe {
    idx: usize,
    peer: SocketAddr,
    tx: mpsc::UnboundedSender<Bytes>,
    queued: AtomicUsize,
    dead: watch::Sender<bool>,
}

/// How the TCP side of a connection is being closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    Open,
    Graceful,
    Reset,
}

enum Item {
    Syn(SocketAddrV4),
    Data(Bytes),
    Fin(u8),
}

struct TxState {
    next_seq: u32,
    fin_sent: bool,
}

struct RxState {
    reorder: Reorder<Item>,
    ready: VecDeque<Item>,
    ready_bytes: usize,
    /// The TCP side is closed: incoming messages are dropped (a FIN still counts).
    closed: bool,
    fin_received: bool,
    /// Remote proxy: the SYN was delivered.
    started: bool,
    /// Remote proxy: the connection to the destination is being opened; what is held for the
    /// connection meanwhile (in order and out of order) is charged to `pending_charged` (and
    /// the session's `pending_total`).
    connecting: bool,
    pending_charged: usize,
    gap_since: Option<Instant>,
    linger_armed: bool,
}

/// A well-framed message as the reorder buffer takes it.
struct Incoming {
    seq: u32,
    item: Item,
    size: usize,
    /// The FIN: the connection's last message.
    terminal: bool,
    is_data: bool,
}

impl Incoming {
    fn of(msg: Message) -> Incoming {
        let seq = msg.seq();
        let is_data = matches!(msg, Message::Data { .. });
        let (item, size, terminal) = match msg {
            Message::Data { payload, .. } => {
                let n = payload.len();
                (Item::Data(payload), n, false)
            }
            Message::Syn { dst, .. } => (Item::Syn(dst), 6, false),
            Message::Fin { reason, .. } => (Item::Fin(reason), 1, true),
        };
        Incoming { seq, item, size, terminal, is_data }
    }
}

/// What offering a message to its connection came to.
enum Offer {
    /// No room yet: the message, back, to offer again once some is made.
    Wait(Incoming),
    /// The connection's TCP side is closed: the message is dropped.
    Closed,
    /// The reorder buffer took the message (or refused it, a protocol error).
    Taken(Result<Delivery, ReorderError>),
}

/// What handing the in-order messages to a connection did.
#[derive(Default)]
struct Delivery {
    /// The SYN arrived: connect to this destination.
    connect: Option<SocketAddrV4>,
    /// The FIN arrived, with this reason.
    fin: Option<u8>,
    /// The messages broke the protocol.
    bad: Option<&'static str>,
    /// Messages moved to the ready queue.
    delivered: usize,
}

pub(crate) struct Conn {
    id: u16,
    tx: Mutex<TxState>,
    rx: Mutex<RxState>,
    rx_notify: Notify,
    space_notify: Notify,
    kill: watch::Sender<Kill>,
}

impl Conn {
    /// Moves the TCP side towards closing; a reset is never downgraded to a graceful close.
    fn set_kill(&self, k: Kill) {
        self.kill.send_if_modified(|cur| {
            let upgrade =
                matches!((*cur, k), (Kill::Open, Kill::Graceful | Kill::Reset) | (Kill::Graceful, Kill::Reset));
            if upgrade {
                *cur = k;
            }
            upgrade
        });
    }

    fn new(id: u16, first_rx: u32, cfg: &Config, started: bool) -> Arc<Conn> {
        Arc::new(Conn {
            id,
            tx: Mutex::new(TxState { next_seq: 0, fin_sent: false }),
            rx: Mutex::new(RxState {
                reorder: Reorder::new(first_rx, cfg.reorder_window, cfg.reorder_bytes_per_conn),
                ready: VecDeque::new(),
                ready_bytes: 0,
                closed: false,
                fin_received: false,
                started,
                connecting: false,
                pending_charged: 0,
                gap_since: None,
                linger_armed: false,
            }),
            rx_notify: Notify::new(),
            space_notify: Notify::new(),
            kill: watch::channel(Kill::Open).0,
        })
    }
}

pub(crate) struct Mux {
    role: Role,
    cfg: Config,
    label: String,
    pipes: Vec<Arc<Pipe>>,
    rr: AtomicUsize,
    space: Notify,
    alive: AtomicUsize,
    conns: Mutex<HashMap<u16, Arc<Conn>>>,
    next_id: Mutex<u16>,
    reorder_total: AtomicUsize,
    /// In-order bytes queued for the TCP connections (bounded by `ready_bytes_total`).
    ready_total: AtomicUsize,
    /// Bytes held (in order or not) for connections whose connect is in progress (bounded by
    /// `pending_connect_bytes_total`).
    pending_total: AtomicUsize,
    /// Woken when buffered bytes (out of order, in order, pending a connect) are released
    /// anywhere.
    reorder_room: Notify,
    shut: AtomicBool,
    closed: watch::Sender<bool>,
    pub(crate) stats: Stats,
}

enum Enqueue {
    Ok,
    NoPipe,
}

impl Mux {
    /// Starts the multiplexer over already established pipes.
    pub(crate) fn start(role: Role, cfg: Config, label: String, streams: Vec<TcpStream>) -> Arc<Mux> {
        let mut pipes = Vec::new();
        let mut halves = Vec::new();
        for (idx, s) in streams.into_iter().enumerate() {
            let _ = s.set_nodelay(true);
            let peer = s.peer_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
            let (rd, wr) = s.into_split();
            let (tx, rx) = mpsc::unbounded_channel();
            pipes.push(Arc::new(Pipe { idx, peer, tx, queued: AtomicUsize::new(0), dead: watch::channel(false).0 }));
            halves.push((rd, wr, rx));
        }
        let mux = Arc::new(Mux {
            role,
            cfg,
            label,
            alive: AtomicUsize::new(pipes.len()),
            pipes,
            rr: AtomicUsize::new(0),
            space: Notify::new(),
            conns: Mutex::new(HashMap::new()),
            next_id: Mutex::new(0),
            reorder_total: AtomicUsize::new(0),
            ready_total: AtomicUsize::new(0),
            pending_total: AtomicUsize::new(0),
            reorder_room: Notify::new(),
            shut: AtomicBool::new(false),
            closed: watch::channel(false).0,
            stats: Stats::default(),
        });
        for (i, (rd, wr, rx)) in halves.into_iter().enumerate() {
            let p = mux.pipes[i].clone();
            tokio::spawn(pipe_writer(mux.clone(), p.clone(), rx, wr));
            tokio::spawn(pipe_reader(mux.clone(), p, rd));
        }
        if mux.pipes.is_empty() {
            mux.shutdown();
        }
        tokio::spawn(gap_sweeper(Arc::downgrade(&mux)));
        mux
    }

    /// Resolves when every pipe is gone.
    pub(crate) async fn closed(&self) {
        let mut rx = self.closed.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.shut.load(Ordering::SeqCst)
    }

    fn pipe_died(&self, pipe: &Pipe, why: &str) {
        if pipe.dead.send_replace(true) {
            return;
        }
        self.stats.pipe_dropped();
        let left = self.alive.fetch_sub(1, Ordering::SeqCst) - 1;
        info!("{}: pipe {} ({}) closed: {why}; {left} pipe(s) left", self.label, pipe.idx, pipe.peer);
        self.space.notify_waiters();
        if left == 0 {
            self.shutdown();
        }
    }

    fn shutdown(&self) {
        if self.shut.swap(true, Ordering::SeqCst) {
            return;
        }
        let conns: Vec<_> = self.conns.lock_unpoisoned().drain().map(|(_, c)| c).collect();
        if !conns.is_empty() {
            warn!("{}: no pipe left, resetting {} connection(s)", self.label, conns.len());
        }
        for c in conns {
            c.tx.lock_unpoisoned().fin_sent = true;
            self.close_rx(&c);
            c.set_kill(Kill::Reset);
        }
        self.space.notify_waiters();
        self.closed.send_replace(true);
    }

    fn blocked(&self, p: &Pipe) -> bool {
        p.queued.load(Ordering::Relaxed) >= self.cfg.pipe_queue_limit
    }

    fn any_unblocked(&self) -> bool {
        self.pipes.iter().any(|p| !*p.dead.borrow() && !self.blocked(p))
    }

    /// Puts `msg` on a pipe: round robin over the pipes whose write side is not blocked, else
    /// over any live pipe (control messages must never wait). A message never spans pipes.
    fn enqueue(&self, mut msg: Bytes) -> Enqueue {
        let n = self.pipes.len();
        if n == 0 {
            return Enqueue::NoPipe;
        }
        let start = self.rr.fetch_add(1, Ordering::Relaxed);
        for pass in 0..2 {
            for k in 0..n {
                let p = &self.pipes[(start + k) % n];
                if *p.dead.borrow() || (pass == 0 && self.blocked(p)) {
                    continue;
                }
                let len = msg.len();
                p.queued.fetch_add(len, Ordering::Relaxed);
                match p.tx.send(msg) {
                    Ok(()) => return Enqueue::Ok,
                    Err(e) => {
                        p.queued.fetch_sub(len, Ordering::Relaxed);
                        msg = e.0;
                    }
                }
            }
        }
        Enqueue::NoPipe
    }

    /// Sends a data or SYN message of `conn`, waiting while every pipe is blocked. Returns false
    /// if the connection already sent its FIN or no pipe is left. Cancel safe: the sequence
    /// number is taken only when the message is queued.
    async fn send_seq(&self, conn: &Conn, build: impl Fn(u32) -> Bytes) -> bool {
        loop {
            let notified = self.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut tx = conn.tx.lock_unpoisoned();
                if tx.fin_sent || self.is_closed() {
                    return false;
                }
                if self.any_unblocked() {
                    let msg = build(tx.next_seq);
                    return match self.enqueue(msg) {
                        Enqueue::Ok => {
                            tx.next_seq = tx.next_seq.wrapping_add(1);
                            true
                        }
                        Enqueue::NoPipe => false,
                    };
                }
            }
            notified.await;
        }
    }

    async fn send_data(&self, conn: &Conn, chunk: &[u8]) -> bool {
        self.send_seq(conn, |seq| match codec::encode_data(conn.id, seq, chunk) {
            Ok(b) => b,
            Err(_) => Bytes::new(), // unreachable: chunks are 1..=4096 bytes, id != 0
        })
        .await
    }

    /// Sends the FIN of `conn` (once). Never waits.
    fn send_fin(&self, conn: &Conn, reason: u8) -> bool {
        let mut tx = conn.tx.lock_unpoisoned();
        if tx.fin_sent {
            return false;
        }
        tx.fin_sent = true;
        let msg = Message::Fin { conn_id: conn.id, seq: tx.next_seq, reason };
        tx.next_seq = tx.next_seq.wrapping_add(1);
        if let Ok(b) = msg.to_bytes() {
            let _ = self.enqueue(b);
        }
        true
    }

    fn close_rx(&self, conn: &Conn) {
        let mut rx = conn.rx.lock_unpoisoned();
        rx.closed = true;
        let freed = rx.reorder.clear();
        self.reorder_total.fetch_sub(freed, Ordering::Relaxed);
        if freed > 0 {
            self.reorder_room.notify_waiters();
        }
        rx.ready.clear();
        self.ready_total.fetch_sub(rx.ready_bytes, Ordering::Relaxed);
        let released = rx.ready_bytes + freed;
        rx.ready_bytes = 0;
        rx.gap_since = None;
        drop(rx);
        self.connect_done(conn);
        if released > 0 {
            self.reorder_room.notify_waiters();
        }
        conn.space_notify.notify_waiters();
        conn.rx_notify.notify_one();
    }

    /// The connect of `conn` ended (or the connection is closing): the data held for it no
    /// longer counts as pending.
    fn connect_done(&self, conn: &Conn) {
        let mut rx = conn.rx.lock_unpoisoned();
        rx.connecting = false;
        let charged = std::mem::take(&mut rx.pending_charged);
        drop(rx);
        if charged > 0 {
            self.pending_total.fetch_sub(charged, Ordering::Relaxed);
            self.reorder_room.notify_waiters();
            conn.space_notify.notify_waiters();
        }
    }

    /// In-order bytes queued for the TCP connections, and the bytes held (in order or not) for
    /// connections whose connect is in progress, over the whole session.
    pub(crate) fn queued_bytes(&self) -> (usize, usize) {
        (self.ready_total.load(Ordering::Relaxed), self.pending_total.load(Ordering::Relaxed))
    }

    /// Frees the connection ID once both FINs went by, or after the linger time otherwise.
    fn maybe_remove(self: &Arc<Self>, conn: &Arc<Conn>) {
        let fin_sent = conn.tx.lock_unpoisoned().fin_sent;
        let mut rx = conn.rx.lock_unpoisoned();
        if fin_sent && rx.fin_received {
            drop(rx);
            self.remove(conn);
        } else if (fin_sent || rx.closed) && !rx.linger_armed {
            rx.linger_armed = true;
            drop(rx);
            let mux = Arc::downgrade(self);
            let c = conn.clone();
            let linger = self.cfg.linger;
            tokio::spawn(async move {
                tokio::time::sleep(linger).await;
                if let Some(m) = mux.upgrade() {
                    m.remove(&c);
                }
            });
        }
    }

    fn remove(&self, conn: &Arc<Conn>) {
        let mut t = self.conns.lock_unpoisoned();
        if t.get(&conn.id).is_some_and(|c| Arc::ptr_eq(c, conn)) {
            t.remove(&conn.id);
        }
    }

    /// The TCP side failed (or a protocol error): RST it and tell the peer with FIN 0x99.
    fn reset_conn(self: &Arc<Self>, conn: &Arc<Conn>) {
        self.send_fin(conn, REASON_RST);
        self.close_rx(conn);
        conn.set_kill(Kill::Reset);
        self.maybe_remove(conn);
    }

    fn protocol_error(self: &Arc<Self>, conn: &Arc<Conn>, pipe: &Pipe, why: &dyn std::fmt::Display) {
        self.stats.rejected();
        warn!(
            "{}: ill-formed message for connection {} on pipe {} ({}): {why}; resetting that connection",
            self.label, conn.id, pipe.idx, pipe.peer
        );
        self.reset_conn(conn);
    }

    /// Local proxy: opens a tunneled connection for an accepted local TCP connection.
    pub(crate) async fn open(self: &Arc<Self>, stream: TcpStream, dst: SocketAddrV4) -> io::Result<u16> {
        let conn = {
            let mut t = self.conns.lock_unpoisoned();
            let mut next = self.next_id.lock_unpoisoned();
            let mut found = None;
            for _ in 0..u16::MAX {
                *next = if *next == u16::MAX { 1 } else { *next + 1 };
                if !t.contains_key(&*next) {
                    found = Some(*next);
                    break;
                }
            }
            let Some(id) = found else {
                return Err(io::Error::other("all 65535 TM3 connection IDs are in use"));
            };
            let c = Conn::new(id, 0, &self.cfg, true);
            t.insert(id, c.clone());
            c
        };
        self.stats.stream();
        let id = conn.id;
        let syn = Message::Syn { conn_id: id, seq: 0, dst };
        let sent = self.send_seq(&conn, |_| syn.to_bytes().unwrap_or_default()).await;
        if !sent {
            self.remove(&conn);
            return Err(io::Error::other("no TM3 pipe left"));
        }
        debug!("{}: connection {id} to {dst} opened", self.label);
        self.spawn_io(conn, stream);
        Ok(id)
    }

    fn spawn_io(self: &Arc<Self>, conn: Arc<Conn>, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let (rd, wr) = stream.into_split();
        tokio::spawn(conn_reader(self.clone(), conn.clone(), rd));
        tokio::spawn(conn_writer(self.clone(), conn, wr));
    }

    fn spawn_connect(self: &Arc<Self>, conn: Arc<Conn>, dst: SocketAddrV4) {
        let mux = self.clone();
        if let Err(r) = self.cfg.dest_policy.check_on_this_host(IpAddr::V4(*dst.ip())) {
            info!("{}: connection {}: {r}; sending FIN 0x99", self.label, conn.id);
            self.stats.refused_dest();
            self.reset_conn(&conn);
            return;
        }
        tokio::spawn(async move {
            let r = tokio::time::timeout(mux.cfg.connect_timeout, TcpStream::connect(dst)).await;
            let r = match r {
                Ok(r) => r,
                Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
            };
            match r {
                Ok(s) => {
                    if *conn.kill.borrow() != Kill::Open {
                        let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                        return;
                    }
                    debug!("{}: connection {} to {dst} established", mux.label, conn.id);
                    mux.connect_done(&conn);
                    mux.spawn_io(conn, s);
                }
                Err(e) => {
                    info!("{}: connection {}: connect to {dst} failed: {e}; sending FIN 0x99", mux.label, conn.id);
                    mux.reset_conn(&conn);
                }
            }
        });
    }

    /// Handles one well-framed message from `pipe`.
    async fn on_message(self: &Arc<Self>, pipe: &Pipe, msg: Message) {
        let Some(conn) = self.conn_for(&msg) else { return };
        if let Err(e) = msg.check() {
            return self.protocol_error(&conn, pipe, &e);
        }
        if matches!(msg, Message::Syn { .. }) && self.role == Role::Local {
            return self.protocol_error(&conn, pipe, &"SYN sent towards the local proxy");
        }
        // Wait while the connection's in-order backlog is above the high-water mark.
        let mut incoming = Incoming::of(msg);
        let delivery = loop {
            let notified = conn.space_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let room = self.reorder_room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match self.offer(&conn, incoming) {
                Offer::Closed => return,
                Offer::Taken(result) => break result,
                Offer::Wait(back) => incoming = back,
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = &mut room => {}
            }
        };
        match delivery {
            Ok(delivery) => self.act_on(&conn, pipe, delivery),
            Err(e) => self.protocol_error(&conn, pipe, &e),
        }
    }

    /// The connection a message is for: looked up, or created by the remote proxy for a new
    /// ID (or one the local proxy reused). None: the message is dropped.
    fn conn_for(self: &Arc<Self>, msg: &Message) -> Option<Arc<Conn>> {
        let id = msg.conn_id();
        let is_syn = matches!(msg, Message::Syn { .. });
        // Look up or create under one lock: the SYN and the data right after it may arrive on
        // two pipes at the same time.
        let mut t = self.conns.lock_unpoisoned();
        match t.get(&id).cloned() {
            Some(c) => {
                if self.role == Role::Remote && is_syn && msg.seq() == 0 && c.tx.lock_unpoisoned().fin_sent {
                    // The local proxy reused the ID of a connection we already closed.
                    debug!("{}: connection ID {id} reused by the peer", self.label);
                    Some(self.new_remote_conn(&mut t, id))
                } else {
                    Some(c)
                }
            }
            None if self.role == Role::Remote && !self.is_closed() => Some(self.new_remote_conn(&mut t, id)),
            None => {
                debug!("{}: {msg:?} for unknown connection dropped", self.label);
                None
            }
        }
    }

    /// Offers a message to its connection's reorder buffer, if the bounds leave room for it
    /// now, and hands the messages that are in order then to the connection.
    fn offer(self: &Arc<Self>, conn: &Arc<Conn>, m: Incoming) -> Offer {
        let mut rx = conn.rx.lock_unpoisoned();
        if rx.closed {
            if m.terminal {
                rx.fin_received = true;
                drop(rx);
                self.maybe_remove(conn);
            }
            return Offer::Closed;
        }
        if !self.has_room(&rx, &m) {
            return Offer::Wait(m);
        }
        let cost = m.size + ENTRY_OVERHEAD;
        if m.seq != rx.reorder.expected()
            && self.reorder_total.load(Ordering::Relaxed) + cost > self.cfg.reorder_bytes_total
        {
            // Only reachable with an empty per-connection buffer: refuse to start buffering for
            // yet another connection.
            return Offer::Taken(Err(ReorderError::Overflow {
                bytes: self.reorder_total.load(Ordering::Relaxed) + cost,
                max: self.cfg.reorder_bytes_total,
            }));
        }
        let mut out = Vec::new();
        let before = rx.reorder.pending_bytes();
        let r = rx.reorder.insert(m.seq, m.item, m.size, m.terminal, &mut out);
        let after = rx.reorder.pending_bytes();
        if after >= before {
            self.reorder_total.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.reorder_total.fetch_sub(before - after, Ordering::Relaxed);
        }
        let mut delivery = Delivery::default();
        if r.is_ok() {
            if rx.reorder.pending_len() == 0 {
                rx.gap_since = None;
            } else if rx.gap_since.is_none() || !out.is_empty() {
                rx.gap_since = Some(Instant::now());
            }
            // Hand the in-order messages over inside the same critical section, so that two
            // pipe readers cannot interleave them.
            delivery = self.hand_over(&mut rx, out);
        }
        if rx.connecting {
            self.charge_pending(&mut rx);
        }
        Offer::Taken(r.map(|()| delivery))
    }

    /// Whether the bounds on buffered bytes let `m` in now (otherwise it waits).
    fn has_room(&self, rx: &RxState, m: &Incoming) -> bool {
        let in_order = m.seq == rx.reorder.expected();
        let cost = m.size + ENTRY_OVERHEAD;
        // An early message waits while its connection's reorder buffer is full: the missing
        // message is on another pipe (a pipe is FIFO and sequence numbers are taken in enqueue
        // order), whose reader is never held up by this rule, so this cannot deadlock; a
        // message that never comes is handled by the gap timeout. The same holds for the bound
        // over all connections.
        let ooo_full = !in_order
            && rx.reorder.pending_len() > 0
            && (rx.reorder.pending_bytes() + cost > self.cfg.reorder_bytes_per_conn
                || self.reorder_total.load(Ordering::Relaxed) + cost > self.cfg.reorder_bytes_total);
        // Data for a connection whose connect is in progress waits while its share or the
        // session's is used up: the connect ends (at most `connect_timeout`) whatever the pipes
        // do, so this cannot deadlock either.
        let pending_full = m.is_data
            && rx.connecting
            && (rx.ready_bytes + rx.reorder.pending_bytes() + m.size > self.cfg.pending_connect_bytes
                || self.pending_total.load(Ordering::Relaxed) + m.size > self.cfg.pending_connect_bytes_total);
        // In-order data waits while the session's queues for TCP are full: they drain to the
        // TCP connections, not through the pipes.
        let ready_full =
            m.is_data && in_order && self.ready_total.load(Ordering::Relaxed) + m.size > self.cfg.ready_bytes_total;
        rx.ready_bytes <= self.cfg.ready_high_water && !ooo_full && !pending_full && !ready_full
    }

    /// Moves the messages that left the reorder buffer in order to the connection's ready
    /// queue (the SYN starts the connect), stopping at the first that breaks the protocol.
    fn hand_over(&self, rx: &mut RxState, out: Vec<Item>) -> Delivery {
        let mut d = Delivery::default();
        for it in out {
            match it {
                Item::Syn(dst) => {
                    if rx.started {
                        d.bad = Some("second SYN");
                        break;
                    }
                    rx.started = true;
                    rx.connecting = true;
                    d.connect = Some(dst);
                }
                _ if !rx.started => {
                    d.bad = Some("message before the SYN");
                    break;
                }
                Item::Data(b) => {
                    rx.ready_bytes += b.len();
                    self.ready_total.fetch_add(b.len(), Ordering::Relaxed);
                    rx.ready.push_back(Item::Data(b));
                    d.delivered += 1;
                }
                Item::Fin(r) => {
                    rx.fin_received = true;
                    rx.ready.push_back(Item::Fin(r));
                    d.fin = Some(r);
                    d.delivered += 1;
                }
            }
        }
        d
    }

    /// Everything held for a connection whose connect is in progress, in order or not, counts
    /// against the pending bounds.
    fn charge_pending(&self, rx: &mut RxState) {
        let held = rx.ready_bytes + rx.reorder.pending_bytes();
        if held >= rx.pending_charged {
            self.pending_total.fetch_add(held - rx.pending_charged, Ordering::Relaxed);
        } else {
            self.pending_total.fetch_sub(rx.pending_charged - held, Ordering::Relaxed);
        }
        rx.pending_charged = held;
    }

    /// What follows a delivery: wake the waiting readers and the connection's writer, start
    /// the connect, answer a FIN.
    fn act_on(self: &Arc<Self>, conn: &Arc<Conn>, pipe: &Pipe, d: Delivery) {
        if d.delivered > 1 {
            // Early messages left the reorder buffer: wake readers waiting for room.
            conn.space_notify.notify_waiters();
            self.reorder_room.notify_waiters();
        }
        if let Some(why) = d.bad {
            return self.protocol_error(conn, pipe, &why);
        }
        if d.delivered > 0 {
            conn.rx_notify.notify_one();
        }
        if let Some(dst) = d.connect {
            self.spawn_connect(conn.clone(), dst);
        }
        if let Some(r) = d.fin {
            // Half-open connections are not supported: answer with our own FIN right away.
            self.send_fin(conn, r);
            self.maybe_remove(conn);
        }
    }

    fn new_remote_conn(self: &Arc<Self>, table: &mut HashMap<u16, Arc<Conn>>, id: u16) -> Arc<Conn> {
        let c = Conn::new(id, 0, &self.cfg, false);
        table.insert(id, c.clone());
        self.stats.stream();
        // A connection whose SYN never shows up is forgotten after the linger time.
        let mux = Arc::downgrade(self);
        let c2 = c.clone();
        let linger = self.cfg.linger;
        tokio::spawn(async move {
            tokio::time::sleep(linger).await;
            if let Some(m) = mux.upgrade() {
                if !c2.rx.lock_unpoisoned().started {
                    debug!("{}: connection {} never got its SYN, dropped", m.label, c2.id);
                    m.close_rx(&c2);
                    m.remove(&c2);
                }
            }
        });
        c
    }
}

async fn pipe_writer(mux: Arc<Mux>, pipe: Arc<Pipe>, mut rx: mpsc::UnboundedReceiver<Bytes>, wr: OwnedWriteHalf) {
    let mut dead = pipe.dead.subscribe();
    let mut w = BufWriter::with_capacity(64 * 1024, wr);
    let res: io::Result<()> = async {
        loop {
            let first = tokio::select! {
                m = rx.recv() => m,
                _ = dead.wait_for(|d| *d) => None,
            };
            let Some(mut m) = first else { return Ok(()) };
            loop {
                let len = m.len();
                tokio::select! {
                    r = w.write_all(&m) => r?,
                    _ = dead.wait_for(|d| *d) => return Ok(()),
                }
                pipe.queued.fetch_sub(len, Ordering::Relaxed);
                mux.space.notify_waiters();
                match rx.try_recv() {
                    Ok(next) => m = next,
                    Err(_) => break,
                }
            }
            tokio::select! {
                r = w.flush() => r?,
                _ = dead.wait_for(|d| *d) => return Ok(()),
            }
        }
    }
    .await;
    if let Err(e) = res {
        mux.pipe_died(&pipe, &format!("write error: {e}"));
    }
    let mut wr = w.into_inner();
    let _ = wr.shutdown().await;
}

async fn pipe_reader(mux: Arc<Mux>, pipe: Arc<Pipe>, mut rd: OwnedReadHalf) {
    let mut dead = pipe.dead.subscribe();
    let mut buf = BytesMut::with_capacity(128 * 1024);
    let why = loop {
        match codec::decode(&mut buf) {
            Ok(Some(msg)) => {
                mux.on_message(&pipe, msg).await;
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                error!(
                    "{}: pipe {} ({}): {e}; this pipe is no longer trusted and is closed \
                     (messages it would have carried are lost)",
                    mux.label, pipe.idx, pipe.peer
                );
                break format!("untrusted: {e}");
            }
        }
        if buf.capacity() - buf.len() < 8 * 1024 {
            buf.reserve(128 * 1024);
        }
        let r = tokio::select! {
            r = rd.read_buf(&mut buf) => r,
            _ = dead.wait_for(|d| *d) => break "closed".to_string(),
        };
        match r {
            Ok(0) => {
                break if buf.is_empty() {
                    "peer closed the pipe".to_string()
                } else {
                    format!("peer closed the pipe in the middle of a message ({} bytes pending)", buf.len())
                }
            }
            Ok(_) => {}
            Err(e) => break format!("read error: {e}"),
        }
    };
    mux.pipe_died(&pipe, &why);
}

/// Resets connections whose missing message has not arrived within the gap timeout (it was
/// lost with a dropped pipe).
async fn gap_sweeper(mux: Weak<Mux>) {
    let period = Duration::from_millis(250);
    loop {
        tokio::time::sleep(period).await;
        let Some(m) = mux.upgrade() else { return };
        if m.is_closed() {
            return;
        }
        let conns: Vec<_> = m.conns.lock_unpoisoned().values().cloned().collect();
        for c in conns {
            let stale = {
                let rx = c.rx.lock_unpoisoned();
                rx.gap_since.filter(|t| t.elapsed() >= m.cfg.gap_timeout).map(|_| rx.reorder.expected())
            };
            if let Some(seq) = stale {
                warn!(
                    "{}: connection {}: message {seq} missing for {:?} (lost with a dropped pipe?); resetting it",
                    m.label, c.id, m.cfg.gap_timeout
                );
                m.reset_conn(&c);
            }
        }
    }
}

fn set_rst(wr: &OwnedWriteHalf) {
    let s: &TcpStream = wr.as_ref();
    let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
}

async fn conn_reader(mux: Arc<Mux>, conn: Arc<Conn>, mut rd: OwnedReadHalf) {
    let mut kill = conn.kill.subscribe();
    let mut buf = vec![0u8; 16 * MAX_PAYLOAD];
    loop {
        if *kill.borrow() != Kill::Open {
            break;
        }
        let r = tokio::select! {
            biased;
            _ = kill.changed() => continue,
            r = rd.read(&mut buf) => r,
        };
        match r {
            Ok(0) => {
                debug!("{}: connection {}: TCP FIN, sending FIN 0x88", mux.label, conn.id);
                mux.send_fin(&conn, REASON_FIN);
                mux.close_rx(&conn);
                conn.set_kill(Kill::Graceful);
                mux.maybe_remove(&conn);
                return;
            }
            Err(e) => {
                debug!("{}: connection {}: TCP error ({e}), sending FIN 0x99", mux.label, conn.id);
                mux.reset_conn(&conn);
                return;
            }
            Ok(n) => {
                let mut ok = true;
                for chunk in buf[..n].chunks(MAX_PAYLOAD) {
                    if !mux.send_data(&conn, chunk).await {
                        ok = false;
                        break;
                    }
                }
                if !ok {
                    break;
                }
            }
        }
    }
    // The connection is closing: on a graceful close, read and drop what the endpoint still
    // sends for a moment so that the close does not turn into a RST.
    if *kill.borrow() == Kill::Reset {
        return;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            tokio::select! {
                biased;
                _ = kill.wait_for(|k| *k == Kill::Reset) => return,
                r = rd.read(&mut buf) => if !matches!(r, Ok(n) if n > 0) { return },
            }
        }
    })
    .await;
}

async fn conn_writer(mux: Arc<Mux>, conn: Arc<Conn>, mut wr: OwnedWriteHalf) {
    let mut kill = conn.kill.subscribe();
    loop {
        let k = *kill.borrow();
        match k {
            Kill::Open => {}
            Kill::Graceful => {
                let _ = wr.shutdown().await;
                return;
            }
            Kill::Reset => {
                set_rst(&wr);
                // Dropping the write half would send a FIN before the RST.
                wr.forget();
                return;
            }
        }
        let item = {
            let mut rx = conn.rx.lock_unpoisoned();
            let it = rx.ready.pop_front();
            if let Some(Item::Data(b)) = &it {
                rx.ready_bytes -= b.len();
                let before = mux.ready_total.fetch_sub(b.len(), Ordering::Relaxed);
                if before + MAX_PAYLOAD > mux.cfg.ready_bytes_total {
                    // A pipe reader may be waiting for room in the session's queues.
                    mux.reorder_room.notify_waiters();
                }
            }
            it
        };
        match item {
            None => {
                tokio::select! {
                    _ = conn.rx_notify.notified() => {}
                    _ = kill.changed() => {}
                }
            }
            Some(Item::Data(b)) => {
                conn.space_notify.notify_waiters();
                let r = tokio::select! {
                    r = wr.write_all(&b) => r,
                    _ = kill.changed() => Ok(()),
                };
                if let Err(e) = r {
                    debug!("{}: connection {}: TCP write error ({e}), sending FIN 0x99", mux.label, conn.id);
                    mux.reset_conn(&conn);
                }
            }
            Some(Item::Fin(reason)) => {
                if reason == REASON_FIN {
                    debug!("{}: connection {}: FIN 0x88 delivered, closing", mux.label, conn.id);
                    mux.close_rx(&conn);
                    conn.set_kill(Kill::Graceful);
                } else {
                    debug!("{}: connection {}: FIN 0x99 delivered, resetting", mux.label, conn.id);
                    mux.close_rx(&conn);
                    conn.set_kill(Kill::Reset);
                }
            }
            Some(Item::Syn(_)) => {}
        }
    }
}

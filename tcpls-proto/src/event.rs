//! What the core tells the application and the IO layer.

use std::net::SocketAddr;

use crate::error::Error;
use crate::frame::PeerTcpInfo;

/// Identifies one TCP connection of a session (PROTOCOL.md §3: the initial one is 0).
pub type ConnId = u32;
/// Identifies one stream of a session.
pub type StreamId = u32;

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The first handshake completed; `fallback` when the peer speaks plain TLS only.
    Established {
        fallback: bool,
    },
    /// The peer opened a stream: accept it with `accept_stream`.
    StreamOpened(StreamId),
    /// New bytes, the end of the stream, or a reset can be read.
    StreamReadable(StreamId),
    /// A blocked writer may write again.
    StreamWritable(StreamId),
    /// The server handed out join tokens (client side).
    TokensReceived {
        total: usize,
    },
    /// Server: a join token was issued; the IO layer indexes it to route joining connections.
    TokenIssued {
        sequence: u32,
        token: [u8; 32],
    },
    /// Server: a token was used by a join and is no longer valid.
    TokenUsed {
        sequence: u32,
    },
    /// Server: the accepted connection asked to join another session (see `Session::accepted`).
    JoinRequested,
    /// An additional connection completed its handshake (client) or was joined (server).
    ConnectionEstablished {
        conn: ConnId,
    },
    /// A stream's steering changed.
    StreamSteered {
        stream: StreamId,
        conn: Option<ConnId>,
    },
    /// The peer announced another address of its own.
    PeerAddressAdded {
        address_id: u8,
        addr: SocketAddr,
    },
    PeerAddressRemoved {
        address_id: u8,
    },
    /// The peer asks us to use this TCP user timeout on a connection's socket.
    UserTimeoutRequested {
        conn: ConnId,
        timeout_ms: u32,
    },
    /// The peer asks us to switch the TCP congestion control of a connection.
    CongestionControlRequested {
        conn: ConnId,
        name: String,
    },
    /// The peer wants our tcp_info view of a connection: answer with `send_tcp_info`.
    TcpInfoRequested {
        conn: ConnId,
    },
    PeerTcpInfo {
        conn: ConnId,
        info: PeerTcpInfo,
    },
    /// Round-trip time measured with RTT Probe / RTT Echo.
    RttMeasured {
        conn: ConnId,
        rtt_us: u64,
    },
    /// The address and port the peer sees for our end of a connection.
    AddressEchoed {
        conn: ConnId,
        addr: SocketAddr,
    },
    /// The peer caps our sending rate on a connection (0 = no cap).
    RateLimited {
        conn: ConnId,
        bytes_per_second: u64,
    },
    /// The peer asked that a stream be sent on another connection (Stream Steer); the session
    /// honours it when that connection can carry data.
    SteerRequested {
        stream: StreamId,
        conn: ConnId,
    },
    /// The peer sent close_notify on every connection: it sends and opens nothing more.
    PeerClosed,
    /// One TCP connection ended; `error` is None after a clean close_notify exchange.
    ConnectionClosed {
        conn: ConnId,
        error: Option<Error>,
    },
    /// A connection failed with unacknowledged records; they are being re-sent on the others.
    FailedOver {
        conn: ConnId,
    },
    /// A connection went silent past its retransmission deadline while another can carry its
    /// records: no new data goes on it, and its unacknowledged records are re-sent on the
    /// others. It is given up after `SessionConfig::silence_timeout` (then `ConnectionClosed`).
    PathSuspected {
        conn: ConnId,
    },
    /// A suspect connection acknowledged again: it carries data once more.
    PathRecovered {
        conn: ConnId,
    },
    /// Every connection was lost; the session waits for a rejoin (client: add a connection).
    AllConnectionsLost,
    /// The whole session ended.
    Closed {
        error: Option<Error>,
    },
}

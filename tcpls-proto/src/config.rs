//! Session settings that are ours (rustls configs carry the TLS ones).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::record::cipher::DEFAULT_KEY_UPDATE_RECORDS;
use crate::record::MAX_PLAINTEXT;

/// Fills a buffer with cryptographically secure random bytes. Injected so that tests are
/// deterministic and the core never reaches for a global source itself.
pub type RandomSource = Arc<dyn Fn(&mut [u8]) + Send + Sync>;

/// The operating system's CSPRNG (through aws-lc-rs).
pub fn system_random() -> RandomSource {
    Arc::new(|buf: &mut [u8]| {
        use aws_lc_rs::rand::SecureRandom;
        // SystemRandom fails only if the OS has no entropy source at all; zeroed tokens would
        // be guessable, so this is the one place where we prefer to stop.
        #[allow(clippy::expect_used)]
        aws_lc_rs::rand::SystemRandom::new().fill(buf).expect("operating system random source failed");
    })
}

/// Client: the TLS server name (SNI) of a joining connection, from the token it will spend
/// (None: the session's server name). A farm behind a load balancer routes joins by it
/// (docs/TUNNEL.md, "Farm").
pub type JoinServerName = Arc<dyn Fn(&[u8; 32]) -> Option<rustls::pki_types::ServerName<'static>> + Send + Sync>;

/// What every stream may queue whatever the session's `send_budget`: two full records, so one
/// can be in flight (unacknowledged) while the next is written.
pub const SEND_FLOOR: usize = 2 * MAX_PLAINTEXT;

/// Where a stream's receive window starts when it follows the reader
/// (`SessionConfig::receive_autotune`): four times the initial credit.
pub const RECEIVE_WINDOW_START: u64 = 4 * crate::stream::INITIAL_MAX_STREAM_DATA;

/// Tunables of a TCPLS session. `Default` gives the documented defaults.
#[derive(Clone)]
pub struct SessionConfig {
    /// Largest record plaintext we send (PROTOCOL.md §2): 16 KiB by default; ~1400 bytes
    /// smooths reordering when one stream is spread over several paths.
    pub record_size: usize,
    /// How far a stream's receive window extends beyond what the application has read: with
    /// `receive_autotune`, the most it grows to. Default 32 MiB: credit is granted when half
    /// the window is read, so a window keeps at least half of itself in flight, and a 1 Gbit/s,
    /// 100 ms path needs 12.5 MB in flight.
    pub stream_receive_window: u64,
    /// Each stream's receive window starts at [`RECEIVE_WINDOW_START`] and doubles, up to
    /// `stream_receive_window`, whenever the application reads half of it within two RTTs of
    /// the last Max Stream Data: the window follows what the reader takes, so a slow reader's
    /// peer cannot fill more than it needs. Off: every window is `stream_receive_window`.
    /// Default on.
    pub receive_autotune: bool,
    /// Most receive credit the session hands out over all its streams beyond a floor of 64 KiB
    /// per stream: what bounds the memory a peer can make us buffer (without it, 4096 streams
    /// with 32 MiB windows would be 128 GiB). Streams over the budget get credit as others are
    /// read; each stream always keeps 64 KiB, so one unread stream never stalls the others.
    pub receive_budget: u64,
    /// Bytes the application may queue on one stream before writes block (its data stays
    /// queued until the peer acknowledges it, with failover); the session's send budget also
    /// bounds it. Default 32 MiB (a long fat path's stream needs its bandwidth-delay product).
    pub stream_send_buffer: usize,
    /// Most bytes queued over all the session's streams (written, not yet acknowledged),
    /// shared fairly: a stream may hold the budget divided by the streams holding data, and
    /// always [`SEND_FLOOR`] (so no stream starves), within its `stream_send_buffer`. A stream
    /// over its share takes no more (`write` returns 0; `StreamWritable` follows). Memory for
    /// queued stream data is at most `send_budget + streams × SEND_FLOOR`. Default 32 MiB: a
    /// 1 Gbit/s, 100 ms path has 12.5 MB in flight, and the streams also hold what waits in
    /// the kernel and for the receiver's acknowledgement (16 MiB held such a path to 0.89×
    /// plain TCP's goodput).
    ///
    /// With `send_autotune` (the default) this is the most the budget may grow to: the budget
    /// in use follows what the connections carry (twice their bandwidth-delay product, at
    /// least [`SEND_BUDGET_FLOOR`](crate::SEND_BUDGET_FLOOR)); ARCHITECTURE.md, "The send
    /// budget follows the path".
    pub send_budget: usize,
    /// The send budget in use follows the connections' bandwidth-delay product (from what the
    /// IO layer reports with `Session::set_path`), up to `send_budget`; it starts at
    /// [`SEND_BUDGET_FLOOR`](crate::SEND_BUDGET_FLOOR). Off: the budget is `send_budget`,
    /// always. An IO layer that cannot report TCP_INFO turns it off. Default on.
    pub send_autotune: bool,
    /// Stream bytes the scheduler seals for one stream before it moves on to the next one with
    /// data (deficit round robin; ARCHITECTURE.md, "Frames and packetization"): several full
    /// records per turn keep zero-copy placement and large socket writes with many streams.
    /// Default 64 KiB (4 full records); 0 or a value up to one record gives record-by-record
    /// round robin.
    pub stream_quantum: usize,
    /// Peer-opened streams open at once; more are refused with Stream Reset code 0x1.
    pub max_concurrent_streams: usize,
    /// New Token frames a server hands out on the initial connection.
    pub tokens: u32,
    /// Extra server addresses announced with New Address.
    pub advertise: Vec<SocketAddr>,
    /// Records sealed under one key before KeyUpdate.
    pub key_update_records: u64,
    /// Sealed bytes kept ready per connection before the packetizer waits for the socket.
    /// Small values decide later what to send (late multiplexing); large ones need fewer wakeups.
    pub transmit_high_water: usize,
    /// TCP congestion controls the peer may ask us to use on a connection (Congestion Control
    /// frame); a name not listed is refused. Empty: every request is refused.
    pub congestion_control_allowed: Vec<String>,
    pub random: RandomSource,
    /// Acknowledge records and keep what was sent until acknowledged, so that the records of a
    /// failed connection are re-sent on the others (PROTOCOL.md §5). Off: no retention (less
    /// memory, for constrained devices), a failed connection loses what it carried: if it
    /// carried stream data and streams are open, the whole session ends with an error that
    /// says so.
    pub failover: bool,
    /// With failover, how long a session whose every connection was lost waits for the client
    /// to join a new one (break-before-make); zero: the session ends with its last connection.
    pub rejoin_timeout: std::time::Duration,
    /// With failover, most sent records kept per connection until the peer acknowledges them;
    /// beyond, the oldest are released unacknowledged (their failover guarantee is lost,
    /// counted in `SessionStats::unacked_released`). A peer that reads without acknowledging
    /// cannot grow what we keep past this (docs/SECURITY.md). Default 65536 (1 GiB of full records in
    /// flight; a log entry costs about 64 bytes).
    pub max_unacked_records: usize,
    /// Same bound on the control frames kept in those records (bytes per connection;
    /// default 1 MiB).
    pub max_unacked_control: usize,
    /// ACK after this many ack-eliciting records (PROTOCOL.md §5; default 16).
    pub ack_every_records: u32,
    /// ... or this long after the first unacknowledged one (default 25 ms).
    pub ack_delay: std::time::Duration,
    /// Failure detection by keepalive: after this long without receiving anything on a
    /// connection, send it a Ping; if nothing comes back within `ping_timeout`, the connection
    /// is considered failed (and fails over). None (default): rely on TCP (RST, FIN, user timeout).
    pub keepalive: Option<std::time::Duration>,
    pub ping_timeout: std::time::Duration,
    /// Loss detection from record ACKs (PROTOCOL.md §5, with failover on): a connection whose
    /// oldest unacknowledged record is older than its retransmission deadline,
    /// max(srtt + 4·rttvar + `ack_delay`, `min_retransmit_timeout`), while another connection
    /// can carry data, becomes suspect: nothing new is scheduled on it and its unacknowledged
    /// records are re-sent on the others. On by default; off: only TCP (RST, FIN, user timeout)
    /// and keepalive say that a connection failed.
    pub loss_detection: bool,
    /// The floor of the retransmission deadline (default 200 ms: Linux's minimum TCP RTO, so a
    /// path is not given up before its own TCP has retransmitted once; it also covers the
    /// receiver's `ack_delay` and a loaded host's scheduling delays).
    pub min_retransmit_timeout: std::time::Duration,
    /// A connection with records unacknowledged for this long is given up (closed, Connection
    /// Reset to the peer over the others; with no other connection the session is orphaned
    /// and the client rejoins): a path that went silent without an RST. Default 5 s; None:
    /// wait for TCP. A suspect connection that acknowledges again before this is kept.
    pub silence_timeout: Option<std::time::Duration>,
    /// Server sessions end after this long without receiving anything on any connection
    /// (close_notify, then `Error::ConnectionLost`), so that silent clients cannot hold them for
    /// ever (docs/SECURITY.md). Default 5 minutes; None: never. Client sessions ignore it (they use
    /// `keepalive`). A client that idles longer on purpose sets `keepalive` below it.
    pub idle_timeout: Option<std::time::Duration>,
    /// Decrypt stream records straight into their stream's receive buffer (ARCHITECTURE.md,
    /// "The receive path"). Off forces the copying path (decrypt in the connection's buffer, then
    /// copy), which exists for comparison; the bytes delivered are the same.
    pub zero_copy: bool,
    /// Late multiplexing (TM3 paper §4.2): TCP_NOTSENT_LOWAT in bytes on every TCP connection
    /// of the session, so the kernel holds little unsent data and what goes next is decided by
    /// the session's round robin, not queued behind bulk data. Pair it with a small
    /// `transmit_high_water` (e.g. both 64 KiB). None (default): the kernel's default.
    pub notsent_lowat: Option<u32>,
    /// Client: the server name each join's handshake sends, from its token; None (default):
    /// the session's server name ([`JoinServerName`]).
    pub join_server_name: Option<JoinServerName>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            record_size: MAX_PLAINTEXT,
            stream_receive_window: 32 << 20,
            receive_autotune: true,
            receive_budget: 64 << 20,
            stream_send_buffer: 32 << 20,
            send_budget: 32 << 20,
            send_autotune: true,
            stream_quantum: 64 << 10,
            max_concurrent_streams: 4096,
            tokens: 4,
            advertise: Vec::new(),
            key_update_records: DEFAULT_KEY_UPDATE_RECORDS,
            transmit_high_water: 512 << 10,
            congestion_control_allowed: ["cubic", "reno", "bbr"].iter().map(|s| s.to_string()).collect(),
            random: system_random(),
            failover: true,
            rejoin_timeout: std::time::Duration::from_secs(10),
            max_unacked_records: 65536,
            max_unacked_control: 1 << 20,
            ack_every_records: 16,
            ack_delay: std::time::Duration::from_millis(25),
            keepalive: None,
            ping_timeout: std::time::Duration::from_secs(1),
            loss_detection: true,
            min_retransmit_timeout: std::time::Duration::from_millis(200),
            silence_timeout: Some(std::time::Duration::from_secs(5)),
            idle_timeout: Some(std::time::Duration::from_secs(300)),
            zero_copy: true,
            notsent_lowat: None,
            join_server_name: None,
        }
    }
}

impl std::fmt::Debug for SessionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionConfig")
            .field("record_size", &self.record_size)
            .field("stream_receive_window", &self.stream_receive_window)
            .field("receive_autotune", &self.receive_autotune)
            .field("receive_budget", &self.receive_budget)
            .field("stream_send_buffer", &self.stream_send_buffer)
            .field("send_budget", &self.send_budget)
            .field("send_autotune", &self.send_autotune)
            .field("stream_quantum", &self.stream_quantum)
            .field("max_concurrent_streams", &self.max_concurrent_streams)
            .field("tokens", &self.tokens)
            .field("advertise", &self.advertise)
            .field("key_update_records", &self.key_update_records)
            .field("transmit_high_water", &self.transmit_high_water)
            .field("congestion_control_allowed", &self.congestion_control_allowed)
            .finish_non_exhaustive()
    }
}

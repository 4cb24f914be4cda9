//! The small request/report protocol `tcpls perf` speaks on each stream with `tcpls serve`.
//!
//! Request (client → server, 32 bytes, big endian): magic `TCPLSPF1`, direction (1 = upload,
//! 2 = download), 3 reserved bytes, seed (u32, selects the stream's payload pattern), bytes
//! (u64; `u64::MAX` = until time), milliseconds (u64; 0 = no time limit).
//! Upload: the payload follows the request, then FIN; the server answers with a 16-byte report:
//! bytes received (u64), verified (1 byte), 7 reserved bytes, then FIN.
//! Download: the server sends the payload, then FIN; the client keeps its side open while it
//! reads and sends FIN at the end, or resets it to make the server stop early (Ctrl-C).
//! A timed transfer (milliseconds > 0) ends with a Stream Reset of the sender's side, code
//! `TIME_UP` (transfer.rs), which drops what is still queued: the run ends at its deadline.
//! A stream that does not start with a request is reset with `NOT_A_PERF_REQUEST`.
//!
//! Stats (direction 3; the other request fields are 0), asked on a stream of its own once the
//! transfer is over: the server answers with what its end of the session saw of the paths
//! ([`PathStats`]: at least [`STATS_LEN`] bytes, nine u64; later versions may append
//! fields, which a client ignores, reading at most [`MAX_STATS_LEN`]), then FIN. A server that
//! predates it resets the stream with `NOT_A_PERF_REQUEST` (unknown direction): the client
//! reports the server's numbers as unavailable. The answer has a fixed size and the server
//! keeps three counters per session to give it: asking costs the server nothing that grows.

pub const MAGIC: &[u8; 8] = b"TCPLSPF1";
pub const REQUEST_LEN: usize = 32;
pub const REPORT_LEN: usize = 16;
/// The stats answer of this version.
pub const STATS_LEN: usize = 72;
/// The most a client reads of a stats answer.
pub const MAX_STATS_LEN: usize = 1024;
/// Request direction byte of a stats request.
const STATS_DIRECTION: u8 = 3;
/// Stream Reset error code of a perf server for a stream that did not start with a request
/// (e.g. `tcpls connect` to a perf server).
pub const NOT_A_PERF_REQUEST: u32 = 0x7045_5251; // "pERQ"

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Upload = 1,
    Download = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub direction: Direction,
    pub seed: u32,
    pub bytes: u64,
    pub millis: u64,
}

/// What a stream asks the server for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    Transfer(Request),
    /// The server's [`PathStats`].
    Stats,
}

/// What one end of the session saw of its paths, and the longest stall of the payload it
/// received. The server's is the answer to a stats request.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct PathStats {
    /// Connections that failed with unacknowledged records, re-sent on the others.
    pub failovers: u64,
    /// Connections that ended with an error (RST, silence given up, ...), not a clean close.
    pub connections_lost: u64,
    /// Records re-sent on another connection (failover or suspicion).
    pub records_resent: u64,
    /// Stream bytes of those records.
    pub stream_bytes_resent: u64,
    /// Times a connection went silent past its retransmission deadline (suspect).
    pub paths_suspected: u64,
    /// Suspect connections that acknowledged again.
    pub paths_recovered: u64,
    /// Stream bytes received twice (copies re-sent after a failover or a suspicion).
    pub duplicate_bytes_received: u64,
    /// The longest interval with no payload delivered to this end, from its first payload byte
    /// to the end of the transfer, in ms; None: it received no payload.
    pub longest_stall_ms: Option<f64>,
    /// The same for the one stream that stalled longest (from its first byte to its end).
    pub longest_stream_stall_ms: Option<f64>,
}

impl PathStats {
    /// Whether anything happened to the paths (for the human summary).
    pub fn any_event(&self) -> bool {
        self.failovers
            + self.connections_lost
            + self.records_resent
            + self.paths_suspected
            + self.paths_recovered
            + self.duplicate_bytes_received
            > 0
    }

    pub fn encode(&self) -> [u8; STATS_LEN] {
        let us = |v: Option<f64>| v.map_or(u64::MAX, |ms| (ms * 1e3).clamp(0.0, (u64::MAX - 1) as f64) as u64);
        let fields = [
            self.failovers,
            self.connections_lost,
            self.records_resent,
            self.stream_bytes_resent,
            self.paths_suspected,
            self.paths_recovered,
            self.duplicate_bytes_received,
            us(self.longest_stall_ms),
            us(self.longest_stream_stall_ms),
        ];
        let mut b = [0u8; STATS_LEN];
        for (chunk, field) in b.chunks_exact_mut(8).zip(fields) {
            chunk.copy_from_slice(&field.to_be_bytes());
        }
        b
    }

    /// Decodes an answer of at least [`STATS_LEN`] bytes (what follows is ignored).
    pub fn decode(b: &[u8]) -> Result<Self, String> {
        let Some(known) = b.get(..STATS_LEN) else {
            return Err(format!("the stats answer has {} bytes, {STATS_LEN} expected", b.len()));
        };
        let mut f = known.chunks_exact(8).map(|c| {
            let mut x = [0u8; 8];
            x.copy_from_slice(c);
            u64::from_be_bytes(x)
        });
        let mut next = || f.next().unwrap_or(0);
        let ms = |us: u64| (us != u64::MAX).then(|| us as f64 / 1e3);
        Ok(Self {
            failovers: next(),
            connections_lost: next(),
            records_resent: next(),
            stream_bytes_resent: next(),
            paths_suspected: next(),
            paths_recovered: next(),
            duplicate_bytes_received: next(),
            longest_stall_ms: ms(next()),
            longest_stream_stall_ms: ms(next()),
        })
    }
}

/// The request of a stats stream.
pub fn encode_stats_request() -> [u8; REQUEST_LEN] {
    let mut b = [0u8; REQUEST_LEN];
    b[..8].copy_from_slice(MAGIC);
    b[8] = STATS_DIRECTION;
    b
}

/// Decodes a stream's first bytes: a transfer request or a stats request.
pub fn decode_ask(b: &[u8; REQUEST_LEN]) -> Result<Ask, String> {
    if &b[..8] == MAGIC && b[8] == STATS_DIRECTION {
        return Ok(Ask::Stats);
    }
    Request::decode(b).map(Ask::Transfer)
}

impl Request {
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8] = self.direction as u8;
        b[12..16].copy_from_slice(&self.seed.to_be_bytes());
        b[16..24].copy_from_slice(&self.bytes.to_be_bytes());
        b[24..32].copy_from_slice(&self.millis.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8; REQUEST_LEN]) -> Result<Self, String> {
        if &b[..8] != MAGIC {
            return Err("not a tcpls perf request (bad magic)".into());
        }
        let direction = match b[8] {
            1 => Direction::Upload,
            2 => Direction::Download,
            d => return Err(format!("unknown perf direction {d}")),
        };
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(x)
        };
        let mut seed = [0u8; 4];
        seed.copy_from_slice(&b[12..16]);
        Ok(Self { direction, seed: u32::from_be_bytes(seed), bytes: u64_at(16), millis: u64_at(24) })
    }
}

pub fn encode_report(received: u64, verified: bool) -> [u8; REPORT_LEN] {
    let mut b = [0u8; REPORT_LEN];
    b[..8].copy_from_slice(&received.to_be_bytes());
    b[8] = verified as u8;
    b
}

pub fn decode_report(b: &[u8; REPORT_LEN]) -> (u64, bool) {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[..8]);
    (u64::from_be_bytes(x), b[8] == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip_and_rejects() {
        let r = Request { direction: Direction::Download, seed: 7, bytes: 1 << 40, millis: 1500 };
        assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        let mut bad = r.encode();
        bad[0] = b'X';
        assert!(Request::decode(&bad).is_err());
        bad = r.encode();
        bad[8] = 9;
        assert!(Request::decode(&bad).is_err());
        assert_eq!(decode_report(&encode_report(99, true)), (99, true));
    }

    #[test]
    fn stats_round_trip_and_bounds() {
        assert_eq!(decode_ask(&encode_stats_request()).unwrap(), Ask::Stats);
        let r = Request { direction: Direction::Upload, seed: 1, bytes: 5, millis: 0 };
        assert_eq!(decode_ask(&r.encode()).unwrap(), Ask::Transfer(r));
        let s = PathStats {
            failovers: 1,
            connections_lost: 2,
            records_resent: 3,
            stream_bytes_resent: 4,
            paths_suspected: 5,
            paths_recovered: 6,
            duplicate_bytes_received: 7,
            longest_stall_ms: Some(412.5),
            longest_stream_stall_ms: Some(980.25),
        };
        assert_eq!(PathStats::decode(&s.encode()).unwrap(), s);
        // A later server's longer answer: the known fields are read, the rest ignored.
        let mut longer = s.encode().to_vec();
        longer.extend_from_slice(&[9; 16]);
        assert_eq!(PathStats::decode(&longer).unwrap(), s);
        let none = PathStats { longest_stall_ms: None, longest_stream_stall_ms: None, ..s };
        assert_eq!(PathStats::decode(&none.encode()).unwrap(), none);
        assert!(PathStats::decode(&s.encode()[..10]).is_err());
    }
}

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

pub const MAGIC: &[u8; 8] = b"TCPLSPF1";
pub const REQUEST_LEN: usize = 32;
pub const REPORT_LEN: usize = 16;
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
}

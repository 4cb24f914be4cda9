//! One stream of `tcpls perf`: its request, then the payload sent (upload) or received and
//! verified (download) until the byte count, the deadline or Ctrl-C.

use std::sync::Arc;
use std::time::Instant;

use tcpls::{RecvStream, SendStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::interval::Counters;
use super::protocol::{decode_report, Direction, Request, REPORT_LEN};
use crate::interrupt::Stop;
use crate::transfer::{receive_pattern, send_pattern, until, Received, RecvEnd, SendEnd, TIME_UP};

/// What one stream did.
pub struct StreamOutcome {
    /// The stream's counter in [`Counters`].
    pub index: usize,
    pub direction: Direction,
    /// Bytes the sender queued (our uploads) or sent (a download: the stream's final size).
    pub sent: Option<u64>,
    /// Bytes the receiver read and verified.
    pub received: u64,
    pub verified: bool,
}

/// One stream's transfer, in its own task.
pub struct StreamTask {
    pub request: Request,
    /// The request already went as early data.
    pub early: bool,
    pub deadline: Option<Instant>,
    pub interrupted: watch::Receiver<Option<Stop>>,
    pub counters: Arc<Counters>,
    /// This stream's counter in `counters`.
    pub index: usize,
}

impl StreamTask {
    pub async fn run(self, mut send: SendStream, mut recv: RecvStream) -> Result<StreamOutcome, String> {
        let r = self.request;
        if !self.early {
            send.write_all(&r.encode())
                .await
                .map_err(|e| format!("stream {}: cannot send the request: {e}", r.seed))?;
        }
        let mut interrupted = self.interrupted.clone();
        let ctrl_c = async move {
            let _ = interrupted.wait_for(Option::is_some).await;
        };
        match r.direction {
            Direction::Upload => {
                let stop = async {
                    tokio::select! {
                        () = until(self.deadline) => {}
                        () = ctrl_c => {}
                    }
                };
                let progress = &self.counters.streams[self.index].bytes;
                let (sent, end) = send_pattern(&mut send, r.seed.into(), r.bytes, stop, progress)
                    .await
                    .map_err(|e| format!("stream {}: sending failed: {e}", r.seed))?;
                let mut report = [0u8; REPORT_LEN];
                recv.read_exact(&mut report)
                    .await
                    .map_err(|e| format!("stream {}: no report from the server: {e}", r.seed))?;
                let (received, verified) = decode_report(&report);
                // A byte count must arrive whole; a stopped stream delivers what it could.
                let complete = match end {
                    SendEnd::Complete => received == sent,
                    SendEnd::Stopped => received <= sent,
                };
                Ok(StreamOutcome {
                    index: self.index,
                    direction: r.direction,
                    sent: Some(sent),
                    received,
                    verified: verified && complete,
                })
            }
            Direction::Download => {
                // Our side stays open: resetting it (Ctrl-C) tells the server to stop sending.
                let counter = &self.counters.streams[self.index];
                let progress = Received {
                    bytes: &counter.bytes,
                    corrupt: &counter.corrupt,
                    stalls: &self.counters.stalls,
                    gaps: &counter.gaps,
                };
                let (received, verified, end) = receive_pattern(&mut recv, r.seed.into(), ctrl_c, &progress)
                    .await
                    .map_err(|e| format!("stream {}: receiving failed: {e}", r.seed))?;
                let complete = match end {
                    RecvEnd::Finished => r.millis > 0 || received == r.bytes,
                    RecvEnd::TimeUp => r.millis > 0,
                    RecvEnd::Stopped => true,
                };
                // What the server sent: the final size its FIN or TIME_UP reset stated (read
                // before our side closes, which lets the session forget the stream).
                let sent = match end {
                    RecvEnd::Finished => Some(received),
                    RecvEnd::TimeUp => recv.final_size(),
                    RecvEnd::Stopped => None,
                };
                if end == RecvEnd::Stopped {
                    let _ = send.reset(TIME_UP);
                } else {
                    let _ = send.shutdown().await;
                }
                Ok(StreamOutcome {
                    index: self.index,
                    direction: r.direction,
                    sent,
                    received,
                    verified: verified && complete,
                })
            }
        }
    }
}

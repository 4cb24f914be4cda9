//! Sending and verifying the perf payload on one stream (shared by client and server).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tcpls::{RecvStream, SendStream};
use tokio::io::AsyncWriteExt;

use crate::pattern;

/// Writes in pieces of this size (the session's send buffer takes them without copying twice).
const WRITE_CHUNK: usize = 256 * 1024;

/// Sends the pattern of `seed` for `bytes` bytes or until `deadline`, then FIN.
pub async fn send_pattern(
    send: &mut SendStream,
    seed: u64,
    bytes: u64,
    deadline: Option<Instant>,
    progress: &AtomicU64,
) -> io::Result<u64> {
    let mut offset = 0u64;
    while offset < bytes {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let want = (bytes - offset).min(WRITE_CHUNK as u64) as usize;
        let data = pattern::chunk(seed, offset, want);
        send.write_all(data).await?;
        offset += data.len() as u64;
        progress.fetch_add(data.len() as u64, Ordering::Relaxed);
    }
    send.shutdown().await?;
    Ok(offset)
}

/// Reads a stream to its end, checking every byte against the pattern of `seed` in place (no
/// copy out of the session). Returns (bytes, verified).
pub async fn receive_pattern(recv: &mut RecvStream, seed: u64, progress: &AtomicU64) -> io::Result<(u64, bool)> {
    let mut offset = 0u64;
    let mut verified = true;
    loop {
        let n = recv
            .read_chunk_with(|chunk| {
                if verified && !pattern::verify(seed, offset, chunk) {
                    verified = false;
                }
                chunk.len()
            })
            .await?;
        if n == 0 {
            return Ok((offset, verified));
        }
        offset += n as u64;
        progress.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Deadline for `--time`.
pub fn deadline(millis: u64) -> Option<Instant> {
    (millis > 0).then(|| Instant::now() + Duration::from_millis(millis))
}

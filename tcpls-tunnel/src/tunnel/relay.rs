//! Relays bytes between one TCP connection and one TCPLS stream, both ways, after the TLV
//! handshake: a FIN becomes a FIN, a TCP RST becomes Stream Reset 0x2 and a Stream Reset (or
//! a broken session) becomes a TCP RST (SO_LINGER 0, then close).

use std::future::Future;
use std::io::{self, Read};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use tcpls::{RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::rate::RateLimiter;
use super::tlv::{self, RESET_CODE};

/// Copy buffer of the TCP → stream direction (and of stream → TCP under a rate limit; without
/// one that direction writes from the stream's receive buffer, see `down_in_place`): it starts
/// small (a concentrator holds one per tunneled connection, and thousands of them) and doubles
/// while reads fill it, up to `MAX_BUF`, so a bulk transfer moves large chunks (fewer system
/// calls and session lock rounds).
const MIN_BUF: usize = 16 << 10;
const MAX_BUF: usize = 256 << 10;

/// Reads what `r` has into `buf` (replacing what it held) and returns how many bytes (0: end
/// of stream). The bytes go into `buf`'s spare capacity, never zero-filled first (a new
/// connection's first read would clear 16 KiB only to overwrite it). While a read fills the
/// buffer, its capacity doubles, up to `MAX_BUF`, and what the socket already holds is read
/// too, without waiting: a response a little larger than the buffer (20 KB from a web server)
/// then goes on as one write, one record, instead of two.
async fn read_growing<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> io::Result<usize> {
    buf.clear();
    if r.read_buf(buf).await? == 0 {
        return Ok(0);
    }
    while buf.len() == buf.capacity() && buf.capacity() < MAX_BUF {
        buf.reserve_exact(buf.capacity());
        let mut more = pin!(r.read_buf(buf));
        let ready = std::future::poll_fn(|cx| Poll::Ready(more.as_mut().poll(cx))).await;
        match ready {
            // A reset drops what was gathered: the relay resets both sides, as it would have.
            Poll::Ready(Err(e)) if is_tcp_reset(&e) => return Err(e),
            Poll::Ready(Ok(n)) if n > 0 => {}
            // Nothing more for now, the end of the stream or an interrupted read: what was
            // gathered goes on, and the next read says what follows.
            _ => break,
        }
    }
    Ok(buf.len())
}

/// How a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// FIN both ways.
    Closed,
    /// The TCP side reset (ECONNRESET/EPIPE): the stream was reset with code 0x2.
    LocalReset,
    /// The stream was reset by the peer (or the session broke): the TCP side got a RST.
    PeerReset,
    /// Pipelined open: the concentrator answered Error with this code; the TCP side got a RST.
    Refused(u16),
    /// Pipelined open: no valid answer in time; the TCP side got a RST.
    NoAnswer,
}

/// Bytes moved and how it ended.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    /// TCP → stream.
    pub sent: u64,
    /// Stream → TCP.
    pub received: u64,
    pub outcome: Outcome,
    /// The concentrator's Connect OK arrived (always true when none was awaited).
    pub answered: bool,
}

enum Up {
    Fin,
    TcpReset,
    StreamBroken,
}

enum Down {
    Fin,
    StreamReset,
    TcpReset,
    Refused(u16),
    NoAnswer,
}

fn is_tcp_reset(e: &io::Error) -> bool {
    // Anything but a clean FIN from the application's socket means the connection is gone:
    // ECONNRESET, EPIPE, ETIMEDOUT... all are reported as a reset.
    !matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock)
}

/// Runs until both directions are done or one side resets.
pub async fn relay(tcp: TcpStream, send: SendStream, recv: RecvStream) -> Report {
    relay_with(tcp, send, recv, How { answer_timeout: None, limiter: None, spread: false, request: Vec::new() }).await
}

/// [`relay`] with both directions taking their bytes from `limiter` (a client's rate): a
/// direction over the rate waits before it reads more (backpressure, nothing is dropped).
pub async fn relay_limited(
    tcp: TcpStream,
    send: SendStream,
    recv: RecvStream,
    limiter: Option<&RateLimiter>,
) -> Report {
    relay_with(tcp, send, recv, How { answer_timeout: None, limiter, spread: false, request: Vec::new() }).await
}

/// Like [`relay`], on a stream whose request was just sent (pipelining: the application's bytes
/// go out at once, behind the request). The stream's first bytes must be the concentrator's
/// answer, within `answer_timeout`; until Connect OK nothing reaches the application, and an
/// Error resets it.
pub async fn relay_pipelined(tcp: TcpStream, send: SendStream, recv: RecvStream, answer_timeout: Duration) -> Report {
    let how = How { answer_timeout: Some(answer_timeout), limiter: None, spread: false, request: Vec::new() };
    relay_with(tcp, send, recv, how).await
}

/// [`relay_pipelined`] on a stream whose `request` (TLVs) is not sent yet: it goes out at once,
/// in one write with whatever the application has already sent (an HTTP client speaks first:
/// one record and one `send` for both, not two). When `spread` (a bonded connection), asks the
/// concentrator on Connect OK to spread the download over every path
/// ([`super::bond::spread_download`]).
pub async fn relay_opening(
    tcp: TcpStream,
    (send, recv): (SendStream, RecvStream),
    request: Vec<u8>,
    answer_timeout: Duration,
    spread: bool,
) -> Report {
    let how = How { answer_timeout: Some(answer_timeout), limiter: None, spread, request };
    relay_with(tcp, send, recv, how).await
}

/// What a relay does besides copying bytes.
struct How<'a> {
    /// Wait this long for the concentrator's answer before relaying to the application.
    answer_timeout: Option<Duration>,
    /// The client's rate, both directions.
    limiter: Option<&'a RateLimiter>,
    /// On Connect OK, ask for the download to be spread over every path.
    spread: bool,
    /// Request TLVs to send first (empty: none).
    request: Vec<u8>,
}

/// Largest first read [`relay_opening`] sends with the request (an HTTP request's head fits;
/// more follows in the ordinary loop).
const FIRST_READ: usize = 4096;

/// Reads what the application has already sent, without waiting, straight from the socket:
/// tokio's readiness for a connection just accepted is not known yet, so its own read would
/// wait for the next poll of the event loop. 0 when there is nothing (or at the end of the
/// stream, which the ordinary read then reports again).
fn read_now(tcp: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    match (&*socket2::SockRef::from(tcp)).read(buf) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        r => r,
    }
}

/// Sends `request` in one write with what the application has already sent ([`read_now`], at
/// most `FIRST_READ` bytes); returns how many of the application's bytes went with it.
async fn send_with_first_bytes(tcp: &TcpStream, send: &mut SendStream, mut request: Vec<u8>) -> Result<usize, Up> {
    let mut first = [0u8; FIRST_READ];
    let n = match read_now(tcp, &mut first) {
        Ok(n) => n,
        Err(e) if is_tcp_reset(&e) => return Err(Up::TcpReset),
        Err(_) => 0,
    };
    request.extend_from_slice(&first[..n]);
    if send.write_all(&request).await.is_err() {
        return Err(Up::StreamBroken);
    }
    Ok(n)
}

/// [`relay_pipelined`] under a client's rate (see [`relay_limited`]).
pub async fn relay_pipelined_limited(
    tcp: TcpStream,
    send: SendStream,
    recv: RecvStream,
    answer_timeout: Duration,
    limiter: Option<&RateLimiter>,
) -> Report {
    let how = How { answer_timeout: Some(answer_timeout), limiter, spread: false, request: Vec::new() };
    relay_with(tcp, send, recv, how).await
}

async fn relay_with(mut tcp: TcpStream, mut send: SendStream, mut recv: RecvStream, how: How<'_>) -> Report {
    let How { answer_timeout, limiter, spread, mut request } = how;
    let (mut sent, mut received) = (0u64, 0u64);
    let mut answered = answer_timeout.is_none();
    let abort = {
        let (mut rd, mut wr) = tcp.split();
        let up = async {
            if !request.is_empty() {
                match send_with_first_bytes(rd.as_ref(), &mut send, std::mem::take(&mut request)).await {
                    Ok(n) => sent += n as u64,
                    Err(up) => return up,
                }
            }
            let mut buf = Vec::with_capacity(MIN_BUF);
            loop {
                let n = match read_growing(&mut rd, &mut buf).await {
                    Ok(0) => {
                        // Half-close: the other direction goes on.
                        let _ = send.finish();
                        return Up::Fin;
                    }
                    Ok(n) => n,
                    Err(e) if is_tcp_reset(&e) => return Up::TcpReset,
                    Err(_) => continue,
                };
                if let Some(l) = limiter {
                    l.acquire(n).await;
                }
                if send.write_all(&buf[..n]).await.is_err() {
                    return Up::StreamBroken;
                }
                sent += n as u64;
            }
        };
        let down = async {
            if let Some(t) = answer_timeout {
                match tokio::time::timeout(t, tlv::read_response(&mut recv)).await {
                    Ok(Ok(Ok(()))) => {
                        answered = true;
                        if spread {
                            super::bond::spread_download(&recv);
                        }
                    }
                    Ok(Ok(Err(code))) => return Down::Refused(code),
                    _ => return Down::NoAnswer,
                }
            }
            if limiter.is_none() {
                return down_in_place(&mut recv, &mut wr, &mut received).await;
            }
            let mut buf = Vec::with_capacity(MIN_BUF);
            loop {
                let n = match read_growing(&mut recv, &mut buf).await {
                    Ok(0) => {
                        // Our FIN to the application; a failure means its socket is gone.
                        return if wr.shutdown().await.is_ok() { Down::Fin } else { Down::TcpReset };
                    }
                    Ok(n) => n,
                    // Reset by the peer, or the session is over: either way the far end is gone.
                    Err(_) => return Down::StreamReset,
                };
                if let Some(l) = limiter {
                    l.acquire(n).await;
                }
                if wr.write_all(&buf[..n]).await.is_err() {
                    return Down::TcpReset;
                }
                received += n as u64;
            }
        };
        let mut up = pin!(up);
        let mut down = pin!(down);
        let (mut up_done, mut down_done) = (false, false);
        let mut abort = None;
        while abort.is_none() && !(up_done && down_done) {
            tokio::select! {
                u = &mut up, if !up_done => {
                    up_done = true;
                    abort = match u {
                        Up::Fin => None,
                        Up::TcpReset => Some(Outcome::LocalReset),
                        Up::StreamBroken => Some(Outcome::PeerReset),
                    };
                }
                d = &mut down, if !down_done => {
                    down_done = true;
                    abort = match d {
                        Down::Fin => None,
                        Down::StreamReset => Some(Outcome::PeerReset),
                        Down::TcpReset => Some(Outcome::LocalReset),
                        Down::Refused(code) => Some(Outcome::Refused(code)),
                        Down::NoAnswer => Some(Outcome::NoAnswer),
                    };
                }
            }
        }
        abort
    };
    match abort {
        None => {
            // FIN on the stream was sent by the up direction; nothing queued is lost.
            let _ = send.finish();
            Report { sent, received, outcome: Outcome::Closed, answered }
        }
        Some(outcome) => {
            // Both directions die: the stream with Stream Reset 0x2 (if it is still open), the
            // TCP connection with a RST.
            let _ = send.reset(RESET_CODE);
            drop(recv);
            reset_tcp(tcp);
            Report { sent, received, outcome, answered }
        }
    }
}

/// Stream → TCP without a copy buffer: each chunk of the stream's receive buffer is written
/// to the socket from where it lies (`read_chunk_with` + a non-blocking write), at most
/// `MAX_BUF` bytes per call. The write runs under the session's lock, as the driver's own
/// socket writes do, and never blocks (the socket is non-blocking; a full socket writes 0 and
/// we wait until it is writable). Returns like the copying loop.
async fn down_in_place(recv: &mut RecvStream, wr: &mut tokio::net::tcp::WriteHalf<'_>, received: &mut u64) -> Down {
    loop {
        if wr.writable().await.is_err() {
            return Down::TcpReset;
        }
        // `read_chunk_with` answers 0 without calling us at the end of the stream.
        let mut called = false;
        let mut failed = None;
        let r = recv
            .read_chunk_with(|chunk| {
                called = true;
                let chunk = &chunk[..chunk.len().min(MAX_BUF)];
                match wr.try_write(chunk) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                    Err(e) => {
                        failed = Some(e);
                        0
                    }
                }
            })
            .await;
        let n = match r {
            Ok(n) => n,
            Err(_) => return Down::StreamReset,
        };
        *received += n as u64;
        if failed.is_some_and(|e| is_tcp_reset(&e)) {
            return Down::TcpReset;
        }
        if n == 0 && !called {
            // Our FIN to the application; a failure means its socket is gone.
            return if wr.shutdown().await.is_ok() { Down::Fin } else { Down::TcpReset };
        }
    }
}

/// Closes `tcp` with a RST (SO_LINGER 0) rather than a FIN.
pub fn reset_tcp(tcp: TcpStream) {
    let _ = socket2::SockRef::from(&tcp).set_linger(Some(Duration::ZERO));
    drop(tcp);
}

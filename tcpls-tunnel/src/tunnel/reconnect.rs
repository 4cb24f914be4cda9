//! Keeping the client's session to the concentrator: when it ends (concentrator restart, every
//! path lost beyond the session's tolerance), a new one is opened with exponential backoff and
//! jitter while the client's listeners stay up. Connections that were in flight are reset by
//! the relay (their streams died with the session); new ones wait for the new session for
//! [`TunnelConfig::reconnect_wait`](super::TunnelConfig::reconnect_wait), then are refused.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

/// Delays between attempts: `initial`, doubling up to `max`; each one drawn uniformly from
/// [delay/2, delay] so clients cut off together do not come back in lockstep.
///
/// While the concentrator refuses the TCP connection itself (nothing listens: it is being
/// restarted), the delay is capped at `refused_max` instead: such an attempt costs the
/// concentrator nothing, and a restarted one is found within `refused_max` of listening again.
/// Attempts that reach it and fail later (a TLS failure, a session dropped at once because it
/// is full) back off up to `max`, so a loaded concentrator is not hammered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    pub refused_max: Duration,
}

/// [`Backoff::refused_max`] by default: a restarted concentrator is found within a second.
pub const REFUSED_MAX: Duration = Duration::from_secs(1);

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: Duration::from_millis(200), max: Duration::from_secs(30), refused_max: REFUSED_MAX }
    }
}

impl Backoff {
    /// The bound of the delay after `failures` failed attempts (before jitter).
    pub fn ceiling(&self, failures: u32) -> Duration {
        let factor = 1u32.checked_shl(failures.min(20)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max).max(Duration::from_millis(1))
    }

    /// The delay to wait after `failures` failed attempts: jittered within [ceiling/2, ceiling].
    pub fn delay(&self, failures: u32) -> Duration {
        jitter(self.ceiling(failures))
    }

    /// The delay after `failures` failed attempts, the last one ending with `error`: capped at
    /// `refused_max` when the concentrator refused the TCP connection (nothing listening).
    pub fn delay_after(&self, failures: u32, error: &std::io::Error) -> Duration {
        let c = self.ceiling(failures);
        if error.kind() == std::io::ErrorKind::ConnectionRefused {
            jitter(c.min(self.refused_max.max(Duration::from_millis(1))))
        } else {
            jitter(c)
        }
    }
}

/// A delay drawn uniformly from [c/2, c].
fn jitter(c: Duration) -> Duration {
    let half = c / 2;
    let spread = u64::try_from((c - half).as_micros()).unwrap_or(u64::MAX).max(1);
    half + Duration::from_micros(random_u64() % spread)
}

/// How long a session must have lasted for its end to start a new outage's backoff from
/// `initial` (a shorter one continues the last outage's backoff).
pub const STABLE: Duration = Duration::from_secs(10);

/// Whether a session's end is the concentrator refusing this client (a TLS alert about its
/// certificate or access): retrying cannot help, the client stops.
pub fn is_refusal(e: &tcpls_proto::Error) -> bool {
    // certificate_required, bad/unsupported/revoked/expired/unknown certificate, unknown_ca,
    // access_denied (RFC 8446 §6.2).
    matches!(e, tcpls_proto::Error::PeerAlert(116 | 42..=46 | 48 | 49))
}

/// Randomness enough for jitter, without a dependency: std's per-hasher random keys.
fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    h.finish()
}

/// Retries `attempt` until it succeeds, sleeping [`Backoff::delay`] between failures. Logs the
/// outage once when it starts (`why`) and once when it ends, with its duration and the number of
/// attempts; the failed attempts themselves at debug level. `carried`: failures counted before
/// (a session that ended soon after the last outage continues its backoff rather than
/// restarting at `initial`, so a concentrator that accepts and drops at once is not hammered);
/// with `carried > 0` the first attempt waits too. Returns the result and the failures counted.
pub async fn retry<T, F, Fut>(backoff: Backoff, carried: u32, what: &str, why: &str, mut attempt: F) -> (T, u32)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::io::Result<T>>,
{
    let started = Instant::now();
    warn!("tunnel client: {what} lost ({why}); connections in flight are reset; reconnecting");
    let mut failures = carried;
    if carried > 0 {
        tokio::time::sleep(backoff.delay(carried - 1)).await;
    }
    loop {
        match attempt().await {
            Ok(v) => {
                info!(
                    "tunnel client: {what} re-established after an outage of {:.1} s ({} attempt(s))",
                    started.elapsed().as_secs_f64(),
                    failures - carried + 1
                );
                return (v, failures);
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let d = backoff.delay_after(failures - 1, &e);
                debug!("tunnel client: reconnection attempt {failures} failed: {e}; next in {d:?}");
                tokio::time::sleep(d).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn backoff_doubles_up_to_max_with_jitter() {
        let b = Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(2), ..Backoff::default() };
        assert_eq!(b.ceiling(0), Duration::from_millis(100));
        assert_eq!(b.ceiling(3), Duration::from_millis(800));
        assert_eq!(b.ceiling(5), Duration::from_secs(2));
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(2));
        let delays: Vec<Duration> = (0..50).map(|_| b.delay(2)).collect();
        assert!(delays.iter().all(|d| *d >= Duration::from_millis(200) && *d <= Duration::from_millis(400)));
        assert!(delays.iter().any(|d| *d != delays[0]), "jittered: {delays:?}");
    }

    /// A concentrator being restarted refuses connections: those attempts are capped at
    /// `refused_max` (1 s by default) whatever `max` is, so it is found within a second of
    /// listening again; the other failures back off up to `max`.
    #[test]
    fn refused_connections_are_retried_within_refused_max() {
        let b = Backoff::default();
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let other = std::io::Error::other("handshake failed");
        for failures in [0, 3, 8, 30, u32::MAX] {
            let delays: Vec<Duration> = (0..50).map(|_| b.delay_after(failures, &refused)).collect();
            assert!(delays.iter().all(|d| *d <= REFUSED_MAX), "{failures}: {delays:?}");
        }
        let capped: Vec<Duration> = (0..50).map(|_| b.delay_after(30, &refused)).collect();
        assert!(capped.iter().all(|d| *d >= REFUSED_MAX / 2), "jittered within [0.5 s, 1 s]: {capped:?}");
        assert!(capped.iter().any(|d| *d != capped[0]), "jittered: {capped:?}");
        assert!(b.delay_after(30, &other) >= Duration::from_secs(15), "other failures back off to max");
    }

    #[tokio::test]
    async fn retry_until_success() {
        let b = Backoff { initial: Duration::from_millis(1), max: Duration::from_millis(4), ..Backoff::default() };
        let mut n = 0;
        let (v, failures) = retry(b, 2, "test", "why", || {
            n += 1;
            let ok = n >= 4;
            async move {
                if ok {
                    Ok(n)
                } else {
                    Err(std::io::Error::other("not yet"))
                }
            }
        })
        .await;
        assert_eq!((v, failures), (4, 5));
    }
}

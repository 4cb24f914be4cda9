//! Two sessions joined by in-memory byte pipes (quinn's `Pair`): real rustls handshakes and
//! real record protection, no sockets, deterministic.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};
use tcpls_proto::{tcpls_client_config, tcpls_server_config, Event, Session, SessionConfig};

#[allow(unused_imports)]
pub use tcpls_test::Pki;

/// Deterministic "randomness" (distinct values on every call) so token values are reproducible.
/// The in-memory pipes have no TCP_INFO to report, so the send budget does not follow a path
/// (`send_autotune` off, as for any IO layer that cannot report; tests/autotune.rs turns it on
/// and reports paths itself).
pub fn test_config() -> SessionConfig {
    let counter = std::sync::atomic::AtomicU64::new(1);
    SessionConfig {
        random: Arc::new(move |buf: &mut [u8]| {
            let call = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            buf.copy_from_slice(&tcpls_test::Rng::new(call).bytes(buf.len()));
        }),
        send_autotune: false,
        ..SessionConfig::default()
    }
}

pub struct Pair {
    pub client: Session,
    pub server: Session,
    pub now: Instant,
    pub client_events: Vec<Event>,
    pub server_events: Vec<Event>,
    /// Bytes each side wrote, per write call: lets tests check segment coalescing.
    pub client_writes: Vec<Vec<u8>>,
    pub server_writes: Vec<Vec<u8>>,
}

impl Pair {
    pub fn new(client: ClientConfig, server: ServerConfig, settings: SessionConfig) -> Self {
        Self::from_arcs(Arc::new(tcpls_client_config(&client)), Arc::new(tcpls_server_config(&server)), settings)
    }

    /// Sessions from shared configs (a client config reused across sessions keeps its tickets).
    pub fn from_arcs(client: Arc<ClientConfig>, server: Arc<ServerConfig>, settings: SessionConfig) -> Self {
        let client = Session::client(client, ServerName::try_from("localhost").unwrap(), settings.clone()).unwrap();
        let server = Session::server(server, settings).unwrap();
        Pair {
            client,
            server,
            now: Instant::now(),
            client_events: vec![],
            server_events: vec![],
            client_writes: vec![],
            server_writes: vec![],
        }
    }

    /// Like [`Pair::new`], with different session settings on each side (e.g. a server with a
    /// small stream limit facing a client without one).
    pub fn with_settings(
        client: ClientConfig,
        server: ServerConfig,
        client_settings: SessionConfig,
        server_settings: SessionConfig,
    ) -> Self {
        let server_session = Session::server(Arc::new(tcpls_server_config(&server)), server_settings);
        let mut pair = Self::new(client, server, client_settings);
        pair.server = server_session.unwrap();
        pair
    }

    /// A default pair whose handshake is done and whose events so far are drained.
    pub fn established() -> Self {
        let mut pair = Self::default_pair();
        pair.drive();
        assert!(pair.client.is_established() && pair.server.is_established());
        pair.client_events.clear();
        pair.server_events.clear();
        pair
    }

    pub fn default_pair() -> Self {
        let pki = Pki::new();
        Self::new(pki.client_config(&[]), pki.server_config(&[]), test_config())
    }

    /// Moves bytes both ways until nothing moves any more (bounded). Like a real IO layer it
    /// honours the sessions' timers (`poll_timeout`: delayed ACKs, pacing) by advancing the
    /// virtual clock to the next one, a few times at most.
    pub fn drive(&mut self) {
        let mut timers = 0;
        for _ in 0..100_000 {
            self.now += Duration::from_micros(10);
            let a = Self::step(&mut self.client, &mut self.server, self.now, &mut self.client_writes);
            let b = Self::step(&mut self.server, &mut self.client, self.now, &mut self.server_writes);
            while let Some(e) = self.client.poll_event() {
                self.client_events.push(e);
            }
            while let Some(e) = self.server.poll_event() {
                self.server_events.push(e);
            }
            if !a && !b && !advance_to_next_timer(&mut self.now, [&self.client, &self.server], &mut timers) {
                return;
            }
        }
        panic!("pair did not settle");
    }

    fn step(from: &mut Session, to: &mut Session, now: Instant, log: &mut Vec<Vec<u8>>) -> bool {
        from.prepare_transmit(now);
        let data = from.transmit_data(0).to_vec();
        if data.is_empty() {
            return false;
        }
        from.transmit_advance(0, data.len());
        log.push(data.clone());
        to.handle_data(0, &data, now);
        true
    }

    /// Reads a stream to its end on `side`, driving the pair as needed.
    pub fn read_to_end(&mut self, server_side: bool, id: u32) -> Vec<u8> {
        let mut out = vec![];
        let mut buf = vec![0u8; 70_000];
        for _ in 0..1_000_000 {
            let s = if server_side { &mut self.server } else { &mut self.client };
            match s.read(id, &mut buf).unwrap() {
                Some(0) => return out,
                Some(n) => out.extend_from_slice(&buf[..n]),
                None => self.drive(),
            }
        }
        panic!("stream {id} did not end");
    }
}

/// When nothing moves, jumps the virtual clock to the sessions' next timer (delayed ACK,
/// pacing), as a real IO layer's sleep would; a few times per drive, and only for near timers.
/// Returns false when there is nothing to wait for.
pub fn advance_to_next_timer(now: &mut Instant, sessions: [&Session; 2], timers: &mut u32) -> bool {
    let next = sessions.iter().filter_map(|s| s.poll_timeout()).min();
    match next {
        Some(at) if *timers < 4 && at <= *now + Duration::from_millis(100) => {
            *timers += 1;
            *now = (*now).max(at);
            true
        }
        _ => false,
    }
}

/// Deterministic test payload (the workspace's one generator, `tcpls-pattern`).
#[allow(unused_imports)] // not every test file uses both
pub use tcpls_test::payload;

pub mod multi;

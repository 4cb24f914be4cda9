//! Sessions with several connections over in-memory pipes, including the server-side join
//! path: each new TCP connection first lands in a fresh server session (as on a real
//! listener), which hands it over to the session its token names.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};
use tcpls_proto::{tcpls_client_config, tcpls_server_config, Accepted, ConnId, Event, Session, SessionConfig};

use super::{test_config, Pki};

pub struct MultiPair {
    pub client: Session,
    pub server: Session,
    pub server_config: Arc<ServerConfig>,
    pub settings: SessionConfig,
    pub now: Instant,
    /// Connections whose pipes are cut (no bytes move).
    pub cut: BTreeSet<ConnId>,
    /// Connections cut in one direction only: client to server (`true`) or server to client.
    /// Bytes wait in the sender's buffer, as TCP keeps them, until the cut is lifted.
    pub cut_one_way: BTreeSet<(ConnId, bool)>,
    pub client_events: Vec<Event>,
    pub server_events: Vec<Event>,
}

impl MultiPair {
    pub fn new(settings: SessionConfig) -> Self {
        let pki = Pki::new();
        Self::with_configs(pki.client_config(&[]), pki.server_config(&[]), settings)
    }

    pub fn with_configs(client: ClientConfig, server: ServerConfig, settings: SessionConfig) -> Self {
        let server_config = Arc::new(tcpls_server_config(&server));
        let client = Session::client(
            Arc::new(tcpls_client_config(&client)),
            ServerName::try_from("localhost").unwrap(),
            settings.clone(),
        )
        .unwrap();
        let server = Session::server(server_config.clone(), settings.clone()).unwrap();
        let mut p = MultiPair {
            client,
            server,
            server_config,
            settings,
            now: Instant::now(),
            cut: BTreeSet::new(),
            cut_one_way: BTreeSet::new(),
            client_events: vec![],
            server_events: vec![],
        };
        p.drive();
        assert!(p.client.is_established() && p.server.is_established());
        p
    }

    pub fn default_pair() -> Self {
        Self::new(test_config())
    }

    /// Moves bytes on every connection both ways until nothing moves (bounded).
    pub fn drive(&mut self) {
        let mut timers = 0;
        for _ in 0..200_000 {
            self.now += Duration::from_micros(10);
            let mut moved = false;
            self.client.prepare_transmit(self.now);
            self.server.prepare_transmit(self.now);
            for id in self.client.connection_ids() {
                if self.cut.contains(&id) {
                    continue;
                }
                if !self.cut_one_way.contains(&(id, true)) {
                    moved |= Self::pipe(&mut self.client, &mut self.server, id, self.now);
                }
                if !self.cut_one_way.contains(&(id, false)) {
                    moved |= Self::pipe(&mut self.server, &mut self.client, id, self.now);
                }
            }
            while let Some(e) = self.client.poll_event() {
                self.client_events.push(e);
            }
            while let Some(e) = self.server.poll_event() {
                self.server_events.push(e);
            }
            if !moved && !super::advance_to_next_timer(&mut self.now, [&self.client, &self.server], &mut timers) {
                return;
            }
        }
        panic!("pair did not settle");
    }

    fn pipe(from: &mut Session, to: &mut Session, id: ConnId, now: Instant) -> bool {
        let data = from.transmit_data(id).to_vec();
        if data.is_empty() || !to.connection_ids().contains(&id) {
            return false;
        }
        from.transmit_advance(id, data.len());
        to.handle_data(id, &data, now);
        true
    }

    /// Opens a new connection from the client and carries it through the server's join path.
    /// Returns the connection ID, or the pending server session's view if the join failed.
    pub fn join(&mut self) -> Result<ConnId, Box<Session>> {
        let id = self.client.add_connection().unwrap();
        self.join_conn(id)
    }

    /// The server side of a join for client connection `id`.
    pub fn join_conn(&mut self, id: ConnId) -> Result<ConnId, Box<Session>> {
        let mut pending = Session::server(self.server_config.clone(), self.settings.clone()).unwrap();
        for _ in 0..1000 {
            self.now += Duration::from_micros(10);
            self.client.prepare_transmit(self.now);
            let up = self.client.transmit_data(id).to_vec();
            self.client.transmit_advance(id, up.len());
            pending.handle_data(0, &up, self.now);
            pending.prepare_transmit(self.now);
            let down = pending.transmit_data(0).to_vec();
            pending.transmit_advance(0, down.len());
            self.client.handle_data(id, &down, self.now);
            match pending.accepted() {
                Accepted::Join => {
                    let joining = pending.take_joining_connection().unwrap();
                    return match self.server.attach_joining_connection(joining, self.now) {
                        Ok(conn) => {
                            assert_eq!(conn, id, "server and client agree on the connection ID");
                            self.drive();
                            Ok(conn)
                        }
                        Err(refused) => {
                            let alert = Session::refuse_join(refused);
                            self.client.handle_data(id, &alert, self.now);
                            self.client.handle_eof(id, self.now);
                            self.drive();
                            Err(Box::new(pending))
                        }
                    };
                }
                Accepted::Failed | Accepted::NewSession => return Err(Box::new(pending)),
                Accepted::Pending if up.is_empty() && down.is_empty() => return Err(Box::new(pending)),
                Accepted::Pending => {}
            }
        }
        Err(Box::new(pending))
    }

    /// Both ends see the TCP connection die (RST).
    pub fn kill(&mut self, id: ConnId) {
        self.cut.insert(id);
        self.client.handle_io_error(id, "connection reset (test)", self.now);
        self.server.handle_io_error(id, "connection reset (test)", self.now);
        self.drive();
    }

    /// Reads a server-opened stream to its end on the client.
    pub fn read_to_end_client(&mut self, id: u32) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        for _ in 0..100_000 {
            while self.client.accept_stream().is_some() {}
            match self.client.read(id, &mut buf).unwrap() {
                Some(0) => return got,
                Some(n) => got.extend_from_slice(&buf[..n]),
                None => self.drive(),
            }
        }
        panic!("stream {id} did not end");
    }

    /// Sends `data` on client stream `id` (writing as buffers allow) and returns what the server
    /// read, with the stream's FIN. `between` runs after each round (e.g. to migrate).
    pub fn transfer(&mut self, id: u32, data: &[u8], mut between: impl FnMut(&mut Self, usize)) -> Vec<u8> {
        let mut off = 0;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut accepted = false;
        for round in 0..1_000_000 {
            if off < data.len() {
                off += self.client.write(id, &data[off..]).unwrap();
                if off == data.len() {
                    self.client.finish(id).unwrap();
                }
            }
            self.drive();
            between(self, round);
            if !accepted {
                while let Some(s) = self.server.accept_stream() {
                    accepted |= s == id;
                }
            }
            loop {
                match self.server.read(id, &mut buf) {
                    // Not arrived yet (its first records may be on a connection being lost).
                    Err(tcpls_proto::StreamError::UnknownStream(_)) => break,
                    Err(e) => panic!("stream {id}: {e}"),
                    Ok(Some(0)) => return got,
                    Ok(Some(n)) => got.extend_from_slice(&buf[..n]),
                    Ok(None) => break,
                }
            }
        }
        panic!("transfer did not finish");
    }
}

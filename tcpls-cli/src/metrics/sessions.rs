//! The sessions a server is serving, read at scrape time, and the totals of those that ended.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use tcpls::Session;
use tcpls_proto::sync::LockExt;

/// Counters summed over sessions.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub sessions: u64,
    /// Connections that can carry data now (meaningful for live sessions only).
    pub usable: u64,
    pub connections: u64,
    pub streams_by_peer: u64,
    pub streams_by_server: u64,
    pub streams_refused: u64,
    pub stream_bytes_received: u64,
    pub stream_bytes_sent: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub failovers: u64,
    pub records_resent: u64,
    /// Memory gauges (live sessions only; 0 for ended ones).
    pub receive_credit: u64,
    pub receive_budget: u64,
    pub receive_allocated: u64,
    pub send_buffered: u64,
    pub unacked_records: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.sessions += o.sessions;
        self.usable += o.usable;
        self.connections += o.connections;
        self.streams_by_peer += o.streams_by_peer;
        self.streams_by_server += o.streams_by_server;
        self.streams_refused += o.streams_refused;
        self.stream_bytes_received += o.stream_bytes_received;
        self.stream_bytes_sent += o.stream_bytes_sent;
        self.bytes_received += o.bytes_received;
        self.bytes_sent += o.bytes_sent;
        self.failovers += o.failovers;
        self.records_resent += o.records_resent;
        self.receive_credit += o.receive_credit;
        self.receive_budget += o.receive_budget;
        self.receive_allocated += o.receive_allocated;
        self.send_buffered += o.send_buffered;
        self.unacked_records += o.unacked_records;
    }
}

/// Live sessions only, and all sessions (ended ones included).
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    pub live: Counts,
    pub all: Counts,
}

#[derive(Debug)]
struct Live {
    session: Session,
    /// Bytes (sent, received) last seen per connection ID. A session forgets the oldest of its
    /// finished connections (it keeps a few for reports), so the counts are remembered here:
    /// the totals never go backwards.
    conns: BTreeMap<u32, (u64, u64)>,
}

impl Live {
    fn read(&mut self) -> Counts {
        let mut usable = 0;
        for c in self.session.connections() {
            let seen = self.conns.entry(c.id).or_default();
            *seen = (seen.0.max(c.bytes_sent), seen.1.max(c.bytes_received));
            usable += u64::from(c.usable);
        }
        let s = self.session.stats();
        let m = self.session.memory_use();
        Counts {
            records_resent: s.records_resent,
            receive_credit: m.receive_credit,
            receive_budget: m.receive_budget,
            receive_allocated: m.receive_allocated,
            send_buffered: m.send_buffered,
            unacked_records: m.unacked_records,
            sessions: 1,
            usable,
            connections: self.conns.len() as u64,
            streams_by_peer: s.streams_accepted,
            streams_by_server: s.streams_opened,
            streams_refused: s.streams_refused,
            stream_bytes_received: s.stream_bytes_received,
            stream_bytes_sent: s.stream_bytes_sent,
            bytes_sent: self.conns.values().map(|c| c.0).sum(),
            bytes_received: self.conns.values().map(|c| c.1).sum(),
            failovers: s.failovers,
        }
    }
}

#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    live: HashMap<u64, Live>,
    ended: Counts,
}

#[derive(Debug, Default)]
pub struct SessionTable(Mutex<Table>);

impl SessionTable {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.0.lock_unpoisoned()
    }

    pub fn start(&self, session: Session) -> u64 {
        let mut t = self.table();
        let id = t.next_id;
        t.next_id += 1;
        t.live.insert(id, Live { session, conns: BTreeMap::new() });
        id
    }

    /// The session is over: its final counters join the totals of ended sessions.
    pub fn end(&self, id: u64) {
        let mut t = self.table();
        if let Some(mut live) = t.live.remove(&id) {
            let last = Counts {
                usable: 0,
                receive_credit: 0,
                receive_budget: 0,
                receive_allocated: 0,
                send_buffered: 0,
                unacked_records: 0,
                ..live.read()
            };
            t.ended.add(&last);
        }
    }

    pub fn totals(&self) -> Totals {
        let mut t = self.table();
        let mut live = Counts::default();
        for s in t.live.values_mut() {
            live.add(&s.read());
        }
        let mut all = t.ended;
        all.add(&live);
        Totals { live, all }
    }
}

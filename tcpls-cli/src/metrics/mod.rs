//! Prometheus metrics of a server (`tcpls serve --metrics ADDR`, `tcpls tunnel server --metrics
//! ADDR`): what its listeners did with incoming connections (from the library's
//! [`tcpls::ListenerStats`]) and what its sessions carried (from each session's own counters,
//! read at scrape time). Names and meanings: docs/OBSERVABILITY.md §3.

mod http;
mod sessions;

pub use http::serve_metrics;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use sessions::{SessionTable, Totals};
use tcpls::proto::FarmTicketer;
use tcpls::{JoinRegistry, Session};
use tcpls_tunnel::tunnel::ClientStats;

/// Reads the per-client counters of a tunnel concentrator at scrape time.
pub type ClientStatsSource = Arc<dyn Fn() -> Vec<ClientStats> + Send + Sync>;

/// The metrics of one server; cheap to clone (shared state).
#[derive(Clone, Debug)]
pub struct ServerMetrics {
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    /// The registry every listener of the server shares: its listener statistics (none for the
    /// tunnel client, which accepts no TCPLS connections).
    joins: Option<JoinRegistry>,
    /// The `opened_by` label of streams this side opened: "server" or "client".
    local: &'static str,
    sessions: SessionTable,
    refused_max_sessions: AtomicU64,
    /// A tunnel concentrator's per-client counters (label `client`).
    clients: OnceLock<ClientSource>,
    /// The shared ticket keys of a farm node (`--ticket-keys`).
    tickets: OnceLock<Arc<FarmTicketer>>,
}

struct ClientSource(ClientStatsSource);

impl std::fmt::Debug for ClientSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientSource")
    }
}

/// Keeps a session counted as live; when dropped (the session is over), its final counters move
/// to the totals of ended sessions.
#[must_use]
pub struct Tracked {
    state: Arc<State>,
    id: u64,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.state.sessions.end(self.id);
    }
}

impl ServerMetrics {
    /// Metrics for the server whose listeners share `registry`.
    pub fn new(registry: JoinRegistry) -> Self {
        Self::with_listeners(Some(registry))
    }

    fn with_listeners(joins: Option<JoinRegistry>) -> Self {
        let local = if joins.is_some() { "server" } else { "client" };
        let state = State {
            joins,
            local,
            sessions: SessionTable::default(),
            refused_max_sessions: AtomicU64::new(0),
            clients: OnceLock::new(),
            tickets: OnceLock::new(),
        };
        Self { state: Arc::new(state) }
    }

    /// Counts `session` as live until the returned guard is dropped.
    pub fn track(&self, session: &Session) -> Tracked {
        Tracked { state: self.state.clone(), id: self.state.sessions.start(session.clone()) }
    }

    /// A session refused because `--max-sessions` were being served.
    pub fn refused_max_sessions(&self) {
        self.state.refused_max_sessions.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds the per-client series of a tunnel concentrator (set once).
    pub fn with_clients(&self, source: ClientStatsSource) {
        let _ = self.state.clients.set(ClientSource(source));
    }

    /// Adds the farm ticket series of `--ticket-keys` (set once).
    pub fn with_ticketer(&self, ticketer: Arc<FarmTicketer>) {
        let _ = self.state.tickets.set(ticketer);
    }

    /// The Prometheus text exposition (format 0.0.4) of the current values.
    pub fn render(&self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Snapshot(self.state.clone())));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
        out
    }
}

/// Reads every value when the registry is encoded (one scrape).
#[derive(Debug)]
struct Snapshot(Arc<State>);

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> Result<(), std::fmt::Error> {
    ConstCounter::new(value).encode(e.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> Result<(), std::fmt::Error> {
    let value = i64::try_from(value).unwrap_or(i64::MAX);
    ConstGauge::new(value).encode(e.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

fn labelled_counters(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &'static str,
    values: &[(&'static str, u64)],
) -> Result<(), std::fmt::Error> {
    let mut family = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value_label, value) in values {
        let labels = [(label, *value_label)];
        ConstCounter::new(*value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for Snapshot {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let state = &self.0;
        let Totals { live, all } = state.sessions.totals();
        let e = &mut e;
        gauge(e, "tcpls_sessions_active", "Sessions being served now.", live.sessions)?;
        counter(e, "tcpls_sessions", "Sessions served since the start (ended and live).", all.sessions)?;
        gauge(e, "tcpls_connections_active", "TCP connections of live sessions that can carry data.", live.usable)?;
        counter(
            e,
            "tcpls_connections",
            "TCP connections of served sessions: first ones and joined ones.",
            all.connections,
        )?;
        labelled_counters(
            e,
            "tcpls_streams",
            "Streams of served sessions, by the side that opened them.",
            "opened_by",
            &[("peer", all.streams_by_peer), (state.local, all.streams_by_server)],
        )?;
        counter(e, "tcpls_stream_bytes_received", "Stream payload bytes received.", all.stream_bytes_received)?;
        counter(
            e,
            "tcpls_stream_bytes_sent",
            "Stream payload bytes sent (queued by the application).",
            all.stream_bytes_sent,
        )?;
        counter(
            e,
            "tcpls_bytes_received",
            "Bytes read from the TCP connections (TLS records, handshakes included).",
            all.bytes_received,
        )?;
        counter(
            e,
            "tcpls_bytes_sent",
            "Bytes written to the TCP connections (TLS records, handshakes included).",
            all.bytes_sent,
        )?;
        counter(
            e,
            "tcpls_failovers",
            "Connections that failed with unacknowledged records, re-sent on others.",
            all.failovers,
        )?;
        counter(
            e,
            "tcpls_records_resent",
            "Records of failed connections whose content was sent again on others (failover).",
            all.records_resent,
        )?;
        gauge(
            e,
            "tcpls_receive_credit_bytes",
            "Flow-control credit granted to peers and not yet read by the application (live sessions): what the receive budget bounds.",
            live.receive_credit,
        )?;
        gauge(
            e,
            "tcpls_receive_budget_bytes",
            "Receive budgets of the live sessions (SessionConfig::receive_budget), summed.",
            live.receive_budget,
        )?;
        gauge(
            e,
            "tcpls_receive_buffer_bytes",
            "Memory allocated by the live sessions' stream receive buffers.",
            live.receive_allocated,
        )?;
        gauge(
            e,
            "tcpls_send_buffer_bytes",
            "Stream bytes held for sending by the live sessions (written, not yet acknowledged).",
            live.send_buffered,
        )?;
        gauge(
            e,
            "tcpls_unacked_records",
            "Sent records the live sessions keep for failover until the peer acknowledges them.",
            live.unacked_records,
        )?;
        let Some(joins) = &state.joins else { return Ok(()) };
        let l = joins.listener_stats();
        encode_handshakes(e, &l)?;
        labelled_counters(
            e,
            "tcpls_refusals",
            "Connections or streams the server refused, by reason.",
            "reason",
            &[
                ("join_token", l.joins_refused_token),
                ("join_budget", l.joins_refused_budget),
                ("accept_queue_full", l.accept_queue_full),
                ("max_sessions", state.refused_max_sessions.load(Ordering::Relaxed)),
                ("stream_limit", all.streams_refused),
            ],
        )?;
        if let Some(source) = state.clients.get() {
            encode_clients(e, &(source.0)())?;
        }
        if let Some(ticketer) = state.tickets.get() {
            encode_tickets(e, ticketer)?;
        }
        Ok(())
    }
}

/// The listeners' handshakes by outcome, and the joins handed over between cores.
fn encode_handshakes(e: &mut DescriptorEncoder, l: &tcpls::ListenerStats) -> Result<(), std::fmt::Error> {
    labelled_counters(
        e,
        "tcpls_handshakes",
        "TCP connections accepted by the listeners, by what their handshake ended in.",
        "outcome",
        &[
            ("session", l.sessions),
            ("join", l.joins),
            ("join_refused", l.joins_refused_token + l.joins_refused_budget),
            ("failed", l.handshakes_failed),
            ("timeout", l.handshakes_timed_out),
            ("queue_full", l.accept_queue_full),
        ],
    )?;
    counter(
        e,
        "tcpls_joins_handed_over",
        "Joins accepted by one core's listener for a session of another core, handed over to it (per-core serving).",
        l.joins_handed_over,
    )?;
    Ok(())
}

/// Farm tickets (`--ticket-keys`): which key set is loaded and what became of tickets.
fn encode_tickets(e: &mut DescriptorEncoder, ticketer: &FarmTicketer) -> Result<(), std::fmt::Error> {
    gauge(
        e,
        "tcpls_ticket_key_generation",
        "Ticket key sets loaded since the start: 1, plus one per SIGHUP that read a good key file.",
        ticketer.generation(),
    )?;
    let t = ticketer.stats();
    labelled_counters(
        e,
        "tcpls_farm_tickets",
        "Farm session tickets: issued, resumed (under the current or a previous key), refused (unknown key, forged, expired).",
        "outcome",
        &[
            ("issued", t.issued),
            ("resumed", t.resumed - t.resumed_previous_key),
            ("resumed_previous_key", t.resumed_previous_key),
            ("refused", t.refused),
        ],
    )
}

/// The per-client series: label `client` is a configured client name or "other" (bounded by
/// the configuration, never by what certificates say).
fn encode_clients(e: &mut DescriptorEncoder, clients: &[ClientStats]) -> Result<(), std::fmt::Error> {
    type Pick = fn(&ClientStats) -> u64;
    let gauges: [(&str, &str, Pick); 1] =
        [("tcpls_tunnel_client_sessions_active", "Sessions of this client being served now.", |c| c.sessions_active)];
    for (name, help, pick) in gauges {
        let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for c in clients {
            let v = i64::try_from(pick(c)).unwrap_or(i64::MAX);
            ConstGauge::new(v).encode(family.encode_family(&[("client", c.label.as_str())])?)?;
        }
    }
    let counters: [(&str, &str, Pick); 5] = [
        ("tcpls_tunnel_client_sessions", "Sessions of this client served since the start.", |c| c.sessions),
        (
            "tcpls_tunnel_client_sessions_refused",
            "Sessions of this client refused by the per-client policy (unknown client, max-sessions).",
            |c| c.sessions_refused,
        ),
        ("tcpls_tunnel_client_connections", "Tunneled connections this client asked for.", |c| c.stats.streams),
        (
            "tcpls_tunnel_client_refused_dest",
            "Tunneled connections of this client refused by the destination policy.",
            |c| c.stats.refused_dest,
        ),
        (
            "tcpls_tunnel_client_bytes_up",
            "Bytes relayed from this client towards destinations (ended connections).",
            |c| c.stats.bytes_up,
        ),
    ];
    for (name, help, pick) in counters {
        let mut family = e.encode_descriptor(name, help, None, MetricType::Counter)?;
        for c in clients {
            ConstCounter::new(pick(c)).encode(family.encode_family(&[("client", c.label.as_str())])?)?;
        }
    }
    let mut family = e.encode_descriptor(
        "tcpls_tunnel_client_bytes_down",
        "Bytes relayed from destinations towards this client (ended connections).",
        None,
        MetricType::Counter,
    )?;
    for c in clients {
        ConstCounter::new(c.stats.bytes_down).encode(family.encode_family(&[("client", c.label.as_str())])?)?;
    }
    Ok(())
}

/// `--metrics ADDR` of a server: starts the endpoint for the server whose listeners share
/// `registry`, and says where it is on stderr (`who` names the command).
pub async fn start(addr: &str, registry: JoinRegistry, who: &str) -> Result<ServerMetrics, String> {
    let addr = *crate::args::resolve(addr)?.first().ok_or_else(|| format!("--metrics {addr}: no address"))?;
    let metrics = ServerMetrics::new(registry);
    let bound = serve_metrics(addr, metrics.clone()).await?;
    eprintln!("{who}: metrics on http://{bound}/metrics");
    Ok(metrics)
}

/// `tcpls tunnel server --metrics ADDR`: the concentrator's sessions are tracked from its
/// session hook.
pub async fn attach_to_concentrator(
    conc: &mut tcpls_tunnel::tunnel::Concentrator,
    addr: &str,
    registry: JoinRegistry,
) -> Result<ServerMetrics, String> {
    let metrics = start(addr, registry, "tcpls tunnel server").await?;
    let control = conc.control();
    metrics.with_clients(Arc::new(move || control.client_stats()));
    let tracker = metrics.clone();
    conc.on_session_start(Arc::new(move |session: &Session| Box::new(tracker.track(session)) as Box<dyn Send>));
    Ok(metrics)
}

/// `tcpls tunnel client --metrics ADDR`: the client's current session (the one after a
/// reconnect too), without the listener families (the client accepts no TCPLS connections).
pub async fn attach_to_tunnel_client(client: tcpls_tunnel::tunnel::TunnelClient, addr: &str) -> Result<(), String> {
    let addr = *crate::args::resolve(addr)?.first().ok_or_else(|| format!("--metrics {addr}: no address"))?;
    let metrics = ServerMetrics::with_listeners(None);
    let bound = serve_metrics(addr, metrics.clone()).await?;
    eprintln!("tcpls tunnel client: metrics on http://{bound}/metrics");
    // The task holds a clone of the client for the life of the command (which serves until
    // it exits). It follows reconnects: a new session is counted from when it replaces the old.
    tokio::spawn(async move {
        let mut tracked: Option<(Session, Tracked)> = None;
        loop {
            let current = client.session();
            if !tracked.as_ref().is_some_and(|(s, _)| s.is_same(&current)) {
                let guard = metrics.track(&current);
                tracked = Some((current, guard));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    });
    Ok(())
}

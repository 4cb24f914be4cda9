//! Namespace topology: client, server and N disjoint emulated paths.

use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::emu::{LinkDirection, LinkParams, LinkStats};
use crate::sys;

/// Every namespace created by this crate starts with this, followed by `<pid>x<n>`.
pub const NS_PREFIX: &str = "tn";

/// Name of the TUN device carrying client→server traffic inside a router namespace.
const TUN_UP: &str = "tunup";
/// Name of the TUN device carrying server→client traffic inside a router namespace.
const TUN_DOWN: &str = "tundn";
/// Router-side veth towards the client / towards the server.
const R_TO_C: &str = "toc";
const R_TO_S: &str = "tos";

fn err(msg: impl Into<String>) -> io::Error {
    io::Error::other(msg.into())
}

/// Parameters of one path (applied to both directions; see [`Path::direction`] for asymmetry).
#[derive(Debug, Clone, PartialEq)]
pub struct PathSpec {
    /// One-way delay in milliseconds (RTT = 2 × delay_ms plus serialisation and queueing).
    pub delay_ms: f64,
    /// One-way delay variation in milliseconds: an extra delay in [0, jitter_ms], drawn again
    /// every [`crate::emu::JITTER_PERIOD`] in each direction (packets are never reordered).
    pub jitter_ms: f64,
    /// Bottleneck rate in Mbit/s of IP packet bytes (0 = unlimited).
    pub rate_mbps: f64,
    /// Drop-tail queue size in packets (0 = unlimited).
    pub queue_packets: usize,
    /// Random loss probability in [0, 1], per packet and direction.
    pub loss: f64,
    /// Give the path IPv4 addresses.
    pub ipv4: bool,
    /// Give the path IPv6 addresses.
    pub ipv6: bool,
}

impl Default for PathSpec {
    fn default() -> Self {
        PathSpec {
            delay_ms: 0.0,
            jitter_ms: 0.0,
            rate_mbps: 0.0,
            queue_packets: 1000,
            loss: 0.0,
            ipv4: true,
            ipv6: false,
        }
    }
}

impl PathSpec {
    /// A path with the given one-way delay and rate, IPv4 only, 1000-packet queue, no loss.
    pub fn new(delay_ms: f64, rate_mbps: f64) -> PathSpec {
        PathSpec { delay_ms, rate_mbps, ..PathSpec::default() }
    }

    fn link_params(&self) -> LinkParams {
        LinkParams {
            delay: Duration::from_secs_f64(self.delay_ms.max(0.0) / 1000.0),
            jitter: Duration::from_secs_f64(self.jitter_ms.max(0.0) / 1000.0),
            rate_bps: (self.rate_mbps.max(0.0) * 1e6) as u64,
            queue_packets: self.queue_packets,
            loss: self.loss.clamp(0.0, 1.0),
            blackhole: false,
            up: true,
        }
    }
}

/// Which namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
    /// The router (emulator / middlebox) namespace of path i.
    Router(usize),
}

/// Direction of traffic on a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    ClientToServer,
    ServerToClient,
}

/// Addresses and names of one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathInfo {
    pub index: usize,
    pub client_v4: Option<Ipv4Addr>,
    pub server_v4: Option<Ipv4Addr>,
    pub client_v6: Option<Ipv6Addr>,
    pub server_v6: Option<Ipv6Addr>,
    /// Interface name of this path in the client namespace.
    pub client_iface: String,
    /// Interface name of this path in the server namespace.
    pub server_iface: String,
    /// Name of the router namespace of this path.
    pub router_ns: String,
}

impl PathInfo {
    /// The client address (IPv4 preferred).
    pub fn client_addr(&self) -> Option<IpAddr> {
        self.client_v4.map(IpAddr::V4).or(self.client_v6.map(IpAddr::V6))
    }
    /// The server address (IPv4 preferred).
    pub fn server_addr(&self) -> Option<IpAddr> {
        self.server_v4.map(IpAddr::V4).or(self.server_v6.map(IpAddr::V6))
    }
}

// Addressing plan, path i (k = i + 1):
//   client p<i> 10.k.1.2/24  fd00:k:1::2/64   — router toc 10.k.1.1 / fd00:k:1::1
//   server p<i> 10.k.2.2/24  fd00:k:2::2/64   — router tos 10.k.2.1 / fd00:k:2::1
fn v4(i: usize, net: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, (i + 1) as u8, net, host)
}
/// Fixed MAC addresses, so that neighbours can be configured statically.
fn mac(i: usize, net: u8, host: u8) -> String {
    format!("02:00:00:{:02x}:{net:02x}:{host:02x}", i + 1)
}
fn v6(i: usize, net: u16, host: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, (i + 1) as u16, net, 0, 0, 0, 0, host)
}

/// One emulated path (both directions).
pub struct Path {
    info: PathInfo,
    spec: PathSpec,
    c2s: LinkDirection,
    s2c: LinkDirection,
    client_ns: String,
    server_ns: String,
}

impl Path {
    /// Addresses and names.
    pub fn info(&self) -> &PathInfo {
        &self.info
    }
    /// The spec the path was built with.
    pub fn spec(&self) -> &PathSpec {
        &self.spec
    }
    /// The emulator of one direction (for asymmetric settings and counters).
    pub fn direction(&self, dir: Dir) -> &LinkDirection {
        match dir {
            Dir::ClientToServer => &self.c2s,
            Dir::ServerToClient => &self.s2c,
        }
    }
    fn both(&self, f: impl Fn(&mut LinkParams)) {
        self.c2s.update(&f);
        self.s2c.update(&f);
    }
    /// Drop every packet (also those in flight) in both directions while `on`.
    pub fn set_blackhole(&self, on: bool) {
        self.both(|p| p.blackhole = on);
    }
    /// One-way delay in ms, both directions.
    pub fn set_delay_ms(&self, ms: f64) {
        self.both(|p| p.delay = Duration::from_secs_f64(ms.max(0.0) / 1000.0));
    }
    /// Rate in Mbit/s (0 = unlimited), both directions.
    pub fn set_rate_mbps(&self, mbps: f64) {
        self.both(|p| p.rate_bps = (mbps.max(0.0) * 1e6) as u64);
    }
    /// Random loss probability, both directions.
    pub fn set_loss(&self, loss: f64) {
        self.both(|p| p.loss = loss.clamp(0.0, 1.0));
    }
    /// Queue size in packets, both directions.
    pub fn set_queue_packets(&self, n: usize) {
        self.both(|p| p.queue_packets = n);
    }
    /// Take the link down or up. Down = the emulator drops everything *and* the router-side
    /// veths are set administratively down, so the client and server interfaces of this path
    /// lose carrier (`NO-CARRIER`), like a pulled cable. Addresses and routes are kept/restored.
    pub fn set_up(&self, up: bool) -> io::Result<()> {
        let r = &self.info.router_ns;
        if up {
            ip(Some(r), &["link", "set", R_TO_C, "up"])?;
            ip(Some(r), &["link", "set", R_TO_S, "up"])?;
            configure_routes(&self.client_ns, &self.server_ns, &self.info)?;
            self.both(|p| p.up = true);
        } else {
            self.both(|p| p.up = false);
            ip(Some(r), &["link", "set", R_TO_C, "down"])?;
            ip(Some(r), &["link", "set", R_TO_S, "down"])?;
        }
        Ok(())
    }
    /// Puts back this path's routes and static neighbours, e.g. after a test set the client's
    /// interface down and up (`ip link set DEV down` flushes what went through it).
    pub fn restore_routes(&self) -> io::Result<()> {
        configure_routes(&self.client_ns, &self.server_ns, &self.info)
    }
    /// Counters of one direction.
    pub fn stats(&self, dir: Dir) -> LinkStats {
        self.direction(dir).stats()
    }
}

/// Builder for [`Topology`].
#[derive(Debug, Clone, Default)]
pub struct TopologyBuilder {
    paths: Vec<PathSpec>,
}

impl TopologyBuilder {
    /// The paths (at least one, at most 250).
    pub fn paths(mut self, paths: Vec<PathSpec>) -> Self {
        self.paths = paths;
        self
    }
    /// Add one path.
    pub fn path(mut self, p: PathSpec) -> Self {
        self.paths.push(p);
        self
    }
    /// Create namespaces, links, routes and start the emulators.
    pub fn build(self) -> io::Result<Topology> {
        Topology::build(self.paths)
    }
}

/// A running topology; everything is torn down on drop.
pub struct Topology {
    prefix: String,
    client_ns: String,
    server_ns: String,
    all_ns: Vec<String>,
    paths: Vec<Path>,
    watchdog: Option<(Child, ChildStdin)>,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl Topology {
    /// Start building.
    pub fn builder() -> TopologyBuilder {
        TopologyBuilder::default()
    }

    fn build(specs: Vec<PathSpec>) -> io::Result<Topology> {
        if specs.is_empty() || specs.len() > 250 {
            return Err(err("need between 1 and 250 paths"));
        }
        if specs.iter().any(|s| !s.ipv4 && !s.ipv6) {
            return Err(err("every path needs ipv4 and/or ipv6"));
        }
        cleanup_stale();
        let prefix = format!("{NS_PREFIX}{}x{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst));
        let client_ns = format!("{prefix}-c");
        let server_ns = format!("{prefix}-s");
        let mut all_ns = vec![client_ns.clone(), server_ns.clone()];
        all_ns.extend((0..specs.len()).map(|i| format!("{prefix}-r{i}")));
        let mut topo = Topology { prefix, client_ns, server_ns, all_ns: Vec::new(), paths: Vec::new(), watchdog: None };
        // The watchdog deletes the namespaces when this process dies, even by SIGKILL.
        topo.watchdog = spawn_watchdog(&all_ns).ok();
        for ns in &all_ns {
            ip(None, &["netns", "add", ns])?;
            topo.all_ns.push(ns.clone());
            init_namespace(ns, ns.contains("-r"))?;
        }
        for (i, spec) in specs.into_iter().enumerate() {
            let path = topo.build_path(i, spec)?;
            topo.paths.push(path);
        }
        Ok(topo)
    }

    fn build_path(&self, i: usize, spec: PathSpec) -> io::Result<Path> {
        let (c, s) = (self.client_ns.as_str(), self.server_ns.as_str());
        let r = format!("{}-r{i}", self.prefix);
        let iface = format!("p{i}");
        let (mc, mrc, mrs, ms) = (mac(i, 1, 2), mac(i, 1, 1), mac(i, 2, 1), mac(i, 2, 2));
        let veth = |ns: &str, a: &str, peer: &str, b: &str| {
            ip(
                Some(ns),
                &["link", "add", &iface, "address", a, "type", "veth", "peer", "name", peer, "address", b, "netns", &r],
            )
        };
        veth(c, &mc, R_TO_C, &mrc)?;
        veth(s, &ms, R_TO_S, &mrs)?;
        let info = PathInfo {
            index: i,
            client_v4: spec.ipv4.then(|| v4(i, 1, 2)),
            server_v4: spec.ipv4.then(|| v4(i, 2, 2)),
            client_v6: spec.ipv6.then(|| v6(i, 1, 2)),
            server_v6: spec.ipv6.then(|| v6(i, 2, 2)),
            client_iface: iface.clone(),
            server_iface: iface.clone(),
            router_ns: r.clone(),
        };
        let addrs: [(&str, &str, u8, u16); 4] =
            [(c, &iface, 1, 2), (&r, R_TO_C, 1, 1), (&r, R_TO_S, 2, 1), (s, &iface, 2, 2)];
        for (ns, dev, net, host) in addrs {
            if spec.ipv4 {
                ip(Some(ns), &["addr", "add", &format!("{}/24", v4(i, net, host as u8)), "dev", dev])?;
            }
            if spec.ipv6 {
                ip(Some(ns), &["-6", "addr", "add", &format!("{}/64", v6(i, net as u16, host)), "dev", dev, "nodad"])?;
            }
            ip(Some(ns), &["link", "set", dev, "up"])?;
        }
        // The TUN devices must be created from a thread inside the router namespace.
        let (up_tun, down_tun) = run_in_netns(&r, || -> io::Result<(File, File)> {
            Ok((sys::open_tun(TUN_UP)?, sys::open_tun(TUN_DOWN)?))
        })??;
        for dev in [TUN_UP, TUN_DOWN] {
            ip(Some(&r), &["link", "set", dev, "up"])?;
        }
        // Policy routing in the router: whatever arrives from the client side goes into tunup,
        // whatever arrives from the server side goes into tundn. Packets the emulator writes
        // back come in on the TUN device and use the main table (connected routes towards the
        // client, default route towards the server).
        let families: Vec<&str> =
            [spec.ipv4.then_some("-4"), spec.ipv6.then_some("-6")].into_iter().flatten().collect();
        for fam in &families {
            ip(Some(&r), &[fam, "rule", "add", "iif", R_TO_C, "table", "100", "pref", "100"])?;
            ip(Some(&r), &[fam, "rule", "add", "iif", R_TO_S, "table", "101", "pref", "101"])?;
            ip(Some(&r), &[fam, "route", "replace", "default", "dev", TUN_UP, "table", "100"])?;
            ip(Some(&r), &[fam, "route", "replace", "default", "dev", TUN_DOWN, "table", "101"])?;
        }
        // Source routing in the client: a socket bound to the path-i address uses path i.
        let table = (1000 + i).to_string();
        if let Some(a) = info.client_v4 {
            ip(Some(c), &["-4", "rule", "add", "from", &a.to_string(), "table", &table, "pref", &table])?;
        }
        if let Some(a) = info.client_v6 {
            ip(Some(c), &["-6", "rule", "add", "from", &a.to_string(), "table", &table, "pref", &table])?;
        }
        configure_routes(c, s, &info)?;
        let params = spec.link_params();
        let c2s = LinkDirection::start(up_tun, params, &format!("{i}up"))?;
        let s2c = LinkDirection::start(down_tun, params, &format!("{i}dn"))?;
        Ok(Path { info, spec, c2s, s2c, client_ns: c.to_string(), server_ns: s.to_string() })
    }

    /// The unique prefix of all namespace names of this topology.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    /// Name of a namespace.
    pub fn ns_name(&self, side: Side) -> &str {
        match side {
            Side::Client => &self.client_ns,
            Side::Server => &self.server_ns,
            Side::Router(i) => &self.paths[i].info.router_ns,
        }
    }
    /// All namespaces of this topology.
    pub fn namespaces(&self) -> &[String] {
        &self.all_ns
    }
    /// Path `i` (panics if out of range).
    pub fn path(&self, i: usize) -> &Path {
        &self.paths[i]
    }
    /// All paths.
    pub fn paths(&self) -> &[Path] {
        &self.paths
    }
    /// A `Command` running `program` inside the namespace (`ip netns exec NS program`).
    pub fn command(&self, side: Side, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.arg("netns").arg("exec").arg(self.ns_name(side)).arg(program);
        cmd
    }
    /// Run `ip -n NS ARGS...`, returning stdout.
    pub fn ip(&self, side: Side, args: &[&str]) -> io::Result<String> {
        ip(Some(self.ns_name(side)), args)
    }
    /// Run a closure on a thread inside the namespace and wait for it. Sockets created by the
    /// closure belong to that namespace and can be used from any thread afterwards.
    pub fn run_in<T: Send>(&self, side: Side, f: impl FnOnce() -> T + Send) -> io::Result<T> {
        run_in_netns(self.ns_name(side), f)
    }
    /// Spawn a thread inside the namespace.
    pub fn spawn_in<T: Send + 'static>(
        &self,
        side: Side,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<JoinHandle<T>> {
        spawn_in_netns(self.ns_name(side), f)
    }

    /// Destroy matching TCP sockets in a namespace with `ss -K <filter>` (the kernel aborts
    /// them and sends a RST to the peer), e.g. `&["dst", "10.1.2.2"]` or
    /// `&["sport", "=", ":4433"]`. Returns `ss` output (the killed sockets). Needs
    /// `CONFIG_INET_DIAG_DESTROY` (present here).
    pub fn kill_tcp_sockets(&self, side: Side, filter: &[&str]) -> io::Result<String> {
        let out = self
            .command(side, "ss")
            .args(["-K", "-t", "-n"])
            .args(filter)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| err(format!("running ss: {e}")))?;
        if !out.status.success() {
            return Err(err(format!("ss -K failed: {}", String::from_utf8_lossy(&out.stderr).trim())));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `ip mptcp limits set subflow N add_addr_accepted M` in a namespace.
    pub fn mptcp_limits(&self, side: Side, subflows: u32, add_addr_accepted: u32) -> io::Result<()> {
        self.ip(
            side,
            &[
                "mptcp",
                "limits",
                "set",
                "subflow",
                &subflows.to_string(),
                "add_addr_accepted",
                &add_addr_accepted.to_string(),
            ],
        )
        .map(drop)
    }
    /// `ip mptcp endpoint add ADDR dev IFACE FLAGS...` (flags e.g. `["subflow"]`, `["subflow", "backup"]`, `["signal"]`).
    pub fn mptcp_endpoint_add(&self, side: Side, addr: IpAddr, iface: &str, flags: &[&str]) -> io::Result<()> {
        let a = addr.to_string();
        let mut args = vec!["mptcp", "endpoint", "add", &a, "dev", iface];
        args.extend_from_slice(flags);
        self.ip(side, &args).map(drop)
    }
    /// Typical MPTCP setup: limits of 8 subflows on both sides, and a `subflow` endpoint on the
    /// client for every path but the first (which carries the initial subflow). `backup` marks
    /// those endpoints as backup subflows.
    pub fn mptcp_setup(&self, backup: bool) -> io::Result<()> {
        self.mptcp_limits(Side::Client, 8, 8)?;
        self.mptcp_limits(Side::Server, 8, 8)?;
        let flags: &[&str] = if backup { &["subflow", "backup"] } else { &["subflow"] };
        for p in self.paths.iter().skip(1) {
            for a in [p.info.client_v4.map(IpAddr::V4), p.info.client_v6.map(IpAddr::V6)].into_iter().flatten() {
                self.mptcp_endpoint_add(Side::Client, a, &p.info.client_iface, flags)?;
            }
        }
        Ok(())
    }

    /// A human-readable description.
    pub fn describe(&self) -> String {
        let mut s =
            format!("topology {}\n  client ns: {}\n  server ns: {}\n", self.prefix, self.client_ns, self.server_ns);
        for p in &self.paths {
            let i = &p.info;
            let pr = p.c2s.params();
            s += &format!(
                "  path {}: router ns {}  client {} {}{}  server {} {}{}  delay {:?} each way, rate {} Mbit/s, queue {} pkts, loss {}\n",
                i.index,
                i.router_ns,
                i.client_iface,
                i.client_v4.map(|a| a.to_string()).unwrap_or_default(),
                i.client_v6.map(|a| format!(" {a}")).unwrap_or_default(),
                i.server_iface,
                i.server_v4.map(|a| a.to_string()).unwrap_or_default(),
                i.server_v6.map(|a| format!(" {a}")).unwrap_or_default(),
                pr.delay,
                if pr.rate_bps == 0 { "unlimited".to_string() } else { format!("{}", pr.rate_bps as f64 / 1e6) },
                pr.queue_packets,
                pr.loss,
            );
        }
        s
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // Stop the emulators first: their TUN fds keep the router namespaces alive.
        self.paths.clear();
        for ns in &self.all_ns {
            let _ = ip(None, &["netns", "del", ns]);
        }
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// Routes and static neighbours of one path in the client, server and router (idempotent:
/// `replace`). Static (permanent) neighbour entries avoid ARP/NDP entirely, so the first
/// packets of a test see no resolution delay (and lost NDP messages cannot add 1 s stalls).
fn configure_routes(c: &str, s: &str, info: &PathInfo) -> io::Result<()> {
    let i = info.index;
    let r = info.router_ns.as_str();
    let neighbours = [
        (c, info.client_iface.as_str(), 1, 1),
        (r, R_TO_C, 1, 2),
        (r, R_TO_S, 2, 2),
        (s, info.server_iface.as_str(), 2, 1),
    ];
    for (ns, dev, net, host) in neighbours {
        let m = mac(i, net, host);
        if info.client_v4.is_some() {
            let a = v4(i, net, host).to_string();
            ip(Some(ns), &["neigh", "replace", &a, "lladdr", &m, "dev", dev, "nud", "permanent"])?;
        }
        if info.client_v6.is_some() {
            let a = v6(i, net as u16, host as u16).to_string();
            ip(Some(ns), &["-6", "neigh", "replace", &a, "lladdr", &m, "dev", dev, "nud", "permanent"])?;
        }
    }
    let table = (1000 + i).to_string();
    let dev = info.client_iface.as_str();
    if info.client_v4.is_some() {
        let (rc, rs) = (v4(i, 1, 1).to_string(), v4(i, 2, 1).to_string());
        ip(Some(c), &["-4", "route", "replace", &format!("{}/24", v4(i, 2, 0)), "via", &rc, "dev", dev])?;
        ip(Some(c), &["-4", "route", "replace", "default", "via", &rc, "dev", dev, "table", &table])?;
        ip(
            Some(s),
            &["-4", "route", "replace", &format!("{}/24", v4(i, 1, 0)), "via", &rs, "dev", &info.server_iface],
        )?;
        ip(Some(r), &["-4", "route", "replace", "default", "via", &v4(i, 2, 2).to_string(), "dev", R_TO_S])?;
    }
    if info.client_v6.is_some() {
        let (rc, rs) = (v6(i, 1, 1).to_string(), v6(i, 2, 1).to_string());
        ip(Some(c), &["-6", "route", "replace", &format!("{}/64", v6(i, 2, 0)), "via", &rc, "dev", dev])?;
        ip(Some(c), &["-6", "route", "replace", "default", "via", &rc, "dev", dev, "table", &table])?;
        ip(
            Some(s),
            &["-6", "route", "replace", &format!("{}/64", v6(i, 1, 0)), "via", &rs, "dev", &info.server_iface],
        )?;
        ip(Some(r), &["-6", "route", "replace", "default", "via", &v6(i, 2, 2).to_string(), "dev", R_TO_S])?;
    }
    Ok(())
}

fn write_sysctl(key: &str, value: &str) -> io::Result<()> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::write(&path, value).map_err(|e| err(format!("sysctl {key}={value}: {e}")))
}

/// Loopback up and sysctls; must run before interfaces are created (for the `default` values).
fn init_namespace(ns: &str, router: bool) -> io::Result<()> {
    ip(Some(ns), &["link", "set", "lo", "up"])?;
    run_in_netns(ns, || -> io::Result<()> {
        for (k, v) in [
            ("net.ipv4.conf.all.rp_filter", "0"),
            ("net.ipv4.conf.default.rp_filter", "0"),
            ("net.ipv6.conf.all.keep_addr_on_down", "1"),
            ("net.ipv6.conf.default.keep_addr_on_down", "1"),
            ("net.ipv6.conf.all.accept_dad", "0"),
            ("net.ipv6.conf.default.accept_dad", "0"),
        ] {
            write_sysctl(k, v)?;
        }
        if router {
            write_sysctl("net.ipv4.ip_forward", "1")?;
            write_sysctl("net.ipv6.conf.all.forwarding", "1")?;
        }
        Ok(())
    })?
}

/// A `sh` in its own process group, ignoring terminal signals, that deletes the namespaces once
/// its stdin reaches EOF — i.e. when we drop the topology or when this process dies in any way.
fn spawn_watchdog(namespaces: &[String]) -> io::Result<(Child, ChildStdin)> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(r#"trap '' INT TERM HUP; while read -r _; do :; done; for n in "$@"; do ip netns del "$n" 2>/dev/null; done; exit 0"#)
        .arg("tcpls-netem-watchdog")
        .args(namespaces)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    let stdin = child.stdin.take().ok_or_else(|| err("watchdog without stdin"))?;
    Ok((child, stdin))
}

/// Run `ip [-n NS] ARGS...`; error (with stderr) on failure; returns stdout.
pub(crate) fn ip(ns: Option<&str>, args: &[&str]) -> io::Result<String> {
    let mut cmd = Command::new("ip");
    if let Some(ns) = ns {
        cmd.arg("-n").arg(ns);
    }
    let out = cmd.args(args).stdin(Stdio::null()).output().map_err(|e| err(format!("running ip: {e}")))?;
    if !out.status.success() {
        return Err(err(format!(
            "`ip {}{}` failed: {}",
            ns.map(|n| format!("-n {n} ")).unwrap_or_default(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn open_netns(ns: &str) -> io::Result<File> {
    File::open(format!("/run/netns/{ns}")).map_err(|e| err(format!("opening netns {ns}: {e}")))
}

/// Run a closure on a new thread that has entered network namespace `ns`; wait for the result.
/// Panics in the closure are propagated.
pub fn run_in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    let file = open_netns(ns)?;
    std::thread::scope(|s| {
        let h = s.spawn(move || -> io::Result<T> {
            sys::setns_net(&file)?;
            Ok(f())
        });
        match h.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Spawn a thread that runs `f` inside network namespace `ns`.
pub fn spawn_in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<JoinHandle<T>> {
    let file = open_netns(ns)?;
    let (tx, rx) = std::sync::mpsc::channel::<io::Result<()>>();
    let h = std::thread::Builder::new().name(format!("in-{ns}")).spawn(move || {
        let entered = sys::setns_net(&file);
        let ok = entered.is_ok();
        let _ = tx.send(entered);
        if !ok {
            // The caller gets the error from the channel; never run `f` in the wrong namespace.
            std::panic::panic_any("setns failed");
        }
        f()
    })?;
    match rx.recv() {
        Ok(Ok(())) => Ok(h),
        Ok(Err(e)) => {
            let _ = h.join();
            Err(e)
        }
        Err(_) => Err(err("namespace thread died")),
    }
}

/// Names of all network namespaces created by this crate (any process).
pub fn list_namespaces() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| parse_pid(n).is_some())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `tn<pid>x<n>-...` → pid.
fn parse_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(NS_PREFIX)?;
    let (pid, rest) = rest.split_once('x')?;
    let (n, _) = rest.split_once('-')?;
    n.parse::<u32>().ok()?;
    pid.parse().ok()
}

fn delete(names: impl IntoIterator<Item = String>) -> Vec<String> {
    names.into_iter().filter(|n| ip(None, &["netns", "del", n]).is_ok()).collect()
}

/// Delete the namespaces of topology `prefix` (e.g. `tn1234x0`). Returns the deleted names.
pub fn cleanup(prefix: &str) -> Vec<String> {
    delete(list_namespaces().into_iter().filter(|n| n.starts_with(&format!("{prefix}-"))))
}

/// Delete namespaces left behind by processes that no longer exist. Returns the deleted names.
pub fn cleanup_stale() -> Vec<String> {
    delete(
        list_namespaces()
            .into_iter()
            .filter(|n| parse_pid(n).is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())),
    )
}

/// Delete every namespace created by this crate, including those of running processes.
pub fn cleanup_all() -> Vec<String> {
    delete(list_namespaces())
}

/// Can network-namespace tests run here? `Err(reason)` if not (not root, no `/dev/net/tun`,
/// no iproute2, or `ip netns add` fails). The probe runs once per process.
pub fn check_support() -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    RESULT
        .get_or_init(|| {
            if sys::euid() != 0 {
                return Err("not running as root".into());
            }
            if !std::path::Path::new("/dev/net/tun").exists() {
                return Err("/dev/net/tun is missing".into());
            }
            if Command::new("ip").arg("-V").output().map(|o| !o.status.success()).unwrap_or(true) {
                return Err("iproute2 `ip` is not installed".into());
            }
            let probe = format!("{NS_PREFIX}{}x999999-probe", std::process::id());
            ip(None, &["netns", "add", &probe]).map_err(|e| format!("cannot create network namespaces: {e}"))?;
            let tun = run_in_netns(&probe, || sys::open_tun("tnprobe").map(drop));
            let _ = ip(None, &["netns", "del", &probe]);
            match tun {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) | Err(e) => Err(format!("cannot create TUN devices: {e}")),
            }
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_parsing() {
        assert_eq!(parse_pid("tn1234x0-c"), Some(1234));
        assert_eq!(parse_pid("tn1234x12-r3"), Some(1234));
        assert_eq!(parse_pid("tn1234-c"), None);
        assert_eq!(parse_pid("other"), None);
    }

    #[test]
    fn addressing() {
        assert_eq!(v4(0, 1, 2), Ipv4Addr::new(10, 1, 1, 2));
        assert_eq!(v6(1, 2, 2).to_string(), "fd00:2:2::2");
    }
}

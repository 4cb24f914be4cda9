//! `tcpls perf`'s options (iperf3's where they mean the same) and their checks, before the
//! measurement itself (client.rs).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tcpls::SessionConfig;

use super::report::{Out, Output, PerfReport};
use super::{client, report};
use crate::args::{host_of, parse_duration, parse_rate, parse_size, resolve};
use crate::interrupt::{stop_watch, Stop};
use crate::units::Format;
use crate::{client_setup, logging, probe, Ended, TrustArgs};

#[derive(Args)]
pub struct PerfArgs {
    /// Server address: HOST:PORT, [V6]:PORT or HOST (port 4443, or -p PORT).
    #[arg(required_unless_present = "client", conflicts_with = "client")]
    addr: Option<String>,
    /// The server address, as iperf3's -c (the same as ADDR).
    #[arg(short = 'c', long, value_name = "ADDR")]
    client: Option<String>,
    /// Server port, when the address has none (iperf3's -p; default 4443).
    #[arg(short = 'p', long)]
    port: Option<u16>,
    /// Add a connection to the session: [LOCAL@]REMOTE, towards another (or the same) server
    /// address, from a local address or interface: `--path 10.0.0.9:4443`,
    /// `--path dev:wwan0@203.0.113.5:4443`, `--path 192.168.8.2@203.0.113.5:4443`.
    #[arg(long, value_name = "[LOCAL@]REMOTE")]
    path: Vec<String>,
    /// Keep the paths up with a path manager: `manual` (the --path list) or `fullmesh` (every
    /// local side of the --path list and of the first connection × every server address,
    /// advertised ones included). Lost paths are re-joined with backoff; on Linux interface
    /// and address events drop or bring back paths at once.
    #[arg(long, value_name = "POLICY", value_parser = ["manual", "fullmesh"])]
    path_manager: Option<String>,
    /// The server sends (iperf3's -R/--reverse; default: the client sends).
    #[arg(short = 'R', long, visible_alias = "reverse", conflicts_with_all = ["upload", "bidir"])]
    download: bool,
    /// The client sends (default).
    #[arg(long)]
    upload: bool,
    /// Both directions at once: --streams streams each way (iperf3's --bidir).
    #[arg(long, conflicts_with = "upload")]
    bidir: bool,
    /// Bytes to send, total over all streams of a direction: 256M, 1.5G, 1GB (binary: K = 1024,
    /// as iperf3's -n). Without --bytes or --time: --time 10.
    #[arg(short = 'n', long, value_parser = parse_size, conflicts_with = "time")]
    bytes: Option<u64>,
    /// Run this long: 10, 1.5 (seconds), 10s, 500ms (iperf3's -t; default 10 s).
    #[arg(short = 't', long, value_parser = parse_duration)]
    time: Option<Duration>,
    /// Parallel streams (iperf3's -P/--parallel).
    #[arg(short = 'P', long, visible_alias = "parallel", default_value_t = 1)]
    streams: u32,
    /// Print an interval report every SECONDS: per connection bytes, rate, retransmits, cwnd
    /// and RTT (TCP_INFO), and the verified payload (iperf3's -i; 0: none).
    #[arg(short = 'i', long, value_parser = parse_duration, default_value = "1", value_name = "SECONDS")]
    interval: Duration,
    /// Leave the first SECONDS (TCP slow start) out of the summary; the run gets that much
    /// longer (iperf3's -O).
    #[arg(short = 'O', long, value_parser = parse_duration, default_value = "0", value_name = "SECONDS")]
    omit: Duration,
    /// Units of rates and amounts: a (automatic, default), k, m, g, t (bits/sec), K, M, G, T
    /// (Bytes/sec) (iperf3's -f).
    #[arg(short = 'f', long, value_parser = Format::parse, default_value = "a")]
    format: Format,
    /// Write the report (and the JSON) to FILE, appended, instead of stdout (iperf3's --logfile).
    #[arg(long, value_name = "FILE")]
    logfile: Option<PathBuf>,
    /// Local address to connect from (iperf3's -B), or an interface: `dev:wlan0`
    /// (SO_BINDTODEVICE), as for `connect --bind` and `--path LOCAL@REMOTE`.
    #[arg(short = 'B', long, value_name = "ADDR|dev:NAME")]
    bind: Option<String>,
    /// Local port to connect from (iperf3's --cport).
    #[arg(long, value_name = "PORT")]
    cport: Option<u16>,
    /// Spread each stream over all connections (default: one connection per stream, round-robin).
    #[arg(long)]
    aggregate: bool,
    /// With --aggregate: how this end spreads each stream's records over the connections:
    /// `earliest-arrival` (on the path where the record arrives first, waiting for a fast path
    /// rather than sending late on a slow one; for unequal paths), `lowest-rtt` (the default,
    /// MPTCP's) or `round-robin`. Applies to what this end sends (uploads).
    #[arg(long, value_name = "NAME", requires = "aggregate", value_parser = crate::args::SCHEDULERS)]
    scheduler: Option<String>,
    /// At this time (seconds), move every stream from the first connection to the second and
    /// close the first.
    #[arg(long, value_parser = parse_duration, value_name = "SECONDS")]
    migrate_at: Option<Duration>,
    /// Most memory the session may hold in stream data queued for sending, over all its
    /// streams (default 32M; each stream may always queue 32 KiB); the budget in use follows
    /// the path (twice its bandwidth-delay product, at least 1 MiB). Matters with --upload or
    /// --bidir: the server's own is `tcpls serve --send-budget`.
    #[arg(long, value_parser = crate::args::parse_send_budget, value_name = "SIZE")]
    send_budget: Option<usize>,
    /// Keep the send budget at --send-budget and the receive windows at their maximum instead
    /// of following the path and the reader (the behaviour before autotuning, to compare; the
    /// server's own is `tcpls serve --no-autotune`).
    #[arg(long)]
    no_autotune: bool,
    /// Largest record plaintext (default 16384; ~1400 smooths multipath reordering).
    #[arg(long, value_parser = parse_size)]
    record_size: Option<u64>,
    /// Disable record acknowledgements and failover (no retention of sent data; for
    /// constrained devices and to measure what ACKs cost).
    #[arg(long)]
    no_failover: bool,
    /// Force the copying receive path, for comparison: records are decrypted in the
    /// connection's buffer and copied into the stream's, instead of being decrypted straight
    /// into place. The JSON's zero_copy_bytes / copied_bytes count the client's received bytes.
    #[arg(long)]
    no_zero_copy: bool,
    /// 0-RTT: a warm-up session fetches a session ticket, then the measured session resumes
    /// and sends its first request as TLS early data (JSON: resumed, early_data_accepted).
    #[arg(long)]
    zero_rtt: bool,
    /// Not supported (rustls 0.23 cannot serialize client tickets): hidden from --help, and
    /// refused with that reason for scripts that still pass it.
    #[arg(long, hide = true)]
    session_cache: Option<PathBuf>,
    /// Cap the sender's rate on each connection, in bits per second, e.g. 100M (Rate Limit
    /// frame to the server for --download; our own pacing for --upload) (iperf3's -b).
    #[arg(long, value_parser = parse_rate)]
    rate_limit: Option<u64>,
    /// Ask the server to switch its TCP congestion control, e.g. reno, bbr (applied if its
    /// policy allows; the server logs the outcome).
    #[arg(long)]
    peer_cc: Option<String>,
    /// TCP user timeout (failure detection) in ms on both sides (User Timeout frame).
    #[arg(long)]
    user_timeout: Option<u64>,
    #[command(flatten)]
    trust: TrustArgs,
    /// Print the report as one JSON document on stdout at the end (iperf3's -J).
    #[arg(short = 'J', long)]
    json: bool,
}

/// The values that no run can take: a usage error each (exit status 2).
fn usage(a: &PerfArgs) -> Result<(), String> {
    if let Some(file) = &a.session_cache {
        return Err(format!(
            "--session-cache {}: keeping tickets in a file is not supported (rustls 0.23 cannot serialize a \
             client's TLS 1.3 tickets); --zero-rtt resumes within one run instead",
            file.display()
        ));
    }
    if a.rate_limit == Some(0) {
        return Err("--rate-limit must be above 0 (e.g. 200M)".into());
    }
    if a.streams == 0 {
        return Err("--streams must be at least 1".into());
    }
    if a.bytes == Some(0) {
        return Err("--bytes must be above 0 (for a timed run use --time, e.g. --time 10)".into());
    }
    if a.time.is_some_and(|t| t.is_zero()) {
        return Err("--time must be above 0 (e.g. --time 10, --time 500ms)".into());
    }
    if a.addr.is_none() && a.client.is_none() {
        return Err("no server address: give ADDR (or -c ADDR)".into());
    }
    if let Some(r) = a.record_size.filter(|r| !(256..=16384).contains(r)) {
        return Err(format!("--record-size {r} is out of range (256..=16384)"));
    }
    Ok(())
}

/// Runs `tcpls perf`.
pub async fn run(a: PerfArgs) -> Result<Ended, String> {
    if let Err(e) = usage(&a) {
        // A bad value is a usage error (exit status 2, docs/CLI.md), like clap's own.
        eprintln!("tcpls: {e}");
        let _ = tcpls::flush_default_trace();
        std::process::exit(2);
    }
    let addr = a.addr.clone().or_else(|| a.client.clone()).ok_or("no server address: give ADDR (or -c ADDR)")?;
    let addr = match a.port {
        Some(port) => with_port(&addr, port)?,
        None => addr,
    };
    let (_, server_name, mut tls) = client_setup(&addr, &a.trust, &[])?;
    tls.enable_early_data = a.zero_rtt;
    let addrs = resolve(&addr)?;
    let paths = a.path.iter().map(|p| crate::args::parse_path(p)).collect::<Result<Vec<_>, _>>()?;
    if (a.aggregate || a.migrate_at.is_some()) && paths.is_empty() {
        return Err("--aggregate and --migrate-at need at least one --path".into());
    }
    let (bind, bind_device) = local_side(&a, &addrs)?;
    if (bind.is_some() || bind_device.is_some()) && a.zero_rtt {
        return Err("-B/--cport cannot be combined with --zero-rtt".into());
    }
    let settings = session_settings(&a);
    let time = run_time(&a);
    let out = match &a.logfile {
        Some(path) => Out::file(path)?,
        None => Out::stdout(),
    };
    let output = Output { out, json: a.json, format: a.format };
    let opts = client::PerfOptions {
        addrs,
        paths,
        bind_device,
        path_manager: a.path_manager.as_deref().map(|p| {
            if p == "fullmesh" {
                tcpls::PathPolicy::Fullmesh
            } else {
                tcpls::PathPolicy::Manual
            }
        }),
        aggregate: a.aggregate,
        scheduler: a.scheduler,
        migrate_at: a.migrate_at,
        server_name,
        tls,
        settings,
        mode: if a.bidir {
            client::Mode::Bidir
        } else if a.download {
            client::Mode::Download
        } else {
            client::Mode::Upload
        },
        bytes: a.bytes,
        time,
        omit: a.omit,
        interval: (!a.interval.is_zero()).then_some(a.interval),
        streams: a.streams,
        bind,
        ext: probe::PerfExt {
            rate_limit_bps: a.rate_limit,
            peer_cc: a.peer_cc,
            user_timeout: a.user_timeout.map(Duration::from_millis),
        },
        zero_rtt: a.zero_rtt,
        output: Some(output.clone()),
    };
    let stop = stop_watch("perf", "stopping the transfer and printing what was done");
    let report = client::run(opts, stop.clone()).await?;
    report::print(&report, &output)?;
    if let Some(e) = &report.error {
        return Err(format!("{e} (the summary above covers what was done until then)"));
    }
    if !report.verified {
        return Err("payload verification failed: bytes were lost, duplicated or corrupted".into());
    }
    let signal = *stop.borrow();
    ended(&report, signal)
}

/// The first connection's local side: `-B` (address or `dev:NAME`) and `--cport`, as a
/// socket address (unspecified IP of the server's family when only the port is given) and an
/// interface name.
fn local_side(a: &PerfArgs, addrs: &[SocketAddr]) -> Result<(Option<SocketAddr>, Option<String>), String> {
    let (bind_ip, bind_device) = match a.bind.as_deref() {
        None => (None, None),
        Some(b) => {
            let local = crate::args::parse_local(b).map_err(|e| format!("-B/--bind {b}: {e}"))?;
            (local.local_address().map(|a| a.ip()), local.device_name().map(str::to_string))
        }
    };
    let bind = match (bind_ip, a.cport) {
        (None, None) => None,
        (ip, port) => {
            let ip = ip.unwrap_or(if addrs[0].is_ipv4() {
                std::net::Ipv4Addr::UNSPECIFIED.into()
            } else {
                std::net::Ipv6Addr::UNSPECIFIED.into()
            });
            Some(SocketAddr::new(ip, port.unwrap_or(0)))
        }
    };
    Ok((bind, bind_device))
}

/// The session's settings from the options.
fn session_settings(a: &PerfArgs) -> SessionConfig {
    let mut settings = SessionConfig {
        failover: !a.no_failover,
        zero_copy: !a.no_zero_copy,
        send_autotune: !a.no_autotune,
        receive_autotune: !a.no_autotune,
        ..SessionConfig::default()
    };
    if let Some(b) = a.send_budget {
        settings.send_budget = b;
    }
    if let Some(r) = a.record_size {
        // Within 256..=16384 (`usage`).
        settings.record_size = r as usize;
    }
    if let Some(bps) = a.rate_limit.filter(|_| !a.download) {
        // What we queue beyond what the pacing lets out in a quarter second only makes the
        // sender's count run ahead of the wire (and is dropped at the deadline).
        let quarter_second = usize::try_from(bps / 8 / 4).unwrap_or(usize::MAX);
        settings.stream_send_buffer = quarter_second.clamp(64 << 10, settings.stream_send_buffer);
    }
    settings
}

/// How long the run lasts: `--time`, or iperf3's default of 10 s without `--bytes`. Warns when
/// `--migrate-at` falls after the end.
fn run_time(a: &PerfArgs) -> Option<Duration> {
    // iperf3's default: a 10 s run.
    let time = match (a.bytes, a.time) {
        (None, None) => Some(Duration::from_secs(10)),
        (_, t) => t,
    };
    if let (Some(at), Some(t)) = (a.migrate_at, time) {
        if at >= t + a.omit {
            logging::warn(
                "perf",
                &format!(
                    "--migrate-at {:.2} s is not before the end of the run ({:.2} s): nothing will be migrated",
                    at.as_secs_f64(),
                    (t + a.omit).as_secs_f64()
                ),
            );
        }
    }
    time
}

/// The command's outcome once the report is printed: a signal's exit, or an error when data
/// was not delivered by the deadline.
fn ended(report: &PerfReport, signal: Option<Stop>) -> Result<Ended, String> {
    match signal {
        Some(Stop::Interrupt) => Ok(Ended::Interrupted),
        Some(Stop::Terminate) => Ok(Ended::Terminated),
        None if !report.undelivered.is_empty() => Err(format!(
            "the run ended at its deadline ({:.1} s after --time) with data not delivered: {}",
            client::DEADLINE_GRACE.as_secs_f64(),
            report.undelivered.join("; ")
        )),
        None => Ok(Ended::Done),
    }
}

/// `ADDR` with its port replaced by `port` (`-p`).
fn with_port(addr: &str, port: u16) -> Result<String, String> {
    let host = host_of(addr);
    Ok(if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") })
}

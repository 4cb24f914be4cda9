//! `longfat`: does TCPLS fill a long fat path as plain TCP does? Plain TCP (one connection),
//! TCPLS with one stream and TCPLS with 64 streams (the same bytes) move data from a client
//! namespace to a server namespace across one emulated path (`tcpls-netem`: by default
//! 1 Gbit/s, 50 ms one way, a drop-tail queue of one bandwidth-delay product), the protocols
//! alternating round by round; every received byte is checked. A second scenario changes the
//! path's one-way delay from 5 to 100 ms (RTT 10 to 200 ms) during the transfer. See README.md.

mod analysis;
mod bed;
mod report;
mod table;
mod transfer;

use std::time::Duration;

use serde::Serialize;

use crate::compare::{parse_size, utc_now};
use crate::pki::Pki;
use crate::proto::Proto;
use crate::Res;
use bed::{Bed, PathConfig};
use transfer::{Jump, Spec};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// A constant one-way delay (`--delay-ms`).
    Steady,
    /// The one-way delay changes from `--jump-from-ms` to `--jump-to-ms` during the transfer.
    Jump,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Bottleneck rate of the path, Mbit/s of IP packets, each direction.
    #[arg(long, default_value_t = 1000.0)]
    rate_mbps: f64,
    /// One-way delay of the steady scenario, ms, each direction (RTT = twice this).
    #[arg(long, default_value_t = 50.0)]
    delay_ms: f64,
    /// Drop-tail queue of the path, packets, both scenarios. Default: one bandwidth-delay
    /// product of the steady path in 1500-byte packets (8334 for 1 Gbit/s and 100 ms).
    #[arg(long)]
    queue: Option<usize>,
    /// Bytes per transfer in the steady scenario (binary multiples: 64M, 2G).
    #[arg(long, value_parser = parse_size, default_value = "2G")]
    bytes: u64,
    /// Rounds; each runs every protocol once, in the reverse order of the round before.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Protocols (comma-separated; `tcp` is the reference of the ratios; not QUIC).
    #[arg(long, value_delimiter = ',', default_values_t = [Proto::Tcp, Proto::Tcpls, Proto::Tcpls64], value_enum)]
    protos: Vec<Proto>,
    /// TCP congestion control of the sender's sockets (`TCP_CONGESTION`): cubic, bbr, reno.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// Largest TCP socket buffers of both ends (the maximum of `net.ipv4.tcp_rmem` and `tcp_wmem`).
    #[arg(long, value_parser = parse_size, default_value = "256M")]
    buffer_max: u64,
    /// Scenarios to run (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [Scenario::Steady, Scenario::Jump], value_enum)]
    scenarios: Vec<Scenario>,
    /// Jump scenario: one-way delay before the jump, ms.
    #[arg(long, default_value_t = 5.0)]
    jump_from_ms: f64,
    /// Jump scenario: one-way delay after the jump, ms.
    #[arg(long, default_value_t = 100.0)]
    jump_to_ms: f64,
    /// Jump scenario: when the delay changes, in seconds after the first MiB of data crossed
    /// the path (so that process start-up and handshakes, slow on a loaded machine, do not
    /// count).
    #[arg(long, default_value_t = 5.0)]
    jump_at: f64,
    /// Jump scenario: bytes per transfer.
    #[arg(long, value_parser = parse_size, default_value = "2G")]
    jump_bytes: u64,
    /// Steady goodput leaves out this many seconds after the first write (slow start).
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// A short run that exercises the harness (numbers not meaningful): 32 MiB per steady
    /// transfer, 96 MiB per jump transfer with the jump at 0.5 s, 0.5 s warm-up, one round.
    #[arg(long)]
    quick: bool,
    /// Print the results as JSON (progress still goes to stderr).
    #[arg(long)]
    json: bool,
    /// Give up on one transfer after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Tokio worker threads in each of the two processes.
    #[arg(long, default_value_t = 2)]
    worker_threads: usize,
}

impl Options {
    fn effective(mut self) -> Self {
        if self.quick {
            self.bytes = 32 << 20;
            self.jump_bytes = 96 << 20;
            self.jump_at = 0.5;
            self.warmup = 0.5;
            self.rounds = 1;
        }
        self
    }

    /// One bandwidth-delay product of the steady path, in 1500-byte packets.
    fn bdp_packets(&self) -> usize {
        (self.rate_mbps * 1e6 * 2.0 * self.delay_ms / 1e3 / (1500.0 * 8.0)).ceil().max(1.0) as usize
    }

    fn path(&self, scenario: Scenario) -> PathConfig {
        PathConfig {
            rate_mbps: self.rate_mbps,
            delay_ms: match scenario {
                Scenario::Steady => self.delay_ms,
                Scenario::Jump => self.jump_from_ms,
            },
            queue_packets: self.queue.unwrap_or_else(|| self.bdp_packets()),
            buffer_max: self.buffer_max,
            congestion_control: self.cc.clone(),
        }
    }

    fn jump(&self, scenario: Scenario) -> Option<Jump> {
        (scenario == Scenario::Jump).then_some(Jump {
            from_ms: self.jump_from_ms,
            to_ms: self.jump_to_ms,
            at_s: self.jump_at,
        })
    }

    fn check(&self) -> Res<()> {
        if self.protos.is_empty() || self.rounds == 0 || self.scenarios.is_empty() {
            return Err("nothing to run: give at least one protocol, scenario and round".into());
        }
        if let Some(p) = self.protos.iter().find(|p| matches!(p, Proto::Quic | Proto::Quic9k)) {
            return Err(format!("{} cannot run here: the QUIC ends only use loopback", p.name()).into());
        }
        if self.rate_mbps <= 0.0 || self.delay_ms < 0.0 || self.jump_from_ms < 0.0 || self.jump_to_ms < 0.0 {
            return Err("--rate-mbps must be positive and delays at least 0".into());
        }
        Ok(())
    }
}

/// Protocols of round `round` (1-based): the given order, reversed every other round, so that
/// no protocol always runs right after the same one.
fn round_order(protos: &[Proto], round: u32) -> Vec<Proto> {
    let mut order = protos.to_vec();
    if round % 2 == 0 {
        order.reverse();
    }
    order
}

pub fn run(opts: Options) -> Res<()> {
    let opts = opts.effective();
    opts.check()?;
    if let Some(why) = Bed::unsupported() {
        eprintln!("SKIPPED: tcpls-bench longfat: {why} (the namespace test bed needs root, /dev/net/tun and iproute2)");
        if opts.json {
            println!("{}", serde_json::json!({ "skipped": why }));
        }
        return Ok(());
    }
    let pki = Pki::generate()?;
    let env = pki.env();
    let mut scenarios = Vec::new();
    for &scenario in &opts.scenarios {
        scenarios.push(run_scenario(&opts, scenario, &env)?);
    }
    let report = report::Report::new(utc_now(), scenarios);
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        report.print();
    }
    Ok(())
}

fn run_scenario(opts: &Options, scenario: Scenario, env: &[(&'static str, String); 2]) -> Res<report::ScenarioReport> {
    let path = opts.path(scenario);
    let bed = Bed::build(&path)?;
    let bytes = match scenario {
        Scenario::Steady => opts.bytes,
        Scenario::Jump => opts.jump_bytes,
    };
    let mut samples = Vec::new();
    for round in 1..=opts.rounds {
        for proto in round_order(&opts.protos, round) {
            let spec = Spec {
                proto,
                bytes,
                jump: opts.jump(scenario),
                timeout: Duration::from_secs(opts.timeout),
                worker_threads: opts.worker_threads,
                cc: &opts.cc,
                env,
            };
            let measured = transfer::run(&bed, &spec)
                .map_err(|e| format!("{scenario:?} {} (round {round}): {e}", proto.name()))?;
            let sample = report::Sample::new(round, bytes, &measured, opts.warmup);
            eprintln!("{}", sample.progress_line(scenario, proto, opts.rounds));
            samples.push((proto, sample));
        }
    }
    Ok(report::ScenarioReport::new(scenario, path, bytes, opts, samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_queue_is_one_bdp() {
        let opts = Options {
            rate_mbps: 1000.0,
            delay_ms: 50.0,
            queue: None,
            bytes: 1,
            rounds: 1,
            protos: vec![Proto::Tcp],
            cc: "cubic".into(),
            buffer_max: 1,
            scenarios: vec![Scenario::Steady],
            jump_from_ms: 5.0,
            jump_to_ms: 100.0,
            jump_at: 1.0,
            jump_bytes: 1,
            warmup: 1.0,
            quick: false,
            json: false,
            timeout: 1,
            worker_threads: 1,
        };
        // 1 Gbit/s x 100 ms = 12.5 MB = 8333.3 packets of 1500 bytes.
        assert_eq!(opts.bdp_packets(), 8334);
        assert_eq!(opts.path(Scenario::Jump).delay_ms, 5.0);
        assert_eq!(opts.path(Scenario::Jump).queue_packets, 8334);
    }

    #[test]
    fn rounds_alternate_the_order() {
        let p = [Proto::Tcp, Proto::Tcpls, Proto::Tcpls64];
        assert_eq!(round_order(&p, 1), p.to_vec());
        assert_eq!(round_order(&p, 2), vec![Proto::Tcpls64, Proto::Tcpls, Proto::Tcp]);
        assert_eq!(round_order(&p, 3), p.to_vec());
    }
}

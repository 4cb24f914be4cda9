//! What `longfat` reports: one sample per transfer, medians per protocol and scenario, ratios to
//! plain TCP, as a table or JSON.

use serde::Serialize;

use super::analysis::{end_ns, gbit_s_between, seconds_until};
use super::bed::{end_sysctls, PathConfig};
use super::transfer::{Measured, TIMELINE_MS};
use super::{Options, Scenario};
use crate::compare::{machine, median, percent, Machine};
use crate::proto::Proto;

const SECOND_NS: u64 = 1_000_000_000;
/// A jump transfer has recovered once a 1 s window reaches this share of its goodput over the
/// second half of the time after the jump (its new steady state).
const RECOVERED: f64 = 0.9;

/// The emulator's view of one transfer (data direction).
#[derive(Debug, Clone, Serialize)]
pub struct EmulatorSample {
    pub delivered_packets: u64,
    pub queue_drops: u64,
    /// Mean lateness of delivered packets against their schedule, µs (the emulator keeping up).
    pub mean_late_us: f64,
    /// CPU the emulator (both directions) used, as a share of one CPU, over the whole run
    /// (process start to exit).
    pub cpu_share: f64,
}

/// One transfer.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub round: u32,
    pub seconds: f64,
    /// Bytes / (last byte read - first write).
    pub gbit_s: f64,
    /// From `warmup` seconds after the first write to the last byte.
    pub steady_gbit_s: Option<f64>,
    /// Jump scenario: seconds from the first write to the delay change.
    pub jump_at_s: Option<f64>,
    /// Over the second half of the time between the first write and the jump.
    pub before_jump_gbit_s: Option<f64>,
    /// From the jump to the last byte.
    pub after_jump_gbit_s: Option<f64>,
    /// Over the second half of the time from the jump to the last byte (the new steady state).
    pub late_after_jump_gbit_s: Option<f64>,
    /// Seconds from the jump until a 1 s window reaches 90 % of `late_after_jump_gbit_s`.
    pub recovery_s: Option<f64>,
    /// Seconds from the jump until a 1 s window reaches 90 % of `before_jump_gbit_s` (back to
    /// the goodput it had before: the path's rate did not change); None if it never did.
    pub full_recovery_s: Option<f64>,
    pub sender_peak_rss_mib: f64,
    pub receiver_peak_rss_mib: f64,
    pub sender_cpu_s: f64,
    pub receiver_cpu_s: f64,
    pub emulator: EmulatorSample,
    pub other_load: Option<f64>,
    /// Every byte was compared with the payload (a mismatch fails the run instead).
    pub verified: bool,
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl Sample {
    pub fn new(round: u32, bytes: u64, m: &Measured, warmup_s: f64) -> Self {
        let first = m.sent.t_ns;
        let tl = &m.received.timeline;
        let end = end_ns(tl).unwrap_or(m.received.t_ns);
        let seconds = secs(m.received.t_ns - first);
        let warm = first + (warmup_s * 1e9) as u64;
        let jump = m.jump_ns.filter(|&j| j > first && j < end);
        let late_after = jump.and_then(|j| gbit_s_between(tl, j + (end - j) / 2, end));
        let before = jump.and_then(|j| gbit_s_between(tl, first + (j - first) / 2, j));
        Sample {
            round,
            seconds,
            gbit_s: bytes as f64 * 8.0 / seconds / 1e9,
            steady_gbit_s: gbit_s_between(tl, warm, end),
            jump_at_s: jump.map(|j| secs(j - first)),
            before_jump_gbit_s: before,
            after_jump_gbit_s: jump.and_then(|j| gbit_s_between(tl, j, end)),
            late_after_jump_gbit_s: late_after,
            recovery_s: jump.zip(late_after).and_then(|(j, g)| seconds_until(tl, j, SECOND_NS, RECOVERED * g)),
            full_recovery_s: jump.zip(before).and_then(|(j, g)| seconds_until(tl, j, SECOND_NS, RECOVERED * g)),
            sender_peak_rss_mib: m.sent.peak_rss_kib as f64 / 1024.0,
            receiver_peak_rss_mib: m.received.peak_rss_kib as f64 / 1024.0,
            sender_cpu_s: secs(m.sent.cpu_user_ns + m.sent.cpu_sys_ns),
            receiver_cpu_s: secs(m.received.cpu_user_ns + m.received.cpu_sys_ns),
            emulator: EmulatorSample {
                delivered_packets: m.emulator.tx_packets,
                queue_drops: m.emulator.drop_queue,
                mean_late_us: m.emulator.late_ns as f64 / m.emulator.tx_packets.max(1) as f64 / 1e3,
                cpu_share: m.emulator_cpu_share,
            },
            other_load: m.other_load,
            verified: true,
        }
    }

    pub fn progress_line(&self, scenario: Scenario, proto: Proto, rounds: u32) -> String {
        let opt = |x: Option<f64>| x.map_or_else(|| "-".into(), |v| format!("{v:.3}"));
        let mut line = format!(
            "{scenario:?} round {}/{rounds} {:<9} {:6.3} Gbit/s in {:6.2} s, steady {} Gbit/s",
            self.round,
            proto.name(),
            self.gbit_s,
            self.seconds,
            opt(self.steady_gbit_s)
        );
        if let Some(at) = self.jump_at_s {
            line += &format!(
                ", jump at {at:.2} s: before {} after {} (late {}) Gbit/s, recovery {} s (to before: {} s)",
                opt(self.before_jump_gbit_s),
                opt(self.after_jump_gbit_s),
                opt(self.late_after_jump_gbit_s),
                opt(self.recovery_s),
                opt(self.full_recovery_s)
            );
        }
        line + &format!(
            ", peak RSS MiB sender {:.0} receiver {:.0}, emulator: {} drops, late {:.0} µs, CPU {:.0}%, other load {}",
            self.sender_peak_rss_mib,
            self.receiver_peak_rss_mib,
            self.emulator.queue_drops,
            self.emulator.mean_late_us,
            self.emulator.cpu_share * 100.0,
            percent(self.other_load)
        )
    }
}

/// Median of the values present; None unless more than half of the samples have one (a
/// transfer that never recovered counts as slower than every one that did).
fn median_present(values: &[Option<f64>]) -> Option<f64> {
    let present: Vec<f64> = values.iter().flatten().copied().collect();
    if present.len() * 2 <= values.len() {
        return None;
    }
    let mut all: Vec<f64> = values.iter().map(|v| v.unwrap_or(f64::INFINITY)).collect();
    all.sort_by(f64::total_cmp);
    Some(median(&all)).filter(|m| m.is_finite())
}

/// Medians of one protocol in one scenario.
#[derive(Debug, Serialize)]
pub struct ProtoSummary {
    pub protocol: &'static str,
    pub description: &'static str,
    pub streams: u32,
    pub median_gbit_s: f64,
    pub min_gbit_s: f64,
    pub max_gbit_s: f64,
    /// This protocol's median over plain TCP's (absent without `tcp`).
    pub ratio_to_tcp: Option<f64>,
    pub median_steady_gbit_s: Option<f64>,
    pub steady_ratio_to_tcp: Option<f64>,
    pub median_before_jump_gbit_s: Option<f64>,
    pub median_after_jump_gbit_s: Option<f64>,
    pub after_jump_ratio_to_tcp: Option<f64>,
    pub median_late_after_jump_gbit_s: Option<f64>,
    pub late_after_jump_ratio_to_tcp: Option<f64>,
    pub median_recovery_s: Option<f64>,
    pub median_full_recovery_s: Option<f64>,
    pub median_sender_peak_rss_mib: f64,
    pub median_receiver_peak_rss_mib: f64,
    pub median_queue_drops: f64,
    pub median_emulator_late_us: f64,
    pub median_emulator_cpu_share: f64,
    pub max_other_load: Option<f64>,
    pub samples: Vec<Sample>,
}

impl ProtoSummary {
    fn new(proto: Proto, samples: Vec<Sample>) -> Self {
        let of = |f: fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
        let opt = |f: fn(&Sample) -> Option<f64>| median_present(&samples.iter().map(f).collect::<Vec<_>>());
        let goodputs: Vec<f64> = samples.iter().map(|s| s.gbit_s).collect();
        ProtoSummary {
            protocol: proto.name(),
            description: proto.describe(),
            streams: proto.streams(),
            median_gbit_s: median(&goodputs),
            min_gbit_s: goodputs.iter().copied().fold(f64::INFINITY, f64::min),
            max_gbit_s: goodputs.iter().copied().fold(0.0, f64::max),
            ratio_to_tcp: None,
            median_steady_gbit_s: opt(|s| s.steady_gbit_s),
            steady_ratio_to_tcp: None,
            median_before_jump_gbit_s: opt(|s| s.before_jump_gbit_s),
            median_after_jump_gbit_s: opt(|s| s.after_jump_gbit_s),
            after_jump_ratio_to_tcp: None,
            median_late_after_jump_gbit_s: opt(|s| s.late_after_jump_gbit_s),
            late_after_jump_ratio_to_tcp: None,
            median_recovery_s: opt(|s| s.recovery_s),
            median_full_recovery_s: opt(|s| s.full_recovery_s),
            median_sender_peak_rss_mib: of(|s| s.sender_peak_rss_mib),
            median_receiver_peak_rss_mib: of(|s| s.receiver_peak_rss_mib),
            median_queue_drops: of(|s| s.emulator.queue_drops as f64),
            median_emulator_late_us: of(|s| s.emulator.mean_late_us),
            median_emulator_cpu_share: of(|s| s.emulator.cpu_share),
            max_other_load: samples.iter().filter_map(|s| s.other_load).reduce(f64::max),
            samples,
        }
    }

    fn reference(&self) -> Reference {
        Reference {
            gbit_s: self.median_gbit_s,
            steady: self.median_steady_gbit_s,
            after: self.median_after_jump_gbit_s,
            late_after: self.median_late_after_jump_gbit_s,
        }
    }

    fn set_ratios(&mut self, tcp: &Reference) {
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        self.ratio_to_tcp = Some(self.median_gbit_s / tcp.gbit_s);
        self.steady_ratio_to_tcp = ratio(self.median_steady_gbit_s, tcp.steady);
        self.after_jump_ratio_to_tcp = ratio(self.median_after_jump_gbit_s, tcp.after);
        self.late_after_jump_ratio_to_tcp = ratio(self.median_late_after_jump_gbit_s, tcp.late_after);
    }
}

/// Plain TCP's medians, which the ratios divide by.
struct Reference {
    gbit_s: f64,
    steady: Option<f64>,
    after: Option<f64>,
    late_after: Option<f64>,
}

/// One scenario: its path and every protocol's summary.
#[derive(Debug, Serialize)]
pub struct ScenarioReport {
    pub scenario: Scenario,
    pub rate_mbps: f64,
    /// One-way delay, ms (before the jump, in the jump scenario).
    pub delay_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jump_to_ms: Option<f64>,
    /// When the delay changed: seconds after the first MiB of data crossed the path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jump_after_first_mib_s: Option<f64>,
    pub queue_packets: usize,
    pub congestion_control: String,
    /// The sysctls set in the client and the server namespace.
    pub sysctls: Vec<(String, String)>,
    pub bytes: u64,
    pub rounds: u32,
    pub warmup_s: f64,
    pub results: Vec<ProtoSummary>,
}

impl ScenarioReport {
    pub fn new(
        scenario: Scenario,
        path: PathConfig,
        bytes: u64,
        opts: &Options,
        samples: Vec<(Proto, Sample)>,
    ) -> Self {
        let mut protos: Vec<Proto> = Vec::new();
        for &(p, _) in &samples {
            if !protos.contains(&p) {
                protos.push(p);
            }
        }
        let mut results: Vec<ProtoSummary> = protos
            .iter()
            .map(|&p| ProtoSummary::new(p, samples.iter().filter(|(q, _)| *q == p).map(|(_, s)| s.clone()).collect()))
            .collect();
        if let Some(tcp) = results.iter().find(|r| r.protocol == Proto::Tcp.name()).map(ProtoSummary::reference) {
            for r in &mut results {
                r.set_ratios(&tcp);
            }
        }
        let jump = scenario == Scenario::Jump;
        ScenarioReport {
            scenario,
            rate_mbps: path.rate_mbps,
            delay_ms: path.delay_ms,
            jump_to_ms: jump.then_some(opts.jump_to_ms),
            jump_after_first_mib_s: jump.then_some(opts.jump_at),
            queue_packets: path.queue_packets,
            congestion_control: path.congestion_control.clone(),
            sysctls: end_sysctls(&path).into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            bytes,
            rounds: opts.rounds,
            warmup_s: opts.warmup,
            results,
        }
    }
}

/// Everything one invocation measured.
#[derive(Debug, Serialize)]
pub struct Report {
    pub date_utc: String,
    pub machine: Machine,
    pub timeline_ms: u64,
    pub content_verified: bool,
    pub scenarios: Vec<ScenarioReport>,
}

impl Report {
    pub fn new(date_utc: String, scenarios: Vec<ScenarioReport>) -> Self {
        Report { date_utc, machine: machine(), timeline_ms: TIMELINE_MS, content_verified: true, scenarios }
    }
}

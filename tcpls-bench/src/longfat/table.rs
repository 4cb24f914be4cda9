//! The human-readable table of a `longfat` report.

use super::report::{ProtoSummary, Report, ScenarioReport};
use super::Scenario;
use crate::compare::percent;

fn gbit(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.3}"))
}

fn ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

impl Report {
    pub fn print(&self) {
        println!("tcpls-bench longfat — {}", self.date_utc);
        println!("machine: {} CPUs, {}, Linux {}", self.machine.nproc, self.machine.cpu_model, self.machine.kernel);
        println!(
            "every received byte checked against the payload; receiver samples its byte count every {} ms",
            self.timeline_ms
        );
        for s in &self.scenarios {
            println!();
            s.print();
        }
    }
}

impl ScenarioReport {
    fn print(&self) {
        let rtt = 2.0 * self.delay_ms;
        match self.scenario {
            Scenario::Steady => println!(
                "steady: {} Mbit/s, {} ms one way (RTT {rtt} ms), queue {} packets, {}",
                self.rate_mbps, self.delay_ms, self.queue_packets, self.congestion_control
            ),
            Scenario::Jump => println!(
                "jump: {} Mbit/s, {} ms one way (RTT {rtt} ms) then {} ms (RTT {} ms) {} s after the first MiB crossed the path, queue {} packets, {}",
                self.rate_mbps,
                self.delay_ms,
                self.jump_to_ms.unwrap_or_default(),
                2.0 * self.jump_to_ms.unwrap_or_default(),
                self.jump_after_first_mib_s.unwrap_or_default(),
                self.queue_packets,
                self.congestion_control
            ),
        }
        let sysctls: Vec<String> = self.sysctls.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        println!("both ends: {}", sysctls.join(" "));
        println!(
            "{} bytes per transfer, {} rounds (protocol order reversed every other round), medians",
            self.bytes, self.rounds
        );
        match self.scenario {
            Scenario::Steady => self.print_steady(),
            Scenario::Jump => self.print_jump(),
        }
        println!();
        for r in &self.results {
            println!("  {:<14} {}", r.protocol, r.description);
        }
    }

    fn print_steady(&self) {
        println!(
            "{:<14} {:>7} {:>7} {:>7} {:>6}   {:>7} {:>6}   {:>10} {:>8}   {:>7} {:>7} {:>7}   {:>5}",
            "", "Gbit/s", "min", "max", "ratio", "steady", "ratio", "peak RSS", "MiB", "queue", "emu", "emu", "other"
        );
        println!(
            "{:<14} {:>7} {:>7} {:>7} {:>6}   {:>7} {:>6}   {:>10} {:>8}   {:>7} {:>7} {:>7}   {:>5}",
            "protocol",
            "median",
            "",
            "",
            "to tcp",
            "Gbit/s",
            "to tcp",
            "sender",
            "receiver",
            "drops",
            "late µs",
            "CPU",
            "load"
        );
        for r in &self.results {
            println!(
                "{:<14} {:>7.3} {:>7.3} {:>7.3} {:>6}   {:>7} {:>6}   {:>10.1} {:>8.1}   {:>7.0} {:>7.0} {:>6.0}%   {:>5}",
                r.protocol,
                r.median_gbit_s,
                r.min_gbit_s,
                r.max_gbit_s,
                ratio(r.ratio_to_tcp),
                gbit(r.median_steady_gbit_s),
                ratio(r.steady_ratio_to_tcp),
                r.median_sender_peak_rss_mib,
                r.median_receiver_peak_rss_mib,
                r.median_queue_drops,
                r.median_emulator_late_us,
                r.median_emulator_cpu_share * 100.0,
                percent(r.max_other_load),
            );
        }
        println!(
            "Gbit/s: bytes / (last byte read - first write); steady: from {} s after the first write to the last byte.",
            self.warmup_s
        );
        println!("queue drops: packets the path's queue dropped (data direction); emu late: the emulator's mean");
        println!("lateness; emu CPU: the emulator's CPU (both directions) as a share of one CPU.");
    }

    fn print_jump(&self) {
        println!(
            "{:<14} {:>7} {:>7} {:>6}   {:>7} {:>6}   {:>8} {:>9}   {:>10} {:>8}   {:>5}",
            "", "before", "after", "ratio", "late", "ratio", "recovery", "to before", "peak RSS", "MiB", "other"
        );
        println!(
            "{:<14} {:>7} {:>7} {:>6}   {:>7} {:>6}   {:>8} {:>9}   {:>10} {:>8}   {:>5}",
            "protocol", "Gbit/s", "Gbit/s", "to tcp", "Gbit/s", "to tcp", "s", "s", "sender", "receiver", "load"
        );
        for r in &self.results {
            print_jump_row(r);
        }
        println!("before: second half of the time before the jump; after: from the jump to the last byte;");
        println!("late: the second half of that (the new steady state); recovery: from the jump until a 1 s");
        println!("window reaches 90% of late; to before: until it reaches 90% of before ('-': not in most rounds).");
    }
}

fn seconds(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

fn print_jump_row(r: &ProtoSummary) {
    println!(
        "{:<14} {:>7} {:>7} {:>6}   {:>7} {:>6}   {:>8} {:>9}   {:>10.1} {:>8.1}   {:>5}",
        r.protocol,
        gbit(r.median_before_jump_gbit_s),
        gbit(r.median_after_jump_gbit_s),
        ratio(r.after_jump_ratio_to_tcp),
        gbit(r.median_late_after_jump_gbit_s),
        ratio(r.late_after_jump_ratio_to_tcp),
        seconds(r.median_recovery_s),
        seconds(r.median_full_recovery_s),
        r.median_sender_peak_rss_mib,
        r.median_receiver_peak_rss_mib,
        percent(r.max_other_load),
    );
}

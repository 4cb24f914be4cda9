//! TCPLS through real middlebox software in the tcpls-netem namespaces (root only): the same
//! scenario functions as `experiments middleboxes --quick`, each asserting its expected outcome
//! and that content was verified. A scenario that cannot run here (no namespaces, software not
//! installed) prints `SKIPPED: <test>: <reason>` instead of passing silently.
#![allow(clippy::unwrap_used)]

use experiments::middleboxes::{self, Outcome, ScenarioResult};
use tcpls_netem::{print_skipped, skip_unless_supported};

fn expect(test: &str, result: ScenarioResult, expected: Outcome) {
    eprintln!(
        "{test}: {:?} [{}] {} ({} bytes verified, {:.1} s)",
        result.outcome, result.software, result.detail, result.bytes_verified, result.seconds
    );
    if result.outcome == Outcome::Skipped {
        print_skipped(test, &result.detail);
        return;
    }
    assert_eq!(result.outcome, expected, "{test}: {}", result.detail);
    assert!(result.bytes_verified > 0, "{test}: no content was verified");
}

macro_rules! scenario_test {
    ($name:ident, $run:expr, $expected:expr) => {
        #[test]
        fn $name() {
            let test = concat!("middleboxes::", stringify!($name));
            skip_unless_supported!(test);
            expect(test, $run(true), $expected);
        }
    };
}

scenario_test!(stateful_firewall_is_native, middleboxes::firewall::run, Outcome::Native);
scenario_test!(nftables_firewall_is_native, middleboxes::firewall::run_nft, Outcome::Native);
scenario_test!(nat_on_one_path_is_native_and_detected, middleboxes::nat::run, Outcome::Native);
scenario_test!(haproxy_tcp_mode_is_native, middleboxes::tcp_proxy::haproxy, Outcome::Native);
scenario_test!(socat_relay_is_native, middleboxes::tcp_proxy::socat, Outcome::Native);
scenario_test!(nginx_tls_termination_falls_back, middleboxes::tls_proxy::nginx, Outcome::Fallback);
scenario_test!(haproxy_tls_termination_falls_back, middleboxes::tls_proxy::haproxy, Outcome::Fallback);
scenario_test!(idle_reset_is_survived, middleboxes::idle_reset::run, Outcome::Survived);
scenario_test!(syn_blackhole_is_survived, middleboxes::syn_blackhole::run, Outcome::Survived);
scenario_test!(alpn_filter_reset_falls_back, middleboxes::alpn_filter::reset, Outcome::Fallback);
scenario_test!(alpn_filter_drop_falls_back, middleboxes::alpn_filter::drop, Outcome::Fallback);

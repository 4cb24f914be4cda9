//! `experiments middleboxes`: TCPLS through real middlebox software (paper §3.2, §5.2), each
//! placed on the path between client and server in the tcpls-netem test bed: a stateful
//! firewall, NAT, TCP-splitting proxies, TLS-terminating proxies, a firewall that resets idle
//! connections, a SYN blackhole and a "TCPLS-hostile" ClientHello filter. Every scenario moves
//! content-checked data and reports whether TCPLS ran natively, fell back to plain TLS,
//! survived (failover / happy eyeballs), failed, or was skipped (software missing). Writes
//! `DIR/middleboxes.json` and `DIR/middleboxes.md`. See docs/MIDDLEBOXES.md.

pub mod alpn_filter;
pub mod bed;
pub mod firewall;
pub mod idle_reset;
pub mod nat;
pub mod syn_blackhole;
pub mod tcp_proxy;
pub mod tls_proxy;

use std::time::Instant;

use serde::Serialize;

use crate::{Opts, Summary};

/// How TCPLS fared through one middlebox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// TCPLS was negotiated and worked end to end.
    Native,
    /// The client ended up with plain TLS (one byte stream), and the application worked.
    Fallback,
    /// The middlebox broke a connection or a path; failover / happy eyeballs carried on.
    Survived,
    /// The application did not work (see the detail).
    Failed,
    /// Could not run here (missing software or privileges).
    Skipped,
}

/// One scenario's result (a row of the report).
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub name: &'static str,
    /// What the middlebox does.
    pub middlebox: &'static str,
    /// The software and its version line.
    pub software: String,
    pub outcome: Outcome,
    /// What happened, and why.
    pub detail: String,
    /// Application bytes checked byte for byte after the echo.
    pub bytes_verified: u64,
    pub seconds: f64,
}

/// What a scenario's body returns when it ran.
pub struct Ran {
    pub outcome: Outcome,
    pub detail: String,
    pub bytes_verified: u64,
}

/// Errors of a scenario body: skipped (cannot run here) or failed (TCPLS or the setup broke).
pub enum Trouble {
    Skip(String),
    Fail(String),
}

impl From<String> for Trouble {
    fn from(e: String) -> Self {
        Trouble::Fail(e)
    }
}

impl From<&str> for Trouble {
    fn from(e: &str) -> Self {
        Trouble::Fail(e.to_string())
    }
}

impl From<bed::Skip> for Trouble {
    fn from(s: bed::Skip) -> Self {
        Trouble::Skip(s.0)
    }
}

/// Runs a scenario body and turns it into a report row.
pub(crate) fn scenario(
    name: &'static str,
    middlebox: &'static str,
    software: String,
    body: impl FnOnce() -> Result<Ran, Trouble>,
) -> ScenarioResult {
    let started = Instant::now();
    let (outcome, detail, bytes_verified) = match tcpls_netem::check_support() {
        Err(why) => (Outcome::Skipped, format!("no network namespaces: {why}"), 0),
        Ok(()) => match body() {
            Ok(r) => (r.outcome, r.detail, r.bytes_verified),
            Err(Trouble::Skip(why)) => (Outcome::Skipped, why, 0),
            Err(Trouble::Fail(why)) => (Outcome::Failed, why, 0),
        },
    };
    ScenarioResult {
        name,
        middlebox,
        software,
        outcome,
        detail,
        bytes_verified,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// Every scenario, in report order.
pub fn all(quick: bool) -> Vec<ScenarioResult> {
    vec![
        firewall::run(quick),
        firewall::run_nft(quick),
        nat::run(quick),
        tcp_proxy::haproxy(quick),
        tcp_proxy::socat(quick),
        tls_proxy::nginx(quick),
        tls_proxy::haproxy(quick),
        idle_reset::run(quick),
        syn_blackhole::run(quick),
        alpn_filter::reset(quick),
        alpn_filter::drop(quick),
    ]
}

/// The versions of the middlebox software and of what it depends on, as the programs print them.
pub fn versions() -> Vec<(&'static str, String)> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    vec![
        ("iptables -V", bed::version("iptables", &["-V"])),
        ("nft --version", bed::version("nft", &["--version"])),
        ("haproxy -v", bed::version("haproxy", &["-v"])),
        ("nginx -v", bed::version("nginx", &["-v"])),
        ("socat -V", bed::version("socat", &["-V"])),
        ("openssl version", bed::version("openssl", &["version"])),
        ("kernel", kernel.trim().to_string()),
    ]
}

/// The markdown report: versions, then one table row per scenario.
pub fn markdown(results: &[ScenarioResult], versions: &[(&str, String)]) -> String {
    let mut md = String::from("# TCPLS through middleboxes\n\n");
    for (what, version) in versions {
        md.push_str(&format!("* `{what}`: {version}\n"));
    }
    md.push_str(
        "\n| scenario | middlebox | software | outcome | bytes verified | detail |\n|---|---|---|---|---|---|\n",
    );
    for r in results {
        let outcome = serde_json::to_value(r.outcome).ok().and_then(|v| v.as_str().map(String::from));
        md.push_str(&format!(
            "| {} | {} | {} | **{}** | {} | {} |\n",
            r.name,
            r.middlebox,
            r.software.replace('|', "/"),
            outcome.unwrap_or_default(),
            r.bytes_verified,
            r.detail.replace('|', "/").replace('\n', " ")
        ));
    }
    md
}

/// Runs every middlebox scenario and returns the report.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("{}: {e}", opts.out.display()))?;
    let results = all(opts.quick);
    for r in &results {
        eprintln!("{:<16} {:?}: {}", r.name, r.outcome, r.detail);
    }
    let failed: Vec<&str> = results.iter().filter(|r| r.outcome == Outcome::Failed).map(|r| r.name).collect();
    let versions = versions();
    let version_map: serde_json::Map<String, serde_json::Value> =
        versions.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(v.clone()))).collect();
    let summary = serde_json::json!({
        "experiment": "middleboxes",
        "versions": version_map,
        "scenarios": results,
        "failed": failed,
    });
    let json = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
    let write = |name: &str, text: &str| {
        let p = opts.out.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
    };
    write("middleboxes.json", &json)?;
    write("middleboxes.md", &markdown(&results, &versions))?;
    if failed.is_empty() {
        Ok(summary)
    } else {
        Err(format!("failed through: {} (see {})", failed.join(", "), opts.out.join("middleboxes.md").display()))
    }
}

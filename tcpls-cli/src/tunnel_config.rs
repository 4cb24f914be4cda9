//! The tunnel's configuration file (TOML, docs/TUNNEL.md): a `[server]` table for `tcpls tunnel
//! server --config FILE` and a `[client]` table for `tcpls tunnel client --config FILE`, one key
//! per command-line flag (same name, without the dashes in front). Flags given on the command
//! line win over the file; relative paths in the file are relative to the file's directory.
//! Unknown keys are errors (a typo must not silently leave a default in place).
//! `[clients."NAME"]` tables hold the server's per-client policy (docs/TUNNEL.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub server: Option<ServerFile>,
    pub client: Option<ClientFile>,
    /// The server's per-client policy: one table per client certificate name (CN or DNS name).
    #[serde(default)]
    pub clients: BTreeMap<String, ClientEntryFile>,
}

/// A `[clients."NAME"]` table (snake_case keys are accepted too).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ClientEntryFile {
    #[serde(alias = "allow_dest")]
    pub allow_dest: Vec<String>,
    #[serde(alias = "deny_dest")]
    pub deny_dest: Vec<String>,
    #[serde(alias = "only_dest")]
    pub only_dest: Vec<String>,
    /// Bytes per second: a number, or a string such as "50M" (10^6) or "4Mi" (2^20).
    pub rate: Option<Rate>,
    #[serde(alias = "max_sessions")]
    pub max_sessions: Option<usize>,
}

/// `rate = 2000000` or `rate = "2M"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Rate {
    Number(u64),
    Text(String),
}

impl ClientEntryFile {
    /// The entry as the concentrator uses it; errors name the client.
    pub fn rule(&self, name: &str) -> Result<tcpls_tunnel::tunnel::ClientRule, String> {
        let mut r =
            tcpls_tunnel::tunnel::ClientRule::with_dests(name, &self.allow_dest, &self.deny_dest, &self.only_dest)?;
        r.rate = match &self.rate {
            None => None,
            Some(Rate::Number(0)) => return Err(format!("client \"{name}\": rate: must be at least 1 byte/s")),
            Some(Rate::Number(n)) => Some(*n),
            Some(Rate::Text(t)) => {
                Some(tcpls_tunnel::clients::parse_rate(t).map_err(|e| format!("client \"{name}\": rate: {e}"))?)
            }
        };
        r.max_sessions = match self.max_sessions {
            Some(0) => return Err(format!("client \"{name}\": max-sessions must be at least 1")),
            m => m,
        };
        Ok(r)
    }
}

/// The `[server]` table: the flags of `tcpls tunnel server`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServerFile {
    pub listen: Vec<String>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub client_ca: Option<PathBuf>,
    pub allow_dest: Vec<String>,
    pub deny_dest: Vec<String>,
    pub allow_reverse: Vec<String>,
    pub max_sessions: Option<usize>,
    pub max_streams: Option<usize>,
    pub max_lookups: Option<usize>,
    /// Clients whose certificate name has no `[clients."NAME"]` table: "refuse" (the default
    /// when there are tables) or "allow" (server-wide policy only).
    pub unknown_clients: Option<String>,
    pub json: Option<bool>,
    pub metrics: Option<String>,
    pub rejoin_timeout: Option<u64>,
    pub ticket_keys: Option<PathBuf>,
    pub advertise: Vec<String>,
    pub farm_route_key: Option<PathBuf>,
    pub farm_node: Option<u8>,
    pub keylog: Option<PathBuf>,
    pub trace: Option<PathBuf>,
    pub verbose: Option<bool>,
    /// "per-core" or "work-stealing" (`--runtime`).
    pub runtime: Option<crate::serve::ServerRuntime>,
    pub threads: Option<usize>,
}

/// The `[client]` table: the flags of `tcpls tunnel client`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ClientFile {
    pub concentrator: Option<String>,
    pub path: Vec<String>,
    pub bind: Option<String>,
    pub path_manager: Option<String>,
    pub ca: Option<PathBuf>,
    pub insecure: Option<bool>,
    pub server_name: Option<String>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub socks: Option<String>,
    pub http: Option<String>,
    pub forward: Vec<String>,
    pub forward_udp: Vec<String>,
    pub reverse: Vec<String>,
    pub transparent: Option<u16>,
    pub no_reconnect: Option<bool>,
    pub join_advertised: Option<bool>,
    pub join_sni_domain: Option<String>,
    pub reconnect_wait: Option<f64>,
    pub reconnect_max: Option<f64>,
    pub keepalive: Option<f64>,
    pub metrics: Option<String>,
    pub bond: Option<bool>,
    pub redundant: Option<bool>,
    pub keylog: Option<PathBuf>,
    pub trace: Option<PathBuf>,
    pub verbose: Option<bool>,
}

/// Largest configuration file read (it is small; a bigger one is a mistake).
const MAX_FILE: u64 = 1 << 20;

/// Reads and parses `path`; paths inside are made relative to its directory.
pub fn load(path: &Path) -> Result<FileConfig, String> {
    let len = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len();
    if len > MAX_FILE {
        return Err(format!("{}: {len} bytes, more than a configuration file should be", path.display()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let at_line = |e: toml::de::Error| {
        // toml's message spans several lines (with the offending line quoted): keep one.
        let msg = e.message().to_string();
        match e.span() {
            Some(span) => format!("{}: line {}: {msg}", path.display(), line_of(&text, span.start)),
            None => format!("{}: {msg}", path.display()),
        }
    };
    let mut cfg: FileConfig = toml::from_str(&text).map_err(at_line)?;
    let values: crate::tunnel_config_values::Values = toml::from_str(&text).map_err(at_line)?;
    values.check().map_err(|(span, msg)| format!("{}: line {}: {msg}", path.display(), line_of(&text, span.start)))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let rel = |p: &mut Option<PathBuf>| {
        if let Some(x) = p.as_mut() {
            if x.is_relative() {
                *x = dir.join(&*x);
            }
        }
    };
    if let Some(s) = cfg.server.as_mut() {
        rel(&mut s.cert);
        rel(&mut s.key);
        rel(&mut s.client_ca);
        rel(&mut s.ticket_keys);
        rel(&mut s.farm_route_key);
        rel(&mut s.keylog);
        rel(&mut s.trace);
    }
    if let Some(c) = cfg.client.as_mut() {
        rel(&mut c.ca);
        rel(&mut c.cert);
        rel(&mut c.key);
        rel(&mut c.keylog);
        rel(&mut c.trace);
    }
    Ok(cfg)
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|b| *b == b'\n').count() + 1
}

/// The command line's value if given, else the file's.
pub fn pick<T>(cli: Option<T>, file: Option<T>) -> Option<T> {
    cli.or(file)
}

/// The command line's list if not empty, else the file's.
pub fn pick_list(cli: Vec<String>, file: Vec<String>) -> Vec<String> {
    if cli.is_empty() {
        file
    } else {
        cli
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(text: &str) -> Result<FileConfig, String> {
        let dir = std::env::temp_dir().join(format!("tcpls-tunnel-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // One file per call: the tests run in parallel.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let f = dir.join(format!("t{}.toml", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
        std::fs::write(&f, text).unwrap();
        let r = load(&f);
        let _ = std::fs::remove_file(&f);
        r
    }

    #[test]
    fn client_tables() {
        let cfg = parse(
            "[server]\nunknown-clients = \"allow\"\n[clients.\"alice\"]\nallow_dest = [\"10.0.0.0/8\"]\nrate = \"50M\"\n\
             max_sessions = 2\n[clients.\"bob.example\"]\ndeny-dest = [\"127.0.0.1\"]\nrate = 1000\n",
        )
        .unwrap();
        assert_eq!(cfg.server.unwrap().unknown_clients.as_deref(), Some("allow"));
        let a = cfg.clients["alice"].rule("alice").unwrap();
        assert_eq!((a.allow.len(), a.rate, a.max_sessions), (1, Some(50_000_000), Some(2)));
        let b = cfg.clients["bob.example"].rule("bob.example").unwrap();
        assert_eq!((b.deny.len(), b.rate), (1, Some(1000)));
        let e = parse("[clients.x]\nrate = \"fast\"\n").unwrap().clients["x"].rule("x").unwrap_err();
        assert!(e.contains("client \"x\": rate"), "{e}");
        let e = parse("[clients.x]\nmax-sessions = 0\n").unwrap().clients["x"].rule("x").unwrap_err();
        assert!(e.contains("max-sessions"), "{e}");
        assert!(parse("[clients.x]\nallow-dst = []\n").unwrap_err().contains("allow-dst"));
    }

    #[test]
    fn keys_are_the_flags() {
        let cfg = parse(
            "[server]\nlisten = [\"127.0.0.1:4443\"]\ncert = \"c.pem\"\nkey = \"/k.pem\"\nallow-dest = [\"127.0.0.0/8\"]\n\
             max-sessions = 3\n[client]\nconcentrator = \"h:1\"\nforward-udp = [\"1=h:53\"]\nreconnect-max = 2.5\n",
        )
        .unwrap();
        let s = cfg.server.unwrap();
        assert_eq!(s.listen, ["127.0.0.1:4443"]);
        assert!(s.cert.unwrap().ends_with("c.pem") && s.key.unwrap() == Path::new("/k.pem"));
        assert_eq!((s.allow_dest.len(), s.max_sessions), (1, Some(3)));
        let c = cfg.client.unwrap();
        assert_eq!((c.forward_udp.len(), c.reconnect_max), (1, Some(2.5)));
    }

    #[test]
    fn mistakes_are_one_line_errors_with_a_line_number() {
        let e = parse("[server]\nlisten = [\"a\"]\nalow-dest = [\"x\"]\n").unwrap_err();
        assert!(e.contains("line 3") && e.contains("alow-dest") && !e.contains('\n'), "{e}");
        let e = parse("[server]\nmax-sessions = \"ten\"\n").unwrap_err();
        assert!(e.contains("line 2") && !e.contains('\n'), "{e}");
        assert!(parse("[nonsense]\n").unwrap_err().contains("nonsense"));
    }

    #[test]
    fn the_example_file_uses_only_known_keys() {
        let cfg: FileConfig = toml::from_str(include_str!("../../tools/systemd/tunnel.toml")).unwrap();
        let (s, c) = (cfg.server.unwrap(), cfg.client.unwrap());
        assert_eq!(s.deny_dest.len(), 2);
        assert_eq!(c.forward_udp, ["127.0.0.1:5353=9.9.9.9:53"]);
        assert_eq!(s.unknown_clients.as_deref(), Some("refuse"));
        assert_eq!((s.runtime, s.threads), (Some(crate::serve::ServerRuntime::WorkStealing), Some(0)));
        let alice = cfg.clients["alice"].rule("alice").unwrap();
        assert_eq!((alice.rate, alice.max_sessions), (Some(50_000_000), Some(2)));
        assert_eq!(cfg.clients["backup.example.org"].rule("b").unwrap().only.len(), 1);
        let c: FileConfig = toml::from_str("[client]\nmetrics = \"127.0.0.1:9465\"\n").unwrap();
        assert_eq!(c.client.unwrap().metrics.as_deref(), Some("127.0.0.1:9465"));
    }

    /// Every flag of `tunnel server` / `tunnel client`, as clap defines them, is a key of its
    /// table: a new flag without its key fails here.
    #[test]
    fn every_flag_of_the_tunnel_commands_is_a_key() {
        use clap::CommandFactory;
        let mut cli = crate::Cli::command();
        cli.build();
        let tunnel = cli.find_subcommand("tunnel").unwrap();
        for table in ["server", "client"] {
            let cmd = tunnel.find_subcommand(table).unwrap();
            let flags: Vec<&str> = cmd
                .get_arguments()
                .filter_map(|a| a.get_long())
                .filter(|l| !["help", "version", "config"].contains(l))
                .collect();
            assert!(flags.contains(&"keylog") && flags.contains(&"verbose"), "global flags too: {flags:?}");
            let missing: Vec<&str> = flags
                .iter()
                .copied()
                .filter(|flag| {
                    // Any value: a known key with a value of the wrong type is another error.
                    let text = format!("[{table}]\n{flag} = 0\n");
                    matches!(toml::from_str::<FileConfig>(&text), Err(e) if e.message().contains("unknown field"))
                })
                .collect();
            assert!(missing.is_empty(), "[{table}] has no key for the flags {missing:?} (of {flags:?})");
        }
    }

    #[test]
    fn bad_addresses_and_cidrs_name_the_file_and_the_line() {
        for (text, line, what) in [
            ("[client]\nconcentrator = \"h:1\"\nsocks = \"127.0.0.1:99999\"\n", 3, "[client] socks"),
            ("[server]\n\ndeny-dest = [\"10.0.0.0/8\",\n  \"10.0.0.0/33\"]\n", 4, "[server] deny-dest"),
            ("[server]\nlisten = [\"0.0.0.0:70000\"]\n", 2, "[server] listen"),
            ("[server]\nmetrics = \"localhost\"\n", 2, "[server] metrics"),
            ("[client]\nforward = [\"8080=example.org\"]\n", 2, "[client] forward"),
            ("[client]\nreverse = [\"name:1=h:2\"]\n", 2, "[client] reverse"),
            ("[client]\npath = [\"eth0@h:1\"]\n", 2, "[client] path"),
            ("[server]\n[clients.a]\nonly-dest = [\"x\"]\n", 3, "[clients] client \"a\": only-dest"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(".toml: ") && e.contains(&format!("line {line}: {what}: ")), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn the_command_line_wins() {
        assert_eq!(pick(Some(1), Some(2)), Some(1));
        assert_eq!(pick(None, Some(2)), Some(2));
        assert_eq!(pick_list(vec![], vec!["f".into()]), ["f"]);
        assert_eq!(pick_list(vec!["c".into()], vec!["f".into()]), ["c"]);
    }
}

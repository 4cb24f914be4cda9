//! Every example command of README.md, docs/CLI.md and the `--help` texts, executed.
//!
//! The commands are read from the documents themselves (fenced code blocks; the lines under
//! "Example(s):" in `--help`), so an example that stops working, or a new one, is run here.
//! Each source is one scenario, in its own directory holding `cert.pem`, `key.pem`,
//! `clients.pem` and, unless the scenario writes it with `tcpls cert`, `tcpls-cert/`; it runs in
//! the order written: servers (`serve`,
//! `tunnel server`, `tm3 rp`) start in the background and must say they listen; the other
//! commands must succeed. Where a scenario's clients have no server of their own, a `tcpls serve`
//! (perf mode, or echo mode for `connect`) stands in on the address they name.
//!
//! What is changed before running, so that the examples run on a shared machine in seconds:
//! - the ports written (4443, 4444, 5201, 6000, ...) become free ports, the same one for the
//!   same number within a scenario; a server without `--listen`/`--port` gets one;
//! - `--bytes` above 64M becomes 64M, and `tcpls demo` runs with `--bytes 16M`;
//! - `./target/release/tcpls` is the binary under test; `echo X |` and `< /dev/null` become its
//!   standard input; `# comments` and trailing `(notes)` are dropped.
//!
//! Not run, because they need a second host or a network namespace (documented exceptions):
//! commands naming the documentation address ranges 203.0.113.0/24 and 198.51.100.0/24 (RFC
//! 5737) or example.org, which stand for other machines; `--config /etc/...` examples, which stand
//! for an installed host (tunnel_cli.rs covers configuration files); `tunnel client`/`tm3 lp` examples
//! all do. The namespace tests (tunnel_cli.rs, tm3_cli.rs, netns_ext.rs) cover those modes.
//! Non-`tcpls` lines (`cargo`, `curl`, `iptables`) are not run either.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use support::{free_port, ipv6_available, run, tcpls, Proc, TempDir, LOCALHOST_V4, SHORT};

/// Addresses that stand for other hosts in the examples.
const OTHER_HOSTS: [&str; 3] = ["203.0.113.", "198.51.100.", "example.org"];

/// A deployment's configuration file (`--config /etc/tcpls/...`): those examples stand for an
/// installed host; tunnel_cli.rs runs the tunnel from a configuration file and `check-config`.
const INSTALLED_CONFIG: &str = "--config /etc/";

/// Ports written in the examples, replaced by free ones.
const DOC_PORTS: [&str; 8] = ["4443", "4444", "5201", "6000", "7000", "1080", "8080", "9000"];

/// Cap on `--bytes`, so a 2G example takes a moment in a debug build.
const MAX_BYTES: &str = "64M";

/// One example command as written, with where it came from.
#[derive(Debug, Clone)]
struct Example {
    source: String,
    line: String,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The `tcpls` commands in the fenced code blocks of a Markdown file (continuations joined).
fn markdown_examples(relative: &str) -> Vec<Example> {
    let text = std::fs::read_to_string(repo_root().join(relative)).unwrap();
    let mut out = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for raw in text.lines() {
        if raw.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        let line = strip_comment(raw);
        pending.push_str(line.trim_end_matches('\\').trim());
        pending.push(' ');
        if line.ends_with('\\') {
            continue;
        }
        let mut command = pending.split_whitespace().collect::<Vec<_>>().join(" ");
        pending.clear();
        // `cargo build ... && ./target/release/tcpls demo`: the tcpls part.
        if let Some((_, last)) = command.rsplit_once("&&") {
            command = last.trim().to_string();
        }
        if is_tcpls_command(&command) && !is_synopsis(&command) {
            out.push(Example { source: relative.to_string(), line: command });
        }
    }
    out
}

/// The example lines of `tcpls ARGS --help` (after "Example:" / "Examples:").
fn help_examples(args: &[&str]) -> Vec<Example> {
    let done = run(tcpls().args(args).arg("--help"), None, SHORT).success();
    let text = done.stdout_text();
    let mut out = Vec::new();
    let mut in_examples = false;
    let mut pending = String::new();
    for raw in text.lines() {
        if raw.starts_with("Example") {
            in_examples = true;
            continue;
        }
        if !in_examples || !raw.starts_with("  ") {
            continue;
        }
        let line = strip_comment(raw);
        pending.push_str(line.trim_end_matches('\\').trim());
        pending.push(' ');
        if line.ends_with('\\') {
            continue;
        }
        let command = pending.split_whitespace().collect::<Vec<_>>().join(" ");
        pending.clear();
        if is_tcpls_command(&command) {
            out.push(Example { source: format!("tcpls {} --help", args.join(" ")), line: command });
        }
    }
    out
}

/// Drops `# comment` and a trailing `   (note)`.
fn strip_comment(line: &str) -> &str {
    let line = line.split(" #").next().unwrap_or(line);
    let line = match line.find("   (") {
        Some(i) => &line[..i],
        None => line,
    };
    line.trim_end()
}

fn is_tcpls_command(line: &str) -> bool {
    let command = line.rsplit('|').next().unwrap_or(line).trim();
    command.starts_with("tcpls ") || command.starts_with("./target/release/tcpls ")
}

/// A synopsis (`tcpls perf ADDR [--bytes N]`) rather than an example: placeholders in capitals,
/// optional parts in brackets.
fn is_synopsis(line: &str) -> bool {
    line.contains("[--")
        || line.contains("...")
        || line.split_whitespace().any(|w| w.len() > 1 && w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
}

fn needs_another_host(line: &str) -> bool {
    OTHER_HOSTS.iter().any(|h| line.contains(h)) || line.contains(INSTALLED_CONFIG)
}

/// What a command is.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    /// Runs until stopped; ready when its stderr says so.
    Server,
    /// Must end successfully.
    Client,
}

/// A command ready to run: the arguments after `tcpls`, its standard input, its kind.
#[derive(Debug)]
struct Prepared {
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    kind: Kind,
    /// The documented ports this command was given free ports for (its default one included).
    ports: Vec<String>,
}

fn prepare(line: &str, ports: &mut HashMap<String, u16>) -> Prepared {
    let (stdin, command) = match line.split_once('|') {
        Some((producer, command)) => {
            let text = producer.trim().strip_prefix("echo ").unwrap_or_else(|| panic!("unexpected pipe in {line:?}"));
            (Some(format!("{text}\n").into_bytes()), command.trim())
        }
        None => (None, line),
    };
    let (stdin, command) = match command.split_once("< /dev/null") {
        Some((command, _)) => (Some(Vec::new()), command.trim()),
        None => (stdin, command),
    };
    let mut words: Vec<String> = command.split_whitespace().skip(1).map(str::to_string).collect();
    // Ports: `HOST:4443`, `[::1]:4443`, `--port 6000`, `-p 5201`.
    let mut used = Vec::new();
    let mut map = |port: &str| -> String {
        let free = *ports.entry(port.to_string()).or_insert_with(|| free_port(LOCALHOST_V4));
        used.push(port.to_string());
        free.to_string()
    };
    for i in 0..words.len() {
        for doc in DOC_PORTS {
            if let Some(host) = words[i].strip_suffix(&format!(":{doc}")) {
                words[i] = format!("{host}:{}", map(doc));
            } else if words[i] == doc && i > 0 && matches!(words[i - 1].as_str(), "--port" | "-p") {
                words[i] = map(doc);
            }
        }
    }
    for i in 1..words.len() {
        if words[i - 1] == "--bytes" && support_size(&words[i]) > support_size(MAX_BYTES) {
            words[i] = MAX_BYTES.to_string();
        }
    }
    let sub: Vec<String> = words.iter().take(2).cloned().collect();
    let sub: Vec<&str> = sub.iter().map(String::as_str).collect();
    let kind = match sub.as_slice() {
        ["serve", ..] | ["tunnel", "server"] | ["tm3", "rp"] | ["tunnel", "client"] | ["tm3", "lp"] => Kind::Server,
        _ => Kind::Client,
    };
    if sub.first() == Some(&"demo") {
        words.retain(|w| w != "--bytes" && !w.ends_with('M') && !w.ends_with('G'));
        words.extend(["--bytes".to_string(), "16M".to_string()]);
    }
    // A server on its default port gets a free one.
    let has_listen = words.iter().any(|w| w == "--listen" || w == "--port");
    match sub.as_slice() {
        ["serve", ..] | ["tunnel", "server"] if !has_listen => {
            words.extend(["--listen".to_string(), format!("127.0.0.1:{}", map("4443"))]);
        }
        ["tm3", "rp"] if !has_listen => words.extend(["--port".to_string(), map("6000")]),
        _ => {}
    }
    Prepared { args: words, stdin, kind, ports: used }
}

/// `64M` → bytes (the examples' sizes).
fn support_size(s: &str) -> u64 {
    let (digits, mult) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits.parse::<u64>().unwrap_or(0) * mult
}

/// Runs one source's examples in order.
fn run_scenario(examples: &[Example]) {
    let dir = TempDir::new("doc-commands");
    run(tcpls().arg("cert").arg("--out").arg(dir.path().join("premade")), None, SHORT).success();
    for (from, to) in [("cert.pem", "cert.pem"), ("key.pem", "key.pem"), ("cert.pem", "clients.pem")] {
        std::fs::copy(dir.path().join("premade").join(from), dir.path().join(to)).unwrap();
    }
    // tcpls-cert/ as `tcpls cert` writes it, unless the scenario runs that itself.
    if !examples.iter().any(|e| e.line.contains("tcpls cert ")) {
        std::fs::rename(dir.path().join("premade"), dir.path().join("tcpls-cert")).unwrap();
    }
    let mut ports = HashMap::new();
    // Running servers with the ports they listen on.
    let mut servers: Vec<(Vec<String>, Proc)> = Vec::new();
    let has_own_server = examples.iter().any(|e| prepare(&e.line, &mut HashMap::new()).kind == Kind::Server);
    for example in examples {
        if needs_another_host(&example.line) {
            eprintln!("SKIPPED (needs a second host, documented exception): {}", example.line);
            continue;
        }
        if example.line.contains("[::1]") && !ipv6_available() {
            eprintln!("SKIPPED (no IPv6 on this machine): {}", example.line);
            continue;
        }
        let mut prepared = prepare(&example.line, &mut ports);
        let mut what = format!("{} (from {}, run as tcpls {})", example.line, example.source, prepared.args.join(" "));
        match prepared.kind {
            Kind::Server => {
                for attempt in 0.. {
                    // A new server may take the port of an earlier one (README: a second `serve`
                    // on 127.0.0.1:4443 with two paths), which then stops.
                    let mine = listen_ports(&prepared.args);
                    servers.retain(|(theirs, _)| !theirs.iter().any(|p| mine.contains(p)));
                    let mut p = Proc::spawn(tcpls().current_dir(dir.path()).args(&prepared.args), false);
                    match p.stderr.wait_for(b"listening", SHORT) {
                        Ok(()) => {
                            servers.push((mine, p));
                            break;
                        }
                        // Another process took a free port between `free_port` and the bind:
                        // every port this example was given (its default one included) gets a
                        // new one, and later examples follow the map.
                        Err(_) if attempt < 10 && lost_a_port_race(&p.stderr.text()) => {
                            for doc_port in &prepared.ports {
                                ports.remove(doc_port);
                            }
                            prepared = prepare(&example.line, &mut ports);
                            what = format!(
                                "{} (from {}, run as tcpls {})",
                                example.line,
                                example.source,
                                prepared.args.join(" ")
                            );
                        }
                        Err(e) => panic!("server example did not start: {what}: {e}\n{}", p.diagnostics()),
                    }
                }
            }
            Kind::Client => {
                if !has_own_server && servers.is_empty() && needs_server(&prepared.args) {
                    let server = stand_in_server(dir.path(), &example.line, &mut prepared, &mut ports);
                    what =
                        format!("{} (from {}, run as tcpls {})", example.line, example.source, prepared.args.join(" "));
                    servers.push((Vec::new(), server));
                }
                let mut cmd = tcpls();
                cmd.current_dir(dir.path()).args(&prepared.args);
                let done = run(&mut cmd, prepared.stdin.clone(), Duration::from_secs(60));
                assert!(done.status.success(), "example failed: {what}\n{}", done.describe());
                if let Some(input) = &prepared.stdin {
                    if prepared.args[0] == "connect" && !input.is_empty() {
                        assert_eq!(done.stdout, *input, "connect echoes its input: {what}");
                    }
                }
            }
        }
    }
}

/// The ports of a server's `--listen ADDR` and `--port N` arguments.
fn listen_ports(args: &[String]) -> Vec<String> {
    args.windows(2)
        .filter_map(|w| match w[0].as_str() {
            "--listen" => w[1].rsplit(':').next().map(str::to_string),
            "--port" => Some(w[1].clone()),
            _ => None,
        })
        .collect()
}

/// A server that could not bind its port ("cannot listen on ADDR: Address already in use").
fn lost_a_port_race(stderr: &str) -> bool {
    stderr.contains("cannot listen") || stderr.contains("Address already in use")
}

fn needs_server(args: &[String]) -> bool {
    matches!(args[0].as_str(), "perf" | "connect" | "probe")
}

/// A `tcpls serve` for a `--help` example's client, on the port it names (a new port, and the
/// client's arguments rewritten, when another process took that one first).
fn stand_in_server(dir: &Path, example: &str, prepared: &mut Prepared, ports: &mut HashMap<String, u16>) -> Proc {
    let mode = if prepared.args[0] == "connect" { "echo" } else { "perf" };
    for attempt in 0.. {
        let port = *ports.entry("4443".to_string()).or_insert_with(|| free_port(LOCALHOST_V4));
        let mut p =
            Proc::spawn(
                tcpls()
                    .current_dir(dir)
                    .args(["serve", "--mode", mode, "--listen", &format!("127.0.0.1:{port}")])
                    .args(["--cert", "tcpls-cert/cert.pem", "--key", "tcpls-cert/key.pem"]),
                false,
            );
        match p.stderr.wait_for(b"listening", SHORT) {
            Ok(()) => return p,
            Err(_) if attempt < 10 && lost_a_port_race(&p.stderr.text()) => {
                ports.remove("4443");
                *prepared = prepare(example, ports);
            }
            Err(e) => panic!("{e}\n{}", p.diagnostics()),
        }
    }
    unreachable!()
}

#[test]
fn readme_examples_run() {
    let examples = markdown_examples("README.md");
    assert!(examples.len() >= 10, "the README's examples were not found: {examples:#?}");
    assert!(examples[0].line.contains("tcpls demo"), "the README starts with the demo: {examples:#?}");
    run_scenario(&examples);
}

#[test]
fn cli_md_examples_run() {
    let examples = markdown_examples("docs/CLI.md");
    assert!(examples.len() >= 3, "docs/CLI.md's examples were not found: {examples:#?}");
    run_scenario(&examples);
}

#[test]
fn help_examples_run() {
    let mut all = 0;
    for sub in [
        &["cert"][..],
        &["serve"],
        &["connect"],
        &["perf"],
        &["demo"],
        &["probe"],
        &["tunnel"],
        &["tunnel", "server"],
        &["tunnel", "client"],
        &["tm3"],
        &["tm3", "rp"],
        &["tm3", "lp"],
    ] {
        let examples = help_examples(sub);
        assert!(!examples.is_empty(), "`tcpls {} --help` has no example", sub.join(" "));
        all += examples.len();
        run_scenario(&examples);
    }
    assert!(all >= 20, "{all} examples in the --help texts");
}

/// The README's library example is the crate documentation's, which its doc tests compile.
#[test]
fn readme_library_example_is_the_compiled_one() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let start = readme.find("```rust\n").expect("no rust block in the README") + "```rust\n".len();
    let code = &readme[start..start + readme[start..].find("```").unwrap()];
    let lib = std::fs::read_to_string(repo_root().join("tcpls/src/lib.rs")).unwrap();
    let doc: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| format!("{}\n", l.strip_prefix(' ').unwrap_or(l)))
        .collect();
    assert!(doc.contains(code), "README's library example differs from tcpls/src/lib.rs's:\n{code}");
}

/// Every repository path the docs mention exists in a clone.
#[test]
fn documented_paths_exist() {
    let root = repo_root();
    let mut docs = vec![root.join("README.md"), root.join("tcpls-tunnel/README.md")];
    docs.extend(std::fs::read_dir(root.join("docs")).unwrap().map(|e| e.unwrap().path()));
    let mut missing = Vec::new();
    for doc in docs.iter().filter(|p| p.extension().is_some_and(|e| e == "md")) {
        let text = std::fs::read_to_string(doc).unwrap();
        for token in text.split(|c: char| c.is_whitespace() || "`()[]<>,;\"'".contains(c)) {
            // `tests/x.rs::test_name` names a test in a file.
            let token = token.split("::").next().unwrap_or(token).trim_end_matches(['.', ':']);
            // `tcpls-cert/` is what `tcpls cert` writes, not a file of the repository.
            let looks_like_path =
                ["docs/", "tcpls", "experiments/", "fuzz/", "shared/", ".ci/"].iter().any(|p| token.starts_with(p))
                    && !token.starts_with("tcpls-cert/")
                    && token.contains('/')
                    && token.rsplit('/').next().is_some_and(|f| f.contains('.'))
                    && !token.contains('*')
                    && !token.contains("://");
            if looks_like_path && !root.join(token).exists() && !doc.parent().unwrap().join(token).exists() {
                missing.push(format!("{}: {token}", doc.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    assert!(missing.is_empty(), "the docs point at files that do not exist:\n{}", missing.join("\n"));
}

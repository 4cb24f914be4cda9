//! iperf3 options that `tcpls perf` does not take, each with a one-line hint naming the tcpls
//! equivalent (docs/CLI.md has the full mapping; the ones it takes are plain clap options).

/// (iperf3 spellings, hint). The hint is printed after the option as given (`-b10M: use ...`),
/// so it does not name the option again.
const UNSUPPORTED: &[(&[&str], &str)] = &[
    (&["-s", "--server"], "iperf3's server mode: run `tcpls serve --mode perf` on the server"),
    (&["-u", "--udp"], "TCPLS runs over TCP only, there is no UDP test"),
    (&["-b", "--bitrate", "--bandwidth"], "use --rate-limit RATE (bits per second, e.g. --rate-limit 100M)"),
    (&["-l", "--length"], "use --record-size BYTES (the TLS record size, 256..=16384)"),
    (&["-C", "--congestion"], "use --peer-cc NAME (asks the server to switch its TCP congestion control)"),
    (&["-w", "--window"], "the kernel sizes the socket buffers (net.ipv4.tcp_wmem / tcp_rmem)"),
    (&["-4", "--version4", "-6", "--version6"], "give an IPv4 or an IPv6 address ([V6]:PORT) as ADDR"),
    (&["-Z", "--zerocopy"], "the receive path is zero-copy already (--no-zero-copy to compare)"),
    (&["-k", "--blockcount"], "use -n/--bytes SIZE"),
    (&["--get-server-output"], "the server logs each session on its stderr (`tcpls serve --json` for JSON)"),
    (
        &[
            "-M",
            "--set-mss",
            "-N",
            "--no-delay",
            "-S",
            "--tos",
            "--dscp",
            "-F",
            "--file",
            "-A",
            "--affinity",
            "-T",
            "--title",
            "-V",
            "--verbose",
            "-d",
            "--debug",
            "--forceflush",
        ],
        "this iperf3 option has no tcpls perf equivalent (see `tcpls perf --help` and docs/CLI.md)",
    ),
];

/// A hint when `args` (the whole command line) is `tcpls perf` with an iperf3 option we do not
/// take; None otherwise (clap then parses as usual).
pub fn hint(args: impl Iterator<Item = String>) -> Option<String> {
    let args: Vec<String> = args.collect();
    if args.get(1).map(String::as_str) != Some("perf") {
        return None;
    }
    for arg in &args[2..] {
        if arg == "--" {
            return None;
        }
        // `--bitrate=10M`, or a short option with its value attached (`-b10M`).
        let name = arg.split('=').next().unwrap_or(arg);
        for (spellings, text) in UNSUPPORTED {
            let short_with_value = spellings.iter().any(|s| s.len() == 2 && name.len() > 2 && name.starts_with(s));
            if spellings.contains(&name) || (short_with_value && !name.starts_with("--")) {
                return Some(format!("{arg}: {text}"));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(line: &str) -> Option<String> {
        hint(line.split_whitespace().map(String::from))
    }

    #[test]
    fn hints_name_the_tcpls_option() {
        assert!(of("tcpls perf -c host -b 10M").unwrap().contains("--rate-limit"));
        assert!(of("tcpls perf -c host -b10M").unwrap().contains("--rate-limit"));
        assert!(of("tcpls perf host --bitrate=1G").unwrap().contains("--rate-limit"));
        assert!(of("tcpls perf -s").unwrap().contains("tcpls serve"));
        assert!(of("tcpls perf -u -c host").unwrap().contains("UDP"));
    }

    /// The option is named once, as given: `-s: iperf3's server mode: ...`.
    #[test]
    fn hints_name_the_option_once() {
        for spellings in UNSUPPORTED.iter().flat_map(|(s, _)| s.iter()) {
            let line = format!("tcpls perf {spellings}");
            let hint = of(&line).unwrap();
            assert!(hint.starts_with(&format!("{spellings}: ")), "{hint}");
            let rest = &hint[spellings.len() + 2..];
            assert!(!rest.starts_with('-'), "the hint starts with an option again: {hint}");
            let repeated = rest.split(|c: char| c.is_whitespace() || c == '/' || c == ':').any(|w| w == *spellings);
            assert!(!repeated, "{spellings} named twice: {hint}");
        }
        assert_eq!(
            of("tcpls perf -b10M").unwrap(),
            "-b10M: use --rate-limit RATE (bits per second, e.g. --rate-limit 100M)"
        );
    }

    #[test]
    fn supported_options_and_other_commands_pass() {
        assert_eq!(of("tcpls perf -c host -t 5 -P 4 -R -J -i 1 -O 1 -p 5201"), None);
        assert_eq!(of("tcpls perf host --insecure --bytes 1G"), None);
        assert_eq!(of("tcpls serve -s"), None);
    }
}

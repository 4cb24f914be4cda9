//! Per-forward options of `tcpls tunnel client`: `--forward LISTEN=TARGET,bond` (a TCP forward
//! whose connections are bonded over every path) and `--forward-udp LISTEN=TARGET,redundant` (a
//! UDP forward whose datagrams go on every path), docs/TUNNEL.md §6. The options follow the
//! target after commas, so the same string works on the command line and in the configuration
//! file's lists.

/// A forward's options.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ForwardOptions {
    pub bond: bool,
    pub redundant: bool,
}

/// Splits `LISTEN=TARGET[,OPTION]...` into `LISTEN=TARGET` and its options; `what` names the
/// flag (`--forward`, `--forward-udp`) in errors.
pub fn split_options<'a>(s: &'a str, what: &str) -> Result<(&'a str, ForwardOptions), String> {
    let mut parts = s.split(',');
    let forward = parts.next().unwrap_or_default();
    let mut o = ForwardOptions::default();
    for opt in parts {
        match (opt.trim(), what) {
            ("bond", "--forward") => o.bond = true,
            ("redundant", "--forward-udp") => o.redundant = true,
            (other, "--forward") => {
                return Err(format!("{what} '{s}': unknown option '{other}' (the only option is bond)"))
            }
            (other, "--forward-udp") => {
                return Err(format!("{what} '{s}': unknown option '{other}' (the only option is redundant)"))
            }
            (other, _) => return Err(format!("{what} '{s}': unknown option '{other}' ({what} takes no options)")),
        }
    }
    Ok((forward, o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_follow_the_target() {
        let plain = ForwardOptions::default();
        assert_eq!(split_options("8080=example.org:80", "--forward"), Ok(("8080=example.org:80", plain)));
        let bond = ForwardOptions { bond: true, ..plain };
        assert_eq!(split_options("8080=example.org:80,bond", "--forward"), Ok(("8080=example.org:80", bond)));
        assert_eq!(split_options("5353=9.9.9.9:53", "--forward-udp"), Ok(("5353=9.9.9.9:53", plain)));
        let e = split_options("5353=9.9.9.9:53,bond", "--forward-udp").unwrap_err();
        assert!(e.contains("unknown option 'bond'") && e.contains("only option is redundant"), "{e}");
        let redundant = ForwardOptions { redundant: true, ..plain };
        assert_eq!(split_options("5353=9.9.9.9:53,redundant", "--forward-udp"), Ok(("5353=9.9.9.9:53", redundant)));
        let e = split_options("8080=x:80,redundant", "--forward").unwrap_err();
        assert!(e.contains("unknown option 'redundant'") && e.contains("only option is bond"), "{e}");
        let e = split_options("8080=x:80,fast", "--forward").unwrap_err();
        assert!(e.contains("unknown option 'fast'") && e.contains("only option is bond"), "{e}");
    }
}

//! Per-forward options of `tcpls tunnel client`: `LISTEN=TARGET,bond` (a TCP forward whose
//! connections are bonded over every path) and `LISTEN=TARGET,redundant` (a UDP forward whose
//! datagrams go on every path). The options follow the target after commas, so the same
//! string works on the command line and in the configuration file's lists.

/// A forward's options.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ForwardOptions {
    pub bond: bool,
    pub redundant: bool,
}

/// Splits `LISTEN=TARGET[,OPTION]...` into `LISTEN=TARGET` and its options; `what` names the
/// flag in errors and says which options it takes (`bond` for --forward, `redundant` for
/// --forward-udp).
pub fn split_options<'a>(s: &'a str, what: &str) -> Result<(&'a str, ForwardOptions), String> {
    let mut parts = s.split(',');
    let forward = parts.next().unwrap_or_default();
    let mut o = ForwardOptions::default();
    for opt in parts {
        match (opt.trim(), what) {
            ("bond", "--forward") => o.bond = true,
            ("redundant", "--forward-udp") => o.redundant = true,
            (other, _) => {
                let takes = if what == "--forward" { "bond" } else { "redundant" };
                return Err(format!("{what} '{s}': unknown option '{other}' (this flag takes: {takes})"));
            }
        }
    }
    Ok((forward, o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_follow_the_target() {
        assert_eq!(
            split_options("8080=example.org:80", "--forward"),
            Ok(("8080=example.org:80", ForwardOptions::default()))
        );
        let bond = ForwardOptions { bond: true, redundant: false };
        assert_eq!(split_options("8080=example.org:80,bond", "--forward"), Ok(("8080=example.org:80", bond)));
        let red = ForwardOptions { bond: false, redundant: true };
        assert_eq!(split_options("5353=9.9.9.9:53,redundant", "--forward-udp"), Ok(("5353=9.9.9.9:53", red)));
        let e = split_options("5353=9.9.9.9:53,bond", "--forward-udp").unwrap_err();
        assert!(e.contains("unknown option 'bond'") && e.contains("takes: redundant"), "{e}");
        assert!(split_options("8080=x:80,fast", "--forward").is_err());
    }
}

//! Log lines on stderr for the long-running proxies (`tunnel`, `tm3`): INFO by default, every
//! connection with `-v`, colours only on a terminal.

pub fn init(verbose: bool) {
    let level = if verbose { tracing::Level::DEBUG } else { tracing::Level::INFO };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Fails only if a subscriber is already installed, which is then used instead.
    let _ = tracing_subscriber::fmt().with_max_level(level).with_ansi(ansi).with_writer(std::io::stderr).try_init();
}

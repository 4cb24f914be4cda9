//! One style for what `tcpls` tells a person on stderr: `tcpls SUBCOMMAND: message`, with
//! `warning:` for what they should know about. The long-running proxies (`tunnel`, `tm3`) log
//! through `tracing` in the same style (INFO by default, every connection with `-v`); machine
//! output (`--json`) goes to stdout.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// An informational line: `tcpls serve: listening on ...`.
pub fn info(command: &str, message: &str) {
    eprintln!("tcpls {command}: {message}");
}

/// A warning: `tcpls perf: warning: ...`.
pub fn warn(command: &str, message: &str) {
    eprintln!("tcpls {command}: warning: {message}");
}

/// Installs the `tracing` subscriber for `tcpls COMMAND` (tunnel, tm3): the same line style as
/// [`info`], a `warning:` or `error:` prefix by level.
pub fn init(command: &'static str, verbose: bool) {
    let level = if verbose { tracing::Level::DEBUG } else { tracing::Level::INFO };
    // Fails only if a subscriber is already installed, which is then used instead.
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .event_format(Plain(command))
        .try_init();
}

/// `tcpls LABEL: [warning: |error: ]message key=value...`, where LABEL is the message's own
/// context when it has one (`tunnel client: accept failed` → `tcpls tunnel client: ...`), the
/// subcommand otherwise.
struct Plain(&'static str);

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error: ",
            tracing::Level::WARN => "warning: ",
            _ => "",
        };
        let mut fields = Fields { out: String::new() };
        event.record(&mut fields);
        let (label, message) = split_label(&fields.out).unwrap_or((self.0, &fields.out));
        writeln!(w, "tcpls {label}: {level}{message}")
    }
}

/// `"tunnel client: accept failed"` → `("tunnel client", "accept failed")`: a short lower-case
/// label of words before the first `": "`.
fn split_label(message: &str) -> Option<(&str, &str)> {
    let (label, rest) = message.split_once(": ")?;
    let plain = label.len() <= 32 && label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == ' ');
    plain.then_some((label, rest))
}

/// The event's message first, then its other fields as `key=value`.
struct Fields {
    out: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field, &format!("{value:?}"));
    }
}

impl Fields {
    fn push(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.out.insert_str(0, value);
        } else {
            use fmt::Write;
            let _ = write!(self.out, " {}={value}", field.name());
        }
    }
}

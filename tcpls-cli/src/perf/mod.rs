//! `tcpls perf`: iperf-style bulk transfer with byte-for-byte verification, against `tcpls
//! serve`. The command's options and checks (`command`) drive the measurement (`client`), which
//! runs one task per stream (`stream`) speaking the request/report protocol (`protocol`),
//! samples the counters every interval (`interval`) and prints what it measured (`report`).

pub mod client;
pub mod command;
pub mod interval;
pub mod protocol;
pub mod report;
pub mod stream;

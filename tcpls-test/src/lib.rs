//! The workspace's shared test kit: what the tests, examples, benchmarks and experiments of
//! TCPLS-rs need around the code under test, written once instead of copied into each crate.
//!
//! * [`Pki`]: a throw-away self-signed server certificate for `localhost` / `127.0.0.1`, as
//!   DER and PEM, and rustls configs that trust it; [`TestCa`] and [`Identity`] for tests of
//!   client certificates (mutual TLS, per-client policies).
//! * [`payload`]: content-checked test data, from the `tcpls-pattern` crate (the payload of
//!   `tcpls perf`), so every receiver can verify each byte and its position.
//! * [`AcceptAnyServerCertificate`]: the (dangerous) verifier that accepts any server
//!   certificate, re-exported from `tcpls_proto::insecure`.
//! * [`net`]: loopback helpers (a TCP echo server, an echo round trip that checks every byte,
//!   a port with nothing listening).
//! * [`free_port`]: a port for a test process that must be told one before it binds it.
//! * [`Rng`]: a seeded pseudo-random generator for soaks and randomized tests.
//! * [`TempDir`]: a temporary directory removed when dropped.
//! * [`sockets`]: killing a live TCP connection with `ss -K` (root only), for failover tests.
//!
//! The network-namespace helpers (creating namespaces, veth pairs, routes, detecting whether
//! the test may: root and `ip netns`, printing `SKIPPED: <reason>` otherwise) are in the
//! `tcpls-netem` crate (`Topology`, `check_support`, `skip_unless_supported!`), which the
//! namespace tests already share.
//!
//! A dev-dependency of the crates' tests (`tcpls-test.workspace = true`). Not for the product:
//! nothing here checks anything a real deployment needs checked.
//!
//! # Example
//!
//! ```
//! use tcpls_test::{payload, Pki};
//!
//! let pki = Pki::new();
//! let server = pki.server(); // Arc<rustls::ServerConfig> with the certificate
//! let client = pki.client(); // Arc<rustls::ClientConfig> trusting it
//! # let _ = (server, client);
//! let data = payload(100_000, 7); // what the sender writes (length, seed)
//! // ... what the receiver got, checked against the same seed:
//! assert!(tcpls_test::pattern::verify(7, 0, &data));
//! assert_eq!(data, payload(100_000, 7));
//! ```

mod free_port;
pub mod net;
mod payload;
pub mod pki;
mod rng;
pub mod sockets;
mod temp;

pub use free_port::free_port;
pub use payload::{payload, payload_at};
pub use pki::{Identity, Pki, TestCa};
pub use rng::Rng;
/// The payload generator and checker itself ([`pattern::chunk`], [`pattern::verify`],
/// [`pattern::Verifier`]).
pub use tcpls_pattern as pattern;
pub use tcpls_proto::insecure::AcceptAnyServerCertificate;
pub use temp::TempDir;

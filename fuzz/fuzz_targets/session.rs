//! A whole session after a real TLS 1.3 handshake, fed attacker records sealed with the peer's
//! keys and raw attacker bytes (see `tcpls_fuzz::session`): no panic, and the session either goes
//! on or ends with an error.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tcpls_fuzz::session(data));

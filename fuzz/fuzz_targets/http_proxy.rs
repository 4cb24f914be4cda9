//! `tcpls-tunnel` parser: see `fuzz/src/tunnel.rs` for the properties checked.

#![no_main]

use libfuzzer_sys::fuzz_target;

// Each target uses one of the module's bodies.
#[allow(dead_code)]
#[path = "../src/tunnel.rs"]
mod tunnel;

fuzz_target!(|data: &[u8]| tunnel::http_proxy(data));

//! Record deframer: `next_record` walked over arbitrary bytes, whole and in pieces through a
//! connection receive buffer, never panics and never misreports a record (see `tcpls_fuzz::deframer`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tcpls_fuzz::deframer(data));

//! Record protection: `RecordKey::open_in_place` with a fixed key on arbitrary records, and on
//! authentic records with arbitrary inner plaintexts (see `tcpls_fuzz::record_open`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tcpls_fuzz::record_open(data));

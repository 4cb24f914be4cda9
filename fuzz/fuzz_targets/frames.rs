//! Frame codec: decoding arbitrary record plaintext must never panic, and every frame that decodes
//! must re-encode to exactly the bytes it came from and decode back to itself.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|plaintext: &[u8]| tcpls_fuzz::frames(plaintext));

//! Frame codec: decoding arbitrary record plaintext must never panic, and every frame that decodes
//! must re-encode to exactly the bytes it came from and decode back to itself.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpls_proto::frame::FrameReader;

fuzz_target!(|plaintext: &[u8]| {
    let mut reader = FrameReader::new(plaintext);
    let mut end = plaintext.len();
    while let Some(item) = reader.next() {
        let Ok(frame) = item else { break };
        let start = reader.remaining();
        assert!(start <= end);

        let mut encoded = Vec::with_capacity(frame.encoded_len());
        frame.encode(&mut encoded);
        assert_eq!(encoded.len(), frame.encoded_len());
        // One encoding per frame: re-encoding gives back the parsed bytes.
        assert_eq!(&encoded[..], &plaintext[start..end]);

        let mut again = FrameReader::new(&encoded);
        assert_eq!(again.next(), Some(Ok(frame)));
        assert_eq!(again.remaining(), 0);
        assert_eq!(again.next(), None);
        end = start;
    }
});

//! The Wireshark dissector (`tools/wireshark/tcpls.lua`) on the test vectors of PROTOCOL.md §10
//! and on malformed records (§7.2): record contents are handed to the dissector directly (a pcap
//! of exported PDUs), so this needs tshark but neither root nor a capture. Each vector must decode
//! to its frames, in wire order, with its field values and no warning; each malformed record must
//! raise the expected expert info.
#![allow(clippy::unwrap_used)]

mod wireshark_support;

use std::collections::BTreeSet;

use serde_json::Value;
use tcpls::proto::frame::FrameType;
use wireshark_support::{decode, tshark_missing, write_exported_pdus};

struct Vector {
    name: String,
    /// Frame lines as the spec writes them: last frame of the record first.
    frames: Vec<String>,
    bytes: Vec<u8>,
}

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn spec_vectors() -> Vec<Vector> {
    let spec = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/PROTOCOL.md")).unwrap();
    let mut vectors = Vec::new();
    let mut current: Option<Vector> = None;
    for line in spec.lines() {
        if let Some(name) = line.strip_prefix("vector: ") {
            current = Some(Vector { name: name.into(), frames: Vec::new(), bytes: Vec::new() });
        } else if let (Some(frame), Some(v)) = (line.strip_prefix("frame: "), current.as_mut()) {
            v.frames.push(frame.into());
        } else if let (Some(hex), Some(mut v)) = (line.strip_prefix("hex: "), current.take()) {
            v.bytes = unhex(hex);
            vectors.push(v);
        }
    }
    vectors
}

/// The type byte of a frame line of the spec, from the frame type table (`FrameType`): the spec
/// writes a Stream frame with `fin: true` as `Stream`, whose type is StreamFin.
fn frame_type(line: &str) -> u8 {
    let name = line.split([' ', '{']).next().unwrap();
    let name = if name == "Stream" && line.contains("fin: true") { "StreamFin" } else { name };
    match FrameType::ALL.into_iter().find(|t| t.name() == name) {
        Some(t) => t.into(),
        None => panic!("frame {name} of the spec is unknown to this test"),
    }
}

/// What tshark must show for a frame line's field values: numbers in decimal, addresses as
/// address and port, data as colon-separated hex, names as text, tokens by their first 4 bytes
/// (the dissector redacts the rest).
fn expected_values(line: &str) -> Vec<String> {
    let Some(body) = line.split_once('{').map(|(_, b)| b) else { return Vec::new() };
    let mut out = Vec::new();
    for part in body.split([',', '{', '}']) {
        let Some((key, value)) = part.trim().split_once(": ") else { continue };
        let value = value.trim();
        if value.starts_with(char::is_uppercase) {
            continue; // a nested struct's fields follow
        }
        if let Some(flag) = match value {
            "true" => Some("1"),
            "false" => Some("0"),
            _ => None,
        } {
            out.push(flag.into());
            continue;
        }
        if let Some(text) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            if key == "data" {
                out.push(text.bytes().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"));
            } else {
                out.push(text.into());
            }
        } else if key == "addr" {
            let (ip, port) = value.rsplit_once(':').unwrap();
            out.push(ip.trim_matches(['[', ']']).into());
            out.push(port.into());
        } else if matches!(key, "token" | "session_ref" | "proof") {
            out.push(format!("{}…", &value[..8]));
        } else {
            out.push(value.into());
        }
    }
    out
}

/// The values of a frame's fields as tshark printed them, hex numbers also in decimal, redacted
/// tokens cut to their visible prefix.
fn shown_values(frame: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (key, value) in frame.as_object().unwrap() {
        let Some(v) = value.as_str() else { continue };
        if key.starts_with("_ws") {
            continue;
        }
        out.insert(v.to_string());
        if let Some(hex) = v.strip_prefix("0x") {
            out.insert(u64::from_str_radix(hex, 16).unwrap().to_string());
        }
        if let Some((prefix, _)) = v.split_once('…') {
            out.insert(format!("{prefix}…"));
        }
    }
    out
}

/// Vectors of frames newer than some copies of PROTOCOL.md (name, frame line, hex), checked
/// when the spec in this tree does not have them yet.
const NEWER_VECTORS: &[(&str, &str, &str)] =
    &[("path-priority", "PathPriority { connection_id: 1, backup: true }", "01 00000001 1d")];

/// Malformed records (wire hex) and a piece of the expert info each must raise.
const MALFORMED: &[(&str, &str, &str)] = &[
    ("unknown type", "0a", "Unknown frame type 0x0a"),
    ("truncated ACK", "0000 04", "ACK: truncated"),
    ("New Address version 5", "01bb c000020a 05 01 07", "Version 5 is neither 4 nor 6"),
    ("Stream longer than the record", "6162 0003 0000000000000000 00000002 02", "Length 3 exceeds"),
    ("Stream past 2^64", "616263 0003 ffffffffffffffff 00000002 02", "offset + length exceeds 2^64 - 1"),
    ("empty congestion control name", "00 00000001 1b", "empty congestion control name"),
    ("congestion control name with a space", "622072 03 00000001 1b", "not ASCII graphic"),
    ("Path Priority with Backup 2", "02 00000001 1d", "Backup 2 is neither 0 nor 1"),
    ("empty record", "", "Record without frames"),
    (
        "Join after a Ping",
        "01 a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf 10",
        "Join is not the first frame",
    ),
];

#[test]
fn dissector_decodes_the_spec_vectors_and_flags_malformed_frames() {
    if let Some(why) = tshark_missing() {
        eprintln!("SKIPPED: dissector_decodes_the_spec_vectors_and_flags_malformed_frames: {why}");
        return;
    }
    let mut vectors = spec_vectors();
    assert!(vectors.len() >= 26, "PROTOCOL.md §10 vectors found: {}", vectors.len());
    for (name, frame, hex) in NEWER_VECTORS {
        if !vectors.iter().any(|v| v.name == *name) {
            vectors.push(Vector { name: name.to_string(), frames: vec![frame.to_string()], bytes: unhex(hex) });
        }
    }
    let mut records: Vec<Vec<u8>> = vectors.iter().map(|v| v.bytes.clone()).collect();
    records.extend(MALFORMED.iter().map(|(_, hex, _)| unhex(hex)));
    let dir = wireshark_support::temp_dir("tcpls-wireshark-vectors");
    let pcap = dir.join("vectors.pcap");
    write_exported_pdus(&pcap, &records).unwrap();
    let decoded = decode(&pcap, None).unwrap();
    assert_eq!(decoded.records.len(), records.len(), "one TCPLS record per packet");

    for (v, r) in vectors.iter().zip(&decoded.records) {
        let wire_order: Vec<u8> = v.frames.iter().rev().map(|f| frame_type(f)).collect();
        assert_eq!(r.frame_types, wire_order, "vector {}: frame types in wire order", v.name);
        assert!(r.warnings.is_empty(), "vector {}: no warning, got {:?}", v.name, r.warnings);
        for (line, frame) in v.frames.iter().rev().zip(&r.frames) {
            let shown = shown_values(frame);
            for want in expected_values(line) {
                assert!(shown.contains(&want), "vector {}: {line}: {want} not among {shown:?}", v.name);
            }
        }
    }
    for ((what, _, message), r) in MALFORMED.iter().zip(&decoded.records[vectors.len()..]) {
        assert!(r.warnings.iter().any(|w| w.contains(message)), "{what}: expected `{message}`, got {:?}", r.warnings);
    }
    // Tokens are redacted: no frame shows a whole token.
    let dump = format!("{:?}", decoded.records);
    assert!(!dump.contains("a0a1a2a3a4a5a6a7"), "a Join token appears in full");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Random records, most ending with a known type byte: the plugin never fails (a Lua error
/// would show in tshark's output) and decodes each as one record.
#[test]
fn dissector_survives_random_records() {
    if let Some(why) = tshark_missing() {
        eprintln!("SKIPPED: dissector_survives_random_records: {why}");
        return;
    }
    let mut rng = tcpls_test::Rng::new(1);
    let mut next = move || rng.next_u64();
    let records: Vec<Vec<u8>> = (0..2000)
        .map(|_| {
            let len = (next() % 80) as usize;
            let mut r: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if let Some(last) = r.last_mut() {
                *last = (next() % 0x1F) as u8; // mostly frame types that exist
            }
            r
        })
        .collect();
    let dir = wireshark_support::temp_dir("tcpls-wireshark-random");
    let pcap = dir.join("random.pcap");
    write_exported_pdus(&pcap, &records).unwrap();
    let decoded = decode(&pcap, None).unwrap();
    assert_eq!(decoded.records.len(), records.len());
    let _ = std::fs::remove_dir_all(&dir);
}

//! Runs tshark with the plugin over a capture and reads the records it decoded from its JSON
//! (`-T json --no-duplicate-keys`: a key that occurs several times in a tree holds an array).
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The Lua plugin, from the repository.
pub fn plugin() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/wireshark/tcpls.lua")
}

#[derive(Debug, Clone)]
pub struct StreamFrame {
    pub id: u32,
    pub offset: u64,
    pub length: u64,
    pub fin: bool,
}

/// One TCPLS record as the dissector showed it.
#[derive(Debug, Clone)]
pub struct Record {
    pub packet: u64,
    pub tcp_stream: u64,
    /// The server's port of the TCP connection the record travelled on.
    pub server_port: u16,
    pub sender: String,
    pub conn_id: Option<u32>,
    pub join_conn_id: Option<u32>,
    pub conn_resets: Vec<u32>,
    pub stream_frames: Vec<StreamFrame>,
    pub frame_types: Vec<u8>,
    /// Each frame's subtree as tshark gave it (field name -> value).
    pub frames: Vec<Value>,
    /// Expert infos of warning or error severity in this record.
    pub warnings: Vec<String>,
    pub retransmission: bool,
    /// Carried as TLS early data (0-RTT).
    pub early_data: bool,
}

#[derive(Debug, Default)]
pub struct Decoded {
    pub records: Vec<Record>,
    /// KeyUpdate messages Wireshark decrypted (it must follow them to decrypt what comes next).
    pub key_updates: usize,
    /// Application-data records Wireshark could not decrypt.
    pub undecrypted: usize,
    /// Expert infos of the plugin with severity warning or error, over all records.
    pub warnings: Vec<String>,
}

/// `tshark -r pcap -o tls.keylog_file:keylog -X lua_script:tcpls.lua -T json`, parsed. Without a
/// key log (records given as exported PDUs), packets have no TCP layer and records no sender.
pub fn decode(pcap: &Path, keylog: Option<&Path>) -> Result<Decoded, String> {
    let mut tshark = Command::new("tshark");
    tshark.arg("-r").arg(pcap);
    if let Some(keylog) = keylog {
        tshark.arg("-o").arg(format!("tls.keylog_file:{}", keylog.display()));
    }
    let out = tshark
        .arg("-X")
        .arg(format!("lua_script:{}", plugin().display()))
        // No -J filter: a Lua runtime error is an item outside the tcpls tree.
        .args(["-T", "json", "--no-duplicate-keys"])
        .output()
        .map_err(|e| format!("cannot run tshark: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || stderr.contains("Lua: Error") {
        return Err(format!("tshark failed ({}): {stderr}", out.status));
    }
    if let Some(at) = out.stdout.windows(9).position(|w| w == b"Lua Error") {
        let context = String::from_utf8_lossy(&out.stdout[at..(at + 200).min(out.stdout.len())]).into_owned();
        return Err(format!("the plugin failed: {context}"));
    }
    let packets: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("tshark JSON: {e}"))?;
    let mut decoded = Decoded::default();
    for packet in items(&packets) {
        let layers = &packet["_source"]["layers"];
        let number = num(&layers["frame"]["frame.number"]).ok_or("frame.number")?;
        let tcp = &layers["tcp"];
        let tcp_stream = num(&tcp["tcp.stream"]).unwrap_or(u64::MAX);
        let ports = (num(&tcp["tcp.srcport"]).unwrap_or(0) as u16, num(&tcp["tcp.dstport"]).unwrap_or(0) as u16);
        for tls in items(&layers["tls"]) {
            for record in items(&tls["tls.record"]) {
                if record["tls.record.opaque_type"] == "23" && record.get("tls.record.content_type").is_none() {
                    decoded.undecrypted += 1;
                }
                let handshake_types = items(&record["tls.handshake"]).into_iter().map(|h| &h["tls.handshake.type"]);
                decoded.key_updates += handshake_types.filter(|t| *t == "24").count();
            }
        }
        for tcpls in items(&layers["tcpls"]) {
            let record = parse_record(tcpls, number, tcp_stream, ports)?;
            decoded.warnings.extend(record.warnings.iter().cloned());
            decoded.records.push(record);
        }
    }
    Ok(decoded)
}

fn parse_record(tcpls: &Value, packet: u64, tcp_stream: u64, (src, dst): (u16, u16)) -> Result<Record, String> {
    let sender = tcpls["tcpls.sender"].as_str().unwrap_or_default().to_string();
    let mut record = Record {
        packet,
        tcp_stream,
        server_port: if sender == "client" { dst } else { src },
        sender,
        conn_id: num(&tcpls["tcpls.conn_id"]).map(|n| n as u32),
        join_conn_id: None,
        conn_resets: Vec::new(),
        stream_frames: Vec::new(),
        frame_types: Vec::new(),
        frames: Vec::new(),
        warnings: Vec::new(),
        retransmission: false,
        early_data: tcpls["tcpls.early_data"] == "1",
    };
    collect_warnings(tcpls, &mut record.warnings);
    for frame in items(&tcpls["tcpls.frame"]) {
        collect_warnings(frame, &mut record.warnings);
        let ty =
            frame["tcpls.frame.type"].as_str().and_then(|t| u8::from_str_radix(t.trim_start_matches("0x"), 16).ok());
        let ty = ty.ok_or_else(|| format!("frame without a type: {frame}"))?;
        record.frame_types.push(ty);
        record.frames.push(frame.clone());
        if frame.get("_ws.malformed").is_some() {
            continue; // the frame the tail reader stopped at: its type only
        }
        match ty {
            0x02 | 0x03 => {
                let field = |name: &str| num(&frame[name]).ok_or_else(|| format!("{name} in {frame}"));
                record.stream_frames.push(StreamFrame {
                    id: field("tcpls.stream.id")? as u32,
                    offset: field("tcpls.stream.offset")?,
                    length: field("tcpls.stream.length")?,
                    fin: ty == 0x03,
                });
                record.retransmission |= frame["tcpls.stream.retransmission"] == "1";
            }
            0x06 => {
                record.conn_resets.push(num(&frame["tcpls.conn_reset.conn_id"]).ok_or("conn_reset.conn_id")? as u32)
            }
            0x10 => record.join_conn_id = num(&frame["tcpls.join.conn_id"]).map(|n| n as u32),
            _ => {}
        }
    }
    Ok(record)
}

/// A value that is one item or, for a key repeated in its tree, an array of them.
fn items(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(a) => a.iter().collect(),
        Value::Null => Vec::new(),
        other => vec![other],
    }
}

fn num(v: &Value) -> Option<u64> {
    v.as_str()?.parse().ok()
}

/// Expert infos of warning (0x00600000) or error (0x00800000) severity.
fn collect_warnings(tree: &Value, out: &mut Vec<String>) {
    for e in items(&tree["_ws.expert"]) {
        let severity: u64 = e["_ws.expert.severity"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
        if severity >= 0x0060_0000 {
            out.push(e["_ws.expert.message"].as_str().unwrap_or("?").to_string());
        }
    }
}

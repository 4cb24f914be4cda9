//! `experiments trace-plot FILE -o OUT.png` on a small failover trace (no root needed): the
//! PNG decodes, has the plot's size and is drawn on (not blank); the summary names both
//! connections and marks the join, the loss and the failover; a file that is not a trace is
//! refused with a message saying so.
#![allow(clippy::unwrap_used, clippy::needless_range_loop)]

mod support;

use std::process::Command;

/// Two connections; connection 1 is lost at 0.5 s and its records move to connection 0.
fn failover_trace() -> String {
    let mut lines = vec![
        r#"{"qlog_format":"JSON-LINES","qlog_version":"0.4","title":"tcpls event trace"}"#.to_string(),
        r#"{"time":0.0,"name":"tcpls:established","group_id":1,"side":"client","data":{"fallback":false}}"#.into(),
        r#"{"time":5.0,"name":"tcpls:connection_joined","group_id":1,"side":"client","data":{"conn":1}}"#.into(),
    ];
    let mut sent = [0u64, 0u64];
    for i in 1..=10u64 {
        let t = i as f64 * 100.0;
        for conn in 0..2usize {
            if conn == 1 && i > 5 {
                continue;
            }
            // Connection 0 takes everything once connection 1 is gone.
            sent[conn] += if i > 5 { 20 << 20 } else { 10 << 20 };
            lines.push(format!(
                r#"{{"time":{t},"name":"tcpls:connection_sample","group_id":1,"side":"client","data":{{"conn":{conn},"bytes_sent":{},"bytes_received":1000,"records_sent":{},"records_received":10,"unacked_records":3,"rtt_us":{},"cwnd":{},"tcp_retrans":0}}}}"#,
                sent[conn],
                sent[conn] / 16384,
                800 + 100 * conn,
                10 + i
            ));
        }
        lines.push(format!(
            r#"{{"time":{t},"name":"tcpls:stream_progress","group_id":1,"side":"client","data":{{"stream":0,"written":{w},"sent":{w},"acked":{w},"max_data":{w},"blocked":false,"received":0}}}}"#,
            w = sent[0] + sent[1]
        ));
        if i == 5 {
            lines.push(r#"{"time":510.0,"name":"tcpls:connection_lost","group_id":1,"side":"client","data":{"conn":1,"error":"connection lost: reset"}}"#.into());
            lines.push(r#"{"time":511.0,"name":"tcpls:failed_over","group_id":1,"side":"client","data":{"conn":1,"records_resent_total":12,"stream_bytes_resent_total":196608}}"#.into());
        }
    }
    lines.join("\n") + "\n"
}

#[test]
fn plots_a_failover_trace_into_a_png() {
    let out = support::OutDir::new("trace-plot");
    let (trace, png) = (out.0.join("trace.jsonl"), out.0.join("plot.png"));
    std::fs::write(&trace, failover_trace()).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .arg("trace-plot")
        .arg(&trace)
        .arg("-o")
        .arg(&png)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "trace-plot failed: {}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    eprintln!("{summary:#}");
    assert_eq!(summary["session"], 1);
    assert_eq!(summary["connections"], 2);
    assert_eq!(summary["panels"].as_array().unwrap().len(), 4, "bytes, streams, RTT, cwnd");
    let labels: Vec<&str> =
        summary["markers"].as_array().unwrap().iter().map(|m| m["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["conn 1 joined", "conn 1 lost + failover (12 records re-sent)"]);

    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut buf).unwrap();
    assert!(frame.width >= 800 && frame.height >= 4 * 300, "{}x{}", frame.width, frame.height);
    let pixels = &buf[..frame.buffer_size()];
    let channels = frame.line_size / frame.width as usize;
    let drawn = pixels.chunks(channels).filter(|p| p.iter().take(3).any(|c| *c < 200)).count();
    let total = (frame.width * frame.height) as usize;
    assert!(drawn > total / 200 && drawn < total / 2, "{drawn} of {total} pixels drawn: blank or filled");
    // Coloured lines (the series), not only black text and axes.
    let coloured = pixels.chunks(channels).filter(|p| p.len() >= 3 && p[0].abs_diff(p[2]) > 60).count();
    assert!(coloured > 500, "{coloured} coloured pixels");
}

#[test]
fn refuses_a_file_that_is_not_a_trace() {
    let out = support::OutDir::new("trace-plot-bad");
    let bad = out.0.join("bad.jsonl");
    std::fs::write(&bad, "hello\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .arg("trace-plot")
        .arg(&bad)
        .arg("-o")
        .arg(out.0.join("x.png"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("line 1: not JSON") && err.contains("tcpls --trace"), "{err}");
    assert!(!out.0.join("x.png").exists());
}

//! The C example of docs/BINDINGS.md, compiled with `cc` and run against `tcpls serve --mode
//! echo` as the document says. Without `cc`: SKIPPED.
#![allow(clippy::unwrap_used)]

mod support;

use std::process::Command;

use support::*;

/// The first ```c block of docs/BINDINGS.md.
fn c_example() -> String {
    let doc = std::fs::read_to_string(workspace().join("docs/BINDINGS.md")).unwrap();
    let start = doc.find("```c\n").expect("docs/BINDINGS.md has a ```c block") + 5;
    let end = start + doc[start..].find("```").unwrap();
    doc[start..end].to_string()
}

#[test]
fn the_c_example_of_bindings_md_talks_to_tcpls_serve() {
    let ex = match examples() {
        Ok(ex) => ex,
        Err(why) => {
            eprintln!("SKIPPED: the_c_example_of_bindings_md_talks_to_tcpls_serve: {why}");
            return;
        }
    };
    let dir = temp_dir("doc");
    let source = dir.join("hello.c");
    std::fs::write(&source, c_example()).unwrap();
    let binary = dir.join("hello");
    compile_c(&[source.to_str().unwrap()], &binary).unwrap_or_else(|e| panic!("{e}"));
    let (server, first, _) =
        tcpls_serve(&["--mode", "echo", "--cert", ex.cert().to_str().unwrap(), "--key", ex.key().to_str().unwrap()]);
    let out = run(Command::new(&binary).arg(&first).arg(ex.cert()), b"");
    assert!(out.status.success(), "{}\n--- server:\n{}", describe(&out), server.stderr_text());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from C\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("-> {first}, rtt")), "the path statistics are printed: {stderr}");
}

//! docs/ARCHITECTURE.md lists the session's receive and send paths as ordered lists of
//! functions. This keeps those lists true: every function or type they name must exist in
//! `tcpls-proto/src`, so a rename or a removal fails here until the document follows; and the
//! steps must be in the order the code runs them:
//!
//! * each step's function (the first name of the step) is called by a function named in an
//!   earlier step, or is public (an entry point the IO layer or the application calls, such as
//!   `Session::prepare_transmit`);
//! * where one function calls the functions of several steps (`Session::prepare_transmit`
//!   calls steps 3, 4, 6 and 7 of the send path), it calls them in the order of the list: the
//!   first call of an earlier step comes before the last call of a later one (a function may
//!   have another branch that calls a later step alone: `Connection::read_records` hands a
//!   plain-TLS fallback record to `RecordSink::deliver` without `open_record`).
//!
//! Functions are found by name (a name defined twice counts every body), and a call is the
//! name followed by `(`: enough for these lists, not a Rust parser.

use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read source");
            let stem = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            out.push((stem, text));
        }
    }
}

/// The backticked names of the list under `heading` (up to the next heading).
fn names_under(doc: &str, heading: &str) -> Vec<String> {
    let start = doc.find(heading).unwrap_or_else(|| panic!("ARCHITECTURE.md has no {heading:?}"));
    let section = &doc[start + heading.len()..];
    let end = section.find("\n#").unwrap_or(section.len());
    section[..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_' || c == ':'))
        .map(str::to_string)
        .collect()
}

fn defines_fn(files: &[(String, String)], name: &str) -> bool {
    let pattern = format!("fn {name}(");
    let generic = format!("fn {name}<");
    files.iter().any(|(_, text)| text.contains(&pattern) || text.contains(&generic))
}

fn defines_type_or_module(files: &[(String, String)], name: &str) -> bool {
    let kinds = ["struct", "enum", "trait", "type"];
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    files.iter().any(|(stem, text)| {
        stem == name
            || kinds.iter().any(|k| {
                let needle = format!("{k} {name}");
                text.match_indices(&needle).any(|(at, _)| !text[at + needle.len()..].starts_with(is_ident))
            })
    })
}

/// The numbered steps of the list under `heading`: the names each one mentions, in order.
fn steps_under(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let start = doc.find(heading).unwrap_or_else(|| panic!("ARCHITECTURE.md has no {heading:?}"));
    let section = &doc[start + heading.len()..];
    let section = &section[..section.find("\n#").unwrap_or(section.len())];
    let mut steps: Vec<String> = Vec::new();
    for line in section.lines() {
        let numbered =
            line.split_once(". ").is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if numbered {
            steps.push(String::new());
        }
        if let Some(step) = steps.last_mut() {
            step.push_str(line);
            step.push('\n');
        }
    }
    steps.iter().map(|step| names_under(&format!("{heading}{step}"), heading)).collect()
}

/// The function part of a name: `Session::process` -> `process`.
fn function_of(name: &str) -> &str {
    name.rsplit("::").next().unwrap_or(name)
}

/// The bodies of every function called `name` (from the `{` after its signature to the
/// matching `}`; braces in strings, characters and comments do not count).
fn bodies<'a>(files: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    for (_, text) in files {
        for signature in [format!("fn {name}("), format!("fn {name}<")] {
            for (at, _) in text.match_indices(&signature) {
                let before = text[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                if let Some(body) = body_after(&text[at + signature.len()..]) {
                    out.push(body);
                }
            }
        }
    }
    out
}

/// The block that follows a signature, or None for a declaration without a body (`;` first).
fn body_after(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let (mut i, mut parens, mut start, mut depth) = (0, 0i32, None, 0i32);
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i += text[i..].find('\n').unwrap_or(text.len() - i);
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            // A character literal ('{', '\''), not a lifetime ('a).
            b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if bytes.get(i + 1) == Some(&b'\\') => i += text[i + 3..].find('\'').map_or(0, |n| n + 3),
            b'(' | b'[' => parens += 1,
            b')' | b']' => parens -= 1,
            b';' if start.is_none() && parens <= 0 => return None,
            b'{' => {
                if start.is_none() && parens <= 0 {
                    start = Some(i);
                }
                depth += 1;
            }
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return start.map(|s| &text[s..=i]);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Where `body` calls `function` (`function(`, `.function(`, `::function(`), in order.
fn calls_of(body: &str, function: &str) -> Vec<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let is_call = |at: usize| {
        let after = body[at + function.len()..].trim_start();
        !body[..at].ends_with(is_ident) && (after.starts_with('(') || after.starts_with("::<"))
    };
    body.match_indices(function).map(|(at, _)| at).filter(|&at| is_call(at)).collect()
}

/// Where `body` first calls `function`.
fn call_at(body: &str, function: &str) -> Option<usize> {
    calls_of(body, function).first().copied()
}

fn is_public(files: &[(String, String)], function: &str) -> bool {
    let (plain, generic) = (format!("pub fn {function}("), format!("pub fn {function}<"));
    files.iter().any(|(_, text)| text.contains(&plain) || text.contains(&generic))
}

/// The order rules of the module documentation; returns what breaks them.
fn order_problems(files: &[(String, String)], steps: &[Vec<String>]) -> Vec<String> {
    let mut problems = Vec::new();
    let first = |step: &Vec<String>| step.first().map(|n| function_of(n).to_string());
    for (k, step) in steps.iter().enumerate().skip(1) {
        let Some(function) = first(step) else { continue };
        let callers: Vec<&str> = steps[..k]
            .iter()
            .flatten()
            .map(|n| function_of(n))
            .filter(|caller| bodies(files, caller).iter().any(|b| call_at(b, &function).is_some()))
            .collect();
        if callers.is_empty() && !is_public(files, &function) {
            problems.push(format!(
                "step {}: `{function}` is neither called by a function of an earlier step nor public",
                k + 1
            ));
        }
    }
    // Steps called from one function: in the order of the list.
    let functions: Vec<Option<String>> = steps.iter().map(first).collect();
    for caller in steps.iter().flatten().map(|n| function_of(n)) {
        for body in bodies(files, caller) {
            // (step, first call, last call, function) of each step this body calls.
            let calls: Vec<(usize, usize, usize, &str)> = functions
                .iter()
                .enumerate()
                .filter_map(|(k, f)| {
                    let f = f.as_deref()?;
                    let at = calls_of(body, f);
                    Some((k, *at.first()?, *at.last()?, f))
                })
                .collect();
            for pair in calls.windows(2) {
                let ((k1, first1, _, f1), (k2, _, last2, f2)) = (pair[0], pair[1]);
                if first1 > last2 {
                    problems.push(format!("`{caller}` calls `{f2}` (step {}) before `{f1}` (step {})", k2 + 1, k1 + 1));
                }
            }
        }
    }
    problems.sort();
    problems.dedup();
    problems
}

fn check(heading: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("../docs/ARCHITECTURE.md")).expect("read ARCHITECTURE.md");
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let names = names_under(&doc, heading);
    assert!(names.len() >= 10, "{heading}: expected a list of functions, found {names:?}");
    let mut missing = Vec::new();
    for name in &names {
        let found = match name.rsplit_once("::") {
            Some((owner, function)) => defines_type_or_module(&files, owner) && defines_fn(&files, function),
            None if name.starts_with(char::is_uppercase) => defines_type_or_module(&files, name),
            None => defines_fn(&files, name),
        };
        if !found {
            missing.push(name.clone());
        }
    }
    assert!(missing.is_empty(), "ARCHITECTURE.md, {heading}: these no longer exist in tcpls-proto/src: {missing:?}");
    let steps = steps_under(&doc, heading);
    assert!(steps.len() >= 5, "{heading}: expected numbered steps, found {steps:?}");
    let problems = order_problems(&files, &steps);
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md, {heading}: the steps are not in the code's order:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_receive_path_in_architecture_md_names_existing_functions() {
    check("### The receive path, in order");
}

#[test]
fn the_send_path_in_architecture_md_names_existing_functions() {
    check("### The send path, in order");
}

/// The order check fails on a list whose steps are swapped, so it checks something.
#[test]
fn steps_out_of_order_are_found() {
    let files = vec![(
        "demo".to_string(),
        "pub fn entry() { first(); second(); }\nfn first() { let _ = '{'; }\nfn second() {}\nfn orphan() {}\n"
            .to_string(),
    )];
    let steps = |names: &[&str]| names.iter().map(|n| vec![n.to_string()]).collect::<Vec<_>>();
    assert!(order_problems(&files, &steps(&["entry", "first", "second"])).is_empty());
    // Another branch may call a later step alone, before the branch that calls both in order.
    let branches = vec![(
        "demo".to_string(),
        "pub fn entry(x: bool) { if x { second(); } else { first(); second(); } }\nfn first() {}\nfn second() {}\n"
            .to_string(),
    )];
    assert!(order_problems(&branches, &steps(&["entry", "first", "second"])).is_empty());
    let swapped = order_problems(&files, &steps(&["entry", "second", "first"]));
    assert_eq!(swapped, ["`entry` calls `first` (step 3) before `second` (step 2)"], "{swapped:?}");
    let unreached = order_problems(&files, &steps(&["entry", "orphan"]));
    assert_eq!(unreached.len(), 1, "{unreached:?}");
}

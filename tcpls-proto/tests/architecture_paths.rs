//! docs/ARCHITECTURE.md lists the session's receive and send paths as ordered lists of
//! functions. This keeps those lists true: every function or type they name must exist in
//! `tcpls-proto/src`, so a rename or a removal fails here until the document follows.

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
}

#[test]
fn the_receive_path_in_architecture_md_names_existing_functions() {
    check("### The receive path, in order");
}

#[test]
fn the_send_path_in_architecture_md_names_existing_functions() {
    check("### The send path, in order");
}

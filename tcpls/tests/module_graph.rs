//! The modules of `tcpls/src` depend on each other one way only (docs/ARCHITECTURE.md, "The
//! tokio layer": modules in dependency order). A module that names another through `crate::`
//! depends on it; a name re-exported at the crate root stands for the module that defines it.
//! This test fails, listing the cycle, as soon as two modules reach each other.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The code of a file without its comments (doc links name modules without depending on them).
fn code_of(text: &str) -> String {
    text.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// Identifiers following each `crate::` in `code`, and every first segment of a
/// `use crate::{a, b::c}` group.
fn crate_names(code: &str) -> Vec<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let mut names = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            names.extend(group.split(',').map(|item| ident(item.trim())));
        } else {
            names.push(ident(rest));
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// Names re-exported by `lib.rs` (`pub use module::{A, B}`) → their module.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in code_of(lib).split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else { continue };
        let Some((module, items)) = path.split_once("::") else { continue };
        for item in items.trim_matches(|c| c == '{' || c == '}' || char::is_whitespace(c)).split(',') {
            let name = item.split(" as ").last().unwrap_or("").trim();
            if !name.is_empty() {
                out.insert(name.to_string(), module.trim().to_string());
            }
        }
    }
    out
}

/// A cycle through `start`, if any (depth-first search over `edges`).
fn cycle_from(start: &str, edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn walk(
        node: &str,
        start: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in edges.get(node).into_iter().flatten() {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(next, start, edges, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    walk(start, start, edges, &mut path, &mut BTreeSet::new()).then(|| {
        path.push(start.to_string());
        path
    })
}

#[test]
fn tcpls_modules_have_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let module = path.file_stem().unwrap().to_string_lossy().into_owned();
            files.insert(module, std::fs::read_to_string(&path).unwrap());
        }
    }
    let lib = files.remove("lib").expect("src/lib.rs");
    assert!(files.len() >= 20, "the crate's modules were found: {:?}", files.keys());
    let reexported = reexports(&lib);
    assert_eq!(reexported.get("Session").map(String::as_str), Some("session"), "lib.rs re-exports are read");
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in &files {
        let deps = edges.entry(module.clone()).or_default();
        for name in crate_names(&code_of(text)) {
            let target = if files.contains_key(&name) { Some(name) } else { reexported.get(&name).cloned() };
            if let Some(target) = target.filter(|t| t != module) {
                deps.insert(target);
            }
        }
    }
    assert!(edges["shared"].contains("registry"), "edges are read: {edges:?}");
    for module in edges.keys() {
        if let Some(cycle) = cycle_from(module, &edges) {
            panic!(
                "module cycle in tcpls/src: {} (dependencies must point one way, see docs/ARCHITECTURE.md); \
                 all edges: {edges:#?}",
                cycle.join(" -> ")
            );
        }
    }
}

#[test]
fn a_cycle_is_found() {
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["c".to_string()])),
        ("c".to_string(), BTreeSet::from(["a".to_string()])),
    ]
    .into_iter()
    .collect();
    assert_eq!(cycle_from("a", &edges), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    let code = code_of("use crate::{x, y::Z}; // crate::comment\nlet v = crate::w::f();");
    assert_eq!(crate_names(&code), vec!["x", "y", "w"]);
}

//! The modules of every crate depend on each other one way only (docs/ARCHITECTURE.md lists
//! the modules in dependency order). Every crate target of the repository is read (libraries,
//! binaries, examples, fuzz targets; tests excepted), with `syn`. A module depends on a sibling
//! when its code (or a child module's) names a path into that sibling: `crate::`, `super::`,
//! `self::`, a child module, or a name brought in by `use`; a name re-exported by a module
//! (`pub use x::Item`, or a private `use`) stands for the module that defines it. Paths inside
//! macro invocations count too; comments and doc links do not. A child naming its parent's
//! items is not a cycle between siblings and is not reported here.
//!
//! The test fails, listing each cycle with the places that make its edges, as soon as two
//! sibling modules reach each other, in any crate.
#![allow(clippy::unwrap_used)]

mod source_tree;

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{TokenStream, TokenTree};
use source_tree::{shown, Crate};
use syn::visit::Visit;

/// Modules whose children may still reach each other, as (crate target, parent module): none
/// now. An entry without a cycle fails the test, so the list can only shrink. Add nothing
/// here: break the cycle instead.
const BEING_UNTANGLED: &[(&str, &str)] = &[];

/// A path as written, and the line it is on.
struct Named {
    segments: Vec<String>,
    line: usize,
}

/// The paths a module's own items name, and the names its `use` items bring in.
#[derive(Default)]
struct Names {
    paths: Vec<Named>,
    /// name → the path it stands for, relative to the module, as written.
    uses: BTreeMap<String, Vec<String>>,
}

impl<'ast> Visit<'ast> for Names {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = path.segments.first().map_or(0, |s| s.ident.span().start().line);
        self.paths.push(Named { segments, line });
        syn::visit::visit_path(self, path);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&item.tree, Vec::new(), &mut leaves);
        for (name, segments) in leaves {
            let line = item.use_token.span.start().line;
            if let Some(name) = name {
                self.uses.insert(name, segments.clone());
            }
            self.paths.push(Named { segments, line });
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        token_paths(mac.tokens.clone(), &mut self.paths);
    }
}

/// The leaves of a `use` tree: (the name it brings in, unless a glob; the full path).
fn use_leaves(tree: &syn::UseTree, prefix: Vec<String>, out: &mut Vec<(Option<String>, Vec<String>)>) {
    let with = |name: String| {
        let mut p = prefix.clone();
        p.push(name);
        p
    };
    match tree {
        syn::UseTree::Path(p) => use_leaves(&p.tree, with(p.ident.to_string()), out),
        syn::UseTree::Name(n) if n.ident == "self" => {
            if let Some(last) = prefix.last() {
                out.push((Some(last.clone()), prefix.clone()));
            }
        }
        syn::UseTree::Name(n) => out.push((Some(n.ident.to_string()), with(n.ident.to_string()))),
        syn::UseTree::Rename(r) => {
            let target = if r.ident == "self" { prefix.clone() } else { with(r.ident.to_string()) };
            out.push((Some(r.rename.to_string()), target));
        }
        syn::UseTree::Glob(_) => out.push((None, prefix.clone())),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| use_leaves(t, prefix.clone(), out)),
    }
}

/// Runs of `ident :: ident :: ...` in a macro's tokens (nested groups included).
fn token_paths(tokens: TokenStream, out: &mut Vec<Named>) {
    fn flush(run: &mut Vec<String>, line: usize, out: &mut Vec<Named>) {
        if run.len() >= 2 {
            out.push(Named { segments: std::mem::take(run), line });
        }
        run.clear();
    }
    let mut run: Vec<String> = Vec::new();
    let mut line = 0;
    let mut colons = 0;
    for tree in tokens {
        match tree {
            TokenTree::Ident(ident) => {
                if colons != 2 {
                    flush(&mut run, line, out);
                    line = ident.span().start().line;
                }
                run.push(ident.to_string());
                colons = 0;
            }
            TokenTree::Punct(p) if p.as_char() == ':' && !run.is_empty() && colons < 2 => colons += 1,
            TokenTree::Group(g) => {
                flush(&mut run, line, out);
                colons = 0;
                token_paths(g.stream(), out);
            }
            _ => {
                flush(&mut run, line, out);
                colons = 0;
            }
        }
    }
    flush(&mut run, line, out);
}

/// A crate's modules with what each names, and the resolution of paths to modules.
struct Graph<'a> {
    krate: &'a Crate,
    names: Vec<Names>,
}

impl Graph<'_> {
    fn new(krate: &Crate) -> Graph<'_> {
        let names = krate
            .modules
            .iter()
            .map(|m| {
                let mut names = Names::default();
                m.items.iter().for_each(|item| names.visit_item(item));
                names
            })
            .collect();
        Graph { krate, names }
    }

    /// The absolute path (from the crate root) that `segments`, written in `module`, stands
    /// for; `None` for a path outside the crate (std, another crate, a local item).
    fn absolute(&self, module: usize, segments: &[String], depth: usize) -> Option<Vec<String>> {
        let (first, rest) = segments.split_first()?;
        if depth > 16 {
            return None;
        }
        let here = &self.krate.modules[module].path;
        match first.as_str() {
            "crate" => Some(rest.to_vec()),
            "self" => self.absolute_from(module, rest, depth),
            "super" => {
                let parent = self.krate.modules[module].parent?;
                if rest.first().is_some_and(|s| s == "super") {
                    self.absolute(parent, rest, depth + 1)
                } else {
                    self.absolute_from(parent, rest, depth)
                }
            }
            name if self.krate.child(module, name).is_some() => Some([here.as_slice(), segments].concat()),
            name => {
                let target = self.names[module].uses.get(name)?;
                if target.len() == 1 && target[0] == *name {
                    return None; // `use name;` of an extern crate
                }
                self.absolute(module, &[target.as_slice(), rest].concat(), depth + 1)
            }
        }
    }

    fn absolute_from(&self, module: usize, rest: &[String], depth: usize) -> Option<Vec<String>> {
        let here = &self.krate.modules[module].path;
        if rest.is_empty() {
            return Some(here.clone());
        }
        // `self::x` / `super::x` where x is a name the module brings in with `use`.
        if self.krate.child(module, &rest[0]).is_none() {
            if let Some(target) = self.names[module].uses.get(&rest[0]) {
                return self.absolute(module, &[target.as_slice(), &rest[1..]].concat(), depth + 1);
            }
        }
        Some([here.as_slice(), rest].concat())
    }

    /// The module an absolute path leads into: the deepest module it names, a re-exported
    /// name followed to the module that defines it.
    fn module_of(&self, absolute: &[String], depth: usize) -> usize {
        let mut at = 0;
        for (i, segment) in absolute.iter().enumerate() {
            if let Some(child) = self.krate.child(at, segment) {
                at = child;
                continue;
            }
            if depth < 16 {
                if let Some(target) = self.names[at].uses.get(segment) {
                    if let Some(abs) = self.absolute(at, &[target.as_slice(), &absolute[i + 1..]].concat(), depth + 1) {
                        return self.module_of(&abs, depth + 1);
                    }
                }
            }
            break;
        }
        at
    }

    /// Dependencies between sibling modules: (parent, from child, to child) → the places.
    fn sibling_edges(&self) -> BTreeMap<(usize, usize, usize), Vec<String>> {
        let mut edges: BTreeMap<(usize, usize, usize), Vec<String>> = BTreeMap::new();
        for (module, names) in self.names.iter().enumerate() {
            for named in &names.paths {
                let Some(abs) = self.absolute(module, &named.segments, 0) else { continue };
                let target = self.module_of(&abs, 0);
                if self.krate.is_ancestor_or_self(target, module) || self.krate.is_ancestor_or_self(module, target) {
                    continue;
                }
                // The children of the closest common ancestor that hold each end.
                let (mut from, mut to) = (module, target);
                while !self.krate.is_ancestor_or_self(self.krate.modules[from].parent.unwrap(), to) {
                    from = self.krate.modules[from].parent.unwrap();
                }
                let parent = self.krate.modules[from].parent.unwrap();
                while self.krate.modules[to].parent != Some(parent) {
                    to = self.krate.modules[to].parent.unwrap();
                }
                let place = format!(
                    "{}:{} names {}",
                    shown(&self.krate.modules[module].file),
                    named.line,
                    named.segments.join("::")
                );
                edges.entry((parent, from, to)).or_default().push(place);
            }
        }
        edges
    }
}

/// A cycle through `start`, if any (depth-first search over `edges`).
fn cycle_from<N: Ord + Clone>(start: &N, edges: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn walk<N: Ord + Clone>(
        node: &N,
        start: &N,
        edges: &BTreeMap<N, BTreeSet<N>>,
        path: &mut Vec<N>,
        seen: &mut BTreeSet<N>,
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
    let mut path = vec![start.clone()];
    walk(start, start, edges, &mut path, &mut BTreeSet::new()).then(|| {
        path.push(start.clone());
        path
    })
}

/// The cycles between sibling modules of `krate`: (parent module, message), one per cycle.
fn cycles_in(krate: &Crate) -> Vec<(String, String)> {
    let graph = Graph::new(krate);
    let places = graph.sibling_edges();
    let mut by_parent: BTreeMap<usize, BTreeMap<usize, BTreeSet<usize>>> = BTreeMap::new();
    for &(parent, from, to) in places.keys() {
        by_parent.entry(parent).or_default().entry(from).or_default().insert(to);
    }
    let mut out = Vec::new();
    let mut reported = BTreeSet::new();
    for (parent, edges) in &by_parent {
        for start in edges.keys() {
            let Some(cycle) = cycle_from(start, edges) else { continue };
            let members: BTreeSet<usize> = cycle.iter().copied().collect();
            if !reported.insert((*parent, members)) {
                continue;
            }
            let shown_cycle: Vec<String> = cycle.iter().map(|&m| krate.display(m)).collect();
            let mut text = format!("{}: {}", krate.name, shown_cycle.join(" -> "));
            for pair in cycle.windows(2) {
                let at = &places[&(*parent, pair[0], pair[1])];
                text += &format!("\n    {} -> {}: {}", krate.display(pair[0]), krate.display(pair[1]), at[0]);
                if at.len() > 1 {
                    text += &format!(" (and {} more)", at.len() - 1);
                }
            }
            out.push((krate.display(*parent), text));
        }
    }
    out
}

#[test]
fn no_crate_has_a_module_cycle() {
    let crates = source_tree::crates();
    let tcpls = crates.iter().find(|c| c.name == "tcpls:src/lib.rs").expect("the tcpls library is read");
    assert!(tcpls.modules.len() >= 20, "tcpls' modules were found: {}", tcpls.modules.len());
    let graph = Graph::new(tcpls);
    let edges = graph.sibling_edges();
    let module = |name: &str| tcpls.child(0, name).unwrap_or_else(|| panic!("tcpls has a module {name}"));
    assert!(edges.contains_key(&(0, module("shared"), module("registry"))), "tcpls' edges are read");

    let mut cycles = Vec::new();
    let mut allowed = BTreeSet::new();
    for krate in &crates {
        for (parent, text) in cycles_in(krate) {
            if BEING_UNTANGLED.contains(&(krate.name.as_str(), parent.as_str())) {
                allowed.insert((krate.name.clone(), parent));
            } else {
                cycles.push(text);
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "module cycles (dependencies between sibling modules must point one way, see \
         docs/ARCHITECTURE.md; move what both sides need into one of them or a third module):\n{}",
        cycles.join("\n")
    );
    let stale: Vec<String> = BEING_UNTANGLED
        .iter()
        .filter(|(krate, parent)| !allowed.contains(&(krate.to_string(), parent.to_string())))
        .map(|(krate, parent)| format!("  {krate} {parent}"))
        .collect();
    assert!(stale.is_empty(), "BEING_UNTANGLED lists modules without a cycle now: remove them:\n{}", stale.join("\n"));
}

#[test]
fn a_cycle_is_found() {
    let edges: BTreeMap<&str, BTreeSet<&str>> =
        [("a", BTreeSet::from(["b"])), ("b", BTreeSet::from(["c"])), ("c", BTreeSet::from(["a"]))]
            .into_iter()
            .collect();
    assert_eq!(cycle_from(&"a", &edges), Some(vec!["a", "b", "c", "a"]));
    let acyclic: BTreeMap<&str, BTreeSet<&str>> =
        [("a", BTreeSet::from(["b"])), ("b", BTreeSet::from(["c"]))].into_iter().collect();
    assert_eq!(cycle_from(&"a", &acyclic), None);
}

#[test]
fn paths_are_read_from_uses_and_macros() {
    let file: syn::File = syn::parse_str(
        "use crate::{x, y::Z as W, v::*}; use super::q::{self};\n\
         // crate::in_a_comment\n\
         fn f() { let _ = format!(\"{}\", crate::w::f()); W::g(); }",
    )
    .unwrap();
    let mut names = Names::default();
    file.items.iter().for_each(|item| names.visit_item(item));
    let paths: Vec<String> = names.paths.iter().map(|p| p.segments.join("::")).collect();
    for expected in ["crate::x", "crate::y::Z", "crate::v", "super::q", "crate::w::f", "W::g"] {
        assert!(paths.contains(&expected.to_string()), "{expected} in {paths:?}");
    }
    assert!(!paths.iter().any(|p| p.contains("in_a_comment")), "comments are not code: {paths:?}");
    assert_eq!(names.uses["W"], ["crate", "y", "Z"]);
    assert_eq!(names.uses["q"], ["super", "q"]);
}

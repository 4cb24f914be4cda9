//! The product code of every crate in the repository, parsed with `syn`: each package's crate
//! roots (library, binaries, examples, fuzz targets) and the module tree below each root, as
//! `rustc` finds the files (`mod x;` is `x.rs` or `x/mod.rs`, `#[path]` is honoured, inline
//! `mod x { ... }` blocks are modules too). Shared by the module-graph and function-length
//! checks; tests and benches are not product code and are not read.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

/// The repository's root (the workspace manifest's directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tcpls/ has a parent").to_path_buf()
}

/// One module: its path from the crate root, the file that holds it, and its own items (those
/// of its child modules excluded: each child is a module of its own).
pub struct Module {
    pub path: Vec<String>,
    pub file: PathBuf,
    pub items: Vec<syn::Item>,
    pub children: Vec<usize>,
    pub parent: Option<usize>,
}

/// One crate target (a library, a binary, an example): its modules, the root first.
pub struct Crate {
    /// `package` or `package:target-file`, for messages.
    pub name: String,
    pub modules: Vec<Module>,
}

impl Crate {
    pub fn child(&self, module: usize, name: &str) -> Option<usize> {
        self.modules[module].children.iter().copied().find(|&c| self.modules[c].path.last().is_some_and(|n| n == name))
    }

    /// `a` is `b` or one of its ancestors.
    pub fn is_ancestor_or_self(&self, a: usize, b: usize) -> bool {
        let mut at = Some(b);
        while let Some(m) = at {
            if m == a {
                return true;
            }
            at = self.modules[m].parent;
        }
        false
    }

    pub fn display(&self, module: usize) -> String {
        let path = &self.modules[module].path;
        if path.is_empty() {
            "crate".to_string()
        } else {
            path.join("::")
        }
    }
}

/// Every package directory of the repository: the workspace members, the excluded ones
/// (tcpls-py) and the separate fuzz workspace. Checked against the workspace's member list.
pub fn packages() -> Vec<PathBuf> {
    let root = repo_root();
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let manifest = dir.join("Cargo.toml");
        if manifest.is_file() && manifest_of(&dir).get("package").is_some() {
            out.push(dir);
        }
    }
    out.sort();
    let workspace = manifest_of(&root);
    let members = workspace["workspace"]["members"].as_array().expect("workspace members");
    for member in members {
        let member = root.join(member.as_str().expect("member is a path"));
        assert!(out.contains(&member), "workspace member {} has no package found", member.display());
    }
    out
}

fn manifest_of(dir: &Path) -> toml::Table {
    let text = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    text.parse::<toml::Table>().unwrap_or_else(|e| panic!("{}/Cargo.toml: {e}", dir.display()))
}

/// The root files of a package's product targets: the library, the binaries (src/main.rs,
/// src/bin/, `[[bin]] path`), the examples and the fuzz targets (`[[bin]]` in fuzz/).
pub fn crate_roots(package: &Path) -> Vec<PathBuf> {
    let manifest = manifest_of(package);
    let mut roots = Vec::new();
    let mut push = |p: PathBuf| {
        if p.is_file() && !roots.contains(&p) {
            roots.push(p);
        }
    };
    match manifest.get("lib").and_then(|l| l.get("path")).and_then(|p| p.as_str()) {
        Some(p) => push(package.join(p)),
        None => push(package.join("src/lib.rs")),
    }
    push(package.join("src/main.rs"));
    for kind in ["bin", "example"] {
        for target in manifest.get(kind).and_then(|t| t.as_array()).into_iter().flatten() {
            if let Some(p) = target.get("path").and_then(|p| p.as_str()) {
                push(package.join(p));
            }
        }
    }
    for dir in ["src/bin", "examples"] {
        let Ok(entries) = std::fs::read_dir(package.join(dir)) else { continue };
        let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            if f.extension().is_some_and(|e| e == "rs") {
                push(f);
            } else if f.is_dir() {
                push(f.join("main.rs"));
            }
        }
    }
    roots
}

/// Every crate target of every package, parsed.
pub fn crates() -> Vec<Crate> {
    let root = repo_root();
    let mut out = Vec::new();
    for package in packages() {
        let name = package.file_name().unwrap().to_string_lossy().into_owned();
        for file in crate_roots(&package) {
            let shown = format!("{name}:{}", file.strip_prefix(&package).unwrap().display());
            let mut krate = Crate { name: shown, modules: Vec::new() };
            let parsed = parse(&file);
            add_module(&mut krate, None, Vec::new(), file.clone(), dir_of_root(&file), parsed.items);
            out.push(krate);
        }
    }
    assert!(out.len() >= 20, "the crates of {} were found: {}", root.display(), out.len());
    out
}

pub fn parse(file: &Path) -> syn::File {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    syn::parse_file(&text)
        .unwrap_or_else(|e| panic!("{}:{}:{}: {e}", file.display(), e.span().start().line, e.span().start().column + 1))
}

/// The directory in which a crate root's `mod x;` files are found.
fn dir_of_root(file: &Path) -> PathBuf {
    file.parent().unwrap().to_path_buf()
}

/// Adds the module made of `items` (found in `file`; its own `mod x;` children are looked up
/// in `dir`), then its children, depth first. Returns its index.
fn add_module(
    krate: &mut Crate,
    parent: Option<usize>,
    path: Vec<String>,
    file: PathBuf,
    dir: PathBuf,
    items: Vec<syn::Item>,
) -> usize {
    let index = krate.modules.len();
    krate.modules.push(Module {
        path: path.clone(),
        file: file.clone(),
        items: Vec::new(),
        children: Vec::new(),
        parent,
    });
    let mut own = Vec::new();
    for item in items {
        let syn::Item::Mod(m) = item else {
            own.push(item);
            continue;
        };
        let name = m.ident.to_string();
        let mut child_path = path.clone();
        child_path.push(name.clone());
        let explicit = path_attribute(&m.attrs);
        let child = match m.content {
            Some((_, inline)) => {
                let child_dir = match &explicit {
                    Some(p) => dir.join(p),
                    None => dir.join(&name),
                };
                add_module(krate, Some(index), child_path, file.clone(), child_dir, inline)
            }
            None => {
                let child_file = match &explicit {
                    Some(p) => dir.join(p),
                    None if dir.join(format!("{name}.rs")).is_file() => dir.join(format!("{name}.rs")),
                    None => dir.join(&name).join("mod.rs"),
                };
                let stem = child_file.file_stem().unwrap().to_string_lossy().into_owned();
                // A `mod.rs` file (or a `#[path]` one) finds its children beside it; `x.rs`
                // finds them in `x/`.
                let child_dir = if stem == "mod" || explicit.is_some() {
                    child_file.parent().unwrap().to_path_buf()
                } else {
                    child_file.with_extension("")
                };
                let parsed = parse(&child_file);
                add_module(krate, Some(index), child_path, child_file, child_dir, parsed.items)
            }
        };
        krate.modules[index].children.push(child);
    }
    krate.modules[index].items = own;
    index
}

fn path_attribute(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find(|a| a.path().is_ident("path")).and_then(|a| match &a.meta {
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// `file` relative to the repository root, for messages.
pub fn shown(file: &Path) -> String {
    file.strip_prefix(repo_root()).unwrap_or(file).display().to_string()
}

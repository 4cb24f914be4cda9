//! No function in product code is longer than 120 lines (CONTRIBUTING.md, "Readable code"): a
//! longer one is split into named steps. Every crate target of the repository is read with
//! `syn` (libraries, binaries, examples, fuzz targets; tests and benches are not product code):
//! free functions, methods in `impl` blocks and trait methods with a body, nested ones
//! included, from the `fn` line to the closing brace. Closures do not count on their own (they
//! count in the function that holds them).
#![allow(clippy::unwrap_used)]

mod source_tree;

use std::collections::BTreeSet;

use source_tree::shown;
use syn::visit::Visit;

const MAX_LINES: usize = 120;

/// Functions still being split, each with the file that holds it (the session core is being
/// reshaped into owned parts; its long functions go as it is). An entry that is no
/// longer too long fails the test, so the list only shrinks. Add nothing here: split instead.
const BEING_SPLIT: &[(&str, &str)] = &[];

/// A function's name (`Type::method` for a method) and its first and last lines.
struct Function {
    name: String,
    first: usize,
    last: usize,
}

impl Function {
    fn lines(&self) -> usize {
        self.last - self.first + 1
    }
}

#[derive(Default)]
struct Functions {
    /// The type of the `impl` or trait being read, if any.
    owner: Vec<String>,
    found: Vec<Function>,
}

impl Functions {
    fn push(&mut self, ident: &syn::Ident, signature: &syn::Signature, block: &syn::Block) {
        let name = match self.owner.last() {
            Some(owner) => format!("{owner}::{ident}"),
            None => ident.to_string(),
        };
        let first = signature.fn_token.span.start().line;
        let last = block.brace_token.span.close().end().line;
        self.found.push(Function { name, first, last });
    }
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.push(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.push(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.push(&f.sig.ident, &f.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        let owner = match &*item.self_ty {
            syn::Type::Path(p) => p.path.segments.last().map_or("_".to_string(), |s| s.ident.to_string()),
            _ => "_".to_string(),
        };
        self.owner.push(owner);
        syn::visit::visit_item_impl(self, item);
        self.owner.pop();
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        self.owner.push(item.ident.to_string());
        syn::visit::visit_item_trait(self, item);
        self.owner.pop();
    }
}

fn functions_of(items: &[syn::Item]) -> Vec<Function> {
    let mut visitor = Functions::default();
    items.iter().for_each(|item| visitor.visit_item(item));
    visitor.found
}

#[test]
fn no_function_is_longer_than_120_lines() {
    let mut seen_files = BTreeSet::new();
    let mut too_long = Vec::new();
    let mut allowed = BTreeSet::new();
    let mut read = 0;
    for krate in source_tree::crates() {
        for module in &krate.modules {
            // A file holds its inline modules too: read each module's own items once.
            if !seen_files.insert((module.file.clone(), module.path.clone())) {
                continue;
            }
            let file = shown(&module.file);
            for f in functions_of(&module.items) {
                read += 1;
                if f.lines() <= MAX_LINES {
                    continue;
                }
                if BEING_SPLIT.contains(&(file.as_str(), f.name.as_str())) {
                    allowed.insert((file.clone(), f.name.clone()));
                } else {
                    too_long.push((file.clone(), f));
                }
            }
        }
    }
    assert!(read > 2000, "the functions were read: {read}");
    too_long.sort_by(|a, b| (&a.0, a.1.first).cmp(&(&b.0, b.1.first)));
    too_long.dedup_by(|a, b| a.0 == b.0 && a.1.first == b.1.first);
    let list: Vec<String> =
        too_long.iter().map(|(file, f)| format!("  {file}:{} {} ({} lines)", f.first, f.name, f.lines())).collect();
    assert!(
        list.is_empty(),
        "functions longer than {MAX_LINES} lines (split them into named steps):\n{}",
        list.join("\n")
    );
    let stale: Vec<String> = BEING_SPLIT
        .iter()
        .filter(|(file, name)| !allowed.contains(&(file.to_string(), name.to_string())))
        .map(|(file, name)| format!("  {file} {name}"))
        .collect();
    assert!(
        stale.is_empty(),
        "BEING_SPLIT lists functions that are short enough now: remove them:\n{}",
        stale.join("\n")
    );
}

#[test]
fn lengths_are_counted_from_fn_to_the_closing_brace() {
    let file: syn::File = syn::parse_str(
        "/// doc\nfn a() {\n    1;\n}\nimpl T {\n    fn b(\n        x: u8,\n    ) {\n        fn c() {}\n    }\n}\n\
         trait U { fn d(); fn e() {} }",
    )
    .unwrap();
    let found: Vec<(String, usize)> = functions_of(&file.items).iter().map(|f| (f.name.clone(), f.lines())).collect();
    assert_eq!(
        found,
        [("a".to_string(), 3), ("T::b".to_string(), 5), ("T::c".to_string(), 1), ("U::e".to_string(), 1)]
    );
}

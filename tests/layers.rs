//! The house's floors, held by the code. `src/lib.rs` lists the modules floor by floor, from the
//! bottom up; a module may use only the modules listed before it (on a floor below, or to its
//! left on its own floor), and no file may import another in a circle. This test reads every
//! `use` and every path of `src/` (in code and in macro calls), resolves it to the module and
//! file it names (through `mod` declarations and re-exports), and fails naming each import that
//! reaches up or closes a circle. Tests at the end show it failing on a tree that breaks each
//! rule.

use proc_macro2::{TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// A module, as a path of names from the crate root (`["forward", "hooks"]`).
type ModPath = Vec<String>;

/// One floor of `lib.rs`'s list: its number, its name, and its modules in order.
struct Floor {
    number: usize,
    name: String,
    modules: Vec<String>,
}

/// Reads the "Floors" section of `lib.rs`'s doc comment: its first run of lines
/// `//! N. Name: [`a`], [`b`]`.
fn floors(lib: &str) -> Result<Vec<Floor>, String> {
    let mut floors = Vec::new();
    let mut inside = false;
    for line in lib.lines() {
        let Some(text) = line.strip_prefix("//!") else { continue };
        let text = text.trim();
        if text.starts_with('#') {
            inside = text.to_lowercase().contains("floors");
            continue;
        }
        if !inside {
            continue;
        }
        // The list is the section's first run of numbered lines.
        let numbered = text.split_once(". ").and_then(|(n, rest)| Some((n.parse::<usize>().ok()?, rest)));
        let Some((number, rest)) = numbered else {
            if floors.is_empty() {
                continue;
            }
            break;
        };
        let (name, list) =
            rest.split_once(':').ok_or(format!("src/lib.rs: floor {number} has no ':' before its modules"))?;
        let modules = list.split("[`").skip(1).filter_map(|m| m.split_once("`]").map(|(m, _)| m.to_string())).collect();
        floors.push(Floor { number, name: name.trim().to_string(), modules });
    }
    if floors.is_empty() {
        return Err("src/lib.rs: no \"# Floors\" section listing `N. Name: [`module`], …` lines".into());
    }
    Ok(floors)
}

/// One path found in a file, in the module it was written in.
struct Reference {
    module: ModPath,
    segments: Vec<String>,
    line: usize,
}

/// What a module declares that paths resolve through.
#[derive(Default)]
struct Module {
    file: PathBuf,
    /// `mod x;` and `mod x { … }`.
    children: BTreeSet<String>,
    /// `use a::b::C;` (and `as D`): the name it brings in, and the path it was written as.
    imports: HashMap<String, Vec<String>>,
}

#[derive(Default)]
struct Crate {
    modules: BTreeMap<ModPath, Module>,
    references: Vec<(PathBuf, Reference)>,
}

/// Walks one file: the modules it declares, what they import, and every path it names.
struct FileWalk<'a> {
    krate: &'a mut Crate,
    file: PathBuf,
    /// Where `mod x;` of the module at the top of `stack` finds its file.
    dirs: Vec<PathBuf>,
    stack: Vec<ModPath>,
    pending: Vec<(ModPath, PathBuf)>,
}

impl FileWalk<'_> {
    fn here(&self) -> ModPath {
        self.stack.last().expect("inside a module").clone()
    }

    fn record(&mut self, segments: Vec<String>, line: usize) {
        if segments.len() > 1 {
            let module = self.here();
            self.krate.references.push((self.file.clone(), Reference { module, segments, line }));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, line: usize) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, line);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.import(prefix, n.ident.to_string(), n.ident.to_string(), line),
            syn::UseTree::Rename(r) => self.import(prefix, r.ident.to_string(), r.rename.to_string(), line),
            syn::UseTree::Glob(_) => self.record(prefix.clone(), line),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix, t, line)),
        }
    }

    fn import(&mut self, prefix: &[String], name: String, alias: String, line: usize) {
        let mut path = prefix.to_vec();
        if name != "self" {
            path.push(name);
        }
        let alias = if alias == "self" { path.last().cloned().unwrap_or_default() } else { alias };
        let here = self.here();
        self.krate.modules.entry(here).or_default().imports.insert(alias, path.clone());
        self.record(path, line);
    }

    /// Paths inside macro calls (`tracing::info!(…)`, `matches!(x, crate::a::B)`): `crate`,
    /// `super` or `self` followed by `::` and names.
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.macro_tokens(g.stream()),
                TokenTree::Ident(first) if ["crate", "super", "self"].contains(&first.to_string().as_str()) => {
                    let mut segments = vec![first.to_string()];
                    let mut j = i + 1;
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(next))) =
                        (trees.get(j), trees.get(j + 1), trees.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        j += 3;
                    }
                    self.record(segments, first.span().start().line);
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for FileWalk<'_> {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let name = item.ident.to_string();
        let mut path = self.here();
        path.push(name.clone());
        let dir = self.dirs.last().expect("a directory").join(&name);
        self.krate.modules.entry(self.here()).or_default().children.insert(name.clone());
        match &item.content {
            None => {
                let single = dir.with_extension("rs");
                let file = if single.exists() { single } else { dir.join("mod.rs") };
                self.pending.push((path, file));
            }
            Some((_, items)) => {
                self.krate.modules.entry(path.clone()).or_default().file = self.file.clone();
                self.stack.push(path);
                self.dirs.push(dir);
                items.iter().for_each(|i| self.visit_item(i));
                self.dirs.pop();
                self.stack.pop();
            }
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let line = item.use_token.span.start().line;
        self.use_tree(&mut Vec::new(), &item.tree, line);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = path.segments.first().map_or(0, |s| s.ident.span().start().line);
        self.record(segments, line);
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.macro_tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// Every module of the crate whose root is `src/lib.rs`, and every path its files name.
fn read_crate(src: &Path) -> Result<Crate, String> {
    let mut krate = Crate::default();
    let mut pending = vec![(Vec::new(), src.join("lib.rs"))];
    while let Some((module, file)) = pending.pop() {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let parsed = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        // `mod x;` in src/a.rs or src/a/mod.rs finds src/a/x.rs; in lib.rs, src/x.rs.
        let dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs" | "mod.rs") => file.parent().expect("a directory").to_path_buf(),
            _ => file.with_extension(""),
        };
        krate.modules.entry(module.clone()).or_default().file = file.clone();
        let mut walk = FileWalk {
            krate: &mut krate,
            file: file.clone(),
            dirs: vec![dir],
            stack: vec![module],
            pending: Vec::new(),
        };
        walk.visit_file(&parsed);
        pending.extend(walk.pending);
    }
    Ok(krate)
}

impl Crate {
    /// The module a path names, written in `from`; `None` for paths outside the crate (`std::…`,
    /// a local item, a variant).
    fn resolve(&self, from: &[String], segments: &[String], depth: usize) -> Option<ModPath> {
        let (mut at, rest): (ModPath, &[String]) = match segments.first()?.as_str() {
            "crate" => (Vec::new(), &segments[1..]),
            "self" => (from.to_vec(), &segments[1..]),
            "super" => {
                let supers = segments.iter().take_while(|s| *s == "super").count();
                (from[..from.len().checked_sub(supers)?].to_vec(), &segments[supers..])
            }
            first => {
                let module = self.modules.get(from)?;
                if module.children.contains(first) {
                    (from.to_vec(), segments)
                } else {
                    let imported = module.imports.get(first)?;
                    if imported.first() == Some(&segments[0]) || depth > 8 {
                        return None;
                    }
                    let whole: Vec<String> = imported.iter().chain(&segments[1..]).cloned().collect();
                    return self.resolve(from, &whole, depth + 1);
                }
            }
        };
        for segment in rest {
            let module = self.modules.get(&at)?;
            if module.children.contains(segment) {
                at.push(segment.clone());
            } else if let Some(imported) = module.imports.get(segment).filter(|_| depth <= 8) {
                // A re-export (`pub use session::Client;`): the item lives where it came from.
                return self.resolve(&at, imported, depth + 1).or(Some(at));
            } else {
                break;
            }
        }
        Some(at)
    }
}

/// Every import of `src/` that breaks a floor or closes a circle, each named.
fn violations(src: &Path) -> Result<Vec<String>, String> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).map_err(|e| format!("src/lib.rs: {e}"))?;
    let floors = floors(&lib)?;
    let krate = read_crate(src)?;
    let rank: HashMap<&str, (usize, &Floor)> = floors
        .iter()
        .flat_map(|f| f.modules.iter().map(move |m| (m.as_str(), f)))
        .enumerate()
        .map(|(i, (m, f))| (m, (i, f)))
        .collect();
    let shown = |file: &Path| file.strip_prefix(src.parent().unwrap_or(src)).unwrap_or(file).display().to_string();
    let mut found = Vec::new();
    let top_level = &krate.modules[&Vec::new()].children;
    for module in top_level {
        if !rank.contains_key(module.as_str()) {
            found.push(format!("src/lib.rs: module `{module}` is on no floor: add it to the \"Floors\" list"));
        }
    }
    for listed in rank.keys() {
        if !top_level.contains(*listed) {
            found.push(format!("src/lib.rs: floor lists `{listed}`, which is no module of the crate"));
        }
    }
    let mut edges: BTreeMap<PathBuf, BTreeMap<PathBuf, (usize, String)>> = BTreeMap::new();
    for (file, reference) in &krate.references {
        let Some(target) = krate.resolve(&reference.module, &reference.segments, 0) else { continue };
        let (Some(from), Some(to)) = (reference.module.first(), target.first()) else { continue };
        let written = reference.segments.join("::");
        if from != to {
            if let (Some((a, floor_a)), Some((b, floor_b))) = (rank.get(from.as_str()), rank.get(to.as_str())) {
                if b > a {
                    found.push(format!(
                        "{}:{}: `{written}`: `{from}` (floor {} \"{}\") may not use `{to}` (floor {} \"{}\"), \
                         listed after it in src/lib.rs's floors",
                        shown(file),
                        reference.line,
                        floor_a.number,
                        floor_a.name,
                        floor_b.number,
                        floor_b.name,
                    ));
                }
            }
        }
        let target_file = &krate.modules[&target].file;
        if target_file != file {
            edges.entry(file.clone()).or_default().entry(target_file.clone()).or_insert((reference.line, written));
        }
    }
    found.extend(circles(&edges).into_iter().map(|circle| {
        let steps: Vec<String> = circle
            .windows(2)
            .map(|w| {
                let (line, written) = &edges[&w[0]][&w[1]];
                format!("{}:{line} `{written}` → {}", shown(&w[0]), shown(&w[1]))
            })
            .collect();
        format!("import circle: {}", steps.join("; "))
    }));
    Ok(found)
}

/// One circle (first file repeated at the end) per strongly connected group of files.
fn circles(edges: &BTreeMap<PathBuf, BTreeMap<PathBuf, (usize, String)>>) -> Vec<Vec<PathBuf>> {
    let mut reported: BTreeSet<PathBuf> = BTreeSet::new();
    let mut found = Vec::new();
    for start in edges.keys() {
        if reported.contains(start) {
            continue;
        }
        // Depth-first from `start`, looking for a way back to it.
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(&at).into_iter().flat_map(|e| e.keys()) {
                if next == start {
                    let mut circle = path.clone();
                    circle.push(start.clone());
                    reported.extend(circle.iter().cloned());
                    found.push(circle);
                    stack.clear();
                    break;
                }
                if seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    found
}

#[test]
fn every_module_uses_only_what_stands_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src).unwrap_or_else(|e| panic!("reading src/: {e}"));
    assert!(found.is_empty(), "the floors of src/lib.rs are broken:\n{}", found.join("\n"));
}

#[test]
fn every_hand_written_file_of_src_is_at_most_500_lines() {
    let mut long = Vec::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let lines = std::fs::read_to_string(&path).expect("a source file").lines().count();
                if lines > 500 {
                    let shown = path.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(&path).display().to_string();
                    long.push(format!("{shown}: {lines} lines"));
                }
            }
        }
    }
    assert!(long.is_empty(), "split these files (at most 500 lines each):\n{}", long.join("\n"));
}

/// A throwaway crate tree with `files` (path under src/, text), removed when dropped.
struct Tree(PathBuf);

impl Tree {
    fn new(name: &str, files: &[(&str, &str)]) -> Tree {
        let root = std::env::temp_dir().join(format!("cri-bridge-layers-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (path, text) in files {
            let path = root.join("src").join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("making the tree");
            std::fs::write(path, text).expect("writing the tree");
        }
        Tree(root)
    }

    fn violations(&self) -> Vec<String> {
        violations(&self.0.join("src")).expect("a readable tree")
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const LIB: &str = "//! # Floors, from the bottom up\n//!\n//! 1. Low: [`low`]\n//! 2. High: [`high`], [`top`]\n\
                   pub mod high;\npub mod low;\npub mod top;\n";

#[test]
fn the_check_names_an_import_that_reaches_up() {
    let tree = Tree::new(
        "up",
        &[
            ("lib.rs", LIB),
            ("low.rs", "pub struct Low;\npub fn f() {\n    let _ = crate::top::Top;\n}\n"),
            ("high.rs", "use crate::low::Low;\npub fn g(_: Low) {}\n"),
            ("top.rs", "pub struct Top;\n"),
        ],
    );
    let found = tree.violations();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("src/low.rs:3: `crate::top::Top`: `low` (floor 1 \"Low\") may not use `top` (floor 2"),
        "{}",
        found[0]
    );
}

#[test]
fn the_check_names_a_sideways_import_to_the_right_and_one_through_a_macro() {
    let tree = Tree::new(
        "side",
        &[
            ("lib.rs", LIB),
            ("low.rs", "pub struct Low;\n"),
            ("high.rs", "pub fn g() -> bool {\n    matches!(1, crate::top::ONE)\n}\n"),
            ("top.rs", "pub const ONE: u8 = 1;\n"),
        ],
    );
    let found = tree.violations();
    assert!(found.iter().any(|f| f.contains("src/high.rs:2: `crate::top::ONE`: `high`")), "{found:?}");
}

#[test]
fn the_check_names_a_circle_of_files_through_a_re_export() {
    let tree = Tree::new(
        "circle",
        &[
            ("lib.rs", LIB),
            ("low.rs", "pub struct Low;\n"),
            ("high/mod.rs", "mod a;\nmod b;\npub use b::B;\n"),
            ("high/a.rs", "pub struct A;\npub fn f(_: super::B) {}\n"),
            ("high/b.rs", "pub struct B;\npub fn g(_: super::a::A) {}\n"),
            ("top.rs", "use crate::high::B;\npub fn h(_: B) {}\n"),
        ],
    );
    let found = tree.violations();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("import circle: "), "{}", found[0]);
    assert!(found[0].contains("src/high/a.rs:2 `super::B` → src/high/b.rs"), "{}", found[0]);
    assert!(found[0].contains("src/high/b.rs:2 `super::a::A` → src/high/a.rs"), "{}", found[0]);
}

#[test]
fn the_check_names_a_module_on_no_floor() {
    let tree = Tree::new(
        "unlisted",
        &[
            ("lib.rs", &format!("{LIB}pub mod extra;\n")),
            ("low.rs", ""),
            ("high.rs", ""),
            ("top.rs", ""),
            ("extra.rs", ""),
        ],
    );
    let found = tree.violations();
    assert_eq!(found, vec!["src/lib.rs: module `extra` is on no floor: add it to the \"Floors\" list".to_string()]);
}

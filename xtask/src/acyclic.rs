//! `cargo xtask acyclic`: no module import circle in any library crate of the workspace.
//!
//! For each crate, the module tree is read from its files with `syn` (`mod x;` declarations
//! found as `x.rs`, `x/mod.rs` or through `#[path]`, inline `mod x { }` blocks; `#[cfg(test)]`
//! items and modules named `tests` left out), and every path a module's code names is resolved
//! to the module it points into: `crate::a::b::X` (in `use` trees, grouped ones included, and in
//! inline paths in types, expressions, patterns and macro arguments), `super::…`, `self::…`, and
//! a bare `x::…` whose first segment is a child module (2018-edition paths are relative to the
//! current module). A reference names the module of its longest path prefix that is a module;
//! `crate::Error` names the crate root.
//!
//! The rule: under every module, its child modules form a DAG under "some code in child A's
//! subtree names an item in child B's subtree". A reference into one's own ancestors or
//! descendants is containment, not an edge between siblings: a reference is an edge only
//! between the two children of the lowest common ancestor of where it is written and what it
//! names. So `crate::Error` (the root, re-exported or not) is never an edge, nor is
//! `use super::*`, nor the root's `pub use a::X`.
//!
//! Each circle is printed as a path with the first reference behind each of its edges, e.g.
//! `informer-core: informer -> snapshot -> informer (src/informer.rs:12 uses
//! crate::snapshot::X; src/snapshot.rs:40 uses crate::informer::Y)`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use proc_macro2::{TokenStream, TokenTree};
use syn::spanned::Spanned;
use syn::visit::Visit;

use crate::{Result, cargo, outcome, record, secs};

/// Crates whose circles fail `cargo xtask test-all`: every library crate of the workspace
/// (informer-core, informer-http and informer-runtime lost their last circles in issue 38's
/// restructure). A crate not listed only has its circles printed as warnings.
pub const ACYCLIC_CRATES: &[&str] = &[
    "informer-core",
    "informer-http",
    "informer-runtime",
    "informer-tokio",
    "informer-smol",
    "informer-testkit",
    "testcluster",
    "informer-bench",
];

/// A module path below the crate root (`[]` is the root).
type ModPath = Vec<String>;

/// One reference from code in a module to a path, as written.
#[derive(Clone, Debug)]
struct RawRef {
    /// The module the code is in.
    from: ModPath,
    /// How the path starts.
    anchor: Anchor,
    /// Its segments after the anchor.
    segments: Vec<String>,
    /// The file (relative to the crate directory) and line.
    file: PathBuf,
    line: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Anchor {
    /// `crate::` (or `$crate::` in a macro).
    Crate,
    /// `super::` this many times.
    Super(usize),
    /// `self::`.
    SelfMod,
    /// A bare first segment: a child module of the current one, or nothing of ours.
    Bare,
}

impl RawRef {
    /// The path as written (`crate::a::X`, `super::super::b`, `x::Y`).
    fn text(&self) -> String {
        let mut parts: Vec<String> = match self.anchor {
            Anchor::Crate => vec!["crate".into()],
            Anchor::Super(n) => vec!["super".into(); n],
            Anchor::SelfMod => vec!["self".into()],
            Anchor::Bare => Vec::new(),
        };
        parts.extend(self.segments.iter().cloned());
        parts.join("::")
    }
}

/// A crate's module tree and the references its code makes.
#[derive(Debug, Default)]
pub struct Tree {
    /// Every module (the root included).
    modules: BTreeSet<ModPath>,
    refs: Vec<RawRef>,
}

/// Why sibling `from` depends on sibling `to`: the first reference found (by file and line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    /// File relative to the crate directory.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// The path as written.
    pub path: String,
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{} uses {}",
            self.file.display(),
            self.line,
            self.path
        )
    }
}

/// A circle among the children of `parent`: `path[0] -> path[1] -> … -> path[0]`, with the
/// evidence of each edge in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    /// The module whose children form it (`[]`: the crate root).
    pub parent: ModPath,
    /// The children, in order; the circle returns to the first.
    pub path: Vec<String>,
    /// `evidence[i]` is behind `path[i] -> path[i + 1]` (the last one behind the return).
    pub evidence: Vec<Evidence>,
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.parent.is_empty() {
            write!(f, "in {}: ", self.parent.join("::"))?;
        }
        let mut names = self.path.clone();
        names.push(self.path[0].clone());
        write!(f, "{} (", names.join(" -> "))?;
        for (i, e) in self.evidence.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "{e}")?;
        }
        write!(f, ")")
    }
}

/// Reads the module tree of the crate whose root file is `root_file`; file names in the
/// evidence are relative to `crate_dir`.
pub fn read_tree(crate_dir: &Path, root_file: &Path) -> Result<Tree> {
    let mut tree = Tree::default();
    tree.modules.insert(Vec::new());
    let dir = root_file.parent().unwrap_or(Path::new("")).to_path_buf();
    read_module_file(crate_dir, root_file, Vec::new(), dir, &mut tree)?;
    Ok(tree)
}

/// Parses the file of module `path` and walks its items; `dir` is where its `mod x;` children
/// are looked for.
fn read_module_file(
    crate_dir: &Path,
    file: &Path,
    path: ModPath,
    dir: PathBuf,
    tree: &mut Tree,
) -> Result {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("acyclic: {}: {e}", file.display()))?;
    let parsed = syn::parse_file(&text).map_err(|e| format!("acyclic: {}: {e}", file.display()))?;
    let rel = file.strip_prefix(crate_dir).unwrap_or(file).to_path_buf();
    let walk = Walk {
        crate_dir,
        file: &rel,
        abs_file: file,
    };
    walk.items(&parsed.items, path, dir, tree)
}

/// Where the walk is: the file being read.
struct Walk<'a> {
    crate_dir: &'a Path,
    /// Relative to the crate directory (for the evidence).
    file: &'a Path,
    abs_file: &'a Path,
}

impl Walk<'_> {
    fn items(&self, items: &[syn::Item], path: ModPath, dir: PathBuf, tree: &mut Tree) -> Result {
        for item in items {
            if is_cfg_test(item_attrs(item)) {
                continue;
            }
            if let syn::Item::Mod(m) = item {
                let name = m.ident.to_string();
                if name == "tests" {
                    continue;
                }
                let mut child = path.clone();
                child.push(name.clone());
                tree.modules.insert(child.clone());
                let path_attr = path_attribute(&m.attrs);
                match &m.content {
                    Some((_, inner)) => {
                        // An inline module: its own `mod y;` children live in `dir/x/`.
                        let child_dir = match &path_attr {
                            Some(p) => dir.join(p),
                            None => dir.join(&name),
                        };
                        self.items(inner, child, child_dir, tree)?;
                    }
                    None => {
                        let (file, child_dir) = match &path_attr {
                            // `#[path]` on a declaration: relative to this file's directory;
                            // the module is then read as a mod-rs file would be.
                            Some(p) => {
                                let base = self.abs_file.parent().unwrap_or(Path::new(""));
                                let f = base.join(p);
                                let d = f.parent().unwrap_or(Path::new("")).to_path_buf();
                                (f, d)
                            }
                            None => {
                                let flat = dir.join(format!("{name}.rs"));
                                let nested = dir.join(&name).join("mod.rs");
                                if flat.is_file() {
                                    (flat, dir.join(&name))
                                } else if nested.is_file() {
                                    (nested, dir.join(&name))
                                } else {
                                    return Err(format!(
                                        "acyclic: {}: `mod {name};` has neither {} nor {}",
                                        self.file.display(),
                                        flat.display(),
                                        nested.display()
                                    ));
                                }
                            }
                        };
                        read_module_file(self.crate_dir, &file, child, child_dir, tree)?;
                    }
                }
                continue;
            }
            let mut c = Collector {
                from: &path,
                file: self.file,
                refs: &mut tree.refs,
            };
            c.visit_item(item);
        }
        Ok(())
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

/// `#[cfg(test)]`, or a `cfg` that needs `test` (`all(test, …)`): test-only code.
fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        if !a.path().is_ident("cfg") {
            return false;
        }
        let Ok(meta) = a.parse_args::<syn::Meta>() else {
            return false;
        };
        needs_test(&meta)
    })
}

/// Whether a cfg predicate can only hold under `test`.
fn needs_test(meta: &syn::Meta) -> bool {
    match meta {
        syn::Meta::Path(p) => p.is_ident("test"),
        syn::Meta::List(l) if l.path.is_ident("all") => l
            .parse_args_with(
                syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
            )
            .is_ok_and(|args| args.iter().any(needs_test)),
        _ => false,
    }
}

/// The value of `#[path = "…"]`.
fn path_attribute(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// Collects the paths one module's items name.
struct Collector<'a> {
    from: &'a ModPath,
    file: &'a Path,
    refs: &'a mut Vec<RawRef>,
}

impl Collector<'_> {
    fn push(&mut self, words: Vec<String>, line: usize) {
        let mut anchor = Anchor::Bare;
        let mut rest = words.as_slice();
        match rest.first().map(String::as_str) {
            Some("crate") => {
                anchor = Anchor::Crate;
                rest = &rest[1..];
            }
            Some("self") => {
                anchor = Anchor::SelfMod;
                rest = &rest[1..];
                // `self::super::x`
                let n = rest.iter().take_while(|s| *s == "super").count();
                if n > 0 {
                    anchor = Anchor::Super(n);
                    rest = &rest[n..];
                }
            }
            Some("super") => {
                let n = rest.iter().take_while(|s| *s == "super").count();
                anchor = Anchor::Super(n);
                rest = &rest[n..];
            }
            Some(_) => {}
            None => return,
        }
        // A bare single name cannot reach into another module (`x` alone is an item in scope).
        if anchor == Anchor::Bare && rest.len() < 2 {
            return;
        }
        self.refs.push(RawRef {
            from: self.from.clone(),
            anchor,
            segments: rest.to_vec(),
            file: self.file.to_path_buf(),
            line,
        });
    }

    /// `use` trees flattened: `a::{b::X, c}` gives `a::b::X` and `a::c`; `a::{self}` gives `a`.
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, line: usize) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, line);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut w = prefix.clone();
                if n.ident != "self" {
                    w.push(n.ident.to_string());
                }
                self.push(w, line);
            }
            syn::UseTree::Rename(r) => {
                let mut w = prefix.clone();
                if r.ident != "self" {
                    w.push(r.ident.to_string());
                }
                self.push(w, line);
            }
            syn::UseTree::Glob(_) => self.push(prefix.clone(), line),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t, line);
                }
            }
        }
    }

    /// Paths inside a macro's tokens (which `syn` leaves unparsed): every run of
    /// `ident :: ident :: …` (and `$crate :: …`).
    fn tokens(&mut self, tokens: TokenStream) {
        let tts: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tts.len() {
            match &tts[i] {
                TokenTree::Group(g) => {
                    self.tokens(g.stream());
                    i += 1;
                }
                TokenTree::Ident(id) => {
                    // The whole run from here (`a::b::c`), so its tail is not read again.
                    let mut words = vec![id.to_string()];
                    let line = id.span().start().line;
                    let mut j = i + 1;
                    while is_colon2(&tts, j) {
                        let Some(TokenTree::Ident(next)) = tts.get(j + 2) else {
                            break;
                        };
                        words.push(next.to_string());
                        j += 3;
                    }
                    if words.len() > 1 {
                        self.push(words, line);
                    }
                    i = j;
                }
                // `$crate::…` in a macro_rules body: the `$` is skipped, `crate` read next.
                _ => i += 1,
            }
        }
    }
}

/// Whether `tts[j]` and `tts[j + 1]` are `::`.
fn is_colon2(tts: &[TokenTree], j: usize) -> bool {
    matches!(
        (tts.get(j), tts.get(j + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
            if a.as_char() == ':' && b.as_char() == ':'
    )
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        if is_cfg_test(item_attrs(i)) {
            return;
        }
        // A `mod` inside a function body: not part of the module tree; its code counts as
        // the enclosing module's.
        syn::visit::visit_item(self, i);
    }

    fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
        let attrs = match i {
            syn::ImplItem::Const(c) => &c.attrs,
            syn::ImplItem::Fn(f) => &f.attrs,
            syn::ImplItem::Type(t) => &t.attrs,
            syn::ImplItem::Macro(m) => &m.attrs,
            _ => return syn::visit::visit_impl_item(self, i),
        };
        if !is_cfg_test(attrs) {
            syn::visit::visit_impl_item(self, i);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if u.leading_colon.is_some() {
            return; // `use ::x`: another crate
        }
        let line = u.span().start().line;
        self.use_tree(&mut Vec::new(), &u.tree, line);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
            let words: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
            self.push(words, p.span().start().line);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // The macro's own path (`crate::m!`) counts; its arguments are tokens.
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {
        // Docs (intra-doc links) and derives are not uses.
    }
}

impl Tree {
    /// The module `r` points into: the longest prefix of its absolute path that is a module;
    /// `None` when it points outside the crate.
    fn target(&self, r: &RawRef) -> Option<ModPath> {
        let mut abs: ModPath = match r.anchor {
            Anchor::Crate => Vec::new(),
            Anchor::SelfMod => r.from.clone(),
            Anchor::Super(n) => {
                if n > r.from.len() {
                    return None;
                }
                r.from[..r.from.len() - n].to_vec()
            }
            Anchor::Bare => {
                // Only a child module of the current one makes a bare path ours.
                let mut child = r.from.clone();
                child.push(r.segments[0].clone());
                if !self.modules.contains(&child) {
                    return None;
                }
                r.from.clone()
            }
        };
        for s in &r.segments {
            abs.push(s.clone());
            if !self.modules.contains(&abs) {
                abs.pop();
                break;
            }
        }
        Some(abs)
    }

    /// The sibling edges: `(parent, from child, to child) → first evidence`.
    fn edges(&self) -> BTreeMap<(ModPath, String, String), Evidence> {
        let mut refs: Vec<&RawRef> = self.refs.iter().collect();
        refs.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
        let mut edges = BTreeMap::new();
        for r in refs {
            let Some(to) = self.target(r) else { continue };
            let from = &r.from;
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue; // an ancestor or a descendant (or itself): containment
            }
            let key = (
                from[..common].to_vec(),
                from[common].clone(),
                to[common].clone(),
            );
            edges.entry(key).or_insert_with(|| Evidence {
                file: r.file.clone(),
                line: r.line,
                path: r.text(),
            });
        }
        edges
    }

    /// Every circle among siblings: for each edge inside a strongly connected group, the
    /// shortest circle through it (each circle once).
    pub fn cycles(&self) -> Vec<Cycle> {
        let edges = self.edges();
        let mut by_parent: BTreeMap<&ModPath, BTreeMap<&str, BTreeSet<&str>>> = BTreeMap::new();
        for (parent, a, b) in edges.keys() {
            by_parent
                .entry(parent)
                .or_default()
                .entry(a.as_str())
                .or_default()
                .insert(b.as_str());
        }
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for (parent, graph) in by_parent {
            for (a, outs) in &graph {
                for b in outs {
                    // The shortest way back from b to a closes a circle through a -> b.
                    let Some(back) = shortest_path(&graph, b, a) else {
                        continue;
                    };
                    let mut path: Vec<String> = vec![a.to_string()];
                    path.extend(back[..back.len() - 1].iter().map(|s| s.to_string()));
                    // One rotation per circle: start at its smallest name.
                    let start = (0..path.len()).min_by_key(|&i| &path[i]).unwrap_or(0);
                    path.rotate_left(start);
                    if !seen.insert((parent.clone(), path.clone())) {
                        continue;
                    }
                    let evidence = (0..path.len())
                        .map(|i| {
                            let next = &path[(i + 1) % path.len()];
                            edges[&(parent.clone(), path[i].clone(), next.clone())].clone()
                        })
                        .collect();
                    out.push(Cycle {
                        parent: parent.clone(),
                        path,
                        evidence,
                    });
                }
            }
        }
        out
    }
}

/// The shortest path `from … to` (both included), breadth first.
fn shortest_path<'a>(
    graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
    from: &'a str,
    to: &'a str,
) -> Option<Vec<&'a str>> {
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    let mut visited = BTreeSet::from([from]);
    while let Some(n) = queue.pop_front() {
        if n == to {
            let mut path = vec![to];
            let mut at = to;
            while at != from {
                at = prev[at];
                path.push(at);
            }
            path.reverse();
            return Some(path);
        }
        for &m in graph.get(n).into_iter().flatten() {
            if visited.insert(m) {
                prev.insert(m, n);
                queue.push_back(m);
            }
        }
    }
    None
}

/// A library crate of the workspace: its name, directory and root file.
struct LibCrate {
    name: String,
    dir: PathBuf,
    root: PathBuf,
}

/// The library targets of the workspace members, from `cargo metadata`.
fn workspace_libs() -> Result<Vec<LibCrate>> {
    let out = cargo()
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("acyclic: cannot start cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!("acyclic: cargo metadata {}", outcome(out.status)));
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("acyclic: cargo metadata output: {e}"))?;
    let mut libs = Vec::new();
    for p in meta["packages"].as_array().into_iter().flatten() {
        let (Some(name), Some(manifest)) = (p["name"].as_str(), p["manifest_path"].as_str()) else {
            continue;
        };
        for t in p["targets"].as_array().into_iter().flatten() {
            let lib = t["kind"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k == "lib" || k == "proc-macro");
            if let (true, Some(src)) = (lib, t["src_path"].as_str()) {
                libs.push(LibCrate {
                    name: name.to_string(),
                    dir: Path::new(manifest)
                        .parent()
                        .unwrap_or(Path::new(""))
                        .to_path_buf(),
                    root: PathBuf::from(src),
                });
            }
        }
    }
    libs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(libs)
}

/// Checks every library crate. With `enforce_all`, any circle fails; otherwise only the
/// circles of [`ACYCLIC_CRATES`] do, and the others are printed as warnings.
pub fn check(enforce_all: bool) -> Result {
    let step = "module import circles (cargo xtask acyclic)";
    eprintln!("\n==> {step}");
    let start = Instant::now();
    let mut failing = Vec::new();
    for lib in workspace_libs()? {
        let tree = read_tree(&lib.dir, &lib.root)?;
        let cycles = tree.cycles();
        let enforced = enforce_all || ACYCLIC_CRATES.contains(&lib.name.as_str());
        if cycles.is_empty() {
            eprintln!("{}: no circle ({} modules)", lib.name, tree.modules.len());
            continue;
        }
        let what = if enforced { "error" } else { "warning" };
        eprintln!(
            "{what}: {}: {} circle(s) among its modules:",
            lib.name,
            cycles.len()
        );
        for c in &cycles {
            eprintln!("  {}: {c}", lib.name);
        }
        if enforced {
            failing.push(lib.name);
        }
    }
    record(step, start.elapsed());
    if failing.is_empty() {
        eprintln!("<== {step}: ok in {}", secs(start.elapsed()));
        Ok(())
    } else {
        eprintln!(
            "<== {step}: failed in {}: {}",
            secs(start.elapsed()),
            failing.join(", ")
        );
        Err(format!(
            "{step}: module import circles in {}",
            failing.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate in a fresh temporary directory from `(path, text)` pairs.
    struct Fixture(PathBuf);

    impl Fixture {
        fn new(name: &str, files: &[(&str, &str)]) -> Fixture {
            let dir =
                std::env::temp_dir().join(format!("xtask-acyclic-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            for (path, text) in files {
                let p = dir.join(path);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, text).unwrap();
            }
            Fixture(dir)
        }

        fn cycles(&self) -> Vec<String> {
            let tree = read_tree(&self.0, &self.0.join("src/lib.rs")).unwrap();
            tree.cycles().iter().map(ToString::to_string).collect()
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_circle_between_two_files_is_found_with_its_evidence() {
        let f = Fixture::new(
            "circle",
            &[
                (
                    "src/lib.rs",
                    "mod informer;\nmod snapshot;\npub use informer::X;\n",
                ),
                (
                    "src/informer.rs",
                    "use crate::snapshot::Y;\npub struct X;\n",
                ),
                (
                    "src/snapshot.rs",
                    "pub struct Y;\n\nfn f() -> crate::informer::X { crate::informer::X }\n",
                ),
            ],
        );
        assert_eq!(
            f.cycles(),
            [
                "informer -> snapshot -> informer (src/informer.rs:1 uses crate::snapshot::Y; \
              src/snapshot.rs:3 uses crate::informer::X)"
            ]
        );
    }

    #[test]
    fn a_dag_passes_and_root_reexports_are_not_edges() {
        let f = Fixture::new(
            "dag",
            &[
                (
                    "src/lib.rs",
                    "pub mod a;\npub mod b;\npub mod c;\npub use a::A;\npub use b::B;\n\
                     pub struct Error;\n",
                ),
                // c -> b -> a; every one names the root's `crate::Error` and re-exports.
                ("src/a.rs", "pub struct A(crate::Error);\n"),
                (
                    "src/b.rs",
                    "use crate::{a::A, Error};\npub struct B(A, Error);\n",
                ),
                (
                    "src/c.rs",
                    "use crate::B;\nfn f(_: super::b::B, _: crate::A) {}\n",
                ),
            ],
        );
        assert_eq!(f.cycles(), Vec::<String>::new());
    }

    #[test]
    fn references_to_ancestors_and_descendants_are_containment() {
        let f = Fixture::new(
            "containment",
            &[
                ("src/lib.rs", "mod config;\npub struct Top;\n"),
                (
                    "src/config/mod.rs",
                    "mod exec;\nmod kube;\nuse self::exec::E;\npub struct C;\n",
                ),
                // Children name their parent and the root: no edge.
                (
                    "src/config/exec.rs",
                    "use super::*;\nuse super::C;\npub struct E(crate::config::C, crate::Top);\n",
                ),
                ("src/config/kube.rs", "use crate::config::exec::E;\n"),
            ],
        );
        assert_eq!(f.cycles(), Vec::<String>::new());
        // But a child naming a sibling through its parent is an edge between siblings.
        let g = Fixture::new(
            "nested-circle",
            &[
                ("src/lib.rs", "mod config;\n"),
                ("src/config/mod.rs", "mod exec;\nmod kube;\n"),
                ("src/config/exec.rs", "use super::kube::K;\npub struct E;\n"),
                (
                    "src/config/kube.rs",
                    "pub struct K(crate::config::exec::E);\n",
                ),
            ],
        );
        assert_eq!(
            g.cycles(),
            [
                "in config: exec -> kube -> exec (src/config/exec.rs:1 uses super::kube::K; \
              src/config/kube.rs:1 uses crate::config::exec::E)"
            ]
        );
    }

    #[test]
    fn test_code_is_left_out() {
        let f = Fixture::new(
            "cfg-test",
            &[
                ("src/lib.rs", "mod a;\nmod b;\n#[cfg(test)]\nmod support;\n"),
                (
                    "src/a.rs",
                    "pub struct A;\n#[cfg(test)]\nuse crate::b::B;\n\
                     #[cfg(all(test, feature = \"x\"))]\nfn t() { crate::b::B; }\n\
                     #[cfg(test)]\nmod tests { use crate::b::B; }\n",
                ),
                ("src/b.rs", "pub struct B(crate::a::A);\nmod tests;\n"),
                // Neither file exists to be read: `tests` and cfg(test) modules are skipped.
            ],
        );
        assert_eq!(f.cycles(), Vec::<String>::new());
    }

    #[test]
    fn bare_sibling_paths_inline_modules_and_macros_are_read() {
        let f = Fixture::new(
            "bare",
            &[(
                "src/lib.rs",
                "mod outer {\n    pub mod x { pub fn f() { super::y::g() } }\n    \
                     pub mod y { pub fn g() { assert!(true, \"{}\", crate::outer::x::f()); } }\n}\n",
            )],
        );
        assert_eq!(
            f.cycles(),
            [
                "in outer: x -> y -> x (src/lib.rs:2 uses super::y::g; src/lib.rs:3 uses \
              crate::outer::x::f)"
            ]
        );
        let g = Fixture::new(
            "bare-use",
            &[
                ("src/lib.rs", "mod m;\n"),
                ("src/m.rs", "mod a;\nmod b;\nuse a::A;\n"),
                ("src/m/a.rs", "use super::b::B;\npub struct A;\n"),
                // A sibling named through an alias: the `use` is the edge.
                (
                    "src/m/b.rs",
                    "use super::a;\npub struct B;\nfn f() { let _ = a::A; }\n",
                ),
            ],
        );
        assert_eq!(
            g.cycles(),
            ["in m: a -> b -> a (src/m/a.rs:1 uses super::b::B; src/m/b.rs:1 uses super::a)"]
        );
    }

    #[test]
    fn a_longer_circle_is_printed_once() {
        let f = Fixture::new(
            "three",
            &[
                ("src/lib.rs", "mod key;\nmod object;\nmod straight;\n"),
                ("src/key.rs", "use crate::object::O;\npub struct K;\n"),
                ("src/object.rs", "use crate::straight::S;\npub struct O;\n"),
                (
                    "src/straight.rs",
                    "pub struct S;\nfn f(_: crate::object::O) {}\n",
                ),
            ],
        );
        let cycles = f.cycles();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert!(
            cycles[0].starts_with("object -> straight -> object"),
            "{cycles:?}"
        );
    }
}

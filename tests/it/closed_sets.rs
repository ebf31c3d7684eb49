//! The fence of issue 37's first slice: values, not strings. A closed set (an operation's kind, a
//! gc candidate's kind and outcome, how a module's part in a converge ended) travels as an enum
//! and is said as text only where it is shown; an error travels as a type that keeps its source.
//!
//! Read from the source with `syn` (as `tests/layering.rs` does), in non-test code under `src/`
//! (`#[cfg(test)]` and `#[test]` items, and files declared as test modules, are left out), two
//! counts are held to a ceiling, each known one by where it is:
//! - `Result<_, String>`: an error that is only text;
//! - string comparisons of the closed sets' words: `==`/`!=` with a literal, a `match` arm or
//!   `matches!` on one, `.starts_with("failed")`, `.split_once(…)` on a `kind` or an `outcome`.
//!
//! A new one fails the test, naming where it is and what to use instead; one mended fails it too
//! until it comes off the list, so the ceiling only comes down (`scripts/count-strings.sh` measures
//! the same two by text).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// `Result<_, String>` in non-test code today: none (20 before issue 37; the key table's overrides
/// now say theirs as `BindingError`, the daemon's build `BaseUnnamed` and `NoBuildKit`, gc's
/// `BadGrace`; the daemon socket's `SocketError`, its one endpoint grammar in mesh/builders.rs; then
/// `UnknownPlatform`, `NotADuration`, `BadMachineName`, `BadPattern` and `UnknownContainer`; last a
/// log stream's `StreamCut`, a base's `BaseUnreached`, a builder's `PushCheckFailed` and an
/// endpoint's `HostPortProblem`). The ceiling is 0: a new one anywhere fails, named.
const KNOWN_RESULT_STRINGS: &[&str] = &[];

/// String comparisons of closed-set words in non-test code today: the one left is
/// `BuildStatus::parse`, which reads a stored word back into its enum (where words belong).
const KNOWN_CLOSED_SET_COMPARISONS: &[&str] =
    &["src/mesh/builds.rs (in impl BuildStatus::parse): a match arm on \"failed\""];

/// The words of the closed sets that used to travel as text: operation kinds, gc candidate kinds
/// and outcomes, a module's outcome in a converge. A literal is one of them when it is the word,
/// or starts with it and goes on after `:`, ` ` or `(` (`"failed: …"`, `"skipped (record)"`).
const WORDS: &[&str] = &[
    "converge",
    "force",
    "send",
    "rollback",
    "unpin",
    "promote",
    "gc",
    "tag",
    "image",
    "manifest",
    "shard",
    "removed",
    "untagged",
    "deleted",
    "already gone",
    "failed",
    "skipped",
    "built",
    "not reached",
    "kept",
];

/// Methods that compare text with their argument.
const COMPARING_METHODS: &[&str] = &[
    "eq",
    "ne",
    "starts_with",
    "ends_with",
    "strip_prefix",
    "strip_suffix",
    "contains",
];

/// Methods that take text apart: called on a `kind` or an `outcome`, they read a value back
/// from its words.
const SPLITTING_METHODS: &[&str] = &["split_once", "split", "starts_with", "strip_prefix", "find"];

fn is_closed_set_word(text: &str) -> bool {
    WORDS.iter().any(|word| {
        text.strip_prefix(word)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([':', ' ', '(']))
    })
}

fn closed_set_literal(expr: &syn::Expr) -> Option<String> {
    match expr {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) => Some(s.value()).filter(|v| is_closed_set_word(v)),
        syn::Expr::Reference(r) => closed_set_literal(&r.expr),
        syn::Expr::Paren(p) => closed_set_literal(&p.expr),
        _ => None,
    }
}

fn pattern_literals(pat: &syn::Pat, out: &mut Vec<String>) {
    match pat {
        syn::Pat::Lit(syn::PatLit {
            lit: syn::Lit::Str(s),
            ..
        }) if is_closed_set_word(&s.value()) => out.push(s.value()),
        syn::Pat::Or(or) => or.cases.iter().for_each(|p| pattern_literals(p, out)),
        syn::Pat::Paren(p) => pattern_literals(&p.pat, out),
        syn::Pat::Reference(r) => pattern_literals(&r.pat, out),
        syn::Pat::Tuple(t) => t.elems.iter().for_each(|p| pattern_literals(p, out)),
        syn::Pat::TupleStruct(t) => t.elems.iter().for_each(|p| pattern_literals(p, out)),
        syn::Pat::Ident(syn::PatIdent {
            subpat: Some((_, p)),
            ..
        }) => pattern_literals(p, out),
        _ => {}
    }
}

fn token_literals(tokens: TokenStream, out: &mut Vec<String>) {
    for tree in tokens {
        match tree {
            TokenTree::Group(group) => token_literals(group.stream(), out),
            TokenTree::Literal(literal) => {
                if let Ok(syn::Lit::Str(s)) = syn::parse_str::<syn::Lit>(&literal.to_string())
                    && is_closed_set_word(&s.value())
                {
                    out.push(s.value());
                }
            }
            _ => {}
        }
    }
}

/// Whether an expression reads a field or binding named `kind` or `outcome` (`stamp.kind`,
/// `o.outcome`, `kind`).
fn names_a_closed_set(expr: &syn::Expr) -> bool {
    let is_word = |ident: &syn::Ident| ident == "kind" || ident == "outcome";
    match expr {
        syn::Expr::Field(f) => matches!(&f.member, syn::Member::Named(i) if is_word(i)),
        syn::Expr::Path(p) => p.path.get_ident().is_some_and(is_word),
        syn::Expr::MethodCall(m) => {
            matches!(
                m.method.to_string().as_str(),
                "as_str" | "as_deref" | "as_ref"
            ) && names_a_closed_set(&m.receiver)
        }
        syn::Expr::Reference(r) => names_a_closed_set(&r.expr),
        syn::Expr::Paren(p) => names_a_closed_set(&p.expr),
        _ => false,
    }
}

/// Whether the attributes make the item test-only: `#[test]` (any `…::test`), `#[cfg(test)]`,
/// `#[cfg(all(…, test, …))]`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        if path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        path.is_ident("cfg") && attr.parse_args::<TokenStream>().is_ok_and(mentions_test)
    })
}

fn mentions_test(tokens: TokenStream) -> bool {
    let mut trees = tokens.into_iter().peekable();
    while let Some(tree) = trees.next() {
        match tree {
            TokenTree::Ident(ident) if ident == "not" => {
                trees.next();
            }
            TokenTree::Ident(ident) if ident == "test" => return true,
            TokenTree::Group(group) if mentions_test(group.stream()) => return true,
            _ => {}
        }
    }
    false
}

/// One finding: the file, the function it is in, and what it is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Found {
    file: String,
    within: String,
    what: String,
}

impl Found {
    /// Where it is: `src/mesh/gc.rs (in fn parse_grace)`.
    fn place(&self) -> String {
        format!("{} (in {})", self.file, self.within)
    }
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.place(), self.what)
    }
}

#[derive(Default)]
struct Walk {
    file: String,
    within: Vec<String>,
    result_strings: Vec<Found>,
    comparisons: Vec<Found>,
    /// `mod name;` declared test-only: (name, its `#[path]`).
    test_children: Vec<(String, Option<String>)>,
}

impl Walk {
    fn found(&self, what: String) -> Found {
        Found {
            file: self.file.clone(),
            within: self
                .within
                .last()
                .cloned()
                .unwrap_or_else(|| "the file".into()),
            what,
        }
    }

    fn compared(&mut self, what: String) {
        let found = self.found(what);
        self.comparisons.push(found);
    }

    fn inside(&mut self, name: String, walk: impl FnOnce(&mut Walk)) {
        self.within.push(name);
        walk(self);
        self.within.pop();
    }
}

impl<'ast> Visit<'ast> for Walk {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            _ => return visit::visit_item(self, item),
        };
        if is_test(attrs) {
            if let syn::Item::Mod(m) = item
                && m.content.is_none()
            {
                let path =
                    m.attrs
                        .iter()
                        .find(|a| a.path().is_ident("path"))
                        .and_then(|a| match &a.meta {
                            syn::Meta::NameValue(syn::MetaNameValue {
                                value:
                                    syn::Expr::Lit(syn::ExprLit {
                                        lit: syn::Lit::Str(s),
                                        ..
                                    }),
                                ..
                            }) => Some(s.value()),
                            _ => None,
                        });
                self.test_children.push((m.ident.to_string(), path));
            }
            return;
        }
        match item {
            syn::Item::Fn(f) => {
                let name = format!("fn {}", f.sig.ident);
                self.inside(name, |walk| visit::visit_item(walk, item));
            }
            syn::Item::Struct(i) => {
                let name = format!("struct {}", i.ident);
                self.inside(name, |walk| visit::visit_item(walk, item));
            }
            syn::Item::Enum(i) => {
                let name = format!("enum {}", i.ident);
                self.inside(name, |walk| visit::visit_item(walk, item));
            }
            syn::Item::Impl(i) => {
                let name = match &*i.self_ty {
                    syn::Type::Path(p) => p
                        .path
                        .segments
                        .last()
                        .map_or("impl".into(), |s| format!("impl {}", s.ident)),
                    _ => "impl".into(),
                };
                self.inside(name, |walk| visit::visit_item(walk, item));
            }
            _ => visit::visit_item(self, item),
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if is_test(&item.attrs) {
            return;
        }
        let name = match self.within.last() {
            Some(outer) => format!("{outer}::{}", item.sig.ident),
            None => format!("fn {}", item.sig.ident),
        };
        self.inside(name, |walk| visit::visit_impl_item_fn(walk, item));
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if let Some(last) = path.segments.last()
            && last.ident == "Result"
            && let syn::PathArguments::AngleBracketed(args) = &last.arguments
            && args.args.len() == 2
            && let Some(syn::GenericArgument::Type(syn::Type::Path(error))) = args.args.last()
            && error.qself.is_none()
            && error.path.segments.last().is_some_and(|s| {
                s.ident == "String" && matches!(s.arguments, syn::PathArguments::None)
            })
        {
            let found = self.found("Result<_, String>".into());
            self.result_strings.push(found);
        }
        visit::visit_path(self, path);
    }

    fn visit_expr_binary(&mut self, expr: &'ast syn::ExprBinary) {
        if matches!(expr.op, syn::BinOp::Eq(_) | syn::BinOp::Ne(_)) {
            for side in [&*expr.left, &*expr.right] {
                if let Some(word) = closed_set_literal(side) {
                    self.compared(format!("compares text with {word:?}"));
                }
            }
        }
        visit::visit_expr_binary(self, expr);
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        let method = call.method.to_string();
        if COMPARING_METHODS.contains(&method.as_str())
            && let Some(word) = call.args.first().and_then(closed_set_literal)
        {
            self.compared(format!(".{method}({word:?})"));
        } else if SPLITTING_METHODS.contains(&method.as_str()) && names_a_closed_set(&call.receiver)
        {
            self.compared(format!(".{method}(…) on a kind or an outcome"));
        }
        visit::visit_expr_method_call(self, call);
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        let mut words = Vec::new();
        pattern_literals(&arm.pat, &mut words);
        for word in words {
            self.compared(format!("a match arm on {word:?}"));
        }
        visit::visit_arm(self, arm);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        if mac.path.is_ident("matches") {
            let mut words = Vec::new();
            token_literals(mac.tokens.clone(), &mut words);
            for word in words {
                self.compared(format!("matches!(…, {word:?})"));
            }
        }
        visit::visit_macro(self, mac);
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src/")
        .map(|e| e.expect("read a dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every finding in non-test code under `root`: (`Result<_, String>`, closed-set comparisons).
fn findings(root: &Path) -> (Vec<Found>, Vec<Found>) {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let mut walks = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("read a source file");
        let ast = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
        let mut walk = Walk {
            file: path
                .strip_prefix(root.parent().unwrap_or(root))
                .unwrap_or(path)
                .display()
                .to_string(),
            ..Walk::default()
        };
        if !is_test(&ast.attrs) {
            for item in &ast.items {
                walk.visit_item(item);
            }
        }
        walks.push((path.clone(), walk));
    }
    // Files declared as test modules (`#[cfg(test)] mod tests;`) are left out with them.
    let mut test_files = BTreeSet::new();
    for (path, walk) in &walks {
        let dir = path.parent().unwrap_or(Path::new(""));
        let is_index = matches!(
            path.file_name().and_then(|n| n.to_str()),
            Some("mod.rs" | "lib.rs" | "main.rs")
        );
        let base = if is_index {
            dir.to_path_buf()
        } else {
            dir.join(path.file_stem().unwrap_or_default())
        };
        for (name, path_attr) in &walk.test_children {
            match path_attr {
                Some(p) => {
                    test_files.insert(dir.join(p));
                }
                None => {
                    test_files.insert(base.join(format!("{name}.rs")));
                    test_files.insert(base.join(name).join("mod.rs"));
                }
            }
        }
    }
    let mut results = Vec::new();
    let mut comparisons = Vec::new();
    for (path, walk) in walks {
        if !test_files.contains(&path) {
            results.extend(walk.result_strings);
            comparisons.extend(walk.comparisons);
        }
    }
    (results, comparisons)
}

/// The crates read as the one tree the rooms were folders of (`common::source_tree`).
fn src() -> PathBuf {
    crate::common::source_tree::folder().join("src")
}

/// What is found beyond the known list (new), and what the list names that is gone.
fn against(found: &[String], known: &[&str]) -> (Vec<String>, Vec<String>) {
    let mut left: Vec<&str> = known.to_vec();
    let mut new = Vec::new();
    for f in found {
        match left.iter().position(|k| k == f) {
            Some(i) => {
                left.remove(i);
            }
            None => new.push(f.clone()),
        }
    }
    (new, left.into_iter().map(str::to_string).collect())
}

#[test]
fn no_new_result_with_a_string_error() {
    let (results, _) = findings(&src());
    let places: Vec<String> = results.iter().map(Found::place).collect();
    let (new, gone) = against(&places, KNOWN_RESULT_STRINGS);
    assert!(
        new.is_empty(),
        "{} `Result<_, String>` in non-test code, {} allowed; new:\n  {}\nAn error that is only \
         text loses its source and cannot be matched on: use a thiserror type at the boundary (as \
         src/converge/error.rs does, or BindingError in src/app/keys/mod.rs) and flatten it to \
         text only where it is shown.",
        places.len(),
        KNOWN_RESULT_STRINGS.len(),
        new.join("\n  ")
    );
    assert!(
        gone.is_empty(),
        "mended, so take them off KNOWN_RESULT_STRINGS in tests/closed_sets.rs (the ceiling comes \
         down with them):\n  {}",
        gone.join("\n  ")
    );
}

#[test]
fn no_new_string_comparison_of_a_closed_set() {
    let (_, comparisons) = findings(&src());
    let said: Vec<String> = comparisons.iter().map(Found::to_string).collect();
    let (new, gone) = against(&said, KNOWN_CLOSED_SET_COMPARISONS);
    assert!(
        new.is_empty(),
        "{} string comparison(s) of a closed set's words in non-test code, {} allowed; new:\n  \
         {}\nCompare the value, not its words: OperationKind (src/mesh/operation.rs), \
         CandidateKind and GcOutcome (src/mesh/gc.rs), ModuleEnd (src/converge/summary.rs); a new \
         closed set gets its own enum, with Display for the screen and serde for --json.",
        said.len(),
        KNOWN_CLOSED_SET_COMPARISONS.len(),
        new.join("\n  ")
    );
    assert!(
        gone.is_empty(),
        "mended, so take them off KNOWN_CLOSED_SET_COMPARISONS in tests/closed_sets.rs:\n  {}",
        gone.join("\n  ")
    );
}

/// The fence can fail: a scratch source with one of each is found, in the right place.
#[test]
fn the_fence_finds_what_it_counts() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("src");
    std::fs::create_dir_all(root.join("widgets")).unwrap();
    std::fs::write(
        root.join("widgets/scratch.rs"),
        r#"
        pub fn style(kind: &str) -> Result<u8, String> {
            if kind == "rollback" { return Ok(1); }
            match kind { "gc" | "send" => Ok(2), _ => Err("no".into()) }
        }
        pub fn taken(o: Option<&str>, outcome: &str) -> bool {
            o.is_some_and(|o| matches!(o, "removed" | "untagged")) || outcome.starts_with("failed")
                || outcome.split_once(':').is_some()
        }
        pub fn fine(text: &str) -> Result<Result<Option<(String, String)>, String>, std::io::Error> {
            Ok(Ok(text.split_once(' ').map(|(a, b)| (a.into(), b.into()))))
        }
        #[cfg(test)]
        mod tests {
            fn t(kind: &str) -> Result<(), String> { assert!(kind == "gc"); Ok(()) }
        }
        #[cfg(test)]
        #[path = "scratch_tests.rs"]
        mod more;
        "#,
    )
    .unwrap();
    std::fs::write(
        root.join("widgets/scratch_tests.rs"),
        r#"fn t(kind: &str) -> Result<(), String> { assert!(kind == "gc"); Ok(()) }"#,
    )
    .unwrap();
    let (results, comparisons) = findings(&root);
    let within = |found: &[Found]| {
        found
            .iter()
            .map(|f| format!("{} {}", f.within, f.what))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        within(&results),
        ["fn style Result<_, String>", "fn fine Result<_, String>"],
        "{results:?}"
    );
    assert_eq!(
        within(&comparisons),
        [
            "fn style compares text with \"rollback\"",
            "fn style a match arm on \"gc\"",
            "fn style a match arm on \"send\"",
            "fn taken matches!(…, \"removed\")",
            "fn taken matches!(…, \"untagged\")",
            "fn taken .starts_with(\"failed\")",
            "fn taken .split_once(…) on a kind or an outcome",
        ],
        "{comparisons:?}"
    );
    assert!(results.iter().all(|f| f.file == "src/widgets/scratch.rs"));
}

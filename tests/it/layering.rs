//! The fence: the layering, held on the parsed source (`syn`), so that no spelling walks past it.
//!
//! Every path the code names — `use` trees (groups, globs, renames), `super::`/`self::` chains,
//! paths inline in expressions, types, patterns, attributes and macro bodies, `extern crate` — is
//! read as an absolute path (through the file's module path and its `use` aliases) and checked
//! against the allow-list of the folder it is written in (`ROOMS`, after docs/architecture.md):
//! data flows one way, `mesh` is pure, outside systems are reached from `backends` only.
//! Two more rules: inside each folder no two files name each other round (the no-knot rule: a
//! folder's `mod.rs` is its index and does not count), and no non-test function spans more than
//! `LONGEST_FN` lines. Test code (`#[cfg(test)]`, `#[test]`) is exempt wherever it is.
//! There is no list of exceptions: a breach, a knot or a long function fails, and is mended in
//! the source (a type or an error moved to a file at the bottom, a function split into steps).

#![allow(clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proc_macro2::{Spacing, TokenStream, TokenTree};

use syn::ext::IdentExt;
use syn::visit::{self, Visit};

/// The longest a non-test function may span, its `fn` line to its closing brace.
const LONGEST_FN: usize = 120;

/// What one folder may name. A path is judged by the longest prefix (by steps) found in `may`
/// or `never`: `never` wins a tie, and a path no prefix matches is refused, so a new outside
/// crate or a new way up the house is a decision written here. A folder always may name itself.
struct Room {
    folder: &'static str,
    may: &'static [&'static [&'static str]],
    never: &'static [&'static str],
}

/// The standard library's pure parts (no disk, network, process, thread, environment or clock),
/// open to every folder.
const PURE_STD: &[&str] = &[
    "std::borrow",
    "std::cell",
    "std::char",
    "std::cmp",
    "std::collections",
    "std::convert",
    "std::error",
    "std::fmt",
    "std::hash",
    "std::iter",
    "std::marker",
    "std::mem",
    "std::num",
    "std::ops",
    "std::option",
    "std::rc",
    "std::result",
    "std::slice",
    "std::str",
    "std::string",
    "std::sync::Arc",
    "std::time::Duration",
    "std::vec",
];

/// Plain data and text: serialization, hashing, errors.
const DATA: &[&str] = &["serde", "thiserror"];

/// What a running program may use to wait, share and spawn (not to reach anything outside).
const ASYNC: &[&str] = &[
    "std::future",
    "std::pin",
    "std::sync",
    "std::task",
    "tokio::join",
    "tokio::try_join",
    "tokio::runtime",
    "tokio::select",
    "tokio::spawn",
    "tokio::sync",
    "tokio::task",
    "tokio::time",
    "futures_util",
    "tracing",
];

/// Outside systems: reached from `backends` only (and the terminal from `tui`).
const OUTSIDE: &[&str] = &[
    "bollard",
    "hyper",
    "hyper_util",
    "json_patch",
    "k8s_openapi",
    "kube",
    "libc",
    "reqwest",
    "rusqlite",
    "rustls",
    "tonic",
    "std::net",
    "std::process",
    "tokio::fs",
    "tokio::net",
    "tokio::process",
    "crossterm",
    "ratatui::crossterm::terminal",
];

/// The allow-lists, after docs/architecture.md: data flows one way (outside systems → backends →
/// converge → sources → app's messages → app → widgets), `mesh` is pure, the commands and the
/// terminal loop sit on top.
const ROOMS: &[Room] = &[
    // The domain, pure: no disk, threads, clock or outside system; nothing above it.
    Room {
        folder: "mesh",
        may: &[
            PURE_STD,
            DATA,
            &[
                "std::env::consts",
                "std::path::Path",
                "std::path::PathBuf",
                "console::strip_ansi_codes",
                "hex",
                "sha2",
                // The cosign format (mesh/cosign.rs): signatures and their JSON are computed, not fetched.
                "base64",
                "p256",
                // mesh.lock's format (mesh/upstream_lock.rs): text parsed, never read from the disk.
                "toml",
                // A key cosign sealed with a password (mesh/sealed_key.rs): opened, not read.
                "scrypt",
                "crypto_secretbox",
                "serde_json",
                "crate::timefmt::age_since",
            ],
        ],
        never: OUTSIDE,
    },
    // Reads the disk (the mesh file, inputs, .dockerignore, the context watcher); knows the
    // domain and nothing above it.
    Room {
        folder: "workspace",
        may: &[
            PURE_STD,
            DATA,
            &[
                "crate::mesh",
                "std::env::current_dir",
                // `~/` in a path, a secret from the environment, the ssh agent's socket.
                "std::env::var_os",
                "std::fs",
                "std::io",
                "std::net::Ipv6Addr",
                "std::os::unix",
                "std::path",
                "std::sync",
                "std::time",
                "directories",
                // `meshtop init --from`: another tool's file parsed (HCL, YAML as JSON values).
                "hcl",
                "serde_json",
                "serde_saphyr",
                "hex",
                "notify",
                "rayon",
                "regex",
                "sha2",
                "tar",
                "tokio::sync::mpsc",
                "tokio::time::timeout",
                "toml",
                "tracing",
            ],
        ],
        never: OUTSIDE,
    },
    // One outside system each; inside the crate only the domain (never the disk reader above).
    Room {
        folder: "backends",
        may: &[
            PURE_STD,
            DATA,
            ASYNC,
            OUTSIDE,
            &[
                "crate::mesh",
                "crate::timefmt",
                "bytes",
                "directories",
                "gethostname",
                "hex",
                "http",
                "http_body_util",
                "serde_json",
                "serde_urlencoded",
                "sha2",
                "std::env",
                "std::ffi",
                "std::fs",
                "std::io",
                "std::os::unix",
                "std::path",
                "std::time",
                // The daemon's log stream stamps each line in RFC 3339 with nanoseconds.
                "chrono",
                // The BuildKit session to a builder over TCP with TLS: rustls, as bollard's own TLS.
                "tokio_rustls",
                "rustls_pki_types",
                "rustls_native_certs",
                "tokio::io",
                // A log stream followed in a select loop is pinned where it is polled.
                "tokio::pin",
                "uuid",
            ],
        ],
        never: &[
            "crate::workspace",
            "crossterm",
            "ratatui",
            "ratatui::crossterm::terminal",
        ],
    },
    // The engine: the domain, the disk reader and the backends; never the screen.
    Room {
        folder: "converge",
        may: &[
            PURE_STD,
            DATA,
            ASYNC,
            &[
                "crate::backends",
                "crate::mesh",
                "crate::timefmt",
                "crate::workspace",
                // The target seam's async methods, boxed for `Arc<dyn Target>`.
                "async_trait",
                // The target seam declares each kind's flags (`targets::Overrides`): the command
                // line flattens them and only the seam reads them.
                "clap::Args",
                "gethostname",
                "hex",
                "rayon",
                "serde_json",
                "std::path",
                // The jobs default: one build per core.
                "std::thread::available_parallelism",
                "uuid",
            ],
        ],
        never: OUTSIDE,
    },
    // What the dashboard polls, and the action runner: the engine and below, and the app's
    // messages (what a poll answers), never the app's state or update.
    Room {
        folder: "sources",
        may: &[
            PURE_STD,
            ASYNC,
            &[
                "crate::app::msg",
                "crate::app::views",
                "crate::backends",
                "crate::converge",
                "crate::mesh",
                "crate::timefmt",
                "crate::workspace",
                "std::path",
            ],
        ],
        never: OUTSIDE,
    },
    // The dashboard's state and its pure update: the domain, and the key events it is fed.
    Room {
        folder: "app",
        may: &[
            PURE_STD,
            DATA,
            &[
                "crate::mesh",
                "crate::timefmt",
                "ratatui::crossterm::event",
                "toml",
            ],
        ],
        never: OUTSIDE,
    },
    // Drawing only: the app's state and the domain's types, never the update.
    Room {
        folder: "widgets",
        may: &[
            PURE_STD,
            &[
                "crate::app",
                "crate::mesh",
                "crate::timefmt",
                "chrono::DateTime",
                "ratatui",
            ],
        ],
        never: &[
            "crate::app::update",
            "ratatui::crossterm",
            "ratatui::restore",
            "ratatui::init",
            "ratatui::try_init",
        ],
    },
    // The commands: the engine and everything below it, and the dashboard's entry point.
    Room {
        folder: "cli",
        may: &[
            PURE_STD,
            DATA,
            ASYNC,
            &[
                "crate::backends",
                "crate::converge",
                "crate::mesh",
                "crate::timefmt",
                "crate::tui::DashboardOptions",
                "crate::tui::run_dashboard",
                "crate::workspace",
                "clap",
                "indicatif",
                "serde_json",
                "std::env::var",
                "std::io",
                "std::path",
                "std::process::ExitCode",
                "tokio::signal",
            ],
        ],
        never: OUTSIDE,
    },
    // The terminal loop: sources → app → widgets.
    Room {
        folder: "tui",
        may: &[
            PURE_STD,
            ASYNC,
            &[
                "crate::app",
                "crate::mesh",
                "crate::sources",
                "crate::timefmt",
                "crate::widgets",
                "crate::workspace",
                "color_eyre",
                "directories",
                "ratatui",
                "std::env::var_os",
                "std::fs::read_to_string",
                "std::io",
                "std::panic",
                "std::path",
                "tokio::signal",
                "tracing_appender",
                "tracing_subscriber",
            ],
        ],
        never: &[],
    },
    // Times as people read them.
    Room {
        folder: "timefmt",
        // The pure ages and running times are the domain's, re-exported beside the clock.
        may: &[PURE_STD, &["chrono", "crate::mesh::timefmt"]],
        never: &[],
    },
    // The binary: the command line.
    Room {
        folder: "main",
        may: &[&["crate::cli", "clap::Parser", "std::process::ExitCode"]],
        never: &[],
    },
    // The library's root declares the folders.
    Room {
        folder: "lib",
        may: &[],
        never: &[],
    },
];

// ---------------------------------------------------------------------------------------------
// Reading the source
// ---------------------------------------------------------------------------------------------

/// One path as written, where it was written.
#[derive(Debug, Clone)]
struct Written {
    /// The module the path is written in (the file's, or an inline module inside it).
    scope: Vec<String>,
    segments: Vec<String>,
    leading_colon: bool,
    /// Where it was written (found from `anchor` once the walk is done).
    line: usize,
    /// The word the line is found by.
    anchor: String,
    /// `Some(name)`: a `use` leaf, which brings `name` into `scope` (None for a glob).
    alias: Option<Option<String>>,
}

/// A `mod x;` (or inline `mod x { }`) found in a file.
#[derive(Debug, Clone)]
struct ChildMod {
    scope: Vec<String>,
    name: String,
    test: bool,
    inline: bool,
    path_attr: Option<String>,
}

impl ChildMod {
    fn of(scope: &[String], m: &syn::ItemMod, test: bool) -> ChildMod {
        ChildMod {
            scope: scope.to_vec(),
            name: ident(&m.ident),
            test,
            inline: m.content.is_some(),
            path_attr: path_attr(&m.attrs),
        }
    }
}

/// A function (or a bodiless `fn` declaration) and the lines it spans. Test functions and
/// declarations are kept too, only so that each `fn name` in the text is matched to its own item
/// (a test `fn draw` before the real one, a trait's `fn send(…);` before its implementation).
#[derive(Debug, Clone)]
struct FnSpan {
    name: String,
    line: usize,
    lines: usize,
    test: bool,
    body: bool,
}

/// What one walk of a file finds.
#[derive(Default)]
struct Walk {
    scope: Vec<String>,
    written: Vec<Written>,
    children: Vec<ChildMod>,
    fns: Vec<FnSpan>,
    /// Items defined (not imported), by the module they are defined in.
    defined: Vec<(Vec<String>, String)>,
    /// The qualified self of the path about to be visited (`<T as Trait>::NAME`): how many of its
    /// segments name the trait (none for `<T>::NAME`, whose path names no module).
    qself_position: Option<usize>,
}

/// Whether the attributes make the item test-only: `#[test]` (any `…::test`), `#[cfg(test)]`,
/// `#[cfg(all(…, test, …))]`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        if path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        if !path.is_ident("cfg") {
            return false;
        }
        let Ok(meta) = attr.parse_args::<syn::Meta>() else {
            return false;
        };
        cfg_means_test(&meta)
    })
}

fn cfg_means_test(meta: &syn::Meta) -> bool {
    match meta {
        syn::Meta::Path(p) => p.is_ident("test"),
        syn::Meta::List(list) if list.path.is_ident("all") => list
            .parse_args_with(
                syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
            )
            .is_ok_and(|inner| inner.iter().any(cfg_means_test)),
        _ => false,
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item;
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The attributes of an impl's or a trait's member (the two enums have the same kinds).
macro_rules! member_attrs {
    ($item:expr, $kind:ident) => {
        match $item {
            syn::$kind::Const(i) => &i.attrs[..],
            syn::$kind::Fn(i) => &i.attrs[..],
            syn::$kind::Type(i) => &i.attrs[..],
            syn::$kind::Macro(i) => &i.attrs[..],
            _ => &[],
        }
    };
}

/// The file a `#[path = "…"]` attribute names for a module.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
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

/// The name an item defines in its module, if it defines one.
fn item_name(item: &syn::Item) -> Option<String> {
    use syn::Item;
    let name = match item {
        Item::Const(i) => &i.ident,
        Item::Enum(i) => &i.ident,
        Item::Fn(i) => &i.sig.ident,
        Item::Mod(i) => &i.ident,
        Item::Static(i) => &i.ident,
        Item::Struct(i) => &i.ident,
        Item::Trait(i) => &i.ident,
        Item::TraitAlias(i) => &i.ident,
        Item::Type(i) => &i.ident,
        Item::Union(i) => &i.ident,
        Item::Macro(i) => i.ident.as_ref()?,
        _ => return None,
    };
    Some(ident(name))
}

fn ident(i: &syn::Ident) -> String {
    i.unraw().to_string()
}

impl Walk {
    fn write(&mut self, segments: Vec<String>, leading_colon: bool) {
        let anchor = segments.first().cloned().unwrap_or_default();
        self.written.push(Written {
            scope: self.scope.clone(),
            segments,
            leading_colon,
            line: 0,
            anchor,
            alias: None,
        });
    }

    /// The leaves of a `use` tree, each with the name it brings in.
    fn use_tree(&mut self, prefix: &mut Vec<String>, leading: bool, tree: &syn::UseTree) {
        let leaf = |walk: &mut Walk, last: &syn::Ident, alias: Option<String>| {
            let mut segments = prefix.clone();
            let name = ident(last);
            if name != "self" {
                segments.push(name);
            }
            walk.written.push(Written {
                scope: walk.scope.clone(),
                segments,
                leading_colon: leading,
                line: 0,
                anchor: ident(last),
                alias: Some(alias),
            });
        };
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(ident(&p.ident));
                self.use_tree(prefix, leading, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let alias = if n.ident == "self" {
                    prefix.last().cloned()
                } else {
                    Some(ident(&n.ident))
                };
                leaf(self, &n.ident, alias);
            }
            syn::UseTree::Rename(r) => {
                leaf(self, &r.ident, Some(ident(&r.rename)));
                // Found by the new name, the last word of the leaf.
                if let Some(last) = self.written.last_mut() {
                    last.anchor = ident(&r.rename);
                }
            }
            syn::UseTree::Glob(_) => {
                self.written.push(Written {
                    scope: self.scope.clone(),
                    segments: prefix.clone(),
                    leading_colon: leading,
                    line: 0,
                    anchor: prefix.last().cloned().unwrap_or_default(),
                    alias: Some(None),
                });
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, leading, tree);
                }
            }
        }
    }

    /// Paths inside tokens that are not parsed as code (macro bodies, attribute arguments):
    /// every run `a::b…` of two segments or more, or with a leading `::`.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            let is_colons = |at: usize| {
                matches!((trees.get(at), trees.get(at + 1)),
                    (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                        if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':')
            };
            // `::` after a closing `>` continues a path (`Server::<Alive>::NAME`, `<T as Tr>::X`)
            // rather than starting one; after `->` or `=>` it starts one.
            let punct = |at: Option<usize>| match at.and_then(|at| trees.get(at)) {
                Some(TokenTree::Punct(p)) => Some((p.as_char(), p.spacing())),
                _ => None,
            };
            let continues = punct(i.checked_sub(1)).is_some_and(|(c, _)| c == '>')
                && !matches!(punct(i.checked_sub(2)), Some(('-' | '=', Spacing::Joint)));
            let leading =
                !continues && is_colons(i) && matches!(trees.get(i + 2), Some(TokenTree::Ident(_)));
            let start = if leading { i + 2 } else { i };
            if let Some(TokenTree::Ident(first)) = trees.get(start) {
                let mut segments = vec![ident(first)];
                let mut at = start + 1;
                while is_colons(at) {
                    let Some(TokenTree::Ident(next)) = trees.get(at + 2) else {
                        break;
                    };
                    segments.push(ident(next));
                    at += 3;
                }
                if segments.len() > 1 || leading {
                    self.write(segments, leading);
                }
                i = at;
                continue;
            }
            if let Some(TokenTree::Group(g)) = trees.get(i) {
                self.tokens(g.stream());
            }
            i += 1;
        }
    }

    fn function(&mut self, name: &syn::Ident, body: bool) {
        self.fns.push(FnSpan {
            name: ident(name),
            line: 0,
            lines: 0,
            test: false,
            body,
        });
    }

    /// Walks test code as `exempt` does, other code as it is.
    fn exempt_if(&mut self, test: bool, walk: impl FnOnce(&mut Walk)) {
        if test {
            self.exempt(walk);
        } else {
            walk(self);
        }
    }

    /// Walks test code (exempt from every rule): only its functions are kept, marked as tests.
    fn exempt(&mut self, walk: impl FnOnce(&mut Walk)) {
        let (written, children, defined, fns) = (
            self.written.len(),
            self.children.len(),
            self.defined.len(),
            self.fns.len(),
        );
        walk(self);
        self.written.truncate(written);
        self.children.truncate(children);
        self.defined.truncate(defined);
        for f in &mut self.fns[fns..] {
            f.test = true;
        }
    }
}

impl<'ast> Visit<'ast> for Walk {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_test(item_attrs(item)) {
            self.exempt(|walk| visit::visit_item(walk, item));
            if let syn::Item::Mod(m) = item {
                // Still recorded: a test module's own file is left out with it.
                self.children.push(ChildMod::of(&self.scope, m, true));
            }
            return;
        }
        if let Some(name) = item_name(item) {
            self.defined.push((self.scope.clone(), name));
        }
        visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let test = is_test(member_attrs!(item, ImplItem));
        self.exempt_if(test, |walk| visit::visit_impl_item(walk, item));
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let test = is_test(member_attrs!(item, TraitItem));
        self.exempt_if(test, |walk| visit::visit_trait_item(walk, item));
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        self.children.push(ChildMod::of(&self.scope, m, false));
        for attr in &m.attrs {
            self.visit_attribute(attr);
        }
        if let Some((_, items)) = &m.content {
            self.scope.push(ident(&m.ident));
            for item in items {
                self.visit_item(item);
            }
            self.scope.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), u.leading_colon.is_some(), &u.tree);
    }

    fn visit_item_extern_crate(&mut self, e: &'ast syn::ItemExternCrate) {
        let name = ident(&e.ident);
        let alias = match &e.rename {
            Some((_, rename)) => ident(rename),
            None => name.clone(),
        };
        // `extern crate self as x;` names this crate.
        let own = name == "self";
        self.written.push(Written {
            scope: self.scope.clone(),
            segments: vec![if own { "crate".to_string() } else { name }],
            leading_colon: !own,
            line: 0,
            anchor: alias.clone(),
            alias: Some(Some(alias)),
        });
    }

    fn visit_qself(&mut self, qself: &'ast syn::QSelf) {
        visit::visit_qself(self, qself);
        // Set after the type is walked: the next path visited is the one this qualifies.
        self.qself_position = Some(qself.position);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        // `<T as a::Trait>::NAME` names the trait `a::Trait`; `<T>::NAME` names only `T`.
        let named = self.qself_position.take().unwrap_or(path.segments.len());
        if named > 1 || (named == 1 && path.leading_colon.is_some()) {
            let segments = path
                .segments
                .iter()
                .take(named)
                .map(|s| ident(&s.ident))
                .collect();
            self.write(segments, path.leading_colon.is_some());
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.tokens(mac.tokens.clone());
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        self.visit_path(attr.path());
        if let syn::Meta::List(list) = &attr.meta {
            self.tokens(list.tokens.clone());
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.function(&f.sig.ident, true);
        visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.function(&f.sig.ident, true);
        visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        self.function(&f.sig.ident, f.default.is_some());
        visit::visit_trait_item_fn(self, f);
    }

    fn visit_foreign_item_fn(&mut self, f: &'ast syn::ForeignItemFn) {
        self.function(&f.sig.ident, false);
        visit::visit_foreign_item_fn(self, f);
    }
}

// ---------------------------------------------------------------------------------------------
// Lines
// ---------------------------------------------------------------------------------------------
// Spans carry no line here (proc-macro2's `span-locations` would rebuild every proc macro of the
// crate), so lines are found in the text: comments and literals blanked out, each path's word
// searched from where the one before it was found (the walk goes in source order).

/// The text as characters, with comments and the insides of string and char literals blanked
/// (newlines kept), so that words and braces found in it are code.
fn code_only(text: &str) -> Vec<char> {
    let c: Vec<char> = text.chars().collect();
    let mut out = c.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for ch in out.iter_mut().take(to.min(c.len())).skip(from) {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
    };
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            let end = (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len());
            blank(&mut out, i, end);
            i = end;
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            let mut j = i;
            while j < c.len() {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if c[i] == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            let hashes = c[i + 1..].iter().take_while(|&&h| h == '#').count();
            if c.get(i + 1 + hashes) != Some(&'"') {
                i += 1;
                continue;
            }
            let body = i + 2 + hashes;
            let mut j = body;
            while j < c.len() {
                if c[j] == '"'
                    && c[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes
                {
                    break;
                }
                j += 1;
            }
            blank(&mut out, body, j);
            i = j + 1 + hashes;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i + 1, j);
            i = j + 1;
        } else if c[i] == '\'' {
            // A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let end = if next == Some('\\') {
                (i + 2..c.len()).find(|&j| c[j] == '\'')
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    blank(&mut out, i + 1, end);
                    i = end + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

fn is_word(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// Where `word` stands as a whole word in `code`, at or after `from`.
fn find_word(code: &[char], word: &str, from: usize) -> Option<usize> {
    let w: Vec<char> = word.chars().collect();
    if w.is_empty() {
        return None;
    }
    (from..code.len().saturating_sub(w.len() - 1)).find(|&at| {
        code[at..at + w.len()] == w[..]
            && (at == 0 || !is_word(code[at - 1]))
            && code.get(at + w.len()).is_none_or(|&ch| !is_word(ch))
    })
}

fn line_at(code: &[char], at: usize) -> usize {
    code[..at.min(code.len())]
        .iter()
        .filter(|&&ch| ch == '\n')
        .count()
        + 1
}

/// Gives each path its line and each function its line and length.
fn place(text: &str, walk: &mut Walk) {
    let code = code_only(text);
    let mut cursor = 0;
    for w in &mut walk.written {
        let at = find_word(&code, &w.anchor, cursor).or_else(|| find_word(&code, &w.anchor, 0));
        if let Some(at) = at {
            w.line = line_at(&code, at);
            cursor = at + w.anchor.chars().count();
        }
    }
    let mut cursor = 0;
    for f in &mut walk.fns {
        // `fn name`: the name after the keyword, then the body's braces matched.
        let mut from = cursor;
        let start = loop {
            let Some(at) = find_word(&code, &f.name, from) else {
                break None;
            };
            let before: String = code[..at]
                .iter()
                .rev()
                .skip_while(|c| c.is_whitespace())
                .take(2)
                .collect();
            if before == "nf" {
                break Some(at);
            }
            from = at + 1;
        };
        let Some(start) = start else { continue };
        // Past this name: the next function (nested, or another of the same name) is after it.
        cursor = start + f.name.chars().count();
        f.line = line_at(&code, start);
        if !f.body {
            continue;
        }
        let Some(open) = (start..code.len()).find(|&j| code[j] == '{') else {
            continue;
        };
        let mut depth = 0usize;
        let mut close = open;
        for (j, &ch) in code.iter().enumerate().skip(open) {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        f.lines = line_at(&code, close) + 1 - f.line;
    }
}

// ---------------------------------------------------------------------------------------------
// Resolving paths
// ---------------------------------------------------------------------------------------------

/// One source file of the tree being checked.
struct File {
    /// As shown in messages: `src/app/msg.rs`.
    path: String,
    /// Its module path under the crate: `["app", "msg"]`.
    module: Vec<String>,
    walk: Walk,
}

/// The module path of a file under `src/`: `src/app/mod.rs` → `app`, `src/lib.rs` → the root.
fn module_of(path: &str) -> Vec<String> {
    let inner = path.strip_prefix("src/").unwrap_or(path);
    let inner = inner.strip_suffix(".rs").unwrap_or(inner);
    let mut parts: Vec<String> = inner.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod") || parts == ["lib"] || parts == ["main"] {
        parts.pop();
    }
    parts
}

/// The folder a file belongs to: the first step of its module path (`lib`/`main` at the root).
fn folder_of(path: &str) -> String {
    let module = module_of(path);
    match module.first() {
        Some(first) => first.clone(),
        None => module_of_root(path),
    }
}

fn module_of_root(path: &str) -> String {
    path.trim_start_matches("src/")
        .trim_end_matches(".rs")
        .to_string()
}

/// What every file's paths are read against.
struct Resolver {
    /// Outside crates a path may begin with (`std`, the dependencies, `extern crate` names).
    externs: BTreeSet<String>,
    /// Names a `use` (or `extern crate`) brought into a module, as absolute paths.
    aliases: BTreeMap<(Vec<String>, String), Vec<String>>,
    /// Modules declared in each module (`mod x;` and inline `mod x { }`).
    children: BTreeSet<(Vec<String>, String)>,
    /// Modules that are files.
    files: BTreeSet<Vec<String>>,
    /// Items defined in each module.
    defined: BTreeSet<(Vec<String>, String)>,
    /// The crate modules each module imports whole (`use x::*`), as module paths.
    globs: BTreeMap<Vec<String>, Vec<Vec<String>>>,
}

impl Resolver {
    /// The absolute path (`crate::…` or `<outside crate>::…`) that `segments`, written in
    /// `scope`, names; None for a name of no module (a local, a type parameter, `Self::…`).
    fn resolve(&self, scope: &[String], segments: &[String], leading: bool) -> Option<Vec<String>> {
        let first = segments.first()?;
        let rest = &segments[1..];
        if leading {
            return Some(segments.to_vec());
        }
        let join = |base: Vec<String>| -> Vec<String> {
            let mut out = base;
            out.extend(rest.iter().cloned());
            out
        };
        match first.as_str() {
            "crate" | "meshtop" => Some(join(vec!["crate".to_string()])),
            "self" | "super" => {
                let mut at = scope.to_vec();
                let mut steps = 0;
                for s in segments {
                    match s.as_str() {
                        "self" => {}
                        "super" => {
                            at.pop()?;
                        }
                        _ => break,
                    }
                    steps += 1;
                }
                let mut out = vec!["crate".to_string()];
                out.extend(at);
                out.extend(segments[steps..].iter().cloned());
                Some(out)
            }
            "Self" => None,
            _ => {
                if let Some(target) = self.aliases.get(&(scope.to_vec(), first.clone())) {
                    return Some(join(target.clone()));
                }
                if self.children.contains(&(scope.to_vec(), first.clone())) {
                    let mut base = vec!["crate".to_string()];
                    base.extend(scope.iter().cloned());
                    base.push(first.clone());
                    return Some(join(base));
                }
                if let Some(base) = self.through_glob(scope, first) {
                    return Some(join(base));
                }
                if self.externs.contains(first) {
                    return Some(segments.to_vec());
                }
                None
            }
        }
    }

    /// What `name` is in `scope` when a glob (`use crate::*`, `use super::*`) brought it: a module,
    /// an item or an import of a crate module that `scope` imports whole.
    fn through_glob(&self, scope: &[String], name: &str) -> Option<Vec<String>> {
        self.globs.get(scope)?.iter().find_map(|module| {
            let key = (module.clone(), name.to_string());
            if let Some(target) = self.aliases.get(&key) {
                return Some(target.clone());
            }
            (self.children.contains(&key) || self.defined.contains(&key)).then(|| {
                let mut base = vec!["crate".to_string()];
                base.extend(module.iter().cloned());
                base.push(name.to_string());
                base
            })
        })
    }

    /// The file module a crate path lands in, following re-exports (`pub use`) of the modules
    /// it passes through: `crate::app::Msg` re-exported from `app/msg.rs` lands in `app::msg`.
    fn landing(&self, absolute: &[String]) -> Vec<String> {
        let mut path: Vec<String> = absolute[1..].to_vec();
        for _ in 0..16 {
            let deepest = (0..=path.len())
                .rev()
                .find(|&k| self.files.contains(&path[..k]))
                .unwrap_or(0);
            if deepest == path.len() {
                return path;
            }
            let module = path[..deepest].to_vec();
            let name = path[deepest].clone();
            let key = (module.clone(), name.clone());
            // Where the name comes from: an import of it, or (when the module does not define it)
            // a module it imports whole that defines or imports it.
            let from = match self.aliases.get(&key) {
                Some(target) => Some(target.clone()),
                None if !self.defined.contains(&key) => self.globs.get(&module).and_then(|globs| {
                    globs
                        .iter()
                        .find(|g| {
                            let there = ((*g).clone(), name.clone());
                            self.defined.contains(&there) || self.aliases.contains_key(&there)
                        })
                        .map(|g| {
                            let mut target = vec!["crate".to_string()];
                            target.extend(g.iter().cloned());
                            target.push(name.clone());
                            target
                        })
                }),
                None => None,
            };
            match from {
                Some(target) if target.first().is_some_and(|f| f == "crate") => {
                    let mut next = target[1..].to_vec();
                    next.extend(path[deepest + 1..].iter().cloned());
                    if next == path {
                        return module;
                    }
                    path = next;
                }
                _ => return module,
            }
        }
        path
    }
}

// ---------------------------------------------------------------------------------------------
// The checker
// ---------------------------------------------------------------------------------------------

/// One step of the graph "file A names an item of file B" inside one folder.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    folder: String,
    from: String,
    to: String,
    /// Where A names B: `src/app/ask.rs:12`.
    at: String,
}

/// Everything the checker found in a tree.
#[derive(Default, Debug)]
struct Findings {
    /// `file:line: folder X may not name Y (path …)`.
    breaches: Vec<String>,
    edges: Vec<Edge>,
    /// (file, fn, lines, line) for each non-test fn over `LONGEST_FN`.
    long: Vec<(String, String, usize, usize)>,
    /// Files that do not parse.
    unreadable: Vec<String>,
}

/// The crate modules each module imports whole (`use x::*`), as far as the paths resolve now.
fn crate_globs(files: &[File], resolver: &Resolver) -> BTreeMap<Vec<String>, Vec<Vec<String>>> {
    let mut globs: BTreeMap<Vec<String>, Vec<Vec<String>>> = BTreeMap::new();
    for file in files {
        for w in file.walk.written.iter().filter(|w| w.alias == Some(None)) {
            if let Some(absolute) = resolver.resolve(&w.scope, &w.segments, w.leading_colon)
                && absolute.first().is_some_and(|f| f == "crate")
            {
                globs
                    .entry(w.scope.clone())
                    .or_default()
                    .push(absolute[1..].to_vec());
            }
        }
    }
    globs
}

/// The judgement of `absolute` (joined with `::`) for `room`: None if allowed, else the rule
/// (or the path's first two steps when no rule speaks).
fn refused(room: &Room, absolute: &[String]) -> Option<String> {
    let own = ["crate", room.folder];
    if absolute.len() >= 2 && absolute[..2] == own {
        return None;
    }
    let matches = |rule: &str| -> Option<usize> {
        let steps: Vec<&str> = rule.split("::").collect();
        (steps.len() <= absolute.len() && steps.iter().zip(absolute).all(|(a, b)| a == b))
            .then_some(steps.len())
    };
    let best_may = room
        .may
        .iter()
        .flat_map(|list| list.iter())
        .filter_map(|r| matches(r))
        .max();
    let best_never = room
        .never
        .iter()
        .filter_map(|r| matches(r).map(|n| (n, *r)))
        .max_by_key(|(n, _)| *n);
    match (best_may, best_never) {
        (Some(m), Some((n, _))) if m > n => None,
        (_, Some((_, rule))) => Some(rule.to_string()),
        (Some(_), None) => None,
        (None, None) => Some(
            absolute
                .iter()
                .take(2)
                .cloned()
                .collect::<Vec<_>>()
                .join("::"),
        ),
    }
}

/// Parses each (virtual path, text) pair, resolves every path it names, and judges it.
fn check(sources: &[(String, String)], externs: &BTreeSet<String>, rooms: &[Room]) -> Findings {
    let mut findings = Findings::default();
    let mut files = Vec::new();
    for (path, text) in sources {
        match syn::parse_file(text) {
            Ok(ast) => {
                let module = module_of(path);
                let mut walk = Walk {
                    scope: module.clone(),
                    ..Walk::default()
                };
                for attr in &ast.attrs {
                    walk.visit_attribute(attr);
                }
                for item in &ast.items {
                    walk.visit_item(item);
                }
                place(text, &mut walk);
                files.push(File {
                    path: path.clone(),
                    module,
                    walk,
                });
            }
            Err(e) => findings
                .unreadable
                .push(format!("{path}: does not parse: {e}")),
        }
    }

    // Files declared as test modules (`#[cfg(test)] mod tests;`) are left out with them.
    let mut test_files = BTreeSet::new();
    for file in &files {
        let dir = Path::new(&file.path).parent().unwrap_or(Path::new(""));
        let is_index = matches!(
            Path::new(&file.path).file_name().and_then(|n| n.to_str()),
            Some("mod.rs" | "lib.rs" | "main.rs")
        );
        for child in file.walk.children.iter().filter(|c| c.test && !c.inline) {
            let base = if is_index {
                dir.to_path_buf()
            } else {
                dir.join(Path::new(&file.path).file_stem().unwrap_or_default())
            };
            let candidates = match &child.path_attr {
                Some(p) => vec![dir.join(p)],
                None => vec![
                    base.join(format!("{}.rs", child.name)),
                    base.join(&child.name).join("mod.rs"),
                ],
            };
            test_files.extend(candidates.into_iter().map(|p| p.display().to_string()));
        }
    }
    files.retain(|f| !test_files.contains(&f.path));

    let mut resolver = Resolver {
        externs: externs.clone(),
        aliases: BTreeMap::new(),
        children: BTreeSet::new(),
        files: files.iter().map(|f| f.module.clone()).collect(),
        defined: files
            .iter()
            .flat_map(|f| f.walk.defined.iter().cloned())
            .collect(),
        globs: BTreeMap::new(),
    };
    for file in &files {
        for child in file.walk.children.iter().filter(|c| !c.test) {
            resolver
                .children
                .insert((child.scope.clone(), child.name.clone()));
        }
        for w in &file.walk.written {
            if let (Some(Some(name)), [only]) = (&w.alias, w.segments.as_slice())
                && w.leading_colon
            {
                resolver.externs.insert(only.clone());
                resolver
                    .aliases
                    .insert((w.scope.clone(), name.clone()), vec![only.clone()]);
            }
        }
    }
    // Aliases may name each other (`use std::collections; use collections::HashMap;`), or come
    // through a glob (`use crate::*; use widgets::draw;`), in any order: resolve until nothing
    // changes.
    for _ in 0..8 {
        let globs = crate_globs(&files, &resolver);
        let mut changed = globs != resolver.globs;
        resolver.globs = globs;
        for file in &files {
            for w in &file.walk.written {
                let Some(Some(name)) = &w.alias else { continue };
                let key = (w.scope.clone(), name.clone());
                if let Some(absolute) = resolver.resolve(&w.scope, &w.segments, w.leading_colon)
                    && absolute != [name.clone()]
                    && resolver.aliases.get(&key) != Some(&absolute)
                {
                    resolver.aliases.insert(key, absolute);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }

    let mut seen = BTreeSet::new();
    for file in &files {
        let folder = folder_of(&file.path);
        let room = rooms.iter().find(|r| r.folder == folder);
        for w in &file.walk.written {
            let Some(absolute) = resolver.resolve(&w.scope, &w.segments, w.leading_colon) else {
                continue;
            };
            if absolute == ["crate"] {
                continue;
            }
            let written = format!(
                "{}{}",
                if w.leading_colon { "::" } else { "" },
                w.segments.join("::")
            );
            let read = absolute.join("::");
            let verdict = match room {
                Some(room) => refused(room, &absolute),
                None => Some(format!("{read} (folder {folder} has no room in ROOMS)")),
            };
            if let Some(rule) = verdict {
                let line = if read == written {
                    format!(
                        "{}:{}: folder {folder} may not name {rule} (path `{written}`)",
                        file.path, w.line
                    )
                } else {
                    format!(
                        "{}:{}: folder {folder} may not name {rule} (path `{written}`, read as `{read}`)",
                        file.path, w.line
                    )
                };
                if seen.insert(line.clone()) {
                    findings.breaches.push(line);
                }
            }
            if absolute[0] == "crate" {
                let target = resolver.landing(&absolute);
                for depth in 1..file.module.len() {
                    let parent = &file.module[..depth];
                    if target.len() > depth && target[..depth] == *parent {
                        let (from, to) = (&file.module[depth], &target[depth]);
                        if from != to {
                            findings.edges.push(Edge {
                                folder: parent.join("/"),
                                from: from.clone(),
                                to: to.clone(),
                                at: format!("{}:{}", file.path, w.line),
                            });
                        }
                    }
                }
            }
        }
        for f in file.walk.fns.iter().filter(|f| !f.test) {
            if f.lines > LONGEST_FN {
                findings
                    .long
                    .push((file.path.clone(), f.name.clone(), f.lines, f.line));
            }
        }
    }
    findings.edges.sort();
    findings
        .edges
        .dedup_by(|a, b| (&a.folder, &a.from, &a.to) == (&b.folder, &b.from, &b.to));
    findings
}

/// The edges of `edges` that lie on a cycle (inside a strongly connected component), per folder.
fn knotted(edges: &[Edge]) -> Vec<&Edge> {
    let mut by_folder: BTreeMap<&str, Vec<&Edge>> = BTreeMap::new();
    for e in edges {
        by_folder.entry(&e.folder).or_default().push(e);
    }
    let mut out = Vec::new();
    for folder_edges in by_folder.values() {
        let reach = |from: &str, to: &str| -> bool {
            let mut stack = vec![from];
            let mut seen = BTreeSet::new();
            while let Some(n) = stack.pop() {
                if n == to {
                    return true;
                }
                if seen.insert(n) {
                    stack.extend(
                        folder_edges
                            .iter()
                            .filter(|e| e.from == n)
                            .map(|e| e.to.as_str()),
                    );
                }
            }
            false
        };
        out.extend(folder_edges.iter().filter(|e| reach(&e.to, &e.from)));
    }
    out
}

/// A cycle through `edge`, as `a → b → … → a` with where each step is named.
fn cycle_through(edge: &Edge, edges: &[Edge]) -> String {
    let folder: Vec<&Edge> = edges.iter().filter(|e| e.folder == edge.folder).collect();
    // Breadth-first from edge.to back to edge.from.
    let mut came: BTreeMap<&str, &Edge> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([edge.to.as_str()]);
    while let Some(n) = queue.pop_front() {
        if n == edge.from {
            break;
        }
        for e in folder.iter().filter(|e| e.from == n) {
            if e.to != edge.to && !came.contains_key(e.to.as_str()) {
                came.insert(&e.to, e);
                queue.push_back(&e.to);
            }
        }
    }
    let mut steps = vec![edge];
    let mut at = edge.from.as_str();
    let mut back = Vec::new();
    while at != edge.to {
        let Some(e) = came.get(at) else { break };
        back.push(*e);
        at = &e.from;
    }
    steps.extend(back.into_iter().rev());
    let names: Vec<String> = steps
        .iter()
        .map(|e| format!("{} ({})", e.from, e.at))
        .collect();
    format!("{}: {} → {}", edge.folder, names.join(" → "), edge.from)
}

// ---------------------------------------------------------------------------------------------
// The tree
// ---------------------------------------------------------------------------------------------

/// Every `.rs` file of every crate, as the one tree's (`src/…` path, text): `common::source_tree`
/// says how the crates are read as the tree the rooms were folders of.
fn tree() -> Vec<(String, String)> {
    crate::common::source_tree::files().to_vec()
}

/// `std`, `core`, `alloc` and the crates' dependencies (dev-dependencies are not for the source).
fn externs() -> BTreeSet<String> {
    crate::common::source_tree::externs()
}

// ---------------------------------------------------------------------------------------------
// The rules, held on the tree
// ---------------------------------------------------------------------------------------------

fn findings() -> &'static Findings {
    static FINDINGS: std::sync::OnceLock<Findings> = std::sync::OnceLock::new();
    FINDINGS.get_or_init(|| {
        let findings = check(&tree(), &externs(), ROOMS);
        assert!(
            findings.unreadable.is_empty(),
            "{}",
            findings.unreadable.join("\n")
        );
        findings
    })
}

/// Each knot, with a cycle through it.
fn knot_problems(edges: &[Edge]) -> Vec<String> {
    knotted(edges)
        .into_iter()
        .map(|edge| {
            format!(
                "files name each other round: {}",
                cycle_through(edge, edges)
            )
        })
        .collect()
}

/// Each non-test function over `LONGEST_FN` lines, where it starts.
fn long_problems(long: &[(String, String, usize, usize)]) -> Vec<String> {
    long.iter()
        .map(|(file, name, lines, line)| {
            format!("{file}:{line}: fn {name} spans {lines} lines (at most {LONGEST_FN}): split it into named steps")
        })
        .collect()
}

#[test]
fn every_path_is_named_from_a_folder_that_may_name_it() {
    let breaches = &findings().breaches;
    assert!(
        breaches.is_empty(),
        "paths that cross the layering (docs/architecture.md; the allow-lists are ROOMS in tests/layering.rs):\n{}",
        breaches.join("\n")
    );
}

#[test]
fn no_folder_has_files_naming_each_other_round() {
    let problems = knot_problems(&findings().edges);
    assert!(
        problems.is_empty(),
        "move what both files need to a file below them (types and errors at the bottom):\n{}",
        problems.join("\n")
    );
}

#[test]
fn no_function_is_longer_than_one_screenful_and_a_half() {
    let problems = long_problems(&findings().long);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// The self-test: each way round the fence (those the old text-matching test missed among them)
// is planted in a tree of its own and caught
// ---------------------------------------------------------------------------------------------

fn planted(files: &[(&str, &str)]) -> Findings {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect();
    let findings = check(&files, &externs(), ROOMS);
    assert!(findings.unreadable.is_empty(), "{:?}", findings.unreadable);
    findings
}

/// A planted file that must produce no breach.
fn passes(path: &str, text: &str) {
    let findings = planted(&[(path, text)]);
    assert!(
        findings.breaches.is_empty(),
        "{path}: expected no breach, found {:#?}",
        findings.breaches
    );
}

/// A planted file must produce a breach starting with `expected` (among any others).
fn caught(path: &str, text: &str, expected: &str) {
    let findings = planted(&[(path, text)]);
    assert!(
        findings.breaches.iter().any(|b| b.starts_with(expected)),
        "{path}: expected a breach starting with {expected:?}, found {:#?}",
        findings.breaches
    );
}

#[test]
fn a_group_is_read_leaf_by_leaf() {
    caught(
        "src/app/evade.rs",
        "use crate::{mesh, widgets};\npub fn f() { widgets::draw(); }\n",
        "src/app/evade.rs:1: folder app may not name crate::widgets (path `crate::widgets`)",
    );
    // The inline use of the alias is read through it too.
    caught(
        "src/app/evade.rs",
        "use crate::{mesh, widgets};\npub fn f() { widgets::draw(); }\n",
        "src/app/evade.rs:2: folder app may not name crate::widgets (path `widgets::draw`, read as `crate::widgets::draw`)",
    );
}

#[test]
fn a_super_chain_is_read_from_the_files_module() {
    caught(
        "src/app/evade.rs",
        "pub fn f() {\n    super::super::widgets::draw();\n}\n",
        "src/app/evade.rs:2: folder app may not name crate::widgets",
    );
    caught(
        "src/app/keys/evade.rs",
        "use super::super::super::widgets as w;\n",
        "src/app/keys/evade.rs:1: folder app may not name crate::widgets",
    );
    caught(
        "src/mesh/evade.rs",
        "pub fn f() { self::super::super::workspace::read(); }\n",
        "src/mesh/evade.rs:1: folder mesh may not name crate::workspace",
    );
}

#[test]
fn a_glob_brings_its_modules_into_scope() {
    let lib = ("src/lib.rs", "pub mod app;\npub mod widgets;\n");
    let findings = planted(&[
        lib,
        (
            "src/app/evade.rs",
            "use crate::*;\npub fn f() { widgets::draw(); }\n",
        ),
    ]);
    assert_eq!(
        findings.breaches,
        [
            "src/app/evade.rs:2: folder app may not name crate::widgets (path `widgets::draw`, read as `crate::widgets::draw`)"
        ]
    );
    // Through a glob of the parent, and an import of what the glob brought.
    let findings = planted(&[
        lib,
        ("src/app/mod.rs", "pub mod evade;\n"),
        (
            "src/app/evade.rs",
            "use super::super::*;\nuse widgets::draw as paint;\npub fn f() { paint(); }\n",
        ),
    ]);
    assert_eq!(
        findings.breaches,
        [
            "src/app/evade.rs:2: folder app may not name crate::widgets (path `widgets::draw`, read as `crate::widgets::draw`)"
        ]
    );
}

#[test]
fn a_renamed_crate_is_followed() {
    caught(
        "src/app/evade.rs",
        "use crate as c;\npub fn f() { c::widgets::draw(); }\n",
        "src/app/evade.rs:2: folder app may not name crate::widgets (path `c::widgets::draw`, read as `crate::widgets::draw`)",
    );
    caught(
        "src/app/evade.rs",
        "extern crate self as me;\npub fn f() { me::tui::run(); }\n",
        "src/app/evade.rs:2: folder app may not name crate::tui",
    );
}

#[test]
fn an_outside_system_is_caught_however_it_is_spelled() {
    caught(
        "src/app/evade.rs",
        "use std::process::{Command};\n",
        "src/app/evade.rs:1: folder app may not name std::process",
    );
    caught(
        "src/mesh/evade.rs",
        "pub fn f() { let _ = std::process::Command::new(\"sh\"); }\n",
        "src/mesh/evade.rs:1: folder mesh may not name std::process",
    );
    caught(
        "src/mesh/evade.rs",
        "use std::{fs as disk};\npub fn f() { let _ = disk::read(\"x\"); }\n",
        "src/mesh/evade.rs:1: folder mesh may not name std::fs",
    );
    caught(
        "src/converge/evade.rs",
        "extern crate rusqlite;\n",
        "src/converge/evade.rs:1: folder converge may not name rusqlite",
    );
    caught(
        "src/widgets/evade.rs",
        "pub fn f() -> String {\n    format!(\"{:?}\", ::std::thread::current())\n}\n",
        "src/widgets/evade.rs:2: folder widgets may not name std::thread",
    );
    caught(
        "src/app/evade.rs",
        "pub fn f() { tokio::spawn(async {}); }\n",
        "src/app/evade.rs:1: folder app may not name tokio",
    );
}

#[test]
fn test_code_is_exempt_wherever_it_is_and_nothing_after_it() {
    let text = "#[cfg(test)]\nmod tests {\n    use std::fs;\n}\n\nuse crate::widgets::draw;\n\n#[test]\nfn t() { std::fs::read(\"x\"); }\n";
    let findings = planted(&[("src/app/evade.rs", text)]);
    assert_eq!(
        findings.breaches,
        [
            "src/app/evade.rs:6: folder app may not name crate::widgets (path `crate::widgets::draw`)"
        ]
    );
    // A test module in its own file is left out with its declaration.
    let findings = planted(&[
        (
            "src/mesh/decide.rs",
            "#[cfg(test)]\n#[path = \"decide_tests.rs\"]\nmod tests;\n",
        ),
        ("src/mesh/decide_tests.rs", "use std::fs;\n"),
        ("src/mesh/other.rs", "use std::fs;\n"),
    ]);
    assert_eq!(
        findings.breaches,
        ["src/mesh/other.rs:1: folder mesh may not name std::fs (path `std::fs`)"]
    );
}

#[test]
fn a_knot_is_found_and_printed_as_its_cycle() {
    let knot = [
        ("src/mesh/mod.rs", "mod a;\nmod b;\nmod c;\n"),
        ("src/mesh/a.rs", "use super::b::B;\npub struct A;\n"),
        (
            "src/mesh/b.rs",
            "pub struct B;\npub fn f() { super::c::g(); }\n",
        ),
        (
            "src/mesh/c.rs",
            "pub fn g() -> crate::mesh::a::A { super::a::A }\n",
        ),
    ];
    let problems = knot_problems(&planted(&knot).edges);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(
        problems.contains(&"files name each other round: mesh: a (src/mesh/a.rs:1) → b (src/mesh/b.rs:2) → c (src/mesh/c.rs:1) → a".to_string()),
        "{problems:#?}"
    );
    // The same files in one direction (c no longer names a) are no knot.
    let mut line = knot;
    line[3] = ("src/mesh/c.rs", "pub fn g() {}\n");
    let findings = planted(&line);
    assert_eq!(findings.edges.len(), 2, "{:#?}", findings.edges);
    assert!(knot_problems(&findings.edges).is_empty());
}

#[test]
fn the_index_and_its_re_exports_are_no_knot() {
    // b names A through the index's re-export: an edge b → a; the index itself is no node.
    let findings = planted(&[
        (
            "src/mesh/mod.rs",
            "mod a;\nmod b;\npub use a::A;\npub use b::B;\npub fn both() -> (A, B) { (A, B) }\n",
        ),
        ("src/mesh/a.rs", "pub struct A;\n"),
        ("src/mesh/b.rs", "use super::A;\npub struct B(pub A);\n"),
    ]);
    let edges: Vec<(&str, &str)> = findings
        .edges
        .iter()
        .map(|e| (e.from.as_str(), e.to.as_str()))
        .collect();
    assert_eq!(edges, [("b", "a")]);
    assert!(knot_problems(&findings.edges).is_empty());
}

#[test]
fn a_name_re_exported_by_a_glob_is_followed_to_its_file() {
    let findings = planted(&[
        ("src/mesh/mod.rs", "mod a;\nmod b;\npub use a::*;\n"),
        (
            "src/mesh/a.rs",
            "pub struct A;\npub fn f() { super::b::g(); }\n",
        ),
        ("src/mesh/b.rs", "pub fn g() -> super::A { super::A }\n"),
    ]);
    assert_eq!(knot_problems(&findings.edges).len(), 2);
}

#[test]
fn the_backends_never_name_the_disk_reader() {
    caught(
        "src/backends/state/evade.rs",
        "use crate::workspace::stat_cache::{CachedDigest, StatKey};\n",
        "src/backends/state/evade.rs:1: folder backends may not name crate::workspace",
    );
    caught(
        "src/backends/evade.rs",
        "pub fn f() -> super::super::workspace::stat_cache::StatKey { todo!() }\n",
        "src/backends/evade.rs:1: folder backends may not name crate::workspace",
    );
    // What the backends may name of the domain stays open.
    passes(
        "src/backends/state/fine.rs",
        "use crate::mesh::file_stat::{CachedDigest, StatKey};\n",
    );
}

#[test]
fn a_qualified_path_names_its_trait_and_nothing_after_it() {
    // `<T as Trait>::item` names the trait's path.
    caught(
        "src/app/evade.rs",
        "pub fn f() { let _ = <u8 as crate::widgets::Draw>::draw; }\n",
        "src/app/evade.rs:1: folder app may not name crate::widgets (path `crate::widgets::Draw`)",
    );
    // `<T>::NAME` names T (checked as a type of its own), not a module `NAME`.
    passes(
        "src/backends/fine.rs",
        "pub fn f() -> &'static str { <Server<Alive>>::NAME }\n",
    );
    // The same spelled inside a macro's tokens.
    passes(
        "src/backends/fine.rs",
        "pub fn f() -> String { format!(\"/{}/Check\", Server::<Alive>::NAME) }\n",
    );
    caught(
        "src/mesh/evade.rs",
        "macro_rules! m { () => { fn f() -> ::std::fs::File { todo!() } }; }\n",
        "src/mesh/evade.rs:1: folder mesh may not name std::fs",
    );
    caught(
        "src/app/evade.rs",
        "pub fn f() -> &'static str { <crate::widgets::Server>::NAME }\n",
        "src/app/evade.rs:1: folder app may not name crate::widgets (path `crate::widgets::Server`)",
    );
}

#[test]
fn a_long_function_is_caught_wherever_its_name_stands() {
    let body = |lines: usize| "    let _x = 1;\n".repeat(lines - 2);
    // A test function and a trait's declaration of the same name come first: each `fn long` in
    // the text is matched to its own item, so the real one is still measured.
    let text = format!(
        "#[cfg(test)]\nmod tests {{\n    fn long() {{}}\n    fn long_test() {{\n{}}}\n}}\n\npub trait Long {{\n    fn long(&self);\n}}\n\npub fn long() {{\n{}}}\n\npub fn fits() {{\n{}}}\n\n#[test]\nfn long_test() {{\n{}}}\n",
        body(300),
        body(121),
        body(120),
        body(300)
    );
    let at = 1 + text
        .lines()
        .position(|l| l == "pub fn long() {")
        .expect("the long function");
    let findings = planted(&[("src/mesh/long.rs", &text)]);
    let long: Vec<(&str, usize, usize)> = findings
        .long
        .iter()
        .map(|(_, name, lines, line)| (name.as_str(), *lines, *line))
        .collect();
    assert_eq!(long, [("long", 121, at)]);
    assert_eq!(
        long_problems(&findings.long),
        [format!(
            "src/mesh/long.rs:{at}: fn long spans 121 lines (at most 120): split it into named steps"
        )]
    );
}

#[test]
fn clean_code_passes() {
    let findings = planted(&[
        (
            "src/widgets/clean.rs",
            "use std::collections::BTreeMap;\nuse ratatui::Frame;\nuse crate::app::state::AppState;\nuse crate::mesh::model::Mesh;\n\npub fn draw(_f: &mut Frame, _s: &AppState, _m: &Mesh) -> BTreeMap<String, String> {\n    let _ = format!(\"{}\", crate::timefmt::age(1));\n    BTreeMap::new()\n}\n",
        ),
        (
            "src/mesh/clean.rs",
            "use std::fmt;\nuse super::model::Module;\n\npub struct Name(pub String);\nimpl fmt::Display for Name {\n    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { write!(f, \"{}\", self.0) }\n}\npub fn of(m: &Module) -> Option<Name> { let _ = m; None }\npub fn max() -> u8 { <u8>::MAX }\n",
        ),
    ]);
    assert!(findings.breaches.is_empty(), "{:#?}", findings.breaches);
    assert!(findings.long.is_empty());
}

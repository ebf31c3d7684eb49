//! The target is one seam (`src/converge/targets/`): outside it, only the mesh model (which declares
//! the kinds) and the mesh file's reader (which reads them) name a target kind. Everybody else asks
//! the seam — its answers (`delivery()`, `pushes_to()`, `host_images_answer()`…) and its words
//! (`describe()`: the kind word, the place, `acting_on()`, what a send does; each machine's kind,
//! display name and what to know before a send) — so that a third kind is one more file there.
//!
//! The fence reads every file under `src/` as Rust (`syn`, as `tests/layering.rs` does), test code
//! included, and refuses, outside the seam, the model and the reader:
//! - **paths** that name a kind: a variant of the model's `enum Target` (`Target::Docker`,
//!   `Spec::Kubernetes { .. }`, `T::Docker` after `use … Target as T`, a variant imported by name or
//!   by a glob), the model's `Target` itself however it is imported, an enum of one's own that
//!   mirrors the kinds (two variants or more named as kinds; another enum's variant that happens to
//!   share a kind's name, as a builder's `Endpoint::Ssh`, is no kind); the model's `Target` read through the mesh (`mesh.default_target()`,
//!   `mesh.target(name)`);
//! - **words**: a string literal that is a kind's word (`"docker"`, `"Kubernetes"`, any case), and,
//!   outside `src/backends/`, a literal that names a kind as a word in a sentence (`"acting on
//!   Kubernetes {place}"`). The backends are the outside systems themselves: there "Docker" is the
//!   daemon bollard talks to and "Kubernetes" the API kube talks to, which are no target (the layering
//!   fence keeps the engine out of them); words that are parts of other names (`Dockerfile`,
//!   `.dockerignore`, `docker-manifest-digest`, `docker.sock`) are not kinds;
//! - **comparisons** of a kind (`.kind`, `.kind()`, a binding named `kind`) with a string literal:
//!   `==`/`!=`, `match` arms, `matches!`, `.eq(…)`, `.starts_with(…)`…: a kind is carried as the
//!   seam's answer, never read back from its word;
//! - **predicates** named for a kind: `is_docker`, `on_kubernetes`, `docker_target`, `IsDocker`…;
//! - **identifiers**, outside `src/backends/` (each backend names its own outside system), whose
//!   words (snake_case and CamelCase split) include a kind's word or a word of [`KIND_WORDS`]: one
//!   kind's place, machines, tools or delivery (`namespace`, `workload`, `kubectl`, `KindLoaded`),
//!   which travel as the seam's values (`targets::Overrides`, `Delivery`, `Machine`);
//! - **flags**: a clap flag (`#[arg(long …)]`) named so, or `--context` (a Kubernetes context:
//!   `context` alone is the build context's word and stays free in identifiers); a kind's flags are
//!   declared in its folder under the seam and flattened into the command line.
//!
//! Each exception below names its file, what it excuses and why; the test fails when one excuses
//! nothing (the reason went away, so must the exception). Doc comments are not read: they explain.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};

use crate::common::source_tree::rust_files;

/// Where a kind may be named: the seam, the mesh file's reader, the model that declares the kinds.
const ALLOWED: &[&str] = &[
    "src/converge/targets/",
    "src/workspace/file",
    "src/mesh/model.rs",
];

/// Words of one kind's place, machines, tools or delivery, refused in identifiers outside the
/// seam beside the kinds' own words (read from the model). Each is Kubernetes' and has a seam
/// word instead: `kube`, `kubectl`, `kubeconfig`, `k8s` (its client and tools: the seam connects),
/// `namespace` (its place: `targets::Overrides`, `describe()`), `workload` (its machines: the
/// seam's `Machine`). Left out on purpose: `context` (the build context's word across
/// `workspace/`, and std's `Context`; refused as a flag only), `container` (what every kind runs),
/// `cluster` (Nomad's and ECS's word too). `kind` followed by `load`/`loaded` is the kind
/// cluster's loader ([`KIND_PAIRS`]).
const KIND_WORDS: &[&str] = &[
    "kube",
    "kubectl",
    "kubeconfig",
    "k8s",
    "namespace",
    "namespaces",
    "workload",
    "workloads",
];

/// Two words that name a kind's delivery together, though neither does alone.
const KIND_PAIRS: &[(&str, &str)] = &[("kind", "load"), ("kind", "loaded"), ("kind", "loads")];

/// Words that are parts of other names when they follow a kind's word (`DockerIgnore`: the
/// `.dockerignore` file a build reads, not the kind).
const NOT_KIND_AFTER: &[(&str, &str)] = &[("docker", "ignore")];

/// The flag word refused beside [`KIND_WORDS`] (a Kubernetes context).
const KIND_FLAGS: &[&str] = &["context"];

/// Crates whose own items are named like a kind (bollard's `Docker`: the daemon's client).
const LOOK_ALIKES: &[&str] = &["bollard"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rule {
    /// A path (or a variant of one's own) that names a kind or the model's `Target`.
    Path,
    /// A literal that is a kind's word.
    Word,
    /// A literal that names a kind in a sentence (outside `src/backends/`).
    Sentence,
    /// A kind compared with (or matched on) a literal.
    Compared,
    /// A name that says "is it this kind?".
    Predicate,
    /// An identifier with a kind's word, or one of its place's, machines' or delivery's.
    Identifier,
    /// A command-line flag named for a kind's place.
    Flag,
}

/// One place that names a kind: where (file, the function it is in) and what.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Finding {
    file: String,
    rule: Rule,
    what: String,
    within: String,
}

/// A finding let through: in `file`, of `rule`, whose `what` contains `what`.
struct Exception {
    file: &'static str,
    rule: Rule,
    what: &'static str,
    #[allow(dead_code)]
    why: &'static str,
}

const EXCEPTIONS: &[Exception] = &[
    Exception {
        file: "src/backends/daemon/buildkit.rs",
        rule: Rule::Word,
        what: "docker",
        why: "the HTTP Host header of a request to the daemon's socket (moby's client sends the \
              same placeholder host), not a target",
    },
    Exception {
        file: "src/backends/daemon/session.rs",
        rule: Rule::Word,
        what: "docker",
        why: "the HTTP Host header of the session upgrade to the daemon's socket, not a target",
    },
    Exception {
        file: "src/backends/daemon/workers.rs",
        rule: Rule::Word,
        what: "docker",
        why: "the HTTP Host header of the /grpc upgrade to the daemon's socket, not a target",
    },
    Exception {
        file: "src/mesh/builders.rs",
        rule: Rule::Identifier,
        what: "docker_host",
        why: "DOCKER_HOST (with DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) read by the builders' one \
              endpoint grammar: the docker CLI's environment, not a target",
    },
    Exception {
        file: "src/backends/buildx.rs",
        rule: Rule::Word,
        what: "docker",
        why: "the docker CLI, run as `docker buildx` (a builder), not a target",
    },
    Exception {
        file: "src/backends/daemon/ssh.rs",
        rule: Rule::Word,
        what: "docker",
        why: "the docker CLI run on a builder's host (`docker system dial-stdio`), as the docker CLI dials ssh://, not a target",
    },
    Exception {
        file: "src/mesh/builders.rs",
        rule: Rule::Identifier,
        what: "the_docker_cli",
        why: "a test that builders' endpoints read as the docker CLI writes DOCKER_HOST: the \
              docker CLI's grammar, not a target",
    },
    Exception {
        file: "src/converge/build.rs",
        rule: Rule::Sentence,
        what: "`docker buildx`",
        why: "names the buildx plugin a multi-platform build needs, whatever the target",
    },
    Exception {
        file: "src/workspace/import/skaffold.rs",
        rule: Rule::Word,
        what: "docker",
        why: "skaffold's own key for an artifact's Dockerfile build (`docker:` in skaffold.yaml), \
              a word of the file `init` reads, not a target",
    },
];

/// The kinds as the model declares them: the variants of `pub enum Target` in `src/mesh/model.rs`.
/// Their words are the variants' names in lower case (as `Target::kind` writes them).
#[derive(Debug, Clone)]
struct Kinds {
    variants: Vec<String>,
}

impl Kinds {
    fn of_model(text: &str) -> Kinds {
        let file = syn::parse_file(text).expect("src/mesh/model.rs parses");
        let variants = file
            .items
            .iter()
            .find_map(|item| match item {
                syn::Item::Enum(e) if e.ident == "Target" => Some(
                    e.variants
                        .iter()
                        .map(|v| v.ident.to_string())
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .expect("the model declares `enum Target`");
        Kinds { variants }
    }

    fn words(&self) -> impl Iterator<Item = String> + '_ {
        self.variants.iter().map(|v| v.to_lowercase())
    }

    fn is_variant(&self, name: &str) -> bool {
        self.variants.iter().any(|v| v == name)
    }

    /// A literal that is a kind's word (any case, blanks around it aside).
    fn is_word(&self, literal: &str) -> bool {
        let literal = literal.trim().to_lowercase();
        self.words().any(|w| w == literal)
    }

    /// A literal that names a kind as a word of its own: not a part of another name (letters,
    /// digits, `_`, `-`, `.`, `/`, `:` around it: `Dockerfile`, `docker-manifest-digest`,
    /// `docker.sock`, `ssh://`).
    fn in_sentence(&self, literal: &str) -> bool {
        let lower = literal.to_lowercase();
        let part_of_a_name = |c: Option<char>| {
            c.is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ':'))
        };
        self.words().any(|word| {
            lower.match_indices(&word).any(|(at, _)| {
                !part_of_a_name(lower[..at].chars().next_back())
                    && !part_of_a_name(lower[at + word.len()..].chars().next())
            })
        })
    }

    /// The kind's word (or one of [`KIND_WORDS`], [`KIND_PAIRS`]) in a name's words, if any.
    fn word_in(&self, name: &str) -> Option<String> {
        let words = segments_of(name);
        words.iter().enumerate().find_map(|(i, word)| {
            let after = words.get(i + 1).map(String::as_str).unwrap_or_default();
            if NOT_KIND_AFTER.contains(&(word.as_str(), after)) {
                return None;
            }
            if self.is_word(word) || KIND_WORDS.contains(&word.as_str()) {
                Some(word.clone())
            } else if KIND_PAIRS.contains(&(word.as_str(), after)) {
                Some(format!("{word} {after}"))
            } else {
                None
            }
        })
    }

    /// A name that asks or says which kind: a snake or camel segment that is a kind's word, after a
    /// predicate's word (`is_docker`, `on_kubernetes`, `IsDocker`) or before a kind's
    /// (`docker_target`, `kubernetes_only`).
    fn is_predicate(&self, name: &str) -> bool {
        const BEFORE: &[&str] = &["is", "on", "uses", "for", "targets", "via", "has", "when"];
        const AFTER: &[&str] = &["target", "kind", "only", "specific", "mode"];
        let segments = segments_of(name);
        segments.windows(2).any(|pair| {
            (BEFORE.contains(&pair[0].as_str()) && self.is_word(&pair[1]))
                || (self.is_word(&pair[0]) && AFTER.contains(&pair[1].as_str()))
        })
    }
}

/// `is_docker` → [is, docker]; `IsDocker` → [is, docker].
fn segments_of(name: &str) -> Vec<String> {
    let mut segments = Vec::new();
    let mut current = String::new();
    for c in name.chars() {
        if c == '_' {
            segments.push(std::mem::take(&mut current));
        } else if c.is_uppercase() && !current.is_empty() {
            segments.push(std::mem::take(&mut current));
            current.extend(c.to_lowercase());
        } else {
            current.extend(c.to_lowercase());
        }
    }
    segments.push(current);
    segments.retain(|s| !s.is_empty());
    segments
}

/// Methods that leave a kind a kind (`kind.as_str()`, `kind().to_lowercase()`).
const PEEL: &[&str] = &[
    "as_str",
    "as_deref",
    "as_ref",
    "to_string",
    "to_owned",
    "to_lowercase",
    "to_ascii_lowercase",
    "to_uppercase",
    "trim",
    "clone",
    "unwrap_or_default",
    "borrow",
];

/// Comparisons written as methods (`kind.eq("docker")`, `kind.starts_with("kube")`).
const COMPARING: &[&str] = &[
    "eq",
    "ne",
    "eq_ignore_ascii_case",
    "starts_with",
    "ends_with",
    "contains",
];

fn named_kind(name: &str) -> bool {
    name == "kind" || name.ends_with("_kind")
}

/// Whether `e` is a kind: `.kind`, `.kind()`, a binding named `kind`, through references,
/// parentheses and the methods of [`PEEL`].
fn is_kind(e: &syn::Expr) -> bool {
    use syn::Expr;
    match e {
        Expr::Reference(r) => is_kind(&r.expr),
        Expr::Paren(p) => is_kind(&p.expr),
        Expr::Unary(u) => matches!(u.op, syn::UnOp::Deref(_)) && is_kind(&u.expr),
        Expr::MethodCall(m) if m.args.is_empty() => {
            named_kind(&m.method.to_string())
                || (PEEL.contains(&m.method.to_string().as_str()) && is_kind(&m.receiver))
        }
        Expr::Field(f) => matches!(&f.member, syn::Member::Named(n) if named_kind(&n.to_string())),
        Expr::Path(p) => {
            p.qself.is_none()
                && p.path
                    .get_ident()
                    .is_some_and(|i| named_kind(&i.to_string()))
        }
        _ => false,
    }
}

/// The string literal `e` is (through references and parentheses).
fn literal(e: &syn::Expr) -> Option<String> {
    use syn::Expr;
    match e {
        Expr::Reference(r) => literal(&r.expr),
        Expr::Paren(p) => literal(&p.expr),
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) => Some(s.value()),
        _ => None,
    }
}

/// The string literals a pattern matches (`"a" | "b"`, `("a")`, `&"a"`, `"a" if …`).
fn pattern_literals(p: &syn::Pat) -> Vec<String> {
    use syn::Pat;
    match p {
        Pat::Lit(l) => literal(&syn::Expr::Lit(l.clone())).into_iter().collect(),
        Pat::Or(or) => or.cases.iter().flat_map(pattern_literals).collect(),
        Pat::Paren(p) => pattern_literals(&p.pat),
        Pat::Reference(r) => pattern_literals(&r.pat),
        Pat::Guard(g) => pattern_literals(&g.pat),
        _ => Vec::new(),
    }
}

/// `matches!(EXPR, PATTERN)`'s two halves.
struct MatchesArgs {
    expr: syn::Expr,
    pat: syn::Pat,
}

impl syn::parse::Parse for MatchesArgs {
    fn parse(input: syn::parse::ParseStream) -> syn::Result<Self> {
        let expr = input.parse()?;
        input.parse::<syn::Token![,]>()?;
        let pat = syn::Pat::parse_multi_with_leading_vert(input)?;
        let _ = input.parse::<Option<syn::Token![,]>>()?;
        Ok(MatchesArgs { expr, pat })
    }
}

/// One file, walked: what its `use` items bring in, and what it names.
struct Walk<'k> {
    file: String,
    kinds: &'k Kinds,
    /// The sentence and identifier rules hold here (not in `src/backends/`).
    sentences: bool,
    /// Each name a `use` brings in, and the path it stands for.
    imported: BTreeMap<String, Vec<String>>,
    /// The modules a `use …::*` brings everything of.
    globs: Vec<Vec<String>>,
    within: Vec<String>,
    found: Vec<Finding>,
}

impl<'k> Walk<'k> {
    fn new(file: &str, kinds: &'k Kinds) -> Walk<'k> {
        Walk {
            file: file.to_string(),
            kinds,
            sentences: !file.starts_with("src/backends/"),
            imported: BTreeMap::new(),
            globs: Vec::new(),
            within: Vec::new(),
            found: Vec::new(),
        }
    }

    fn find(&mut self, rule: Rule, what: impl Into<String>) {
        self.found.push(Finding {
            file: self.file.clone(),
            rule,
            what: what.into(),
            within: self.within.last().cloned().unwrap_or_default(),
        });
    }

    /// Every `use` of the file, first: a path is read with what its first name was imported as.
    fn imports(&mut self, file: &syn::File) {
        struct Uses<'a, 'k>(&'a mut Walk<'k>);
        impl<'ast> Visit<'ast> for Uses<'_, '_> {
            fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
                self.0.use_tree(&mut Vec::new(), &u.tree, false);
            }
        }
        Uses(self).visit_file(file);
    }

    /// The leaves of a use tree: recorded as imports (`record`), or checked as paths.
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, check: bool) {
        let leaf = |walk: &mut Walk, name: &syn::Ident, alias: Option<&syn::Ident>| {
            let mut path = prefix.clone();
            if name != "self" {
                path.push(name.to_string());
            }
            if check {
                walk.path(&path);
            } else {
                let alias = alias.unwrap_or(name).to_string();
                let alias = if alias == "self" {
                    prefix.last().cloned().unwrap_or_default()
                } else {
                    alias
                };
                walk.imported.insert(alias, path);
            }
        };
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, check);
                prefix.pop();
            }
            syn::UseTree::Name(n) => leaf(self, &n.ident, None),
            syn::UseTree::Rename(r) => leaf(self, &r.ident, Some(&r.rename)),
            syn::UseTree::Glob(_) => {
                if check {
                    self.path(prefix);
                } else {
                    self.globs.push(prefix.clone());
                }
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree, check);
                }
            }
        }
    }

    /// A path as written: its first name read as what it was imported as.
    fn path(&mut self, segments: &[String]) {
        let Some(first) = segments.first() else {
            return;
        };
        let mut full = self
            .imported
            .get(first)
            .cloned()
            .unwrap_or_else(|| vec![first.clone()]);
        full.extend(segments[1..].iter().cloned());
        let full: Vec<String> = full
            .into_iter()
            .filter(|s| s != "crate" && s != "super" && s != "self")
            .collect();
        if full
            .first()
            .is_some_and(|f| LOOK_ALIKES.contains(&f.as_str()))
        {
            return;
        }
        let written = segments.join("::");
        // A variant of the model's `Target` (another enum's variant of the same name, as a
        // builder's `Endpoint::Ssh`, is no kind).
        if full
            .windows(2)
            .any(|w| w[0] == "Target" && self.kinds.is_variant(&w[1]))
        {
            self.find(Rule::Path, written);
            return;
        }
        // The model's `Target` (the kind itself), however it is reached: `model::Target`,
        // `mesh::Target` (the model is re-exported), or `Target` from a glob of either.
        let spec = full
            .windows(2)
            .any(|w| (w[0] == "model" || w[0] == "mesh") && w[1] == "Target");
        let from_glob = full.len() == 1
            && full[0] == "Target"
            && !self.imported.contains_key("Target")
            && self
                .globs
                .iter()
                .any(|g| g.last().is_some_and(|m| m == "model" || m == "mesh"));
        if spec || from_glob {
            self.find(Rule::Path, written);
        }
    }

    fn literal(&mut self, value: &str) {
        if self.kinds.is_word(value) {
            self.find(Rule::Word, value);
        } else if self.sentences && self.kinds.in_sentence(value) {
            self.find(Rule::Sentence, value);
        }
    }

    fn name(&mut self, name: &str) {
        if self.kinds.is_predicate(name) {
            self.find(Rule::Predicate, name);
        } else if self.sentences
            && self.kinds.word_in(name).is_some()
            && !self.given_by_a_look_alike(name)
        {
            self.find(Rule::Identifier, name);
        }
    }

    /// A name another crate gave (`use bollard::Docker;`): its own, not a kind.
    fn given_by_a_look_alike(&self, name: &str) -> bool {
        self.imported.get(name).is_some_and(|path| {
            path.first()
                .is_some_and(|f| LOOK_ALIKES.contains(&f.as_str()))
        })
    }

    /// A field's clap flag (`#[arg(long)]` takes the field's name, `long = "…"` its own).
    fn flag(&mut self, field: &syn::Field) {
        for attr in &field.attrs {
            if !(attr.path().is_ident("arg") || attr.path().is_ident("clap")) {
                continue;
            }
            let syn::Meta::List(list) = &attr.meta else {
                continue;
            };
            let trees: Vec<TokenTree> = list.tokens.clone().into_iter().collect();
            let Some(at) = trees
                .iter()
                .position(|t| matches!(t, TokenTree::Ident(i) if i == "long"))
            else {
                continue;
            };
            let named = match (trees.get(at + 1), trees.get(at + 2)) {
                (Some(TokenTree::Punct(p)), Some(TokenTree::Literal(l))) if p.as_char() == '=' => {
                    syn::parse2::<syn::LitStr>(TokenTree::Literal(l.clone()).into())
                        .ok()
                        .map(|s| s.value())
                }
                _ => None,
            };
            let Some(flag) = named.or_else(|| {
                field
                    .ident
                    .as_ref()
                    .map(|i| i.to_string().replace('_', "-"))
            }) else {
                continue;
            };
            if KIND_FLAGS.contains(&flag.as_str())
                || self.kinds.word_in(&flag.replace('-', "_")).is_some()
            {
                self.find(Rule::Flag, format!("--{flag}"));
            }
        }
    }

    /// `kind OP "word"` (either way round).
    fn compared(&mut self, a: &syn::Expr, b: &syn::Expr) {
        for (kind, other) in [(a, b), (b, a)] {
            if let (true, Some(word)) = (is_kind(kind), literal(other)) {
                self.find(Rule::Compared, word);
            }
        }
    }

    /// A macro's body: as expressions where it is written as arguments (`format!`, `assert_eq!`),
    /// as `matches!`'s expression and pattern, else token by token.
    fn macro_body(&mut self, mac: &syn::Macro) {
        let tokens = mac.tokens.clone();
        if mac.path.is_ident("matches")
            && let Ok(args) = syn::parse2::<MatchesArgs>(tokens.clone())
        {
            if is_kind(&args.expr) {
                for word in pattern_literals(&args.pat) {
                    self.find(Rule::Compared, word);
                }
            }
            self.visit_expr(&args.expr);
            self.visit_pat(&args.pat);
            return;
        }
        let parser = syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated;
        match syn::parse::Parser::parse2(parser, tokens.clone()) {
            Ok(args) => {
                for arg in &args {
                    self.visit_expr(arg);
                }
            }
            Err(_) => self.tokens(tokens),
        }
    }

    /// Tokens that are no Rust this walk can parse: literals, paths and names, one by one.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let colons = |at: usize| {
            matches!((trees.get(at), trees.get(at + 1)),
                (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                    if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':')
        };
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Ident(first) => {
                    let mut segments = vec![first.to_string()];
                    let mut at = i + 1;
                    while colons(at) {
                        let Some(TokenTree::Ident(next)) = trees.get(at + 2) else {
                            break;
                        };
                        segments.push(next.to_string());
                        at += 3;
                    }
                    for segment in &segments {
                        self.name(segment);
                    }
                    self.path(&segments);
                    i = at;
                    continue;
                }
                TokenTree::Literal(l) => {
                    if let Ok(s) = syn::parse2::<syn::LitStr>(TokenTree::Literal(l.clone()).into())
                    {
                        self.literal(&s.value());
                    }
                }
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Punct(_) => {}
            }
            i += 1;
        }
    }

    fn function<F: FnOnce(&mut Self)>(&mut self, name: &syn::Ident, walk: F) {
        self.name(&name.to_string());
        self.within.push(name.to_string());
        walk(self);
        self.within.pop();
    }
}

impl<'ast> Visit<'ast> for Walk<'_> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree, true);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.path(&segments);
        visit::visit_path(self, path);
    }

    fn visit_item_enum(&mut self, e: &'ast syn::ItemEnum) {
        // An enum of one's own that mirrors the kinds (two variants or more named as kinds; one
        // alone is a coincidence of names, as a builder's `Endpoint::Ssh`).
        let mirrored: Vec<String> = e
            .variants
            .iter()
            .map(|v| v.ident.to_string())
            .filter(|v| self.kinds.is_variant(v))
            .collect();
        if mirrored.len() > 1 {
            self.find(
                Rule::Path,
                format!("enum {} {{ {} }}", e.ident, mirrored.join(", ")),
            );
        }
        visit::visit_item_enum(self, e);
    }

    fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
        // `Docker => …` after a glob brought the variants in.
        if self.kinds.is_variant(&p.ident.to_string()) {
            self.find(Rule::Path, p.ident.to_string());
        }
        visit::visit_pat_ident(self, p);
    }

    fn visit_field(&mut self, f: &'ast syn::Field) {
        self.flag(f);
        visit::visit_field(self, f);
    }

    fn visit_lit_str(&mut self, s: &'ast syn::LitStr) {
        self.literal(&s.value());
    }

    fn visit_ident(&mut self, i: &'ast proc_macro2::Ident) {
        self.name(&i.to_string());
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        // Doc comments explain; other attributes' words are read (`#[error("…")]` is a message).
        if attr.path().is_ident("doc") {
            return;
        }
        match &attr.meta {
            syn::Meta::List(list) => self.tokens(list.tokens.clone()),
            _ => visit::visit_attribute(self, attr),
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.macro_body(mac);
    }

    fn visit_expr_binary(&mut self, e: &'ast syn::ExprBinary) {
        if matches!(e.op, syn::BinOp::Eq(_) | syn::BinOp::Ne(_)) {
            self.compared(&e.left, &e.right);
        }
        visit::visit_expr_binary(self, e);
    }

    fn visit_expr_match(&mut self, m: &'ast syn::ExprMatch) {
        if is_kind(&m.expr) {
            for arm in &m.arms {
                for word in pattern_literals(&arm.pat) {
                    self.find(Rule::Compared, word);
                }
            }
        }
        visit::visit_expr_match(self, m);
    }

    fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
        // The kind a mesh declares for a target, read past the seam (`mesh.default_target()`,
        // `mesh.target(name)`: the model's `Target`, whose kind the seam alone may read).
        let method = m.method.to_string();
        let on_mesh = matches!(&*m.receiver, syn::Expr::Path(p) if p.path.segments.last().is_some_and(|s| s.ident.to_string().contains("mesh")))
            || matches!(&*m.receiver, syn::Expr::Field(f) if matches!(&f.member, syn::Member::Named(n) if n.to_string().contains("mesh")));
        if method == "default_target" || (method == "target" && on_mesh) {
            self.find(Rule::Path, format!("mesh.{method}(…)"));
        }
        if COMPARING.contains(&m.method.to_string().as_str()) && is_kind(&m.receiver) {
            for arg in &m.args {
                if let Some(word) = literal(arg) {
                    self.find(Rule::Compared, word);
                }
            }
        }
        visit::visit_expr_method_call(self, m);
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.function(&f.sig.ident, |walk| visit::visit_item_fn(walk, f));
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.function(&f.sig.ident, |walk| visit::visit_impl_item_fn(walk, f));
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        self.function(&f.sig.ident, |walk| visit::visit_trait_item_fn(walk, f));
    }
}

/// What `text` (the file `file`) names of a kind.
fn named_kinds(file: &str, text: &str, kinds: &Kinds) -> Result<Vec<Finding>, String> {
    let parsed = syn::parse_file(text).map_err(|e| format!("{file}: does not parse: {e}"))?;
    let mut walk = Walk::new(file, kinds);
    walk.imports(&parsed);
    walk.visit_file(&parsed);
    let mut found = walk.found;
    found.sort();
    found.dedup();
    Ok(found)
}

/// The crates read as the one tree the rooms were folders of (`common::source_tree`): the rules
/// below speak of `src/converge/targets/`, `src/backends/`, … as that tree's folders.
fn root() -> PathBuf {
    crate::common::source_tree::folder().to_path_buf()
}

/// The repository, for its docs.
fn repository() -> PathBuf {
    crate::common::source_tree::repository()
}

fn model_kinds() -> Kinds {
    let model = std::fs::read_to_string(root().join("src/mesh/model.rs")).unwrap();
    Kinds::of_model(&model)
}

fn excuses(exception: &Exception, finding: &Finding) -> bool {
    exception.file == finding.file
        && exception.rule == finding.rule
        && finding.what.contains(exception.what)
}

#[test]
fn no_file_outside_the_seam_names_a_target_kind() {
    let kinds = model_kinds();
    assert!(
        kinds.is_variant("Docker") && kinds.is_variant("Kubernetes"),
        "the kinds were not read from the model: {kinds:?}"
    );
    let mut found = Vec::new();
    let mut checked = 0;
    for file in rust_files(&root().join("src")) {
        let relative = file.strip_prefix(root()).unwrap().display().to_string();
        if ALLOWED.iter().any(|a| relative.starts_with(a)) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        found.extend(named_kinds(&relative, &text, &kinds).unwrap());
        checked += 1;
    }
    assert!(checked > 100, "too few files read: {checked}");
    let mut used = BTreeSet::new();
    let refused: Vec<String> = found
        .iter()
        .filter(|f| {
            let excused = EXCEPTIONS.iter().position(|e| excuses(e, f));
            used.extend(excused);
            excused.is_none()
        })
        .map(|f| format!("{}: {:?} {:?} (in fn {})", f.file, f.rule, f.what, f.within))
        .collect();
    assert!(
        refused.is_empty(),
        "these name a target kind outside src/converge/targets/ (ask the seam instead: \
         describe(), acting_on(), delivery(), pushes_to(), host_images_answer(), the machine's own \
         words…):\n{}",
        refused.join("\n")
    );
    let stale: Vec<String> = EXCEPTIONS
        .iter()
        .enumerate()
        .filter(|(i, _)| !used.contains(i))
        .map(|(_, e)| format!("{}: {:?} {:?}", e.file, e.rule, e.what))
        .collect();
    assert!(
        stale.is_empty(),
        "these exceptions excuse nothing any more: remove them from EXCEPTIONS:\n{}",
        stale.join("\n")
    );
}

fn test_kinds() -> Kinds {
    Kinds {
        variants: vec!["Docker".into(), "Kubernetes".into(), "Nomad".into()],
    }
}

/// What `code` (one file's text) names, by rule.
fn planted(code: &str) -> Vec<(Rule, String)> {
    named_kinds("src/app/planted.rs", code, &test_kinds())
        .unwrap()
        .into_iter()
        .map(|f| (f.rule, f.what))
        .collect()
}

/// Each way of naming a kind, planted in a file of its own, is caught by the rule that says so.
#[test]
fn the_check_catches_each_way_of_naming_a_kind() {
    let cases: &[(&str, Rule)] = &[
        // A kind's word as a literal, in any case, in code and inside a macro.
        ("fn f() -> String { \"docker\".into() }", Rule::Word),
        (
            "fn f() { let k = String::from(\"Kubernetes\"); }",
            Rule::Word,
        ),
        ("fn f() { eprintln!(\"{}\", \" nomad \"); }", Rule::Word),
        // A kind in a sentence, in a format string.
        (
            "fn f(place: &str) { eprintln!(\"meshtop: acting on Kubernetes {place}\"); }",
            Rule::Sentence,
        ),
        (
            "#[derive(Debug, thiserror::Error)] enum E { #[error(\"needs a docker target\")] A }",
            Rule::Sentence,
        ),
        // Comparisons with `.kind()`, `.kind`, a `kind` binding, either way round, as methods.
        ("fn f(t: &T) -> bool { t.kind() == \"x\" }", Rule::Compared),
        (
            "fn f(t: &T) -> bool { \"x\" != t.describe().kind }",
            Rule::Compared,
        ),
        (
            "fn f(m: &M) -> bool { m.kind.as_str() == \"container\" }",
            Rule::Compared,
        ),
        (
            "fn f(kind: &str) -> bool { kind.eq(\"x\") }",
            Rule::Compared,
        ),
        (
            "fn f(t: &T) -> bool { t.kind().to_lowercase().starts_with(\"kube\") }",
            Rule::Compared,
        ),
        // A match on a kind, a `matches!` on one.
        (
            "fn f(t: &T) -> u8 { match t.kind() { \"x\" | \"y\" => 1, _ => 2 } }",
            Rule::Compared,
        ),
        (
            "fn f(t: &T) -> bool { matches!(t.kind(), \"x\") }",
            Rule::Compared,
        ),
        // Paths: the variant, a renamed import, a variant imported by name, the model's Target
        // through a glob or the re-export, an enum of one's own.
        (
            "fn f(t: &Target) -> bool { *t == Target::Docker }",
            Rule::Path,
        ),
        (
            "use crate::mesh::model::Target as T;\nfn f(t: &T) -> bool { matches!(t, T::Docker) }",
            Rule::Path,
        ),
        (
            "use crate::mesh::model::Target::Kubernetes as K;\nfn f() {}",
            Rule::Path,
        ),
        (
            "use crate::mesh::model::*;\nfn f(t: &Target) {}",
            Rule::Path,
        ),
        ("use crate::mesh::Target;\nfn f(t: &Target) {}", Rule::Path),
        (
            "use crate::mesh::model::{Mesh, Target as Spec};\nfn f(s: &Spec) -> &str { match s { Spec::Kubernetes { namespace, .. } => namespace, _ => \"\" } }",
            Rule::Path,
        ),
        ("enum Where { Docker, Kubernetes, Elsewhere }", Rule::Path),
        (
            "type Spec = crate::mesh::model::Target;\nfn f() {}",
            Rule::Path,
        ),
        // The model's Target read through the mesh (the plan bug: the first target's kind).
        (
            "fn f(mesh: &Mesh) -> String { mesh.default_target().kind().to_string() }",
            Rule::Path,
        ),
        (
            "fn f(mesh: &Mesh) { let spec = mesh.target(\"prod\"); }",
            Rule::Path,
        ),
        // A predicate named for a kind.
        (
            "fn is_docker(t: &T) -> bool { t.builds_where_it_runs() }",
            Rule::Predicate,
        ),
        ("fn f(t: &T) -> bool { t.on_kubernetes() }", Rule::Predicate),
        ("struct S { docker_target: bool }", Rule::Predicate),
        ("fn f() { let IsNomad = true; }", Rule::Predicate),
        // An identifier with a kind's word or its place's, machines', delivery's: a binding, a
        // field, a function, a variant, a path's segment, a name inside a macro.
        ("fn f(namespace: &str) {}", Rule::Identifier),
        (
            "struct Place { kube_context: Option<String> }",
            Rule::Identifier,
        ),
        (
            "enum DeliveredBy { OnHost, KindLoaded { cluster: String } }",
            Rule::Identifier,
        ),
        ("fn f() { let workload = 1; }", Rule::Identifier),
        ("fn note_docker_stamps() {}", Rule::Identifier),
        (
            "fn f() { let s = behind::workload_state(a, b, c); }",
            Rule::Identifier,
        ),
        ("fn f() { println!(\"{}\", nomad_job); }", Rule::Identifier),
        ("fn f(d: &Daemon) { let c = d.docker(); }", Rule::Identifier),
        // A flag named for a kind's place: by its field's name or its own.
        (
            "struct Global { #[arg(long, global = true)] context: Option<String> }",
            Rule::Flag,
        ),
        (
            "struct Global { #[arg(long = \"kube-ctx\")] c: Option<String> }",
            Rule::Flag,
        ),
        (
            "struct Global { #[arg(long = \"context\", value_name = \"NAME\")] c: Option<String> }",
            Rule::Flag,
        ),
    ];
    // The use of a renamed import is caught where it is used, not only where it is imported.
    let renamed = planted(
        "use crate::mesh::model::{Mesh, Target as Spec};\nfn f(s: &Spec) -> bool { matches!(s, Spec::Docker) }",
    );
    assert!(
        renamed.contains(&(Rule::Path, "Spec::Docker".to_string())),
        "{renamed:?}"
    );
    for (code, rule) in cases {
        let found = planted(code);
        assert!(
            found.iter().any(|(r, _)| r == rule),
            "not caught as {rule:?}: {code}\nfound: {found:?}"
        );
    }
}

/// Code that names no kind passes: another crate's `Docker`, kinds that are no target's, words
/// that are parts of other names, doc comments, the seam's answers.
#[test]
fn clean_code_passes() {
    let clean = r#"
//! The host daemon (Docker) and a Kubernetes namespace are described by the seam.
use bollard::Docker;
use crate::converge::targets::Target;

/// On Docker, this reads the container.
enum Endpoint { Unix(String), Ssh(String) }

struct Walk { dockerfile_sha: String, ignore: DockerIgnore, context_dir: PathBuf }

struct Global { #[arg(long, value_name = "DIR")] build_context: Option<String> }

fn f(target: &dyn Target, daemon: &Docker, machine: &Machine, context: &Context) -> String {
    let _ = (Endpoint::Ssh(String::new()), "nomad://host");
    let _ = Docker::connect_with_defaults();
    if target.builds_where_it_runs() && machine.display_name.is_empty() {
        return "Dockerfile changed; .dockerignore; docker-manifest-digest; /var/run/docker.sock".into();
    }
    if event.kind == KeyEventKind::Release || e.kind() == std::io::ErrorKind::NotFound {
        return String::new();
    }
    match target.describe().acting_on() {
        Some(line) => format!("meshtop: {line}"),
        None => format!("{} ({})", target.name(), target.describe().kind),
    }
}
"#;
    assert_eq!(planted(clean), Vec::new());
    // Another enum's variant that shares a kind's name is no path to the kind, but the name is the
    // kind's word all the same: a new kind's word must be one the code does not use yet.
    let shared = "enum Endpoint { Unix(String), Nomad(String) }";
    assert_eq!(
        planted(shared),
        vec![(Rule::Identifier, "Nomad".to_string())]
    );
}

/// The sentence rule holds outside the backends only: there "Docker" is the daemon itself.
#[test]
fn the_backends_may_name_the_system_they_reach() {
    let code = "fn f() -> String { \"cannot reach the Docker daemon\".into() }";
    let kinds = test_kinds();
    assert!(
        named_kinds("src/backends/daemon/x.rs", code, &kinds)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        named_kinds("src/cli/x.rs", code, &kinds).unwrap()[0].rule,
        Rule::Sentence
    );
    // The backend names its own system's things (a namespace is kube's), outside it they are a
    // kind's.
    let place = "fn f(namespace: &str, docker: &Docker) {}";
    assert!(
        named_kinds("src/backends/cluster/x.rs", place, &kinds)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        named_kinds("src/sources/x.rs", place, &kinds).unwrap()[0].rule,
        Rule::Identifier
    );
    // …but not a kind's word on its own, nor a path to a kind.
    let word = "fn f() -> &'static str { \"kubernetes\" }";
    assert_eq!(
        named_kinds("src/backends/x.rs", word, &kinds).unwrap()[0].rule,
        Rule::Word
    );
}

/// The sketch in `docs/architecture.md` ("A third kind, file by file"): the files a third kind
/// adds and the files it touches, as written under `src/` (`<kind>` left as written).
struct Sketch {
    adds: Vec<String>,
    touches: Vec<String>,
}

/// The section's fenced block, one file a line: `adds`/`touches` in the first column (or blank:
/// the same as above), the file in the second; lines indented further explain the one above.
fn sketch(doc: &str) -> Sketch {
    let start = doc
        .find("### A third kind, file by file")
        .expect("docs/architecture.md has the section \"A third kind, file by file\"");
    let section = &doc[start..];
    let block = section
        .split("```")
        .nth(1)
        .expect("the section holds a fenced block of files");
    let (mut adds, mut touches) = (Vec::new(), Vec::new());
    let mut adding = None;
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let (column, rest) = line.split_at(line.len().min(9));
        match column.trim() {
            "adds" => adding = Some(true),
            "touches" => adding = Some(false),
            "" => {}
            other => panic!("the sketch's first column says {other:?}: adds or touches"),
        }
        if rest.starts_with(' ') {
            continue;
        }
        let file = rest.split_whitespace().next().unwrap().to_string();
        match adding.expect("the sketch starts with adds or touches") {
            true => adds.push(file),
            false => touches.push(file),
        }
    }
    Sketch { adds, touches }
}

/// The files of `src/` (outside the seam and the backends: each backend names its own outside
/// system) where the fence finds a kind named, its exceptions applied: those a new kind touches.
fn files_naming_a_kind(kinds: &Kinds) -> BTreeSet<String> {
    let mut files = BTreeSet::new();
    for file in rust_files(&root().join("src")) {
        let relative = file.strip_prefix(root()).unwrap().display().to_string();
        if relative.starts_with("src/converge/targets/") || relative.starts_with("src/backends/") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let found = named_kinds(&relative, &text, kinds).unwrap();
        if found
            .iter()
            .any(|f| !EXCEPTIONS.iter().any(|e| excuses(e, f)))
        {
            files.insert(relative.trim_start_matches("src/").to_string());
        }
    }
    files
}

/// The sketch is true: every file it names is there (each kind the model declares has its
/// folder or file under the seam), and the files outside the seam that name a kind are exactly
/// the ones it says a new kind touches.
#[test]
fn the_third_kind_sketch_names_the_files_a_kind_adds_and_touches() {
    let doc = std::fs::read_to_string(repository().join("docs/architecture.md")).unwrap();
    let sketch = sketch(&doc);
    let kinds = model_kinds();
    assert!(
        sketch
            .adds
            .iter()
            .any(|f| f.starts_with("converge/targets/<kind>")),
        "the sketch adds the kind's folder under the seam: {:?}",
        sketch.adds
    );
    let mut missing = Vec::new();
    for added in sketch
        .adds
        .iter()
        .filter(|f| f.starts_with("converge/targets/"))
    {
        for kind in kinds.words() {
            let as_folder = added.replace("<kind>", &kind);
            let as_file = format!("{}.rs", as_folder.trim_end_matches('/'));
            if !root().join("src").join(&as_folder).exists()
                && !root().join("src").join(&as_file).exists()
            {
                missing.push(format!("{as_folder} (or {as_file}) for kind {kind}"));
            }
        }
    }
    for touched in &sketch.touches {
        assert!(
            !touched.contains('<'),
            "a touched file is one file: {touched}"
        );
        if !root().join("src").join(touched).exists() {
            missing.push(touched.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md (\"A third kind, file by file\") names files that are not under \
         src/:\n{}",
        missing.join("\n")
    );
    let said: BTreeSet<String> = sketch
        .touches
        .iter()
        .filter(|f| !f.starts_with("converge/targets/") && !f.starts_with("backends/"))
        .cloned()
        .collect();
    let naming = files_naming_a_kind(&kinds);
    assert_eq!(
        naming, said,
        "outside src/converge/targets/ and src/backends/, the files that name a kind (left) must be \
         the ones docs/architecture.md's sketch says a new kind touches (right): mend the code \
         (ask the seam) or the sketch"
    );
}

/// The sketch is read as written: its columns, its continuation lines, its `<kind>` placeholders.
#[test]
fn the_sketch_reader_reads_columns_and_skips_explanations() {
    let doc = "### A third kind, file by file\n\ntext\n\n```\n\
               adds     converge/targets/<kind>/   its impl\n\
               \x20                                   more of it\n\
               touches  mesh/model.rs              its variant\n\
               \x20        workspace/file/read.rs     its keys\n```\n";
    let sketch = sketch(doc);
    assert_eq!(sketch.adds, ["converge/targets/<kind>/"]);
    assert_eq!(sketch.touches, ["mesh/model.rs", "workspace/file/read.rs"]);
}

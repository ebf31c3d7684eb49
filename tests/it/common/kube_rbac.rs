//! The README's RBAC, read from docs/targets-kubernetes.md (its `## RBAC` section's YAML: a Role and a
//! ClusterRole), as the API test server's bindings: the Role by a RoleBinding in the mesh's namespace,
//! the ClusterRole by a ClusterRoleBinding or by a RoleBinding in that namespace (as the README says to
//! bind them). A test runs under exactly what a reader would apply, so a verb the README forgets fails
//! it. The YAML is read by a parser of exactly its shape (block mappings, flow sequences of scalars,
//! `- ` items under `rules:`): anything else in it fails loudly rather than being skipped, so the
//! README cannot drift into a shape this would misread.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::kube_rules::{Binding, Rule};

/// The namespace the README's manifests are written for (`metadata.namespace`, `resourceNames`).
const README_NAMESPACE: &str = "demo";

/// The verbs that change something: what the read-only variant drops.
pub(crate) const WRITE_VERBS: &[&str] =
    &["patch", "create", "update", "delete", "deletecollection"];

/// How the ClusterRole (the namespace object) is bound: both are what the README says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClusterRoleBound {
    ClusterWide,
    InNamespace,
}

/// The README's Role and ClusterRole rules, in the order it lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadmeRbac {
    pub(crate) role: Vec<Rule>,
    pub(crate) cluster_role: Vec<Rule>,
}

/// One verb of one resource a rule grants (`pods/log` a resource here), named as the README's line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Grant {
    pub(crate) verb: String,
    pub(crate) group: String,
    pub(crate) resource: String,
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{} {} ({group})", self.verb, self.resource)
    }
}

impl ReadmeRbac {
    /// The README at the crate's root, parsed.
    pub(crate) fn read() -> ReadmeRbac {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/targets-kubernetes.md");
        ReadmeRbac::parse(&std::fs::read_to_string(path).unwrap())
    }

    /// The `## RBAC` section's first YAML block: a Role and a ClusterRole.
    pub(crate) fn parse(readme: &str) -> ReadmeRbac {
        let section = readme
            .split("\n## RBAC\n")
            .nth(1)
            .expect("docs/targets-kubernetes.md has a `## RBAC` section");
        let yaml = section
            .split("```yaml\n")
            .nth(1)
            .and_then(|rest| rest.split("\n```").next())
            .expect("the RBAC section has a ```yaml block");
        let (mut role, mut cluster_role) = (None, None);
        for document in yaml.split("\n---\n") {
            let (kind, rules) = parse_document(document);
            match kind.as_str() {
                "Role" => role = Some(rules),
                "ClusterRole" => cluster_role = Some(rules),
                other => panic!(
                    "the README's RBAC has a {other}: this parser knows Role and ClusterRole"
                ),
            }
        }
        ReadmeRbac {
            role: role.expect("the README's RBAC has a Role"),
            cluster_role: cluster_role.expect("the README's RBAC has a ClusterRole"),
        }
    }

    /// The bindings of a user who applied the README for `namespace` (its `demo` replaced).
    pub(crate) fn bindings(&self, namespace: &str, bound: ClusterRoleBound) -> Vec<Binding> {
        let in_namespace = |rules: &[Rule]| -> Vec<Rule> {
            rules
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    for name in &mut r.names {
                        if name == README_NAMESPACE {
                            *name = namespace.to_string();
                        }
                    }
                    r
                })
                .collect()
        };
        let cluster_role = in_namespace(&self.cluster_role);
        vec![
            Binding::Namespace(namespace.to_string(), in_namespace(&self.role)),
            match bound {
                ClusterRoleBound::ClusterWide => Binding::Cluster(cluster_role),
                ClusterRoleBound::InNamespace => {
                    Binding::Namespace(namespace.to_string(), cluster_role)
                }
            },
        ]
    }

    /// The read-only variant the README describes: every verb that writes dropped (a rule left with
    /// none dropped too).
    pub(crate) fn read_only(&self) -> ReadmeRbac {
        let keep = |rules: &[Rule]| -> Vec<Rule> {
            rules
                .iter()
                .filter_map(|r| {
                    let mut r = r.clone();
                    r.verbs.retain(|v| !WRITE_VERBS.contains(&v.as_str()));
                    (!r.verbs.is_empty()).then_some(r)
                })
                .collect()
        };
        ReadmeRbac {
            role: keep(&self.role),
            cluster_role: keep(&self.cluster_role),
        }
    }

    /// Every (verb, group, resource) the README grants, Role then ClusterRole, in its order.
    pub(crate) fn grants(&self) -> Vec<Grant> {
        let mut grants = Vec::new();
        for rule in self.role.iter().chain(&self.cluster_role) {
            for group in &rule.groups {
                for resource in &rule.resources {
                    for verb in &rule.verbs {
                        let grant = Grant {
                            verb: verb.clone(),
                            group: group.clone(),
                            resource: resource.clone(),
                        };
                        if !grants.contains(&grant) {
                            grants.push(grant);
                        }
                    }
                }
            }
        }
        grants
    }

    /// The README with one grant taken out of every rule that lists it (a rule left with no verb or
    /// no resource goes): what a reader who forgot that one word would have applied.
    pub(crate) fn without(&self, grant: &Grant) -> ReadmeRbac {
        let drop = |rules: &[Rule]| -> Vec<Rule> {
            let mut out = Vec::new();
            for rule in rules {
                let hit = rule.groups.contains(&grant.group)
                    && rule.resources.contains(&grant.resource)
                    && rule.verbs.contains(&grant.verb);
                if !hit {
                    out.push(rule.clone());
                    continue;
                }
                // The rule minus this one (verb, resource): its other verbs on the same resources,
                // and this verb on its other resources.
                let mut others = rule.clone();
                others.verbs.retain(|v| *v != grant.verb);
                let mut rest = rule.clone();
                rest.verbs = vec![grant.verb.clone()];
                rest.resources.retain(|r| *r != grant.resource);
                out.extend(
                    [others, rest]
                        .into_iter()
                        .filter(|r| !r.verbs.is_empty() && !r.resources.is_empty()),
                );
            }
            out
        };
        ReadmeRbac {
            role: drop(&self.role),
            cluster_role: drop(&self.cluster_role),
        }
    }
}

/// One YAML document of the README's shape: its `kind` and its `rules`.
fn parse_document(document: &str) -> (String, Vec<Rule>) {
    let mut kind = None;
    let mut rules: Vec<Rule> = Vec::new();
    let mut in_rules = false;
    for line in document.lines().filter(|l| !l.trim().is_empty()) {
        if !line.starts_with(' ') {
            in_rules = false;
            let (key, value) = key_value(line);
            match key {
                "kind" => kind = Some(value.to_string()),
                "rules" => {
                    assert!(value.is_empty(), "rules as a block sequence: {line:?}");
                    in_rules = true;
                }
                "apiVersion" | "metadata" => {}
                other => panic!("the README's RBAC has a key this parser does not know: {other:?}"),
            }
            continue;
        }
        assert!(in_rules, "an indented line outside `rules:`: {line:?}");
        let item = line.trim_start();
        let field = if let Some(first) = item.strip_prefix("- ") {
            rules.push(Rule::new(&[], &[], &[]));
            first
        } else {
            item
        };
        let rule = rules.last_mut().expect("a rule's field before its `- `");
        let (key, value) = key_value(field);
        let list = flow_sequence(value);
        match key {
            "apiGroups" => rule.groups = list,
            "resources" => rule.resources = list,
            "verbs" => rule.verbs = list,
            "resourceNames" => rule.names = list,
            other => panic!("a rule field this parser does not know: {other:?}"),
        }
    }
    for rule in &rules {
        assert!(
            !rule.verbs.is_empty() && !rule.groups.is_empty() && !rule.resources.is_empty(),
            "a rule without verbs, apiGroups or resources: {rule:?}"
        );
    }
    (kind.expect("a document without `kind`"), rules)
}

fn key_value(line: &str) -> (&str, &str) {
    let (key, value) = line
        .split_once(':')
        .unwrap_or_else(|| panic!("not `key: value`: {line:?}"));
    (key.trim(), value.trim())
}

/// `[a, "b", c]` → a, b, c (plain or double-quoted scalars; `""` is the core group).
fn flow_sequence(value: &str) -> Vec<String> {
    let inner = value
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or_else(|| panic!("a flow sequence `[…]`: {value:?}"));
    if inner.trim().is_empty() {
        return Vec::new();
    }
    inner
        .split(',')
        .map(|item| {
            let item = item.trim();
            item.strip_prefix('"')
                .and_then(|i| i.strip_suffix('"'))
                .unwrap_or(item)
                .to_string()
        })
        .collect()
}

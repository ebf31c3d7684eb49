//! What the Kubernetes API test server refuses, as the apiserver refuses it, read from its sources:
//! - **who may do what** (`staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go` turns a
//!   request into (verb, API group, resource, subresource, namespace, name); `plugin/pkg/auth/authorizer/
//!   rbac/rbac.go` RuleAllows and `pkg/apis/rbac/v1/evaluation_helpers.go` match them against the rules of
//!   the identity's ClusterRoleBindings, and of its RoleBindings in the request's namespace only;
//!   `handlers/responsewriters/errors.go` forbiddenMessage says the 403). A SelfSubjectAccessReview is
//!   answered by the same matcher over the attributes it names (`pkg/registry/authorization/
//!   selfsubjectaccessreview/rest.go`).
//! - **sizes and schemas**: the total size of an object's annotations (`staging/src/k8s.io/apimachinery/
//!   pkg/api/validation/objectmeta.go` ValidateAnnotationsSize, TotalAnnotationSizeLimitB = 256 KiB, the
//!   422 of `field.TooLong`); a Lease's spec (`pkg/apis/coordination/validation/validation.go`
//!   ValidateLeaseSpec) and its MicroTimes (`apimachinery/pkg/apis/meta/v1/micro_time.go`: RFC3339 with
//!   exactly six fractional digits, else the body cannot be decoded: 400);
//! - **field selectors**: only the labels each kind's conversion func supports (`pkg/apis/core/v1/
//!   conversion.go` for pods and events, `apimachinery/pkg/runtime/conversion.go`
//!   DefaultMetaV1FieldSelectorConversion for the rest), else 400 (`handlers/get.go` ListResource).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use axum::http::Method;
use serde_json::Value;

/// One RBAC PolicyRule (`rbac/v1` types.go): empty `names` means every name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    pub(crate) verbs: Vec<String>,
    pub(crate) groups: Vec<String>,
    pub(crate) resources: Vec<String>,
    pub(crate) names: Vec<String>,
}

impl Rule {
    pub(crate) fn new(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Rule {
        let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
        Rule {
            verbs: owned(verbs),
            groups: owned(groups),
            resources: owned(resources),
            names: Vec::new(),
        }
    }

    pub(crate) fn named(mut self, names: &[&str]) -> Rule {
        self.names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `RuleAllows` for a resource request (rbac.go; the helpers of evaluation_helpers.go).
    fn allows(&self, a: &Attributes) -> bool {
        let combined = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        let verb = self.verbs.iter().any(|v| v == "*" || *v == a.verb);
        let group = self.groups.iter().any(|g| g == "*" || *g == a.group);
        let resource = self.resources.iter().any(|r| {
            r == "*"
                || *r == combined
                || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource))
        });
        let name = self.names.is_empty() || self.names.contains(&a.name);
        verb && group && resource && name
    }
}

/// Where a role's rules apply: everywhere (a ClusterRoleBinding) or in one namespace (a RoleBinding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Binding {
    Cluster(Vec<Rule>),
    Namespace(String, Vec<Rule>),
}

/// The user requests are made as, and its bindings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) user: String,
    pub(crate) bindings: Vec<Binding>,
}

impl Identity {
    /// `VisitRulesFor(user, namespace)` then `RuleAllows`: cluster bindings always count, a namespace's
    /// only for a request in that namespace (a cluster-scoped request has namespace "").
    pub(crate) fn allows(&self, a: &Attributes) -> bool {
        self.bindings.iter().any(|b| match b {
            Binding::Cluster(rules) => rules.iter().any(|r| r.allows(a)),
            Binding::Namespace(ns, rules) => {
                !a.namespace.is_empty() && *ns == a.namespace && rules.iter().any(|r| r.allows(a))
            }
        })
    }
}

/// What the apiserver's bootstrap policy lets every authenticated user do, whatever their own bindings
/// (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`: the `system:basic-user` ClusterRole,
/// bound to the group `system:authenticated` by `ClusterRoleBindings()`, grants `create` on
/// `selfsubjectaccessreviews` and `selfsubjectrulesreviews` in `authorization.k8s.io` and on
/// `selfsubjectreviews` in `authentication.k8s.io`; `system:discovery` grants `get` on the
/// discovery paths, which are non-resource requests and never reach this).
pub(crate) fn allowed_to_everyone(a: &Attributes) -> bool {
    let basic_user = match a.group.as_str() {
        "authorization.k8s.io" => {
            ["selfsubjectaccessreviews", "selfsubjectrulesreviews"].contains(&a.resource.as_str())
        }
        "authentication.k8s.io" => a.resource == "selfsubjectreviews",
        _ => false,
    };
    basic_user && a.verb == "create" && a.subresource.is_empty()
}

/// The authorizer's attributes of a resource request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Attributes {
    pub(crate) verb: String,
    pub(crate) group: String,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

/// `RequestInfoFactory.NewRequestInfo`: None for a non-resource request (discovery).
pub(crate) fn request_attributes(
    method: &Method,
    parts: &[&str],
    q: &HashMap<String, String>,
) -> Option<Attributes> {
    let (group, rest): (&str, &[&str]) = match parts {
        ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
        ["apis", group, _version, rest @ ..] if !rest.is_empty() => (group, rest),
        _ => return None,
    };
    let mut verb = match *method {
        Method::POST => "create",
        Method::GET | Method::HEAD => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
    .to_string();
    let mut current = rest;
    let mut namespace = String::new();
    if current[0] == "namespaces" && current.len() > 1 {
        namespace = current[1].to_string();
        // `status` and `finalize` are subresources of the namespace; anything else a resource in it.
        if current.len() > 2 && !["status", "finalize"].contains(&current[2]) {
            current = &current[2..];
        }
    }
    let mut a = Attributes {
        group: group.to_string(),
        namespace,
        ..Attributes::default()
    };
    if let Some(resource) = current.first() {
        a.resource = resource.to_string();
    }
    if let Some(name) = current.get(1) {
        a.name = name.to_string();
    }
    if let Some(sub) = current.get(2) {
        a.subresource = sub.to_string();
    }
    if a.name.is_empty() && verb == "get" {
        verb = match q.get("watch").map(|w| w.to_lowercase()) {
            Some(w) if w != "false" && w != "0" => "watch",
            _ => "list",
        }
        .to_string();
    }
    if a.name.is_empty() && verb == "delete" {
        verb = "deletecollection".to_string();
    }
    a.verb = verb;
    Some(a)
}

/// The attributes a SelfSubjectAccessReview's `spec.resourceAttributes` names.
pub(crate) fn review_attributes(spec: &Value) -> Attributes {
    let text = |k: &str| spec[k].as_str().unwrap_or_default().to_string();
    Attributes {
        verb: text("verb"),
        group: text("group"),
        resource: text("resource"),
        subresource: text("subresource"),
        namespace: text("namespace"),
        name: text("name"),
    }
}

/// `forbiddenMessage` and `NewForbidden` (`staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go`):
/// `<resource>[.<group>] ["name"] is forbidden: User "u" cannot <verb> resource "<r>[/<sub>]" in API
/// group "<g>" (in the namespace "n" | at the cluster scope)`.
pub(crate) fn forbidden_message(user: &str, a: &Attributes) -> String {
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {:?}", a.namespace)
    };
    let qualified = if a.group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.group)
    };
    let subject = if a.name.is_empty() {
        qualified
    } else {
        format!("{qualified} {:?}", a.name)
    };
    format!(
        "{subject} is forbidden: User {user:?} cannot {} resource {resource:?} in API group {:?} {scope}",
        a.verb, a.group
    )
}

/// The apiserver's limit on the total size of an object's annotations (keys and values, in bytes).
pub(crate) const TOTAL_ANNOTATION_SIZE_LIMIT_B: usize = 256 * 1024;

/// `ValidateAnnotationsSize`: the error of an object whose annotations are too large.
pub(crate) fn annotations_too_long(object: &Value) -> Option<String> {
    let total: usize = object["metadata"]["annotations"]
        .as_object()
        .map(|a| {
            a.iter()
                .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
                .sum()
        })
        .unwrap_or(0);
    (total > TOTAL_ANNOTATION_SIZE_LIMIT_B).then(|| {
        format!("metadata.annotations: Too long: must have at most {TOTAL_ANNOTATION_SIZE_LIMIT_B} bytes")
    })
}

/// `NewInvalid`'s message: `<Kind> "<name>" is invalid: <errors>` (one error as is, more in brackets,
/// as `utilerrors.NewAggregate` prints them).
pub(crate) fn invalid_message(kind: &str, name: &str, errors: &[String]) -> String {
    let listed = if errors.len() == 1 {
        errors[0].clone()
    } else {
        format!("[{}]", errors.join(", "))
    };
    format!("{kind} {name:?} is invalid: {listed}")
}

/// A MicroTime as `time.Parse(RFC3339Micro, …)` accepts it: `2006-01-02T15:04:05.000000Z07:00`
/// (exactly six fractional digits; `Z` or a `±hh:mm` offset).
pub(crate) fn is_micro_time(text: &str) -> bool {
    let b = text.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    let shape = b.len() >= 27
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'.'
        && digits(20..26);
    let zone = &text.get(26..).unwrap_or_default();
    let zone_ok = *zone == "Z"
        || (zone.len() == 6
            && (zone.starts_with('+') || zone.starts_with('-'))
            && zone.as_bytes()[3] == b':'
            && zone[1..3].bytes().all(|c| c.is_ascii_digit())
            && zone[4..6].bytes().all(|c| c.is_ascii_digit()));
    shape && zone_ok && chrono::DateTime::parse_from_rfc3339(text).is_ok()
}

/// Why a Lease cannot be stored: `Err((code, message))` — 400 when its body cannot be decoded (a
/// MicroTime in another format), 422 when ValidateLeaseSpec or the annotations' size refuse it.
pub(crate) fn check_lease(lease: &Value) -> Result<(), (u16, String)> {
    let spec = &lease["spec"];
    for field in ["acquireTime", "renewTime"] {
        if let Some(text) = spec[field].as_str()
            && !is_micro_time(text)
        {
            return Err((
                400,
                format!(
                    "Lease in version \"v1\" cannot be handled as a Lease: parsing time {text:?} as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse {text:?} as RFC3339Micro"
                ),
            ));
        }
    }
    let mut errors = Vec::new();
    if let Some(seconds) = spec["leaseDurationSeconds"].as_i64()
        && seconds <= 0
    {
        errors.push(format!(
            "spec.leaseDurationSeconds: Invalid value: {seconds}: must be greater than 0"
        ));
    }
    if let Some(transitions) = spec["leaseTransitions"].as_i64()
        && transitions < 0
    {
        errors.push(format!(
            "spec.leaseTransitions: Invalid value: {transitions}: must be greater than or equal to 0"
        ));
    }
    errors.extend(annotations_too_long(lease));
    if errors.is_empty() {
        return Ok(());
    }
    let name = lease["metadata"]["name"].as_str().unwrap_or_default();
    Err((
        422,
        invalid_message("Lease.coordination.k8s.io", name, &errors),
    ))
}

/// The field labels a kind's list accepts (its `AddFieldLabelConversionFunc`).
fn supported_fields(resource: &str) -> &'static [&'static str] {
    match resource {
        "pods" => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        "events" => &[
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        _ => &["metadata.name", "metadata.namespace"],
    }
}

/// Refuse a field selector the kind does not support, as the list handler does (400 BadRequest with
/// the conversion func's error).
pub(crate) fn check_field_selector(resource: &str, selector: &str) -> Result<(), String> {
    for term in super::kube_objects::terms(selector) {
        let label = term
            .split_once("!=")
            .or_else(|| term.split_once("=="))
            .or_else(|| term.split_once('='))
            .map(|(l, _)| l.trim());
        let Some(label) = label else {
            return Err(format!(
                "invalid selector: '{selector}'; can't understand '{term}'"
            ));
        };
        if supported_fields(resource).contains(&label) {
            continue;
        }
        return Err(match resource {
            "pods" | "events" => format!("field label not supported: {label}"),
            _ => format!(
                "{label:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            ),
        });
    }
    Ok(())
}

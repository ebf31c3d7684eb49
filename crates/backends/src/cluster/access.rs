//! Access checks before anything is built or changed: one SelfSubjectAccessReview per verb needed (what
//! `kubectl auth can-i` asks), so a missing permission is named up front, not after a build and a push.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use super::{Cluster, ClusterError, describe};

/// One permission a command needs: `verb` on `resource` (of API `group`, "" for the core group), in the
/// cluster's namespace unless `cluster_scoped`, optionally of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needed {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    pub name: Option<String>,
    pub cluster_scoped: bool,
}

impl Needed {
    /// `verb` on `group/resource` in the cluster's namespace.
    pub fn namespaced(verb: &'static str, group: &'static str, resource: &'static str) -> Needed {
        Needed {
            verb,
            group,
            resource,
            name: None,
            cluster_scoped: false,
        }
    }

    /// The verb on the mesh's namespace object itself (where the record lives).
    pub fn on_namespace(verb: &'static str, namespace: &str) -> Needed {
        Needed {
            verb,
            group: "",
            resource: "namespaces",
            name: Some(namespace.to_string()),
            cluster_scoped: true,
        }
    }

    /// The namespace the review names: the cluster's for a namespaced resource; for the namespace object
    /// itself, that namespace — the API server authorizes `GET /api/v1/namespaces/<ns>` with namespace
    /// `<ns>` (`staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`), so a RoleBinding in
    /// it counts, and a review without it would be denied what the request itself is allowed.
    fn review_namespace(&self, namespace: &str) -> Option<String> {
        match (&self.name, self.resource) {
            (Some(name), "namespaces") => Some(name.clone()),
            _ if self.cluster_scoped => None,
            _ => Some(namespace.to_string()),
        }
    }

    fn describe(&self, namespace: &str) -> String {
        let object = match &self.name {
            Some(name) => format!("{} {name:?}", self.resource),
            None => self.resource.to_string(),
        };
        let group = if self.group.is_empty() {
            String::new()
        } else {
            format!(" (API group {})", self.group)
        };
        if self.cluster_scoped {
            format!("cannot {} {object}{group}", self.verb)
        } else {
            format!(
                "cannot {} {object}{group} in namespace {namespace:?}",
                self.verb
            )
        }
    }
}

impl Cluster {
    /// Ask the API server whether the current identity may do each of `needed`; refuse naming every
    /// missing verb, resource and namespace. A server that cannot answer the question (no
    /// authorization API) is not a refusal: the write itself will then say.
    pub async fn check_access(&self, needed: &[Needed]) -> Result<(), ClusterError> {
        let api: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        let mut missing = Vec::new();
        for need in needed {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(need.verb.to_string()),
                        group: Some(need.group.to_string()),
                        resource: Some(need.resource.to_string()),
                        name: need.name.clone(),
                        namespace: need.review_namespace(&self.namespace),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            let answer = match self
                .timed(api.create(&PostParams::default(), &review))
                .await
            {
                Ok(Ok(answer)) => answer,
                Ok(Err(e)) => {
                    tracing::warn!(
                        "cannot check access in context {}: {}; going on",
                        self.context,
                        describe(&e)
                    );
                    return Ok(());
                }
                Err(()) => return Err(self.timeout_error("create selfsubjectaccessreview")),
            };
            let status = answer.status.unwrap_or_default();
            if !status.allowed {
                let mut text = need.describe(&self.namespace);
                if let Some(reason) = status.reason.filter(|r| !r.is_empty()) {
                    text.push_str(&format!(" ({reason})"));
                }
                missing.push(text);
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(ClusterError::Forbidden {
                context: self.context.clone(),
                missing,
            })
        }
    }
}

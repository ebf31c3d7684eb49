//! Workloads labelled `jr2.dev/module` as machines, with the digests their pods run.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, DeploymentSpec, StatefulSet};
use k8s_openapi::api::core::v1::{Container, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Api;
use kube::api::ListParams;
use serde::de::DeserializeOwned;

use super::{
    ARTIFACT_ANNOTATION, ARTIFACT_IMAGE_ANNOTATION, CONTAINER_ANNOTATION, Cluster, ClusterError,
};
use crate::mesh::model::MODULE_LABEL;
use crate::mesh::refs::repository_of;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
}

impl WorkloadKind {
    /// The kind `word` names (as [`WorkloadKind::as_str`] writes it); None for anything else.
    pub fn named(word: &str) -> Option<WorkloadKind> {
        [
            WorkloadKind::Deployment,
            WorkloadKind::StatefulSet,
            WorkloadKind::DaemonSet,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == word)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One machine on the Kubernetes target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub name: String,
    pub module: String,
    /// The container meshtop sends to (empty when it cannot tell: see `unknown_container`).
    pub container: String,
    /// That container's image in the workload's spec.
    pub image: String,
    /// Why meshtop cannot tell which container is the module's (naming them all and the annotation to
    /// set); None when it can.
    pub unknown_container: Option<String>,
    /// A Deployment paused with `kubectl rollout pause`: a patch of it rolls nothing out until resumed.
    pub paused: bool,
    /// Distinct digests (`sha256:…`) the workload's pods report for that container, sorted.
    pub running_digests: Vec<String>,
    /// Desired replicas (a DaemonSet: the nodes it should run on).
    pub replicas: i32,
    pub ready: i32,
    pub generation: i64,
    pub observed_generation: i64,
    /// The workload's pod selector as a label-selector string (None when it has none).
    pub selector: Option<String>,
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

/// The fields of a workload that do not depend on its kind.
pub(super) struct Shape<'a> {
    pub kind: WorkloadKind,
    pub metadata: &'a ObjectMeta,
    pub template: Option<&'a PodTemplateSpec>,
    pub selector: Option<&'a LabelSelector>,
    pub replicas: i32,
    pub ready: i32,
    pub observed_generation: i64,
    pub paused: bool,
}

pub(super) trait Kind:
    kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + fmt::Debug
{
    fn shape(&self) -> Shape<'_>;
}

/// Deployments and StatefulSets have the same shape: spec.replicas and status.readyReplicas.
macro_rules! replicated_kind {
    ($type:ty, $kind:expr, $paused:ident) => {
        impl Kind for $type {
            fn shape(&self) -> Shape<'_> {
                let spec = self.spec.as_ref();
                let status = self.status.as_ref();
                Shape {
                    kind: $kind,
                    metadata: &self.metadata,
                    template: spec.map(|s| &s.template),
                    selector: spec.map(|s| &s.selector),
                    replicas: spec.and_then(|s| s.replicas).unwrap_or(1),
                    ready: status.and_then(|s| s.ready_replicas).unwrap_or(0),
                    observed_generation: status.and_then(|s| s.observed_generation).unwrap_or(0),
                    paused: $paused(spec),
                }
            }
        }
    };
}

/// `spec.paused` (`kubectl rollout pause`): only Deployments have it.
fn deployment_paused(spec: Option<&DeploymentSpec>) -> bool {
    spec.and_then(|s| s.paused).unwrap_or(false)
}

fn never_paused<T>(_: Option<&T>) -> bool {
    false
}

replicated_kind!(Deployment, WorkloadKind::Deployment, deployment_paused);
replicated_kind!(StatefulSet, WorkloadKind::StatefulSet, never_paused);

impl Kind for DaemonSet {
    fn shape(&self) -> Shape<'_> {
        let spec = self.spec.as_ref();
        let status = self.status.as_ref();
        Shape {
            kind: WorkloadKind::DaemonSet,
            metadata: &self.metadata,
            template: spec.map(|s| &s.template),
            selector: spec.map(|s| &s.selector),
            replicas: status.map(|s| s.desired_number_scheduled).unwrap_or(0),
            ready: status.map(|s| s.number_ready).unwrap_or(0),
            observed_generation: status.and_then(|s| s.observed_generation).unwrap_or(0),
            paused: false,
        }
    }
}

/// The digest in a container status' imageID: the part after `@`, or the whole id when it is `sha256:…`.
pub(super) fn digest_of_image_id(image_id: &str) -> Option<String> {
    if let Some((_, digest)) = image_id.rsplit_once('@') {
        return Some(digest.to_string()).filter(|d| !d.is_empty());
    }
    let id = image_id.strip_prefix("docker://").unwrap_or(image_id);
    id.starts_with("sha256:").then(|| id.to_string())
}

/// The artifact a pod of a kind-loaded workload runs (asked only where the target delivers by `kind
/// load`), as meshtop wrote it on the pod template of the
/// revision the pod belongs to (`jr2.dev/artifact`; a pod carries its template's annotations). A kind-loaded
/// image is named by its ref (no `@digest`), and the digest containerd reports for it is the one it computed
/// at import (`docker.io/library/import-…@sha256:…` or `repo@sha256:…`), which names no artifact. The
/// annotation is believed only while the pod's container still runs a ref of the module's repository
/// without a digest, and (once the send wrote it beside: `jr2.dev/artifact-image`) the very image it was
/// sent as — someone who sets another image back leaves the annotation behind.
fn kind_loaded_artifact(pod: &Pod, container: &str, module: &str) -> Option<String> {
    let annotations = pod.metadata.annotations.as_ref()?;
    let artifact = annotations
        .get(ARTIFACT_ANNOTATION)
        .filter(|a| a.starts_with("sha256:"))?;
    let image = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == container)?
        .image
        .as_deref()?;
    let of_module = repository_of(image).rsplit('/').next() == Some(module);
    let sent_as = annotations
        .get(ARTIFACT_IMAGE_ANNOTATION)
        .is_none_or(|sent| sent == image);
    (of_module && sent_as && !image.contains('@')).then(|| artifact.clone())
}

/// Why no container of a workload is the module's: the containers listed (init containers too)
/// and the annotation that names one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum UnknownContainer {
    #[error(
        "its annotation {CONTAINER_ANNOTATION}={name} names none of its containers: {listed}; set it to the container that runs module {module}"
    )]
    AnnotationNamesNone {
        name: String,
        module: String,
        listed: String,
    },
    #[error(
        "none of its containers runs an image of module {module} (a repository ending in /{module}): {listed}; set the annotation {CONTAINER_ANNOTATION}=<container> on it to name the module's"
    )]
    NoneOfModule { module: String, listed: String },
    #[error(
        "more than one of its containers runs an image of module {module}: {listed}; set the annotation {CONTAINER_ANNOTATION}=<container> on it to name the module's"
    )]
    MoreThanOne { module: String, listed: String },
}

/// The container of a workload that is the module's: the one the annotation `jr2.dev/container` names,
/// else the only one whose image repository is the module's (the mesh's `[registry/]<mesh>/<module>`, or
/// any path ending in `/<module>`). Otherwise none, and the error names every container (init containers
/// too) and the annotation to set: meshtop never guesses, since a wrong guess overwrites another program.
pub(super) fn choose_container<'a>(
    containers: &'a [Container],
    init_containers: &[Container],
    annotation: Option<&str>,
    module: &str,
) -> Result<&'a Container, UnknownContainer> {
    let listed = || {
        let mut all: Vec<String> = containers
            .iter()
            .map(|c| format!("{} ({})", c.name, c.image.as_deref().unwrap_or("no image")))
            .collect();
        all.extend(init_containers.iter().map(|c| {
            format!(
                "init container {} ({})",
                c.name,
                c.image.as_deref().unwrap_or("no image")
            )
        }));
        all.join(", ")
    };
    if let Some(name) = annotation {
        return containers.iter().find(|c| c.name == name).ok_or_else(|| {
            UnknownContainer::AnnotationNamesNone {
                name: name.to_string(),
                module: module.to_string(),
                listed: listed(),
            }
        });
    }
    let of_module: Vec<&Container> = containers
        .iter()
        .filter(|c| {
            c.image
                .as_deref()
                .map(repository_of)
                .is_some_and(|repo| repo.rsplit('/').next() == Some(module))
        })
        .collect();
    match of_module.as_slice() {
        [one] => Ok(one),
        [] if containers.len() == 1 && init_containers.is_empty() => Ok(&containers[0]),
        [] => Err(UnknownContainer::NoneOfModule {
            module: module.to_string(),
            listed: listed(),
        }),
        _ => Err(UnknownContainer::MoreThanOne {
            module: module.to_string(),
            listed: listed(),
        }),
    }
}

/// Does a label selector select these labels? (An absent selector selects nothing, as Kubernetes does.)
pub(super) fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_ok = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    let empty = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|m| m.is_empty());
    !empty && labels_ok && expressions_ok
}

/// A label selector as the API's `labelSelector` query string.
pub(super) fn selector_string(selector: &LabelSelector) -> Option<String> {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            _ => continue,
        });
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

/// Turn one workload (of any kind) into a machine, with the digests of the pods it selects.
/// `loaded_images`: the target delivers by `kind load`, so a pod's artifact annotation may say
/// what it runs ([`kind_loaded_artifact`]); elsewhere only its `imageID` does.
pub(super) fn workload_of(shape: Shape<'_>, pods: &[Pod], loaded_images: bool) -> Option<Workload> {
    let name = shape.metadata.name.clone()?;
    let module = shape.metadata.labels.as_ref()?.get(MODULE_LABEL)?.clone();
    let pod_spec = shape.template.and_then(|t| t.spec.as_ref())?;
    let annotation = shape
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONTAINER_ANNOTATION));
    let chosen = choose_container(
        &pod_spec.containers,
        pod_spec.init_containers.as_deref().unwrap_or_default(),
        annotation.map(String::as_str),
        &module,
    );
    let mut running_digests: Vec<String> = Vec::new();
    if let (Some(selector), Ok(container)) = (shape.selector, &chosen) {
        for pod in pods {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            if !selector_matches(selector, &labels) {
                continue;
            }
            let statuses = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref());
            let loaded = loaded_images
                .then(|| kind_loaded_artifact(pod, &container.name, &module))
                .flatten();
            for status in statuses
                .into_iter()
                .flatten()
                .filter(|s| s.name == container.name)
            {
                if let Some(artifact) = &loaded {
                    running_digests.push(artifact.clone());
                } else if let Some(digest) = digest_of_image_id(&status.image_id) {
                    running_digests.push(digest);
                }
            }
        }
    }
    running_digests.sort();
    running_digests.dedup();
    let (container, image, unknown_container) = match chosen {
        Ok(c) => (c.name.clone(), c.image.clone().unwrap_or_default(), None),
        // Said on the machine's line: the workload's own words stop here.
        Err(why) => (String::new(), String::new(), Some(why.to_string())),
    };
    Some(Workload {
        kind: shape.kind,
        name,
        module,
        container,
        image,
        unknown_container,
        paused: shape.paused,
        running_digests,
        replicas: shape.replicas,
        ready: shape.ready,
        generation: shape.metadata.generation.unwrap_or(0),
        observed_generation: shape.observed_generation,
        selector: shape.selector.and_then(selector_string),
    })
}

impl Cluster {
    /// List every labelled workload with one list call per kind, plus ONE pods list for the namespace.
    pub async fn machines(&self) -> Result<Vec<Workload>, ClusterError> {
        let labelled = ListParams::default().labels(MODULE_LABEL);
        let deployments = self.list_all::<Deployment>(&labelled).await?;
        let statefulsets = self.list_all::<StatefulSet>(&labelled).await?;
        let daemonsets = self.list_all::<DaemonSet>(&labelled).await?;
        if deployments.is_empty() && statefulsets.is_empty() && daemonsets.is_empty() {
            return Ok(Vec::new());
        }
        let pods = self.list_all::<Pod>(&ListParams::default()).await?;
        let mut machines: Vec<Workload> = deployments
            .iter()
            .map(Kind::shape)
            .chain(statefulsets.iter().map(Kind::shape))
            .chain(daemonsets.iter().map(Kind::shape))
            .filter_map(|shape| workload_of(shape, &pods, self.loaded_images))
            .collect();
        machines.sort_by(|a, b| (&a.module, a.kind, &a.name).cmp(&(&b.module, b.kind, &b.name)));
        Ok(machines)
    }

    /// A list call, following `continue` pages (a server that pages costs one call per page). A continue
    /// token that expired (410 Gone, reason Expired: the apiserver compacted past it, see
    /// `staging/src/k8s.io/apiserver/pkg/storage/errors.go`) restarts the list from the beginning, bounded.
    pub(super) async fn list_all<K>(&self, params: &ListParams) -> Result<Vec<K>, ClusterError>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.namespace);
        let what = || format!("list {} in {}", K::kind(&()), self.namespace);
        let mut restarts = 0;
        'list: loop {
            let mut params = params.clone();
            // kubectl lists in chunks of 500 (`--chunk-size`); so does meshtop.
            params.limit = params.limit.or(Some(LIST_CHUNK));
            let mut items = Vec::new();
            loop {
                let page = match self.timed(api.list(&params)).await {
                    Ok(Ok(page)) => page,
                    Ok(Err(e))
                        if super::status_code(&e) == Some(410)
                            && params.continue_token.is_some()
                            && restarts < LIST_RESTARTS =>
                    {
                        restarts += 1;
                        tracing::debug!("{}: continue token expired; listing again", what());
                        continue 'list;
                    }
                    Ok(Err(e)) => return Err(self.api_error(what(), e)),
                    Err(()) => return Err(self.timeout_error(what())),
                };
                items.extend(page.items);
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params.continue_token = Some(token),
                    None => return Ok(items),
                }
            }
        }
    }
}

/// How many items one list page asks for.
const LIST_CHUNK: u32 = 500;
/// How many times a list restarts after its continue token expired.
const LIST_RESTARTS: u32 = 3;

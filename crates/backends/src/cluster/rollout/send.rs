//! A send: the workload's container image replaced by a JSON patch whose `test` guards the image the
//! workload was seen running (and, for an artifact id, one annotation key on the pod template).

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::revision::template_image;
use crate::cluster::machines::{Kind, Workload, WorkloadKind};
use crate::cluster::{
    ARTIFACT_ANNOTATION, ARTIFACT_IMAGE_ANNOTATION, CONTAINER_ANNOTATION, Cluster, ClusterError,
    status_code,
};

/// How many times a send re-reads and retries when the guard of a map it creates failed.
const SEND_ATTEMPTS: u32 = 3;

impl Cluster {
    /// Patch the workload's container image to `to_image` with a JSON patch whose `test` guards the image the
    /// workload was seen running; with `artifact_id`, also stamp it on the pod template.
    pub async fn send(
        &self,
        w: &Workload,
        to_image: &str,
        artifact_id: Option<&str>,
    ) -> Result<(), ClusterError> {
        // Never a guess: a wrong container is another program overwritten.
        if let Some(why) = &w.unknown_container {
            return Err(self.unknown_container(w, why));
        }
        match w.kind {
            WorkloadKind::Deployment => {
                self.send_kind::<Deployment>(w, to_image, artifact_id).await
            }
            WorkloadKind::StatefulSet => {
                self.send_kind::<StatefulSet>(w, to_image, artifact_id)
                    .await
            }
            WorkloadKind::DaemonSet => self.send_kind::<DaemonSet>(w, to_image, artifact_id).await,
        }
    }

    pub(super) async fn send_kind<K: Kind>(
        &self,
        w: &Workload,
        to_image: &str,
        artifact_id: Option<&str>,
    ) -> Result<(), ClusterError> {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = self.call(format!("get {w}"), api.get(&w.name)).await?;
            let patch = self.send_patch(&current, w, to_image, artifact_id)?;
            let patched = self
                .timed(api.patch(&w.name, &PatchParams::default(), &Patch::Json::<()>(patch)))
                .await
                .map_err(|()| self.timeout_error(format!("patch {w}")))?;
            let e = match patched {
                Ok(_) => return Ok(()),
                Err(e) if matches!(status_code(&e), Some(409 | 422)) => e,
                Err(e) => return Err(self.api_error(format!("patch {w}"), e)),
            };
            let running = self
                .timed(api.get(&w.name))
                .await
                .ok()
                .and_then(Result::ok)
                .and_then(|k| template_image(&k, &w.container))
                .unwrap_or_else(|| "(unknown)".into());
            if running != w.image {
                return Err(ClusterError::Conflict {
                    workload: w.to_string(),
                    running,
                    detail: format!("expected {:?} in container {:?}", w.image, w.container),
                });
            }
            // The image is still ours: what failed was the guard of a map we had to create (someone wrote
            // the workload in between). Read it again and retry, bounded.
            if attempt >= SEND_ATTEMPTS {
                return Err(self.api_error(format!("patch {w}"), e));
            }
        }
    }

    /// The JSON patch of a send: `test` the image seen, `replace` it; add the artifact annotation as one key.
    pub(super) fn send_patch<K: Kind>(
        &self,
        current: &K,
        w: &Workload,
        to_image: &str,
        artifact_id: Option<&str>,
    ) -> Result<json_patch::Patch, ClusterError> {
        let shape = current.shape();
        let template = shape.template;
        let containers = template
            .and_then(|t| t.spec.as_ref())
            .map(|s| s.containers.as_slice())
            .unwrap_or_default();
        let Some(index) = containers.iter().position(|c| c.name == w.container) else {
            return Err(ClusterError::Conflict {
                workload: w.to_string(),
                running: "no container named ".to_string() + &w.container,
                detail: "its containers changed since it was read".into(),
            });
        };
        let image_path = format!("/spec/template/spec/containers/{index}/image");
        let mut ops = vec![
            json!({"op": "test", "path": image_path, "value": w.image}),
            json!({"op": "replace", "path": image_path, "value": to_image}),
        ];
        if let Some(artifact) = artifact_id {
            // One key, never the whole map: annotations others wrote between our GET and our PATCH stay.
            // Where the map (or the template's metadata) is absent it is created empty first, guarded by
            // a `test` of the resourceVersion we read, so an `add` never replaces a map someone just wrote.
            let metadata = template.and_then(|t| t.metadata.as_ref());
            if metadata.and_then(|m| m.annotations.as_ref()).is_none() {
                let resource_version = current.meta().resource_version.clone().unwrap_or_default();
                ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}));
                if metadata.is_none() {
                    ops.push(json!({"op": "add", "path": "/spec/template/metadata", "value": {}}));
                }
                ops.push(json!({"op": "add", "path": "/spec/template/metadata/annotations", "value": {}}));
            }
            for (key, value) in [
                (ARTIFACT_ANNOTATION, artifact),
                (ARTIFACT_IMAGE_ANNOTATION, to_image),
            ] {
                let key = key.replace('~', "~0").replace('/', "~1");
                ops.push(json!({"op": "add", "path": format!("/spec/template/metadata/annotations/{key}"), "value": value}));
            }
        }
        serde_json::from_value(serde_json::Value::Array(ops)).map_err(|e| ClusterError::Config {
            context: Some(self.context.clone()),
            source: format!("cannot build the JSON patch: {e}").into(),
        })
    }

    /// The refusal to send to a workload whose module container meshtop cannot tell.
    pub fn unknown_container(&self, w: &Workload, why: &str) -> ClusterError {
        ClusterError::UnknownContainer {
            workload: format!("{w} in {}", self.place()),
            module: w.module.clone(),
            why: format!(
                "{why} (kubectl annotate {}/{} -n {} {CONTAINER_ANNOTATION}=<container>)",
                w.kind.as_str().to_lowercase(),
                w.name,
                self.namespace
            ),
        }
    }
}

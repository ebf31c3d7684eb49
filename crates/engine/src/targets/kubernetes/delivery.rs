//! How an artifact gets to the cluster: pushed to the mesh's registry (the cluster pulls it), or
//! `kind load`ed into a kind cluster; what the registry published for a ref; whether the target
//! still holds an artifact.

use std::sync::{Arc, Mutex};

use crate::backends::cluster::kind_load;
use crate::backends::credentials::{self, Credentials};
use crate::backends::registry::{Published, RegistryClient, repository_in};
use crate::backends::state::{StateDb, locked};
use crate::error::TargetError;
use crate::mesh::model::{Mesh, RecordEntry, Registry};
use crate::mesh::progress::DeliveredBy;
use crate::progress::{Emitter, Payload};
use crate::targets::seam::{Artifact, Delivery, Holding, Reach};
use crate::targets::{host, sign};

use super::KubeError;

use super::Kube;

impl Kube {
    pub(super) async fn credentials(&self, host: &str) -> Result<Option<Credentials>, TargetError> {
        self.creds
            .get_or_init(|| async { credentials::for_registry(host).await.map_err(Arc::new) })
            .await
            .clone()
            .map_err(TargetError::Credentials)
    }

    pub(super) async fn deliver_now(
        &self,
        mesh: &Mesh,
        artifact: Artifact<'_>,
        reach: Reach<'_>,
        emitter: &Emitter,
    ) -> Result<Option<String>, TargetError> {
        let (module, reference) = (artifact.module, artifact.reference);
        match self.delivery_here()? {
            Delivery::Host => Ok(None),
            Delivery::KindLoad(name) => {
                kind_load(&name, reference).await?;
                emitter.emit(
                    Payload::Delivered {
                        reference: reference.to_string(),
                        by: DeliveredBy::Loaded {
                            cluster: name.clone(),
                        },
                    },
                    Some(module),
                    format!("kind load {reference} into kind cluster {name}"),
                );
                Ok(None)
            }
            Delivery::Push(registry) => {
                let creds = self.credentials(&registry.host).await?;
                let docker = reach.daemon.get().await.map_err(TargetError::Unreachable)?;
                let (digest, _) = docker
                    .push_built(reference, artifact.digest, &registry, creds.as_ref())
                    .await?;
                let pushed = crate::attest::Pushed {
                    module,
                    reference,
                    manifest: &digest,
                    inputs: None,
                };
                sign::sign_pushed(mesh, &registry, creds, &pushed, emitter).await?;
                host::note_published(&reach, &mesh.name, &artifact, &digest)?;
                emitter.emit(
                    Payload::Delivered {
                        reference: reference.to_string(),
                        by: DeliveredBy::Pushed {
                            digest: digest.clone(),
                        },
                    },
                    Some(module),
                    format!("pushed {reference} → {digest}"),
                );
                Ok(Some(digest))
            }
        }
    }

    /// The manifest a send deploys for `entry` (and what a pod reporting it runs): the record's own
    /// (pushed or verified when it was stamped), else the one this machine's build pushed, else the
    /// ref's tag asked once for a record from before manifests were kept — and then only a manifest
    /// whose config is the recorded artifact. Ok(None): the registry holds nothing under the ref.
    pub(super) async fn manifest_of(
        &self,
        mesh: &Mesh,
        db: &Mutex<StateDb>,
        module: &str,
        entry: &RecordEntry,
    ) -> Result<Option<String>, TargetError> {
        if let Some(manifest) = &entry.manifest {
            return Ok(Some(manifest.clone()));
        }
        let known = locked(db)
            .map_err(TargetError::Handle)?
            .build_by_digest(&mesh.name, &entry.digest)?
            .and_then(|b| b.published_digest);
        if known.is_some() {
            return Ok(known);
        }
        let Some(registry) = self.registry.as_ref() else {
            return Ok(None);
        };
        let creds = self.credentials(&registry.host).await?;
        let client = RegistryClient::new(registry, creds)?;
        let (path, tag) = repository_in(&registry.host, &entry.reference);
        let Published::Present { digest } = client.manifest(path, tag).await? else {
            return Ok(None);
        };
        let names = client.artifact_of(path, &digest).await?;
        if names.as_deref() != Some(entry.digest.as_str()) {
            return Err(KubeError::NotTheArtifact {
                reference: entry.reference.clone(),
                registry: registry.host.clone(),
                manifest: digest,
                names: names.unwrap_or_else(|| "nothing".into()),
                artifact: entry.digest.clone(),
                module: module.to_string(),
            }
            .into());
        }
        Ok(Some(digest))
    }

    /// A pushed artifact must still be in the registry; a loaded one on the host daemon.
    pub(super) async fn holds_now(
        &self,
        mesh: &Mesh,
        wanted: &RecordEntry,
        reach: Reach<'_>,
    ) -> Result<Holding, TargetError> {
        let Ok(Delivery::Push(registry)) = self.delivery_here() else {
            return host::holds(reach.daemon, wanted).await;
        };
        let published = self
            .manifest_of(mesh, reach.db, "", wanted)
            .await
            .ok()
            .flatten();
        let creds = self.credentials(&registry.host).await?;
        let client = RegistryClient::new(&registry, creds)?;
        let (path, tag) = repository_in(&registry.host, &wanted.reference);
        let answer = match &published {
            Some(digest) => client.manifest(path, digest).await,
            None => client.manifest(path, tag).await,
        };
        match answer? {
            Published::Present { .. } => Ok(Holding::Held),
            Published::Absent => Ok(Holding::Gone(format!(
                "registry {} (namespace {})",
                registry.host, self.cluster.namespace
            ))),
        }
    }

    pub(super) fn delivery_here(&self) -> Result<Delivery, TargetError> {
        if let Some(registry) = &self.registry {
            return Ok(Delivery::Push(registry.clone()));
        }
        match self.cluster.kind_cluster() {
            Some(name) => Ok(Delivery::KindLoad(name.to_string())),
            None => Err(KubeError::NoDelivery {
                context: self.cluster.context.clone(),
                namespace: self.cluster.namespace.clone(),
            }
            .into()),
        }
    }

    /// The cluster pulls from the registry that vouched: nothing to push. The host daemon needs the
    /// artifact only when a module of this converge builds FROM it (then it is pulled there).
    pub(super) async fn fetch(
        &self,
        mesh: &Mesh,
        artifact: Artifact<'_>,
        manifest: &str,
        on_host: bool,
        reach: Reach<'_>,
        emitter: &Emitter,
    ) -> Result<(), TargetError> {
        if on_host && let Some(registry) = &mesh.registry {
            let creds = self.credentials(&registry.host).await?;
            host::pull_vouched(
                &reach,
                &mesh.name,
                &artifact,
                manifest,
                registry,
                creds.as_ref(),
                emitter,
            )
            .await?;
        }
        emitter.emit(
            Payload::Delivered {
                reference: artifact.reference.to_string(),
                by: DeliveredBy::InRegistry {
                    manifest: manifest.to_string(),
                },
            },
            Some(artifact.module),
            format!(
                "{} is in the registry as {manifest}: nothing to push",
                artifact.reference
            ),
        );
        Ok(())
    }

    /// Pushed: the registry must hold it (nothing is pushed; the cluster pulls it). Loaded: the
    /// host must hold it, and it is loaded into this kind cluster.
    pub(super) async fn bring_here(
        &self,
        mesh: &Mesh,
        artifact: Artifact<'_>,
        reach: Reach<'_>,
        emitter: &Emitter,
    ) -> Result<Holding, TargetError> {
        let wanted = artifact.entry();
        match self.delivery_here()? {
            Delivery::KindLoad(name) => {
                let held = host::holds(reach.daemon, &wanted).await?;
                if held == Holding::Held {
                    kind_load(&name, artifact.reference).await?;
                    emitter.emit(
                        Payload::Delivered {
                            reference: artifact.reference.to_string(),
                            by: DeliveredBy::Loaded {
                                cluster: name.clone(),
                            },
                        },
                        Some(artifact.module),
                        format!("kind load {} into kind cluster {name}", artifact.reference),
                    );
                }
                Ok(held)
            }
            Delivery::Push(_) | Delivery::Host => self.holds_now(mesh, &wanted, reach).await,
        }
    }

    /// The credentials a push uses (the Docker config's, read once per connection).
    pub(super) async fn client(&self, registry: &Registry) -> Result<RegistryClient, TargetError> {
        let creds = self.credentials(&registry.host).await?;
        RegistryClient::new(registry, creds).map_err(TargetError::from)
    }
}

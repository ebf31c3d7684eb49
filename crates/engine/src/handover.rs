//! The hand-over: what a builder built pushed to the registry the pool's builders share (and
//! signed there when the converge signs), and a dependent's base — or named context — brought to
//! the builder that builds it, by a manifest digest this machine pushed or verified, never by the
//! base's tag. The pulled image must be the base's artifact. The placer (`place.rs`) decides who
//! builds where; this room only moves artifacts between builders.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::build::Built;
use super::converging::Converging;
use super::error::{BaseUnreached, HandOverError, HandOverFault, Tried};
use super::progress::Payload;
use super::targets::{Pushed, sign_pushed};
use crate::backends::credentials::Credentials;
use crate::backends::daemon::Daemon;
use crate::backends::registry::{Published, RegistryClient, repository_in};
use crate::mesh::model::{RecordEntry, Registry};
use crate::mesh::progress::DeliveredBy;
use crate::mesh::refs::repository_of;
use crate::mesh::text::short_id;

/// A dependent's base: its module, the record's entry for it, and the manifest this converge
/// handed it over as (pushed by a builder, or verified by the registry voucher).
pub(crate) struct BaseOf {
    pub(crate) module: String,
    pub(crate) entry: RecordEntry,
    pub(crate) handed: Option<String>,
}

/// The registry artifacts cross through between builders, with the credentials a push uses and
/// how long a push may take.
#[derive(Clone)]
pub(crate) struct HandOver<'a> {
    cx: Converging<'a>,
    pub(crate) registry: Registry,
    creds: Option<Credentials>,
    deadline: Duration,
}

impl<'a> HandOver<'a> {
    pub(crate) fn new(
        cx: Converging<'a>,
        registry: Registry,
        creds: Option<Credentials>,
        deadline: Duration,
    ) -> HandOver<'a> {
        HandOver {
            cx,
            registry,
            creds,
            deadline,
        }
    }

    /// The builder pushes what it built to the registry artifacts cross through, and it is signed
    /// there when the converge signs (a push that is not signed would not vouch on a machine that
    /// trusts only what is): the manifest digest, or why it could not.
    pub(crate) async fn push(
        &self,
        builder: &str,
        daemon: &Daemon,
        built: &Built,
        artifact: &str,
    ) -> Result<String, HandOverError> {
        let registry = &self.registry;
        let module = built.planned.name.clone();
        let reference = built.planned.reference.clone().unwrap_or_default();
        let could_not = |why: HandOverFault| HandOverError::Push {
            builder: builder.to_string(),
            reference: reference.clone(),
            registry: registry.host.clone(),
            why,
        };
        let pushing = Instant::now();
        // The registry's manifest is checked to be the image this build produced before anything is
        // signed or recorded (another process on the builder's daemon may have moved the tag).
        let push = daemon.push_built(&reference, artifact, registry, self.creds.as_ref());
        // A push that hangs (a registry that stops answering mid-upload) must not hold the converge.
        let digest = match tokio::time::timeout(self.deadline, push).await {
            Ok(pushed) => pushed.map_err(|e| could_not(HandOverFault::Push(e)))?.0,
            Err(_) => {
                let seconds = self.deadline.as_secs();
                return Err(could_not(HandOverFault::Deadline { seconds }));
            }
        };
        let push_ms = i64::try_from(pushing.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.cx.emitter.emit(
            Payload::Delivered {
                reference: reference.clone(),
                by: DeliveredBy::Published {
                    registry: registry.host.clone(),
                    digest: digest.clone(),
                },
            },
            Some(&module),
            format!(
                "builder {} pushed {reference} ({}) to registry {} → {digest} in {} ms",
                builder,
                short_id(artifact),
                registry.host,
                push_ms
            ),
        );
        let pushed = Pushed {
            module: &module,
            reference: &reference,
            manifest: &digest,
            inputs: built.planned.inputs.as_ref().map(|i| i.digest.as_str()),
        };
        sign_pushed(
            self.cx.mesh,
            registry,
            self.creds.clone(),
            &pushed,
            self.cx.emitter,
        )
        .await
        .map_err(|source| HandOverError::Unsigned {
            builder: builder.to_string(),
            reference: reference.clone(),
            registry: registry.host.clone(),
            digest: digest.clone(),
            source,
        })?;
        let id = built.correlation_id.clone();
        if let Ok(db) = crate::backends::state::locked(self.cx.db) {
            let _ = db.set_published(&id, &reference, &digest);
            let _ = db.set_push_time(&id, push_ms);
        }
        Ok(digest)
    }

    /// Each named context brought to the builder `daemon` as its base is (`base_for`), by the name
    /// the Dockerfile writes.
    pub(crate) async fn contexts_for(
        &self,
        daemon: &Daemon,
        contexts: &[(String, BaseOf)],
    ) -> Result<BTreeMap<String, Option<String>>, BaseUnreached> {
        let mut by_name = BTreeMap::new();
        for (name, module) in contexts {
            by_name.insert(name.clone(), self.base_for(daemon, module).await?);
        }
        Ok(by_name)
    }

    /// `BASE` for a build on `daemon`: None when the builder holds the base's artifact (its id names
    /// it there, and BuildKit's tag for it is checked to name it from the build's start to its end).
    /// Otherwise the builder pulls the base by a manifest digest, never by a tag: the one this converge
    /// pushed or the registry voucher verified, else the one this machine's history pushed, else the
    /// one the registry answers for the base's ref now, else one pushed now from the host, which holds
    /// every artifact the Docker target's record names. The pulled image must be the base's artifact;
    /// a manifest that names another image is refused, naming both. Err: the builder cannot reach the
    /// base (the build fails and says why).
    pub(crate) async fn base_for(
        &self,
        daemon: &Daemon,
        base: &BaseOf,
    ) -> Result<Option<String>, BaseUnreached> {
        let registry = &self.registry;
        let entry = &base.entry;
        if daemon.has_image(&entry.digest).await.unwrap_or(false) {
            return Ok(None);
        }
        let fetch = BaseFetch {
            through: self,
            daemon,
            module: &base.module,
            entry,
        };
        let mut faults = Vec::new();
        // This converge's hand-over or verification, else the record's manifest, else this
        // machine's own push of it.
        let known = base
            .handed
            .clone()
            .or_else(|| entry.manifest.clone())
            .or_else(|| fetch.published_here());
        if let Some(manifest) = known {
            match fetch.pull(&manifest).await {
                Ok(base) => return Ok(base),
                Err(fault) if !fault.another_way_may_work() => return Err(fault),
                Err(fault) => faults.push(fault),
            }
        }
        let client = RegistryClient::new(registry, self.creds.clone())?;
        let (path, tag) = repository_in(&registry.host, &entry.reference);
        let host = self.cx.host.get().await?;
        let on_host = host.has_image(&entry.digest).await.unwrap_or(false);
        if let Ok(Published::Present { digest }) = client.manifest(path, tag).await {
            match fetch.pull(&digest).await {
                Ok(base) => return Ok(base),
                // The tag names a look-alike: the host's artifact is pushed over it, if it has it.
                Err(fault) if !on_host && !fault.another_way_may_work() => return Err(fault),
                Err(fault) => faults.push(fault),
            }
        }
        if !on_host {
            return Err(BaseUnreached::Nowhere {
                artifact: short_id(&entry.digest).to_string(),
                reference: entry.reference.clone(),
                registry: registry.host.clone(),
                tried: Tried(faults),
            });
        }
        let digest = fetch.push_from(host).await?;
        fetch.pull(&digest).await
    }
}

/// A base brought to the builder `daemon` that lacks it.
struct BaseFetch<'s, 'a> {
    through: &'s HandOver<'a>,
    daemon: &'s Daemon,
    module: &'s str,
    entry: &'s RecordEntry,
}

impl BaseFetch<'_, '_> {
    /// The manifest this machine's history says the base's artifact was pushed as.
    fn published_here(&self) -> Option<String> {
        crate::backends::state::locked(self.through.cx.db)
            .ok()?
            .build_by_digest(&self.through.cx.mesh.name, &self.entry.digest)
            .ok()
            .flatten()
            .and_then(|build| build.published_digest)
    }

    /// Pull `manifest` of the base's repository onto the builder and check it is the artifact:
    /// `BASE` then names the artifact (None). A multi-platform base's artifact is its index's
    /// digest, which names itself: `BASE` is `repo@<index>`, nothing pulled.
    async fn pull(&self, manifest: &str) -> Result<Option<String>, BaseUnreached> {
        let repository = repository_of(&self.entry.reference);
        if manifest == self.entry.digest {
            return Ok(Some(format!("{repository}@{manifest}")));
        }
        let server = repository.split('/').next().unwrap_or(repository);
        let auth = self.through.creds.as_ref().map(|c| c.for_daemon(server));
        let reference = &self.entry.reference;
        let pinned = format!("{repository}@{manifest}");
        let id = self
            .daemon
            .pull_by_digest(repository, manifest, auth)
            .await
            .map_err(|source| BaseUnreached::Pull {
                pinned: pinned.clone(),
                source,
            })?;
        if id == self.entry.digest {
            // Tagged under the base's ref only now that it is the artifact.
            self.daemon
                .tag(&id, reference)
                .await
                .map_err(|source| BaseUnreached::Tag {
                    pinned: pinned.clone(),
                    reference: reference.clone(),
                    source,
                })?;
            return Ok(None);
        }
        // Nothing was tagged; the look-alike's pinned name goes too (best effort: the refusal
        // below is what matters).
        let _ = self.daemon.remove(&pinned).await;
        Err(BaseUnreached::LookAlike {
            registry: self.through.registry.host.clone(),
            reference: reference.clone(),
            manifest: manifest.to_string(),
            id,
            artifact: self.entry.digest.clone(),
        })
    }

    /// Push the base's artifact from the host (tagged under its ref first: the tag may name
    /// another image there), signed as any push: its manifest digest.
    async fn push_from(&self, host: &Daemon) -> Result<String, HandOverError> {
        let (through, entry) = (self.through, self.entry);
        host.tag(&entry.digest, &entry.reference)
            .await
            .map_err(HandOverError::BaseTag)?;
        let (digest, _) = host
            .push_built(
                &entry.reference,
                &entry.digest,
                &through.registry,
                through.creds.as_ref(),
            )
            .await
            .map_err(HandOverError::BasePush)?;
        let pushed = Pushed {
            module: self.module,
            reference: &entry.reference,
            manifest: &digest,
            inputs: None,
        };
        sign_pushed(
            through.cx.mesh,
            &through.registry,
            through.creds.clone(),
            &pushed,
            through.cx.emitter,
        )
        .await
        .map_err(|source| HandOverError::BaseUnsigned {
            digest: digest.clone(),
            source,
        })?;
        Ok(digest)
    }
}

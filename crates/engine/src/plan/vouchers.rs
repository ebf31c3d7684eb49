//! The vouchers the planner asks when the record leaves a module to build: the host daemon (once
//! a plan) and the mesh's registry (in rounds, all of a tier's refs at once).

use super::{ManifestSource, PlannedModule, Planner};
use crate::mesh::cosign::SignatureVerdict;
use crate::mesh::decide::{self, HostAnswer, Question, RefState, RegistryAnswer, Verdict};
use crate::mesh::provenance::Wanted;
use crate::vouch::RegistryVoucher;

impl Planner<'_> {
    /// Ask `voucher` (the mesh's registry) for what the record and the host leave to build.
    pub(crate) fn use_registry(&mut self, voucher: Option<RegistryVoucher>) {
        self.registry = voucher;
    }

    pub(crate) fn registry(&self) -> Option<&RegistryVoucher> {
        self.registry.as_ref()
    }

    pub(crate) fn registry_mut(&mut self) -> Option<&mut RegistryVoucher> {
        self.registry.as_mut()
    }

    /// The manifest digest the registry vouched with for `reference`, if it did.
    pub(crate) fn registry_manifest(&self, reference: &str) -> Option<String> {
        match self.registry.as_ref()?.answer(reference) {
            RegistryAnswer::Holds { image, .. } => Some(image.manifest),
            _ => None,
        }
    }

    /// The trusted key whose signature the registry's manifest for `reference` carried, if any.
    pub(crate) fn registry_signer(&self, reference: &str) -> Option<String> {
        match self.registry.as_ref()?.answer(reference) {
            RegistryAnswer::Holds {
                signature: SignatureVerdict::Trusted { key },
                ..
            } => Some(key),
            _ => None,
        }
    }

    pub(crate) fn host_answer(&self) -> &HostAnswer {
        &self.host
    }

    /// Ask the host daemon for its labelled images, once per plan. With `trust`, each is marked
    /// with whether this machine vouches for it (`manifests` knows what it built and verified).
    pub(crate) async fn ask_host(&mut self, manifests: &dyn ManifestSource) {
        if self.host != HostAnswer::NotAsked {
            return;
        }
        self.host = match self.daemon.get().await {
            Ok(daemon) => match daemon.labelled_images().await {
                Ok(images) => HostAnswer::Holds(images),
                Err(error) => HostAnswer::Failed(error.to_string()),
            },
            Err(why) => HostAnswer::Failed(why.to_string()),
        };
        if let HostAnswer::Holds(images) = &mut self.host
            && !self.ctx.mesh.signing.trust.is_empty()
        {
            decide::mark_origins(images, &manifests.vouched_here());
        }
    }

    /// The registry's answer for `question` when the record and the host leave it to build (asked
    /// now, or noted for [`Planner::decide_all`] to ask with the others).
    pub(super) async fn ask_registry(&mut self, question: &Question) -> RegistryAnswer {
        let (Some(voucher), RefState::Known(reference)) = (&mut self.registry, &question.reference)
        else {
            return RegistryAnswer::NotAsked;
        };
        if !decide::needs_registry(question, &self.ctx.record, &self.host) {
            return RegistryAnswer::NotAsked;
        }
        if !voucher.knows(reference) {
            let wanted = Wanted::of_ref(&question.module, reference, question.inputs.as_deref());
            if self.defer_registry {
                self.registry_wanted.push((reference.clone(), wanted));
                return RegistryAnswer::NotAsked;
            }
            voucher.ask(vec![(reference.clone(), wanted)]).await;
        }
        voucher.answer(reference)
    }

    /// Whether an image on the host daemon answers for the target (the target's word), so the host
    /// can tell an artifact the target lost.
    pub(crate) fn host_images_answer(&self) -> bool {
        self.ctx.host_images_answer
    }

    /// Whether a `record` decision made before the host was asked would now be a rebuild
    /// (the host no longer holds its artifact): the plan is then made again.
    pub(crate) fn any_gone(&self, planned: &[&PlannedModule]) -> bool {
        self.host_images_answer()
            && planned.iter().any(|p| {
                !p.multi_platform
                    && decide::gone_from_host(
                        &Verdict {
                            decision: p.decision,
                            reason: String::new(),
                            artifact: p.artifact.clone(),
                            registry: None,
                        },
                        &self.host,
                    )
            })
    }

    /// The recorded artifact of `base` when the host (the target) no longer holds it and `base` is
    /// not selected in this converge, so that nothing here would build it again. Asked only once
    /// the host has answered.
    pub(super) fn unselected_base_gone(&self, base: &str) -> Option<String> {
        if !self.host_images_answer() || self.is_selected(base) {
            return None;
        }
        let HostAnswer::Holds(images) = &self.host else {
            return None;
        };
        let entry = self.ctx.record.get(base)?;
        (!images.iter().any(|image| image.id == entry.digest)).then(|| entry.digest.clone())
    }

    /// Whether a module that builds FROM a base outside the selection would build FROM an artifact
    /// the host lost (decided before the host was asked): the plan is then made again.
    pub(crate) fn any_unselected_base_gone(&self, planned: &[&PlannedModule]) -> bool {
        planned.iter().any(|p| {
            p.decision.builds()
                && p.builds_on
                    .iter()
                    .any(|base| self.unselected_base_gone(base).is_some())
        })
    }
}

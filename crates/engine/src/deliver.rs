//! Builds brought where the target needs them as each one ends, while the other builds go on:
//! the target's pull of what another builder built (out of the registry the pool handed it over
//! through), a publish, a multi-platform index's platform pulled out of it. Only the I/O is here;
//! what the walk keeps (the stamp, the outcomes, what is ready next) is `walk.rs`'s, as each
//! delivery ends.

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::mpsc;

use super::build::Built;
use super::converging::Converging;
use super::error::{TargetError, Undelivery};
use super::place::{Ended, Placed, Unplaced};
use super::targets::Artifact;

/// How many ended builds are delivered at once (each a pull or push on the target): the builds
/// still running keep the machine's cores.
const AT_ONCE: usize = 4;

/// How one build's delivery ended.
pub(crate) enum Delivered {
    /// Where the target needs it: the manifest digest the record keeps with it, when known.
    Done {
        built: Built,
        manifest: Option<String>,
    },
    /// The build itself failed (no artifact).
    BuildFailed(Built),
    /// Built, but not where the target needs it: why (the module fails).
    Undelivered { built: Built, error: Undelivery },
    /// No builder could take it (the module fails, with why).
    Unplaced(Unplaced),
}

/// Deliver every build `ends` sends as it ends (up to [`AT_ONCE`] at a time), until the
/// placer closes it: each delivery's end goes to `delivered` as it ends.
pub(crate) async fn as_they_end(
    cx: Converging<'_>,
    mut ends: mpsc::UnboundedReceiver<Ended>,
    delivered: mpsc::UnboundedSender<Delivered>,
) {
    let mut running = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            placed = ends.recv(), if open && running.len() < AT_ONCE => match placed {
                Some(Ended::Placed(placed)) => running.push(deliver_placed(cx, *placed)),
                Some(Ended::Unplaced(unplaced)) => {
                    let _ = delivered.send(Delivered::Unplaced(unplaced));
                }
                None => open = false,
            },
            Some(done) = running.next(), if !running.is_empty() => {
                // The walk is gone only when the converge stops: nothing to do.
                let _ = delivered.send(done);
            }
            else => break,
        }
    }
}

/// A build that ended on its builder: when the pool handed it over through the registry and
/// the builder is not the target's daemon, the target gets it from there (a pull onto the
/// Docker target's daemon, as a registry voucher does); then as any build.
pub(crate) async fn deliver_placed(cx: Converging<'_>, placed: Placed) -> Delivered {
    let Placed {
        built,
        on_host,
        handed,
        handover_error,
        ..
    } = placed;
    if let (Some(error), Some(_)) = (handover_error, &built.artifact) {
        return Delivered::Undelivered { built, error };
    }
    let Some(manifest) = handed.filter(|_| built.published.is_none()) else {
        return deliver_built(cx, built).await;
    };
    if on_host && cx.target.host_holds_what_it_runs() {
        return deliver_built(cx, built).await;
    }
    let Some(artifact) = built.artifact.clone() else {
        return deliver_built(cx, built).await;
    };
    let reference = built.planned.reference.clone().unwrap_or_default();
    let artifact = || Artifact {
        module: &built.planned.name,
        reference: &reference,
        digest: &artifact,
        build_id: Some(&built.correlation_id),
        manifest: Some(&manifest),
        signed_by: None,
    };
    let on_host = cx.target.host_holds_what_it_runs();
    let fetched = cx
        .target
        .fetch_vouched(
            cx.mesh,
            artifact(),
            &manifest,
            on_host,
            cx.reach(),
            cx.emitter,
        )
        .await;
    let published = match fetched {
        Ok(()) => {
            cx.target
                .publish(cx.mesh, artifact(), cx.reach(), cx.emitter)
                .await
        }
        Err(error) => Err(error),
    };
    if let Err(error) = published {
        let error = Undelivery::Target(error);
        return Delivered::Undelivered { built, error };
    }
    // Delivered: what follows is as for a build that pushed itself.
    let built = Built {
        published: Some(manifest),
        ..built
    };
    deliver_built(cx, built).await
}

/// A build delivered where the target needs it: a multi-platform one made runnable out of its
/// index; one that pushed itself (or was handed over) as it is; any other published and
/// delivered by the target.
pub(crate) async fn deliver_built(cx: Converging<'_>, built: Built) -> Delivered {
    let Some(artifact) = built.artifact.clone() else {
        return Delivered::BuildFailed(built);
    };
    let reference = built.planned.reference.clone().unwrap_or_default();
    let delivered = match &built.published {
        Some(index) if built.planned.multi_platform => {
            let artifact = Artifact {
                module: &built.planned.name,
                reference: &reference,
                digest: &artifact,
                build_id: Some(&built.correlation_id),
                manifest: Some(index),
                signed_by: None,
            };
            cx.target
                .run_from_index(cx.mesh, artifact, cx.reach(), cx.emitter)
                .await
                .map(|()| Some(index.clone()))
        }
        Some(manifest) => Ok(Some(manifest.clone())),
        None => {
            let build = Some(built.correlation_id.as_str());
            publish_and_deliver(cx, &built.planned.name, &reference, &artifact, build).await
        }
    };
    match delivered {
        Ok(manifest) => Delivered::Done { built, manifest },
        Err(error) => Delivered::Undelivered {
            built,
            error: Undelivery::Target(error),
        },
    }
}

/// Publish an artifact (built now: `build_id`) where the target says so (`--publish`), then
/// deliver it; the manifest digest it was pushed as, by either.
pub(crate) async fn publish_and_deliver(
    cx: Converging<'_>,
    module: &str,
    reference: &str,
    digest: &str,
    build_id: Option<&str>,
) -> Result<Option<String>, TargetError> {
    let artifact = |manifest| Artifact {
        module,
        reference,
        digest,
        build_id,
        manifest,
        signed_by: None,
    };
    let published = cx
        .target
        .publish(cx.mesh, artifact(None), cx.reach(), cx.emitter)
        .await?;
    let delivered = cx
        .target
        .deliver(
            cx.mesh,
            artifact(published.as_deref()),
            cx.reach(),
            cx.emitter,
        )
        .await?;
    Ok(delivered.or(published))
}

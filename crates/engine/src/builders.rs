//! The pool of builders of one converge (`[[builder]]` in the mesh file), checked when it starts:
//! each builder must answer, say its version and platform, and push to the mesh's registry with its
//! credentials. A builder that fails any of it is said and left out of this converge, never silently
//! used. Without `[[builder]]` the pool is the local daemon alone, unchecked, as before builders
//! had names.
//!
//! More than one builder, or a builder that is not the target's daemon, hands artifacts over
//! through the mesh's registry: without one the converge is refused before anything runs.

use std::collections::BTreeMap;
use std::time::Duration;

use super::progress::{Emitter, Payload};
use crate::backends::credentials;
use crate::backends::daemon::endpoint::{Described, Identity};
use crate::backends::daemon::{Daemon, LazyDaemon};
use crate::mesh::builders::Builder;
use crate::mesh::decide::Decision;
use crate::mesh::model::{Mesh, MultiPlatform, Platform, Registry};
use crate::mesh::plan::PlannedModule;

/// How long connecting to a builder and asking who it is may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the push check may take.
const PUSH_CHECK_TIMEOUT: Duration = Duration::from_secs(120);

/// The repository of the push check's image: `<registry>/<mesh>/meshtop-check:<builder>`. It
/// carries no module label, so no check of meshtop's ever takes it for an artifact.
pub(crate) const PUSH_CHECK_REPOSITORY: &str = "meshtop-check";

/// How the engine reaches a builder's daemon.
// One per builder, a handful per converge, never in a hot collection: boxing the client buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum Connection {
    /// The host daemon the converge reaches anyway (connected on first use).
    Host,
    /// A daemon of its own.
    Own(Daemon),
}

/// One builder as the check found it.
#[derive(Clone)]
pub struct Member {
    pub builder: Builder,
    /// None: left out of this converge (`out` says why).
    pub connection: Option<Connection>,
    pub out: Option<String>,
    pub described: Option<Described>,
    /// The builder is the host daemon (same identity): what it builds is on the host already.
    pub is_host: bool,
    /// The manifest digest of the push check, when it pushed.
    pub pushed: Option<String>,
}

impl Member {
    /// What it builds: the mesh file's `platforms`, else what its daemon says it builds (its
    /// own, and those it emulates).
    pub(crate) fn platforms(&self) -> Vec<Platform> {
        if !self.builder.platforms.is_empty() {
            return self.builder.platforms.clone();
        }
        self.described
            .iter()
            .flat_map(|d| d.builds.iter().cloned())
            .collect()
    }

    /// Its platforms for people: `linux/amd64, emulating linux/arm64` (the mesh file's, as given).
    pub(crate) fn platforms_text(&self) -> String {
        let join = |list: &[Platform]| {
            list.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match &self.described {
            Some(d) if self.builder.platforms.is_empty() => {
                let emulated = d.emulated();
                if emulated.is_empty() {
                    d.platform.to_string()
                } else {
                    format!("{}, emulating {}", d.platform, join(&emulated))
                }
            }
            _ => join(&self.platforms()),
        }
    }

    /// Whether it builds `platform` on its own architecture (not under emulation); a builder the
    /// mesh file gives platforms to is taken at its word.
    pub(crate) fn builds_natively(&self, platform: &Platform) -> bool {
        match &self.described {
            Some(d) if self.builder.platforms.is_empty() => {
                platform.built_by(&self.platforms())
                    && crate::backends::daemon::endpoint::runs_natively(&d.platform, platform)
            }
            _ => platform.built_by(&self.platforms()),
        }
    }
}

/// The builders of one converge.
#[derive(Clone)]
pub struct Pool {
    pub members: Vec<Member>,
    /// The registry artifacts cross through (the mesh declares builders); None: the local daemon
    /// builds everything, on the target, as before builders had names.
    pub handover: Option<Registry>,
}

/// Why a converge cannot use its builders at all.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// Bad input: builders past the target's daemon, and no registry to hand artifacts over.
    #[error(
        "{file}: mesh {mesh} has no registry, but {why}: builders hand their artifacts to each other and to the target through the registry — add registry = \"host:port\" to [mesh], or build on the target's daemon only"
    )]
    NeedsRegistry {
        file: String,
        mesh: String,
        why: String,
    },
}

impl Pool {
    /// The local daemon alone, taking `jobs` builds at once: a mesh without `[[builder]]`.
    pub(crate) fn local(jobs: usize) -> Pool {
        let mut builder = Builder::local();
        builder.max_builds = u32::try_from(jobs.max(1)).unwrap_or(u32::MAX);
        Pool {
            members: vec![Member {
                builder,
                connection: Some(Connection::Host),
                out: None,
                described: None,
                is_host: true,
                pushed: None,
            }],
            handover: None,
        }
    }

    /// The builders as the scheduler counts them, each with the platforms it builds (as its
    /// daemon said them when the mesh file gives none).
    pub(crate) fn builders(&self) -> Vec<Builder> {
        self.members
            .iter()
            .map(|m| {
                let mut builder = m.builder.clone();
                builder.platforms = m.platforms();
                builder
            })
            .collect()
    }

    pub(crate) fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.builder.name == name)
    }

    /// The builder that is the host daemon, if one is.
    pub(crate) fn host_member(&self) -> Option<&Member> {
        self.members
            .iter()
            .find(|m| m.is_host && m.connection.is_some())
    }
}

/// `one (linux/amd64), two (linux/amd64, emulating linux/arm64)`: what each builder builds.
pub(crate) fn builders_and_platforms(members: &[Member]) -> String {
    members
        .iter()
        .map(|m| match &m.out {
            Some(_) => format!("{} (left out)", m.builder.name),
            None => format!("{} ({})", m.builder.name, m.platforms_text()),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every module to build for several platforms through the pool that asks for a platform no
/// ready builder builds (natively or emulated, as its daemon says): one refusal each, before any
/// build, naming the platform and the builders. The local daemon of a mesh without builders is
/// asked what it builds only when such a module is planned.
pub(crate) async fn unbuildable_platforms(
    pool: &mut Pool,
    planned: &BTreeMap<String, PlannedModule>,
    mesh: &Mesh,
    host: &LazyDaemon,
) -> Vec<String> {
    if mesh.multi_platform == MultiPlatform::Buildx {
        return Vec::new();
    }
    let building: Vec<&PlannedModule> = planned
        .values()
        .filter(|p| p.multi_platform)
        .filter(|p| matches!(p.decision, Decision::Build | Decision::Forced))
        .collect();
    if building.is_empty() {
        return Vec::new();
    }
    for member in &mut pool.members {
        if member.is_host && member.described.is_none() && member.out.is_none() {
            match host.get().await {
                Ok(daemon) => match daemon.describe().await {
                    Ok(described) => member.described = Some(described),
                    Err(error) => member.out = Some(error.to_string()),
                },
                Err(error) => member.out = Some(error.to_string()),
            }
        }
    }
    let ready: Vec<&Member> = pool
        .members
        .iter()
        .filter(|m| m.connection.is_some() && m.out.is_none())
        .collect();
    let mut refusals = Vec::new();
    for p in building {
        let line = mesh
            .modules
            .iter()
            .find(|m| m.name == p.name)
            .map_or(0, |m| m.line);
        for platform in &p.platforms {
            if !ready.iter().any(|m| platform.built_by(&m.platforms())) {
                refusals.push(format!(
                    "module {} ({}:{line}) builds for {platform}, which no builder builds: {}; register an emulator for it on a builder (qemu-user-static through binfmt_misc), add a builder of that platform, or drop it from `platforms`",
                    p.name,
                    mesh.file.display(),
                    builders_and_platforms(&pool.members)
                ));
            }
        }
    }
    refusals
}

/// Check every builder of `mesh` (at once) and say each on `emitter`: the pool this converge
/// builds with. A mesh without `[[builder]]` gets the local daemon with `jobs` builds at once,
/// unchecked (no call is made).
pub async fn check_pool(
    mesh: &Mesh,
    host: &LazyDaemon,
    jobs: usize,
    emitter: Option<&Emitter>,
) -> Result<Pool, PoolError> {
    if mesh.builders.is_empty() {
        return Ok(Pool::local(jobs));
    }
    let host_identity = match host.get().await {
        Ok(daemon) => daemon.identity().await.ok(),
        Err(_) => None,
    };
    let checks = mesh
        .builders
        .iter()
        .map(|builder| check_one(mesh, builder, host_identity.as_ref()));
    let members: Vec<Member> = futures_util::future::join_all(checks).await;
    let pool = Pool {
        members,
        handover: mesh.registry.clone(),
    };
    if mesh.registry.is_none() {
        let ready: Vec<&Member> = pool
            .members
            .iter()
            .filter(|m| m.connection.is_some())
            .collect();
        let why = match ready.as_slice() {
            [one] if !one.is_host => Some(format!(
                "its builder {} ({}) is not the target's daemon",
                one.builder.name, one.builder.endpoint
            )),
            [_, _, ..] => Some("it builds on more than one builder".to_string()),
            _ => None,
        };
        if let Some(why) = why {
            return Err(PoolError::NeedsRegistry {
                file: mesh.file.display().to_string(),
                mesh: mesh.name.clone(),
                why,
            });
        }
    }
    if let Some(emitter) = emitter {
        for member in &pool.members {
            say(emitter, member);
        }
    }
    Ok(pool)
}

/// One builder's line: ready with its version and platforms, or left out and why.
fn say(emitter: &Emitter, member: &Member) {
    let builder = &member.builder;
    let text = match (&member.out, &member.described) {
        (Some(out), _) => format!(
            "builder {} ({}) is left out of this converge: {out}",
            builder.name, builder.endpoint
        ),
        (None, described) => {
            let platforms = member.platforms_text();
            format!(
                "builder {} ({}) ready: engine {}, {}, up to {} build(s) at once{}",
                builder.name,
                builder.endpoint,
                described.as_ref().map_or("?", |d| d.version.as_str()),
                platforms,
                builder.max_builds,
                if member.is_host {
                    ", the target's daemon"
                } else {
                    ""
                }
            )
        }
    };
    emitter.emit(
        Payload::Builder {
            builder: builder.name.clone(),
            endpoint: builder.endpoint.to_string(),
            max_builds: builder.max_builds,
            out: member.out.clone(),
        },
        None,
        text,
    );
}

/// Connect to one builder, ask who it is, and check that it pushes to the registry.
async fn check_one(mesh: &Mesh, builder: &Builder, host: Option<&Identity>) -> Member {
    let mut member = Member {
        builder: builder.clone(),
        connection: None,
        out: None,
        described: None,
        is_host: false,
        pushed: None,
    };
    let asked = tokio::time::timeout(CHECK_TIMEOUT, async {
        let daemon = Daemon::connect_at(&builder.endpoint).await?;
        let described = daemon.describe().await?;
        Ok::<_, crate::backends::daemon::DaemonError>((daemon, described))
    })
    .await;
    let (daemon, described) = match asked {
        Ok(Ok(found)) => found,
        Ok(Err(error)) => {
            member.out = Some(error.to_string());
            return member;
        }
        Err(_) => {
            member.out = Some(format!(
                "{} did not answer within {} s",
                builder.endpoint,
                CHECK_TIMEOUT.as_secs()
            ));
            return member;
        }
    };
    member.is_host = host.is_some_and(|h| *h == described.identity);
    member.described = Some(described);
    if let Some(registry) = &mesh.registry {
        match check_push(mesh, registry, builder, &daemon).await {
            Ok(digest) => member.pushed = Some(digest),
            Err(why) => {
                member.out = Some(why.to_string());
                return member;
            }
        }
    }
    member.connection = Some(if member.is_host {
        Connection::Host
    } else {
        Connection::Own(daemon)
    });
    member
}

/// Push a label-less image to `<registry>/<mesh>/meshtop-check:<builder>` with the credentials a
/// converge pushes with: its manifest digest, or why the builder cannot push.
async fn check_push(
    mesh: &Mesh,
    registry: &Registry,
    builder: &Builder,
    daemon: &Daemon,
) -> Result<String, PushCheckFailed> {
    let registry = registry.host.clone();
    let creds = match credentials::for_registry(&registry).await {
        Ok(creds) => creds,
        Err(source) => return Err(PushCheckFailed::Credentials { registry, source }),
    };
    let reference = push_check_reference(&registry, &mesh.name, &builder.name);
    match tokio::time::timeout(
        PUSH_CHECK_TIMEOUT,
        daemon.check_push(&reference, creds.as_ref()),
    )
    .await
    {
        Ok(Ok(digest)) => Ok(digest),
        Ok(Err(source)) => Err(PushCheckFailed::Push { registry, source }),
        Err(_) => Err(PushCheckFailed::Deadline {
            registry,
            seconds: PUSH_CHECK_TIMEOUT.as_secs(),
        }),
    }
}

/// Why a builder's push check failed: it is left out of the pool, and says this.
#[derive(Debug, thiserror::Error)]
enum PushCheckFailed {
    #[error("the credentials for registry {registry}: {source}")]
    Credentials {
        registry: String,
        #[source]
        source: credentials::CredentialsError,
    },
    #[error("it cannot push to registry {registry}: {source}")]
    Push {
        registry: String,
        #[source]
        source: crate::backends::daemon::DaemonError,
    },
    #[error("its push to registry {registry} did not end within {seconds} s")]
    Deadline { registry: String, seconds: u64 },
}

/// `<registry>/<mesh>/meshtop-check:<builder>`.
fn push_check_reference(registry: &str, mesh: &str, builder: &str) -> String {
    format!("{registry}/{mesh}/{PUSH_CHECK_REPOSITORY}:{builder}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_local_pool_is_the_host_taking_jobs_builds() {
        let pool = Pool::local(3);
        assert_eq!(pool.members.len(), 1);
        assert_eq!(pool.members[0].builder.max_builds, 3);
        assert!(pool.members[0].is_host);
        assert!(pool.handover.is_none());
        assert_eq!(Pool::local(0).members[0].builder.max_builds, 1);
    }

    #[test]
    fn the_push_check_names_a_repository_no_module_has() {
        assert_eq!(
            push_check_reference("127.0.0.1:5000", "demo", "farm-1"),
            "127.0.0.1:5000/demo/meshtop-check:farm-1"
        );
    }
}

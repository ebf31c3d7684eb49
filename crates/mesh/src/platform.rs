//! A platform as Docker names it (`os/arch[/variant]`): what a module builds for and a builder
//! builds. A leaf of `mesh/`: the model and the builders both name it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// `os/arch[/variant]`, e.g. `linux/amd64`, `linux/arm64/v8`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Platform {
    pub os: String,
    pub arch: String,
    pub variant: Option<String>,
}

/// Architectures meshtop knows how to name (Docker's GOARCH words).
pub const KNOWN_ARCHES: &[&str] = &[
    "amd64", "arm64", "arm", "386", "ppc64le", "s390x", "riscv64", "mips64le",
];

/// A platform meshtop does not know how to name: the text, and how to write one it does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown platform {text:?}: {}", UnknownPlatform::fix())]
pub struct UnknownPlatform {
    pub text: String,
}

impl UnknownPlatform {
    /// How to write a platform meshtop knows.
    pub fn fix() -> String {
        format!(
            "write os/arch[/variant] with os \"linux\" and arch one of {}",
            KNOWN_ARCHES.join(", ")
        )
    }
}

impl Platform {
    pub fn parse(text: &str) -> Result<Platform, UnknownPlatform> {
        let parts: Vec<&str> = text.split('/').collect();
        let bad = || UnknownPlatform {
            text: text.to_string(),
        };
        if !(2..=3).contains(&parts.len())
            || parts[0] != "linux"
            || !KNOWN_ARCHES.contains(&parts[1])
        {
            return Err(bad());
        }
        let variant = match parts.get(2) {
            Some(&"") => return Err(bad()),
            Some(v) => Some((*v).to_string()),
            None => None,
        };
        Ok(Platform {
            os: parts[0].to_string(),
            arch: parts[1].to_string(),
            variant,
        })
    }

    /// Whether a builder building `builds` can build this: the same os and architecture, and the
    /// same variant when this names one (`linux/arm64` is built by a `linux/arm64/v8` builder).
    pub fn built_by(&self, builds: &[Platform]) -> bool {
        builds.iter().any(|b| {
            b.os == self.os
                && b.arch == self.arch
                && (self.variant.is_none() || b.variant == self.variant)
        })
    }

    /// The platform of the machine meshtop runs on (used when the daemon cannot tell its own).
    pub fn local() -> Platform {
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            "riscv64" => "riscv64",
            "s390x" => "s390x",
            other => other,
        };
        Platform {
            os: "linux".into(),
            arch: arch.into(),
            variant: None,
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.arch)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

//! Tiers: 0 for a module without a base, else 1 + its base's tier. Pure, no I/O.
//!
//! The walk is iterative (a mesh file with a 100,000-module chain must not overflow the stack)
//! and linear in the number of modules.

use std::collections::{BTreeMap, HashMap};

/// Why tiers could not be assigned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TierError {
    /// A module names itself as its base.
    SelfBase { module: String },
    /// A module names a base that is not a module of the mesh.
    UnknownBase { module: String, base: String },
    /// Following bases comes back to a module already on the path: `[a, b, a]`.
    Cycle(Vec<String>),
}

/// Assign a tier to every module. `bases` maps each module name to its base (if any).
/// Modules are visited in name order, so the error reported for a broken mesh is deterministic.
pub fn resolve_tiers(
    bases: &BTreeMap<String, Option<String>>,
) -> Result<BTreeMap<String, u32>, TierError> {
    let mut tiers: BTreeMap<String, u32> = BTreeMap::new();
    for start in bases.keys() {
        if tiers.contains_key(start) {
            continue;
        }
        // Walk base links until a module with a known tier, a module without base, or trouble.
        let mut path: Vec<&str> = Vec::new();
        let mut on_path: HashMap<&str, usize> = HashMap::new();
        let mut current: &str = start;
        let floor: u32 = loop {
            if let Some(&tier) = tiers.get(current) {
                break tier.saturating_add(1);
            }
            if let Some(&at) = on_path.get(current) {
                let mut cycle: Vec<String> = path[at..].iter().map(|s| (*s).to_string()).collect();
                cycle.push(current.to_string());
                return Err(TierError::Cycle(cycle));
            }
            on_path.insert(current, path.len());
            path.push(current);
            match bases.get(current) {
                Some(Some(base)) if base == current => {
                    return Err(TierError::SelfBase {
                        module: current.to_string(),
                    });
                }
                Some(Some(base)) => {
                    if !bases.contains_key(base.as_str()) {
                        return Err(TierError::UnknownBase {
                            module: current.to_string(),
                            base: base.clone(),
                        });
                    }
                    current = base.as_str();
                }
                // No base (or, defensively, not a module): the chain ends here at tier 0.
                _ => break 0,
            }
        };
        // path[last] sits at `floor` when it has no base, else one above a known tier.
        let mut tier = floor;
        for name in path.iter().rev() {
            tiers.insert((*name).to_string(), tier);
            tier = tier.saturating_add(1);
        }
    }
    Ok(tiers)
}

/// Render a cycle as `a → b → a`.
pub fn cycle_text(cycle: &[String]) -> String {
    cycle.join(" → ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn bases(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(m, b)| ((*m).to_string(), b.map(str::to_string)))
            .collect()
    }

    #[test]
    fn tiers_follow_bases() {
        let t = resolve_tiers(&bases(&[
            ("api", Some("tools")),
            ("base", None),
            ("tools", Some("base")),
            ("web", Some("base")),
            ("alone", None),
        ]))
        .unwrap();
        assert_eq!(t["base"], 0);
        assert_eq!(t["alone"], 0);
        assert_eq!(t["tools"], 1);
        assert_eq!(t["web"], 1);
        assert_eq!(t["api"], 2);
    }

    #[test]
    fn cycles_are_printed_from_where_they_close() {
        let err = resolve_tiers(&bases(&[
            ("a", Some("b")),
            ("b", Some("c")),
            ("c", Some("b")),
        ]))
        .unwrap_err();
        assert_eq!(
            err,
            TierError::Cycle(vec!["b".into(), "c".into(), "b".into()])
        );
        if let TierError::Cycle(c) = err {
            assert_eq!(cycle_text(&c), "b → c → b");
        }
    }

    #[test]
    fn self_and_unknown_bases() {
        assert_eq!(
            resolve_tiers(&bases(&[("a", Some("a"))])).unwrap_err(),
            TierError::SelfBase { module: "a".into() }
        );
        assert_eq!(
            resolve_tiers(&bases(&[("a", Some("nope"))])).unwrap_err(),
            TierError::UnknownBase {
                module: "a".into(),
                base: "nope".into()
            }
        );
    }

    #[test]
    fn a_long_chain_does_not_overflow() {
        let n = 100_000;
        let mut b = BTreeMap::new();
        b.insert("m0".to_string(), None);
        for i in 1..n {
            b.insert(format!("m{i}"), Some(format!("m{}", i - 1)));
        }
        let t = resolve_tiers(&b).unwrap();
        assert_eq!(t[&format!("m{}", n - 1)], (n - 1) as u32);
    }
}

//! Tiers: 0 for a module that builds on no other, else 1 + the highest tier of the modules it
//! builds on (its base and its named contexts). Pure, no I/O.
//!
//! The walk is iterative (a mesh file with a 100,000-module chain must not overflow the stack)
//! and linear in the number of modules and edges.

use std::collections::{BTreeMap, HashMap};

/// Why tiers could not be assigned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TierError {
    /// A module names itself as what it builds on.
    SelfBase { module: String },
    /// A module builds on a name that is not a module of the mesh.
    UnknownBase { module: String, base: String },
    /// Following what modules build on comes back to a module already on the path: `[a, b, a]`.
    Cycle(Vec<String>),
}

/// Assign a tier to every module. `builds_on` maps each module name to the modules it builds on
/// (its base first, then its named contexts). Modules and their edges are visited in order, so the
/// error reported for a broken mesh is deterministic.
pub fn resolve_tiers(
    builds_on: &BTreeMap<String, Vec<String>>,
) -> Result<BTreeMap<String, u32>, TierError> {
    let mut tiers: BTreeMap<String, u32> = BTreeMap::new();
    for start in builds_on.keys() {
        if tiers.contains_key(start) {
            continue;
        }
        // A depth-first walk with an explicit stack: (module, index of its next edge).
        let mut stack: Vec<(&str, usize)> = vec![(start.as_str(), 0)];
        let mut on_path: HashMap<&str, usize> = HashMap::from([(start.as_str(), 0)]);
        while let Some(&(current, next)) = stack.last() {
            let edges = builds_on.get(current).map_or(&[][..], Vec::as_slice);
            let Some(edge) = edges.get(next) else {
                let tier = edges
                    .iter()
                    .filter_map(|e| tiers.get(e.as_str()))
                    .map(|t| t.saturating_add(1))
                    .max()
                    .unwrap_or(0);
                tiers.insert(current.to_string(), tier);
                on_path.remove(current);
                stack.pop();
                continue;
            };
            if let Some(top) = stack.last_mut() {
                top.1 += 1;
            }
            let edge = edge.as_str();
            if edge == current {
                return Err(TierError::SelfBase {
                    module: current.to_string(),
                });
            }
            let Some((known, _)) = builds_on.get_key_value(edge) else {
                return Err(TierError::UnknownBase {
                    module: current.to_string(),
                    base: edge.to_string(),
                });
            };
            if tiers.contains_key(edge) {
                continue;
            }
            if let Some(&at) = on_path.get(edge) {
                let mut cycle: Vec<String> =
                    stack[at..].iter().map(|(m, _)| (*m).to_string()).collect();
                cycle.push(edge.to_string());
                return Err(TierError::Cycle(cycle));
            }
            on_path.insert(known.as_str(), stack.len());
            stack.push((known.as_str(), 0));
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

    fn bases(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Vec<String>> {
        pairs
            .iter()
            .map(|(m, b)| {
                (
                    (*m).to_string(),
                    b.map(str::to_string).into_iter().collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_module_on_several_sits_above_the_highest() {
        let mut on = bases(&[("base", None), ("tools", Some("base")), ("lib", None)]);
        on.insert("api".into(), vec!["lib".into(), "tools".into()]);
        on.insert("web".into(), vec!["lib".into()]);
        let t = resolve_tiers(&on).unwrap();
        assert_eq!((t["lib"], t["web"], t["tools"], t["api"]), (0, 1, 1, 2));
        on.insert("lib".into(), vec!["api".into()]);
        assert_eq!(
            resolve_tiers(&on).unwrap_err(),
            TierError::Cycle(vec!["api".into(), "lib".into(), "api".into()])
        );
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
        b.insert("m0".to_string(), vec![]);
        for i in 1..n {
            b.insert(format!("m{i}"), vec![format!("m{}", i - 1)]);
        }
        let t = resolve_tiers(&b).unwrap();
        assert_eq!(t[&format!("m{}", n - 1)], (n - 1) as u32);
    }
}

//! Typos: the name a mistyped name was most likely meant to be. A leaf: the other files of the
//! mesh file's reader call it, it calls none of them.

/// The closest candidate by edit distance, if it is close enough to be a typo.
pub(super) fn nearest<'a>(
    wrong: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    const LONGEST: usize = 128;
    let wrong: Vec<char> = wrong.chars().collect();
    if wrong.is_empty() || wrong.len() > LONGEST {
        return None;
    }
    let limit = (wrong.len() / 3).max(1);
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let c: Vec<char> = candidate.chars().collect();
        if c.len() > LONGEST {
            continue;
        }
        let d = edit_distance(&wrong, &c);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// Optimal string alignment distance: insertions, deletions, substitutions and adjacent transpositions.
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            current[j] = d;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// "did you mean …?" for a name that is not one of the mesh's targets (`known`: declared,
/// checked names).
pub(super) fn suggest_target(wrong: &str, known: &[&str]) -> String {
    let list = if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    };
    match nearest(wrong, known.iter().copied()) {
        Some(near) => format!("did you mean \"{near}\"? (targets: {list})"),
        None => format!("name one of the mesh's targets ({list})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_name() {
        let names = ["base", "tools", "api", "worker"];
        assert_eq!(nearest("bsae", names.iter().copied()), Some("base"));
        assert_eq!(nearest("tool", names.iter().copied()), Some("tools"));
        assert_eq!(nearest("apu", names.iter().copied()), Some("api"));
        assert_eq!(nearest("zzzzzz", names.iter().copied()), None);
        assert_eq!(nearest("", names.iter().copied()), None);
        let chars = |s: &str| s.chars().collect::<Vec<_>>();
        assert_eq!(edit_distance(&chars("kitten"), &chars("sitting")), 3);
        assert_eq!(edit_distance(&chars("ab"), &chars("ba")), 1);
        assert_eq!(edit_distance(&chars(""), &chars("abc")), 3);
    }
}

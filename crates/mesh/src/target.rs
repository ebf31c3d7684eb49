//! How a target is described to a person: what the screen and the CLI say about it, without asking
//! it anything. The target seam (`converge::targets`) makes one per connected target; the app keeps it.
//! Every word here is the target's own: nothing outside the seam knows which kind it is.

/// A target as words: its name in the mesh, its kind, where it is, and what a send does there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetDescription {
    /// The target's name in the mesh (`default` for a mesh file's single `[target]`).
    pub name: String,
    /// The kind, as the header shows it (the target's own word for what it is).
    pub kind: String,
    /// Where it is, for a changing command's first line (`context X, namespace Y`); None where
    /// there is nothing to say (the host daemon is here).
    pub place: Option<String>,
    /// What a send does to each machine there, in words (the send and rollback confirms say it).
    pub send_does: String,
}

impl TargetDescription {
    /// What a changing command says first of where it acts: `acting on prod (kubernetes, context
    /// X, namespace Y)`; None where the target has no place to name.
    pub fn acting_on(&self) -> Option<String> {
        let place = self.place.as_ref()?;
        Some(format!("acting on {} ({}, {place})", self.name, self.kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(place: Option<&str>) -> TargetDescription {
        TargetDescription {
            name: "prod".into(),
            kind: "somewhere".into(),
            place: place.map(str::to_string),
            send_does: String::new(),
        }
    }

    #[test]
    fn acting_on_names_the_target_its_kind_and_place() {
        assert_eq!(
            described(Some("context c, namespace n"))
                .acting_on()
                .as_deref(),
            Some("acting on prod (somewhere, context c, namespace n)")
        );
        assert_eq!(described(None).acting_on(), None);
    }
}

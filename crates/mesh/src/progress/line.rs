//! A step's text as a terminal shows it: its label, its module, each word once.

use super::payload::Payload;
use super::step::Step;

/// One step as it happens: its data, and its text for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub step: Step,
    pub module: Option<String>,
    pub text: String,
    pub payload: Payload,
}

impl Progress {
    /// One line as a terminal shows it.
    pub fn line(&self) -> String {
        let (label, text) = said_once(self.step, self.module.as_deref(), &self.text);
        match (&self.module, self.step) {
            (Some(module), Step::Output) => format!("  {module} │ {text}"),
            (Some(module), _) => format!("{label:>9} {module}: {text}"),
            (None, _) => format!("{label:>9} {text}"),
        }
    }
}

/// A step's label and text as shown, each word once: the engine's texts open with their step's
/// verb (`tier 0: base`, `building walk/base:…`, `built … → sha256:…`, `created machine …`), which the
/// label already says; a record line without a module says `stamped`/`unchanged` itself, so its
/// label is left empty, and a module's stamp (`record stamped: api a → b`) says its module once.
/// Stored events keep their whole text, as written; followers fold the step's payload and never
/// read the text back.
pub fn said_once<'t>(step: Step, module: Option<&str>, text: &'t str) -> (&'static str, &'t str) {
    let echo = match (step, module) {
        (Step::Tier, _) => "tier ",
        (Step::Build, _) => "building ",
        (Step::Built, _) => "built ",
        (Step::Created, _) => "created ",
        (Step::Builder, _) => "builder ",
        (Step::Stamped, None) => return ("", text),
        (Step::Stamped, Some(module)) => {
            let said = text
                .strip_prefix("record stamped: ")
                .and_then(|rest| rest.strip_prefix(module))
                .and_then(|rest| rest.strip_prefix(' '));
            return (step.as_str(), said.unwrap_or(text));
        }
        _ => return (step.as_str(), text),
    };
    (step.as_str(), text.strip_prefix(echo).unwrap_or(text))
}
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn line(step: Step, module: Option<&str>, text: &str) -> String {
        Progress {
            step,
            module: module.map(str::to_string),
            text: text.into(),
            payload: Payload::Other,
        }
        .line()
    }

    #[test]
    fn a_line_says_its_step_once() {
        assert_eq!(line(Step::Tier, None, "tier 0: base"), "     tier 0: base");
        assert_eq!(
            line(Step::Build, Some("web"), "building demo/web:1 (build 01a)"),
            "    build web: demo/web:1 (build 01a)"
        );
        assert_eq!(
            line(Step::Built, Some("web"), "built demo/web:1 → sha256:ab"),
            "    built web: demo/web:1 → sha256:ab"
        );
        assert_eq!(
            line(
                Step::Created,
                Some("web"),
                "created machine web-1 on demo/web:1"
            ),
            "  created web: machine web-1 on demo/web:1"
        );
        assert_eq!(
            line(Step::Stamped, None, "record stamped: 5 module(s)"),
            "          record stamped: 5 module(s)"
        );
        assert_eq!(
            line(Step::Stamped, Some("api"), "record stamped: api a@1 → b@2"),
            "  stamped api: a@1 → b@2"
        );
        assert_eq!(
            line(
                Step::Builder,
                None,
                "builder one (unix:///d.sock) ready: engine 20.10"
            ),
            "  builder one (unix:///d.sock) ready: engine 20.10"
        );
        // An error that happens to open with the step's word keeps it.
        assert_eq!(
            line(Step::Failed, Some("web"), "failed to connect"),
            "   failed web: failed to connect"
        );
        assert_eq!(
            line(Step::Output, Some("web"), "built x"),
            "  web │ built x"
        );
    }
}

//! A command's progress on stderr as it comes. On a terminal, each running build is one live line
//! (module, its Dockerfile step, elapsed time, the builder's newest words) above the steps that
//! finished, which stay; piped, or with `TERM=dumb`, one plain line per step as before.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::ProgressDrawTarget as DrawTo;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::converge::progress::{Payload, Progress, ProgressTx, Step};

/// Output lines of a failed build printed above its failure (the live view hid them).
const FAILED_TAIL: usize = 8;

/// Print progress to stderr; the task ends when every sender is gone.
pub(crate) fn spawn_progress_printer() -> (ProgressTx, tokio::task::JoinHandle<()>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Progress>();
    let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
    let printer = if std::io::stderr().is_terminal() && !dumb {
        tokio::spawn(live(rx))
    } else {
        tokio::spawn(plain(rx))
    };
    (tx, printer)
}

/// Progress for a command that prints its result on stdout itself (send, rollback): the operation's
/// last step (`finished rollback: rolled back api …`) says that same result, so it is left out
/// here and the result is said once.
pub(crate) fn spawn_progress_printer_before_result() -> (ProgressTx, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Progress>();
    let (inner, printer) = spawn_progress_printer();
    let forward = tokio::spawn(async move {
        while let Some(progress) = rx.recv().await {
            if !said_by_the_result(&progress) {
                // The printer ends only when this sender is gone: it cannot be closed here.
                let _ = inner.send(progress);
            }
        }
        drop(inner);
        let _ = printer.await;
    });
    (tx, forward)
}

/// The step a command's own result line repeats.
fn said_by_the_result(progress: &Progress) -> bool {
    progress.step == Step::Finished
}

/// Steps that arrive together (a tier's decisions) go out in one write.
async fn plain(mut rx: tokio::sync::mpsc::UnboundedReceiver<Progress>) {
    let mut text = String::new();
    while let Some(first) = rx.recv().await {
        text.clear();
        let mut next = Some(first);
        while let Some(progress) = next {
            if let Some(line) = plain_line(&progress) {
                text.push_str(&line);
                text.push('\n');
            }
            next = rx.try_recv().ok();
        }
        // stderr gone: nothing else to tell the user with.
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

/// A step as a plain line, when it is one (`Step::is_line`, as the dashboard's pane folds it).
fn plain_line(progress: &Progress) -> Option<String> {
    progress.step.is_line().then(|| progress.line())
}

/// One running build's live line, and the builder's newest words for when it fails.
struct Running {
    bar: ProgressBar,
    step: Option<(u32, u32)>,
    /// The Dockerfile instruction of the step (`RUN make`).
    instruction: String,
    tail: Vec<String>,
}

async fn live(mut rx: tokio::sync::mpsc::UnboundedReceiver<Progress>) {
    let bars = MultiProgress::with_draw_target(DrawTo::stderr());
    let style =
        ProgressStyle::with_template("{spinner:.yellow} {prefix:.bold} {elapsed:>4} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let mut running: HashMap<String, Running> = HashMap::new();
    while let Some(progress) = rx.recv().await {
        let module = progress.module.clone().unwrap_or_default();
        match progress.step {
            Step::Queued => {}
            Step::Build => {
                let bar = bars.add(ProgressBar::new_spinner());
                bar.set_style(style.clone());
                bar.set_prefix(format!("{module:<14}"));
                bar.set_message("building");
                bar.enable_steady_tick(Duration::from_millis(250));
                // The step itself stays above, as a finished line.
                let _ = bars.println(progress.line());
                running.insert(
                    module,
                    Running {
                        bar,
                        step: None,
                        instruction: String::new(),
                        tail: Vec::new(),
                    },
                );
            }
            Step::Output => match running.get_mut(&module) {
                Some(build) => {
                    let line = progress.text.trim();
                    if let Payload::Output {
                        builder_step: Some(step),
                    } = progress.payload
                    {
                        build.step = Some(step);
                        build.instruction = instruction(line).to_string();
                        build.bar.set_message(format!(
                            "step {}/{} {}",
                            step.0, step.1, build.instruction
                        ));
                    } else if !is_builder_noise(line) {
                        let step = build
                            .step
                            .map_or(String::new(), |(n, m)| format!("step {n}/{m} "));
                        build
                            .bar
                            .set_message(format!("{step}{} │ {line}", build.instruction));
                    }
                    build.tail.push(progress.text.clone());
                    if build.tail.len() > FAILED_TAIL {
                        build.tail.remove(0);
                    }
                }
                // Output of a build that has no line (none is expected): print it.
                None => {
                    let _ = bars.println(progress.line());
                }
            },
            Step::Built | Step::Failed => {
                if let Some(build) = running.remove(&module) {
                    build.bar.finish_and_clear();
                    if progress.step == Step::Failed {
                        for line in &build.tail {
                            let _ = bars.println(format!("  {module} │ {line}"));
                        }
                    }
                }
                let _ = bars.println(progress.line());
            }
            _ => {
                let _ = bars.println(progress.line());
            }
        }
    }
    for build in running.into_values() {
        build.bar.finish_and_clear();
    }
}

/// The instruction of a step line: `Step 3/5 : RUN make` → `RUN make`, `#7 [2/4] RUN make` →
/// `RUN make`.
fn instruction(line: &str) -> &str {
    if let Some((_, rest)) = line.split_once(" : ") {
        return rest.trim();
    }
    line.split_once("] ").map_or(line, |(_, rest)| rest.trim())
}

/// The classic builder's bookkeeping lines, which say nothing about the build's progress.
fn is_builder_noise(line: &str) -> bool {
    line.is_empty()
        || line.starts_with("--->")
        || line.starts_with("Removing intermediate container")
        || line.starts_with("Successfully built")
        || line.starts_with("Successfully tagged")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_lines_name_their_instruction_and_bookkeeping_is_noise() {
        assert_eq!(instruction("Step 3/5 : RUN make all"), "RUN make all");
        assert_eq!(instruction("#7 [2/4] COPY . /app"), "COPY . /app");
        assert!(is_builder_noise("---> Running in 997ef2f20ecc"));
        assert!(is_builder_noise(
            "Removing intermediate container 997ef2f20ecc"
        ));
        assert!(!is_builder_noise("compiling main.c"));
    }

    #[test]
    fn plain_lines_leave_out_queued_steps() {
        let queued = Progress {
            step: Step::Queued,
            module: Some("api".into()),
            text: "tier 1 of 2".into(),
            payload: Payload::Queued {
                place: crate::mesh::progress::TierPlace { index: 1, total: 2 },
            },
        };
        assert_eq!(plain_line(&queued), None);
        let built = Progress {
            step: Step::Built,
            module: Some("api".into()),
            text: "built demo/api:1 → sha256:aa".into(),
            payload: Payload::Built {
                reference: "demo/api:1".into(),
                digest: "sha256:aa".into(),
            },
        };
        assert_eq!(
            plain_line(&built).as_deref(),
            Some("    built api: demo/api:1 → sha256:aa")
        );
    }
}

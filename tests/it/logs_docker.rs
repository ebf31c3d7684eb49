//! `meshtop logs` on the real daemon: the newest lines of each machine, named; a follow that
//! shows lines printed after it started and keeps going onto the container a send made; an
//! exited machine's stdout, stderr and exit code, and the run before its restart (issue 30).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{ExampleMesh, said};

/// Generous: the machine runs ~20 compiling helpers beside the tests.
const PATIENCE: Duration = Duration::from_secs(90);

/// A word no other run has, for the names a test leaves on the daemon.
fn run_id() -> String {
    let id = uuid::Uuid::now_v7().simple().to_string();
    id[id.len() - 8..].to_string()
}

/// The mesh with its base built; the base's image id.
fn built(tag: &str) -> (ExampleMesh, String) {
    let mesh = ExampleMesh::new(tag);
    let summary = mesh.json(&["converge", "--json", "base"]);
    assert_eq!(summary["stamped"], true, "{summary}");
    let out = Command::new("docker")
        .args(["images", "-q", "--no-trunc"])
        .args(["--filter", &format!("label=jr2.dev/mesh={}", mesh.name)])
        .args(["--filter", "label=jr2.dev/module=base"])
        .output()
        .unwrap();
    let image = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .expect("base's image")
        .to_string();
    (mesh, image)
}

/// Start a machine of module base running `script` (a machine by its mark).
fn machine(mesh: &ExampleMesh, image: &str, name: &str, script: &str, restart: bool) {
    let mut run = Command::new("docker");
    run.args(["run", "-d", "--name", name])
        .args(["--label", "jr2.dev/module=base"])
        .args(["--label", &format!("jr2.dev/mesh={}", mesh.name)])
        .args(["--label", &format!("jr2.dev/machine={name}")]);
    if restart {
        run.args(["--restart", "unless-stopped"]);
    }
    let out = run.args([image, "sh", "-c", script]).output().unwrap();
    assert!(out.status.success(), "{}", said(&out));
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run `meshtop logs …` until `done` holds for its output (the machine may not have printed yet).
fn logs_until(mesh: &ExampleMesh, args: &[&str], done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = mesh.meshtop(args);
        assert!(out.status.success(), "{}", said(&out));
        let text = stdout(&out);
        if done(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "logs never showed it:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn wait_exited(name: &str) {
    let out = Command::new("docker")
        .args(["wait", name])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
}

#[test]
fn tail_is_the_newest_lines_of_each_machine_named_and_bad_names_exit_2() {
    let (mesh, image) = built("logtail");
    let id = run_id();
    let names = [
        format!("{}-a-{id}", mesh.name),
        format!("{}-b-{id}", mesh.name),
    ];
    for name in &names {
        // The daemon copies stdout and stderr apart: a second between them keeps their order.
        let script = "for i in $(seq 1 20); do echo \"number $i\"; done; sleep 1; \
                      echo 'last words' >&2; sleep 600";
        machine(&mesh, &image, name, script, false);
    }
    let text = logs_until(&mesh, &["logs", "base", "--tail", "4"], |t| {
        t.matches("last words").count() == 2
    });
    for name in &names {
        let of: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{name} | ")))
            .collect();
        let bodies: Vec<&str> = of.iter().map(|l| &l[name.len() + 3..]).collect();
        assert_eq!(
            bodies,
            ["number 18", "number 19", "number 20", "stderr| last words"],
            "{text}"
        );
    }

    let one = mesh.meshtop(&["logs", "base", "--machine", &names[0], "--tail", "1"]);
    assert!(one.status.success(), "{}", said(&one));
    assert_eq!(
        stdout(&one),
        "stderr| last words\n",
        "one machine: no prefix"
    );

    let nosuch = mesh.meshtop(&["logs", "nosuch"]);
    assert_eq!(nosuch.status.code(), Some(2), "{}", said(&nosuch));
    let err = String::from_utf8_lossy(&nosuch.stderr);
    assert!(
        err.contains("\"nosuch\"") && err.contains("base, tools, web, api, worker"),
        "{err}"
    );

    let no_machine = mesh.meshtop(&["logs", "base", "--machine", "nosuch"]);
    assert_eq!(no_machine.status.code(), Some(2), "{}", said(&no_machine));
    let err = String::from_utf8_lossy(&no_machine.stderr);
    assert!(err.contains(&names[0]) && err.contains(&names[1]), "{err}");

    // tools has no machine of its own: said, and nothing failed.
    let none = mesh.meshtop(&["logs", "tools"]);
    assert!(none.status.success(), "{}", said(&none));
    assert!(stdout(&none).contains("has no machines"), "{}", said(&none));
}

#[test]
fn an_exited_machine_says_both_streams_its_exit_code_and_its_runs() {
    let (mesh, image) = built("logexit");
    let name = format!("{}-x-{}", mesh.name, run_id());
    let script = "n=$(cat /n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /n; \
                  echo \"out in run $n\"; sleep 1; echo \"err in run $n\" >&2; exit 3";
    machine(&mesh, &image, &name, script, false);
    wait_exited(&name);
    let out = mesh.meshtop(&["logs", "base"]);
    assert!(out.status.success(), "{}", said(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(
        lines[..2],
        ["out in run 1", "stderr| err in run 1"],
        "{text}"
    );
    assert!(
        lines[2].starts_with("── exited with code 3 at 20"),
        "the exit code and time after the last lines: {text}"
    );

    // A second run: the log keeps the first; --previous shows it alone, and the whole log
    // marks where the second began.
    // The runs of a stopped container are told apart by time (its first lines may come up to a
    // second before the daemon's StartedAt): the second run starts well after the first ended.
    std::thread::sleep(Duration::from_secs(2));
    let start = Command::new("docker")
        .args(["start", &name])
        .output()
        .unwrap();
    assert!(start.status.success(), "{}", said(&start));
    wait_exited(&name);
    let previous = mesh.meshtop(&["logs", "base", "--previous"]);
    assert!(previous.status.success(), "{}", said(&previous));
    let previous = stdout(&previous);
    assert!(previous.contains("out in run 1"), "{previous}");
    assert!(!previous.contains("run 2"), "{previous}");
    let all = stdout(&mesh.meshtop(&["logs", "base", "--tail", "10"]));
    let started = all.find("── run started").expect(&all);
    assert!(all.find("out in run 1").unwrap() < started, "{all}");
    assert!(started < all.find("out in run 2").unwrap(), "{all}");
}

/// Lines of a running `logs --follow`, as they come.
struct Following {
    child: std::process::Child,
    errors: std::path::PathBuf,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Following {
    fn start(mesh: &ExampleMesh, args: &[&str]) -> Following {
        let mut child = Command::new(env!("CARGO_BIN_EXE_meshtop"))
            .arg("--mesh")
            .arg(mesh.mesh_file())
            .arg("--state")
            .arg(mesh.state())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(mesh.dir.path().join("follow.err")).unwrap())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Following {
            child,
            errors: mesh.dir.path().join("follow.err"),
            lines,
            seen: Vec::new(),
        }
    }

    /// Wait until a line satisfies `wanted`; its index in what was seen.
    fn until(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> usize {
        if let Some(at) = self.seen.iter().position(|l| wanted(l)) {
            return at;
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line);
                    if wanted(self.seen.last().unwrap()) {
                        return self.seen.len() - 1;
                    }
                }
                Err(_) => panic!(
                    "the follow never showed {what}:\n{}\nits exit: {:?}\nits stderr: {}",
                    self.seen.join("\n"),
                    self.child.try_wait(),
                    std::fs::read_to_string(&self.errors).unwrap_or_default()
                ),
            }
        }
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tick(line: &str) -> Option<u64> {
    line.strip_prefix("tick ")?.trim().parse().ok()
}

#[test]
fn follow_shows_new_lines_and_keeps_going_onto_the_container_a_send_made() {
    let (mesh, image) = built("logfollow");
    let name = format!("{}-f-{}", mesh.name, run_id());
    let script =
        "i=0; trap 'exit 0' TERM; while true; do i=$((i+1)); echo \"tick $i\"; sleep 0.2; done";
    machine(&mesh, &image, &name, script, true);
    let mut follow = Following::start(&mesh, &["logs", "base", "--follow", "--tail", "1"]);
    let first = follow.until("a first tick", |l| tick(l).is_some());
    let started_at = tick(&follow.seen[first]).unwrap();
    follow.until("ticks printed after it started", |l| {
        tick(l).is_some_and(|n| n >= started_at + 5)
    });

    // A new artifact of base: the converge sends the machine (policy rollout), which recreates
    // the container under the same name; the follow says so and goes on with the new one.
    let dockerfile = mesh.root().join("base/Dockerfile");
    let text = std::fs::read_to_string(&dockerfile).unwrap();
    std::fs::write(&dockerfile, format!("{text}LABEL moved=\"{}\"\n", run_id())).unwrap();
    let converge = mesh.meshtop(&["converge", "base"]);
    assert!(converge.status.success(), "{}", said(&converge));
    let now = follow.until("the new container", |l| l.starts_with("── now container "));
    let new_id = Command::new("docker")
        .args(["inspect", "-f", "{{.Id}}", &name])
        .output()
        .unwrap();
    let new_id = stdout(&new_id);
    assert!(
        follow.seen[now].contains(&new_id[..12]),
        "the line names the new container {new_id}: {}",
        follow.seen[now]
    );
    // The new container counts from 1 again, after the line that says it changed.
    let before: Vec<String> = follow.seen.drain(..=now).collect();
    follow.until("the new container's ticks", |l| tick(l) == Some(2));
    assert!(
        before.iter().any(|l| tick(l).is_some_and(|n| n > 2)),
        "the old container's ticks came first: {before:?}"
    );
}

/// `docker inspect` of one container's state: `exited 3` once its restart policy gave up.
fn status_of(name: &str) -> String {
    let out = Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{.State.Status}} {{.State.ExitCode}}",
            name,
        ])
        .output()
        .unwrap();
    stdout(&out).trim().to_string()
}

/// A machine that crashes (exit 3) and is restarted `restarts` times by its policy; each run
/// prints its number. Started with `docker run --restart on-failure:N`.
fn crash_looping(mesh: &ExampleMesh, image: &str, name: &str, restarts: u32, pause: &str) {
    let script = format!(
        "n=$(cat /n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /n; sleep {pause}; \
         echo \"crash run $n\"; exit 3"
    );
    let out = Command::new("docker")
        .args(["run", "-d", "--name", name])
        .args(["--restart", &format!("on-failure:{restarts}")])
        .args(["--label", "jr2.dev/module=base"])
        .args(["--label", &format!("jr2.dev/mesh={}", mesh.name)])
        .args(["--label", &format!("jr2.dev/machine={name}")])
        .args([image, "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
}

/// Each run's lines, then where it ended and with which code, in the order they happened.
fn assert_every_run_ends(text: &str, runs: std::ops::RangeInclusive<usize>) {
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("── run")).collect();
    let mut wanted = Vec::new();
    for n in runs {
        wanted.push(format!("crash run {n}"));
        wanted.push("── exited with code 3 at 20".to_string());
    }
    let got: Vec<String> = lines
        .iter()
        .map(|l| {
            if l.starts_with("── exited with code 3 at 20") {
                "── exited with code 3 at 20".to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    assert_eq!(got, wanted, "each run's end, in order:\n{text}");
}

#[test]
fn a_crash_looping_machine_says_where_each_run_ended_and_its_exit_code() {
    let (mesh, image) = built("logcrash");
    let id = run_id();
    // Three restarts: four runs, each ending with exit 3 (the daemon's backoff between them).
    let done = format!("{}-c-{id}", mesh.name);
    crash_looping(&mesh, &image, &done, 3, "0.3");
    let deadline = Instant::now() + PATIENCE;
    while status_of(&done) != "exited 3" {
        assert!(Instant::now() < deadline, "{done}: {}", status_of(&done));
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = logs_until(&mesh, &["logs", "base", "--machine", &done], |t| {
        t.contains("crash run 4")
    });
    assert_every_run_ends(&text, 1..=4);
    let tail = stdout(&mesh.meshtop(&["logs", "base", "--machine", &done, "--tail", "2"]));
    // The two newest lines, each with its run's end.
    assert_every_run_ends(&tail, 3..=4);

    // Followed as it crashes: every end is said as it happens, the run after it marked.
    let live = format!("{}-l-{id}", mesh.name);
    crash_looping(&mesh, &image, &live, 2, "1.5");
    let mut follow = Following::start(&mesh, &["logs", "base", "--machine", &live, "--follow"]);
    let ends = |seen: &[String]| {
        seen.iter()
            .filter(|l| l.starts_with("── exited with code 3"))
            .count()
    };
    let deadline = Instant::now() + PATIENCE;
    while ends(&follow.seen) < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        match follow.lines.recv_timeout(left) {
            Ok(line) => follow.seen.push(line),
            Err(_) => panic!(
                "the follow never said three ends:\n{}",
                follow.seen.join("\n")
            ),
        }
    }
    assert_every_run_ends(&follow.seen.join("\n"), 1..=3);
}

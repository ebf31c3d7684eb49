//! Several machines of one module roll out side by side, up to a cap that keeps one serving
//! (issue 53). Real daemon: the module's machines serve `version.txt` (busybox httpd on a FROM
//! scratch image, as send_compose builds them) on a network of their own, and a poller container on
//! that network asks each of them, round after round, all through the converge that moves them. What
//! it saw is the measure: no round where every machine was down. Whether machines moved side by
//! side is read from the converge's own progress (how many sends began before the first ended), not
//! from timing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use common::httpd::docker;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use common::{remove_from_daemon, require_docker, said, test_name};

/// A mesh of one module `web` (policy rollout) whose `machines` run on a network with a poller.
/// Dropping it removes the containers, the network and the mesh's images.
struct Fleet {
    dir: tempfile::TempDir,
    mesh: String,
    machines: Vec<String>,
}

impl Fleet {
    /// `extra` is added to the module's table (`max_unavailable = 1`).
    fn new(tag: &str, count: usize, extra: &str) -> Fleet {
        require_docker();
        let mesh = test_name(tag);
        let fleet = Fleet {
            dir: tempfile::tempdir().unwrap(),
            machines: (1..=count).map(|i| format!("{mesh}-web-{i}")).collect(),
            mesh,
        };
        common::httpd::httpd_context(&fleet.root().join("web"));
        std::fs::write(
            fleet.root().join("mesh.toml"),
            format!(
                "[mesh]\nname = \"{}\"\n\n[[module]]\nname = \"web\"\ncontext = \"web\"\n{extra}\n",
                fleet.mesh
            ),
        )
        .unwrap();
        fleet.artifact("v1");
        fleet
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("mesh")
    }

    fn network(&self) -> String {
        format!("{}-net", self.mesh)
    }

    fn poller(&self) -> String {
        format!("{}-poller", self.mesh)
    }

    /// The next artifact: httpd serving `version`, as PID 1 (it ignores SIGTERM: each stop waits
    /// out the container's 1 s grace).
    fn artifact(&self, version: &str) {
        let web = self.root().join("web");
        std::fs::write(web.join("www/version.txt"), format!("{version}\n")).unwrap();
        common::httpd::httpd_dockerfile(
            &web,
            "CMD [\"httpd\", \"-f\", \"-p\", \"8080\", \"-h\", \"/www\"]",
        );
    }

    fn meshtop(&self, args: &[&str]) -> Output {
        common::httpd::meshtop_in(self.dir.path(), args)
    }

    /// Converge; the module's ref.
    fn converge(&self) -> String {
        let args = ["converge", "--json"];
        let (summary, _) = common::json_of(&args, &self.meshtop(&args));
        summary["modules"][0]["ref"].as_str().unwrap().to_string()
    }

    /// The machines on `reference`, each a container of the mesh on the fleet's network (started
    /// as a person would, with meshtop's labels), and the poller asking each of them in turn.
    fn start(&self, reference: &str) {
        docker(&["network", "create", &self.network()]);
        for machine in &self.machines {
            docker(&[
                "run",
                "-d",
                "--name",
                machine,
                "--network",
                &self.network(),
                "--stop-timeout",
                "1",
                "--label",
                "jr2.dev/module=web",
                "--label",
                &format!("jr2.dev/mesh={}", self.mesh),
                "--label",
                &format!("jr2.dev/machine={machine}"),
                reference,
            ]);
        }
        // One line a round: each machine's answer, or `down`.
        let asks: Vec<String> = self
            .machines
            .iter()
            .map(|m| {
                format!(
                    "$(timeout 2 wget -q -O - http://{m}:8080/version.txt 2>/dev/null || echo down)"
                )
            })
            .collect();
        let round = format!("while true; do echo {}; done", asks.join(" "));
        docker(&[
            "run",
            "-d",
            "--name",
            &self.poller(),
            "--network",
            &self.network(),
            "--label",
            &format!("jr2.dev/mesh={}", self.mesh),
            reference,
            "sh",
            "-c",
            &round,
        ]);
        self.poller_sees_all("v1");
    }

    /// Every round the poller made so far, each machine's answer.
    fn rounds(&self) -> Vec<Vec<String>> {
        docker(&["logs", &self.poller()])
            .lines()
            .map(|line| line.split_whitespace().map(str::to_string).collect())
            .filter(|round: &Vec<String>| round.len() == self.machines.len())
            .collect()
    }

    /// Wait until the poller's last round has every machine answering `version`.
    fn poller_sees_all(&self, version: &str) {
        common::wait_for(
            &format!("the poller hears {version} from every machine"),
            Duration::from_secs(60),
            || {
                let rounds = self.rounds();
                match rounds.last() {
                    Some(last) if last.iter().all(|v| v == version) => Ok(()),
                    last => Err(format!("{last:?}")),
                }
            },
        );
    }

    /// Converge v2 (moving every machine) with the poller asking throughout; its rounds during
    /// the roll-out and the converge's progress.
    fn roll_out_v2(&self) -> (Vec<Vec<String>>, String) {
        let before = self.rounds().len();
        self.artifact("v2");
        // Its words, not --json: the last line (stdout) is the timeline's account.
        let converge = self.meshtop(&["converge"]);
        assert!(converge.status.success(), "{}", said(&converge));
        self.poller_sees_all("v2");
        let rounds = self.rounds().split_off(before);
        (rounds, said(&converge))
    }

    /// How many of the machines' sends began before the first one ended, from the progress.
    fn began_before_first_end(&self, live: &str) -> usize {
        let mut began = 0;
        for line in live.lines() {
            let says = |what: &str| {
                self.machines
                    .iter()
                    .any(|m| line.contains(&format!("{m}: {what}")))
            };
            if says("moved") || says("failed") {
                return began;
            }
            if self
                .machines
                .iter()
                .any(|m| line.contains(&format!("{m}: sha256:")) && line.contains(" → "))
            {
                began += 1;
            }
        }
        panic!("no send of the fleet ended in the progress:\n{live}");
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let left = remove_from_daemon(&self.mesh);
        let _ = Command::new("docker")
            .args(["network", "rm", &self.network()])
            .output();
        if !left.is_empty() {
            eprintln!("mesh {}: images left on the daemon: {left:?}", self.mesh);
        }
    }
}

/// The poller's rounds during the roll-out never had every machine down, and saw each machine
/// move from v1 to v2.
fn one_always_served(fleet: &Fleet, rounds: &[Vec<String>], live: &str) {
    assert!(!rounds.is_empty(), "the poller made no round:\n{live}");
    let dark: Vec<&Vec<String>> = rounds
        .iter()
        .filter(|round| round.iter().all(|answer| answer == "down"))
        .collect();
    assert!(
        dark.is_empty(),
        "{} round(s) of {} found every machine down:\n{live}",
        dark.len(),
        rounds.len()
    );
    for (index, machine) in fleet.machines.iter().enumerate() {
        assert!(
            rounds.iter().any(|round| round[index] == "v1")
                && rounds.last().unwrap()[index] == "v2",
            "the poller did not see {machine} move from v1 to v2: {rounds:?}"
        );
    }
}

#[test]
fn two_machines_of_one_module_roll_out_one_at_a_time_with_one_always_serving() {
    let fleet = Fleet::new("ro2", 2, "");
    let reference = fleet.converge();
    fleet.start(&reference);

    let (rounds, live) = fleet.roll_out_v2();
    one_always_served(&fleet, &rounds, &live);
    // Of two machines, all but one is one: the second began once the first had proven itself.
    assert_eq!(fleet.began_before_first_end(&live), 1, "{live}");
    assert!(
        live.contains(&format!("{}: waits its turn", fleet.machines[1])),
        "the waiting machine says what it waits on:\n{live}"
    );
}

#[test]
fn three_machines_roll_out_two_side_by_side_with_one_always_serving() {
    let fleet = Fleet::new("ro3", 3, "");
    let reference = fleet.converge();
    fleet.start(&reference);

    let (rounds, live) = fleet.roll_out_v2();
    one_always_served(&fleet, &rounds, &live);
    assert_eq!(fleet.began_before_first_end(&live), 2, "{live}");
    // The timeline's critical path ends in the roll-outs: two waves of (a 1 s grace, then 5 s
    // running) are most of this converge, and its last line says so.
    let last = live.lines().find(|l| l.starts_with("critical path"));
    assert!(
        last.is_some_and(|l| l.contains("→ roll-out of web") && l.contains("most of it)")),
        "{live}"
    );
    assert!(
        live.contains("2 of web's 3 machine(s) move at once"),
        "{live}"
    );
}

#[test]
fn max_unavailable_caps_how_many_move_at_once() {
    let fleet = Fleet::new("rocap", 3, "max_unavailable = 1\n");
    let reference = fleet.converge();
    fleet.start(&reference);

    let (rounds, live) = fleet.roll_out_v2();
    one_always_served(&fleet, &rounds, &live);
    assert_eq!(fleet.began_before_first_end(&live), 1, "{live}");
}

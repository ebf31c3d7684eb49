//! A workload's log: the log of the module's container (the one a send patches) in each of its
//! pods (`GET …/pods/{pod}/log` with `container`, `previous`, `follow`, `tailLines`,
//! `sinceSeconds`, `timestamps`), and, before the lines of a pod that is not running, its recent
//! events (`kubectl describe`'s Events). The kubelet writes stdout and stderr into one log, so
//! every line reads as stdout.
//!
//! The kubelet keeps one log per run of a container, and only the last run before the current one
//! (`lastState.terminated`, what `kubectl describe pod` shows as Last State, with the
//! `restartCount`): a read says where that run ended, with its exit code and reason, before the
//! current run's lines, and where the run read ended after its lines when it did.
//!
//! A follow lists the workload's pods again every [`RELIST`]: a pod a send (or a restart) brought
//! is followed from then on and the line says so; a container that ran again is read from where
//! its last read ended.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use kube::Api;
use kube::api::{ListParams, LogParams};
use tokio::sync::mpsc::Sender;
use tokio::task::JoinSet;

use super::{Cluster, ClusterError, Workload};
use crate::mesh::logs::{LogAsk, LogItem, RunEnd, Stream, at_or_after, split_time};

/// How often a follow lists the workload's pods again.
const RELIST: Duration = Duration::from_secs(2);

/// A pod as the log reader needs it: its name, whether the module's container runs, which run of
/// it this is (the container id changes with every run), and its container's status.
#[derive(Debug, Clone, PartialEq)]
struct PodRun {
    pod: String,
    running: bool,
    container_id: String,
    status: Option<ContainerStatus>,
}

fn run_of(pod: &Pod, container: &str) -> PodRun {
    let status = pod.status.as_ref();
    let container_status = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|all| all.iter().find(|c| c.name == container));
    PodRun {
        pod: pod.metadata.name.clone().unwrap_or_default(),
        running: container_status
            .and_then(|c| c.state.as_ref())
            .is_some_and(|s| s.running.is_some()),
        container_id: container_status
            .and_then(|c| c.container_id.clone())
            .unwrap_or_default(),
        status: container_status.cloned(),
    }
}

/// Where a run ended, as the kubelet reports it (`finishedAt`, `exitCode`, `reason`).
fn end_of(terminated: &ContainerStateTerminated) -> Option<RunEnd> {
    Some(RunEnd {
        at: terminated.finished_at.as_ref()?.0.to_string(),
        code: i64::from(terminated.exit_code),
        reason: terminated.reason.clone().filter(|r| !r.is_empty()),
    })
}

/// What is said around the lines of the run a read gets: before them, where the run before it
/// ended and that this one began (its restart count); after them, where it ended, if it did.
#[derive(Debug, Default)]
struct Marks {
    before: Vec<LogItem>,
    after: Option<LogItem>,
}

/// The marks of the run the kubelet reads (`pkg/kubelet/kubelet_pods.go`
/// validateContainerLogStatus): `previous` reads `lastState.terminated`'s run; else the running
/// or terminated current run; else, between runs (CrashLoopBackOff), the last terminated one.
/// The lines of a log are all of one run, so the ends go before or after them, not among them by
/// time (`finishedAt` is whole seconds: a run's last lines may carry a later time than its end).
fn marks_of(run: &PodRun, previous: bool) -> Marks {
    let Some(status) = &run.status else {
        return Marks::default();
    };
    let last_end = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .and_then(end_of);
    let state = status.state.as_ref();
    let started = |at: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        at.map(|t| LogItem::RunStarted {
            at: t.0.to_string(),
            restarts: i64::from(status.restart_count),
        })
    };
    let current = match state {
        _ if previous => None,
        Some(s) if s.running.is_some() => Some((
            started(s.running.as_ref().and_then(|r| r.started_at.as_ref())),
            None,
        )),
        Some(s) if s.terminated.is_some() => s.terminated.as_ref().map(|t| {
            let own = end_of(t).map(|e| e.item());
            (started(t.started_at.as_ref()), own)
        }),
        _ => None,
    };
    match current {
        Some((start, after)) => {
            let mut before: Vec<LogItem> = last_end.iter().map(RunEnd::item).collect();
            if !before.is_empty() {
                before.extend(start);
            }
            Marks { before, after }
        }
        // The run read is the last terminated one: its end comes after its lines.
        None => Marks {
            before: Vec::new(),
            after: last_end.map(|e| e.item()),
        },
    }
}

/// The receiver went away: stop.
struct Closed;

async fn say(out: &Sender<LogItem>, item: LogItem) -> Result<(), Closed> {
    out.send(item).await.map_err(|_| Closed)
}

impl Cluster {
    /// Send what the module's container of `workload` says to `out`, as `ask` asks. Err before
    /// anything was said: the pods cannot be listed, or reading logs is not allowed.
    pub async fn workload_logs(
        &self,
        workload: &Workload,
        ask: &LogAsk,
        out: &Sender<LogItem>,
    ) -> Result<(), ClusterError> {
        if let Some(why) = &workload.unknown_container {
            return Err(self.unknown_container(workload, why));
        }
        let pods = self.pod_runs(workload).await?;
        if pods.is_empty() {
            let text = format!("{workload} has no pods");
            let _ = say(out, LogItem::Note { text }).await;
        }
        let several = pods.len() > 1;
        if !ask.follow {
            for run in &pods {
                match self.pod_once(workload, run, several, ask, out).await {
                    Ok(Ok(())) => {}
                    Ok(Err(forbidden)) => return Err(forbidden),
                    Err(Closed) => return Ok(()),
                }
            }
            return Ok(());
        }
        // The first pod's answer tells whether logs may be read at all.
        if let Some(first) = pods.first()
            && let Err(e) = self.allowed_to_read(&first.pod, &workload.container).await
        {
            return Err(e);
        }
        let _ = self.follow_pods(workload, pods, ask, out).await;
        Ok(())
    }

    async fn pod_runs(&self, workload: &Workload) -> Result<Vec<PodRun>, ClusterError> {
        let Some(selector) = &workload.selector else {
            return Ok(Vec::new());
        };
        let pods = self
            .list_all::<Pod>(&ListParams::default().labels(selector))
            .await?;
        let mut runs: Vec<PodRun> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| run_of(p, &workload.container))
            .collect();
        runs.sort_by(|a, b| a.pod.cmp(&b.pod));
        Ok(runs)
    }

    /// A 403 on pods/log, named as the permission that is missing.
    fn forbidden_log(&self) -> ClusterError {
        ClusterError::Forbidden {
            context: self.context.clone(),
            missing: vec![format!(
                "cannot get pods/log in namespace {:?}",
                self.namespace
            )],
        }
    }

    async fn allowed_to_read(&self, pod: &str, container: &str) -> Result<(), ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = LogParams {
            container: Some(container.to_string()),
            tail_lines: Some(0),
            ..LogParams::default()
        };
        match self.timed(api.logs(pod, &params)).await {
            Ok(Err(e)) if super::status_code(&e) == Some(403) => Err(self.forbidden_log()),
            Ok(Err(e)) if super::status_code(&e).is_none() => {
                Err(self.api_error(format!("read the log of pod {pod}"), e))
            }
            Err(()) => Err(self.timeout_error(format!("read the log of pod {pod}"))),
            _ => Ok(()),
        }
    }

    fn params(&self, workload: &Workload, ask: &LogAsk, follow: bool) -> LogParams {
        LogParams {
            container: Some(workload.container.clone()),
            follow,
            previous: ask.previous,
            tail_lines: ask.tail.and_then(|t| i64::try_from(t).ok()),
            since_seconds: ask.since_seconds,
            timestamps: true,
            ..LogParams::default()
        }
    }

    /// The pod's events first when it is not running, then what the API server answers. A 400
    /// (waiting to start, no previous container) is said, not failed: the events tell why.
    async fn pod_once(
        &self,
        workload: &Workload,
        run: &PodRun,
        several: bool,
        ask: &LogAsk,
        out: &Sender<LogItem>,
    ) -> Result<Result<(), ClusterError>, Closed> {
        if !run.running {
            self.say_events(run, out).await?;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = self.params(workload, ask, false);
        let what = || format!("read the log of pod {}", run.pod);
        match self.timed(api.logs(&run.pod, &params)).await {
            Ok(Ok(text)) => {
                let marks = marks_of(run, ask.previous);
                for item in marks.before {
                    say(out, item).await?;
                }
                for line in text.lines() {
                    say(out, item_of(line, several.then_some(&run.pod))).await?;
                }
                if let Some(item) = marks.after {
                    say(out, item).await?;
                }
                Ok(Ok(()))
            }
            Ok(Err(e)) if super::status_code(&e) == Some(403) => Ok(Err(self.forbidden_log())),
            Ok(Err(e)) if super::status_code(&e).is_some() => {
                let text = format!("pod {}: {}", run.pod, super::describe(&e));
                say(out, LogItem::Note { text }).await?;
                Ok(Ok(()))
            }
            Ok(Err(e)) => Ok(Err(self.api_error(what(), e))),
            Err(()) => Ok(Err(self.timeout_error(what()))),
        }
    }

    async fn say_events(&self, run: &PodRun, out: &Sender<LogItem>) -> Result<(), Closed> {
        for text in self.events_of("Pod", &run.pod).await {
            say(
                out,
                LogItem::Event {
                    text: format!("pod {}: {text}", run.pod),
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Follow every pod of the workload, and the pods that come while following.
    async fn follow_pods(
        &self,
        workload: &Workload,
        first: Vec<PodRun>,
        ask: &LogAsk,
        out: &Sender<LogItem>,
    ) -> Result<(), Closed> {
        let mut following: BTreeMap<String, String> = BTreeMap::new();
        // The newest line's time of each pod: a run read again starts after it.
        let mut last: BTreeMap<String, String> = BTreeMap::new();
        let mut readers: JoinSet<Read> = JoinSet::new();
        let mut known: BTreeSet<String> = first.iter().map(|r| r.pod.clone()).collect();
        // The run marks said of each pod (see [`marks_of`]).
        let mut said: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut runs = first;
        let mut listed_once = false;
        loop {
            let several = runs.len() > 1;
            for run in &runs {
                if following.get(&run.pod) == Some(&run.container_id) {
                    continue;
                }
                if listed_once && !known.contains(&run.pod) {
                    let now = format!("pod {}", run.pod);
                    say(out, LogItem::Replaced { now }).await?;
                } else if following.contains_key(&run.pod) && !run.container_id.is_empty() {
                    let text = format!(
                        "pod {}: container {} ran again",
                        run.pod, workload.container
                    );
                    say(out, LogItem::Note { text }).await?;
                }
                known.insert(run.pod.clone());
                if !run.running {
                    self.say_events(run, out).await?;
                }
                following.insert(run.pod.clone(), run.container_id.clone());
                let mut marks = marks_of(run, ask.previous);
                // Each mark once per pod: a run read again (after a cut, or between two
                // listings of a pod in back-off) does not say its ends again.
                let said_here = said.entry(run.pod.clone()).or_default();
                marks.before.retain(|m| said_here.insert(m.render(true)));
                marks.after = marks.after.filter(|m| said_here.insert(m.render(true)));
                let reader = Reader {
                    marks,
                    cluster: self.clone(),
                    params: self.params(workload, ask, run.running),
                    pod: run.pod.clone(),
                    source: several.then(|| run.pod.clone()),
                    after: last.get(&run.pod).cloned(),
                    out: out.clone(),
                };
                readers.spawn(reader.read());
            }
            listed_once = true;
            let relist = tokio::time::sleep(RELIST);
            tokio::pin!(relist);
            loop {
                tokio::select! {
                    () = &mut relist => break,
                    () = out.closed() => return Err(Closed),
                    Some(Ok(read)) = readers.join_next() => {
                        if read.cut {
                            // Read again at the next listing, after the newest line seen.
                            following.remove(&read.pod);
                        }
                        if let Some(newest) = read.newest {
                            last.insert(read.pod, newest);
                        }
                    }
                }
            }
            match self.pod_runs(workload).await {
                Ok(now) => {
                    following.retain(|pod, _| now.iter().any(|r| r.pod == *pod));
                    runs = now;
                }
                Err(e) => {
                    let why = e.to_string();
                    let retry_in_ms = Some(u64::try_from(RELIST.as_millis()).unwrap_or(0));
                    say(out, LogItem::Cut { why, retry_in_ms }).await?;
                }
            }
        }
    }
}

/// How one pod's read ended: the newest line's time, and whether a fault cut it.
struct Read {
    pod: String,
    newest: Option<String>,
    cut: bool,
}

/// One pod's log read in a task of its own, with what is said around the run's lines.
struct Reader {
    marks: Marks,
    cluster: Cluster,
    params: LogParams,
    pod: String,
    source: Option<String>,
    after: Option<String>,
    out: Sender<LogItem>,
}

impl Reader {
    async fn read(mut self) -> Read {
        let api: Api<Pod> = Api::namespaced(self.cluster.client.clone(), &self.cluster.namespace);
        if self.after.is_some() {
            self.params.tail_lines = None;
            self.params.since_seconds = None;
        }
        let mut newest = self.after.clone();
        for item in std::mem::take(&mut self.marks.before) {
            if self.out.send(item).await.is_err() {
                return Read {
                    pod: self.pod,
                    newest,
                    cut: false,
                };
            }
        }
        let stream = match api.log_stream(&self.pod, &self.params).await {
            Ok(stream) => stream,
            Err(e) => {
                let text = format!("pod {}: {}", self.pod, super::describe(&e));
                let _ = self.out.send(LogItem::Note { text }).await;
                let cut = super::status_code(&e).is_none();
                return Read {
                    pod: self.pod,
                    newest,
                    cut,
                };
            }
        };
        let mut lines = stream.lines();
        let mut cut = false;
        while let Some(line) = lines.next().await {
            let line = match line {
                Ok(line) => line,
                Err(e) => {
                    let why = format!("reading the log of pod {}: {e}", self.pod);
                    let retry_in_ms = Some(u64::try_from(RELIST.as_millis()).unwrap_or(0));
                    let _ = self.out.send(LogItem::Cut { why, retry_in_ms }).await;
                    cut = true;
                    break;
                }
            };
            let item = item_of(&line, self.source.as_ref());
            if let (Some(after), Some(time)) = (self.after.as_deref(), item.time())
                && at_or_after(after, time)
            {
                continue;
            }
            if let Some(time) = item.time() {
                newest = Some(time.to_string());
            }
            if self.out.send(item).await.is_err() {
                break;
            }
        }
        if let Some(item) = self.marks.after.take() {
            let _ = self.out.send(item).await;
        }
        Read {
            pod: self.pod,
            newest,
            cut,
        }
    }
}

/// A line of a pod's log read with timestamps: the kubelet merges the streams, so stdout.
fn item_of(line: &str, source: Option<&String>) -> LogItem {
    let (time, text) = split_time(line);
    let mut item = LogItem::line(Stream::Stdout, time.map(str::to_string), text);
    if let LogItem::Line { source: from, .. } = &mut item {
        *from = source.cloned();
    }
    item
}

//! `cri-bridge move --from BACKEND`: moves the pods of one node off a backend without a drain.
//! The node stays schedulable and keeps serving; only the pods whose sandboxes the old backend
//! holds are moved, one at a time (or `--at-once N`), each through the API server's eviction
//! API, which honours every PodDisruptionBudget, and each after the replacement of the one
//! before is Ready. A replacement that lands on this node gets a new sandbox, and new sandboxes
//! go to the default backend. Static pods, which the eviction API cannot move, are restarted
//! from their manifests (`static_pods`). The move ends when the old backend holds no sandbox.
//!
//! It decides from what the backends hold now and what the API server says now (`plan`), never
//! from a record of its own: stopped at any point, by an error, a `429` it waits out, or ^C, it
//! leaves every pod running, and run again it goes on where it stopped.

pub mod cluster;
pub mod error;
pub mod plan;
pub mod static_pods;

use crate::config::Config;
use crate::holdings::{holdings, Holding};
use cluster::Evicted;
use error::MoveError;
use plan::{OldSandbox, PodFacts, Step};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What the command line says (`cri-bridge move`).
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// The backend to empty (its name in `backends`).
    #[arg(long)]
    pub from: String,
    /// The node's name in the API server [default: the hostname, lowercased, as the kubelet's]
    /// (set it when the kubelet has --hostname-override).
    #[arg(long)]
    pub node: Option<String>,
    /// The kubeconfig (default: $KUBECONFIG, ~/.kube/config, or the pod's service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// How many pods to evict before waiting for their replacements.
    #[arg(long, default_value_t = 1)]
    pub at_once: usize,
    /// List what would be done, and do nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long a replacement has to become Ready (e.g. 5m, 90s).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub ready_timeout: Duration,
    /// How long the kubelet has to remove the sandboxes of pods that are gone.
    #[arg(long, default_value = "3m", value_parser = humantime::parse_duration)]
    pub cleanup_timeout: Duration,
    /// The kubelet's static pod directory (its staticPodPath).
    #[arg(long, default_value = "/etc/kubernetes/manifests")]
    pub manifests: PathBuf,
}

/// How often the backends and the API server are asked again while waiting.
const POLL: Duration = Duration::from_millis(500);
/// How long to wait before asking the eviction API again after a `429`.
const RETRY: Duration = Duration::from_secs(5);
const MINUTE: Duration = Duration::from_secs(60);

/// Runs the move, telling `out` how it goes.
pub async fn run(config: &Config, options: &Options, out: &mut dyn Write) -> Result<(), MoveError> {
    let (from, default) = backends(config, &options.from)?;
    let node = match &options.node {
        Some(node) => node.clone(),
        None => hostname().ok_or_else(|| MoveError::Node("the hostname could not be read; name the node".into()))?,
    };
    let options = &Options { node: Some(node.clone()), ..options.clone() };
    let mut progress = Progress { out, start: Instant::now(), moved: 0 };
    for manifest in static_pods::restore_left_aside(&options.manifests)? {
        progress.say(&format!("put back {}, set aside by a move that did not finish", manifest.display()));
    }
    let client = cluster::connect(options.kubeconfig.as_deref()).await?;
    progress.say(&format!(
        "node {}: moving the pods of backend {} ({}) to {} ({})",
        node, options.from, from, default.0, default.1
    ));
    let mut settling = Settling::default();
    loop {
        // Every backend asked once a round; the round's steps all go by that answer.
        let held = holdings(config).await;
        let sandboxes = old_sandboxes(&held, &options.from)?;
        let steps = plan::plan(&sandboxes, &cluster::pods_on_node(&client, &node).await?);
        if options.dry_run {
            return dry_run(&client, &steps, &mut progress).await;
        }
        let batch: Vec<PodFacts> = steps
            .iter()
            .filter_map(|s| if let Step::Evict(pod) = s { Some(pod.clone()) } else { None })
            .take(options.at_once.max(1))
            .collect();
        let restart = steps.iter().find_map(|s| if let Step::Restart(pod) = s { Some(pod.clone()) } else { None });
        let to_move = steps.iter().filter(|s| s.is_move()).count();
        if !batch.is_empty() {
            progress.say(&format!("{to_move} to move"));
            evict_and_wait(&client, config, options, &batch, &mut progress).await?;
        } else if let Some(pod) = restart {
            progress.say(&format!("{to_move} to move"));
            restart_static(&client, config, options, &pod, &mut progress).await?;
        } else if remove_kept(config, options, &held, &steps, &mut progress).await? {
            // Removed a stopped sandbox the kubelet would have kept: look again.
        } else if settling.done(&steps, options, &mut progress)? {
            progress.say(&format!(
                "backend {} holds no sandbox: {} pods moved in {}. Next (docs/migrate.md step 5): keep only the \
                 default backend in the config,\n  backend:\n    endpoint: {}\nand restart cri-bridge.",
                options.from,
                progress.moved,
                humantime::format_duration(Duration::from_secs(progress.start.elapsed().as_secs())),
                default.1
            ));
            return Ok(());
        } else {
            tokio::time::sleep(POLL).await;
        }
    }
}

/// The kubelet's default node name: the hostname, lowercased.
fn hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_lowercase()).filter(|n| !n.is_empty())
}

/// The old backend's endpoint, and the default's name and endpoint; refused when the old one is
/// no backend, or the default (new sandboxes would go back to it).
fn backends(config: &Config, from: &str) -> Result<(String, (String, String)), MoveError> {
    let Some(routing) = &config.routing else {
        return Err(MoveError::From(format!(
            "{from}: the config has one backend; add the new runtime as the default first (docs/migrate.md step 3)"
        )));
    };
    let default = &routing.backends[routing.default];
    let Some(old) = routing.backends.iter().find(|b| b.name == from) else {
        return Err(MoveError::From(format!("{from}: no such backend (backends: {})", routing.names().join(", "))));
    };
    if old.name == default.name {
        return Err(MoveError::From(format!(
            "{from} is routes.default: new sandboxes go there; make the new runtime the default first (docs/migrate.md step 3)"
        )));
    }
    Ok((old.endpoint.to_string(), (default.name.clone(), default.endpoint.to_string())))
}

/// What the old backend holds, of what every backend's runtime was asked this round.
fn old_sandboxes(held: &[Holding], from: &str) -> Result<Vec<OldSandbox>, MoveError> {
    let old = held.iter().find(|h| h.name == from).expect("backends() checked the name");
    match &old.runtime {
        Ok(_) => Ok(old
            .sandboxes
            .iter()
            .map(|s| OldSandbox { id: s.id.clone(), pod: s.pod.clone(), uid: s.uid.clone(), ready: s.ready })
            .collect()),
        Err(why) => Err(MoveError::Backend { backend: from.to_string(), why: why.clone() }),
    }
}

/// Where the ready sandbox of kubelet UID `uid` is now: the backend's name.
fn backend_holding(held: &[Holding], uid: &str) -> Option<String> {
    held.iter().find(|h| h.sandboxes.iter().any(|s| s.uid == uid && s.ready)).map(|h| h.name.clone())
}

async fn dry_run(client: &kube::Client, steps: &[Step], progress: &mut Progress<'_>) -> Result<(), MoveError> {
    progress.say(&format!("dry run: {} to move, nothing is done", steps.iter().filter(|s| s.is_move()).count()));
    for step in steps {
        let line = match step {
            Step::Evict(pod) => {
                let owner = pod.owner.as_ref().map(|o| format!("{} {}", o.kind, o.name)).unwrap_or_default();
                let budgets = cluster::budgets_of(client, pod).await?;
                let budgets = if budgets.is_empty() { "no disruption budget".into() } else { budgets.join(", ") };
                format!("would evict {} ({owner}; {budgets})", pod.full_name())
            }
            Step::Restart(pod) => format!("would restart the static pod {} from its manifest", pod.full_name()),
            Step::Going(pod) => format!("would wait for {} to go (deleted or finished)", pod.full_name()),
            Step::Leftover(_) => format!("would wait for the kubelet to remove the stopped {}", step.subject()),
            Step::Unmanaged(pod) => {
                format!("would leave {}: no controller recreates it (delete and recreate it yourself)", pod.full_name())
            }
            Step::Unknown(_) => format!("would leave {}: no pod of the API server on this node", step.subject()),
        };
        progress.say(&line);
    }
    Ok(())
}

/// Evicts `batch` (waiting out each `429`), then waits until each owner has as many Ready pods
/// as before, without the evicted ones.
async fn evict_and_wait(
    client: &kube::Client,
    config: &Config,
    options: &Options,
    batch: &[PodFacts],
    progress: &mut Progress<'_>,
) -> Result<(), MoveError> {
    let mut evicted = Vec::new();
    for pod in batch {
        let owner = pod.owner.clone().expect("plan: an Evict step has an owner");
        let mut said: Option<(String, Instant)> = None;
        let waited = Instant::now();
        loop {
            // Counted right before each attempt: what the owner has when the eviction is let in
            // is what its replacement must bring back.
            let before = cluster::pods_in(client, &pod.namespace).await?;
            let ready_before = plan::ready_of_owner(&before, &owner.uid, &[]);
            let known: Vec<String> = before.iter().map(|p| p.uid.clone()).collect();
            match cluster::evict(client, pod).await? {
                Evicted::Yes => {
                    progress.say(&format!("evicted {} ({} {})", pod.full_name(), owner.kind, owner.name));
                    evicted.push((pod.clone(), owner.clone(), ready_before, known.clone()));
                    break;
                }
                Evicted::Gone => break,
                Evicted::NotNow(why) => {
                    // Said when the reason changes, and again each minute.
                    let stale = said.as_ref().is_none_or(|(what, when)| *what != why || when.elapsed() > MINUTE);
                    if stale {
                        let budgets = cluster::budgets_of(client, pod).await?.join(", ");
                        progress.say(&format!(
                            "waiting to evict {} for {}: {why} [{budgets}]; asking again every {}s",
                            pod.full_name(),
                            humantime::format_duration(Duration::from_secs(waited.elapsed().as_secs())),
                            RETRY.as_secs()
                        ));
                        said = Some((why, Instant::now()));
                    }
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }
    for (pod, owner, ready_before, known) in evicted {
        let gone = vec![pod.uid.clone()];
        progress.say(&format!(
            "waiting for {} {} to have {ready_before} Ready pods again (replacing {})",
            owner.kind,
            owner.name,
            pod.full_name()
        ));
        let started = Instant::now();
        loop {
            let now = cluster::pods_in(client, &pod.namespace).await?;
            let ready = plan::ready_of_owner(&now, &owner.uid, &gone);
            if ready >= ready_before {
                let new: Vec<&PodFacts> = now
                    .iter()
                    .filter(|p| p.owner.as_ref().is_some_and(|o| o.uid == owner.uid) && p.ready)
                    .filter(|p| !known.contains(&p.uid))
                    .collect();
                let held = holdings(config).await;
                let placed: Vec<String> = new
                    .iter()
                    .map(|p| match backend_holding(&held, &p.uid) {
                        Some(backend) => format!("{} on {backend}", p.full_name()),
                        None => format!("{} on another node", p.full_name()),
                    })
                    .collect();
                progress.moved += 1;
                let placed = if placed.is_empty() { "no new pod needed".into() } else { placed.join(", ") };
                progress.say(&format!(
                    "moved {} in {:.1}s: {placed}",
                    pod.full_name(),
                    started.elapsed().as_secs_f64()
                ));
                break;
            }
            if started.elapsed() > options.ready_timeout {
                return Err(MoveError::NotReady {
                    pod: pod.full_name(),
                    waited: options.ready_timeout,
                    what: format!("{} {} has {ready} Ready pods of the {ready_before} before", owner.kind, owner.name),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(())
}

/// Restarts a static pod: its manifest set aside until the old backend's sandbox is stopped,
/// then put back, then its mirror waited for, Ready, with a sandbox on another backend.
async fn restart_static(
    client: &kube::Client,
    config: &Config,
    options: &Options,
    pod: &PodFacts,
    progress: &mut Progress<'_>,
) -> Result<(), MoveError> {
    let node = options.node.as_deref().unwrap_or_default();
    let manifest = static_pods::find_manifest(&options.manifests, &pod.namespace, &pod.name, node)?;
    let uid = pod.kubelet_uid().to_string();
    let started = Instant::now();
    let aside = static_pods::SetAside::new(&manifest)?;
    progress.say(&format!("stopping the static pod {} (set aside {})", pod.full_name(), manifest.display()));
    loop {
        let held = holdings(config).await;
        let old = held.iter().find(|h| h.name == options.from);
        if let Some(Err(why)) = old.map(|h| &h.runtime) {
            return Err(MoveError::Backend { backend: options.from.clone(), why: why.clone() });
        }
        if backend_holding(&held, &uid).is_none() {
            break;
        }
        if started.elapsed() > options.ready_timeout {
            return Err(MoveError::NotReady {
                pod: pod.full_name(),
                waited: options.ready_timeout,
                what: "the kubelet did not stop it with its manifest set aside; the manifest is put back".into(),
            });
        }
        tokio::time::sleep(POLL).await;
    }
    aside.put_back()?;
    progress.say(&format!("starting the static pod {} again (put back {})", pod.full_name(), manifest.display()));
    loop {
        let mirror = cluster::pod(client, &pod.namespace, &pod.name).await?;
        let held = holdings(config).await;
        let placed = backend_holding(&held, &uid).filter(|backend| *backend != options.from);
        if let (Some(backend), Some(true)) = (&placed, mirror.as_ref().map(|m| m.ready)) {
            progress.moved += 1;
            progress.say(&format!(
                "moved {} in {:.1}s: on {backend}",
                pod.full_name(),
                started.elapsed().as_secs_f64()
            ));
            return Ok(());
        }
        if started.elapsed() > options.ready_timeout {
            return Err(MoveError::NotReady {
                pod: pod.full_name(),
                waited: options.ready_timeout,
                what: format!("its sandbox is on {}", placed.as_deref().unwrap_or("no backend, ready")),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Removes each stopped sandbox of the old backend whose pod runs, ready, on another backend now:
/// the kubelet keeps the last stopped sandbox of a pod that lives (a static pod restarted under
/// its UID), so nothing else would; `held` is this round's answer of every backend. Whether any
/// was removed.
async fn remove_kept(
    config: &Config,
    options: &Options,
    held: &[Holding],
    steps: &[Step],
    progress: &mut Progress<'_>,
) -> Result<bool, MoveError> {
    let mut removed = false;
    for step in steps {
        let Step::Leftover(sandbox) = step else { continue };
        let Some(now_on) = backend_holding(held, &sandbox.uid).filter(|b| *b != options.from) else { continue };
        crate::holdings::remove_sandbox(config, &options.from, &sandbox.id)
            .await
            .map_err(|why| MoveError::Backend { backend: options.from.clone(), why })?;
        progress.say(&format!(
            "removed the stopped {} from {}: its pod runs on {now_on}, and the kubelet keeps a live pod's last \
             stopped sandbox",
            step.subject(),
            options.from
        ));
        removed = true;
    }
    Ok(removed)
}

/// Nothing left to move: what the kubelet still has to remove is waited for (up to
/// `cleanup_timeout`), and what the eviction API cannot move ends the run, named.
#[derive(Default)]
struct Settling {
    since: Option<Instant>,
    said: Vec<String>,
}

impl Settling {
    /// `true` when the old backend holds nothing; `false` to look again.
    fn done(&mut self, steps: &[Step], options: &Options, progress: &mut Progress<'_>) -> Result<bool, MoveError> {
        let since = *self.since.get_or_insert_with(Instant::now);
        let waiting: Vec<String> =
            steps.iter().filter(|s| matches!(s, Step::Going(_) | Step::Leftover(_))).map(Step::subject).collect();
        let mut left: Vec<String> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Unmanaged(_) => Some(format!("{} (no controller recreates it)", s.subject())),
                Step::Unknown(_) => Some(format!("{} (no pod of the API server on this node)", s.subject())),
                _ => None,
            })
            .collect();
        if waiting.is_empty() && left.is_empty() {
            return Ok(true);
        }
        if waiting.is_empty() || since.elapsed() > options.cleanup_timeout {
            left.extend(waiting.iter().map(|s| format!("{s} (not removed by the kubelet in time)")));
            return Err(MoveError::Left { backend: options.from.clone(), left });
        }
        if waiting != self.said {
            progress.say(&format!("waiting for the kubelet to remove: {}", waiting.join(", ")));
            self.said = waiting;
        }
        Ok(false)
    }
}

/// The lines `move` prints: each with the count moved and the time since it started.
struct Progress<'a> {
    out: &'a mut dyn Write,
    start: Instant,
    moved: usize,
}

impl Progress<'_> {
    fn say(&mut self, line: &str) {
        let elapsed = humantime::format_duration(Duration::from_secs(self.start.elapsed().as_secs()));
        let _ = writeln!(self.out, "[{elapsed}, {} moved] {line}", self.moved);
        let _ = self.out.flush();
    }
}

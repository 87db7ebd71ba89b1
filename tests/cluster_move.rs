//! A node moved off Docker with `cri-bridge move`, in a real two-node cluster (tests/cluster_support:
//! Kubernetes 1.37.2, node-a on Docker through cri-dockerd behind cri-bridge, node-b on containerd
//! 2.4.2), while a load client sends a few hundred requests a second to a Service, counting every
//! failure; then the same cluster, load and budget with `kubectl drain`, the way every guide gives.
//! One cluster for all of it, in this order:
//!
//! 1. The workload on node-a's Docker: a Deployment of 4 agnhost HTTP servers with a
//!    PodDisruptionBudget `minAvailable: 3` and a NodePort Service, a DaemonSet, a static pod.
//! 2. docs/migrate.md step 3: containerd added as the default backend, cri-bridge restarted.
//! 3. A budget that allows nothing (`minAvailable: 4`): `move` waits, names it, and evicts no pod
//!    it covers.
//! 4. The API server killed while `move` waits for a replacement: `move` stops, says so, and every
//!    pod runs on; the API server back, `move` run again finishes: 0 failed requests (in every
//!    window but the API server's outage, whose failures are reported), never fewer than 3 Ready
//!    replicas, node-a never cordoned, every moved pod's new sandbox on containerd (or on node-b),
//!    the DaemonSet's and the static pod moved, Docker empty, nothing else restarted.
//! 5. `kubectl drain node-a` from the same placement (the 4 replicas on node-a), measured the same
//!    way.
//!
//! `move` runs with the RBAC docs/migrate.md gives (a ServiceAccount's token), not as admin. The
//! figures go to target/cluster/results.txt (docs/migrate.md has them). Needs root and the peers
//! `.ci/run` builds; fails, never skips, without them.

mod cluster_support;
mod common;
mod docker_support;
mod node_e2e_support;

use cluster_support::{TestCluster, AGNHOST, BUSYBOX};
use common::process::Reaped;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODE_PORT: u16 = 30080;

fn workload() -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{ name: web, namespace: default }}
spec:
  replicas: 4
  selector: {{ matchLabels: {{ app: web }} }}
  template:
    metadata: {{ labels: {{ app: web }} }}
    spec:
      terminationGracePeriodSeconds: 30
      # Spread over the nodes: replacements go where fewer run, node-a included.
      topologySpreadConstraints:
      - {{ maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {{ matchLabels: {{ app: web }} }} }}
      containers:
      - name: web
        image: {AGNHOST}
        imagePullPolicy: IfNotPresent
        # Serves on until kube-proxy has taken it out of the Service.
        args: [netexec, --http-port=8080, --delay-shutdown=5]
        ports: [{{ containerPort: 8080 }}]
        resources: {{ requests: {{ cpu: 10m, memory: 16Mi }}, limits: {{ cpu: 200m, memory: 64Mi }} }}
        readinessProbe: {{ httpGet: {{ path: /healthz, port: 8080 }}, periodSeconds: 1 }}
        livenessProbe: {{ tcpSocket: {{ port: 8080 }}, periodSeconds: 5 }}
        securityContext: {{ allowPrivilegeEscalation: false, capabilities: {{ drop: [ALL] }}, readOnlyRootFilesystem: true }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{ name: web, namespace: default }}
spec:
  minAvailable: 3
  selector: {{ matchLabels: {{ app: web }} }}
---
apiVersion: v1
kind: Service
metadata: {{ name: web, namespace: default }}
spec:
  type: NodePort
  selector: {{ app: web }}
  ports: [{{ port: 80, targetPort: 8080, nodePort: {NODE_PORT} }}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{ name: agent, namespace: default }}
spec:
  selector: {{ matchLabels: {{ app: agent }} }}
  template:
    metadata: {{ labels: {{ app: agent }} }}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: agent
        image: {BUSYBOX}
        imagePullPolicy: IfNotPresent
        command: [sh, -c, 'while true; do date; sleep 5; done']
        resources: {{ limits: {{ cpu: 50m, memory: 16Mi }} }}
"
    )
}

fn static_pod() -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: static-web
  namespace: default
  labels: {{ app: static-web }}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: web
    image: {AGNHOST}
    imagePullPolicy: IfNotPresent
    args: [netexec, --http-port=8081]
    readinessProbe: {{ httpGet: {{ path: /healthz, port: 8081 }}, periodSeconds: 1 }}
"
    )
}

/// The RBAC docs/migrate.md gives `cri-bridge move`, bound to a ServiceAccount, and a kubeconfig
/// with its token.
fn mover_kubeconfig(cluster: &TestCluster) -> PathBuf {
    let guide = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/migrate.md")).unwrap();
    let start = guide.find("kind: ClusterRole").expect("docs/migrate.md gives the ClusterRole");
    let role = &guide[guide[..start].rfind("```yaml").unwrap() + 7..start + guide[start..].find("```").unwrap()];
    cluster.apply(role);
    cluster.apply(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: { name: cri-bridge-move, namespace: kube-system }\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: { name: cri-bridge-move }\n\
         roleRef: { apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cri-bridge-move }\n\
         subjects: [{ kind: ServiceAccount, name: cri-bridge-move, namespace: kube-system }]\n",
    );
    let token = cluster.kubectl_ok(&["-n", "kube-system", "create", "token", "cri-bridge-move", "--duration=2h"]);
    let ca = cluster.dir.join("control-plane/pki/ca.crt");
    let path = cluster.dir.join("mover.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{ server: {}, certificate-authority: {} }}\n\
             users:\n- name: mover\n  user: {{ token: {} }}\ncontexts:\n- name: c\n  context: {{ cluster: c, user: mover }}\n\
             current-context: c\n",
            cluster_support::API_SERVER,
            ca.display(),
            token.trim()
        ),
    )
    .unwrap();
    path
}

/// `cri-bridge move --from docker` on node-a, its output teed to `log` and read line by line.
struct Mover {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Mover {
    fn start(cluster: &TestCluster, kubeconfig: &Path, log: &Path) -> Mover {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
            .args(["move", "--from", "docker", "--node", "node-a", "--ready-timeout", "120s"])
            .arg("--config")
            .arg(&cluster.a.bridge_config)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--manifests")
            .arg(&cluster.a.manifests)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let (lines, log) = (lines.clone(), log.to_path_buf());
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    use std::io::Write;
                    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
                    let _ = writeln!(file, "{line}");
                    lines.lock().unwrap().push(line);
                }
            });
        }
        Mover { child, lines }
    }

    fn said(&self, text: &str) -> bool {
        self.lines.lock().unwrap().iter().any(|l| l.contains(text))
    }

    fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits up to `limit` for the line `text`.
    fn wait_for(&mut self, text: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.said(text) {
            if let Ok(Some(status)) = self.child.try_wait() {
                std::thread::sleep(Duration::from_millis(200));
                panic!("cri-bridge move exited ({status}) before saying {text:?}:\n{}", self.output());
            }
            assert!(Instant::now() < deadline, "cri-bridge move never said {text:?}:\n{}", self.output());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait(mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                std::thread::sleep(Duration::from_millis(200));
                return (status, self.output());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("cri-bridge move still running after {limit:?}:\n{}", self.output());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(200));
        self.output()
    }
}

/// A few hundred requests a second to the Service's NodePort on 127.0.0.1 (kube-proxy takes each
/// new connection to a Ready pod), each a new connection; and, every 100 ms, the Ready replicas
/// of `web` and whether node-a is cordoned.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    min_ready: Arc<AtomicUsize>,
    cordoned: Arc<AtomicBool>,
    unserved: Arc<Mutex<Duration>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    async fn start(client: kube::Client, per_second: u64) -> Load {
        let load = Load {
            stop: Arc::new(AtomicBool::new(false)),
            sent: Arc::new(AtomicUsize::new(0)),
            failed: Arc::new(AtomicUsize::new(0)),
            failures: Arc::new(Mutex::new(Vec::new())),
            min_ready: Arc::new(AtomicUsize::new(usize::MAX)),
            cordoned: Arc::new(AtomicBool::new(false)),
            unserved: Arc::new(Mutex::new(Duration::ZERO)),
            tasks: Vec::new(),
        };
        let mut tasks = Vec::new();
        let (stop, sent, failed, failures) =
            (load.stop.clone(), load.sent.clone(), load.failed.clone(), load.failures.clone());
        let started = Instant::now();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / per_second));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let (sent, failed, failures) = (sent.clone(), failed.clone(), failures.clone());
                tokio::spawn(async move {
                    sent.fetch_add(1, Ordering::Relaxed);
                    if let Err(why) = request().await {
                        failed.fetch_add(1, Ordering::Relaxed);
                        let mut failures = failures.lock().unwrap();
                        if failures.len() < 20 {
                            failures.push(format!("{why} at {:.2}s", started.elapsed().as_secs_f64()));
                        }
                    }
                });
            }
        }));
        let (stop, min_ready, cordoned, unserved) =
            (load.stop.clone(), load.min_ready.clone(), load.cordoned.clone(), load.unserved.clone());
        tasks.push(tokio::spawn(async move {
            let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client.clone(), "default");
            let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
            let params = kube::api::ListParams::default().labels("app=web");
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                if let Ok(list) = pods.list(&params).await {
                    let ready =
                        list.items.iter().filter(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none()).count();
                    min_ready.fetch_min(ready, Ordering::Relaxed);
                }
                if let Ok(node) = nodes.get("node-a").await {
                    let unschedulable = node.spec.and_then(|s| s.unschedulable).unwrap_or(false);
                    if unschedulable {
                        cordoned.store(true, Ordering::Relaxed);
                        *unserved.lock().unwrap() += Duration::from_millis(100);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100).saturating_sub(started.elapsed())).await;
            }
        }));
        Load { tasks, ..load }
    }

    async fn stop(self) -> LoadFigures {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = task.await;
        }
        // The requests in flight end within their timeout.
        tokio::time::sleep(Duration::from_secs(3)).await;
        LoadFigures {
            sent: self.sent.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            failures: self.failures.lock().unwrap().clone(),
            min_ready: self.min_ready.load(Ordering::Relaxed),
            cordoned: self.cordoned.load(Ordering::Relaxed),
            unserved: *self.unserved.lock().unwrap(),
        }
    }
}

#[derive(Debug)]
struct LoadFigures {
    sent: usize,
    failed: usize,
    failures: Vec<String>,
    min_ready: usize,
    cordoned: bool,
    /// How long node-a was cordoned (serving no new pod), in 100 ms samples.
    unserved: Duration,
}

fn is_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// One HTTP/1.0 request on a new connection: `GET /hostname`, answered 200 within 2 s.
async fn request() -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream =
            tokio::net::TcpStream::connect(("127.0.0.1", NODE_PORT)).await.map_err(|e| format!("connect: {e}"))?;
        stream.write_all(b"GET /hostname HTTP/1.0\r\n\r\n").await.map_err(|e| format!("write: {e}"))?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.map_err(|e| format!("read: {e}"))?;
        let text = String::from_utf8_lossy(&answer);
        match text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200") {
            true => Ok(()),
            false => Err(format!("answer: {:?}", text.chars().take(80).collect::<String>())),
        }
    };
    tokio::time::timeout(Duration::from_secs(2), exchange).await.map_err(|_| "no answer in 2 s".to_string())?
}

/// Each pod's UID and its containers' restart counts, by `namespace/name`.
fn pods_now(cluster: &TestCluster) -> BTreeMap<String, (String, String, String)> {
    let jsonpath = "{range .items[*]}{.metadata.namespace}/{.metadata.name} {.metadata.uid} {.spec.nodeName} \
                    {.status.containerStatuses[*].restartCount}{\"\\n\"}{end}";
    cluster
        .kubectl_ok(&["get", "pods", "-A", "-o", &format!("jsonpath={jsonpath}")])
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next()?.to_string();
            let uid = parts.next()?.to_string();
            let node = parts.next().unwrap_or_default().to_string();
            Some((name, (uid, node, parts.collect::<Vec<_>>().join(","))))
        })
        .collect()
}

/// The backends of node-a's cri-bridge and what each holds (`cri-bridge backends --json`).
fn holdings(cluster: &TestCluster) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_cri-bridge"))
        .args(["backends", "--json", "--config"])
        .arg(&cluster.a.bridge_config)
        .output()
        .unwrap();
    assert!(output.status.success(), "cri-bridge backends: {output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The backend holding a ready sandbox of pod UID `uid` on node-a.
fn backend_of(held: &serde_json::Value, uid: &str) -> Option<String> {
    held.as_array()?.iter().find_map(|b| {
        let holds = b["sandboxes"].as_array()?.iter().any(|s| s["uid"] == uid && s["ready"] == true);
        holds.then(|| b["name"].as_str().unwrap_or_default().to_string())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_moves_off_docker_with_no_failed_request_and_no_cordon() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/cluster/move");
    let _ = std::fs::remove_dir_all(&dir);
    let mut cluster = TestCluster::start(&dir).await;
    let results = dir.parent().unwrap().join("results.txt");
    let mut report = String::new();

    // 1. The workload, all of it on node-a's Docker: node-b cordoned while it is placed.
    std::fs::write(cluster.a.manifests.join("static-web.yaml"), static_pod()).unwrap();
    cluster.kubectl_ok(&["cordon", "node-b"]);
    cluster.apply(&workload());
    cluster.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=180s"]);
    cluster.kubectl_ok(&["rollout", "status", "daemonset/agent", "--timeout=180s"]);
    cluster.kubectl_ok(&["wait", "--for=condition=Ready", "--timeout=120s", "pod/static-web-node-a"]);
    cluster.kubectl_ok(&["uncordon", "node-b"]);
    let held = holdings(&cluster);
    let before = pods_now(&cluster);
    let on_a: Vec<&String> = before.iter().filter(|(_, (_, node, _))| node == "node-a").map(|(n, _)| n).collect();
    assert_eq!(on_a.len(), 6, "4 web, the DaemonSet's, the static pod on node-a: {before:?}");
    for (name, (uid, node, _)) in &before {
        if node == "node-a" && !name.contains("static-web") {
            assert_eq!(
                backend_of(&held, uid).as_deref(),
                Some("default"),
                "{name} on Docker (the one backend): {held}"
            );
        }
    }

    let client = cri_bridge::move_pods::cluster::connect(Some(&cluster.kubeconfig)).await.unwrap();
    serving(&cluster).await;
    // The load runs in three windows: steps 2 and 3; the API server's outage (4), reported but
    // not held to 0: a pod evicted just before the API server goes away stops serving while
    // kube-proxy cannot hear that it left the Service; and the run that finishes.
    let load = Load::start(client.clone(), 300).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // 2. Step 3: containerd the default, Docker a backend; a restart of cri-bridge.
    let routed = cluster.a.routed_config();
    cluster.a.restart_bridge(&routed).await;
    let kubeconfig = mover_kubeconfig(&cluster);
    let log = dir.join("move.log");

    // 3. A budget that allows nothing: move waits and says why, and evicts no pod it covers.
    cluster.kubectl_ok(&["patch", "pdb", "web", "--type=merge", "-p", "{\"spec\":{\"minAvailable\":4}}"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let blocked = tokio::task::block_in_place(|| {
        let mut mover = Mover::start(&cluster, &kubeconfig, &log);
        // The DaemonSet's pod goes first (its name sorts first); its replacement is waited for.
        mover.wait_for("waiting to evict", Duration::from_secs(180));
        std::thread::sleep(Duration::from_secs(12));
        mover.stop()
    });
    // The DaemonSet's pod, which no budget covers, may go; no pod of `web` does.
    assert!(blocked.contains("disruption budget") && blocked.contains("web:"), "{blocked}");
    assert!(!blocked.contains("evicted default/web-"), "{blocked}");
    let unchanged = pods_now(&cluster);
    for name in on_a.iter().filter(|n| n.starts_with("default/web-")) {
        assert_eq!(unchanged.get(*name).map(|p| &p.0), before.get(*name).map(|p| &p.0), "{name} untouched");
    }
    cluster.kubectl_ok(&["patch", "pdb", "web", "--type=merge", "-p", "{\"spec\":{\"minAvailable\":3}}"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_outage = load.stop().await;

    // 4. The API server away while move waits for a replacement: it stops, and says so.
    let load = Load::start(client.clone(), 300).await;
    let control = dir.join("control-plane");
    let ((status, first_run), api_server) = tokio::task::block_in_place(|| {
        let mut mover = Mover::start(&cluster, &kubeconfig, &log);
        mover.wait_for("evicted ", Duration::from_secs(120));
        let api_server = kill_api_server(&control);
        let ended = mover.wait(Duration::from_secs(120));
        (ended, restart_api_server(&control, api_server))
    });
    assert!(!status.success(), "{first_run}");
    assert!(first_run.contains("the API server did not answer"), "{first_run}");
    let held = holdings(&cluster);
    let docker_left = held.as_array().unwrap().iter().find(|b| b["name"] == "docker").unwrap()["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["ready"] == true)
        .count();
    assert!(docker_left >= 4, "the pods not moved run on, on Docker: {held}");
    let outage = load.stop().await;
    serving(&cluster).await;

    // Run again: it goes on, and finishes.
    let load = Load::start(client.clone(), 300).await;
    let started = Instant::now();
    let (status, second_run) =
        tokio::task::block_in_place(|| Mover::start(&cluster, &kubeconfig, &log).wait(Duration::from_secs(600)));
    let move_took = started.elapsed();
    assert!(status.success(), "{second_run}");
    assert!(second_run.contains("backend docker holds no sandbox"), "{second_run}");
    let figures = load.stop().await;

    // What the move left: Docker empty, every pod of node-a on containerd, nothing else restarted.
    let held = holdings(&cluster);
    let docker = held.as_array().unwrap().iter().find(|b| b["name"] == "docker").unwrap();
    assert_eq!(docker["sandboxes"].as_array().unwrap().len(), 0, "{held}");
    let after = pods_now(&cluster);
    let mut moved_here = 0;
    for (name, (uid, node, restarts)) in &after {
        if node == "node-a" && !name.contains("static-web") {
            assert_eq!(backend_of(&held, uid).as_deref(), Some("containerd"), "{name} on containerd: {held}");
            moved_here += 1;
        }
        // The static pod is moved by a restart under its UID: its container's count is 1.
        let expected = if name.contains("static-web") { "1" } else { "0" };
        assert!(restarts.split(',').all(|r| r == expected || r.is_empty()), "{name} restarted: {restarts}");
        if before.contains_key(name) && !on_a.contains(&name) {
            assert_eq!(&before[name].0, uid, "{name} (not on Docker) untouched");
        }
    }
    // The static pod runs under its config hash, not its mirror's UID.
    let hash = cluster.kubectl_ok(&[
        "get",
        "pod",
        "static-web-node-a",
        "-o",
        "jsonpath={.metadata.annotations.kubernetes\\.io/config\\.mirror}",
    ]);
    assert_eq!(backend_of(&held, hash.trim()).as_deref(), Some("containerd"), "the static pod on containerd: {held}");
    let agents = after.iter().filter(|(n, (_, node, _))| n.starts_with("default/agent-") && node == "node-a").count();
    assert_eq!(agents, 1, "the DaemonSet's pod on node-a, recreated: {after:?}");
    for (window, figures) in [("steps 2 and 3", &before_outage), ("the run that finished", &figures)] {
        assert_eq!(figures.failed, 0, "{window}: failed requests, the first ones: {:?}", figures.failures);
        assert!(figures.min_ready >= 3, "{window}: fewer than 3 Ready replicas: {figures:?}");
        assert!(!figures.cordoned, "{window}: node-a was cordoned: {figures:?}");
    }
    assert!(!outage.cordoned, "the API server's outage: node-a was cordoned: {outage:?}");
    for (window, figures) in [("steps 2 and 3", &before_outage), ("API server outage", &outage), ("move", &figures)] {
        report.push_str(&format!(
            "cri-bridge move, {window}: {} requests, {} failed {:?}, min Ready {}, node-a cordoned {:?}\n",
            figures.sent,
            figures.failed,
            figures.failures.first(),
            figures.min_ready,
            figures.unserved,
        ));
    }
    report.push_str(&format!(
        "cri-bridge move: {moved_here} pods on node-a's containerd after; the run that finished took {:.1}s\n",
        move_took.as_secs_f64()
    ));

    // 5. The same cluster, load and budget with kubectl drain, from the same placement: the 4
    // replicas on node-a (placed there with node-b cordoned, as in 1).
    cluster.kubectl_ok(&["cordon", "node-b"]);
    cluster.kubectl_ok(&["rollout", "restart", "deployment/web"]);
    cluster.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=180s"]);
    cluster.kubectl_ok(&["uncordon", "node-b"]);
    // The old replicas finish terminating (their 5 s of delayed shutdown).
    let web = |pods: &BTreeMap<String, (String, String, String)>| {
        pods.iter()
            .filter(|(n, _)| n.starts_with("default/web-"))
            .map(|(_, (_, node, _))| node.clone())
            .collect::<Vec<_>>()
    };
    cluster.wait_for("the old replicas to be gone", Duration::from_secs(60), || web(&pods_now(&cluster)).len() == 4);
    let placed = web(&pods_now(&cluster));
    assert!(placed.iter().all(|node| node == "node-a"), "{placed:?}");
    serving(&cluster).await;
    let load = Load::start(client.clone(), 300).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = Instant::now();
    let drained = cluster
        .kubectl(&["drain", "node-a", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=600s"])
        .output()
        .unwrap();
    let drain_took = started.elapsed();
    assert!(drained.status.success(), "kubectl drain: {drained:?}");
    cluster.kubectl_ok(&["uncordon", "node-a"]);
    let figures = load.stop().await;
    report.push_str(&format!(
        "kubectl drain: {} requests, {} failed, min Ready {}, node-a cordoned {:?}, drain took {:.1}s\n",
        figures.sent,
        figures.failed,
        figures.min_ready,
        figures.unserved,
        drain_took.as_secs_f64()
    ));
    std::fs::write(&results, &report).unwrap();
    eprintln!("{report}");
    // tools/control-plane.sh down stops the API server this test restarted, by its pid file.
    drop(cluster);
    drop(api_server);
}

/// Waits until the Service answers 20 requests in a row: kube-proxy has its rules.
async fn serving(cluster: &TestCluster) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut in_a_row = 0;
    while in_a_row < 20 {
        in_a_row = if request().await.is_ok() { in_a_row + 1 } else { 0 };
        if Instant::now() > deadline {
            panic!("the Service does not answer on 127.0.0.1:{NODE_PORT}; kube-proxy:\n{}", tail_of(&cluster.dir));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn tail_of(dir: &Path) -> String {
    node_e2e_support::tail(&dir.join("kube-proxy.log"), 20)
}

/// Kills the API server (SIGKILL: as a crash); what restarts it, the command line it ran with.
fn kill_api_server(control: &Path) -> Vec<String> {
    let pid = std::fs::read_to_string(control.join("kube-apiserver.pid")).unwrap().trim().to_string();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args: Vec<String> =
        cmdline.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    assert!(Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
    args
}

/// Starts the API server again with `args`, recording its pid where tools/control-plane.sh
/// looks, and waits until it is ready.
fn restart_api_server(control: &Path, args: Vec<String>) -> Reaped {
    let log = std::fs::OpenOptions::new().append(true).open(control.join("kube-apiserver.log")).unwrap();
    let child = Reaped(
        Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    std::fs::write(control.join("kube-apiserver.pid"), child.id().to_string()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ready = Command::new("curl")
            .args(["-sf", "-o", "/dev/null", "--cacert"])
            .arg(control.join("pki/ca.crt"))
            .arg("--cert")
            .arg(control.join("pki/admin.crt"))
            .arg("--key")
            .arg(control.join("pki/admin.key"))
            .arg(format!("{}/readyz", cluster_support::API_SERVER))
            .status()
            .is_ok_and(|s| s.success());
        if ready {
            return child;
        }
        assert!(Instant::now() < deadline, "the API server is not ready again after 120 s");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `tools/cluster.sh up`: the cluster, started in `$CLUSTER_DIR` and held until the file
/// `$CLUSTER_DIR/stop` appears (`tools/cluster.sh down`); `$CLUSTER_DIR/ready` says it is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tools/cluster.sh runs it"]
async fn hold_the_cluster_for_tools_cluster_sh() {
    let dir = PathBuf::from(std::env::var("CLUSTER_DIR").expect("CLUSTER_DIR: where the cluster keeps its files"));
    let _ = std::fs::remove_file(dir.join("stop"));
    let _ = std::fs::remove_file(dir.join("ready"));
    let cluster = TestCluster::start(&dir).await;
    std::fs::write(dir.join("ready"), format!("{}\n", cluster.kubeconfig.display())).unwrap();
    while !dir.join("stop").exists() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(cluster);
    let _ = std::fs::remove_file(dir.join("ready"));
}

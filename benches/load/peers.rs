//! The peers the load client talks to, and the processes behind them: the in-memory runtimes,
//! cri-bridge (this build's, `LOAD_BRIDGE_BIN`'s, `LOAD_COMPARE_BIN`'s), socat, nginx, and real
//! containerds (started here, `LOAD_CONTAINERDS`; or one already running, `LOAD_CONTAINERD`).

use crate::containerd::Containerd;
use crate::load_proc::{self, Child};
use crate::workload::Workload;
use crate::{CONTAINERS, CONTAINERS_ENV, SOCKET_ENV, VERSION_ENV};
use cri_bridge::CriVersion;
use std::path::{Path, PathBuf};

/// A socket the load client talks to, and the processes whose CPU time its calls cost.
pub struct Peer {
    pub name: String,
    pub socket: PathBuf,
    /// The client's protobuf package: `runtime.v1` or `runtime.v1alpha2`.
    pub package: &'static str,
    /// The peer this one is compared with.
    pub baseline: Option<usize>,
    /// The proxy process between client and runtime, if any.
    pub proxy: Option<u32>,
    pub runtime: Option<u32>,
    pub workloads: &'static [Workload],
    /// How many containers a full ListContainers returns, checked before measuring.
    pub containers: usize,
}

/// Everything the benchmark started, stopped when dropped: processes first, then the temp dir.
pub struct Setup {
    pub peers: Vec<Peer>,
    _children: Vec<Child>,
    _dir: load_proc::TempDir,
}

fn start_runtime(dir: &Path, version: CriVersion) -> (Child, PathBuf) {
    start_runtime_named(dir, version, "", CONTAINERS)
}

/// An in-memory runtime of `version` holding `containers`, on `runtime-<version><name>.sock`.
fn start_runtime_named(dir: &Path, version: CriVersion, name: &str, containers: usize) -> (Child, PathBuf) {
    let socket = dir.join(format!("runtime-{}{name}.sock", version.as_str()));
    let envs = [
        (SOCKET_ENV, socket.display().to_string()),
        (VERSION_ENV, version.as_str().to_string()),
        (CONTAINERS_ENV, containers.to_string()),
    ];
    let mut child = Child::runtime(&format!("in-memory runtime {}{name}", version.as_str()), &envs);
    child.wait_for_socket(&socket);
    (child, socket)
}

/// cri-bridge listening on `dir/<label>.sock`, forwarding to `backend`.
fn start_bridge(dir: &Path, label: &str, backend: &Path, backend_version: Option<&str>) -> (Child, PathBuf) {
    // `LOAD_BRIDGE_BIN`: another cri-bridge binary (an older build, to compare with).
    let binary = std::env::var("LOAD_BRIDGE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_cri-bridge").to_string());
    start_bridge_binary(&binary, dir, label, backend, backend_version, &[])
}

fn start_bridge_binary(
    binary: &str,
    dir: &Path,
    label: &str,
    backend: &Path,
    backend_version: Option<&str>,
    extra: &[&str],
) -> (Child, PathBuf) {
    let socket = dir.join(format!("{label}.sock"));
    let mut args = vec![
        "serve".to_string(),
        "--listen".into(),
        socket.display().to_string(),
        "--backend".into(),
        format!("unix://{}", backend.display()),
    ];
    if let Some(version) = backend_version {
        args.extend(["--backend-version".to_string(), version.to_string()]);
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    let log = dir.join(format!("{label}.log"));
    let mut child = Child::guarded(&format!("cri-bridge {label}"), binary, &args, &log);
    child.wait_for_socket(&socket);
    (child, socket)
}

/// cri-bridge listening on `dir/<label>.sock` with the backends its config (`args`) names.
fn start_bridge_routed(binary: &str, dir: &Path, label: &str, args: &[&str]) -> (Child, PathBuf) {
    let socket = dir.join(format!("{label}.sock"));
    let mut all = vec!["serve".to_string(), "--listen".into(), socket.display().to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    let log = dir.join(format!("{label}.log"));
    let mut child = Child::guarded(&format!("cri-bridge {label}"), binary, &all, &log);
    child.wait_for_socket(&socket);
    (child, socket)
}

fn socat_installed() -> bool {
    std::process::Command::new("socat").arg("-V").output().is_ok_and(|o| o.status.success())
}

fn nginx_installed() -> bool {
    std::process::Command::new("nginx").arg("-v").output().is_ok_and(|o| o.status.success())
}

/// Debian's nginx listening on `dir/<label>.sock` (HTTP/2), passing each call to `backend` with
/// `grpc_pass` over kept-alive upstream connections: the L7 proxy an operator would pick. One
/// process (`master_process off`), so that its CPU time is all in one pid; no request limit on a
/// connection (nginx's default of 1,000 would close the benchmark's one connection).
fn start_nginx(dir: &Path, label: &str, backend: &Path) -> (Child, PathBuf) {
    let socket = dir.join(format!("{label}.sock"));
    let prefix = dir.join(label);
    std::fs::create_dir_all(&prefix).expect("the nginx prefix");
    let config = format!(
        "daemon off;\nmaster_process off;\nuser root;\nworker_processes 1;\npid {prefix}/nginx.pid;\n\
         error_log {prefix}/error.log warn;\nevents {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 4294967295;\n  keepalive_timeout 3600s;\n\
           client_body_temp_path {prefix}/body;\n  proxy_temp_path {prefix}/proxy;\n\
           fastcgi_temp_path {prefix}/fastcgi;\n  uwsgi_temp_path {prefix}/uwsgi;\n  scgi_temp_path {prefix}/scgi;\n\
           http2_max_concurrent_streams 1024;\n\
           upstream runtime {{ server unix:{backend}; keepalive 64; keepalive_requests 4294967295; }}\n\
           server {{\n    listen unix:{socket} http2;\n    location / {{ grpc_pass grpc://runtime; }}\n  }}\n}}\n",
        prefix = prefix.display(),
        backend = backend.display(),
        socket = socket.display(),
    );
    let conf = prefix.join("nginx.conf");
    std::fs::write(&conf, config).expect("the nginx config");
    let args = ["-p".to_string(), prefix.display().to_string(), "-c".to_string(), conf.display().to_string()];
    let mut child = Child::guarded(&format!("nginx {label}"), "nginx", &args, &dir.join(format!("{label}.log")));
    child.wait_for_socket(&socket);
    (child, socket)
}

/// socat listening on `dir/<label>.sock`, relaying each connection to `backend`.
fn start_socat(dir: &Path, label: &str, backend: &Path) -> (Child, PathBuf) {
    let socket = dir.join(format!("{label}.sock"));
    let args = [format!("UNIX-LISTEN:{},fork", socket.display()), format!("UNIX-CONNECT:{}", backend.display())];
    let mut child = Child::guarded(&format!("socat {label}"), "socat", &args, &dir.join(format!("{label}.log")));
    child.wait_for_socket(&socket);
    (child, socket)
}

pub fn start(containerd: Option<PathBuf>, containerds: Vec<Containerd>) -> Setup {
    let dir = load_proc::TempDir::new("cri-bridge-load");
    let mut children = Vec::new();
    let mut runtimes = Vec::new();
    let mut peers = Vec::new();
    let mut add = |peer: Peer| {
        peers.push(peer);
        peers.len() - 1
    };
    let peer = |name: &str, socket: PathBuf, baseline: Option<usize>, proxy: Option<u32>, runtime: Option<u32>| Peer {
        name: name.to_string(),
        socket,
        package: "runtime.v1",
        baseline,
        proxy,
        runtime,
        workloads: Workload::selected(),
        containers: CONTAINERS,
    };

    let (v1_runtime, v1_socket) = start_runtime(&dir.0, CriVersion::V1);
    let (v1alpha2_runtime, v1alpha2_socket) = start_runtime(&dir.0, CriVersion::V1alpha2);
    // This build's passthrough bridge also serves a read-only socket (issue 38): the same calls
    // judged by a policy, against the main socket's, in the same run. (`LOAD_BRIDGE_BIN` may be
    // a build from before scoped sockets.)
    let read_only_socket = dir.0.join("bridge-read-only.sock");
    let scoped_config = dir.0.join("bridge-passthrough.yaml");
    let endpoints = format!("endpoints:\n  - path: {}\n    policy: read-only\n", read_only_socket.display());
    std::fs::write(&scoped_config, endpoints).expect("the passthrough bridge's config");
    let other = std::env::var("LOAD_BRIDGE_BIN").ok();
    let binary = other.clone().unwrap_or_else(|| env!("CARGO_BIN_EXE_cri-bridge").to_string());
    let config_args = match other {
        Some(_) => vec![],
        None => vec!["--config", scoped_config.to_str().expect("a UTF-8 temp path")],
    };
    let (passthrough, passthrough_socket) =
        start_bridge_binary(&binary, &dir.0, "bridge-passthrough", &v1_socket, None, &config_args);
    let (translating, translating_socket) = start_bridge(&dir.0, "bridge-translating", &v1alpha2_socket, None);
    let (v1_pid, v1alpha2_pid) = (Some(v1_runtime.pid), Some(v1alpha2_runtime.pid));

    let direct_v1 = add(peer("direct v1", v1_socket.clone(), None, None, v1_pid));
    let one_backend =
        add(peer("passthrough v1->v1", passthrough_socket, Some(direct_v1), Some(passthrough.pid), v1_pid));
    if config_args.is_empty() {
        eprintln!("LOAD_BRIDGE_BIN is set: no read-only socket and no second backend are measured");
    } else {
        let read_only = peer("passthrough v1->v1, read-only socket", read_only_socket, Some(direct_v1), None, v1_pid);
        add(Peer { proxy: Some(passthrough.pid), ..read_only });
        // Two backends (issue 42): the same runtime as the default, a second one beside it that
        // holds no container (as the old runtime at the end of a move); compared with the one
        // backend above. Version goes to the default; ListContainers to both, merged.
        let (second, second_socket) = start_runtime_named(&dir.0, CriVersion::V1, "-second", 0);
        let routed_config = dir.0.join("bridge-routed.yaml");
        let routes = format!(
            "backends:\n  - name: first\n    endpoint: unix://{}\n  - name: second\n    endpoint: unix://{}\nroutes:\n  default: first\n",
            v1_socket.display(),
            second_socket.display()
        );
        std::fs::write(&routed_config, routes).expect("the routed bridge's config");
        let config = ["--config", routed_config.to_str().expect("a UTF-8 temp path")];
        let (routed, routed_socket) = start_bridge_routed(&binary, &dir.0, "bridge-routed", &config);
        add(peer("passthrough v1->v1, two backends", routed_socket, Some(one_backend), Some(routed.pid), v1_pid));
        children.extend([routed, second]);
    }
    // The translating peer's baseline is pushed right after it.
    let translating_index =
        add(peer("translating v1->v1alpha2", translating_socket, None, Some(translating.pid), v1alpha2_pid));
    let direct_v1alpha2 = add(Peer {
        package: "runtime.v1alpha2",
        ..peer("direct v1alpha2", v1alpha2_socket.clone(), None, None, v1alpha2_pid)
    });
    peers[translating_index].baseline = Some(direct_v1alpha2);
    children.extend([passthrough, translating]);
    // `LOAD_COMPARE_BIN`: the same two proxies from another build, measured in the same run.
    if let Ok(binary) = std::env::var("LOAD_COMPARE_BIN") {
        let (old_passthrough, old_passthrough_socket) =
            start_bridge_binary(&binary, &dir.0, "compare-passthrough", &v1_socket, None, &[]);
        let (old_translating, old_translating_socket) =
            start_bridge_binary(&binary, &dir.0, "compare-translating", &v1alpha2_socket, None, &[]);
        peers.push(peer(
            "compare passthrough v1->v1",
            old_passthrough_socket,
            Some(direct_v1),
            Some(old_passthrough.pid),
            v1_pid,
        ));
        peers.push(peer(
            "compare translating v1->v1alpha2",
            old_translating_socket,
            Some(direct_v1alpha2),
            Some(old_translating.pid),
            v1alpha2_pid,
        ));
        children.extend([old_passthrough, old_translating]);
    }
    if socat_installed() {
        let (socat, socat_socket) = start_socat(&dir.0, "socat", &v1_socket);
        peers.push(peer("socat v1", socat_socket, Some(direct_v1), Some(socat.pid), v1_pid));
        children.push(socat);
    } else {
        eprintln!("socat is not installed (e.g. apt-get install socat): skipping the `socat v1` peer");
    }
    if nginx_installed() {
        let (nginx, nginx_socket) = start_nginx(&dir.0, "nginx", &v1_socket);
        peers.push(peer("nginx grpc_pass v1", nginx_socket, Some(direct_v1), Some(nginx.pid), v1_pid));
        children.push(nginx);
    } else {
        eprintln!("nginx is not installed (e.g. apt-get install nginx): skipping the `nginx grpc_pass v1` peer");
    }

    if let Some(socket) = containerd {
        add_containerd_peers(&dir.0, "containerd", &socket, None, true, &mut peers, &mut children);
    }
    for containerd in containerds {
        let name = containerd.name();
        let (runtime, socket) = containerd.start(&dir.0, &name.replace([' ', '.'], "-"));
        let pid = Some(runtime.pid);
        add_containerd_peers(&dir.0, &name, &socket, pid, containerd.serves_v1alpha2, &mut peers, &mut children);
        // Dropped after the proxies in front of it.
        runtimes.push(runtime);
    }
    children.extend(runtimes);
    children.extend([v1_runtime, v1alpha2_runtime]);
    Setup { peers, _children: children, _dir: dir }
}

/// A real containerd at `socket` (`runtime`: its pid, when it is our child): direct, through
/// cri-bridge passing through and (if it serves v1alpha2) translating, through socat and nginx.
fn add_containerd_peers(
    dir: &Path,
    name: &str,
    socket: &Path,
    runtime: Option<u32>,
    serves_v1alpha2: bool,
    peers: &mut Vec<Peer>,
    children: &mut Vec<Child>,
) {
    let direct = peers.len();
    let label = name.replace([' ', '.'], "-");
    let peer = |peer_name: &str, socket: PathBuf, baseline: Option<usize>, proxy: Option<u32>| Peer {
        name: format!("{name} {peer_name}"),
        socket,
        package: "runtime.v1",
        baseline,
        proxy,
        runtime,
        workloads: Workload::VERSION_ONLY,
        containers: 0,
    };
    peers.push(peer("direct v1", socket.to_path_buf(), None, None));
    let (passthrough, passthrough_socket) = start_bridge(dir, &format!("{label}-passthrough"), socket, Some("v1"));
    peers.push(peer("passthrough v1->v1", passthrough_socket, Some(direct), Some(passthrough.pid)));
    children.push(passthrough);
    // `LOAD_COMPARE_BIN`: another build's passthrough in front of the same containerd.
    if let Ok(binary) = std::env::var("LOAD_COMPARE_BIN") {
        let label = format!("{label}-compare-passthrough");
        let (compare, compare_socket) = start_bridge_binary(&binary, dir, &label, socket, Some("v1"), &[]);
        peers.push(peer("compare passthrough v1->v1", compare_socket, Some(direct), Some(compare.pid)));
        children.push(compare);
    }
    if serves_v1alpha2 {
        let (translating, translating_socket) =
            start_bridge(dir, &format!("{label}-translating"), socket, Some("v1alpha2"));
        peers.push(peer("translating v1->v1alpha2", translating_socket, Some(direct), Some(translating.pid)));
        children.push(translating);
    }
    if socat_installed() {
        let (socat, socat_socket) = start_socat(dir, &format!("{label}-socat"), socket);
        peers.push(peer("socat v1", socat_socket, Some(direct), Some(socat.pid)));
        children.push(socat);
    }
    if nginx_installed() {
        let (nginx, nginx_socket) = start_nginx(dir, &format!("{label}-nginx"), socket);
        peers.push(peer("nginx grpc_pass v1", nginx_socket, Some(direct), Some(nginx.pid)));
        children.push(nginx);
    }
}

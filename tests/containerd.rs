//! cri-bridge against real containerd builds running real containers: 1.6.20 and 1.7.24 (CRI v1
//! and v1alpha2, their v1alpha2 being their v1 re-decoded) and 1.4.13 (v1alpha2 only, the genuine
//! old CRI). Every frontend version's typed client drives a pod and container lifecycle, image
//! pull included, through cri-bridge, with the backend version discovered (`auto`: v1 on 1.6 and
//! 1.7, v1alpha2 on 1.4) and pinned to v1alpha2; then what the conversions mean is checked inside
//! the running containers (namespaces, seccomp), and refused requests are shown never to reach
//! containerd, on 1.6 and on 1.4.
//!
//! Needs root, containerd, runc and busybox-static (`bash .ci/run` installs them), and the 1.4.13
//! and 1.7.24 builds unpacked by `tools/debian-unpack.sh`. Each test starts its own containerd in
//! a temporary directory, with a registry of its own (see `containerd_support`).

mod common;
mod containerd_support;

use containerd_support::{host_network_pod, Build, Containerd, BUSYBOX_IMAGE};
use cri_bridge::api::{v1, v1alpha1, v1alpha2};
use cri_bridge::CriVersion::{self, V1alpha2};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;
use tonic::{Code, Status};

/// The rows of the report, in lifecycle order.
const RPCS: &[&str] = &[
    "Version",
    "Status",
    "RuntimeConfig (v1 only)",
    "ImageFsInfo",
    "ListImages",
    "ImageStatus",
    "PullImage",
    "RunPodSandbox",
    "PodSandboxStatus",
    "ListPodSandbox",
    "CreateContainer",
    "StartContainer",
    "ContainerStatus",
    "ExecSync (echo hello)",
    "ExecSync (exit 3)",
    "ListContainers (by pod)",
    "ListContainers (by state)",
    "ContainerStats",
    "ListContainerStats",
    "UpdateContainerResources",
    "ReopenContainerLog",
    "Exec",
    "Attach",
    "PortForward",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
    "RemoveImage",
];

/// The backends each frontend is tried against: discovered, and pinned to the older version.
const BACKENDS: [(&str, Option<CriVersion>); 2] = [("auto", None), ("pinned v1alpha2", Some(V1alpha2))];

/// The `BACKENDS` through which cri-bridge speaks v1alpha2 to `build`: pinned everywhere, and
/// `auto` where v1alpha2 is the newest version the build serves (1.4).
fn v1alpha2_backends(build: Build) -> Vec<(&'static str, Option<CriVersion>)> {
    BACKENDS.into_iter().filter(|(_, pinned)| pinned.unwrap_or(build.served()[0]) == V1alpha2).collect()
}

#[derive(Clone, Debug)]
enum Cell {
    Pass,
    Fail(String),
    NotApplicable(&'static str),
}

/// Pass/fail of every (frontend → backend) pair × RPC.
#[derive(Default)]
struct Table {
    columns: Vec<String>,
    cells: BTreeMap<(usize, usize), Cell>,
}

impl Table {
    fn column(&mut self, name: String) -> usize {
        self.columns.push(name);
        self.columns.len() - 1
    }

    fn row(rpc: &str) -> usize {
        RPCS.iter().position(|r| *r == rpc).unwrap_or_else(|| panic!("{rpc} is not a row of the report"))
    }

    fn set(&mut self, column: usize, rpc: &str, cell: Cell) {
        if let Cell::Fail(why) = &cell {
            eprintln!("[{}] {rpc} FAILED: {why}", self.columns[column]);
        }
        self.cells.insert((column, Table::row(rpc)), cell);
    }

    /// Records a call's outcome (the runtime's own status on error), then `check` on its answer.
    fn record<T>(
        &mut self,
        column: usize,
        rpc: &str,
        result: Result<tonic::Response<T>, Status>,
        check: impl FnOnce(&T) -> Result<(), String>,
    ) -> Option<T> {
        match result {
            Ok(response) => {
                let response = response.into_inner();
                match check(&response) {
                    Ok(()) => self.set(column, rpc, Cell::Pass),
                    Err(why) => self.set(column, rpc, Cell::Fail(format!("answered, but {why}"))),
                }
                Some(response)
            }
            Err(status) => {
                self.set(column, rpc, Cell::Fail(describe(&status)));
                None
            }
        }
    }

    fn render(&self) -> String {
        // Widths in characters: the column names hold a multi-byte arrow.
        let width = RPCS.iter().map(|r| r.len()).max().unwrap_or(0);
        let widths: Vec<usize> = self.columns.iter().map(|c| c.chars().count().max("not reached".len())).collect();
        let mut out = format!("| {:width$} |", "RPC");
        for (column, w) in self.columns.iter().zip(&widths) {
            out += &format!(" {column:w$} |");
        }
        out += &format!("\n|{}|", "-".repeat(width + 2));
        for w in &widths {
            out += &format!("{}|", "-".repeat(w + 2));
        }
        for (row, rpc) in RPCS.iter().enumerate() {
            out += &format!("\n| {rpc:width$} |");
            for (c, w) in widths.iter().enumerate() {
                let text = match self.cells.get(&(c, row)) {
                    Some(Cell::Pass) => "pass",
                    Some(Cell::Fail(_)) => "FAIL",
                    Some(Cell::NotApplicable(why)) => why,
                    None => "not reached",
                };
                out += &format!(" {text:w$} |");
            }
        }
        out
    }

    /// Every cell that is neither pass nor n/a, with the reason.
    fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for (c, column) in self.columns.iter().enumerate() {
            for (row, rpc) in RPCS.iter().enumerate() {
                match self.cells.get(&(c, row)) {
                    Some(Cell::Pass) | Some(Cell::NotApplicable(_)) => {}
                    Some(Cell::Fail(why)) => failures.push(format!("{column}: {rpc}: {why}")),
                    None => failures.push(format!("{column}: {rpc}: not reached (an earlier step failed)")),
                }
            }
        }
        failures
    }
}

/// The runtime's (or cri-bridge's) status as it came back: code and message.
fn describe(status: &Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

/// Checks for `Table::record`: `ensure!(condition, "what was wrong {}", ...)`.
macro_rules! ensure {
    ($cond:expr, $($why:tt)+) => {
        if $cond { Ok(()) } else { Err(format!($($why)+)) }
    };
}

/// ReopenContainerLog, which v1alpha1 does not have.
macro_rules! reopen_container_log {
    (v1alpha1, $table:expr, $col:expr, $rt:expr, $id:expr) => {
        $table.set($col, "ReopenContainerLog", Cell::NotApplicable("n/a in v1alpha1"))
    };
    ($v:ident, $table:expr, $col:expr, $rt:expr, $id:expr) => {{
        let request = cri_bridge::api::$v::ReopenContainerLogRequest { container_id: $id.clone() };
        $table.record($col, "ReopenContainerLog", $rt.reopen_container_log(request).await, |_| Ok(()));
    }};
}

/// RuntimeConfig, which only v1 has (a kubelet 1.28+ asks it at start and falls back on
/// UNIMPLEMENTED). No build here answers it itself (1.6.20 and 1.7.24 say UNIMPLEMENTED on v1,
/// 1.4.13 serves no v1), so cri-bridge answers for them, whichever version `$speaks` to containerd:
/// with the cgroup driver the runtime's `Status` info names (see `expected_cgroup_driver`), and
/// UNIMPLEMENTED where that info cannot tell (never a guess). tests/runtime_config.rs holds these
/// answers against containerd 2.1.9's native one and the cgroups the containers really get.
macro_rules! runtime_config {
    (v1, $table:expr, $col:expr, $rt:expr, $ctd:expr, $speaks:expr) => {{
        let speaks: CriVersion = $speaks;
        let ctd: &Containerd = $ctd;
        let expected = expected_cgroup_driver(ctd);
        let answer = $rt.runtime_config(v1::RuntimeConfigRequest {}).await;
        let cell = match (expected, answer) {
            (Some(driver), Ok(r)) if r.get_ref().linux.as_ref().map(|l| l.cgroup_driver()) == Some(driver) => {
                Cell::Pass
            }
            (None, Err(status)) if status.code() == Code::Unimplemented => Cell::Pass,
            (_, other) => Cell::Fail(format!(
                "speaking {speaks} to containerd {}: expected {}, got {:?}",
                ctd.build.runtime_version(),
                expected.map_or("UNIMPLEMENTED".to_string(), |d| format!("{d:?}")),
                other.map(|r| r.into_inner()).map_err(|s| describe(&s))
            )),
        };
        $table.set($col, "RuntimeConfig (v1 only)", cell);
    }};
    ($v:ident, $table:expr, $col:expr, $rt:expr, $ctd:expr, $speaks:expr) => {
        $table.set($col, "RuntimeConfig (v1 only)", Cell::NotApplicable(concat!("n/a in ", stringify!($v))))
    };
}

/// What RuntimeConfig through cri-bridge must name for `ctd` as the harness configures it (runc.v2
/// as the default runtime, `SystemdCgroup` per its options, `false` unless a test says otherwise),
/// `None` for UNIMPLEMENTED. 1.6.20 and 1.7.24 show the runc options in their `Status` info, so
/// cri-bridge reads the driver there (false: CGROUPFS, true: SYSTEMD). 1.4.13 prints every runc
/// options table as `{}` whatever it holds, so cri-bridge cannot know the driver and answers
/// UNIMPLEMENTED (no `emulate.runtime_config.cgroup_driver` is set here).
fn expected_cgroup_driver(ctd: &Containerd) -> Option<v1::CgroupDriver> {
    if ctd.build == Build::V1_4 && !ctd.options.legacy_v1_shim {
        None
    } else if ctd.options.systemd_cgroup {
        Some(v1::CgroupDriver::Systemd)
    } else {
        Some(v1::CgroupDriver::Cgroupfs)
    }
}

/// A whole pod and container lifecycle with the typed client of CRI version `$v` over `$channel`,
/// each RPC recorded in `$table` under a new column `$column`. `$host_ns` is that version's
/// `NamespaceOption` for the host network; `$net_is_node` tells whether a returned one says so.
/// `$removable` is an image imported for RemoveImage alone; `$speaks` is the version cri-bridge
/// speaks to containerd.
macro_rules! lifecycle {
    (
        $v:ident,
        $channel:expr,
        $ctd:expr,
        $table:expr,
        $column:expr,
        $host_ns:expr,
        $net_is_node:expr,
        $removable:expr,
        $speaks:expr
    ) => {{
        use cri_bridge::api::$v as api;
        let table: &mut Table = $table;
        let ctd: &Containerd = $ctd;
        let col = table.column($column);
        let slug: String = table.columns[col].replace(|c: char| !c.is_ascii_alphanumeric(), "-");
        let mut rt = api::runtime_service_client::RuntimeServiceClient::new($channel.clone());
        let mut img = api::image_service_client::ImageServiceClient::new($channel.clone());
        let pair_label = || [("cri-bridge.test/pair".to_string(), slug.clone())].into_iter().collect();

        async {
            let t = &mut *table;
            t.record(col, "Version", rt.version(api::VersionRequest { version: "0.1.0".into() }).await, |r| {
                ensure!(
                    r.runtime_api_version == stringify!($v)
                        && r.runtime_name == "containerd"
                        && r.runtime_version == ctd.build.runtime_version(),
                    "runtime {} {} speaking {:?}",
                    r.runtime_name,
                    r.runtime_version,
                    r.runtime_api_version
                )
            });
            t.record(col, "Status", rt.status(api::StatusRequest::default()).await, |r| {
                let conditions = r.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
                ensure!(
                    conditions.iter().any(|c| c.r#type == "RuntimeReady" && c.status),
                    "RuntimeReady is not true: {conditions:?}"
                )
            });
            runtime_config!($v, t, col, rt, ctd, $speaks);
            t.record(col, "ImageFsInfo", img.image_fs_info(api::ImageFsInfoRequest::default()).await, |r| {
                ensure!(!r.image_filesystems.is_empty(), "no image filesystem")
            });
            t.record(col, "ListImages", img.list_images(api::ListImagesRequest::default()).await, |r| {
                ensure!(
                    r.images.iter().any(|i| i.repo_tags.iter().any(|t| t == BUSYBOX_IMAGE)),
                    "{BUSYBOX_IMAGE} is not listed"
                )
            });
            let image = |name: &str| Some(api::ImageSpec { image: name.to_string(), ..Default::default() });
            let status =
                img.image_status(api::ImageStatusRequest { image: image(BUSYBOX_IMAGE), verbose: false }).await;
            t.record(col, "ImageStatus", status, |r| {
                ensure!(
                    r.image
                        .as_ref()
                        .is_some_and(|i| i.repo_tags.iter().any(|t| t == BUSYBOX_IMAGE) && !i.id.is_empty()),
                    "{BUSYBOX_IMAGE} not found: {:?}",
                    r.image
                )
            });
            // Pulled from the test registry; every pull asks it for the manifest again, so each
            // column's pull is seen there. The pod's container then runs from the pulled image
            // (from the imported busybox if the pull failed, so that the other rows still say
            // something).
            let pullable = ctd.pullable_image();
            let asked_before = ctd.registry.requests().len();
            let pull = img.pull_image(api::PullImageRequest { image: image(&pullable), ..Default::default() }).await;
            let pulled = t.record(col, "PullImage", pull, |r| {
                let asked: Vec<String> = ctd.registry.requests().split_off(asked_before);
                ensure!(
                    r.image_ref == ctd.pullable_image_id() && asked.iter().any(|line| line.contains("/manifests/")),
                    "image_ref {:?} (the registry's image is {}), the registry was asked {asked:?}",
                    r.image_ref,
                    ctd.pullable_image_id()
                )
            });
            let run_image = if pulled.is_some() { pullable.as_str() } else { BUSYBOX_IMAGE };
            if pulled.is_some() {
                let status =
                    img.image_status(api::ImageStatusRequest { image: image(run_image), verbose: false }).await;
                t.record(col, "PullImage", status, |r| {
                    let id = r.image.as_ref().map(|i| i.id.as_str());
                    ensure!(id == Some(ctd.pullable_image_id()), "then ImageStatus says {:?}", r.image)
                });
            }

            let log_directory = ctd.pod_logs.join(&slug);
            std::fs::create_dir_all(&log_directory).unwrap();
            let pod_config = api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: slug.clone(),
                    uid: format!("uid-{slug}"),
                    namespace: "cri-bridge-test".into(),
                    attempt: 0,
                }),
                log_directory: log_directory.to_str().unwrap().into(),
                labels: pair_label(),
                linux: Some(api::LinuxPodSandboxConfig {
                    security_context: Some(api::LinuxSandboxSecurityContext {
                        // No CNI here: the host network.
                        namespace_options: Some($host_ns),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let run = rt
                .run_pod_sandbox(api::RunPodSandboxRequest { config: Some(pod_config.clone()), ..Default::default() })
                .await;
            let Some(pod) = t.record(col, "RunPodSandbox", run, |_| Ok(())).map(|r| r.pod_sandbox_id) else {
                return;
            };
            let status = rt
                .pod_sandbox_status(api::PodSandboxStatusRequest { pod_sandbox_id: pod.clone(), verbose: false })
                .await;
            t.record(col, "PodSandboxStatus", status, |r| {
                let status = r.status.as_ref().ok_or("no status")?;
                let options =
                    status.linux.as_ref().and_then(|l| l.namespaces.as_ref()).and_then(|n| n.options.as_ref());
                ensure!(
                    status.state == api::PodSandboxState::SandboxReady as i32 && options.is_some_and($net_is_node),
                    "state {} namespaces {options:?}",
                    status.state
                )
            });
            let listed = rt
                .list_pod_sandbox(api::ListPodSandboxRequest {
                    filter: Some(api::PodSandboxFilter { label_selector: pair_label(), ..Default::default() }),
                })
                .await;
            t.record(col, "ListPodSandbox", listed, |r| {
                let ids: Vec<&str> = r.items.iter().map(|p| p.id.as_str()).collect();
                ensure!(ids == [pod.as_str()], "listed {ids:?}")
            });

            let create = rt
                .create_container(api::CreateContainerRequest {
                    pod_sandbox_id: pod.clone(),
                    config: Some(api::ContainerConfig {
                        metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: 0 }),
                        image: image(run_image),
                        command: vec!["sleep".into(), "3600".into()],
                        log_path: "app.log".into(),
                        labels: pair_label(),
                        linux: Some(api::LinuxContainerConfig {
                            security_context: Some(api::LinuxContainerSecurityContext {
                                namespace_options: Some($host_ns),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    sandbox_config: Some(pod_config.clone()),
                })
                .await;
            let Some(id) = t.record(col, "CreateContainer", create, |_| Ok(())).map(|r| r.container_id) else {
                return;
            };
            let start = rt.start_container(api::StartContainerRequest { container_id: id.clone() }).await;
            if t.record(col, "StartContainer", start, |_| Ok(())).is_none() {
                return;
            }
            let status =
                rt.container_status(api::ContainerStatusRequest { container_id: id.clone(), verbose: false }).await;
            t.record(col, "ContainerStatus", status, |r| {
                let state = r.status.as_ref().map(|s| s.state);
                ensure!(state == Some(api::ContainerState::ContainerRunning as i32), "state {state:?}, not RUNNING")
            });
            let exec = |cmd: &[&str]| api::ExecSyncRequest {
                container_id: id.clone(),
                cmd: cmd.iter().map(|s| s.to_string()).collect(),
                timeout: 10,
            };
            t.record(col, "ExecSync (echo hello)", rt.exec_sync(exec(&["echo", "hello"])).await, |r| {
                ensure!(
                    r.stdout == b"hello\n" && r.exit_code == 0,
                    "stdout {:?} exit {}",
                    String::from_utf8_lossy(&r.stdout),
                    r.exit_code
                )
            });
            t.record(col, "ExecSync (exit 3)", rt.exec_sync(exec(&["sh", "-c", "exit 3"])).await, |r| {
                ensure!(r.exit_code == 3, "exit code {}", r.exit_code)
            });
            let by_pod = rt
                .list_containers(api::ListContainersRequest {
                    filter: Some(api::ContainerFilter { pod_sandbox_id: pod.clone(), ..Default::default() }),
                })
                .await;
            t.record(col, "ListContainers (by pod)", by_pod, |r| {
                let ids: Vec<&str> = r.containers.iter().map(|c| c.id.as_str()).collect();
                ensure!(ids == [id.as_str()], "listed {ids:?}")
            });
            let by_state = rt
                .list_containers(api::ListContainersRequest {
                    filter: Some(api::ContainerFilter {
                        state: Some(api::ContainerStateValue { state: api::ContainerState::ContainerRunning as i32 }),
                        ..Default::default()
                    }),
                })
                .await;
            t.record(col, "ListContainers (by state)", by_state, |r| {
                ensure!(
                    r.containers.iter().any(|c| c.id == id)
                        && r.containers.iter().all(|c| c.state == api::ContainerState::ContainerRunning as i32),
                    "listed {:?}",
                    r.containers.iter().map(|c| (&c.id, c.state)).collect::<Vec<_>>()
                )
            });
            let stats = rt.container_stats(api::ContainerStatsRequest { container_id: id.clone() }).await;
            t.record(col, "ContainerStats", stats, |r| {
                let attributes = r.stats.as_ref().and_then(|s| s.attributes.as_ref());
                ensure!(attributes.is_some_and(|a| a.id == id), "stats for {attributes:?}")
            });
            let stats = rt
                .list_container_stats(api::ListContainerStatsRequest {
                    filter: Some(api::ContainerStatsFilter { pod_sandbox_id: pod.clone(), ..Default::default() }),
                })
                .await;
            t.record(col, "ListContainerStats", stats, |r| {
                let ids: Vec<_> = r.stats.iter().filter_map(|s| s.attributes.as_ref().map(|a| a.id.as_str())).collect();
                ensure!(ids == [id.as_str()], "stats of {ids:?}")
            });
            let update = rt
                .update_container_resources(api::UpdateContainerResourcesRequest {
                    container_id: id.clone(),
                    linux: Some(api::LinuxContainerResources { cpu_shares: 512, ..Default::default() }),
                    ..Default::default()
                })
                .await;
            if t.record(col, "UpdateContainerResources", update, |_| Ok(())).is_some() {
                // The new value is what the container's own cgroup says.
                let read = rt.exec_sync(exec(&["sh", "-c", "cat /sys/fs/cgroup/cpu*/cpu.shares 2>/dev/null"])).await;
                t.record(col, "UpdateContainerResources", read, |r| {
                    ensure!(
                        r.stdout == b"512\n",
                        "the container's cpu.shares reads {:?}",
                        String::from_utf8_lossy(&r.stdout)
                    )
                });
            }
            reopen_container_log!($v, t, col, rt, id);
            let streaming = |r: &String| {
                ensure!(r.starts_with("http://127.0.0.1:") && r.len() > "http://127.0.0.1:".len(), "url {r:?}")
            };
            let url = rt
                .exec(api::ExecRequest {
                    container_id: id.clone(),
                    cmd: vec!["sh".into()],
                    stdout: true,
                    stderr: true,
                    ..Default::default()
                })
                .await;
            t.record(col, "Exec", url, |r| streaming(&r.url));
            let url = rt
                .attach(api::AttachRequest {
                    container_id: id.clone(),
                    stdout: true,
                    stderr: true,
                    ..Default::default()
                })
                .await;
            t.record(col, "Attach", url, |r| streaming(&r.url));
            let url = rt.port_forward(api::PortForwardRequest { pod_sandbox_id: pod.clone(), port: vec![8080] }).await;
            t.record(col, "PortForward", url, |r| streaming(&r.url));

            let stop = rt.stop_container(api::StopContainerRequest { container_id: id.clone(), timeout: 0 }).await;
            if t.record(col, "StopContainer", stop, |_| Ok(())).is_some() {
                let status =
                    rt.container_status(api::ContainerStatusRequest { container_id: id.clone(), verbose: false }).await;
                t.record(col, "StopContainer", status, |r| {
                    let state = r.status.as_ref().map(|s| s.state);
                    ensure!(
                        state == Some(api::ContainerState::ContainerExited as i32),
                        "then state {state:?}, not EXITED"
                    )
                });
            }
            let remove = rt.remove_container(api::RemoveContainerRequest { container_id: id.clone() }).await;
            t.record(col, "RemoveContainer", remove, |_| Ok(()));
            let stop = rt.stop_pod_sandbox(api::StopPodSandboxRequest { pod_sandbox_id: pod.clone() }).await;
            t.record(col, "StopPodSandbox", stop, |_| Ok(()));
            let remove = rt.remove_pod_sandbox(api::RemovePodSandboxRequest { pod_sandbox_id: pod.clone() }).await;
            t.record(col, "RemovePodSandbox", remove, |_| Ok(()));

            let removed = img.remove_image(api::RemoveImageRequest { image: image($removable) }).await;
            if t.record(col, "RemoveImage", removed, |_| Ok(())).is_some() {
                let status =
                    img.image_status(api::ImageStatusRequest { image: image($removable), verbose: false }).await;
                t.record(col, "RemoveImage", status, |r| ensure!(r.image.is_none(), "the image is still there"));
            }
        }
        .await;

        // Whatever an early failure left behind, so that containerd stops cleanly.
        let filter = api::PodSandboxFilter { label_selector: pair_label(), ..Default::default() };
        if let Ok(left) = rt.list_pod_sandbox(api::ListPodSandboxRequest { filter: Some(filter) }).await {
            for pod in left.into_inner().items {
                let _ = rt.stop_pod_sandbox(api::StopPodSandboxRequest { pod_sandbox_id: pod.id.clone() }).await;
                let _ = rt.remove_pod_sandbox(api::RemovePodSandboxRequest { pod_sandbox_id: pod.id }).await;
            }
        }
    }};
}

fn removable_image(frontend: &str, backend: &str) -> String {
    format!("cri-bridge.test/removable-{frontend}-{}:1", backend.replace(' ', "-"))
}

/// Every RPC of every frontend version, through cri-bridge to containerd 1.6, backend discovered
/// (v1) and pinned to v1alpha2: 3 × 2 pairs, one table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_matrix_auto_and_pinned_v1alpha2() {
    rpc_matrix(Build::System).await;
}

/// The same pairs against containerd 1.4.13, whose v1alpha2 is the genuine old CRI and where
/// `auto` must find v1alpha2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_matrix_containerd_1_4() {
    rpc_matrix(Build::V1_4).await;
}

/// The same pairs against containerd 1.7.24 (v1 and v1alpha2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_matrix_containerd_1_7() {
    rpc_matrix(Build::V1_7).await;
}

/// What `build` answers to `Version` asked directly in each CRI version: the versions it serves,
/// each answering with its own name and the build's version; the others UNIMPLEMENTED.
async fn assert_direct_versions(ctd: &Containerd) -> String {
    let endpoint = format!("unix://{}", ctd.socket.display());
    let backend = cri_bridge::backend::Backend::new(
        endpoint,
        cri_bridge::backend::Role::Runtime,
        ctd.socket.clone(),
        cri_bridge::backend::Pins::default(),
        cri_bridge::config::DEFAULT_MAX_MESSAGE_SIZE,
    );
    let mut served = Vec::new();
    let mut answers = Vec::new();
    for version in CriVersion::NEWEST_FIRST {
        match backend.call_version(version).await {
            Ok(r) => {
                answers.push(format!(
                    "{version}: version {:?} runtime {} {} api {:?}",
                    r.version, r.runtime_name, r.runtime_version, r.runtime_api_version
                ));
                assert_eq!(
                    (r.runtime_name.as_str(), r.runtime_version.as_str(), r.runtime_api_version.as_str()),
                    ("containerd", ctd.build.runtime_version(), version.as_str()),
                    "{:?} asked directly for Version in {version}",
                    ctd.build
                );
                served.push(version);
            }
            Err(status) => {
                assert_eq!(status.code(), Code::Unimplemented, "{version} Version: {}", describe(&status));
                answers.push(format!("{version}: {}", describe(&status)));
            }
        }
    }
    assert_eq!(served, ctd.build.served(), "{:?} serves {served:?}", ctd.build);
    answers.join("\n")
}

// One struct literal serves three versions whose messages have different field sets.
#[allow(clippy::needless_update)]
async fn rpc_matrix(build: Build) {
    let started = Instant::now();
    let ctd = Containerd::start_build(build).await;
    let versions = assert_direct_versions(&ctd).await;
    let removable: Vec<String> = BACKENDS
        .iter()
        .flat_map(|(backend, _)| ["v1alpha1", "v1alpha2", "v1"].map(|frontend| removable_image(frontend, backend)))
        .collect();
    ctd.import_extra_images("removable", &removable.iter().map(String::as_str).collect::<Vec<_>>()).await;

    let mut table = Table::default();
    for (backend, pinned) in BACKENDS {
        let dir = common::TempDir::new("ctd-matrix");
        let bridge = common::Bridge::start(common::config(&dir, &ctd.socket, pinned)).await;
        let channel = common::channel(&bridge.socket);
        let speaks = pinned.unwrap_or(build.served()[0]);
        lifecycle!(
            v1alpha1,
            channel,
            &ctd,
            &mut table,
            format!("v1alpha1 → {backend}"),
            v1alpha1::NamespaceOption { host_network: true, ..Default::default() },
            |o: &v1alpha1::NamespaceOption| o.host_network,
            &removable_image("v1alpha1", backend),
            speaks
        );
        lifecycle!(
            v1alpha2,
            channel,
            &ctd,
            &mut table,
            format!("v1alpha2 → {backend}"),
            v1alpha2::NamespaceOption { network: v1alpha2::NamespaceMode::Node as i32, ..Default::default() },
            |o: &v1alpha2::NamespaceOption| o.network == v1alpha2::NamespaceMode::Node as i32,
            &removable_image("v1alpha2", backend),
            speaks
        );
        lifecycle!(
            v1,
            channel,
            &ctd,
            &mut table,
            format!("v1 → {backend}"),
            v1::NamespaceOption { network: v1::NamespaceMode::Node as i32, ..Default::default() },
            |o: &v1::NamespaceOption| o.network == v1::NamespaceMode::Node as i32,
            &removable_image("v1", backend),
            speaks
        );
        bridge.stop().await;
    }

    let rendered = table.render();
    println!(
        "{rendered}\n(containerd {}, asked directly:\n{versions}\nauto finds {}; took {:.1?})",
        build.runtime_version(),
        build.served()[0],
        started.elapsed()
    );
    let failures = table.failures();
    // (containerd's log tail is printed when `ctd` is dropped by the panic.)
    assert!(failures.is_empty(), "{rendered}\n\nfailures:\n{}", failures.join("\n"));
}

/// Panics naming the test step, the RPC and the status that came back.
fn expect<T>(context: &str, rpc: &str, result: Result<tonic::Response<T>, Status>) -> T {
    match result {
        Ok(response) => response.into_inner(),
        Err(status) => panic!("{context}: {rpc} failed: {}", describe(&status)),
    }
}

type A1Runtime = v1alpha1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type A2Runtime = v1alpha2::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;
type V1Runtime = v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

/// A v1alpha1 pod on the host network, with the host's PID namespace or not.
fn a1_pod_config(name: &str, log_directory: &Path, host_pid: bool) -> v1alpha1::PodSandboxConfig {
    std::fs::create_dir_all(log_directory).unwrap();
    v1alpha1::PodSandboxConfig {
        metadata: Some(v1alpha1::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "cri-bridge-test".into(),
            attempt: 0,
        }),
        log_directory: log_directory.to_str().unwrap().into(),
        linux: Some(v1alpha1::LinuxPodSandboxConfig {
            security_context: Some(v1alpha1::LinuxSandboxSecurityContext {
                namespace_options: Some(v1alpha1::NamespaceOption { host_network: true, host_pid, host_ipc: false }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Creates and starts `sleep 3600` from busybox in `pod`.
async fn a1_container(
    rt: &mut A1Runtime,
    context: &str,
    pod: &str,
    pod_config: &v1alpha1::PodSandboxConfig,
    name: &str,
    security_context: Option<v1alpha1::LinuxContainerSecurityContext>,
) -> String {
    let config = v1alpha1::ContainerConfig {
        metadata: Some(v1alpha1::ContainerMetadata { name: name.into(), attempt: 0 }),
        image: Some(v1alpha1::ImageSpec { image: BUSYBOX_IMAGE.into() }),
        command: vec!["sleep".into(), "3600".into()],
        log_path: format!("{name}.log"),
        linux: Some(v1alpha1::LinuxContainerConfig { security_context, ..Default::default() }),
        ..Default::default()
    };
    let request = v1alpha1::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(config),
        sandbox_config: Some(pod_config.clone()),
    };
    let id = expect(context, "CreateContainer", rt.create_container(request).await).container_id;
    expect(
        context,
        "StartContainer",
        rt.start_container(v1alpha1::StartContainerRequest { container_id: id.clone() }).await,
    );
    id
}

async fn a1_exec(rt: &mut A1Runtime, context: &str, id: &str, cmd: &[&str]) -> Vec<u8> {
    let request = v1alpha1::ExecSyncRequest {
        container_id: id.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout: 10,
    };
    let response = expect(context, "ExecSync", rt.exec_sync(request).await);
    assert_eq!(response.exit_code, 0, "{context}: {cmd:?} exited {}: {:?}", response.exit_code, response.stderr);
    response.stdout
}

fn printable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).replace('\0', " ")
}

/// v1alpha1 booleans become v1/v1alpha2 modes by meaning, and containerd enforces that meaning:
/// host_pid false is a PID namespace of the container's own, true the host's; host_network
/// true is the host's network namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1alpha1_namespaces_keep_their_meaning() {
    namespaces_keep_their_meaning(Build::System).await;
}

/// The same on containerd 1.4.13, reached as v1alpha2 by `auto` and pinned alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1alpha1_namespaces_keep_their_meaning_on_1_4() {
    namespaces_keep_their_meaning(Build::V1_4).await;
}

#[allow(clippy::needless_update)]
async fn namespaces_keep_their_meaning(build: Build) {
    let ctd = Containerd::start_build(build).await;
    let host_net = std::fs::read_link("/proc/self/ns/net").unwrap();
    let host_init = std::fs::read("/proc/1/cmdline").unwrap();
    assert!(!host_init.starts_with(b"sleep"), "the host's PID 1 must differ from the containers' command");
    for (backend, pinned) in BACKENDS {
        let context = format!("v1alpha1 → {backend}");
        let slug = backend.replace(' ', "-");
        let dir = common::TempDir::new("ctd-ns");
        let bridge = common::Bridge::start(common::config(&dir, &ctd.socket, pinned)).await;
        let mut rt = A1Runtime::new(common::channel(&bridge.socket));
        let namespaces = |host_pid| {
            Some(v1alpha1::LinuxContainerSecurityContext {
                namespace_options: Some(v1alpha1::NamespaceOption { host_network: true, host_pid, host_ipc: false }),
                ..Default::default()
            })
        };

        // host_pid = false: the container's own PID namespace, where `sleep 3600` is PID 1.
        let private =
            a1_pod_config(&format!("private-pid-{slug}"), &ctd.pod_logs.join(format!("private-{slug}")), false);
        let request = v1alpha1::RunPodSandboxRequest { config: Some(private.clone()) };
        let pod = expect(&context, "RunPodSandbox", rt.run_pod_sandbox(request).await).pod_sandbox_id;
        let id = a1_container(&mut rt, &context, &pod, &private, "own-pid", namespaces(false)).await;
        let init = a1_exec(&mut rt, &context, &id, &["cat", "/proc/1/cmdline"]).await;
        assert_eq!(printable(&init), "sleep 3600 ", "{context}: host_pid=false: PID 1 in the container");
        // host_network = true: the test's own network namespace.
        let net = a1_exec(&mut rt, &context, &id, &["readlink", "/proc/self/ns/net"]).await;
        assert_eq!(
            String::from_utf8_lossy(&net).trim_end(),
            host_net.to_str().unwrap(),
            "{context}: host_network=true"
        );

        // No NamespaceOption at all means the same in v1alpha1 (all false): still its own PID 1,
        // not the pod's pause process, which an absent v1 option (pid POD) would give.
        let absent = a1_container(&mut rt, &context, &pod, &private, "absent-ns", None).await;
        let init = a1_exec(&mut rt, &context, &absent, &["cat", "/proc/1/cmdline"]).await;
        assert_eq!(printable(&init), "sleep 3600 ", "{context}: no namespace options: PID 1 in the container");

        // host_pid = true (pod and container): the host's PID 1.
        let shared = a1_pod_config(&format!("host-pid-{slug}"), &ctd.pod_logs.join(format!("host-{slug}")), true);
        let request = v1alpha1::RunPodSandboxRequest { config: Some(shared.clone()) };
        let host_pod = expect(&context, "RunPodSandbox", rt.run_pod_sandbox(request).await).pod_sandbox_id;
        let id = a1_container(&mut rt, &context, &host_pod, &shared, "host-pid", namespaces(true)).await;
        let init = a1_exec(&mut rt, &context, &id, &["cat", "/proc/1/cmdline"]).await;
        assert_eq!(printable(&init), printable(&host_init), "{context}: host_pid=true: PID 1 in the container");

        for pod in [pod, host_pod] {
            a1_remove_pod(&mut rt, &context, pod).await;
        }
        bridge.stop().await;
    }
}

/// Stops and removes a pod through a v1alpha1 client.
async fn a1_remove_pod(rt: &mut A1Runtime, context: &str, pod: String) {
    let stop = v1alpha1::StopPodSandboxRequest { pod_sandbox_id: pod.clone() };
    expect(context, "StopPodSandbox", rt.stop_pod_sandbox(stop).await);
    let remove = v1alpha1::RemovePodSandboxRequest { pod_sandbox_id: pod };
    expect(context, "RemovePodSandbox", rt.remove_pod_sandbox(remove).await);
}

fn v1_container_request(
    pod: &str,
    pod_config: &v1::PodSandboxConfig,
    name: &str,
    security_context: v1::LinuxContainerSecurityContext,
) -> v1::CreateContainerRequest {
    v1::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: BUSYBOX_IMAGE.into(), ..Default::default() }),
            command: vec!["sleep".into(), "3600".into()],
            log_path: format!("{name}.log"),
            linux: Some(v1::LinuxContainerConfig { security_context: Some(security_context), ..Default::default() }),
            ..Default::default()
        }),
        sandbox_config: Some(pod_config.clone()),
    }
}

/// The `Seccomp:` line of /proc/self/status inside a fresh container with `security_context`.
async fn v1_seccomp_mode(
    rt: &mut V1Runtime,
    context: &str,
    pod: &str,
    pod_config: &v1::PodSandboxConfig,
    name: &str,
    security_context: v1::LinuxContainerSecurityContext,
) -> String {
    let request = v1_container_request(pod, pod_config, name, security_context);
    let id = expect(context, "CreateContainer", rt.create_container(request).await).container_id;
    expect(context, "StartContainer", rt.start_container(v1::StartContainerRequest { container_id: id.clone() }).await);
    let exec = v1::ExecSyncRequest {
        container_id: id,
        cmd: ["grep", "Seccomp:", "/proc/self/status"].map(String::from).to_vec(),
        timeout: 10,
    };
    let response = expect(context, "ExecSync", rt.exec_sync(exec).await);
    assert_eq!(response.exit_code, 0, "{context}: grep exited {}: {:?}", response.exit_code, response.stderr);
    String::from_utf8_lossy(&response.stdout).into_owned()
}

/// Seccomp asked for in one form reaches a runtime that reads the other and is enforced:
/// a v1 `SecurityProfile` (RuntimeDefault, no string) to containerd spoken to as v1alpha2, and a
/// v1alpha1 string (`runtime/default`) to containerd spoken to as v1 (1.6) and as v1alpha2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seccomp_profile_reaches_an_old_runtime_as_both_forms() {
    seccomp_reaches_the_runtime_as_both_forms(Build::System).await;
}

/// The same on containerd 1.4.13, whose v1alpha2 reads only the strings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seccomp_profile_reaches_containerd_1_4_as_both_forms() {
    seccomp_reaches_the_runtime_as_both_forms(Build::V1_4).await;
}

#[allow(clippy::needless_update)]
async fn seccomp_reaches_the_runtime_as_both_forms(build: Build) {
    use v1::security_profile::ProfileType;
    let ctd = Containerd::start_build(build).await;

    for (backend, pinned) in v1alpha2_backends(build) {
        let context = format!("v1 → {backend}");
        let slug = backend.replace(' ', "-");
        let dir = common::TempDir::new("ctd-seccomp");
        let bridge = common::Bridge::start(common::config(&dir, &ctd.socket, pinned)).await;
        let mut rt = V1Runtime::new(common::channel(&bridge.socket));
        let pod_config =
            host_network_pod(&format!("seccomp-v1-{slug}"), &ctd.pod_logs.join(format!("seccomp-v1-{slug}")));
        let request = v1::RunPodSandboxRequest { config: Some(pod_config.clone()), ..Default::default() };
        let pod = expect(&context, "RunPodSandbox", rt.run_pod_sandbox(request).await).pod_sandbox_id;
        let profile = |profile_type: ProfileType| v1::LinuxContainerSecurityContext {
            seccomp: Some(v1::SecurityProfile { profile_type: profile_type as i32, localhost_ref: String::new() }),
            ..Default::default()
        };
        // RuntimeDefault is the zero value: the profile is an empty but present message.
        let enforced =
            v1_seccomp_mode(&mut rt, &context, &pod, &pod_config, "default", profile(ProfileType::RuntimeDefault))
                .await;
        assert_eq!(enforced, "Seccomp:\t2\n", "{context}: RuntimeDefault as a profile only must be a seccomp filter");
        let control =
            v1_seccomp_mode(&mut rt, &context, &pod, &pod_config, "unconfined", profile(ProfileType::Unconfined)).await;
        assert_eq!(control, "Seccomp:\t0\n", "{context}: Unconfined must be no filter");
        v1_remove_pod(&mut rt, &context, pod).await;
        bridge.stop().await;
    }

    // The string form from a v1alpha1 client, to containerd as v1 (a profile) and as v1alpha2 (both);
    // on 1.4 `auto` is v1alpha2 too.
    for (backend, pinned) in BACKENDS {
        let context = format!("v1alpha1 → {backend}");
        let slug = backend.replace(' ', "-");
        let dir = common::TempDir::new("ctd-seccomp");
        let bridge = common::Bridge::start(common::config(&dir, &ctd.socket, pinned)).await;
        let mut rt = A1Runtime::new(common::channel(&bridge.socket));
        let pod_config =
            a1_pod_config(&format!("seccomp-a1-{slug}"), &ctd.pod_logs.join(format!("seccomp-{slug}")), false);
        let request = v1alpha1::RunPodSandboxRequest { config: Some(pod_config.clone()) };
        let pod = expect(&context, "RunPodSandbox", rt.run_pod_sandbox(request).await).pod_sandbox_id;
        for (path, expected) in [("runtime/default", "Seccomp:\t2\n"), ("unconfined", "Seccomp:\t0\n")] {
            let security_context = v1alpha1::LinuxContainerSecurityContext {
                namespace_options: Some(v1alpha1::NamespaceOption { host_network: true, ..Default::default() }),
                seccomp_profile_path: path.into(),
                ..Default::default()
            };
            let name = path.replace('/', "-");
            let id = a1_container(&mut rt, &context, &pod, &pod_config, &name, Some(security_context)).await;
            let mode = a1_exec(&mut rt, &context, &id, &["grep", "Seccomp:", "/proc/self/status"]).await;
            assert_eq!(String::from_utf8_lossy(&mode), expected, "{context}: seccomp_profile_path {path:?}");
        }
        a1_remove_pod(&mut rt, &context, pod).await;
        bridge.stop().await;
    }
}

/// A v1 request with a protected field v1alpha2 cannot carry is refused with UNIMPLEMENTED
/// when cri-bridge speaks v1alpha2 to containerd (pinned; on 1.4 also `auto`), and containerd
/// never sees it: asked directly, it has no such pod or container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_never_reach_containerd() {
    refused_requests_never_reach(Build::System).await;
}

/// The same on containerd 1.4.13: `auto` discovers v1alpha2 and refuses as pinned does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_never_reach_containerd_1_4() {
    refused_requests_never_reach(Build::V1_4).await;
}

#[allow(clippy::needless_update)]
async fn refused_requests_never_reach(build: Build) {
    let ctd = Containerd::start_build(build).await;
    for (backend, pinned) in v1alpha2_backends(build) {
        let context = format!("v1 → {backend}");
        let dir = common::TempDir::new("ctd-refuse");
        let bridge = common::Bridge::start(common::config(&dir, &ctd.socket, pinned)).await;
        let mut rt = V1Runtime::new(common::channel(&bridge.socket));
        let assert_refused = |status: Status, rpc: &str, field: &str| {
            assert_eq!(status.code(), Code::Unimplemented, "{context}: {rpc}: {}", describe(&status));
            for part in [rpc, "v1alpha2", field] {
                assert!(
                    status.message().contains(part),
                    "{context}: {rpc}: {:?} does not name {part}",
                    status.message()
                );
            }
        };

        // A pod whose sandbox asks for the Strict supplemental groups policy.
        let mut strict_pod = host_network_pod("strict", &ctd.pod_logs.join("strict"));
        let security = strict_pod.linux.as_mut().unwrap().security_context.as_mut().unwrap();
        security.supplemental_groups_policy = v1::SupplementalGroupsPolicy::Strict as i32;
        let request = v1::RunPodSandboxRequest { config: Some(strict_pod), ..Default::default() };
        let refused = rt.run_pod_sandbox(request).await.expect_err("a Strict pod must be refused");
        assert_refused(refused, "RunPodSandbox", "config.linux.security_context.supplemental_groups_policy");
        let (pods, _) = direct_ids(&ctd).await;
        assert!(pods.is_empty(), "{context}: containerd has pods: {pods:?}");

        // A pod without it goes through, and containerd has it.
        let pod_config = host_network_pod("plain", &ctd.pod_logs.join("plain"));
        let request = v1::RunPodSandboxRequest { config: Some(pod_config.clone()), ..Default::default() };
        let pod = expect(&context, "RunPodSandbox", rt.run_pod_sandbox(request).await).pod_sandbox_id;
        assert_eq!(direct_ids(&ctd).await.0, [pod.as_str()], "{context}");

        // A container with the Strict policy, and one with a recursively read-only mount.
        let strict = v1::LinuxContainerSecurityContext {
            supplemental_groups_policy: v1::SupplementalGroupsPolicy::Strict as i32,
            ..Default::default()
        };
        let refused = rt
            .create_container(v1_container_request(&pod, &pod_config, "strict", strict))
            .await
            .expect_err("a Strict container must be refused");
        assert_refused(refused, "CreateContainer", "config.linux.security_context.supplemental_groups_policy");
        let mut rro = v1_container_request(&pod, &pod_config, "rro", v1::LinuxContainerSecurityContext::default());
        rro.config.as_mut().unwrap().mounts = vec![v1::Mount {
            container_path: "/mnt".into(),
            host_path: ctd.pod_logs.to_str().unwrap().into(),
            readonly: true,
            recursive_read_only: true,
            ..Default::default()
        }];
        let refused = rt.create_container(rro).await.expect_err("a recursive_read_only mount must be refused");
        assert_refused(refused, "CreateContainer", "recursive_read_only");
        let (_, containers) = direct_ids(&ctd).await;
        assert!(containers.is_empty(), "{context}: containerd has containers: {containers:?}");

        // The control: the same container without the field reaches containerd.
        let plain = v1_container_request(&pod, &pod_config, "plain", v1::LinuxContainerSecurityContext::default());
        let id = expect(&context, "CreateContainer", rt.create_container(plain).await).container_id;
        assert_eq!(direct_ids(&ctd).await.1, [id.as_str()], "{context}");

        v1_remove_pod(&mut rt, &context, pod).await;
        bridge.stop().await;
    }
}

/// The IDs of the pods and of the containers containerd itself has, asked directly in v1alpha2
/// (which every build serves).
async fn direct_ids(ctd: &Containerd) -> (Vec<String>, Vec<String>) {
    let mut direct = A2Runtime::new(ctd.direct_channel());
    let pods = direct.list_pod_sandbox(v1alpha2::ListPodSandboxRequest::default()).await;
    let pods = expect("direct", "ListPodSandbox", pods).items.into_iter().map(|p| p.id).collect();
    let containers = direct.list_containers(v1alpha2::ListContainersRequest::default()).await;
    let containers = expect("direct", "ListContainers", containers).containers.into_iter().map(|c| c.id).collect();
    (pods, containers)
}

/// Stops and removes a pod through a v1 client.
async fn v1_remove_pod(rt: &mut V1Runtime, context: &str, pod: String) {
    let stop = v1::StopPodSandboxRequest { pod_sandbox_id: pod.clone() };
    expect(context, "StopPodSandbox", rt.stop_pod_sandbox(stop).await);
    let remove = v1::RemovePodSandboxRequest { pod_sandbox_id: pod };
    expect(context, "RemovePodSandbox", rt.remove_pod_sandbox(remove).await);
}

/// A v1 pod asking for a user namespace (mode POD with ID mappings), on each build:
/// - containerd 1.4.13 (v1alpha2, the 1.19 schema, which has no `userns_options`): refused, and
///   containerd has no pod;
/// - containerd 1.6.20 (v1 at the 1.25 schema: it decodes `userns_options` but never applies
///   it): refused on passthrough too;
/// - containerd 1.7.24 (the first that reads it): forwarded; containerd answers for itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_namespace_reaches_only_a_containerd_that_applies_it() {
    for (build, release, refused) in
        [(Build::V1_4, "1.4.", true), (Build::System, "1.6.", true), (Build::V1_7, "1.7.", false)]
    {
        let ctd = Containerd::start_build(build).await;
        let dir = common::TempDir::new("ctd-userns");
        let bridge = common::Bridge::start(common::config(&dir, &ctd.socket, None)).await;
        let mut rt = V1Runtime::new(common::channel(&bridge.socket));
        let version = expect("userns", "Version", rt.version(v1::VersionRequest::default()).await);
        let context = format!("containerd {}", version.runtime_version);
        assert!(version.runtime_version.trim_start_matches('v').starts_with(release), "{context}: expected {release}x");

        let mut config = host_network_pod("userns", &ctd.pod_logs.join("userns"));
        let mapping = vec![v1::IdMapping { host_id: 200000, container_id: 0, length: 65536 }];
        let namespaces = config.linux.as_mut().unwrap().security_context.as_mut().unwrap();
        namespaces.namespace_options = Some(v1::NamespaceOption {
            userns_options: Some(v1::UserNamespace {
                mode: v1::NamespaceMode::Pod as i32,
                uids: mapping.clone(),
                gids: mapping,
            }),
            ..Default::default()
        });
        let answer = rt.run_pod_sandbox(v1::RunPodSandboxRequest { config: Some(config), ..Default::default() }).await;
        if refused {
            let status = answer.expect_err("a user namespace must be refused");
            assert_eq!(status.code(), Code::Unimplemented, "{context}: {}", describe(&status));
            for part in ["RunPodSandbox", "userns_options", "security", "refused by the loss policy"] {
                assert!(status.message().contains(part), "{context}: {:?} lacks {part}", status.message());
            }
            let (pods, _) = direct_ids(&ctd).await;
            assert!(pods.is_empty(), "{context}: containerd has pods: {pods:?}");
        } else {
            // Not refused by cri-bridge: containerd received it and answered itself.
            match answer {
                Ok(pod) => {
                    eprintln!("{context}: the user-namespaced pod runs");
                    v1_remove_pod(&mut rt, &context, pod.into_inner().pod_sandbox_id).await
                }
                Err(status) => {
                    eprintln!("{context}: containerd's own answer: {}", describe(&status));
                    assert!(
                        !status.message().contains("refused by the loss policy"),
                        "{context}: cri-bridge refused a user namespace containerd applies: {}",
                        describe(&status)
                    )
                }
            }
        }
        bridge.stop().await;
    }
}

/// `cri-bridge probe` against real containerd names the revision it decodes, where that came
/// from, and the classified fields it would not act on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_names_each_containerds_revision_and_what_it_would_not_act_on() {
    let cases: [(Build, &[&str], &[&str]); 3] = [
        (
            Build::V1_4,
            &[
                "CRI v1alpha2 at the Kubernetes 1.19 revision (containerd 1.4.",
                "NamespaceOption.userns_options (security)",
            ],
            &[],
        ),
        (
            Build::System,
            &[
                "CRI v1 at the Kubernetes 1.25 revision (containerd 1.6.",
                "CRI v1alpha2 at the Kubernetes 1.25 revision",
                "NamespaceOption.userns_options (security): the runtime decodes it but does not act on it",
                "Mount.recursive_read_only (security): the runtime's CRI revision (Kubernetes 1.25) predates it (1.30)",
                "features reported: none",
            ],
            &[],
        ),
        (
            Build::V1_7,
            &[
                "CRI v1 at the Kubernetes 1.27 revision (containerd 1.7.",
                "Capability.add_ambient_capabilities (security)",
            ],
            &["NamespaceOption.userns_options (security)", "Mount.uidMappings (security)"],
        ),
    ];
    for (build, present, absent) in cases {
        let ctd = Containerd::start_build(build).await;
        let report = cri_bridge::probe::probe(&ctd.socket).await.expect("probe").to_string();
        println!("{report}");
        let v1_part = report.split("CRI v1alpha2:").next().unwrap_or(&report).to_string();
        for line in present {
            assert!(report.contains(line), "{line:?} missing from:\n{report}");
        }
        for line in absent {
            assert!(!v1_part.contains(line), "{line:?} should not be in the v1 part of:\n{report}");
        }
    }
}

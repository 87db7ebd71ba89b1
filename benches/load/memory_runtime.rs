//! The in-memory runtime role: the bench binary re-executed as a runtime of one CRI version,
//! populated with pods and containers as a kubelet sets them up.

use crate::{load_proc, CONTAINERS_ENV, SOCKET_ENV, VERSION_ENV};
use cri_bridge::api::v1;
use cri_bridge::memory::{serve_memory, MemoryRuntime};
use cri_bridge::CriVersion;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

/// Serves the in-memory runtime described by the environment, populated, until stdin closes.
pub fn runtime_role() {
    let required = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let socket = PathBuf::from(required(SOCKET_ENV));
    let version: CriVersion = required(VERSION_ENV).parse().unwrap_or_else(|e| panic!("{e}"));
    let containers: usize = required(CONTAINERS_ENV).parse().expect("a container count");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let (memory, _serving) = serve_memory(&socket, &[version], std::future::pending())
            .await
            .unwrap_or_else(|e| panic!("serve on {}: {e}", socket.display()));
        populate(&memory, containers);
    });
    println!("ready");
    let _ = std::io::stdout().flush();
    load_proc::wait_for_stdin_eof();
    std::process::exit(0);
}

fn string_map(pairs: &[(&str, String)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// `containers` pods, each with one container, labelled and annotated as a kubelet does.
fn populate(memory: &MemoryRuntime, containers: usize) {
    for i in 0..containers {
        let (pod_name, uid) = (format!("web-{i}"), format!("7f3c9a2e-0000-4000-8000-{i:012}"));
        let metadata =
            v1::PodSandboxMetadata { name: pod_name.clone(), uid: uid.clone(), namespace: "load".into(), attempt: 0 };
        let pod_labels = string_map(&[
            ("app", format!("web-{}", i % 10)),
            ("io.kubernetes.pod.name", pod_name.clone()),
            ("io.kubernetes.pod.namespace", "load".into()),
            ("io.kubernetes.pod.uid", uid.clone()),
        ]);
        let config = v1::PodSandboxConfig { metadata: Some(metadata), labels: pod_labels, ..Default::default() };
        let pod_sandbox_id = memory
            .run_pod_sandbox(v1::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() })
            .expect("run a pod sandbox")
            .pod_sandbox_id;
        let container = v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(v1::ImageSpec { image: "docker.io/library/busybox:latest".into(), ..Default::default() }),
            labels: string_map(&[
                ("io.kubernetes.container.name", "app".into()),
                ("io.kubernetes.pod.name", pod_name),
                ("io.kubernetes.pod.namespace", "load".into()),
                ("io.kubernetes.pod.uid", uid),
            ]),
            annotations: string_map(&[
                ("io.kubernetes.container.hash", format!("{:08x}", i * 2_654_435_761 % (1 << 32))),
                ("io.kubernetes.container.restartCount", "0".into()),
                ("io.kubernetes.container.terminationMessagePath", "/dev/termination-log".into()),
            ]),
            ..Default::default()
        };
        let request =
            v1::CreateContainerRequest { pod_sandbox_id, config: Some(container), sandbox_config: Some(config) };
        memory.create_container(request).expect("create a container");
    }
}

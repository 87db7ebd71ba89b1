//! `cri-bridge backends`: what each backend of a config holds (sandboxes and their containers,
//! with pod names), asked of each runtime directly on its own socket, so that an operator moving
//! a node between runtimes knows when the old one is empty (docs/migrate.md). It needs no running
//! cri-bridge.

use crate::api::v1;
use crate::backend::{Backend, Pins, Role};
use crate::config::{Config, Endpoint};
use crate::grpc::Rpc;
use prost::Message;
use serde::Serialize;

/// One backend and what it holds.
#[derive(Debug, Serialize)]
pub struct Holding {
    pub name: String,
    pub endpoint: String,
    /// `runtime_name runtime_version, CRI version`, or why it could not be asked.
    pub runtime: Result<String, String>,
    pub sandboxes: Vec<Sandbox>,
}

#[derive(Debug, Serialize)]
pub struct Sandbox {
    pub id: String,
    /// `namespace/name`.
    pub pod: String,
    pub uid: String,
    pub ready: bool,
    pub runtime_handler: String,
    /// Container names.
    pub containers: Vec<String>,
}

/// Asks every backend of `config` what it holds.
pub async fn holdings(config: &Config) -> Vec<Holding> {
    let named: Vec<(String, Endpoint)> = match &config.routing {
        Some(routing) => routing.backends.iter().map(|b| (b.name.clone(), b.endpoint.clone())).collect(),
        None => vec![("default".to_string(), config.backend.clone())],
    };
    let mut held = Vec::new();
    for (name, endpoint) in named {
        let mut holding =
            Holding { name, endpoint: endpoint.to_string(), runtime: Ok(String::new()), sandboxes: Vec::new() };
        match &endpoint {
            Endpoint::Memory => {
                holding.runtime = Err("the built-in in-memory runtime lives inside a running cri-bridge only".into());
            }
            Endpoint::Unix(path) => {
                let pins = Pins::default();
                let backend =
                    Backend::new(holding.endpoint.clone(), Role::Runtime, path.clone(), pins, config.max_message_size);
                match ask(&backend).await {
                    Ok((runtime, sandboxes)) => {
                        holding.runtime = Ok(runtime);
                        holding.sandboxes = sandboxes;
                    }
                    Err(why) => holding.runtime = Err(why),
                }
            }
        }
        held.push(holding);
    }
    held
}

/// Removes the sandbox `id` from the backend `name` of `config` (`RemovePodSandbox`, asked of
/// its runtime directly): for `cri-bridge move`, a stopped sandbox the kubelet keeps.
pub async fn remove_sandbox(config: &Config, name: &str, id: &str) -> Result<(), String> {
    let endpoint = match &config.routing {
        Some(routing) => routing.backends.iter().find(|b| b.name == name).map(|b| b.endpoint.clone()),
        None => Some(config.backend.clone()),
    };
    let Some(Endpoint::Unix(path)) = endpoint else {
        return Err(format!("backend {name}: no runtime socket to ask"));
    };
    let backend = Backend::new(name.to_string(), Role::Runtime, path, Pins::default(), config.max_message_size);
    let found = backend.version().await.map_err(|e| e.to_string())?;
    let info = found
        .version
        .schema()
        .rpc("RuntimeService", "RemovePodSandbox")
        .ok_or_else(|| format!("CRI {} has no RemovePodSandbox", found.version))?;
    // The request is the same message in every version: field 1, the sandbox's id.
    let request = v1::RemovePodSandboxRequest { pod_sandbox_id: id.to_string() }.encode_to_vec();
    let answer = backend.unary(Rpc { version: found.version, info }, &request).await;
    answer.map(|_| ()).map_err(|s| format!("RemovePodSandbox {id}: {:?}: {}", s.code(), s.message()))
}

async fn ask(backend: &Backend) -> Result<(String, Vec<Sandbox>), String> {
    let found = backend.version().await.map_err(|e| e.to_string())?;
    let list = |method: &'static str, request: Vec<u8>| {
        let info = found.version.schema().rpc("RuntimeService", method);
        async move {
            let info = info.ok_or_else(|| format!("CRI {} has no {method}", found.version))?;
            let answer = backend.unary(Rpc { version: found.version, info }, &request).await;
            answer.map_err(|s| format!("{method}: {:?}: {}", s.code(), s.message()))
        }
    };
    let sandboxes = list("ListPodSandbox", Vec::new()).await?;
    let containers = list("ListContainers", Vec::new()).await?;
    let sandboxes = v1::ListPodSandboxResponse::decode(sandboxes).map_err(|e| e.to_string())?.items;
    let containers = v1::ListContainersResponse::decode(containers).map_err(|e| e.to_string())?.containers;
    let held = sandboxes
        .into_iter()
        .map(|s| {
            let metadata = s.metadata.unwrap_or_default();
            let inside = containers.iter().filter(|c| c.pod_sandbox_id == s.id);
            Sandbox {
                pod: format!("{}/{}", metadata.namespace, metadata.name),
                uid: metadata.uid,
                ready: s.state == v1::PodSandboxState::SandboxReady as i32,
                runtime_handler: s.runtime_handler,
                containers: inside.map(|c| c.metadata.clone().unwrap_or_default().name).collect(),
                id: s.id,
            }
        })
        .collect();
    let runtime = &found.profile.runtime;
    Ok((format!("{} {}, CRI {}", runtime.runtime_name, runtime.runtime_version, found.version), held))
}

/// The holdings as a table per backend, and whether each can be removed.
pub fn table(held: &[Holding]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for holding in held {
        let _ = match &holding.runtime {
            Ok(runtime) => writeln!(out, "backend {} ({}): {runtime}", holding.name, holding.endpoint),
            Err(why) => writeln!(out, "backend {} ({}): not asked: {why}", holding.name, holding.endpoint),
        };
        for s in &holding.sandboxes {
            let state = if s.ready { "ready" } else { "not ready" };
            let short = s.id.get(..13).unwrap_or(&s.id);
            let handler =
                if s.runtime_handler.is_empty() { String::new() } else { format!(", handler {}", s.runtime_handler) };
            let _ = writeln!(out, "  {short}  {}  {state}{handler}  containers: {}", s.pod, s.containers.join(" "));
        }
        if holding.runtime.is_ok() && holding.sandboxes.is_empty() {
            let _ = writeln!(out, "  no sandbox: nothing runs here (it can be removed from `backends`)");
        }
    }
    out
}

//! The API server, as `cri-bridge move` uses it: the pods on the node, the eviction API, and the
//! disruption budgets. What it needs in RBAC is in docs/migrate.md.

use super::error::MoveError;
use super::plan::{Owner, PodFacts, Selector};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::Path;

/// The API server's answer to an eviction.
#[derive(Debug, PartialEq, Eq)]
pub enum Evicted {
    /// Accepted: the pod is being deleted, its grace period honoured.
    Yes,
    /// `429`: a disruption budget does not allow it now; why, in the API server's words.
    NotNow(String),
    /// `404`: the pod is gone already.
    Gone,
}

/// A client of the API server the kubeconfig names: `path`, else `KUBECONFIG`, `~/.kube/config`,
/// or the in-cluster service account.
pub async fn connect(path: Option<&Path>) -> Result<kube::Client, MoveError> {
    let mut config = match path {
        Some(path) => {
            let file =
                Kubeconfig::read_from(path).map_err(|e| MoveError::Kubeconfig(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| MoveError::Kubeconfig(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer().await.map_err(|e| MoveError::Kubeconfig(e.to_string()))?,
    };
    // The client's own retries would wait out a budget's 429 with a backoff that grows to
    // minutes, saying nothing: the move retries itself, and says why.
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|e| MoveError::Kubeconfig(e.to_string()))
}

/// The pods the API server has bound to `node`.
pub async fn pods_on_node(client: &kube::Client, node: &str) -> Result<Vec<PodFacts>, MoveError> {
    let listed = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(|e| MoveError::api("listing the pods on the node", e))?;
    Ok(listed.items.iter().map(facts).collect())
}

/// The pods of `namespace` (to count an owner's Ready pods, wherever they run).
pub async fn pods_in(client: &kube::Client, namespace: &str) -> Result<Vec<PodFacts>, MoveError> {
    let listed = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| MoveError::api("listing the pods of a namespace", e))?;
    Ok(listed.items.iter().map(facts).collect())
}

/// One pod by name, `None` when gone.
pub async fn pod(client: &kube::Client, namespace: &str, name: &str) -> Result<Option<PodFacts>, MoveError> {
    let got = Api::<Pod>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| MoveError::api("reading a pod", e))?;
    Ok(got.as_ref().map(facts))
}

/// Asks the eviction API to evict `pod`. Only a `429` (a budget) and a `404` are answers; any
/// other failure stops the move.
pub async fn evict(client: &kube::Client, pod: &PodFacts) -> Result<Evicted, MoveError> {
    let api = Api::<Pod>::namespaced(client.clone(), &pod.namespace);
    match api.evict(&pod.name, &EvictParams::default()).await {
        Ok(_) => Ok(Evicted::Yes),
        Err(kube::Error::Api(status)) if status.code == 429 => {
            let causes: Vec<String> = status
                .details
                .iter()
                .flat_map(|d| d.causes.iter().map(|c| c.message.clone()))
                .filter(|m| !m.is_empty())
                .collect();
            let why = if causes.is_empty() { status.message.clone() } else { causes.join("; ") };
            Ok(Evicted::NotNow(why))
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Evicted::Gone),
        Err(e) => Err(MoveError::api(&format!("evicting {}", pod.full_name()), e)),
    }
}

/// The disruption budgets that cover `pod`, each as `name: N disruptions allowed (H of D healthy)`.
pub async fn budgets_of(client: &kube::Client, pod: &PodFacts) -> Result<Vec<String>, MoveError> {
    let listed = Api::<PodDisruptionBudget>::namespaced(client.clone(), &pod.namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| MoveError::api("listing the disruption budgets", e))?;
    let mut covering = Vec::new();
    for budget in &listed.items {
        let spec = budget.spec.clone().unwrap_or_default();
        let Some(selector) = spec.selector else { continue };
        let selector = Selector {
            match_labels: selector.match_labels.unwrap_or_default(),
            expressions: selector
                .match_expressions
                .unwrap_or_default()
                .into_iter()
                .map(|e| (e.key, e.operator, e.values.unwrap_or_default()))
                .collect(),
        };
        if !selector.matches(&pod.labels) {
            continue;
        }
        let name = budget.metadata.name.clone().unwrap_or_default();
        covering.push(match &budget.status {
            Some(s) => format!(
                "{name}: {} disruptions allowed ({} of {} healthy)",
                s.disruptions_allowed, s.current_healthy, s.desired_healthy
            ),
            None => format!("{name}: not yet counted by the disruption controller"),
        });
    }
    Ok(covering)
}

/// What the move reads of a pod.
fn facts(pod: &Pod) -> PodFacts {
    let meta = &pod.metadata;
    let status = pod.status.clone().unwrap_or_default();
    let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
    let phase = status.phase.unwrap_or_default();
    let owner = meta.owner_references.iter().flatten().find(|o| o.controller == Some(true)).map(|o| Owner {
        kind: o.kind.clone(),
        name: o.name.clone(),
        uid: o.uid.clone(),
    });
    PodFacts {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        mirror_of: meta.annotations.as_ref().and_then(|a| a.get("kubernetes.io/config.mirror").cloned()),
        // A mirror pod's owner is its Node: no controller recreates it.
        owner: owner.filter(|o| o.kind != "Node"),
        labels: meta.labels.clone().unwrap_or_default(),
        ready,
        deleting: meta.deletion_timestamp.is_some(),
        finished: phase == "Succeeded" || phase == "Failed",
    }
}

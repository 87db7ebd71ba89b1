//! What `cri-bridge move` does next, decided from two lists and nothing else: the sandboxes the
//! old backend holds, and the pods the API server has on the node. Pure, so that every case is
//! tested without a cluster.

use std::collections::BTreeMap;

/// A sandbox of the old backend, as its runtime lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OldSandbox {
    pub id: String,
    /// `namespace/name` of the pod the kubelet made it for.
    pub pod: String,
    /// The kubelet's pod UID: the API's, or a static pod's config hash.
    pub uid: String,
    pub ready: bool,
}

/// The controller that recreates a pod (its `ownerReference` with `controller: true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// What the move needs of a pod the API server has.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodFacts {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `kubernetes.io/config.mirror`: the pod is a static pod's mirror, and this is the UID the
    /// kubelet runs the static pod under.
    pub mirror_of: Option<String>,
    pub owner: Option<Owner>,
    pub labels: BTreeMap<String, String>,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// It has a deletion timestamp: already on its way out.
    pub deleting: bool,
    /// `Succeeded` or `Failed`: nothing replaces it, nothing waits for it.
    pub finished: bool,
}

impl PodFacts {
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The UID the kubelet gives the runtime for this pod.
    pub fn kubelet_uid(&self) -> &str {
        self.mirror_of.as_deref().unwrap_or(&self.uid)
    }
}

/// One thing the old backend holds, and what the move does about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A pod a controller recreates (ReplicaSet, StatefulSet, DaemonSet, Job, ...): evicted
    /// through the eviction API, then its replacement waited for.
    Evict(PodFacts),
    /// A static pod (its mirror here): its manifest is set aside until the kubelet has stopped it,
    /// then put back, and the kubelet starts it anew on the default backend.
    Restart(PodFacts),
    /// Already being deleted, or finished: the kubelet removes its sandbox; only waited for.
    Going(PodFacts),
    /// A pod nothing recreates: evicting it would delete it for good. Left, and named.
    Unmanaged(PodFacts),
    /// A ready sandbox of no pod the API server has on this node (made by hand, or a pod the API
    /// lost): not the eviction API's to move. Left, and named.
    Unknown(OldSandbox),
    /// A sandbox no longer ready: the kubelet's garbage collection removes it.
    Leftover(OldSandbox),
}

impl Step {
    /// Whether the move acts on it (the others it waits for, or leaves).
    pub fn is_move(&self) -> bool {
        matches!(self, Step::Evict(_) | Step::Restart(_))
    }

    /// The pod or sandbox, as a person reads it.
    pub fn subject(&self) -> String {
        match self {
            Step::Evict(pod) | Step::Restart(pod) | Step::Going(pod) | Step::Unmanaged(pod) => pod.full_name(),
            Step::Unknown(sandbox) | Step::Leftover(sandbox) => {
                format!("sandbox {} ({})", sandbox.id.get(..13).unwrap_or(&sandbox.id), sandbox.pod)
            }
        }
    }
}

/// What to do about each sandbox of the old backend, in the order to do it: the pods to move
/// first (static pods last, as they cannot surge), then what is waited for or left.
pub fn plan(sandboxes: &[OldSandbox], pods: &[PodFacts]) -> Vec<Step> {
    let mut steps = Vec::new();
    for sandbox in sandboxes {
        let pod = pods.iter().find(|p| p.kubelet_uid() == sandbox.uid);
        let step = match pod {
            _ if !sandbox.ready => Step::Leftover(sandbox.clone()),
            None => Step::Unknown(sandbox.clone()),
            Some(pod) if pod.deleting || pod.finished => Step::Going(pod.clone()),
            Some(pod) if pod.mirror_of.is_some() => Step::Restart(pod.clone()),
            Some(pod) if pod.owner.is_some() => Step::Evict(pod.clone()),
            Some(pod) => Step::Unmanaged(pod.clone()),
        };
        // A pod with two ready sandboxes (it should not happen) is moved once.
        if !steps.contains(&step) {
            steps.push(step);
        }
    }
    let rank = |step: &Step| match step {
        Step::Evict(_) => 0,
        Step::Restart(_) => 1,
        Step::Going(_) => 2,
        Step::Leftover(_) => 3,
        Step::Unmanaged(_) => 4,
        Step::Unknown(_) => 5,
    };
    steps.sort_by_key(|step| (rank(step), step.subject()));
    steps
}

/// How many pods of `owner` are Ready, leaving out `gone` (the pods evicted, which may still be
/// listed while they terminate).
pub fn ready_of_owner(pods: &[PodFacts], owner_uid: &str, gone: &[String]) -> usize {
    pods.iter()
        .filter(|p| p.owner.as_ref().is_some_and(|o| o.uid == owner_uid))
        .filter(|p| p.ready && !p.deleting && !gone.contains(&p.uid))
        .count()
}

/// A label selector (`matchLabels` and `matchExpressions`), as a PodDisruptionBudget has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    pub match_labels: BTreeMap<String, String>,
    /// `(key, operator, values)`; operators `In`, `NotIn`, `Exists`, `DoesNotExist`.
    pub expressions: Vec<(String, String, Vec<String>)>,
}

impl Selector {
    /// Whether `labels` match. An operator this code does not know is taken to match: a budget
    /// is shown as covering a pod when it might. (Only shown: the API server decides.)
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let plain = self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v));
        plain
            && self.expressions.iter().all(|(key, operator, values)| match operator.as_str() {
                "In" => labels.get(key).is_some_and(|v| values.contains(v)),
                "NotIn" => labels.get(key).is_none_or(|v| !values.contains(v)),
                "Exists" => labels.contains_key(key),
                "DoesNotExist" => !labels.contains_key(key),
                _ => true,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(uid: &str, ready: bool) -> OldSandbox {
        OldSandbox { id: format!("sb-{uid}"), pod: format!("default/{uid}"), uid: uid.into(), ready }
    }

    fn pod(name: &str, uid: &str) -> PodFacts {
        PodFacts {
            namespace: "default".into(),
            name: name.into(),
            uid: uid.into(),
            owner: Some(Owner { kind: "ReplicaSet".into(), name: "web-1".into(), uid: "rs".into() }),
            ready: true,
            ..PodFacts::default()
        }
    }

    #[test]
    fn each_sandbox_gets_the_step_its_pod_needs() {
        let static_mirror =
            PodFacts { mirror_of: Some("hash".into()), owner: None, ..pod("etcd-node-a", "mirror-uid") };
        let bare = PodFacts { owner: None, ..pod("bare", "u-bare") };
        let going = PodFacts { deleting: true, ..pod("going", "u-going") };
        let done = PodFacts { finished: true, ..pod("done", "u-done") };
        let pods = vec![pod("web", "u-web"), static_mirror.clone(), bare.clone(), going.clone(), done.clone()];
        let sandboxes = vec![
            sandbox("u-bare", true),
            sandbox("hash", true),
            sandbox("u-web", true),
            sandbox("u-stale", false),
            sandbox("u-nobody", true),
            sandbox("u-going", true),
            sandbox("u-done", true),
            // A static pod's old, stopped sandbox is a leftover even though its pod is known.
            sandbox("hash", false),
        ];
        let steps = plan(&sandboxes, &pods);
        assert_eq!(
            steps,
            vec![
                Step::Evict(pod("web", "u-web")),
                Step::Restart(static_mirror),
                Step::Going(done),
                Step::Going(going),
                Step::Leftover(sandbox("hash", false)),
                Step::Leftover(sandbox("u-stale", false)),
                Step::Unmanaged(bare),
                Step::Unknown(sandbox("u-nobody", true)),
            ]
        );
        assert_eq!(steps.iter().filter(|s| s.is_move()).count(), 2);
    }

    #[test]
    fn a_replacement_counts_once_ready_and_the_evicted_pod_never() {
        let mut pods = vec![pod("a", "1"), pod("b", "2"), pod("c", "3")];
        assert_eq!(ready_of_owner(&pods, "rs", &[]), 3);
        // "1" evicted: still listed while it terminates, it does not count.
        assert_eq!(ready_of_owner(&pods, "rs", &["1".into()]), 2);
        pods.push(PodFacts { ready: false, ..pod("d", "4") });
        assert_eq!(ready_of_owner(&pods, "rs", &["1".into()]), 2);
        pods[3].ready = true;
        assert_eq!(ready_of_owner(&pods, "rs", &["1".into()]), 3);
        assert_eq!(ready_of_owner(&pods, "another", &[]), 0);
    }

    #[test]
    fn selectors_match_as_the_api_server_matches() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let by_label = Selector { match_labels: labels.clone(), ..Selector::default() };
        assert!(by_label.matches(&labels));
        assert!(!by_label.matches(&BTreeMap::new()));
        let expression = |op: &str, values: &[&str]| Selector {
            expressions: vec![("app".into(), op.into(), values.iter().map(|v| v.to_string()).collect())],
            ..Selector::default()
        };
        assert!(expression("In", &["web", "db"]).matches(&labels));
        assert!(!expression("NotIn", &["web"]).matches(&labels));
        assert!(expression("NotIn", &["web"]).matches(&BTreeMap::new()));
        assert!(expression("Exists", &[]).matches(&labels));
        assert!(expression("DoesNotExist", &[]).matches(&BTreeMap::new()));
        assert!(expression("Sometimes", &[]).matches(&labels));
        // The empty selector matches every pod (policy/v1).
        assert!(Selector::default().matches(&labels));
    }
}

//! What each CRI RPC does to the node: every RPC of every version is in one [`Class`], an RPC
//! cri-bridge does not know in none.

/// What an RPC does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Reads state: versions, status, lists, stats, metrics, events, image facts.
    Read,
    /// Runs a command in a container, or opens a stream into one: a shell on the node.
    Shell,
    /// Changes what runs or how: sandboxes, containers, resources, checkpoints, runtime config.
    Mutate,
    /// Changes the image store: pulls and removals.
    ImageMutate,
}

/// Each RPC cri-bridge knows, by method name (the same in every version that has it).
const CLASSES: &[(&str, Class)] = &[
    ("Version", Class::Read),
    ("Status", Class::Read),
    ("RuntimeConfig", Class::Read),
    ("ListPodSandbox", Class::Read),
    ("StreamPodSandboxes", Class::Read),
    ("PodSandboxStatus", Class::Read),
    ("ListContainers", Class::Read),
    ("StreamContainers", Class::Read),
    ("ContainerStatus", Class::Read),
    ("ContainerStats", Class::Read),
    ("ListContainerStats", Class::Read),
    ("StreamContainerStats", Class::Read),
    ("PodSandboxStats", Class::Read),
    ("ListPodSandboxStats", Class::Read),
    ("StreamPodSandboxStats", Class::Read),
    ("ListMetricDescriptors", Class::Read),
    ("ListPodSandboxMetrics", Class::Read),
    ("StreamPodSandboxMetrics", Class::Read),
    ("GetContainerEvents", Class::Read),
    ("ImageFsInfo", Class::Read),
    ("ListImages", Class::Read),
    ("StreamImages", Class::Read),
    ("ImageStatus", Class::Read),
    ("Exec", Class::Shell),
    ("ExecSync", Class::Shell),
    ("Attach", Class::Shell),
    ("PortForward", Class::Shell),
    ("RunPodSandbox", Class::Mutate),
    ("StopPodSandbox", Class::Mutate),
    ("RemovePodSandbox", Class::Mutate),
    ("CreateContainer", Class::Mutate),
    ("StartContainer", Class::Mutate),
    ("StopContainer", Class::Mutate),
    ("RemoveContainer", Class::Mutate),
    ("UpdateContainerResources", Class::Mutate),
    ("UpdatePodSandboxResources", Class::Mutate),
    ("ReopenContainerLog", Class::Mutate),
    ("CheckpointContainer", Class::Mutate),
    ("CheckpointPod", Class::Mutate),
    ("RestorePod", Class::Mutate),
    ("UpdateRuntimeConfig", Class::Mutate),
    ("PullImage", Class::ImageMutate),
    ("RemoveImage", Class::ImageMutate),
];

/// The class of an RPC; `None` for one cri-bridge does not know.
pub fn class_of(method: &str) -> Option<Class> {
    CLASSES.iter().find(|(name, _)| *name == method).map(|(_, class)| *class)
}

/// Whether a call changes the node (what the audit log records and a uid restriction guards).
pub fn mutates(method: &str) -> bool {
    !matches!(class_of(method), Some(Class::Read))
}

/// Why a policy denies a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denied {
    pub why: &'static str,
}

//! Why `cri-bridge move` stopped. Each says what was left as it was: the move stops between pods,
//! never in the middle of one, and a second run goes on from what the backends hold.

/// A stop, with what it means for the node.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("--from {0}")]
    From(String),
    #[error("--node: {0}")]
    Node(String),
    #[error("the kubeconfig: {0}")]
    Kubeconfig(String),
    #[error(
        "the API server did not answer while {doing}: {source}. Nothing more is evicted and every pod is left \
         running; run cri-bridge move again to go on"
    )]
    Api {
        doing: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("backend {backend} could not be asked what it holds: {why}. Nothing more is evicted; run again to go on")]
    Backend { backend: String, why: String },
    #[error("static pod manifests: {0}")]
    Manifests(String),
    #[error(
        "{pod} did not come back Ready within {waited:?} ({what}); the move stops here, with every other pod as it was"
    )]
    NotReady { pod: String, waited: std::time::Duration, what: String },
    #[error("backend {backend} still holds what the eviction API cannot move: {}", left.join("; "))]
    Left { backend: String, left: Vec<String> },
}

impl MoveError {
    pub fn api(doing: &str, source: kube::Error) -> MoveError {
        MoveError::Api { doing: doing.to_string(), source: Box::new(source) }
    }
}

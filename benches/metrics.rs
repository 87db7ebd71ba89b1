//! What counting one call costs on the hot path: the operation counter, the duration histogram,
//! the in-flight gauge and the caller's count, told through the forwarder's `Observer`
//! interface as `serve_call` tells them.
//! (`cargo bench --bench load` measures the same through the whole proxy, with a build from
//! before the metrics beside it: `LOAD_COMPARE_BIN`.)

use cri_bridge::callers::{Callers, Peer};
use cri_bridge::forward::{ClientRecord, Observer};
use cri_bridge::grpc::Rpc;
use cri_bridge::metrics::Metrics;
use cri_bridge::observers::Observers;
use cri_bridge::CriVersion;
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;

fn per_call(c: &mut Criterion) {
    let callers = Arc::new(Callers::default());
    let who = cri_bridge::callers::Identity { pid: Some(1), exe: "/usr/bin/kubelet".into(), ..Default::default() };
    let caller: Arc<dyn ClientRecord> = callers.connected(Peer { who, ..Peer::default() });
    let observers: Arc<dyn Observer> = Arc::new(Observers { metrics: Arc::new(Metrics::default()), callers });
    let rpc = Rpc::from_path("/runtime.v1.RuntimeService/ListPodSandbox").expect("a CRI path");
    c.bench_function("metrics: one call counted", |b| {
        b.iter(|| {
            observers.call_began();
            caller.called(black_box(rpc).version);
            observers.answered(Some(black_box(rpc)), Some(CriVersion::V1), Code::Ok, Duration::from_micros(250));
            observers.call_ended();
        })
    });
    c.bench_function("metrics: one conversion timed", |b| {
        b.iter(|| observers.converted(cri_bridge::convert::policy::Side::Request, black_box(Duration::from_micros(3))))
    });
}

criterion_group!(benches, per_call);
criterion_main!(benches);

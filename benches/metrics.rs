//! What counting one call costs on the hot path: the operation counter, the duration histogram,
//! the in-flight gauge and the caller's count, as `serve_call` does them, against doing nothing.
//! (`cargo bench --bench load` measures the same through the whole proxy, with a build from
//! before the metrics beside it: `LOAD_COMPARE_BIN`.)

use cri_bridge::callers::{Callers, Peer};
use cri_bridge::grpc::Rpc;
use cri_bridge::metrics::Metrics;
use cri_bridge::CriVersion;
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;

fn per_call(c: &mut Criterion) {
    let metrics = Arc::new(Metrics::new());
    let callers = Callers::default();
    let caller = callers.connected(Peer { pid: Some(1), exe: "/usr/bin/kubelet".into(), ..Peer::default() });
    let rpc = Rpc::from_path("/runtime.v1.RuntimeService/ListPodSandbox").expect("a CRI path");
    c.bench_function("metrics: one call counted", |b| {
        b.iter(|| {
            let in_flight = metrics.in_flight();
            caller.called(black_box(rpc).version);
            metrics.answered(Some(black_box(rpc)), Some(CriVersion::V1), Code::Ok, Duration::from_micros(250));
            drop(in_flight);
        })
    });
    c.bench_function("metrics: one conversion timed", |b| {
        b.iter(|| metrics.converted(cri_bridge::convert::policy::Side::Request, black_box(Duration::from_micros(3))))
    });
}

criterion_group!(benches, per_call);
criterion_main!(benches);

//! Conversion cost against a plain prost decode + encode of the same bytes (the baseline), for
//! the messages the issue names, in each direction. After the measurements it prints each
//! conversion's time as a ratio of its baseline (target: within 1.5×), and what the hot path's
//! `Route::convert` costs: the bytes passed as they are when the message is the same on both
//! sides (one walk), else the walk that found it is not and then the decode path.
//!
//! Inputs are built from the schema itself: every field set (repeated fields twice, maps with two
//! entries), so no field escapes the measurement; the lists hold 1,000 such entries.

use cri_bridge::api::{v1, v1alpha1, v1alpha2, FILE_DESCRIPTOR_SET};
use cri_bridge::convert::{Cx, Route};
use cri_bridge::CriVersion::{self, V1alpha1, V1alpha2, V1};
#[path = "support/estimates.rs"]
mod estimates;

use criterion::{black_box, Criterion};
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};
use std::time::Duration;

/// Encodes message `name` of `package` with every field set.
fn filled(file: &FileDescriptorProto, name: &str, depth: usize, out: &mut Vec<u8>) {
    let message = find(file, name);
    let mut fields: Vec<_> = message.field.iter().collect();
    fields.sort_by_key(|f| f.number());
    for field in fields {
        let count = if field.label() == Label::Repeated { 2 } else { 1 };
        for i in 0..count {
            let n = field.number() as u32;
            match field.r#type() {
                Type::Message => {
                    let type_name = field.type_name().rsplit('.').next().unwrap();
                    let nested = message.nested_type.iter().find(|m| m.name() == type_name);
                    let mut body = Vec::new();
                    match nested {
                        // A map entry: key and value strings.
                        Some(_) => {
                            prost::encoding::string::encode(1, &format!("key-{i}"), &mut body);
                            prost::encoding::string::encode(2, &format!("value-{i}"), &mut body);
                        }
                        None if depth < 8 => filled(file, type_name, depth + 1, &mut body),
                        None => {}
                    }
                    prost::encoding::bytes::encode(n, &body, out);
                }
                Type::String => prost::encoding::string::encode(n, &format!("{}-{i}", field.name()), out),
                Type::Bytes => prost::encoding::bytes::encode(n, &format!("{}-{i}", field.name()).into_bytes(), out),
                Type::Bool => prost::encoding::bool::encode(n, &true, out),
                Type::Double => prost::encoding::double::encode(n, &1.5, out),
                Type::Enum => {
                    // The last value: non-zero, so it is encoded.
                    let enum_name = field.type_name().rsplit('.').next().unwrap();
                    let value = enum_values(file, enum_name).into_iter().max().unwrap_or(0);
                    encode_key(n, WireType::Varint, out);
                    encode_varint(value as u64, out);
                }
                _ => {
                    encode_key(n, WireType::Varint, out);
                    encode_varint(42 + i as u64, out);
                }
            }
        }
    }
}

fn find<'a>(file: &'a FileDescriptorProto, name: &str) -> &'a DescriptorProto {
    file.message_type.iter().find(|m| m.name() == name).unwrap_or_else(|| panic!("no message {name}"))
}

fn enum_values(file: &FileDescriptorProto, name: &str) -> Vec<i32> {
    let top = file.enum_type.iter();
    let nested = file.message_type.iter().flat_map(|m| m.enum_type.iter());
    top.chain(nested)
        .find(|e| e.name() == name)
        .map(|e| e.value.iter().map(|v| v.number()).collect())
        .unwrap_or_default()
}

fn file_of(version: CriVersion) -> FileDescriptorProto {
    let set = FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
    set.file.into_iter().find(|f| f.package() == version.package()).unwrap()
}

/// A message with every field set, in `version`.
fn full(version: CriVersion, name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    filled(&file_of(version), name, 0, &mut out);
    out
}

/// A list response: field 1 repeated 1,000 times with a full `element`.
fn list_of(version: CriVersion, element: &str) -> Vec<u8> {
    let item = full(version, element);
    let mut out = Vec::new();
    for _ in 0..1000 {
        prost::encoding::bytes::encode(1, &item, &mut out);
    }
    out
}

/// Decode + encode with the source version's prost type: what any proxy that looked inside the
/// message would pay.
type Baseline = fn(&[u8]) -> Vec<u8>;

fn roundtrip<M: Message + Default>(bytes: &[u8]) -> Vec<u8> {
    M::decode(bytes).unwrap().encode_to_vec()
}

struct Case {
    name: String,
    message: &'static str,
    from: CriVersion,
    to: CriVersion,
    input: Vec<u8>,
    baseline: Baseline,
    /// Answers are converted with a counting context, as the proxy does: their losses are
    /// expected and only counted; requests record every loss with its path.
    response: bool,
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // Both directions between v1 and `$old` for message `$msg`: one full message, or a list of
    // 1,000 full `$element`s.
    macro_rules! both_ways {
        ($old:ident, $oldv:expr, $msg:ident, $element:expr, $response:expr) => {
            let directions = [(V1, $oldv, roundtrip::<v1::$msg> as Baseline), ($oldv, V1, roundtrip::<$old::$msg>)];
            for (from, to, baseline) in directions {
                let message = stringify!($msg);
                let (label, input) = match $element {
                    Some(element) => (format!("{message}(1000)"), list_of(from, element)),
                    None => (message.to_string(), full(from, message)),
                };
                let name = format!("{label} {from}->{to}");
                cases.push(Case { name, message, from, to, input, baseline, response: $response });
            }
        };
    }
    both_ways!(v1alpha2, V1alpha2, CreateContainerRequest, None::<&str>, false);
    both_ways!(v1alpha2, V1alpha2, ListContainersResponse, Some("Container"), true);
    both_ways!(v1alpha2, V1alpha2, ListContainerStatsResponse, Some("ContainerStats"), true);
    both_ways!(v1alpha1, V1alpha1, CreateContainerRequest, None::<&str>, false);
    both_ways!(v1alpha1, V1alpha1, ListContainersResponse, Some("Container"), true);
    both_ways!(v1alpha1, V1alpha1, ListContainerStatsResponse, Some("ContainerStats"), true);
    cases
}

fn main() {
    let mut criterion = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    let cases = cases();
    // Which cases this run measured (a filter on the command line skips the others).
    let mut measured = vec![false; cases.len()];
    for (case, measured) in cases.iter().zip(&mut measured) {
        let route = Route::new(case.message, case.from, case.to).unwrap();
        let mut group = criterion.benchmark_group(&case.name);
        group.bench_function("baseline decode+encode", |b| b.iter(|| (case.baseline)(black_box(&case.input))));
        group.bench_function("convert", |b| {
            *measured = true;
            b.iter(|| {
                let mut cx = if case.response { Cx::counting() } else { Cx::new() };
                route.run(black_box(&case.input), &mut cx).unwrap()
            })
        });
        group.bench_function("Route::convert", |b| {
            b.iter(|| {
                let mut cx = if case.response { Cx::counting() } else { Cx::new() };
                route.convert(black_box(&case.input), &mut cx).unwrap().len()
            })
        });
        group.finish();
    }
    criterion.final_summary();
    let measured: Vec<&Case> = cases.iter().zip(measured).filter(|(_, m)| *m).map(|(c, _)| c).collect();
    print_ratios(&measured);
}

/// How many fields one conversion of the case drops (each is reported, or counted for answers).
fn losses(case: &Case) -> usize {
    let mut cx = Cx::new();
    Route::new(case.message, case.from, case.to).unwrap().run(&case.input, &mut cx).unwrap();
    cx.loss_count()
}

/// Whether the hot path passes the case's bytes as they are (the message is the same on both sides).
fn copied(case: &Case) -> bool {
    let route = Route::new(case.message, case.from, case.to).unwrap();
    matches!(route.convert(&case.input, &mut Cx::new()), Ok(std::borrow::Cow::Borrowed(_)))
}

/// Prints convert / baseline for each case, from criterion's saved estimates.
fn print_ratios(cases: &[&Case]) {
    let means = estimates::criterion_means();
    let mean = |group: &str, function: &str| means.get(&(group.to_string(), function.to_string())).copied();
    println!(
        "\n{:<48} {:>14} {:>14} {:>7} {:>7} {:>16} {:>7}",
        "conversion (decode, convert, encode)", "baseline", "convert", "ratio", "losses", "Route::convert", "copied"
    );
    for case in cases {
        let hot = mean(&case.name, "Route::convert");
        match (mean(&case.name, "baseline decode+encode"), mean(&case.name, "convert")) {
            (Some(base), Some(conv)) => println!(
                "{:<48} {:>11.1} µs {:>11.1} µs {:>6.2}× {:>7} {:>13.1} µs {:>7}",
                case.name,
                base / 1000.0,
                conv / 1000.0,
                conv / base,
                losses(case),
                hot.unwrap_or(f64::NAN) / 1000.0,
                if copied(case) { "yes" } else { "no" }
            ),
            _ => println!("{:<48} (no estimates found)", case.name),
        }
    }
}

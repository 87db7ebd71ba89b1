//! Our `proto/` held to the releases of `k8s.io/cri-api` itself.
//!
//! `proto/v1/api.proto` against `pkg/apis/runtime/v1/api.proto` of the `k8s.io/cri-api` that the Go
//! clients are built on (the version `tests/clients/go/go.mod` pins), and `proto/v1alpha2/api.proto`
//! against `pkg/apis/runtime/v1alpha2/api.proto` of `k8s.io/cri-api` [`V1ALPHA2_RELEASE`], the last
//! release that has v1alpha2 (Kubernetes 1.25; 1.26 removed it). The releases come from Go's module
//! cache through `go mod download -json` (from the module proxy when not cached yet, checked against
//! go.sum or the checksum database); nothing of them is copied into the repository.
//!
//! Both sides are compiled with protox and compared fact by fact: every message; every field's
//! name, number, type and label (a map as `map<key,value>`, proto3 `optional` and oneof membership
//! as part of the label); every enum and enum value (name, number); every service and RPC (request,
//! response, client/server streaming). Any difference fails, each named on its own line. Options
//! (`deprecated`, `debug_redact`, gogoproto's) and comments are not compared.
//!
//! Needs Go (`$GO`, else /usr/local/go/bin/go, else `go` on PATH; `tests/clients/go/build.sh`
//! needs it too) and, when the modules are not cached yet, the module proxy. Missing ones fail.

use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use protox::prost_reflect::{
    Cardinality, DescriptorPool, EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor, ServiceDescriptor,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const TOP: &str = env!("CARGO_MANIFEST_DIR");

/// The newest `k8s.io/cri-api` with `pkg/apis/runtime/v1alpha2` (Kubernetes 1.25.16, its last
/// patch release).
const V1ALPHA2_RELEASE: &str = "v0.25.16";

const CRI_API: &str = "k8s.io/cri-api";

fn go() -> PathBuf {
    if let Some(go) = std::env::var_os("GO").filter(|g| !g.is_empty()) {
        return PathBuf::from(go);
    }
    let local = Path::new("/usr/local/go/bin/go");
    if local.is_file() {
        return local.to_path_buf();
    }
    PathBuf::from("go")
}

/// `go mod download -json MODULE` run in `dir`: the module's version and directory in the module
/// cache (downloaded first if need be).
fn download(dir: &Path, module: &str) -> (String, PathBuf) {
    let output = Command::new(go())
        .args(["mod", "download", "-json", module])
        .current_dir(dir)
        // Never a toolchain of its own; and a read-only go.mod/go.sum in tests/clients/go.
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=readonly")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} (Go is needed, see tests/clients/go/build.sh): {e}", go().display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "`go mod download -json {module}` in {} printed no JSON ({e}; {}):\n{stdout}\n{}",
            dir.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let error = json["Error"].as_str().unwrap_or_default();
    let dir_found = json["Dir"].as_str().unwrap_or_default();
    assert!(
        output.status.success() && error.is_empty() && !dir_found.is_empty(),
        "`go mod download -json {module}` in {} failed ({}): {error}\n{}",
        dir.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    (json["Version"].as_str().unwrap_or_default().to_string(), PathBuf::from(dir_found))
}

/// Import names resolved to files (a module cache's directories carry `@version`, so the import
/// paths of a release's protos cannot be include directories), then protobuf's own files.
struct Files(BTreeMap<String, PathBuf>);

impl FileResolver for Files {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.0.get(name) {
            Some(path) => File::open(name, path),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// Compiles `main` (opened as `name`) with the given imports.
fn compile(name: &str, main: &Path, imports: &[(&str, PathBuf)]) -> DescriptorPool {
    let mut files: BTreeMap<String, PathBuf> = imports.iter().map(|(n, p)| (n.to_string(), p.clone())).collect();
    files.insert(name.to_string(), main.to_path_buf());
    let mut resolver = ChainFileResolver::new();
    resolver.add(Files(files));
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.open_file(name).unwrap_or_else(|e| panic!("{} does not compile: {e:?}", main.display()));
    compiler.descriptor_pool()
}

fn ours(version: &str) -> DescriptorPool {
    let path = Path::new(TOP).join("proto").join(version).join("api.proto");
    compile(&format!("{version}/api.proto"), &path, &[])
}

fn kind_name(kind: &Kind) -> String {
    match kind {
        Kind::Double => "double".into(),
        Kind::Float => "float".into(),
        Kind::Int32 => "int32".into(),
        Kind::Int64 => "int64".into(),
        Kind::Uint32 => "uint32".into(),
        Kind::Uint64 => "uint64".into(),
        Kind::Sint32 => "sint32".into(),
        Kind::Sint64 => "sint64".into(),
        Kind::Fixed32 => "fixed32".into(),
        Kind::Fixed64 => "fixed64".into(),
        Kind::Sfixed32 => "sfixed32".into(),
        Kind::Sfixed64 => "sfixed64".into(),
        Kind::Bool => "bool".into(),
        Kind::String => "string".into(),
        Kind::Bytes => "bytes".into(),
        Kind::Message(m) => m.full_name().to_string(),
        Kind::Enum(e) => e.full_name().to_string(),
    }
}

/// A field's type and label as one fact.
fn field_fact(f: &FieldDescriptor) -> String {
    if f.is_map() {
        let Kind::Message(entry) = f.kind() else { unreachable!("a map field is a message field") };
        let (key, value) = (entry.map_entry_key_field(), entry.map_entry_value_field());
        return format!("number {} map<{},{}>", f.number(), kind_name(&key.kind()), kind_name(&value.kind()));
    }
    let mut label = match f.cardinality() {
        Cardinality::Repeated => "repeated".to_string(),
        Cardinality::Required => "required".to_string(),
        Cardinality::Optional if f.field_descriptor_proto().proto3_optional() => "proto3 optional".to_string(),
        Cardinality::Optional => "singular".to_string(),
    };
    if let Some(oneof) = f.containing_oneof().filter(|o| !o.is_synthetic()) {
        label.push_str(&format!(" in oneof {}", oneof.name()));
    }
    format!("number {} {label} {}", f.number(), kind_name(&f.kind()))
}

fn enum_facts(facts: &mut BTreeMap<String, String>, e: &EnumDescriptor) {
    facts.insert(format!("enum {}", e.full_name()), String::new());
    for v in e.values() {
        // A value's own full name is scoped like its enum's siblings (protobuf's C++ rule): named
        // under its enum instead, so that a value moved to another enum shows.
        facts.insert(format!("enum value {}.{}", e.full_name(), v.name()), format!("number {}", v.number()));
    }
}

fn message_facts(facts: &mut BTreeMap<String, String>, m: &MessageDescriptor) {
    if m.is_map_entry() {
        return; // its fields are written as the map field's type
    }
    facts.insert(format!("message {}", m.full_name()), String::new());
    for f in m.fields() {
        facts.insert(format!("field {}", f.full_name()), field_fact(&f));
    }
    for e in m.child_enums() {
        enum_facts(facts, &e);
    }
    for nested in m.child_messages() {
        message_facts(facts, &nested);
    }
}

fn service_facts(facts: &mut BTreeMap<String, String>, s: &ServiceDescriptor) {
    facts.insert(format!("service {}", s.full_name()), String::new());
    for m in s.methods() {
        let stream = |yes: bool| if yes { "stream " } else { "" };
        facts.insert(
            format!("rpc {}", m.full_name()),
            format!(
                "({}{}) returns ({}{})",
                stream(m.is_client_streaming()),
                m.input().full_name(),
                stream(m.is_server_streaming()),
                m.output().full_name()
            ),
        );
    }
}

/// Every fact of `package`'s file in `pool`.
fn facts(pool: &DescriptorPool, package: &str) -> BTreeMap<String, String> {
    let files: Vec<_> = pool.files().filter(|f| f.package_name() == package).collect();
    assert_eq!(files.len(), 1, "expected one file of package {package}, found {}", files.len());
    let mut facts = BTreeMap::new();
    for e in files[0].enums() {
        enum_facts(&mut facts, &e);
    }
    for m in files[0].messages() {
        message_facts(&mut facts, &m);
    }
    for s in files[0].services() {
        service_facts(&mut facts, &s);
    }
    facts
}

/// Every difference, one line each: what only the release has, what only `proto/` has, and what
/// both have but differently.
fn differences(release: &BTreeMap<String, String>, ours: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (key, theirs) in release {
        match ours.get(key) {
            None if theirs.is_empty() => out.push(format!("only in the release: {key}")),
            None => out.push(format!("only in the release: {key}: {theirs}")),
            Some(mine) if mine != theirs => out.push(format!("differs: {key}: release {theirs}, proto/ {mine}")),
            Some(_) => {}
        }
    }
    for (key, mine) in ours {
        if !release.contains_key(key) {
            if mine.is_empty() {
                out.push(format!("only in proto/: {key}"));
            } else {
                out.push(format!("only in proto/: {key}: {mine}"));
            }
        }
    }
    out
}

fn check(what: &str, release: &BTreeMap<String, String>, ours: &BTreeMap<String, String>) {
    let found = differences(release, ours);
    let count = |kind: &str| release.keys().filter(|k| k.starts_with(kind)).count();
    let values = count("enum value ");
    println!(
        "{what}: {} facts in the release ({} messages, {} fields, {} enums, {} enum values, {} RPCs), {} in proto/, {} difference(s)",
        release.len(),
        count("message "),
        count("field "),
        count("enum ") - values,
        values,
        count("rpc "),
        ours.len(),
        found.len()
    );
    for line in &found {
        println!("  {line}");
    }
    assert!(found.is_empty(), "{what}: {} difference(s):\n{}", found.len(), found.join("\n"));
}

#[test]
fn v1_is_the_cri_api_release_the_go_clients_build_on() {
    let module_dir = Path::new(TOP).join("tests/clients/go");
    let (version, dir) = download(&module_dir, CRI_API);
    let path = dir.join("pkg/apis/runtime/v1/api.proto");
    assert!(path.is_file(), "{} is missing", path.display());
    let release = facts(&compile("api.proto", &path, &[]), "runtime.v1");
    check(&format!("proto/v1/api.proto against {CRI_API} {version}"), &release, &facts(&ours("v1"), "runtime.v1"));
}

#[test]
fn v1alpha2_is_the_last_cri_api_release_with_it() {
    // Outside any module: the release is looked up by its version alone.
    let (version, dir) = download(&std::env::temp_dir(), &format!("{CRI_API}@{V1ALPHA2_RELEASE}"));
    assert_eq!(version, V1ALPHA2_RELEASE);
    let path = dir.join("pkg/apis/runtime/v1alpha2/api.proto");
    assert!(path.is_file(), "{} is missing", path.display());
    // Its file options are gogoproto's: gogo.proto comes from the gogo/protobuf the release requires.
    let go_mod = std::fs::read_to_string(dir.join("go.mod")).expect("read the release's go.mod");
    let gogo_version = go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix("github.com/gogo/protobuf "))
        .map(|v| v.split_whitespace().next().unwrap_or_default().to_string())
        .unwrap_or_else(|| panic!("{CRI_API} {version}'s go.mod requires no github.com/gogo/protobuf"));
    let (_, gogo) = download(&std::env::temp_dir(), &format!("github.com/gogo/protobuf@{gogo_version}"));
    let imports = [("github.com/gogo/protobuf/gogoproto/gogo.proto", gogo.join("gogoproto/gogo.proto"))];
    let release = facts(&compile("api.proto", &path, &imports), "runtime.v1alpha2");
    check(
        &format!("proto/v1alpha2/api.proto against {CRI_API} {version}"),
        &release,
        &facts(&ours("v1alpha2"), "runtime.v1alpha2"),
    );
}

/// The comparison itself: a missing, an extra and a changed fact each make one line.
#[test]
fn every_kind_of_difference_is_named() {
    let ours = facts(&ours("v1"), "runtime.v1");
    for key in [
        "rpc runtime.v1.RuntimeService.Version",
        "field runtime.v1.KeyValue.value",
        "enum value runtime.v1.Signal.SIGNAL_SIGKILL",
    ] {
        assert!(ours.contains_key(key), "{key} is not among the facts of proto/v1/api.proto");
    }
    let mut release = ours.clone();
    release.remove("rpc runtime.v1.RuntimeService.Version");
    release.insert("field runtime.v1.KeyValue.value".into(), "number 2 singular string".into());
    release.insert("message runtime.v1.Unheard".into(), String::new());
    assert_eq!(
        differences(&release, &ours),
        [
            "differs: field runtime.v1.KeyValue.value: release number 2 singular string, proto/ number 2 singular bytes",
            "only in the release: message runtime.v1.Unheard",
            "only in proto/: rpc runtime.v1.RuntimeService.Version: (runtime.v1.VersionRequest) returns (runtime.v1.VersionResponse)",
        ]
    );
}

//! Compiles the three CRI schemas with protox (no system `protoc`), generates the prost types and
//! tonic clients/servers, the conversions between each older version and v1, and descriptor tables.

#[path = "build/gen_convert.rs"]
mod gen_convert;
#[path = "build/gen_tables.rs"]
mod gen_tables;
#[path = "src/convert/rules.rs"]
#[allow(dead_code)]
mod rules;
#[path = "build/schema.rs"]
mod schema;

use prost::Message;
use schema::Schema;
use std::path::PathBuf;

fn main() {
    for path in ["proto", "build", "src/convert/rules.rs"] {
        println!("cargo:rerun-if-changed={path}");
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let files = ["v1alpha1/api.proto", "v1alpha2/api.proto", "v1/api.proto"];
    let fds = protox::compile(files, ["proto"]).unwrap_or_else(|e| panic!("proto/ does not compile: {e}"));
    std::fs::write(out_dir.join("cri.fds"), fds.encode_to_vec()).expect("write cri.fds");

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .emit_rerun_if_changed(false)
        .compile_fds(fds.clone())
        .unwrap_or_else(|e| panic!("generating Rust from proto/ failed: {e}"));

    let v1alpha1 = Schema::read(&fds, "v1alpha1", "runtime");
    let v1alpha2 = Schema::read(&fds, "v1alpha2", "runtime.v1alpha2");
    let v1 = Schema::read(&fds, "v1", "runtime.v1");

    let mut errors = Vec::new();
    for old in [&v1alpha1, &v1alpha2] {
        match gen_convert::generate(old, &v1) {
            Ok(code) => std::fs::write(out_dir.join(format!("convert_{}.rs", old.version)), code).expect("write"),
            Err(e) => errors.extend(e),
        }
    }
    let history = std::fs::read_to_string("proto/field-history.tsv").expect("read proto/field-history.tsv");
    let tables = gen_tables::generate(&[&v1alpha1, &v1alpha2, &v1], &gen_tables::read_history(&history), &mut errors);
    if !errors.is_empty() {
        panic!("code generation failed:\n  {}", errors.join("\n  "));
    }
    std::fs::write(out_dir.join("tables.rs"), tables).expect("write tables.rs");
}

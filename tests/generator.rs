//! The conversion generator (build/gen_convert.rs, run by build.rs) refuses a schema whose
//! differing field has no rule, naming the field — the guarantee that keeps hand-written
//! exceptions complete. Run here on edited copies of proto/.

#[path = "../build/gen_convert.rs"]
#[allow(dead_code)]
mod gen_convert;
#[path = "../src/convert/rules.rs"]
#[allow(dead_code)]
mod rules;
#[path = "../build/schema.rs"]
#[allow(dead_code)]
mod schema;

use schema::Schema;
use std::path::{Path, PathBuf};

/// Copies proto/ into a fresh directory, applies `edit` to one file, compiles all three, and
/// runs the generator for `old` against v1.
fn generate_with(
    name: &str,
    file: &str,
    edit: impl Fn(&str) -> String,
    old: &'static str,
) -> Result<String, Vec<String>> {
    let dir = std::env::temp_dir().join(format!("crib-gen-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    for version in ["v1alpha1", "v1alpha2", "v1"] {
        std::fs::create_dir_all(dir.join(version)).unwrap();
        let text = std::fs::read_to_string(source.join(version).join("api.proto")).unwrap();
        let text = if version == file { edit(&text) } else { text };
        std::fs::write(dir.join(version).join("api.proto"), text).unwrap();
    }
    let files = ["v1alpha1/api.proto", "v1alpha2/api.proto", "v1/api.proto"];
    let fds = protox::compile(files, [PathBuf::from(&dir)]).expect("the edited protos compile");
    let _ = std::fs::remove_dir_all(&dir);
    let package = if old == "v1alpha1" { "runtime" } else { "runtime.v1alpha2" };
    gen_convert::generate(&Schema::read(&fds, old, package), &Schema::read(&fds, "v1", "runtime.v1"))
}

fn errors(result: Result<String, Vec<String>>) -> String {
    result.expect_err("the generator must refuse").join("\n")
}

#[test]
fn the_real_schemas_generate() {
    for old in ["v1alpha1", "v1alpha2"] {
        let code = generate_with("real", "none", |t| t.to_string(), old).unwrap();
        assert!(code.contains("impl Convert<new::CreateContainerRequest> for old::CreateContainerRequest"));
    }
}

#[test]
fn a_field_whose_type_changed_without_a_rule_fails_naming_it() {
    let edit = |t: &str| {
        assert!(t.contains("  string runtime_name = 2;"));
        t.replacen("  string runtime_name = 2;", "  bytes runtime_name = 2;", 1)
    };
    let message = errors(generate_with("type", "v1", edit, "v1alpha2"));
    assert!(message.contains("runtime.v1alpha2.VersionResponse.runtime_name"), "{message}");
    assert!(message.contains("runtime.v1.VersionResponse.runtime_name"), "{message}");
    assert!(message.contains("src/convert/rules.rs"), "{message}");
}

#[test]
fn a_renamed_field_without_a_rule_fails_naming_it() {
    let edit = |t: &str| t.replacen("  string runtime_name = 2;", "  string runtime = 2;", 1);
    let message = errors(generate_with("rename", "v1", edit, "v1alpha1"));
    assert!(
        message.contains("runtime.VersionResponse.runtime_name")
            && message.contains("runtime.v1.VersionResponse.runtime"),
        "{message}"
    );
}

#[test]
fn a_field_only_in_the_older_version_needs_a_rule() {
    let edit = |t: &str| {
        t.replacen("  string runtime_api_version = 4;", "  string runtime_api_version = 4;\n  string extra = 5;", 1)
    };
    let message = errors(generate_with("older-only", "v1alpha2", edit, "v1alpha2"));
    assert!(
        message.contains("runtime.v1alpha2.VersionResponse.extra") && message.contains("exists only in v1alpha2"),
        "{message}"
    );
}

#[test]
fn a_message_only_in_the_older_version_must_be_listed() {
    let edit = |t: &str| format!("{t}\nmessage OnlyHere {{\n  string x = 1;\n}}\n");
    let message = errors(generate_with("msg-only", "v1alpha2", edit, "v1alpha2"));
    assert!(message.contains("runtime.v1alpha2.OnlyHere") && message.contains("VERSION_ONLY"), "{message}");
}

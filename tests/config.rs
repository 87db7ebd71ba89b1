//! The configuration file: the example documents the defaults, every key parses, every error
//! names its key, and command-line overrides win.

use cri_bridge::config::{Config, ConfigError, Endpoint, LogFormat, Overrides, DEFAULT_MAX_MESSAGE_SIZE};
use cri_bridge::convert::policy::Action;
use cri_bridge::CriVersion::{V1alpha1, V1alpha2, V1};
use std::path::{Path, PathBuf};

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.yaml")
}

/// Parses `yaml`, expecting an error; its message.
fn error(yaml: &str) -> String {
    match Config::parse(yaml) {
        Ok(config) => panic!("{yaml:?} must be refused, got {config:?}"),
        Err(e) => e.to_string(),
    }
}

/// Parses `yaml`, expecting a validation error for `key`; its message.
fn invalid(yaml: &str, key: &str) -> String {
    let err = Config::parse(yaml).expect_err(yaml);
    match &err {
        ConfigError::Invalid { key: k, .. } => assert_eq!(*k, key, "{yaml:?}: {err}"),
        other => panic!("{yaml:?}: expected an error for key {key}, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains(key), "{message}");
    message
}

#[test]
fn example_documents_the_defaults() {
    let loaded = Config::load(&example_path()).expect("config.example.yaml loads");
    let default = Config::default();
    assert_eq!(loaded.listen_path, default.listen_path);
    assert_eq!(loaded.listen_path, PathBuf::from("/run/cri-bridge/cri-bridge.sock"));
    assert_eq!(loaded.listen_mode, default.listen_mode);
    assert_eq!(loaded.listen_mode, 0o660);
    assert_eq!(loaded.listen_group, default.listen_group);
    assert_eq!(loaded.versions, default.versions);
    assert_eq!(loaded.versions, vec![V1, V1alpha2, V1alpha1]);
    assert_eq!(loaded.backend, default.backend);
    assert_eq!(loaded.backend, Endpoint::Memory);
    assert_eq!(loaded.image_backend, default.image_backend);
    assert_eq!(loaded.backend_version, default.backend_version);
    assert_eq!(loaded.backend_version, None);
    assert_eq!(loaded.max_message_size, default.max_message_size);
    assert_eq!(loaded.max_message_size, DEFAULT_MAX_MESSAGE_SIZE);
    assert_eq!(loaded.log_level, default.log_level);
    assert_eq!(loaded.log_format, default.log_format);
    assert!(loaded.loss_policy.is_empty());
    assert!(default.loss_policy.is_empty());
}

#[test]
fn every_key_set_parses_to_its_value() {
    let config = Config::parse(
        r#"
listen:
  path: /var/run/bridge/kubelet.sock
  mode: "0600"
  group: kube
  versions: [v1alpha2]
backend:
  endpoint: unix:///run/containerd/containerd.sock
  image_endpoint: unix:///run/images/images.sock
  version: v1alpha2
max_message_size: 4194304
loss_policy:
  ContainerConfig.stop_signal: allow
  LinuxContainerSecurityContext.supplemental_groups_policy: warn
  config.linux.security_context.run_as_group: reject
log:
  level: debug
  format: json
"#,
    )
    .expect("a full config parses");
    assert_eq!(config.listen_path, PathBuf::from("/var/run/bridge/kubelet.sock"));
    assert_eq!(config.listen_mode, 0o600);
    assert_eq!(config.listen_group.as_deref(), Some("kube"));
    assert_eq!(config.versions, vec![V1alpha2]);
    assert_eq!(config.backend, Endpoint::Unix(PathBuf::from("/run/containerd/containerd.sock")));
    assert_eq!(config.image_backend, Some(Endpoint::Unix(PathBuf::from("/run/images/images.sock"))));
    assert_eq!(config.backend_version, Some(V1alpha2));
    assert_eq!(config.max_message_size, 4 * 1024 * 1024);
    assert_eq!(config.loss_policy.len(), 3);
    assert_eq!(config.loss_policy["ContainerConfig.stop_signal"], Action::Allow);
    assert_eq!(config.loss_policy["LinuxContainerSecurityContext.supplemental_groups_policy"], Action::Warn);
    assert_eq!(config.loss_policy["config.linux.security_context.run_as_group"], Action::Reject);
    assert_eq!(config.log_level, "debug");
    assert_eq!(config.log_format, LogFormat::Json);
}

#[test]
fn other_accepted_spellings() {
    let config = Config::parse(
        "listen: {mode: \"0o640\"}\nbackend: {version: v1}\nlog: {level: \"cri_bridge=debug\", format: text}\n",
    )
    .unwrap();
    assert_eq!(config.listen_mode, 0o640);
    assert_eq!(config.backend_version, Some(V1));
    assert_eq!(config.log_level, "cri_bridge=debug");
    assert_eq!(config.log_format, LogFormat::Text);
    let config = Config::parse("backend: {version: auto, endpoint: memory}\n").unwrap();
    assert_eq!(config.backend_version, None);
    assert_eq!(config.backend, Endpoint::Memory);
}

#[test]
fn unknown_keys_are_named() {
    let message = error("listne:\n  path: /x.sock\n");
    assert!(message.contains("listne"), "{message}");
    let message = error("listen: {pth: x}\n");
    assert!(message.contains("pth"), "{message}");
    let message = error("backend: {endpiont: memory}\n");
    assert!(message.contains("endpiont"), "{message}");
    let message = error("log: {colour: true}\n");
    assert!(message.contains("colour"), "{message}");
}

#[test]
fn bad_listen_values_name_the_key() {
    for mode in ["\"rw-rw----\"", "\"0999\"", "\"01777\"", "\"\""] {
        invalid(&format!("listen: {{mode: {mode}}}\n"), "listen.mode");
    }
    let message = invalid("listen: {versions: [v1, v2]}\n", "listen.versions");
    assert!(message.contains("v2"), "{message}");
    let message = invalid("listen: {versions: []}\n", "listen.versions");
    assert!(message.contains("at least one"), "{message}");
}

#[test]
fn bad_backend_values_name_the_key() {
    for endpoint in ["tcp://localhost:1234", "unix://relative.sock", "/run/containerd/containerd.sock", "memry"] {
        let message = invalid(&format!("backend: {{endpoint: \"{endpoint}\"}}\n"), "backend.endpoint");
        assert!(message.contains(endpoint), "{message}");
    }
    let message = invalid("backend: {image_endpoint: \"http://images\"}\n", "backend.image_endpoint");
    assert!(message.contains("http://images"), "{message}");
    // `memory` for images only makes sense when the runtime is the in-memory one too.
    invalid("backend: {endpoint: \"unix:///run/c.sock\", image_endpoint: memory}\n", "backend.image_endpoint");
    let message = invalid("backend: {version: v2}\n", "backend.version");
    assert!(message.contains("v2"), "{message}");
}

#[test]
fn too_small_message_size_names_the_key() {
    let message = invalid("max_message_size: 100\n", "max_message_size");
    assert!(message.contains("100"), "{message}");
    Config::parse("max_message_size: 4096\n").expect("4096 is the smallest accepted size");
}

#[test]
fn loss_policy_is_validated() {
    let message = invalid("loss_policy:\n  ContainerConfig.stop_signal: ignore\n", "loss_policy");
    assert!(message.contains("ignore"), "{message}");
    assert!(message.contains("ContainerConfig.stop_signal"), "{message}");
    let message = invalid("loss_policy:\n  Foo.bar: warn\n", "loss_policy");
    assert!(message.contains("Foo.bar"), "{message}");
    let message = invalid("loss_policy:\n  ContainerConfig.no_such_field: warn\n", "loss_policy");
    assert!(message.contains("ContainerConfig.no_such_field"), "{message}");
    let message = invalid("loss_policy:\n  config.linux.no_such_field: warn\n", "loss_policy");
    assert!(message.contains("no_such_field"), "{message}");

    let config = Config::parse(
        "loss_policy:\n  LinuxContainerSecurityContext.supplemental_groups_policy: allow\n  \
         config.linux.security_context.run_as_group: warn\n  CreateContainerRequest.#99: reject\n",
    )
    .expect("field, path and unknown-number keys are accepted");
    assert_eq!(config.loss_policy["LinuxContainerSecurityContext.supplemental_groups_policy"], Action::Allow);
    assert_eq!(config.loss_policy["config.linux.security_context.run_as_group"], Action::Warn);
    assert_eq!(config.loss_policy["CreateContainerRequest.#99"], Action::Reject);
}

#[test]
fn bad_log_values_name_the_key() {
    let message = invalid("log: {format: xml}\n", "log.format");
    assert!(message.contains("xml"), "{message}");
    let message = invalid("log: {level: \"[[[\"}\n", "log.level");
    assert!(message.contains("[[[") && message.contains("levels and targets only"), "{message}");
    let message = invalid("log: {level: \"cri_bridge=loud\"}\n", "log.level");
    assert!(message.contains("loud"), "{message}");
}

#[test]
fn wrong_type_is_a_parse_error_naming_the_key() {
    let err = Config::parse("max_message_size: lots\n").unwrap_err();
    assert!(matches!(err, ConfigError::Syntax { .. }), "{err:?}");
    assert!(err.to_string().contains("max_message_size"), "{err}");
    let err = Config::parse("listen:\n  versions: v1\n").unwrap_err();
    assert!(matches!(err, ConfigError::Syntax { .. }), "{err:?}");
    assert!(err.to_string().contains("versions"), "{err}");
}

#[test]
fn load_names_the_file_in_parse_errors() {
    let dir = std::env::temp_dir().join(format!("crib-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(&file, "max_message_size: lots\n").unwrap();
    let err = Config::load(&file).unwrap_err();
    let message = err.to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(matches!(err, ConfigError::Parse { .. }), "{err:?}");
    assert!(message.contains(&file.display().to_string()), "{message}");
    assert!(message.contains("max_message_size"), "{message}");
}

#[test]
fn overrides_win_over_the_file() {
    let file = Config::parse(
        "listen: {path: /file/listen.sock}\nbackend: {endpoint: \"unix:///file/runtime.sock\", version: v1}\n",
    )
    .unwrap();
    let config = file
        .clone()
        .apply(Overrides {
            listen: Some(PathBuf::from("/flag/listen.sock")),
            backend: Some("unix:///flag/runtime.sock".into()),
            image_backend: Some("unix:///flag/images.sock".into()),
            backend_version: Some("v1alpha1".into()),
            splice: true,
        })
        .unwrap();
    // The splice is gone: the flag and the key still load (a node must not stop on an
    // upgrade), each noted to be warned of.
    assert_eq!(config.gone.iter().map(|g| g.key).collect::<Vec<_>>(), ["--splice"]);
    assert!(file.gone.is_empty());
    for key in ["splice: true\n", "splice: false\n"] {
        let gone = Config::parse(key).unwrap().gone;
        assert_eq!(gone.len(), 1, "{key}");
        assert!(gone[0].key == "splice" && gone[0].why.contains("no effect"), "{gone:?}");
    }
    assert_eq!(config.listen_path, PathBuf::from("/flag/listen.sock"));
    assert_eq!(config.backend, Endpoint::Unix(PathBuf::from("/flag/runtime.sock")));
    assert_eq!(config.image_backend, Some(Endpoint::Unix(PathBuf::from("/flag/images.sock"))));
    assert_eq!(config.backend_version, Some(V1alpha1));

    // `auto` unpins; no overrides change nothing.
    let config =
        file.clone().apply(Overrides { backend_version: Some("auto".into()), ..Overrides::default() }).unwrap();
    assert_eq!(config.backend_version, None);
    assert_eq!(config.listen_path, PathBuf::from("/file/listen.sock"));
    let config = file.apply(Overrides::default()).unwrap();
    assert_eq!(config.listen_path, PathBuf::from("/file/listen.sock"));
    assert_eq!(config.backend, Endpoint::Unix(PathBuf::from("/file/runtime.sock")));
    assert_eq!(config.backend_version, Some(V1));
}

#[test]
fn bad_overrides_name_the_flag() {
    let err =
        Config::default().apply(Overrides { backend: Some("tcp://x".into()), ..Overrides::default() }).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("--backend"), "{message}");
    assert!(message.contains("tcp://x"), "{message}");
    let err =
        Config::default().apply(Overrides { backend_version: Some("v3".into()), ..Overrides::default() }).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("--backend-version"), "{message}");
    assert!(message.contains("v3"), "{message}");
    let err = Config::default()
        .apply(Overrides { image_backend: Some("images".into()), ..Overrides::default() })
        .unwrap_err();
    assert!(err.to_string().contains("--image-backend"), "{err}");
}

#[test]
fn empty_file_is_the_defaults() {
    for text in ["", "\n\n", "# only a comment\n  # another\n"] {
        let config = Config::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let default = Config::default();
        assert_eq!(config.listen_path, default.listen_path);
        assert_eq!(config.listen_mode, default.listen_mode);
        assert_eq!(config.versions, default.versions);
        assert_eq!(config.backend, default.backend);
        assert_eq!(config.backend_version, default.backend_version);
        assert_eq!(config.max_message_size, default.max_message_size);
        assert_eq!(config.log_format, default.log_format);
        assert!(config.loss_policy.is_empty());
    }
    let dir = std::env::temp_dir().join(format!("crib-config-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("empty.yaml");
    std::fs::write(&file, "").unwrap();
    let loaded = Config::load(&file);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(loaded.unwrap().listen_path, Config::default().listen_path);
}

#[test]
fn missing_file_names_the_path() {
    let path = Path::new("/nonexistent/cri-bridge/config.yaml");
    let err = Config::load(path).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/cri-bridge/config.yaml"), "{err}");
}

#[test]
fn listening_on_a_backend_socket_is_refused_naming_both_keys() {
    let cases = [
        "listen: {path: /run/x.sock}\nbackend: {endpoint: \"unix:///run/x.sock\"}\n",
        "listen: {path: /run/x.sock}\nbackend: {endpoint: \"unix:///run/r.sock\", image_endpoint: \"unix:///run/x.sock\"}\n",
    ];
    for (text, key) in cases.iter().zip(["backend.endpoint", "backend.image_endpoint"]) {
        let error = Config::parse(text).and_then(|c| c.apply(Overrides::default())).unwrap_err().to_string();
        assert!(error.contains("listen.path") && error.contains(key), "{text}: {error}");
    }
    // The same through the command line's overrides.
    let error = Config::parse("")
        .unwrap()
        .apply(Overrides {
            listen: Some(PathBuf::from("/run/containerd/containerd.sock")),
            backend: Some("unix:///run/containerd/containerd.sock".into()),
            ..Overrides::default()
        })
        .unwrap_err()
        .to_string();
    assert!(error.contains("listen.path") && error.contains("backend.endpoint"), "{error}");
}

#[test]
fn a_log_level_that_is_not_ascii_is_refused_naming_the_key_not_panicked_on() {
    // Found by fuzzing (fuzz/regressions/config/): tracing-subscriber's parser panicked on it.
    let error = Config::parse("log: {level: \"\n[\u{63e}{\"}\n").expect_err("refused").to_string();
    assert!(error.contains("log.level") && error.contains("not accepted"), "{error}");
}

#[test]
fn a_log_level_with_a_field_filter_is_refused_at_once_not_compiled() {
    // Found by fuzzing (fuzz/regressions/config/): a field filter's value is a regex compiled to
    // a DFA whose size doubles with each `.`; this one took minutes.
    let started = std::time::Instant::now();
    let error = Config::parse("log: {level: 'x[{a=a....................}]'}\n").expect_err("refused").to_string();
    assert!(error.contains("log.level") && error.contains("field filters are not supported"), "{error}");
    // Refused before anything is compiled (compiling took minutes); the bound allows for load.
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "took {:?}", started.elapsed());
    let error = Config::parse(&format!("log: {{level: {}}}\n", "a".repeat(2000))).expect_err("refused").to_string();
    assert!(error.contains("log.level") && error.contains("at most 1024"), "{error}");
}

#[test]
fn a_log_level_of_targets_and_levels_is_accepted() {
    for filter in ["warn", "cri_bridge=debug,h2=warn", "cri_bridge::relay=trace, info", "off"] {
        let config = Config::parse(&format!("log: {{level: \"{filter}\"}}\n")).expect(filter);
        assert_eq!(config.log_level, filter);
    }
}

#[test]
fn a_config_nested_deep_enough_to_stall_the_yaml_parser_is_refused_at_once() {
    // 100,000 nested `[` kept the YAML parser busy for over 30 s (its time grows with the square
    // of the nesting).
    let started = std::time::Instant::now();
    let text = format!("loss_policy: {}\n", "[".repeat(100_000));
    let error = Config::parse(&text).expect_err("refused").to_string();
    assert!(error.contains("at most 1024"), "{error}");
    // Refused before the parser stalls (over 30 s); the bound allows for load.
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "took {:?}", started.elapsed());
    // What a real config holds is far below the bound.
    Config::parse("listen:\n  versions: [v1, v1alpha2]\nlimits: {connections: 512}\n").expect("accepted");
}

#[test]
fn a_config_file_is_read_up_to_its_limit_only() {
    let dir = std::env::temp_dir().join(format!("crib-config-size-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("big.yaml");
    std::fs::write(&path, format!("# {}\n", "x".repeat(2 << 20))).unwrap();
    let error = Config::load(&path).expect_err("refused").to_string();
    assert!(error.contains(&path.display().to_string()) && error.contains("larger than 1048576 bytes"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `endpoints`, `listen.mutating` and `brownout` (issue 38): each policy parses, and each
/// mistake is refused naming its key.
#[test]
fn scoped_sockets_mutating_callers_and_brownouts_parse_and_their_mistakes_name_the_key() {
    use cri_bridge::access::brownout::Brownout;
    use cri_bridge::access::Policy;
    use std::time::Duration;
    let config = Config::parse(
        r#"
listen:
  mutating:
    uids: [0]
    gids: [990]
endpoints:
  - path: /run/cri-bridge/read-only.sock
    policy: read-only
    mode: "0660"
    group: "0"
  - path: /run/cri-bridge/images.sock
    policy: images
  - path: /run/cri-bridge/pod.sock
    policy: pod-scoped
    host_paths: [/var/log/pods]
  - path: /run/cri-bridge/ci.sock
    allow: [RuntimeService/ListContainers, RuntimeService/ContainerStats]
brownout:
  v1alpha2: deny
  v1alpha1:
    every: 1h
    for: 10m
"#,
    )
    .unwrap();
    let policies: Vec<Policy> = config.endpoints.iter().map(|e| e.policy.clone()).collect();
    assert_eq!(
        policies,
        vec![
            Policy::ReadOnly,
            Policy::Images,
            Policy::PodScoped {
                host_paths: vec![PathBuf::from("/var/log/pods")],
                seccomp_profiles: Vec::new(),
                apparmor_profiles: Vec::new(),
            },
            Policy::Allow(vec!["RuntimeService/ListContainers".into(), "RuntimeService/ContainerStats".into()]),
        ]
    );
    assert_eq!(config.endpoints[0].group.as_deref(), Some("0"));
    let mutating = config.mutating.unwrap();
    assert_eq!((mutating.uids, mutating.gids), (vec![0], vec![990]));
    let hour = Brownout::Schedule { every: Duration::from_secs(3600), refused: Duration::from_secs(600) };
    assert_eq!(config.brownout, vec![(V1alpha1, hour), (V1alpha2, Brownout::Always)]);

    let endpoint = |rest: &str| format!("endpoints:\n  - path: /run/x.sock\n    {rest}\n");
    assert!(invalid(&endpoint("policy: everything"), "endpoints").contains("everything"));
    assert!(invalid(&endpoint("policy: allow"), "endpoints").contains("non-empty `allow`"));
    assert!(invalid(&endpoint("allow: [RuntimeService/ListContainer]"), "endpoints").contains("ListContainer\""));
    assert!(
        invalid(&endpoint("policy: read-only\n    allow: [RuntimeService/Version]"), "endpoints").contains("`allow`")
    );
    assert!(invalid(&endpoint("policy: pod-scoped\n    host_paths: [/var/../etc]"), "endpoints").contains("host_paths"));
    assert!(invalid(&endpoint("policy: images\n    host_paths: [/var]"), "endpoints").contains("host_paths"));
    invalid(&endpoint("policy: read-only\n    mode: \"999\""), "endpoints[].mode");
    invalid("endpoints:\n  - policy: read-only\n", "endpoints[].path");
    let twice = "endpoints:\n  - path: /run/x.sock\n    policy: images\n  - path: /run/x.sock\n    policy: read-only\n";
    assert!(invalid(twice, "endpoints").contains("of its own"));
    let main = "listen:\n  path: /run/x.sock\nendpoints:\n  - path: /run/x.sock\n    policy: images\n";
    invalid(main, "endpoints");
    invalid("listen:\n  mutating: {}\n", "listen.mutating");
    assert!(invalid("brownout:\n  v1alpha2: sometimes\n", "brownout").contains("sometimes"));
    assert!(invalid("brownout:\n  v1alpha2:\n    every: 10m\n    for: 1h\n", "brownout").contains("shorter"));
    assert!(invalid("brownout:\n  v1alpha2:\n    every: 1 hour\n    for: 1m\n", "brownout").contains("1 hour"));
    invalid("brownout:\n  v2: deny\n", "brownout");
    assert!(invalid("listen:\n  versions: [v1]\nbrownout:\n  v1alpha2: deny\n", "brownout").contains("not served"));
    assert!(error("endpoints:\n  - path: /run/x.sock\n    policy: images\n    colour: red\n").contains("colour"));
}

#[test]
fn the_examples_backends_and_routes_load_as_written() {
    // The commented example, uncommented, on its own (it replaces `backend`).
    let text = std::fs::read_to_string(example_path()).unwrap();
    let start = text.find("# backends:").expect("config.example.yaml shows `backends`");
    let block: String = text[start..]
        .lines()
        .take_while(|l| l.starts_with('#'))
        .filter(|l| !l.trim_start_matches('#').trim_start().starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or("")))
        .collect();
    let config = Config::parse(&block).unwrap_or_else(|e| panic!("{e}:\n{block}"));
    let routing = config.routing.expect("backends");
    let names: Vec<_> = routing.backends.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["docker", "containerd"]);
    assert_eq!(routing.route("docker"), Some((0, "")));
    assert_eq!(routing.route("runc"), Some((1, "runc")));
    assert_eq!(routing.route(""), Some((1, "")));
    assert_eq!(config.backend, Endpoint::Unix("/run/containerd/containerd.sock".into()));
}

fn refused_routing(text: &str) -> String {
    Config::parse(text).expect_err("refused").to_string()
}

const TWO_BACKENDS: &str = "backends:\n  - name: docker\n    endpoint: unix:///run/d.sock\n  - name: containerd\n    endpoint: unix:///run/c.sock\n";

#[test]
fn several_backends_load_with_the_default_as_the_backend() {
    let config = Config::parse(&format!(
        "{TWO_BACKENDS}routes:\n  default: containerd\n  handlers:\n    kata: {{ backend: containerd }}\n"
    ))
    .unwrap();
    let routing = config.routing.as_ref().unwrap();
    assert_eq!(routing.route(""), Some((1, "")));
    assert_eq!(routing.route("kata"), Some((1, "kata")));
    assert_eq!(routing.route("gvisor"), None);
    assert_eq!(config.backend.to_string(), "unix:///run/c.sock");
    // One backend in `backends` is the default without saying so.
    let one = Config::parse("backends:\n  - name: docker\n    endpoint: unix:///run/d.sock\n").unwrap();
    assert_eq!(one.routing.unwrap().default, 0);
}

#[test]
fn every_mistake_is_named() {
    assert!(refused_routing(TWO_BACKENDS).contains("routes.default"));
    assert!(refused_routing(&format!("{TWO_BACKENDS}routes:\n  default: crio\n")).contains("\"crio\""));
    let both = format!("backend:\n  endpoint: unix:///run/x.sock\n{TWO_BACKENDS}routes:\n  default: docker\n");
    assert!(refused_routing(&both).contains("not both"));
    assert!(refused_routing("routes:\n  default: x\n").contains("routes need `backends`"));
    let twice =
        "backends:\n  - name: a\n    endpoint: unix:///run/a.sock\n  - name: a\n    endpoint: unix:///run/b.sock\n";
    assert!(refused_routing(twice).contains("named twice"));
    let same =
        "backends:\n  - name: a\n    endpoint: unix:///run/a.sock\n  - name: b\n    endpoint: unix:///run/a.sock\n";
    assert!(refused_routing(same).contains("two backends"));
    assert!(
        refused_routing("backends:\n  - name: Docker!\n    endpoint: unix:///run/a.sock\n").contains("backends.name")
    );
    let empty_handler =
        format!("{TWO_BACKENDS}routes:\n  default: docker\n  handlers:\n    \"\": {{ backend: docker }}\n");
    assert!(refused_routing(&empty_handler).contains("routes.default"));
    let listen = format!("listen:\n  path: /run/d.sock\n{TWO_BACKENDS}routes:\n  default: docker\n");
    assert!(refused_routing(&listen).contains("listen.path"));
}

#[test]
fn a_reload_names_backends_and_routes_each_when_it_changed() {
    use cri_bridge::config::changed_keys;
    let one = Config::parse("backend:\n  endpoint: unix:///run/d.sock\n").unwrap();
    let routed = |text: &str| Config::parse(text).unwrap_or_else(|e| panic!("{e}:\n{text}")).routing;
    let docker_default = routed(&format!("{TWO_BACKENDS}routes:\n  default: docker\n"));
    let containerd_default = routed(&format!("{TWO_BACKENDS}routes:\n  default: containerd\n"));
    let with_handler = routed(&format!(
        "{TWO_BACKENDS}routes:\n  default: containerd\n  handlers:\n    docker: {{ backend: docker, handler: \"\" }}\n"
    ));
    // The same backends in another order and the same routes: nothing changed.
    let reordered = routed(
        "backends:\n  - name: containerd\n    endpoint: unix:///run/c.sock\n  - name: docker\n    endpoint: unix:///run/d.sock\n\
         routes:\n  default: containerd\n",
    );
    let none: Vec<&str> = Vec::new();
    assert_eq!(changed_keys(docker_default.as_ref(), docker_default.as_ref()), none);
    assert_eq!(changed_keys(None, docker_default.as_ref()), ["backends", "routes"]);
    assert_eq!(changed_keys(one.routing.as_ref(), containerd_default.as_ref()), ["backends", "routes"]);
    assert_eq!(changed_keys(docker_default.as_ref(), containerd_default.as_ref()), ["routes"]);
    assert_eq!(changed_keys(containerd_default.as_ref(), with_handler.as_ref()), ["routes"]);
    assert_eq!(changed_keys(containerd_default.as_ref(), reordered.as_ref()), ["backends"]);
}

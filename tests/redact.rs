//! Registry secrets never leave the request: `AuthConfig.password`, `auth`, `identity_token` and
//! `registry_token` (`[debug_redact = true]` from cri-api v0.34) appear in no log line (at
//! `trace`, every target), no error a caller gets and no metric, whether the request is passed,
//! converted (v1 → v1alpha2, v1alpha1 → v1 → v1alpha2), refused by the loss policy or rejected
//! as undecodable. cri-bridge runs as shipped (the binary, with its in-memory runtime).

mod common;

use bytes::Bytes;
use common::process::{wait_for_listener, Reaped};
use common::TempDir;
use cri_bridge::api::{v1, v1alpha1};
use cri_bridge::grpc::{CriClient, Rpc};
use prost::Message;
use std::process::{Command, Stdio};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Request;

const BIN: &str = env!("CARGO_BIN_EXE_cri-bridge");
const SECRETS: [&str; 4] = ["Pa55-w0rd-SECRET", "YXV0aC1TRUNSRVQ=", "identity-SECRET-token", "registry-SECRET-token"];

fn auth_v1() -> v1::AuthConfig {
    v1::AuthConfig {
        username: "robot".into(),
        password: SECRETS[0].into(),
        auth: SECRETS[1].into(),
        server_address: "registry.example".into(),
        identity_token: SECRETS[2].into(),
        registry_token: SECRETS[3].into(),
    }
}

fn pull_v1(auth: v1::AuthConfig) -> Vec<u8> {
    let image = v1::ImageSpec { image: "registry.example/app:1".into(), ..Default::default() };
    v1::PullImageRequest { image: Some(image), auth: Some(auth), sandbox_config: None }.encode_to_vec()
}

async fn scrape(socket: &std::path::Path) -> String {
    let mut stream = tokio::net::UnixStream::connect(socket).await.expect("the metrics socket");
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    text
}

#[tokio::test]
async fn registry_secrets_appear_in_no_log_error_or_metric() {
    let dir = TempDir::new("redact");
    let socket = dir.path("bridge.sock");
    let metrics = dir.path("metrics.sock");
    let config = dir.path("config.yaml");
    std::fs::write(
        &config,
        format!(
            "listen:\n  path: {}\nbackend:\n  endpoint: memory\n  version: v1alpha2\nlog:\n  level: trace\nmetrics:\n  listen: {}\n",
            socket.display(),
            metrics.display()
        ),
    )
    .unwrap();
    let log = dir.path("stderr.log");
    let mut bridge = Reaped(
        Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for_listener(&mut bridge.0, &socket).await;

    let client = CriClient::new(common::channel(&socket), 1 << 20);
    let call = |path: &'static str, body: Vec<u8>| {
        let client = client.clone();
        async move {
            let rpc = Rpc::from_path(path).unwrap();
            client.unary(rpc, Request::new(Bytes::from(body))).await.map(|r| r.into_inner())
        }
    };
    let mut answers = Vec::new();
    // Converted v1 → v1alpha2.
    answers.push(call("/runtime.v1.ImageService/PullImage", pull_v1(auth_v1())).await);
    // v1alpha1 → v1 → v1alpha2.
    let auth = v1alpha1::AuthConfig {
        username: "robot".into(),
        password: SECRETS[0].into(),
        auth: SECRETS[1].into(),
        server_address: "registry.example".into(),
        identity_token: SECRETS[2].into(),
        registry_token: SECRETS[3].into(),
    };
    let image = v1alpha1::ImageSpec { image: "registry.example/app:1".into() };
    let old = v1alpha1::PullImageRequest { image: Some(image), auth: Some(auth), sandbox_config: None };
    answers.push(call("/runtime.ImageService/PullImage", old.encode_to_vec()).await);
    // Refused by the loss policy: a field cri-bridge does not know, inside the AuthConfig.
    let mut auth = auth_v1().encode_to_vec();
    prost::encoding::encode_varint(99 << 3, &mut auth);
    prost::encoding::encode_varint(1, &mut auth);
    let mut refused = Vec::new();
    prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut refused);
    prost::encoding::encode_varint(auth.len() as u64, &mut refused);
    refused.extend_from_slice(&auth);
    answers.push(call("/runtime.v1.ImageService/PullImage", refused).await);
    // Undecodable: a password that is not UTF-8, beside the others.
    let mut broken = pull_v1(auth_v1());
    let at = broken.windows(SECRETS[0].len()).position(|w| w == SECRETS[0].as_bytes()).unwrap();
    broken[at + SECRETS[0].len() - 1] = 0xff;
    answers.push(call("/runtime.v1.ImageService/PullImage", broken).await);

    let outcomes: Vec<String> = answers
        .iter()
        .map(|a| match a {
            Ok(bytes) => format!("OK {bytes:?}"),
            Err(status) => format!("{:?} {}", status.code(), status.message()),
        })
        .collect();
    assert!(answers[0].is_ok() && answers[1].is_ok(), "the converted pulls pass: {outcomes:#?}");
    assert_eq!(answers[2].as_ref().unwrap_err().code(), tonic::Code::Unimplemented, "{outcomes:#?}");
    assert!(answers[2].as_ref().unwrap_err().message().contains("auth.#99"), "{outcomes:#?}");
    assert!(answers[3].is_err(), "{outcomes:#?}");
    let scraped = scrape(&metrics).await;
    drop(bridge);
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logs.lines().count() > 20, "trace logs were written:\n{logs}");
    for secret in SECRETS {
        let prefix = &secret[..secret.len() - 1];
        for (what, text) in [("log", &logs), ("metrics", &scraped), ("answers", &outcomes.join("\n"))] {
            assert!(!text.contains(prefix), "{secret:?} appears in the {what}:\n{text}");
        }
    }
}

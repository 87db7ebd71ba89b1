//! A CRI message as a Go runtime prints it with `encoding/json` (containerd's verbose info holds
//! the sandbox's `PodSandboxConfig` so), read back into protobuf bytes with the schema's field
//! names and numbers. Go's generated CRI types name each JSON key after the proto field
//! (`cgroup_parent`), print integers and enums as numbers, maps as objects, and leave empty
//! fields out; that is all this reads. A key the schema lacks is an error naming it: what a
//! runtime recorded and cri-bridge cannot carry is never dropped in silence.

use crate::api::SchemaInfo;
use prost::encoding::{encode_key, encode_varint, WireType};
use serde_json::Value;

/// `json` (an object) as message `index` of `schema`, encoded; `path` names the message in errors.
pub fn encode(schema: &SchemaInfo, index: usize, json: &Value, path: &str) -> Result<Vec<u8>, String> {
    let Value::Object(object) = json else {
        return Err(format!("{path}: not a JSON object"));
    };
    let message = &schema.messages[index];
    let mut out = Vec::new();
    for (key, value) in object {
        let Some(field) = message.fields.iter().find(|f| f.name == key) else {
            return Err(format!("{path}.{key}: no such field in {}", message.name));
        };
        let here = format!("{path}.{key}");
        let values = match (value, field.repeated) {
            (Value::Array(items), true) => items.iter().collect(),
            (Value::Null, _) => Vec::new(),
            (Value::Array(_), false) => return Err(format!("{here}: a list where one value belongs")),
            (single, _) => vec![single],
        };
        for value in values {
            match (value, field.message) {
                (Value::Object(_), Some(inner)) => {
                    let bytes = encode(schema, inner, value, &here)?;
                    length_delimited(field.number, &bytes, &mut out);
                }
                // A map<string, string> (the schema lists maps as neither message nor repeated).
                (Value::Object(entries), None) => {
                    for (k, v) in entries {
                        let Value::String(v) = v else {
                            return Err(format!("{here}.{k}: not a string"));
                        };
                        let mut entry = Vec::new();
                        length_delimited(1, k.as_bytes(), &mut entry);
                        length_delimited(2, v.as_bytes(), &mut entry);
                        length_delimited(field.number, &entry, &mut out);
                    }
                }
                (Value::String(text), None) => length_delimited(field.number, text.as_bytes(), &mut out),
                (Value::Bool(flag), None) => varint(field.number, u64::from(*flag), &mut out),
                (Value::Number(number), None) => {
                    // int32, int64 and enums: negative numbers as their 64-bit two's complement.
                    let n = number
                        .as_i64()
                        .map(|n| n as u64)
                        .or_else(|| number.as_u64())
                        .ok_or_else(|| format!("{here}: {number} is not an integer"))?;
                    varint(field.number, n, &mut out);
                }
                (Value::Null, _) => {}
                (other, _) => return Err(format!("{here}: {other} does not fit the field")),
            }
        }
    }
    Ok(out)
}

fn length_delimited(number: u32, bytes: &[u8], out: &mut Vec<u8>) {
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn varint(number: u32, value: u64, out: &mut Vec<u8>) {
    encode_key(number, WireType::Varint, out);
    encode_varint(value, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v1;
    use crate::version::CriVersion;
    use prost::Message;

    /// containerd 2.4's `PodSandboxStatus` verbose `info.config` for a kubelet's pod, as printed.
    const RECORDED: &str = r#"{"metadata":{"name":"web","uid":"u-1","namespace":"default","attempt":1},
        "hostname":"web","log_directory":"/var/log/pods/default_web_u-1",
        "dns_config":{"servers":["10.96.0.10"],"searches":["default.svc.cluster.local"],"options":["ndots:5"]},
        "port_mappings":[{"protocol":1,"container_port":80,"host_port":8080}],
        "labels":{"io.kubernetes.pod.uid":"u-1"},"annotations":{"kubernetes.io/config.source":"api"},
        "linux":{"cgroup_parent":"/kubepods/burstable/podu-1","security_context":{
            "namespace_options":{"pid":1},"run_as_user":{"value":0},"supplemental_groups":[1000,-1],
            "seccomp":{"profile_type":0}},"sysctls":{"net.ipv4.ip_unprivileged_port_start":"0"}}}"#;

    #[test]
    fn a_recorded_sandbox_config_reads_back_as_the_same_message() {
        let json: Value = serde_json::from_str(RECORDED).unwrap();
        let schema = CriVersion::V1.schema();
        let index = schema.message_index("PodSandboxConfig").unwrap();
        let bytes = encode(schema, index, &json, "config").unwrap();
        let config = v1::PodSandboxConfig::decode(&bytes[..]).unwrap();
        assert_eq!(config.metadata.as_ref().unwrap().uid, "u-1");
        assert_eq!(config.metadata.as_ref().unwrap().attempt, 1);
        assert_eq!(config.log_directory, "/var/log/pods/default_web_u-1");
        assert_eq!(config.port_mappings[0].host_port, 8080);
        assert_eq!(config.port_mappings[0].protocol, 1);
        assert_eq!(config.dns_config.as_ref().unwrap().options, vec!["ndots:5".to_string()]);
        let linux = config.linux.unwrap();
        assert_eq!(linux.cgroup_parent, "/kubepods/burstable/podu-1");
        assert_eq!(linux.sysctls["net.ipv4.ip_unprivileged_port_start"], "0");
        let context = linux.security_context.unwrap();
        assert_eq!(context.namespace_options.unwrap().pid, 1);
        assert_eq!(context.run_as_user.unwrap().value, 0);
        assert_eq!(context.supplemental_groups, vec![1000, -1]);
        assert_eq!(config.annotations["kubernetes.io/config.source"], "api");
    }

    #[test]
    fn what_the_schema_cannot_hold_is_named() {
        let schema = CriVersion::V1.schema();
        let index = schema.message_index("PodSandboxConfig").unwrap();
        let newer: Value = serde_json::from_str(r#"{"linux":{"cgroup_parent":"/x","newer_knob":true}}"#).unwrap();
        assert_eq!(
            encode(schema, index, &newer, "config").unwrap_err(),
            "config.linux.newer_knob: no such field in LinuxPodSandboxConfig"
        );
        let wrong: Value = serde_json::from_str(r#"{"hostname":["a"]}"#).unwrap();
        assert!(encode(schema, index, &wrong, "config").unwrap_err().starts_with("config.hostname"));
    }
}

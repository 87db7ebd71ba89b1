//! The generated types, clients and servers of the three CRI versions, and each version's schema
//! as a static table (messages with their field numbers, and RPCs).

/// CRI v1alpha1 (proto package `runtime`, Kubernetes ≤ 1.9).
pub mod v1alpha1 {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/runtime.rs"));
}

/// CRI v1alpha2 (proto package `runtime.v1alpha2`, Kubernetes 1.10–1.25).
pub mod v1alpha2 {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/runtime.v1alpha2.rs"));
}

/// CRI v1 (proto package `runtime.v1`, Kubernetes 1.20+).
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/runtime.v1.rs"));
}

/// The compiled descriptors of all three versions (a `FileDescriptorSet`).
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cri.fds"));

/// One version's schema: enough to walk wire bytes and to route RPCs.
#[derive(Debug)]
pub struct SchemaInfo {
    pub package: &'static str,
    pub messages: &'static [MessageInfo],
    /// How many fields all messages have together: `FieldInfo::id` is below it.
    pub field_count: usize,
    /// Sorted by name.
    pub enums: &'static [EnumInfo],
    pub rpcs: &'static [RpcInfo],
}

#[derive(Debug)]
pub struct MessageInfo {
    pub name: &'static str,
    /// Sorted by number.
    pub fields: &'static [FieldInfo],
}

#[derive(Debug)]
pub struct FieldInfo {
    /// Unique within the schema, dense from 0: an index for per-field tables.
    pub id: usize,
    pub number: u32,
    pub name: &'static str,
    /// Index in `SchemaInfo::messages` when the field holds a message (maps excluded).
    pub message: Option<usize>,
    /// Index in `SchemaInfo::enums` when the field holds an enum.
    pub enumeration: Option<usize>,
    /// `repeated` (maps are not).
    pub repeated: bool,
    /// The Kubernetes minor whose schema of this version first has the field (`25` for 1.25).
    pub since: u8,
}

#[derive(Debug)]
pub struct EnumInfo {
    /// `NamespaceMode`, `SecurityProfile.ProfileType`.
    pub name: &'static str,
    pub values: &'static [EnumValueInfo],
}

#[derive(Debug)]
pub struct EnumValueInfo {
    pub number: i32,
    pub name: &'static str,
    /// The Kubernetes minor whose schema of this version first has the value.
    pub since: u8,
}

impl EnumInfo {
    pub fn value(&self, number: i32) -> Option<&'static EnumValueInfo> {
        let values: &'static [EnumValueInfo] = self.values;
        values.iter().find(|v| v.number == number)
    }
}

#[derive(Debug)]
pub struct RpcInfo {
    /// `RuntimeService` or `ImageService`.
    pub service: &'static str,
    pub method: &'static str,
    pub request: &'static str,
    pub response: &'static str,
    pub server_streaming: bool,
    /// The Kubernetes minor whose schema first has the RPC (9 for every v1alpha1 RPC).
    pub since: u8,
}

impl SchemaInfo {
    pub fn message_index(&self, name: &str) -> Option<usize> {
        self.messages.iter().position(|m| m.name == name)
    }

    /// The field `Message.field`.
    pub fn field_by_name(&self, qualified: &str) -> Option<(&'static MessageInfo, &'static FieldInfo)> {
        let (message, field) = qualified.rsplit_once('.')?;
        let messages: &'static [MessageInfo] = self.messages;
        let m = messages.iter().find(|m| m.name == message)?;
        let fields: &'static [FieldInfo] = m.fields;
        Some((m, fields.iter().find(|f| f.name == field)?))
    }

    /// Per message index: whether the message can appear inside some RPC's request.
    pub fn request_messages(&self) -> Vec<bool> {
        let mut reachable = vec![false; self.messages.len()];
        let mut stack: Vec<usize> = self.rpcs.iter().filter_map(|r| self.message_index(r.request)).collect();
        while let Some(index) = stack.pop() {
            if std::mem::replace(&mut reachable[index], true) {
                continue;
            }
            stack.extend(self.messages[index].fields.iter().filter_map(|f| f.message));
        }
        reachable
    }

    pub fn rpc(&self, service: &str, method: &str) -> Option<&'static RpcInfo> {
        self.rpcs.iter().find(|r| r.service == service && r.method == method)
    }
}

impl MessageInfo {
    pub fn field(&self, number: u32) -> Option<&'static FieldInfo> {
        let fields: &'static [FieldInfo] = self.fields;
        fields.binary_search_by_key(&number, |f| f.number).ok().map(|i| &fields[i])
    }
}

include!(concat!(env!("OUT_DIR"), "/tables.rs"));

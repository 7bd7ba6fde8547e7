//! What every conversion shares: the one label interner and resource table of the snapshot, the notes collected
//! along the way, and the symbols of the keys conversions look at.

use karpenter_api::labels;

use crate::{
    requirements::{LabelInterner, Symbol},
    resources::ResourceTable,
};

use super::SnapshotNote;

/// Symbols interned up front.
#[derive(Debug, Clone, Copy)]
pub(super) struct Keys {
    pub zone: Symbol,
    pub capacity_type: Symbol,
    pub nodepool: Symbol,
    pub instance_type: Symbol,
    /// `""`: the host IP of a host port bound on every address.
    pub wildcard_ip: Symbol,
    pub tcp: Symbol,
}

pub(super) struct Context {
    pub interner: LabelInterner,
    pub table: ResourceTable,
    pub notes: Vec<SnapshotNote>,
    pub keys: Keys,
}

impl Context {
    pub fn new() -> Self {
        let mut interner = LabelInterner::new();
        let keys = Keys {
            zone: interner.intern_key(labels::ZONE_LABEL),
            capacity_type: interner.intern_key(labels::CAPACITY_TYPE_LABEL),
            nodepool: interner.intern_key(labels::NODEPOOL_LABEL),
            instance_type: interner.intern_key(labels::INSTANCE_TYPE_LABEL),
            wildcard_ip: interner.intern(""),
            tcp: interner.intern("TCP"),
        };
        Self {
            interner,
            table: ResourceTable::new(),
            notes: Vec::new(),
            keys,
        }
    }

    pub fn note(&mut self, object: impl Into<String>, message: impl Into<String>) {
        self.notes.push(SnapshotNote::new(object, message));
    }
}

/// `Kind ns/name` or `Kind name`, as notes name objects.
pub(super) fn describe(kind: &str, namespace: Option<&str>, name: Option<&str>) -> String {
    let name = name.unwrap_or("<unnamed>");
    match namespace {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

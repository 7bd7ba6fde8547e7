//! The audit log: one record per resource request, in the terms RBAC rules use, so a test can check that what
//! the controllers did is allowed by a chart's ClusterRole.

/// One resource request as RBAC sees it, plus its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// get, list, watch, create, update, patch, delete or deletecollection.
    pub verb: &'static str,
    /// API group ("" for core).
    pub group: String,
    /// Plural resource name, such as "pods".
    pub resource: String,
    /// "status", "scale", "eviction", "binding", or `None`.
    pub subresource: Option<String>,
    /// `None` for cluster-scoped resources and requests across all namespaces.
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The HTTP status code of the answer (200 for a watch that was opened).
    pub code: u16,
}

impl AuditRecord {
    /// `resource` or `resource/subresource`, as RBAC rules spell it.
    pub fn rbac_resource(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }
}

//! Adding and removing a finalizer without overwriting anyone else's (shared by the lifecycle, which puts
//! `karpenter.sh/termination` on NodeClaims and Nodes, and the terminator, which takes it off).
//!
//! A JSON merge patch replaces a list whole, so writing `metadata.finalizers` computed from a cached copy would
//! drop a finalizer another controller added after the cache read the object (or bring back one it removed).
//! As upstream (`client.MergeFromWithOptimisticLock`), the patch therefore carries the `metadata.resourceVersion`
//! the list was read at: the API server applies it only to that version and answers 409 Conflict otherwise.
//! On a conflict the object is read again from the API server and the change recomputed, a few times.

use std::fmt::Debug;

use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::api_errors::{is_conflict, is_not_found};

/// How many writes are tried when other writers keep changing the object in between.
pub const FINALIZER_ATTEMPTS: usize = 5;

/// What a finalizer change did.
#[derive(Debug, Clone, PartialEq)]
pub enum FinalizerWrite<K> {
    /// The list was written; the object as the API server returned it.
    Written(K),
    /// Nothing to do: the finalizer was already there (add) or not there (remove).
    Unchanged,
    /// The object no longer exists (or its name now belongs to another object).
    Gone,
}

impl<K> FinalizerWrite<K> {
    pub fn written(&self) -> bool {
        matches!(self, Self::Written(_))
    }
}

/// Adds `finalizer` to the object `cached` (as read from a cache) through `api`, keeping every other finalizer
/// the object has by the time the write lands.
pub async fn add_finalizer<K>(
    api: &Api<K>,
    cached: &K,
    finalizer: &str,
) -> Result<FinalizerWrite<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    edit_finalizers(api, cached, |current| {
        (!current.iter().any(|f| f == finalizer)).then(|| {
            let mut wanted = current.to_vec();
            wanted.push(finalizer.to_string());
            wanted
        })
    })
    .await
}

/// Removes `finalizer` from the object `cached` (as read from a cache) through `api`, keeping every other
/// finalizer the object has by the time the write lands. On an object being deleted, removing the last
/// finalizer lets the API server remove the object.
pub async fn remove_finalizer<K>(
    api: &Api<K>,
    cached: &K,
    finalizer: &str,
) -> Result<FinalizerWrite<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    edit_finalizers(api, cached, |current| {
        current
            .iter()
            .any(|f| f == finalizer)
            .then(|| current.iter().filter(|f| *f != finalizer).cloned().collect())
    })
    .await
}

/// The merge patch that sets the finalizers to `wanted`, only on the object at `resource_version`.
pub fn finalizer_patch(resource_version: &str, wanted: &[String]) -> serde_json::Value {
    // An empty list is written as its absence, as the API server stores it.
    let finalizers = if wanted.is_empty() {
        json!(null)
    } else {
        json!(wanted)
    };
    json!({"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}})
}

/// Applies `edit` (the list wanted from the current one, `None` when nothing is to change) to the object's
/// finalizers at the version read, reading it again after each conflict.
async fn edit_finalizers<K>(
    api: &Api<K>,
    cached: &K,
    edit: impl Fn(&[String]) -> Option<Vec<String>>,
) -> Result<FinalizerWrite<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let name = cached.name_any();
    let uid = cached.uid();
    let mut fresh: Option<K> = None;
    for attempt in 1..=FINALIZER_ATTEMPTS {
        let object = fresh.as_ref().unwrap_or(cached);
        let Some(wanted) = edit(object.finalizers()) else {
            return Ok(FinalizerWrite::Unchanged);
        };
        // A copy that was never stored has no version to lock on: the stored one is read first.
        if let Some(version) = object.resource_version() {
            let patch = Patch::Merge(finalizer_patch(&version, &wanted));
            match api.patch(&name, &PatchParams::default(), &patch).await {
                Ok(written) => return Ok(FinalizerWrite::Written(written)),
                Err(e) if is_not_found(&e) => return Ok(FinalizerWrite::Gone),
                Err(e) if is_conflict(&e) && attempt < FINALIZER_ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        }
        match api.get_opt(&name).await? {
            Some(stored) if uid.is_none() || stored.uid() == uid => fresh = Some(stored),
            _ => return Ok(FinalizerWrite::Gone),
        }
    }
    // Only a stored object without a resourceVersion gets here.
    Ok(FinalizerWrite::Unchanged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use karpenter_sim::{ApiServer, SystemClock};
    use kube::api::PostParams;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const OURS: &str = "karpenter.sh/termination";
    const THEIRS: &str = "example.com/other";

    /// A Node `name` with `finalizers`, created in a fresh API server; its Api and the copy a cache would hold.
    async fn node(
        name: &str,
        finalizers: &[&str],
    ) -> Result<(ApiServer, Api<Node>, Node), Box<dyn std::error::Error>> {
        let server = ApiServer::new(SystemClock);
        let api = Api::<Node>::all(server.client());
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "finalizers": finalizers},
        }))?;
        let cached = api.create(&PostParams::default(), &node).await?;
        Ok((server, api, cached))
    }

    /// Another controller adds its finalizer after the cache read the object (a merge patch of the list as it
    /// reads it then).
    async fn theirs_added(api: &Api<Node>, name: &str) -> TestResult {
        let stored = api.get(name).await?;
        let mut list = stored.finalizers().to_vec();
        list.push(THEIRS.to_string());
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": list}})),
        )
        .await?;
        Ok(())
    }

    #[tokio::test]
    async fn an_addition_keeps_a_finalizer_written_after_the_read() -> TestResult {
        let (_server, api, cached) = node("a", &["example.com/first"]).await?;
        theirs_added(&api, "a").await?;
        // The copy is stale: the locked patch conflicts, the object is read again, and the retry keeps theirs.
        let write = add_finalizer(&api, &cached, OURS).await?;
        assert!(write.written());
        assert_eq!(
            api.get("a").await?.finalizers(),
            ["example.com/first", THEIRS, OURS]
        );
        // Already there: nothing is written.
        let stored = api.get("a").await?;
        assert_eq!(
            add_finalizer(&api, &stored, OURS).await?,
            FinalizerWrite::Unchanged
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_removal_keeps_a_finalizer_written_after_the_read() -> TestResult {
        let (_server, api, cached) = node("b", &[OURS]).await?;
        theirs_added(&api, "b").await?;
        assert!(remove_finalizer(&api, &cached, OURS).await?.written());
        assert_eq!(api.get("b").await?.finalizers(), [THEIRS]);
        let stored = api.get("b").await?;
        assert_eq!(
            remove_finalizer(&api, &stored, OURS).await?,
            FinalizerWrite::Unchanged
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_stale_locked_patch_is_refused_with_a_conflict() -> TestResult {
        let (_server, api, cached) = node("c", &[]).await?;
        theirs_added(&api, "c").await?;
        let version = cached.resource_version().ok_or("no resourceVersion")?;
        let refused = api
            .patch(
                "c",
                &PatchParams::default(),
                &Patch::Merge(finalizer_patch(&version, &[OURS.to_string()])),
            )
            .await;
        assert!(matches!(&refused, Err(e) if is_conflict(e)), "{refused:?}");
        assert_eq!(api.get("c").await?.finalizers(), [THEIRS]);
        Ok(())
    }

    #[tokio::test]
    async fn removing_the_last_finalizer_of_a_deleted_object_lets_it_go_and_a_gone_object_is_gone()
    -> TestResult {
        let (_server, api, _) = node("d", &[OURS]).await?;
        api.delete("d", &Default::default()).await?;
        let deleting = api.get("d").await?;
        assert!(remove_finalizer(&api, &deleting, OURS).await?.written());
        assert!(api.get_opt("d").await?.is_none());
        assert_eq!(
            remove_finalizer(&api, &deleting, OURS).await?,
            FinalizerWrite::Gone
        );
        Ok(())
    }
}

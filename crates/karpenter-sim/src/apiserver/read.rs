//! Get and list (api-concepts "Retrieving large results sets in chunks", "Resource versions").
//!
//! A list answers with the current state and the server's current resourceVersion, so a watch from that version
//! misses nothing. `limit`/`continue` pagination is supported: the continue token carries the list's
//! resourceVersion and the last key returned, later pages read the live state after that key, and a token older
//! than the retained history is refused with 410 Expired, as the real server does after compaction. Objects are
//! shared, not copied, and their stored JSON text is written item by item, so listing 150,000 pods is linear and
//! parses nothing.

use std::{io::Write, sync::Arc};

use serde_json::Value;

use super::{
    resources::ResourceInfo,
    selectors::{FieldSelector, LabelSelector, Selectable},
    store::{Obj, ObjectKey, State},
};
use crate::error::ApiStatus;

/// What a list asks for.
#[derive(Debug, Clone, Default)]
pub struct ListParams {
    /// `None` lists across all namespaces.
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

/// One page of a list.
#[derive(Debug)]
pub struct ListPage {
    pub items: Vec<Obj>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
}

fn encode_token(rv: u64, key: &ObjectKey) -> String {
    let raw = format!("{rv}\n{}\n{}", key.namespace, key.name);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_token(token: &str) -> Option<(u64, ObjectKey)> {
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| token.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let mut parts = text.splitn(3, '\n');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, ObjectKey::new(parts.next()?, parts.next()?)))
}

pub fn matches<T: Selectable + ?Sized>(params: &ListParams, object: &T) -> bool {
    params.labels.matches(object) && params.fields.matches(object)
}

/// Lists one page of objects.
pub fn list(state: &State, info: &ResourceInfo, params: &ListParams) -> Result<ListPage, ApiStatus> {
    let store = state
        .store(&info.id())
        .ok_or_else(|| ApiStatus::not_found(&info.group, &info.plural, ""))?;
    let (list_rv, after) = match params.continue_token.as_deref() {
        Some(token) => {
            let (rv, key) =
                decode_token(token).ok_or_else(|| ApiStatus::bad_request("invalid continue token"))?;
            if rv < store.compacted_rv() {
                return Err(ApiStatus::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start \
                     a new list without the continue parameter, or use the continue token in this response to \
                     retrieve the remainder of the results. Continuing with the provided token results in an \
                     inconsistent list - objects that were created, modified, or deleted between the time the first \
                     chunk was returned and now may show up in the list.",
                ));
            }
            (rv, Some(key))
        }
        None => (state.rv, None),
    };
    let namespace = params.namespace.as_deref().filter(|ns| !ns.is_empty());
    let candidates: Box<dyn Iterator<Item = (&ObjectKey, &Obj)>> =
        match (params.fields.pinned_name(), namespace) {
            // kubectl get/wait/delete select one object by name: a lookup, not a scan.
            (Some(name), Some(ns)) => {
                Box::new(store.objects.get_key_value(&ObjectKey::new(ns, name)).into_iter())
            }
            (Some(name), None) if !info.namespaced => {
                Box::new(store.objects.get_key_value(&ObjectKey::new("", name)).into_iter())
            }
            _ => store.range(namespace),
        };
    let limit = params.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    let mut items = Vec::new();
    let mut continue_token = None;
    for (key, object) in candidates {
        if after.as_ref().is_some_and(|after| key <= after) || !matches(params, &**object) {
            continue;
        }
        if items.len() == limit {
            if let Some(last) = items.last().map(|o: &Obj| ObjectKey::of_stored(o)) {
                continue_token = Some(encode_token(list_rv, &last));
            }
            break;
        }
        items.push(Arc::clone(object));
    }
    Ok(ListPage {
        items,
        resource_version: list_rv,
        continue_token,
    })
}

/// The list's JSON, written item by item.
pub fn list_json(info: &ResourceInfo, api_version: &str, page: &ListPage) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + page.items.len() * 512);
    let mut metadata = serde_json::json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(token) = &page.continue_token {
        metadata["continue"] = Value::String(token.clone());
    }
    let _ = write!(
        out,
        r#"{{"kind":"{}","apiVersion":"{}","metadata":{},"items":["#,
        info.list_kind, api_version, metadata
    );
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item.json().as_bytes());
    }
    out.extend_from_slice(b"]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{apiserver::resources::ResourceId, clock::SystemClock};
    use serde_json::json;

    #[test]
    fn pagination_walks_all_items_once() -> Result<(), ApiStatus> {
        let mut state = State::new(Arc::new(SystemClock), 100, 1);
        let cms = ResourceId::core("configmaps");
        for i in 0..7 {
            state.commit(
                &cms,
                json!({"metadata": {"namespace": "default", "name": format!("c{i}")}}),
            );
        }
        let info = state
            .registry
            .by_id(&cms)
            .ok_or_else(|| ApiStatus::bad_request("no configmaps"))?;
        let mut params = ListParams {
            namespace: Some("default".into()),
            limit: Some(3),
            ..ListParams::default()
        };
        let mut names = Vec::new();
        loop {
            let page = list(&state, &info, &params)?;
            assert_eq!(
                page.resource_version, 7,
                "every page reports the first page's resourceVersion"
            );
            names.extend(page.items.iter().map(|o| o.name().to_string()));
            match page.continue_token {
                Some(token) => params.continue_token = Some(token),
                None => break,
            }
        }
        assert_eq!(names, ["c0", "c1", "c2", "c3", "c4", "c5", "c6"]);
        Ok(())
    }

    #[test]
    fn token_round_trip() {
        let key = ObjectKey::new("ns", "a-b");
        assert_eq!(decode_token(&encode_token(42, &key)), Some((42, key)));
    }
}

//! Watch streams (api-concepts "Efficient detection of changes", "Watch bookmarks", "Streaming lists").
//!
//! Each watch is a chunked stream of `{"type": ..., "object": ...}` lines. A filtered watch (namespace, labels,
//! fields) turns a modification that moves an object into its selection into ADDED and out of it into DELETED,
//! as the real watch cache does. With `allowWatchBookmarks`, a BOOKMARK carrying the current resourceVersion is
//! sent every minute (of tokio time, so paused-clock tests get them too). A watch from a resourceVersion older
//! than the retained history gets one ERROR event with a 410 Expired Status and ends; kube-runtime's watcher
//! then relists. The stream ends at `timeoutSeconds` or when the server drops all watches.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use futures::StreamExt;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Value, json};
use tokio::{sync::mpsc::UnboundedReceiver, time::Instant};

use super::{
    Shared,
    resources::ResourceId,
    response::ResponseBody,
    selectors::{FieldSelector, LabelSelector},
    store::{EventType, Stored, StoredEvent, WatchMsg},
};

const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

/// What one watch selects and how it reports.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    pub id: ResourceId,
    pub kind: String,
    pub api_version: String,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub bookmarks: bool,
    pub timeout: Duration,
    /// How a stored object is shown (events.k8s.io/v1 shows the stored core Events converted).
    pub convert: Option<fn(&Value) -> Value>,
}

impl WatchSpec {
    fn visible(&self, object: &Stored) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| object.namespace() == ns)
            && self.labels.matches(object)
            && self.fields.matches(object)
    }

    /// The event type this watch reports for a change, if it reports it at all.
    fn event_type(&self, event: &StoredEvent) -> Option<&'static str> {
        match event.kind {
            EventType::Added => self.visible(&event.object).then_some("ADDED"),
            EventType::Deleted => self.visible(&event.object).then_some("DELETED"),
            EventType::Modified => {
                let before = event.previous.as_deref().is_some_and(|p| self.visible(p));
                match (before, self.visible(&event.object)) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
        }
    }
}

/// One event line around an object's JSON text.
fn line(event_type: &str, object: &str) -> Bytes {
    let mut out = Vec::with_capacity(32 + object.len());
    out.extend_from_slice(br#"{"type":""#);
    out.extend_from_slice(event_type.as_bytes());
    out.extend_from_slice(br#"","object":"#);
    out.extend_from_slice(object.as_bytes());
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

struct WatchState {
    shared: Arc<Shared>,
    spec: WatchSpec,
    watcher: u64,
    rx: UnboundedReceiver<WatchMsg>,
    deadline: Instant,
    next_bookmark: Instant,
    done: bool,
}

impl Drop for WatchState {
    fn drop(&mut self) {
        self.shared.state().unwatch(&self.spec.id, self.watcher);
    }
}

impl WatchState {
    fn render(&mut self, msg: WatchMsg) -> Option<Bytes> {
        match msg {
            WatchMsg::Event(event) => self.spec.event_type(&event).map(|t| match self.spec.convert {
                Some(convert) => line(t, &convert(&event.object.value()).to_string()),
                None => line(t, event.object.json()),
            }),
            WatchMsg::Bookmark { rv, initial_end } if self.spec.bookmarks || initial_end => {
                let mut metadata = json!({"resourceVersion": rv.to_string()});
                if initial_end {
                    metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                }
                let object = json!({"kind": self.spec.kind, "apiVersion": self.spec.api_version, "metadata": metadata});
                Some(line("BOOKMARK", &object.to_string()))
            }
            WatchMsg::Bookmark { .. } => None,
            WatchMsg::Error(status) => {
                self.done = true;
                Some(line("ERROR", &status.to_json().to_string()))
            }
        }
    }

    /// The next line to send, or `None` when the watch ends.
    async fn next_line(&mut self) -> Option<Bytes> {
        loop {
            if self.done {
                return None;
            }
            tokio::select! {
                msg = self.rx.recv() => {
                    let msg = msg?;
                    if let Some(line) = self.render(msg) {
                        return Some(line);
                    }
                }
                _ = tokio::time::sleep_until(self.deadline) => return None,
                _ = tokio::time::sleep_until(self.next_bookmark), if self.spec.bookmarks => {
                    self.next_bookmark += BOOKMARK_EVERY;
                    let open = self.shared.state().bookmark(&self.spec.id, self.watcher);
                    if !open {
                        return None;
                    }
                }
            }
        }
    }
}

/// The streaming body of a watch whose messages arrive on `rx`.
pub fn body(
    shared: Arc<Shared>,
    spec: WatchSpec,
    watcher: u64,
    rx: UnboundedReceiver<WatchMsg>,
) -> ResponseBody {
    let now = Instant::now();
    let state = WatchState {
        shared,
        deadline: now + spec.timeout,
        next_bookmark: now + BOOKMARK_EVERY,
        spec,
        watcher,
        rx,
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut state| async move {
        let line = state.next_line().await?;
        Some((Ok(Frame::data(line)), state))
    });
    StreamBody::new(stream.boxed()).boxed_unsync()
}

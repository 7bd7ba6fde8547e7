//! The two HTTP servers every replica runs: `/metrics` on METRICS_PORT and `/healthz`, `/readyz` on
//! HEALTH_PROBE_PORT. `/readyz` answers 200 only once the state cache has listed every kind it watches, so a
//! rollout waits for a replica that could take over.

use std::net::{Ipv4Addr, SocketAddr};

use axum::{Router, body::Body, extract::State, http::StatusCode, http::header, routing::get};
use karpenter_state::ClusterState;
use tokio::net::TcpListener;

use crate::{OperatorError, state_metrics};

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<ClusterState>) -> (StatusCode, &'static str) {
    if state.synced() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "the state cache has not synced")
    }
}

/// The metrics router.
/// With `None` (DISABLE_CLUSTER_STATE_OBSERVABILITY) the state gauges are not computed.
pub fn metrics_router(state: Option<ClusterState>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(state): State<Option<ClusterState>>| async move {
                if let Some(state) = &state {
                    state_metrics::refresh(state);
                }
                // Streamed: at 5,000 nodes the per-node gauges are about 10 MB of text, written a chunk at a
                // time as the client reads rather than into one buffer first.
                let chunks = karpenter_metrics::metrics()
                    .encode_chunks()
                    .map(Ok::<_, std::convert::Infallible>);
                (
                    [(header::CONTENT_TYPE, karpenter_metrics::CONTENT_TYPE)],
                    Body::from_stream(futures::stream::iter(chunks)),
                )
            }),
        )
        .with_state(state)
}

/// The probes router.
pub fn probes_router(state: ClusterState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// Binds `port` on every interface (port 0: any free port) and returns the listener and its address.
pub async fn bind(what: &'static str, port: u16) -> Result<(TcpListener, SocketAddr), OperatorError> {
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
        .await
        .map_err(|source| OperatorError::Bind { what, port, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| OperatorError::Bind { what, port, source })?;
    Ok((listener, addr))
}

/// Serves `router` on `listener` until the future is dropped.
pub async fn serve(listener: TcpListener, router: Router) {
    if let Err(error) = axum::serve(listener, router).await {
        tracing::error!(%error, "HTTP server stopped");
    }
}

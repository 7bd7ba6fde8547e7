//! The two HTTP servers every replica runs: `/metrics` on METRICS_PORT and `/healthz`, `/readyz` on
//! HEALTH_PROBE_PORT. `/readyz` answers 200 only once the state cache has listed every kind it watches, so a
//! rollout waits for a replica that could take over.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use axum::{
    Router,
    body::Body,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    routing::get,
};
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
            get(
                |State(state): State<Option<ClusterState>>, headers: HeaderMap| async move {
                    if let Some(state) = &state {
                        state_metrics::refresh(state);
                    }
                    // Streamed: at 5,000 nodes the per-node gauges are about 10 MB of text, written a chunk at
                    // a time as the client reads rather than into one buffer first.
                    let chunks = karpenter_metrics::metrics().encode_chunks();
                    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
                    // OpenMetrics for whoever asks for it (Prometheus does); the classic text for the rest, as
                    // a Go client library answers (client-go's pod proxy GET, curl).
                    if karpenter_metrics::accepts_openmetrics(accept) {
                        let body = chunks.map(Ok::<_, std::convert::Infallible>);
                        (
                            [(header::CONTENT_TYPE, karpenter_metrics::CONTENT_TYPE)],
                            Body::from_stream(futures::stream::iter(body)),
                        )
                    } else {
                        let mut classic = karpenter_metrics::ClassicText::default();
                        let body = chunks
                            .map(move |chunk| Ok::<_, std::convert::Infallible>(classic.rewrite(&chunk)));
                        (
                            [(header::CONTENT_TYPE, karpenter_metrics::CLASSIC_CONTENT_TYPE)],
                            Body::from_stream(futures::stream::iter(body)),
                        )
                    }
                },
            ),
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

/// Binds `port` on every address of both families (port 0: any free port) and returns the listener and its
/// address: one IPv6 socket that takes IPv4 too, so the kubelet's probes and Prometheus reach it at the pod's
/// IP on an IPv6 cluster as on an IPv4 one. A host without IPv6 gets an IPv4 socket.
pub async fn bind(what: &'static str, port: u16) -> Result<(TcpListener, SocketAddr), OperatorError> {
    let error = |source| OperatorError::Bind { what, port, source };
    let listener = match dual_stack(port) {
        Ok(listener) => listener,
        // The address is taken (or not ours to take): the IPv4 socket would fail the same way.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::AddrInUse | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            return Err(error(e));
        }
        Err(_) => std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).map_err(error)?,
    };
    listener.set_nonblocking(true).map_err(error)?;
    let listener = TcpListener::from_std(listener).map_err(error)?;
    let addr = listener.local_addr().map_err(error)?;
    Ok((listener, addr))
}

/// `[::]:port` with IPV6_V6ONLY off, whatever the host's `net.ipv6.bindv6only` says.
fn dual_stack(port: u16) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    // As tokio's own bind: a restarted controller takes its port back while old connections linger.
    socket.set_reuse_address(true)?;
    socket.bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)).into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Serves `router` on `listener` until the future is dropped.
pub async fn serve(listener: TcpListener, router: Router) {
    if let Err(error) = axum::serve(listener, router).await {
        tracing::error!(%error, "HTTP server stopped");
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use tokio::net::TcpStream;

    use super::*;

    #[tokio::test]
    async fn the_listeners_take_ipv4_and_ipv6_connections_on_one_port() {
        let (listener, addr) = bind("probes", 0).await.unwrap();
        let server = tokio::spawn(serve(listener, Router::new().route("/healthz", get(healthz))));
        // A kubelet probes the pod IP of its cluster's family: both must reach the same server.
        for ip in [
            std::net::IpAddr::from(Ipv4Addr::LOCALHOST),
            Ipv6Addr::LOCALHOST.into(),
        ] {
            let stream = TcpStream::connect((ip, addr.port())).await;
            assert!(
                stream.is_ok(),
                "connecting to {ip} port {}: {stream:?}",
                addr.port()
            );
        }
        server.abort();
    }

    #[tokio::test]
    async fn a_port_in_use_is_an_error_naming_what_wanted_it() {
        let (_held, addr) = bind("metrics", 0).await.unwrap();
        let error = bind("health probes", addr.port()).await.unwrap_err().to_string();
        assert!(error.contains("health probes"), "{error}");
    }
}

//! The Kubernetes clients of `karpenter controller`, built here so the tests build them exactly as the binary
//! does: [`controllers_client`] for the controllers, [`lease_client`] for leader election.
//!
//! The controllers' client goes through the KUBE_CLIENT_QPS / KUBE_CLIENT_BURST token bucket
//! ([`RateLimitLayer`]) and retries what the API server answers 429, 503 or 504 with kube's own policy
//! (`RetryPolicy::server_retry`: up to 15 retries with exponential backoff, honouring Retry-After), as kube's
//! default client would, with one exception: a POST to a pod's `eviction` subresource is sent once. The Eviction
//! API answers 429 when a PodDisruptionBudget allows no disruption right now, and that is an answer, not
//! throttling: retried by the client it would hold the termination pass that asked, and with it every other
//! node's drain (spot interruptions included), for minutes before the controller even learnt the pod was
//! blocked. The terminator records a refused eviction and asks again on its next pass, so the client does not
//! have to. Everything else keeps the retries: a 429 of API Priority and Fairness on any other request, or a 503
//! or 504 from an overloaded or restarting API server, is still waited out by the client as before. (An eviction
//! refused by API Priority and Fairness is not retried either; it is asked again on the next pass like a
//! PDB refusal, which is what a retry would have done, a second later.)
//!
//! Each retry goes through the token bucket again, as each attempt of client-go's requests does.

use kube::client::{Body, ClientBuilder, retry::RetryPolicy};
use tower::{
    BoxError,
    buffer::BufferLayer,
    retry::{Policy, RetryLayer},
};

use crate::{Settings, rate_limit::RateLimitLayer};

/// How many requests may wait for the rate limiter at once before callers wait to hand theirs over (kube's own
/// [`kube::Client`] buffers as many).
const BUFFERED_REQUESTS: usize = 1024;

/// The controllers' client: rate-limited by the settings' KUBE_CLIENT_QPS and KUBE_CLIENT_BURST, retrying
/// throttled and unavailable answers except a pod eviction's (see the module). Must be called within a Tokio
/// runtime (as building any [`kube::Client`] must).
pub fn controllers_client(
    mut config: kube::Config,
    settings: &Settings,
) -> Result<kube::Client, kube::Error> {
    // kube's default retry layer sits inside the stack where it cannot tell an eviction from any other request;
    // ours replaces it, outside the rate limiter.
    config.default_retry = false;
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&RateLimitLayer::new(
            settings.kube_client_qps,
            settings.kube_client_burst,
        ))
        // tower's retry sends each attempt through a clone of the service below it; kube's stack is not Clone,
        // a buffer in front of it is.
        .with_layer(&BufferLayer::new(BUFFERED_REQUESTS))
        .with_layer(&RetryLayer::new(RetryExceptEvictions::default()))
        .build())
}

/// Leader election's client: not rate-limited, so a lease renewal never queues behind the controllers'
/// requests, and with kube's default retries (a lease update is not an eviction; a throttled renewal is worth
/// retrying within the renew deadline).
pub fn lease_client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    kube::Client::try_from(config)
}

/// kube's [`RetryPolicy::server_retry`] for every request but a POST to a pod's `eviction` subresource, which is
/// never retried (nor cloned to be retried): see the module.
#[derive(Clone)]
pub struct RetryExceptEvictions(RetryPolicy);

impl Default for RetryExceptEvictions {
    fn default() -> Self {
        Self(RetryPolicy::server_retry())
    }
}

/// `POST .../pods/<name>/eviction`: the Eviction API.
fn is_eviction<B>(request: &http::Request<B>) -> bool {
    request.method() == http::Method::POST && request.uri().path().ends_with("/eviction")
}

impl<Res> Policy<http::Request<Body>, http::Response<Res>, BoxError> for RetryExceptEvictions {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        request: &mut http::Request<Body>,
        result: &mut Result<http::Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        if is_eviction(request) {
            return None;
        }
        self.0.retry(request, result)
    }

    fn clone_request(&mut self, request: &http::Request<Body>) -> Option<http::Request<Body>> {
        // Not cloned: a request tower cannot clone is sent once, and the copy would only cost memory.
        if is_eviction(request) {
            return None;
        }
        <RetryPolicy as Policy<http::Request<Body>, http::Response<Res>, BoxError>>::clone_request(
            &mut self.0,
            request,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::{
        collections::HashMap,
        sync::{Arc, Mutex},
        time::Duration,
    };

    use axum::{
        Router,
        extract::State,
        http::{Method, StatusCode, Uri},
        response::IntoResponse,
    };
    use k8s_openapi::api::core::v1::Pod;
    use kube::{
        Api,
        api::{EvictParams, PostParams},
    };
    use serde_json::json;

    use super::*;

    /// Requests seen, by "METHOD path".
    type Seen = Arc<Mutex<HashMap<String, usize>>>;

    fn status_429() -> axum::response::Response {
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "reason": "TooManyRequests", "code": 429
        });
        (StatusCode::TOO_MANY_REQUESTS, axum::Json(status)).into_response()
    }

    /// An API server that answers every eviction 429, and any other request 429 twice, then with a Pod.
    async fn serve(seen: Seen) -> kube::Config {
        let app = Router::new()
            .fallback(async |State(seen): State<Seen>, method: Method, uri: Uri| {
                let attempt = {
                    let mut seen = seen.lock().unwrap();
                    let count = seen.entry(format!("{method} {}", uri.path())).or_default();
                    *count += 1;
                    *count
                };
                if uri.path().ends_with("/eviction") || attempt <= 2 {
                    return status_429();
                }
                let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"}});
                (StatusCode::OK, axum::Json(pod)).into_response()
            })
            .with_state(seen);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        kube::Config::new(format!("http://{addr}").parse().unwrap())
    }

    #[tokio::test]
    async fn an_eviction_refused_with_429_is_sent_once_while_other_429s_are_retried() {
        let seen = Seen::default();
        let client = controllers_client(serve(Arc::clone(&seen)).await, &Settings::default()).unwrap();
        let pods: Api<Pod> = Api::namespaced(client, "default");

        // Retried with kube's backoff, 15 times from 5ms doubling, it would take minutes.
        let evicted = tokio::time::timeout(
            Duration::from_secs(10),
            pods.evict("web", &EvictParams::default()),
        )
        .await
        .unwrap_or_else(|_| panic!("the eviction is still being retried after 10s: {seen:?}"));
        match evicted {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 429, "{status:?}"),
            other => panic!("the eviction is refused with the server's 429: {other:?}"),
        }
        let pod = pods
            .get("web")
            .await
            .expect("a GET answered 429 is retried until it succeeds");
        assert_eq!(pod.metadata.name.as_deref(), Some("web"));
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("a POST other than an eviction (a body kube can clone) is retried too");

        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            HashMap::from([
                ("POST /api/v1/namespaces/default/pods/web/eviction".to_string(), 1),
                ("GET /api/v1/namespaces/default/pods/web".to_string(), 3),
                ("POST /api/v1/namespaces/default/pods".to_string(), 3),
            ]),
            "one eviction request; the other requests retried past their two 429s"
        );
    }

    #[test]
    fn only_a_post_to_the_eviction_subresource_is_an_eviction() {
        let request = |method: &str, uri: &str| {
            http::Request::builder()
                .method(method)
                .uri(uri)
                .body(Body::empty())
                .unwrap()
        };
        assert!(is_eviction(&request(
            "POST",
            "/api/v1/namespaces/default/pods/web/eviction?timeout=10s"
        )));
        assert!(!is_eviction(&request(
            "GET",
            "/api/v1/namespaces/default/pods/web/eviction"
        )));
        assert!(!is_eviction(&request("POST", "/api/v1/namespaces/default/pods")));
        assert!(!is_eviction(&request("PATCH", "/api/v1/nodes/eviction")));
    }
}

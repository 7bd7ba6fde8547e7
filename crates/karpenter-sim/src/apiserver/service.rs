//! The in-process transport: a tower Service a `kube::Client` sends its requests to.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use http::{Request, Response};

use super::{Shared, handler, response, response::ResponseBody};
use crate::error::ApiStatus;

/// `tower::Service<http::Request<kube::client::Body>>` over the in-memory API server; hand it to
/// `kube::Client::new(service, "default")`, or use [`super::ApiServer::client`].
#[derive(Clone)]
pub struct ApiService {
    pub(super) shared: Arc<Shared>,
}

impl std::fmt::Debug for ApiService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiService").finish_non_exhaustive()
    }
}

impl tower::Service<Request<kube::client::Body>> for ApiService {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let body = match body.collect_bytes().await {
                Ok(body) => body,
                Err(e) => {
                    return Ok(response::error(&ApiStatus::bad_request(format!(
                        "reading request body: {e}"
                    ))));
                }
            };
            Ok(handler::handle(&shared, Request::from_parts(parts, body)).await)
        })
    }
}

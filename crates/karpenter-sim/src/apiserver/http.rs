//! The HTTP transport: a hyper 1 server on 127.0.0.1 for kubectl and out-of-process clients, plus the kubeconfig
//! that points at it (plain http, no credentials).

use std::{convert::Infallible, net::SocketAddr, path::Path, sync::Arc};

use http::Request;
use http_body_util::BodyExt;
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpListener, sync::oneshot, task::JoinSet};

use super::{Shared, handler};
use crate::error::Error;

/// A running HTTP listener; dropping it (or [`HttpHandle::shutdown`]) closes the listener and every connection.
#[derive(Debug)]
pub struct HttpHandle {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl HttpHandle {
    /// The address actually bound (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig whose current context talks to this server in namespace "default".
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {}\nusers:\n- name: sim\n  user: {{}}\n\
             contexts:\n- name: sim\n  context:\n    cluster: sim\n    user: sim\n    namespace: default\ncurrent-context: sim\n",
            self.url()
        );
        std::fs::write(path, config).map_err(|source| Error::Kubeconfig {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Stops accepting, closes open connections (watches included) and waits for the server task.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for HttpHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn serve_connection(shared: Arc<Shared>, stream: tokio::net::TcpStream) {
    let service = service_fn(move |request: Request<Incoming>| {
        let shared = Arc::clone(&shared);
        async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
            Ok::<_, Infallible>(handler::handle(&shared, Request::from_parts(parts, body)).await)
        }
    });
    if let Err(e) = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!("connection ended: {e}");
    }
}

pub(super) async fn serve(shared: Arc<Shared>, addr: SocketAddr) -> Result<HttpHandle, Error> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| Error::Listen { addr, source })?;
    let (stop, mut stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                accepted = listener.accept() => {
                    if let Ok((stream, _)) = accepted {
                        connections.spawn(serve_connection(Arc::clone(&shared), stream));
                    }
                    while connections.try_join_next().is_some() {}
                }
            }
        }
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    });
    Ok(HttpHandle {
        addr,
        stop: Some(stop),
        task: Some(task),
    })
}

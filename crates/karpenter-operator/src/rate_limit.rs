//! KUBE_CLIENT_QPS and KUBE_CLIENT_BURST: a token bucket in front of the Kubernetes client, as client-go's
//! rate limiter: up to `burst` requests at once, then `qps` per second. A request waits for a token; it is
//! never refused. Leader election uses a client without it, so lease renewals never queue behind a burst.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Duration,
};

use tokio::time::{Instant, Sleep, sleep};
use tower::{Layer, Service};

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    burst: f64,
    qps: f64,
    updated: Instant,
}

impl Bucket {
    /// Takes a token, or says how long until one is there.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.updated = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

/// The layer; clones share one bucket.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<Bucket>>,
}

impl RateLimitLayer {
    /// `qps` requests per second after a burst of `burst` (both at least 1).
    pub fn new(qps: u32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            bucket: Arc::new(Mutex::new(Bucket {
                tokens: burst,
                burst,
                qps: f64::from(qps.max(1)),
                updated: Instant::now(),
            })),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            bucket: Arc::clone(&self.bucket),
            waiting: None,
            holds_token: false,
        }
    }
}

/// See [`RateLimitLayer`].
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<Mutex<Bucket>>,
    waiting: Option<Pin<Box<Sleep>>>,
    /// A token taken for the next call (kept if the inner service is not ready yet).
    holds_token: bool,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.holds_token {
            if let Some(waiting) = self.waiting.as_mut() {
                if waiting.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.waiting = None;
            }
            let taken = self
                .bucket
                .lock()
                .map_or(Ok(()), |mut bucket| bucket.take(Instant::now()));
            match taken {
                Ok(()) => self.holds_token = true,
                Err(wait) => self.waiting = Some(Box::pin(sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.holds_token = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tower::ServiceExt;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_then_qps_per_second() {
        let counter = tower::service_fn(|n: u32| async move { Ok::<_, Infallible>(n) });
        let mut limited = RateLimitLayer::new(10, 5).layer(counter);
        let start = Instant::now();
        for i in 0..5 {
            let _ = limited.ready().await.map(|s| s.call(i));
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst is not delayed");
        for i in 0..10 {
            let _ = limited.ready().await.map(|s| s.call(i));
        }
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(990) && waited <= Duration::from_millis(1010),
            "ten more requests at 10 per second take a second of (virtual) time: {waited:?}"
        );
    }
}

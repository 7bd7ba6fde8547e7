//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::{future::Future, time::Duration};

use karpenter_sim::{ApiServer, ApiServerOptions, VirtualClock};

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

pub fn start() -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_767_225_600).unwrap_or(jiff::Timestamp::UNIX_EPOCH) // 2026-01-01T00:00:00Z
}

pub fn server() -> ApiServer {
    ApiServer::new(VirtualClock::starting_at(start()))
}

pub fn server_with_history(history: usize) -> ApiServer {
    ApiServer::with_options(
        VirtualClock::starting_at(start()),
        ApiServerOptions {
            history_per_resource: history,
            ..ApiServerOptions::default()
        },
    )
}

/// Polls `check` until it holds, failing after `within` (tokio time).
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("condition not met within {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

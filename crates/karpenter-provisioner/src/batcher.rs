//! The batching window. Pods arrive in bursts (a Deployment scaled to 400 creates 400 pods over a few
//! seconds); deciding once per burst launches a few large nodes instead of many small ones. As upstream: a
//! batch starts with the first pending pod and ends when no pod has arrived for the idle duration
//! (BATCH_IDLE_DURATION, 1s), or at the latest after the maximum duration (BATCH_MAX_DURATION, 10s).

use std::time::Duration;

use tokio::time::{Instant, sleep};

/// The two windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchWindow {
    pub idle: Duration,
    pub max: Duration,
}

impl Default for BatchWindow {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }
}

impl BatchWindow {
    /// Waits for a complete batch. `pending` describes the pending pods, changing whenever one arrives or
    /// leaves (`None` while nothing is pending); it is polled every `poll` of tokio time, so the wait runs on
    /// the simulator's virtual clock too.
    pub async fn wait<S: PartialEq>(&self, poll: Duration, mut pending: impl FnMut() -> Option<S>) {
        let mut last = loop {
            if let Some(s) = pending() {
                break s;
            }
            sleep(poll).await;
        };
        let started = Instant::now();
        let mut last_change = started;
        loop {
            let now = Instant::now();
            if now.duration_since(last_change) >= self.idle || now.duration_since(started) >= self.max {
                return;
            }
            sleep(poll).await;
            match pending() {
                Some(s) if s != last => {
                    last = s;
                    last_change = Instant::now();
                }
                Some(_) => {}
                // Everything pending found a place meanwhile: wait for the next burst.
                None => {
                    last = loop {
                        sleep(poll).await;
                        if let Some(s) = pending() {
                            break s;
                        }
                    };
                    last_change = Instant::now();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLL: Duration = Duration::from_millis(100);

    #[tokio::test(start_paused = true)]
    async fn a_quiet_batch_ends_after_the_idle_window() {
        let start = Instant::now();
        BatchWindow::default().wait(POLL, || Some(3)).await;
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_millis(1300),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_of_pods_is_cut_at_the_max_window() {
        let start = Instant::now();
        // A new pod every 500ms, forever.
        BatchWindow::default()
            .wait(POLL, || Some(start.elapsed().as_millis() / 500))
            .await;
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(10) && took < Duration::from_millis(10_300),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_batch_starts_with_the_first_pending_pod() {
        let start = Instant::now();
        BatchWindow::default()
            .wait(POLL, || (start.elapsed() >= Duration::from_secs(5)).then_some(1))
            .await;
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(6) && took < Duration::from_millis(6_300),
            "{took:?}"
        );
    }
}

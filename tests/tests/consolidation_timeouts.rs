//! The consolidation searches' time limits as the disruption controller applies them: a search that runs past its
//! limit on the controller's clock counts one in `karpenter_voluntary_disruption_consolidation_timeouts_total`,
//! by consolidation type.

use std::{
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use jiff::{SignedDuration, Timestamp};
use karpenter_api::label_policy::LabelPolicy;
use karpenter_core::{catalog::CatalogFile, clock::Clock, snapshot::BuildOptions};
use karpenter_disruption::{DisruptionController, DisruptionSettings, Tick};
use karpenter_e2e::{CATALOG, Harness, TestResult, apply_deployment, apply_nodepool, until_running};
use karpenter_state::ControllerContext;
use serde_json::json;

/// The simulation's clock, 91 s later at each read than at the one before: each deadline check of a search
/// finds 91 s gone, so multi-node consolidation (1 minute) stops at its first and single-node (3 minutes) at
/// its second.
struct SlowSearches {
    inner: Arc<dyn Clock>,
    reads: AtomicI64,
}

impl Clock for SlowSearches {
    fn now(&self) -> Timestamp {
        let reads = self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.now() + SignedDuration::from_secs(91 * reads)
    }
}

fn timeouts(kind: &str) -> f64 {
    let series = format!(
        "karpenter_voluntary_disruption_consolidation_timeouts_total{{consolidation_type=\"{kind}\"}}"
    );
    karpenter_metrics::metrics()
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str())?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(start_paused = true)]
async fn consolidation_searches_past_their_limits_are_counted_by_type() -> TestResult {
    let h = Harness::start()?;
    let client = h.client();
    apply_nodepool(
        &client,
        "default",
        &["on-demand"],
        json!({"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]}),
    )
    .await?;
    // Two nodes, each busy with a pod no cheaper node holds: both are consolidation candidates, neither goes.
    apply_deployment(&client, "big", 2, "5").await?;
    until_running(&client, "app=big", 2, 300).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;

    let catalog = CatalogFile::from_json_str(CATALOG)?;
    let clock = SlowSearches {
        inner: h.sim.clock(),
        reads: AtomicI64::new(0),
    };
    let disruption = DisruptionController::new(
        ControllerContext::new(h.client(), h.state.clone(), Arc::new(clock)),
        h.sim.cloud_provider(),
        DisruptionSettings {
            build: BuildOptions {
                label_policy: LabelPolicy::Core,
                extra_well_known_labels: catalog.well_known_labels,
                ..BuildOptions::default()
            },
            ..DisruptionSettings::default()
        },
    );
    let (multi, single) = (timeouts("multi"), timeouts("single"));
    let tick = disruption.tick().await?;
    assert_eq!(tick, Tick::Idle, "a search that ran out of time finds nothing");
    assert_eq!(timeouts("multi"), multi + 1.0);
    assert_eq!(timeouts("single"), single + 1.0);
    Ok(())
}

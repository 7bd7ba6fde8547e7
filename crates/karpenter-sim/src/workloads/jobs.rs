//! Jobs: keep pods running until `completions` of them have run for the Job's duration.

use std::{sync::Arc, time::Duration};

use jiff::Timestamp;
use serde_json::{Value, json};

use super::{JOB_DURATION_ANNOTATION, is_active, pod_from_template, update_status};
use crate::{
    apiserver::{ApiServer, ResourceId},
    clock::format_time,
    objects::{self, after, set_condition},
};

fn jobs() -> ResourceId {
    ResourceId::new("batch", "jobs")
}

/// Reconciles every Job; returns when the next running pod finishes, if any.
pub(super) fn reconcile(api: &ApiServer, now: Timestamp, default_duration: Duration) -> Option<Timestamp> {
    let pods: Vec<Arc<Value>> = api.list_internal(&objects::pods(), None);
    let mut next = None;
    for job in api.list_internal(&jobs(), None) {
        if objects::is_deleting(&job) || objects::condition_is_true(&job, "Complete") {
            continue;
        }
        if let Some(due) = reconcile_one(api, &job, &pods, now, default_duration) {
            next = Some(next.map_or(due, |n: Timestamp| n.min(due)));
        }
    }
    next
}

fn reconcile_one(
    api: &ApiServer,
    job: &Value,
    pods: &[Arc<Value>],
    now: Timestamp,
    default_duration: Duration,
) -> Option<Timestamp> {
    let duration = objects::str_at(
        job,
        &format!(
            "/metadata/annotations/{}",
            JOB_DURATION_ANNOTATION.replace('/', "~1")
        ),
    )
    .and_then(|d| karpenter_api::duration::parse_go_duration(d).ok())
    .unwrap_or(default_duration);
    let completions = job["spec"]["completions"].as_i64().unwrap_or(1).max(0);
    let parallelism = job["spec"]["parallelism"].as_i64().unwrap_or(1).max(0);
    let owned = super::owned(pods, objects::uid(job));
    let mut succeeded = owned.iter().filter(|p| objects::phase(p) == "Succeeded").count();
    let mut active = 0;
    let mut next = None;
    for pod in owned.iter().filter(|p| is_active(p)) {
        active += 1;
        if objects::phase(pod) != "Running" {
            continue;
        }
        let Some(started) = objects::time_at(pod, "/status/startTime") else {
            continue;
        };
        let done_at = after(started, duration);
        if now < done_at {
            next = Some(next.map_or(done_at, |n: Timestamp| n.min(done_at)));
            continue;
        }
        let mut status = pod["status"].clone();
        status["phase"] = json!("Succeeded");
        for kind in ["Ready", "ContainersReady"] {
            set_condition(
                &mut status["conditions"],
                kind,
                "False",
                "PodCompleted",
                "",
                now,
                false,
            );
        }
        let (ns, name) = (objects::namespace(pod), objects::name(pod));
        match api.update_status_internal(&objects::pods(), ns, name, status) {
            Ok(_) => {
                succeeded += 1;
                active -= 1;
            }
            Err(e) => tracing::debug!("sim jobs: completing {ns}/{name}: {e}"),
        }
    }
    let succeeded = i64::try_from(succeeded).unwrap_or(i64::MAX);
    let start_time = job["status"]["startTime"]
        .as_str()
        .map_or_else(|| format_time(now), str::to_string);
    if succeeded >= completions {
        let mut conditions = job["status"]["conditions"].clone();
        set_condition(
            &mut conditions,
            "SuccessCriteriaMet",
            "True",
            "CompletionsReached",
            "",
            now,
            false,
        );
        set_condition(
            &mut conditions,
            "Complete",
            "True",
            "CompletionsReached",
            "",
            now,
            false,
        );
        update_status(
            api,
            &jobs(),
            job,
            json!({"active": 0, "succeeded": succeeded, "startTime": start_time,
                   "completionTime": format_time(now), "conditions": conditions}),
        );
        return None;
    }
    let want = parallelism.min(completions - succeeded);
    let prefix = format!("{}-", objects::name(job));
    for _ in active..want {
        let mut pod = pod_from_template(job, "batch/v1", "Job", &prefix);
        pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = json!(objects::name(job));
        pod["metadata"]["labels"]["job-name"] = json!(objects::name(job));
        if let Err(e) = api.create_internal(&objects::pods(), pod) {
            tracing::debug!("sim jobs: creating a pod of {}: {e}", objects::name(job));
        }
    }
    update_status(
        api,
        &jobs(),
        job,
        json!({"active": active.max(want), "succeeded": succeeded, "startTime": start_time}),
    );
    next
}

//! The process's own resource use, read from /proc at each scrape: the `process_*` metrics every Prometheus
//! client exports (upstream's Go controller among them), which dashboards and upstream's end-to-end suites read
//! (their poller samples `process_resident_memory_bytes` and `process_cpu_seconds_total` through the API server's
//! pod proxy), and the live heap.
//!
//! The live heap is exported as `go_gc_heap_live_bytes`, the name upstream's suites and dashboards read for it:
//! there is no Go runtime here, the value is the bytes the allocator has handed out and not had back (the binary
//! installs the probe, [`set_heap_probe`]; jemalloc's `stats.allocated`).

use std::{fmt::Write as _, sync::OnceLock};

/// Name and help of each process metric (a counter's name without `_total`).
pub(crate) const CPU_SECONDS: (&str, &str) = (
    "process_cpu_seconds",
    "Total user and system CPU time spent in seconds.",
);
pub(crate) const RESIDENT_MEMORY_BYTES: (&str, &str) =
    ("process_resident_memory_bytes", "Resident memory size in bytes.");
pub(crate) const VIRTUAL_MEMORY_BYTES: (&str, &str) =
    ("process_virtual_memory_bytes", "Virtual memory size in bytes.");
pub(crate) const START_TIME_SECONDS: (&str, &str) = (
    "process_start_time_seconds",
    "Start time of the process since unix epoch in seconds.",
);
pub(crate) const OPEN_FDS: (&str, &str) = ("process_open_fds", "Number of open file descriptors.");
pub(crate) const MAX_FDS: (&str, &str) = ("process_max_fds", "Maximum number of open file descriptors.");
pub(crate) const HEAP_LIVE_BYTES: (&str, &str) = (
    "go_gc_heap_live_bytes",
    "Live heap: bytes allocated and not yet freed (this process has no Go runtime; the allocator's count, under the name upstream's tools read).",
);

/// Linux reports CPU times in clock ticks of a fixed 100 Hz (USER_HZ, part of the kernel's ABI).
const TICKS_PER_SECOND: f64 = 100.0;

static HEAP_PROBE: OnceLock<fn() -> Option<u64>> = OnceLock::new();

/// Installs what reads the live heap (the binary knows its allocator; a library does not). Only the first call
/// counts.
pub fn set_heap_probe(probe: fn() -> Option<u64>) {
    let _ = HEAP_PROBE.set(probe);
}

/// One reading of the process; `None` where the platform does not say.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ProcessSample {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<f64>,
    pub virtual_bytes: Option<f64>,
    pub start_time_seconds: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
    pub heap_live_bytes: Option<f64>,
}

impl ProcessSample {
    /// This process, now.
    pub fn read() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let fields = stat.as_deref().map(stat_fields).unwrap_or_default();
        let number = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| boot_time_seconds(&s));
        Self {
            // utime and stime (fields 14 and 15 of proc(5), 0-based 11 and 12 after the command).
            cpu_seconds: number(11)
                .zip(number(12))
                .map(|(user, system)| (user + system) / TICKS_PER_SECOND),
            resident_bytes: std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| status_kib(&s, "VmRSS:"))
                .map(|kib| kib * 1024.0),
            virtual_bytes: number(20),
            start_time_seconds: number(19)
                .zip(boot_time)
                .map(|(ticks, boot)| boot + ticks / TICKS_PER_SECOND),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|entries| entries.count() as f64),
            max_fds: std::fs::read_to_string("/proc/self/limits")
                .ok()
                .and_then(|s| max_open_files(&s)),
            heap_live_bytes: HEAP_PROBE.get().and_then(|probe| probe()).map(|b| b as f64),
        }
    }

    /// The OpenMetrics text of the sample (what is unknown is left out).
    pub fn text(&self) -> String {
        let mut out = String::new();
        let mut write = |(name, help): (&str, &str), kind: &str, value: Option<f64>| {
            let Some(value) = value else { return };
            let sample = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            let help = help.strip_suffix('.').unwrap_or(help);
            // Writing into a String cannot fail.
            let _ = write!(
                out,
                "# HELP {name} {help}.\n# TYPE {name} {kind}\n{sample} {value}\n"
            );
        };
        write(CPU_SECONDS, "counter", self.cpu_seconds);
        write(RESIDENT_MEMORY_BYTES, "gauge", self.resident_bytes);
        write(VIRTUAL_MEMORY_BYTES, "gauge", self.virtual_bytes);
        write(START_TIME_SECONDS, "gauge", self.start_time_seconds);
        write(OPEN_FDS, "gauge", self.open_fds);
        write(MAX_FDS, "gauge", self.max_fds);
        write(HEAP_LIVE_BYTES, "gauge", self.heap_live_bytes);
        out
    }
}

/// The fields of /proc/self/stat after the command name, which is in parentheses and may hold spaces.
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default()
}

/// `btime` of /proc/stat: when the machine booted, in seconds since the epoch.
fn boot_time_seconds(stat: &str) -> Option<f64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// A `kB` line of /proc/self/status.
fn status_kib(status: &str, key: &str) -> Option<f64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The soft limit of `Max open files` in /proc/self/limits.
fn max_open_files(limits: &str) -> Option<f64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|soft| soft.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_files_as_the_kernel_writes_them() {
        let stat = "4242 (karpenter (ctl)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 12 0 123400 2147483648 5000 18446744073709551615";
        let fields = stat_fields(stat);
        assert_eq!(fields[0], "S");
        assert_eq!((fields[11], fields[12]), ("250", "50"));
        assert_eq!(fields[19], "123400");
        assert_eq!(fields[20], "2147483648");
        assert_eq!(
            boot_time_seconds("cpu 1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1.7e9)
        );
        assert_eq!(
            status_kib("Name:\tk\nVmRSS:\t  20480 kB\n", "VmRSS:"),
            Some(20480.0)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\n";
        assert_eq!(max_open_files(limits), Some(1_048_576.0));
    }

    #[test]
    fn this_process_is_read_on_linux() {
        let sample = ProcessSample::read();
        if cfg!(target_os = "linux") {
            assert!(sample.cpu_seconds.is_some_and(|s| s >= 0.0), "{sample:?}");
            assert!(sample.resident_bytes.is_some_and(|b| b > 0.0), "{sample:?}");
            assert!(sample.start_time_seconds.is_some_and(|t| t > 1.5e9), "{sample:?}");
            assert!(sample.open_fds.is_some_and(|n| n >= 1.0), "{sample:?}");
        }
    }

    #[test]
    fn a_counter_is_exported_with_its_total_suffix_and_unknowns_are_left_out() {
        let sample = ProcessSample {
            cpu_seconds: Some(3.5),
            resident_bytes: Some(1024.0),
            ..Default::default()
        };
        let text = sample.text();
        assert!(
            text.contains("# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total 3.5\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 1024\n"),
            "{text}"
        );
        assert!(!text.contains("go_gc_heap_live_bytes"), "{text}");
    }
}

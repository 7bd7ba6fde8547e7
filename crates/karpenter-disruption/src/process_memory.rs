//! The process's resident memory, for the debug log of a tick: a pass over a large cluster is where the
//! controller's memory peaks, and knowing which phase raised the peak is the first question when it grows.

/// Resident and peak resident memory in MiB (VmRSS, VmHWM), where /proc says (Linux); zeros elsewhere.
pub fn resident_mib() -> (u64, u64) {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return (0, 0);
    };
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb / 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_on_linux() {
        let (rss, peak) = resident_mib();
        if cfg!(target_os = "linux") {
            assert!(
                peak >= rss,
                "the peak ({peak} MiB) is at least the current ({rss} MiB)"
            );
        }
    }
}

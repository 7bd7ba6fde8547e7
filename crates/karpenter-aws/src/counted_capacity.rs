//! A count EC2 reports and the provider spends between reports: the free addresses of a subnet
//! ([`crate::subnet_ips`]), the instances a capacity reservation can still take
//! ([`crate::capacity_reservations::availability`]). What is free is EC2's last count less what launches in
//! flight hold and what launches that finished since may have used: a launch that finished before the count was
//! asked for is in it; one that finished while EC2 was counting is subtracted, so it is counted twice rather
//! than not at all (a launch that counts on what is not there fails; one that misses what is there only waits
//! for the next count).

use std::time::Instant;

/// One subnet's or reservation's count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CountedCapacity {
    /// EC2's last count; None before the first.
    reported: Option<i64>,
    /// Launches that finished (when, how much they used) that the last count may not include.
    launched: Vec<(Instant, i64)>,
    /// Held by launches not finished yet.
    in_flight: i64,
}

impl CountedCapacity {
    /// EC2 counted `available`, asked for at `asked_at`: it replaces the previous count, and the launches that
    /// finished before it was asked for are in it.
    pub fn record_reported(&mut self, available: i64, asked_at: Instant) {
        self.reported = Some(available.max(0));
        self.launched.retain(|(finished, _)| *finished > asked_at);
    }

    /// What is free now; None when EC2 never counted it.
    pub fn free(&self) -> Option<i64> {
        let launched: i64 = self.launched.iter().map(|(_, used)| used).sum();
        self.reported
            .map(|reported| (reported - launched - self.in_flight).max(0))
    }

    /// A launch holds `amount` until it is settled.
    pub fn hold(&mut self, amount: i64) {
        self.in_flight += amount;
    }

    /// A launch that held `amount` ended: launched at `launched_at` (what it used stays subtracted until a count
    /// asked for later), or failed (`None`: given back).
    pub fn settle(&mut self, amount: i64, launched_at: Option<Instant>) {
        self.in_flight = (self.in_flight - amount).max(0);
        if let Some(at) = launched_at {
            self.launched.push((at, amount));
        }
    }
}

//! The time source controllers read. Decisions in core take the time as an argument and never read a clock;
//! controllers read it from a [`Clock`] so the simulator can run them on a virtual clock (a simulated day in
//! seconds, the same result every run). Implementations: [`SystemClock`] and `karpenter_sim::VirtualClock`.

use jiff::Timestamp;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// A shared clock is a clock, so one `Arc<dyn Clock>` can serve every component.
impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// The machine's clock, what the controller binary runs on.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

//! The heap bytes this process has in use, counted by a wrapper around the system allocator, so a benchmark can
//! report what one structure holds (`bench disrupt`'s disruption inputs) apart from everything else the process
//! keeps alive (the generated cluster's JSON documents, for one).

use std::alloc::System;

#[global_allocator]
static ALLOCATOR: cap::Cap<System> = cap::Cap::new(System, usize::MAX);

/// Bytes allocated and not yet freed.
pub fn allocated_bytes() -> usize {
    ALLOCATOR.allocated()
}

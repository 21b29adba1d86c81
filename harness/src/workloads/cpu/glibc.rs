//! stub
use alloclab_core::HostAllocator;
use crate::workloads::{Measurement, Params};
pub(super) fn run_simple<A: HostAllocator>(_a: &A, _p: &Params) -> Measurement { todo!() }
pub(super) fn run_thread<A: HostAllocator>(_a: &A, _p: &Params) -> Measurement { todo!() }

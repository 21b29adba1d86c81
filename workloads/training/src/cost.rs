//! The device cost model: how long a step takes, how long a transfer takes, how much
//! memory there is.
//!
//! A step takes `max(flops / (peak × compute_efficiency), bytes / (HBM × memory_efficiency))`
//! (a roofline): tensor-core steps (convolutions, matrix multiplies) at the tensor peak of
//! their precision, the others at the vector peak. A swap moves its bytes over PCIe at
//! `pcie_bytes_per_s` in each direction, both directions at once (full duplex), one
//! transfer at a time per direction.

use crate::TrainingError;
use crate::model::Precision;
use crate::trace::Step;

/// Parameters of the simulated device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Tensor-core peak in half precision, FLOP/s.
    pub tensor_fp16_flops: f64,
    /// Matrix-multiply peak in fp32 (no TF32), FLOP/s.
    pub tensor_fp32_flops: f64,
    /// Vector (non-tensor-core) peak, FLOP/s.
    pub vector_flops: f64,
    /// Fraction of the compute peaks reached.
    pub compute_efficiency: f64,
    /// Device-memory bandwidth, bytes/s.
    pub hbm_bytes_per_s: f64,
    /// Fraction of the memory bandwidth reached.
    pub memory_efficiency: f64,
    /// Effective host↔device bandwidth per direction, bytes/s.
    pub pcie_bytes_per_s: f64,
    /// Device memory, bytes.
    pub capacity_bytes: u64,
}

impl CostModel {
    /// An A100-40GB-like device: 312 TFLOPS fp16 tensor, 19.5 TFLOPS fp32 (matrix and
    /// vector), 50% of compute peak reached, 1555 GB/s HBM at 80%, PCIe 4.0 ×16 at
    /// 25 GB/s effective per direction, 40 GiB.
    pub fn a100_40gb() -> Self {
        Self {
            tensor_fp16_flops: 312e12,
            tensor_fp32_flops: 19.5e12,
            vector_flops: 19.5e12,
            compute_efficiency: 0.5,
            hbm_bytes_per_s: 1555e9,
            memory_efficiency: 0.8,
            pcie_bytes_per_s: 25e9,
            capacity_bytes: 40 << 30,
        }
    }

    /// Checks that every parameter is positive and finite.
    ///
    /// # Errors
    ///
    /// [`TrainingError::BadCostParameter`] naming the first bad parameter.
    pub fn validate(&self) -> Result<(), TrainingError> {
        let params = [
            ("tensor_fp16_flops", self.tensor_fp16_flops),
            ("tensor_fp32_flops", self.tensor_fp32_flops),
            ("vector_flops", self.vector_flops),
            ("compute_efficiency", self.compute_efficiency),
            ("hbm_bytes_per_s", self.hbm_bytes_per_s),
            ("memory_efficiency", self.memory_efficiency),
            ("pcie_bytes_per_s", self.pcie_bytes_per_s),
        ];
        for (name, v) in params {
            if !(v.is_finite() && v > 0.0) {
                return Err(TrainingError::BadCostParameter { name });
            }
        }
        if self.capacity_bytes == 0 {
            return Err(TrainingError::BadCostParameter {
                name: "capacity_bytes",
            });
        }
        Ok(())
    }

    /// Seconds `step` takes in `precision`.
    pub fn step_seconds(&self, step: &Step, precision: Precision) -> f64 {
        let peak = if step.tensor_core {
            if precision.half_matmul() {
                self.tensor_fp16_flops
            } else {
                self.tensor_fp32_flops
            }
        } else {
            self.vector_flops
        };
        let compute = step.flops / (peak * self.compute_efficiency);
        let memory = step.bytes / (self.hbm_bytes_per_s * self.memory_efficiency);
        compute.max(memory)
    }

    /// Seconds to move `bytes` over PCIe in one direction.
    pub fn transfer_seconds(&self, bytes: u64) -> f64 {
        bytes as f64 / self.pcie_bytes_per_s
    }

    /// One line stating the parameters, for reports.
    pub fn describe(&self) -> String {
        format!(
            "tensor fp16 {:.1} TFLOPS, fp32 {:.1} TFLOPS, vector {:.1} TFLOPS at {:.0}% efficiency; HBM {:.0} GB/s at {:.0}%; PCIe {:.1} GB/s per direction (full duplex); capacity {:.1} GiB",
            self.tensor_fp16_flops / 1e12,
            self.tensor_fp32_flops / 1e12,
            self.vector_flops / 1e12,
            self.compute_efficiency * 100.0,
            self.hbm_bytes_per_s / 1e9,
            self.memory_efficiency * 100.0,
            self.pcie_bytes_per_s / 1e9,
            self.capacity_bytes as f64 / (1u64 << 30) as f64
        )
    }
}

impl Default for CostModel {
    fn default() -> Self {
        Self::a100_40gb()
    }
}

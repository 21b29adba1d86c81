//! The accelerator kernels of the paper's evaluation, as allocation profiles.
//!
//! Each invocation of a kernel allocates its buffers at start, in order (inputs, then
//! outputs and scratch), computes, and frees them at the end (the model of the paper).
//! Each buffer also has a release point, in eighths of the compute time (`@k/8`; no mark: at
//! the end), where a kernel that frees an input once consumed, or scratch after its phase,
//! would free it; traces use them only with
//! [`TraceConfig::early_release`](crate::TraceConfig::early_release). Sizes follow each benchmark's data
//! structures at on-chip scale (32-bit elements unless the benchmark says otherwise); the
//! sizes marked *random* are drawn per invocation, uniformly. Compute times are rough cycle
//! counts of a pipelined HLS implementation (about one inner-loop iteration per cycle).
//!
//! | kernel | origin | buffers (bytes) | compute (cycles) |
//! |---|---|---|---|
//! | histogram | Phoenix | image *random* 256–2048 (8-bit pixels) @7/8; 256 bins × 4 | pixels + 256 |
//! | k-means | Phoenix | *random* 16–96 points × 4 dims × 4 @7/8; 4 centroids × 16; labels × 4 | points × 4 × 4 × 8 iterations |
//! | PCA | Phoenix | *random* 8–24 rows × 8 cols × 4 @6/8; mean 8 × 4 @2/8; covariance 8 × 8 × 4 | rows × 64 × 2 |
//! | matrix multiply | Phoenix | A, B @7/8, C: *random* n × n × 4, n 6–16 | n³ |
//! | linear regression | Phoenix | *random* 32–256 points × (x, y) × 4 @7/8; 5 sums × 8 | points × 6 |
//! | string match | Phoenix | text *random* 128–1536 @7/8; 4 keys × 16 @7/8; 4 flags × 4 | text × 4 |
//! | dfadd | CHStone | a, b @6/8, z: 46 doubles × 8 | 46 × 30 |
//! | dfmul | CHStone | a, b @6/8, z: 20 doubles × 8 | 20 × 40 |
//! | dijkstra | MiBench | adjacency *random* n × n × 4, n 8–24 @6/8; dist, prev n × 4; queue n × 8 @6/8 | n² × 8 |
//! | sha | MiBench | message *random* 64–1024 @6/8; schedule 80 × 4 @7/8; digest 20 | 64-byte blocks × 80 × 4 |

use alloclab_core::rng::SplitMix64;

/// A kernel of the evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Phoenix histogram.
    Histogram,
    /// Phoenix k-means.
    KMeans,
    /// Phoenix PCA.
    Pca,
    /// Phoenix matrix multiply.
    MatrixMultiply,
    /// Phoenix linear regression.
    LinearRegression,
    /// Phoenix string match.
    StringMatch,
    /// CHStone double-precision add.
    DfAdd,
    /// CHStone double-precision multiply.
    DfMul,
    /// MiBench Dijkstra shortest paths.
    Dijkstra,
    /// MiBench SHA-1.
    Sha,
}

/// One invocation of a kernel: its buffer sizes, in allocation order, and its compute time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// Bytes of each buffer, in the order they are allocated.
    pub buffers: Vec<u32>,
    /// Cycles from the last allocation to the end of the computation.
    pub compute_cycles: u64,
    /// When each buffer is freed, in eighths of the compute time (1 to 8; 8: at the end).
    pub release_eighths: Vec<u8>,
}

impl Kernel {
    /// Every kernel, in the order of the table above.
    pub const ALL: [Kernel; 10] = [
        Kernel::Histogram,
        Kernel::KMeans,
        Kernel::Pca,
        Kernel::MatrixMultiply,
        Kernel::LinearRegression,
        Kernel::StringMatch,
        Kernel::DfAdd,
        Kernel::DfMul,
        Kernel::Dijkstra,
        Kernel::Sha,
    ];

    /// The kernel's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Histogram => "histogram",
            Self::KMeans => "kmeans",
            Self::Pca => "pca",
            Self::MatrixMultiply => "matmul",
            Self::LinearRegression => "linreg",
            Self::StringMatch => "string_match",
            Self::DfAdd => "dfadd",
            Self::DfMul => "dfmul",
            Self::Dijkstra => "dijkstra",
            Self::Sha => "sha",
        }
    }

    /// The kernel named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Draws one invocation.
    pub(crate) fn invocation(self, rng: &mut SplitMix64) -> Invocation {
        let mut r = |lo: u64, hi: u64| rng.range_inclusive(lo, hi) as u32;
        let (buffers, release_eighths, compute_cycles): (Vec<u32>, Vec<u8>, u64) = match self {
            Self::Histogram => {
                let pixels = r(256, 2048);
                (vec![pixels, 256 * 4], vec![7, 8], u64::from(pixels) + 256)
            }
            Self::KMeans => {
                let points = r(16, 96);
                (
                    vec![points * 16, 4 * 16, points * 4],
                    vec![7, 8, 8],
                    u64::from(points) * 4 * 4 * 8,
                )
            }
            Self::Pca => {
                let rows = r(8, 24);
                (
                    vec![rows * 8 * 4, 8 * 4, 8 * 8 * 4],
                    vec![6, 2, 8],
                    u64::from(rows) * 64 * 2,
                )
            }
            Self::MatrixMultiply => {
                let n = r(6, 16);
                (vec![n * n * 4; 3], vec![7, 7, 8], u64::from(n).pow(3))
            }
            Self::LinearRegression => {
                let points = r(32, 256);
                (vec![points * 8, 5 * 8], vec![7, 8], u64::from(points) * 6)
            }
            Self::StringMatch => {
                let text = r(128, 1536);
                (
                    vec![text, 4 * 16, 4 * 4],
                    vec![7, 7, 8],
                    u64::from(text) * 4,
                )
            }
            Self::DfAdd => (vec![46 * 8; 3], vec![6, 6, 8], 46 * 30),
            Self::DfMul => (vec![20 * 8; 3], vec![6, 6, 8], 20 * 40),
            Self::Dijkstra => {
                let n = r(8, 24);
                (
                    vec![n * n * 4, n * 4, n * 4, n * 8],
                    vec![6, 8, 8, 6],
                    u64::from(n * n) * 8,
                )
            }
            Self::Sha => {
                let message = r(64, 1024);
                (
                    vec![message, 80 * 4, 20],
                    vec![6, 7, 8],
                    u64::from(message.div_ceil(64)) * 80 * 4,
                )
            }
        };
        Invocation {
            buffers,
            compute_cycles,
            release_eighths,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_has_a_unique_name_and_nonempty_buffers() {
        let mut rng = SplitMix64::new(1);
        for k in Kernel::ALL {
            assert_eq!(Kernel::from_name(k.name()), Some(k));
            for _ in 0..100 {
                let inv = k.invocation(&mut rng);
                assert!(!inv.buffers.is_empty() && inv.buffers.iter().all(|&b| b > 0));
                assert!(inv.compute_cycles > 0);
                assert_eq!(inv.release_eighths.len(), inv.buffers.len());
                assert!(inv.release_eighths.iter().all(|e| (1..=8).contains(e)));
                assert!(inv.release_eighths.contains(&8), "outputs live to the end");
            }
        }
    }

    #[test]
    fn random_sizes_stay_in_their_ranges_and_vary() {
        let mut rng = SplitMix64::new(7);
        let sizes: Vec<u32> = (0..200)
            .map(|_| Kernel::Histogram.invocation(&mut rng).buffers[0])
            .collect();
        assert!(sizes.iter().all(|&s| (256..=2048).contains(&s)));
        assert!(sizes.iter().min() < Some(&400) && sizes.iter().max() > Some(&1900));
    }
}

//! YCSB for the `storage` suite: the mixes, the key choosers and the per-partition plan of
//! operations, all drawn before the clock starts.
//!
//! **Tuples.** An 8-byte key and five 200-byte columns, stored as one 1,000-byte value; an
//! update rewrites one column. The variable-size mix stores 1–256-byte values instead.
//!
//! **Keys.** Item numbers are YCSB's record numbers. The database is partitioned among the
//! threads: thread `t` of `T` owns the items `t, t + T, t + 2T, …`, numbered locally
//! `0, 1, 2, …`; its `i`-th item's key is [`key_of`]`(i * T + t)`, a bijective scramble
//! (the SplitMix64 finaliser of the item number plus one), so keys are distinct, spread over
//! the whole `u64` range, never 0, and the same for every heap and engine. The load phase
//! inserts a partition's items `0..loaded`; each insert of the run phase takes the next
//! fresh item number.
//!
//! **Choosing the item a read or update touches** (YCSB's `CoreWorkload`):
//! * [`KeyChoice::Zipfian`]: YCSB's `ScrambledZipfianGenerator` — a Zipfian draw over
//!   10^10 items with θ = 0.99 (Gray et al.'s generator, YCSB's precomputed ζ), hashed with
//!   FNV-1a-64 and reduced modulo the item count, so that the popular items are scattered
//!   over the key space instead of being the oldest ones. As in YCSB, the generator covers
//!   the loaded items plus twice the inserts expected in the run, and a draw beyond the
//!   items inserted so far is drawn again.
//! * [`KeyChoice::Uniform`]: uniform over the items inserted so far.
//!
//! **Deletes** (mix h) take the partition's loaded items in a random order, each once.

use rand::Rng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;

use crate::workloads::cpu::common;

/// Columns of a tuple.
pub const COLUMNS: usize = 5;
/// Bytes of a column.
pub const COLUMN_BYTES: usize = 200;
/// Bytes of a tuple's value (five columns).
pub const TUPLE_BYTES: usize = COLUMNS * COLUMN_BYTES;
/// Smallest value of the variable-size mix.
pub const VAR_MIN_BYTES: usize = 1;
/// Largest value of the variable-size mix.
pub const VAR_MAX_BYTES: usize = 256;
/// YCSB's Zipfian constant.
pub const ZIPFIAN_THETA: f64 = 0.99;
/// Items of the Zipfian draw behind YCSB's scrambled generator.
pub const SCRAMBLED_ITEMS: u64 = 10_000_000_000;
/// ζ(10^10, 0.99), as YCSB precomputes it (`ScrambledZipfianGenerator.ZETAN`).
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// A YCSB mix (the paper's a–h and the variable-size mix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mix {
    /// Reads only.
    A,
    /// 90% reads, 10% inserts.
    B,
    /// 50% reads, 50% inserts.
    C,
    /// 10% reads, 90% inserts.
    D,
    /// 90% reads, 10% updates.
    E,
    /// 50% reads, 50% updates.
    F,
    /// 10% reads, 90% updates.
    G,
    /// Deletes only.
    H,
    /// 50% reads, 50% inserts of 1–256-byte values.
    Var,
}

/// The shares of each kind of operation in a mix, in percent (they sum to 100).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proportions {
    /// Reads.
    pub read: u32,
    /// Inserts of fresh keys.
    pub insert: u32,
    /// Updates of one column.
    pub update: u32,
    /// Deletes.
    pub delete: u32,
}

impl Mix {
    /// Every mix, in report order.
    pub const ALL: [Mix; 9] = [
        Mix::A,
        Mix::B,
        Mix::C,
        Mix::D,
        Mix::E,
        Mix::F,
        Mix::G,
        Mix::H,
        Mix::Var,
    ];

    /// The name in workload names and reports (`a` … `h`, `var`).
    pub fn name(self) -> &'static str {
        match self {
            Mix::A => "a",
            Mix::B => "b",
            Mix::C => "c",
            Mix::D => "d",
            Mix::E => "e",
            Mix::F => "f",
            Mix::G => "g",
            Mix::H => "h",
            Mix::Var => "var",
        }
    }

    /// The mix called `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The paper's short description (`R50/I50`).
    pub fn describe(self) -> &'static str {
        match self {
            Mix::A => "R100",
            Mix::B => "R90/I10",
            Mix::C => "R50/I50",
            Mix::D => "R10/I90",
            Mix::E => "R90/U10",
            Mix::F => "R50/U50",
            Mix::G => "R10/U90",
            Mix::H => "D100",
            Mix::Var => "R50/I50, 1-256 B values",
        }
    }

    /// The shares of each kind of operation.
    pub fn proportions(self) -> Proportions {
        let p = |read, insert, update, delete| Proportions {
            read,
            insert,
            update,
            delete,
        };
        match self {
            Mix::A => p(100, 0, 0, 0),
            Mix::B => p(90, 10, 0, 0),
            Mix::C | Mix::Var => p(50, 50, 0, 0),
            Mix::D => p(10, 90, 0, 0),
            Mix::E => p(90, 0, 10, 0),
            Mix::F => p(50, 0, 50, 0),
            Mix::G => p(10, 0, 90, 0),
            Mix::H => p(0, 0, 0, 100),
        }
    }

    /// Whether values are 1–256 bytes instead of a 1,000-byte tuple.
    pub fn variable_size(self) -> bool {
        self == Mix::Var
    }
}

/// How reads and updates choose their item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyChoice {
    /// YCSB's scrambled Zipfian, θ = 0.99.
    Zipfian,
    /// Uniform over the items inserted so far.
    Uniform,
}

impl KeyChoice {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            KeyChoice::Zipfian => "zipfian",
            KeyChoice::Uniform => "uniform",
        }
    }
}

/// ζ(n, θ) = Σ_{i=1..n} 1 / i^θ.
pub fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

/// YCSB's `ZipfianGenerator` (Gray et al., "Quickly generating billion-record synthetic
/// databases", SIGMOD 1994) over the items `0..items`: item `i` has probability
/// `1 / ((i + 1)^θ ζ(items, θ))`, item 0 the most popular.
#[derive(Clone, Copy, Debug)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    /// A generator over `items` items (at least 2), computing ζ (O(items)).
    pub fn new(items: u64, theta: f64) -> Self {
        Self::with_zetan(items, theta, zeta(items, theta))
    }

    /// A generator over `items` items whose ζ(items, θ) is `zetan` (precomputed).
    pub fn with_zetan(items: u64, theta: f64, zetan: f64) -> Self {
        assert!(items >= 2, "a Zipfian generator needs at least two items");
        let zeta2 = zeta(2, theta);
        let eta = (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Self {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
        }
    }

    /// The item for a uniform `u` in `[0, 1)` (YCSB's `nextLong`).
    pub fn item(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        let item = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        item.min(self.items - 1)
    }

    /// The probability of the most popular item, `1 / ζ(items, θ)`.
    pub fn top_probability(&self) -> f64 {
        1.0 / self.zetan
    }
}

/// YCSB's `Utils.fnvhash64`: FNV-1a over the eight bytes of `value`, low byte first, made
/// non-negative as Java's `Math.abs` does.
pub fn fnvhash64(value: u64) -> u64 {
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    let mut v = value;
    for _ in 0..8 {
        hash ^= v & 0xff;
        hash = hash.wrapping_mul(1_099_511_628_211);
        v >>= 8;
    }
    (hash as i64).unsigned_abs()
}

/// YCSB's `ScrambledZipfianGenerator` over `0..items`: a Zipfian item of 10^10, hashed,
/// modulo `items`.
#[derive(Clone, Copy, Debug)]
pub struct ScrambledZipfian {
    zipfian: Zipfian,
    items: u64,
}

impl ScrambledZipfian {
    /// A generator over `items` items (at least 1).
    pub fn new(items: u64) -> Self {
        Self {
            zipfian: Zipfian::with_zetan(SCRAMBLED_ITEMS, ZIPFIAN_THETA, SCRAMBLED_ZETAN),
            items: items.max(1),
        }
    }

    /// The item for a uniform `u` in `[0, 1)`.
    pub fn item(&self, u: f64) -> u64 {
        fnvhash64(self.zipfian.item(u)) % self.items
    }

    /// At least the probability of the most popular item: that of the Zipfian's first item,
    /// `1 / ζ(10^10, 0.99)` ≈ 3.78% (other items hashed to the same slot add to it).
    pub fn top_probability(&self) -> f64 {
        self.zipfian.top_probability()
    }
}

/// The key of global item `item` (see the [module documentation](self)).
pub fn key_of(item: u64) -> u64 {
    mix64(item.wrapping_add(1))
}

/// SplitMix64's finaliser: a bijection of `u64` whose every output bit depends on every
/// input bit (the suite's hashes of item and operation numbers).
pub(super) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The share of `total` that partition `t` of `threads` gets (the first `total % threads`
/// partitions get one more).
pub fn share_of(total: u64, t: usize, threads: usize) -> u64 {
    let threads = threads.max(1) as u64;
    total / threads + u64::from((t as u64) < total % threads)
}

/// One operation of a partition's run phase, on its local item `item`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read the item's value.
    Read {
        /// Local item.
        item: u64,
    },
    /// Insert a fresh item with a value of `bytes` bytes.
    Insert {
        /// Local item (the next fresh one).
        item: u64,
        /// Value size.
        bytes: u32,
    },
    /// Rewrite column `column` of the item.
    Update {
        /// Local item.
        item: u64,
        /// Column, `0..COLUMNS`.
        column: u32,
    },
    /// Delete the item.
    Delete {
        /// Local item.
        item: u64,
    },
}

/// What one partition (thread) does: load `load_bytes.len()` items, then run `ops`.
#[derive(Clone, Debug)]
pub struct PartitionPlan {
    /// This partition's index.
    pub partition: usize,
    /// Partitions in all.
    pub partitions: usize,
    /// The value size of each loaded item.
    pub load_bytes: Vec<u32>,
    /// The run phase.
    pub ops: Vec<Op>,
}

impl PartitionPlan {
    /// The key of local item `item`.
    pub fn key(&self, item: u64) -> u64 {
        key_of(item * self.partitions as u64 + self.partition as u64)
    }

    /// Items loaded.
    pub fn loaded(&self) -> u64 {
        self.load_bytes.len() as u64
    }

    /// Items that exist after the run (loaded and inserted, minus deleted), and those
    /// deleted, as local item numbers.
    pub fn final_items(&self) -> (Vec<u64>, Vec<u64>) {
        let mut inserted = self.loaded();
        let mut deleted = Vec::new();
        for op in &self.ops {
            match *op {
                Op::Insert { .. } => inserted += 1,
                Op::Delete { item } => deleted.push(item),
                _ => {}
            }
        }
        let mut gone = vec![false; inserted as usize];
        for &d in &deleted {
            gone[d as usize] = true;
        }
        let live = (0..inserted).filter(|&i| !gone[i as usize]).collect();
        (live, deleted)
    }
}

/// The value size of an item of `mix`.
fn value_bytes(mix: Mix, rng: &mut SmallRng) -> u32 {
    if mix.variable_size() {
        rng.random_range(VAR_MIN_BYTES..=VAR_MAX_BYTES) as u32
    } else {
        TUPLE_BYTES as u32
    }
}

/// Draws partition `partition`'s plan: `loaded` items, then `ops` operations of `mix`, from
/// `seed` (the same for every heap and engine).
///
/// # Errors
///
/// The mix deletes more items than the partition holds.
pub fn plan_partition(
    mix: Mix,
    keys: KeyChoice,
    loaded: u64,
    ops: u64,
    partition: usize,
    partitions: usize,
    seed: u64,
) -> Result<PartitionPlan, String> {
    let mut rng = common::rng(seed, partition);
    let load_bytes = (0..loaded).map(|_| value_bytes(mix, &mut rng)).collect();
    let p = mix.proportions();
    // As YCSB: the chooser covers the loaded items and twice the inserts expected.
    let expected_new = ops * u64::from(p.insert) * 2 / 100;
    let zipfian = ScrambledZipfian::new(loaded + expected_new);
    let mut count = loaded;
    let mut deletable: Vec<u64> = if p.delete > 0 {
        let mut v: Vec<u64> = (0..loaded).collect();
        v.shuffle(&mut rng);
        v
    } else {
        Vec::new()
    };
    let choose = |rng: &mut SmallRng, count: u64| -> u64 {
        match keys {
            KeyChoice::Uniform => rng.random_range(0..count),
            KeyChoice::Zipfian => loop {
                let item = zipfian.item(rng.random::<f64>());
                if item < count {
                    break item;
                }
            },
        }
    };
    let mut plan = Vec::with_capacity(ops as usize);
    for _ in 0..ops {
        let roll = rng.random_range(0..100u32);
        let op = if roll < p.read {
            Op::Read {
                item: choose(&mut rng, count),
            }
        } else if roll < p.read + p.insert {
            count += 1;
            Op::Insert {
                item: count - 1,
                bytes: value_bytes(mix, &mut rng),
            }
        } else if roll < p.read + p.insert + p.update {
            Op::Update {
                item: choose(&mut rng, count),
                column: rng.random_range(0..COLUMNS as u32),
            }
        } else {
            let item = deletable.pop().ok_or_else(|| {
                format!(
                    "mix {} deletes more than the {loaded} items loaded",
                    mix.name()
                )
            })?;
            Op::Delete { item }
        };
        if count == 0 && !matches!(op, Op::Insert { .. }) {
            return Err(format!(
                "mix {} reads or writes an empty partition",
                mix.name()
            ));
        }
        plan.push(op);
    }
    Ok(PartitionPlan {
        partition,
        partitions,
        load_bytes,
        ops: plan,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use rand::SeedableRng;

    use super::*;

    #[test]
    fn every_mix_draws_its_proportions_within_one_percent() {
        for mix in Mix::ALL {
            let loaded = 20_000;
            let plan = plan_partition(mix, KeyChoice::Uniform, loaded, 20_000, 0, 1, 9).unwrap();
            let n = plan.ops.len() as f64;
            let share = |f: fn(&Op) -> bool| plan.ops.iter().filter(|o| f(o)).count() as f64 / n;
            let p = mix.proportions();
            assert_eq!(p.read + p.insert + p.update + p.delete, 100, "{mix:?}");
            let got = [
                share(|o| matches!(o, Op::Read { .. })),
                share(|o| matches!(o, Op::Insert { .. })),
                share(|o| matches!(o, Op::Update { .. })),
                share(|o| matches!(o, Op::Delete { .. })),
            ];
            let want = [p.read, p.insert, p.update, p.delete].map(|x| f64::from(x) / 100.0);
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 0.01, "{mix:?}: {got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn the_zipfian_top_items_have_their_theoretical_frequency() {
        let z = Zipfian::new(1000, ZIPFIAN_THETA);
        let mut rng = SmallRng::seed_from_u64(1);
        let draws = 400_000;
        let mut counts = vec![0u64; 1000];
        for _ in 0..draws {
            counts[z.item(rng.random::<f64>()) as usize] += 1;
        }
        let zetan = zeta(1000, ZIPFIAN_THETA);
        for rank in [0usize, 1, 9] {
            let want = 1.0 / ((rank + 1) as f64).powf(ZIPFIAN_THETA) / zetan;
            let got = counts[rank] as f64 / f64::from(draws);
            assert!(
                (got - want).abs() < 0.1 * want,
                "rank {rank}: {got} vs {want}"
            );
        }
        assert!(counts.windows(2).take(20).all(|w| w[0] >= w[1] / 2));
    }

    #[test]
    fn the_scrambled_zipfians_hottest_key_is_as_hot_as_ycsbs_and_precomputed_zeta_holds() {
        // ζ(10^10, 0.99) by the Euler–Maclaurin tail from 10^6 on: YCSB's constant.
        let head = zeta(1_000_000, ZIPFIAN_THETA);
        let s = 1.0 - ZIPFIAN_THETA;
        let (a, b) = (1e6f64, 1e10f64);
        let tail =
            (b.powf(s) - a.powf(s)) / s + 0.5 * (b.powf(-ZIPFIAN_THETA) - a.powf(-ZIPFIAN_THETA));
        assert!(
            (head + tail - SCRAMBLED_ZETAN).abs() < 1e-3,
            "{}",
            head + tail
        );

        let items = 10_000;
        let z = ScrambledZipfian::new(items);
        let mut rng = SmallRng::seed_from_u64(2);
        let draws = 400_000u64;
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for _ in 0..draws {
            *counts.entry(z.item(rng.random::<f64>())).or_default() += 1;
        }
        let top = *counts.values().max().unwrap() as f64 / draws as f64;
        let want = z.top_probability();
        assert!(top >= 0.9 * want && top < 1.3 * want, "top {top} vs {want}");
    }

    #[test]
    fn scrambling_spreads_the_hot_keys_over_the_item_space() {
        let items = 10_000u64;
        let z = ScrambledZipfian::new(items);
        let mut rng = SmallRng::seed_from_u64(3);
        let mut counts = vec![0u64; items as usize];
        for _ in 0..200_000 {
            counts[z.item(rng.random::<f64>()) as usize] += 1;
        }
        let mut ranked: Vec<usize> = (0..items as usize).collect();
        ranked.sort_by_key(|&i| std::cmp::Reverse(counts[i]));
        let hottest = &ranked[..10];
        let lo = *hottest.iter().min().unwrap() as u64;
        let hi = *hottest.iter().max().unwrap() as u64;
        // Unscrambled, the ten hottest would be items 0..10.
        assert!(hi - lo > items / 2, "hot items clustered: {hottest:?}");
        assert!(hottest.iter().filter(|&&i| (i as u64) < items / 10).count() < 5);
    }

    #[test]
    fn inserts_take_fresh_keys_and_reads_and_updates_only_existing_ones() {
        let threads = 2;
        let mut all_keys = HashSet::new();
        let mut expected = 0;
        for t in 0..threads {
            let plan =
                plan_partition(Mix::D, KeyChoice::Zipfian, 1000, 2000, t, threads, 5).unwrap();
            let mut existing: HashSet<u64> = (0..plan.loaded()).collect();
            for op in &plan.ops {
                match *op {
                    Op::Insert { item, bytes } => {
                        assert_eq!(bytes as usize, TUPLE_BYTES);
                        assert!(existing.insert(item), "item {item} inserted twice");
                    }
                    Op::Read { item } | Op::Update { item, .. } => {
                        assert!(existing.contains(&item), "{item} does not exist yet");
                    }
                    Op::Delete { .. } => unreachable!("mix d deletes nothing"),
                }
            }
            assert!(existing.len() > 1000 + 1700, "about 90% of 2000 ops insert");
            expected += existing.len();
            for item in existing {
                assert!(
                    all_keys.insert(plan.key(item)),
                    "a key is in two partitions"
                );
            }
        }
        assert_eq!(all_keys.len(), expected);
        assert!(!all_keys.contains(&0));
    }

    #[test]
    fn mix_h_deletes_every_loaded_key_once_and_var_values_are_1_to_256_bytes() {
        let plan = plan_partition(Mix::H, KeyChoice::Zipfian, 500, 500, 1, 2, 4).unwrap();
        let mut deleted: Vec<u64> = plan
            .ops
            .iter()
            .map(|o| match *o {
                Op::Delete { item } => item,
                other => panic!("{other:?} in mix h"),
            })
            .collect();
        deleted.sort_unstable();
        assert_eq!(deleted, (0..500).collect::<Vec<_>>());
        let (live, gone) = plan.final_items();
        assert!(live.is_empty());
        assert_eq!(gone.len(), 500);
        assert!(
            plan_partition(Mix::H, KeyChoice::Zipfian, 10, 11, 0, 1, 4)
                .unwrap_err()
                .contains("deletes more")
        );

        let var = plan_partition(Mix::Var, KeyChoice::Uniform, 2000, 2000, 0, 1, 4).unwrap();
        let sizes: Vec<u32> = var
            .load_bytes
            .iter()
            .copied()
            .chain(var.ops.iter().filter_map(|o| match *o {
                Op::Insert { bytes, .. } => Some(bytes),
                _ => None,
            }))
            .collect();
        assert!(sizes.iter().all(|&b| (1..=256).contains(&b)));
        assert!(sizes.contains(&1) && sizes.contains(&256));
    }

    #[test]
    fn partitions_share_out_the_items_and_mixes_round_trip_their_names() {
        assert_eq!(
            (0..3).map(|t| share_of(10, t, 3)).collect::<Vec<_>>(),
            [4, 3, 3]
        );
        for mix in Mix::ALL {
            assert_eq!(Mix::from_name(mix.name()), Some(mix));
        }
        assert_eq!(Mix::from_name("z"), None);
        assert_eq!(fnvhash64(0), fnvhash64(0));
        assert_ne!(key_of(0), key_of(1));
    }
}

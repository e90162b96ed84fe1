//! `auto`: pick an engine from the model's shape and the number of rows, as the Fast TreeSHAP
//! paper suggests: v2 pays `Σ_leaves 2^d·d` once to cut each row's leaf work to one table read
//! per path feature, so it wins once enough rows share the tables, and only if the tables fit
//! the memory bound and beat `linear`'s O(splits·⌈d/2⌉) per row; otherwise `linear`.

use std::fmt;

use super::fast_v2::table_bytes;
use super::linear::exact_points;
use super::options::Algorithm;
use super::prepared::{PreparedModel, UNREACHABLE};

/// Rows assumed when the caller cannot say how many will be explained.
const DEFAULT_ROWS: usize = 100_000;

/// What `auto` picked and why.
#[derive(Debug, Clone)]
pub struct AutoChoice {
    /// The engine.
    pub algorithm: Algorithm,
    /// A sentence for the log.
    pub reason: String,
}

impl fmt::Display for AutoChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.algorithm, self.reason)
    }
}

/// Operation-count estimates per row (linear, v2) and once (v2 tables).
struct Costs {
    linear_per_row: f64,
    v2_per_row: f64,
    v2_setup: f64,
}

/// `linear`'s cost per split and quadrature point, in v2's unit (one table read per path
/// element of a row). Fitted to one-thread timings (x86-64, AVX-512, 2026-11-26, after the
/// `linear` changes of issue 34): the value that would make the estimates match was 1.14
/// (medium-8f, 11 MiB of v2 tables), 1.00 (medium-multiclass, 12 MiB), 0.92 (medium-lightgbm,
/// 22 MiB), 0.90 (medium-54f, 24 MiB), 0.71 (medium-128f, 33 MiB) and 0.65 (a scikit-learn
/// forest of 100 trees of depth 10, one class of two, 68 MiB). `linear` was the faster engine on
/// all six (1.07× to 1.96×), and v2 falls further behind as its tables outgrow the caches, which
/// the estimate does not see; 0.6 picks `linear` on all six.
const LINEAR_PER_SPLIT_POINT: f64 = 0.6;

fn costs(p: &PreparedModel) -> Costs {
    let mut c = Costs { linear_per_row: 0.0, v2_per_row: 0.0, v2_setup: 0.0 };
    for (tree, prep) in p.model.trees().iter().zip(&p.trees) {
        let max_d = prep.leaf_path_lengths(tree).max().unwrap_or(0);
        let points = exact_points(max_d) as f64;
        for (node, &d) in tree.nodes.iter().zip(&prep.distinct) {
            if d == UNREACHABLE {
                continue;
            }
            let d = d as f64;
            // Both walk every split; linear combines its children's `points` values there,
            // v2 reads one table value per path feature at a leaf (half of them, with
            // sibling leaves paired).
            if node.is_leaf() {
                c.v2_per_row += 1.0 + d / 2.0;
                c.v2_setup += 2f64.powf(d) * (d + 2.0);
            } else {
                c.linear_per_row += LINEAR_PER_SPLIT_POINT * points;
                c.v2_per_row += 1.0;
            }
        }
    }
    c
}

/// Chooses `fast-v2` when its tables fit and pay for themselves, else `linear` (the reference
/// `treeshap`, `fast-v1` and `quadrature` are never faster than linear in the benchmark suite).
/// The estimates are operation counts; the benchmark suite checks the choice against timings.
pub(crate) fn choose_algorithm(p: &PreparedModel, rows_hint: Option<usize>, v2_memory_bytes: usize) -> AutoChoice {
    let rows = rows_hint.unwrap_or(DEFAULT_ROWS) as f64;
    // The same rule fast-v2 refuses by, so auto never picks an engine that would refuse.
    if let Err(refusal) = super::drivers::check_depth("fast-v2", p) {
        return AutoChoice { algorithm: Algorithm::Linear, reason: refusal.to_string() };
    }
    let bytes = match table_bytes(p) {
        None => return AutoChoice { algorithm: Algorithm::Linear, reason: "paths too long for fast-v2 tables".into() },
        Some(b) => b,
    };
    if bytes > v2_memory_bytes {
        return AutoChoice {
            algorithm: Algorithm::Linear,
            reason: format!("fast-v2 tables would need {} MiB, over the {} MiB bound", bytes >> 20, v2_memory_bytes >> 20),
        };
    }
    let c = costs(p);
    let linear = rows * c.linear_per_row;
    let v2 = c.v2_setup + rows * c.v2_per_row;
    if v2 < linear {
        AutoChoice {
            algorithm: Algorithm::FastV2,
            reason: format!("{:.1} MiB of tables, estimated {:.1}x less work than linear for {rows} rows", bytes as f64 / 1048576.0, linear / v2),
        }
    } else {
        AutoChoice { algorithm: Algorithm::Linear, reason: format!("estimated {:.1}x less work than fast-v2 for {rows} rows", v2 / linear) }
    }
}

//! `auto`: pick an engine from the model's shape and the number of rows, as the Fast TreeSHAP
//! paper suggests: v2 pays `Σ_leaves 2^d·d` once to cut each row's leaf work to one table read
//! per path feature, so it wins once enough rows share the tables, and only if the tables fit
//! the memory bound; otherwise quadrature.

use std::fmt;

use super::fast_v2::table_bytes;
use super::prepared::{PreparedModel, UNREACHABLE};
use super::quadrature::points_for;
use super::{Algorithm, EngineOptions};

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

/// Operation-count estimates per row (quadrature, v2) and once (v2 tables).
struct Costs {
    quadrature_per_row: f64,
    v2_per_row: f64,
    v2_setup: f64,
}

fn costs(p: &PreparedModel) -> Costs {
    let mut c = Costs { quadrature_per_row: 0.0, v2_per_row: 0.0, v2_setup: 0.0 };
    for (tree, prep) in p.model.trees.iter().zip(&p.trees) {
        let max_d = prep.leaf_path_lengths(tree).max().unwrap_or(0);
        let points = points_for(max_d) as f64;
        for (node, &d) in tree.nodes.iter().zip(&prep.distinct) {
            if d == UNREACHABLE {
                continue;
            }
            let d = d as f64;
            // Both walk every node; quadrature updates its `points` products at each, and at a
            // leaf takes one dot product per path feature; v2 reads one table value per path
            // feature (half of them, with sibling leaves paired).
            if node.is_leaf() {
                c.quadrature_per_row += points * (d + 1.0);
                c.v2_per_row += 1.0 + d / 2.0;
                c.v2_setup += 2f64.powf(d) * (d + 2.0);
            } else {
                c.quadrature_per_row += 2.0 * points;
                c.v2_per_row += 1.0;
            }
        }
    }
    c
}

/// Chooses `fast-v2` when its tables fit and pay for themselves, else `quadrature` (the
/// reference `treeshap` and `fast-v1` are never faster than quadrature in the benchmark suite).
/// The estimates are operation counts; the benchmark suite checks the choice against timings.
pub(crate) fn choose_algorithm(p: &PreparedModel, rows_hint: Option<usize>, options: &EngineOptions) -> AutoChoice {
    let rows = rows_hint.unwrap_or(DEFAULT_ROWS) as f64;
    let bytes = match table_bytes(p) {
        None => return AutoChoice { algorithm: Algorithm::Quadrature, reason: "paths too long for fast-v2 tables".into() },
        Some(b) => b,
    };
    if bytes > options.v2_memory_bytes {
        return AutoChoice {
            algorithm: Algorithm::Quadrature,
            reason: format!("fast-v2 tables would need {} MiB, over the {} MiB bound", bytes >> 20, options.v2_memory_bytes >> 20),
        };
    }
    let c = costs(p);
    let quadrature = rows * c.quadrature_per_row;
    let v2 = c.v2_setup + rows * c.v2_per_row;
    if v2 < quadrature {
        AutoChoice {
            algorithm: Algorithm::FastV2,
            reason: format!(
                "{:.1} MiB of tables, estimated {:.1}x less work than quadrature for {rows} rows",
                bytes as f64 / 1048576.0,
                quadrature / v2
            ),
        }
    } else {
        AutoChoice {
            algorithm: Algorithm::Quadrature,
            reason: format!("too few rows ({rows}) to amortise fast-v2's tables"),
        }
    }
}

//! `auto`: pick an engine from the model's shape and the number of rows, as the Fast TreeSHAP
//! paper suggests: v2 pays `Σ_leaves 2^d·d` once to cut each row's leaf work to one table read
//! per path feature, so it wins once enough rows share the tables, and only if the tables fit
//! the memory bound and beat `linear`'s O(splits·⌈d/2⌉) per row; otherwise `linear`. A model
//! of oblivious trees only (CatBoost's symmetric trees) gets `oblivious` when its tables
//! (`4^d·d²` once per tree, then `d` tests and reads per row) cost less than either.

use std::fmt;

use super::fast_v2::table_bytes;
use super::linear::exact_points;
use super::oblivious::{ObliviousShape, MAX_TABLE_DEPTH};
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

/// Chooses `oblivious` for a model of oblivious trees whose tables pay for themselves, else
/// `fast-v2` when its tables fit and pay for themselves, else `linear` (the reference
/// `treeshap`, `fast-v1` and `quadrature` are never faster than linear in the benchmark suite).
/// The estimates are operation counts; the benchmark suite checks the choice against timings.
pub(crate) fn choose_algorithm(p: &PreparedModel, rows_hint: Option<usize>, v2_memory_bytes: usize) -> AutoChoice {
    if let Some(c) = p.model.combinations() {
        // Only oblivious (tables, treeshap for the trees without one) and treeshap credit a
        // combination's splits to its features together.
        let reason = format!("the model has CTRs of feature combinations ({} columns), which oblivious and treeshap explain", c.columns().len());
        return AutoChoice { algorithm: Algorithm::Oblivious, reason };
    }
    let rows = rows_hint.unwrap_or(DEFAULT_ROWS) as f64;
    if let Some(choice) = oblivious_choice(p, rows, rows_hint.is_some(), v2_memory_bytes) {
        return choice;
    }
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

/// Building an oblivious table, per pair of leaf indices (`4^d` pairs a tree; the pair's
/// `k` extends and `k` unwound sums cost about the same at every depth, their divisions
/// dominating), in the unit of the other estimates (about 0.9 ns of `linear` on one thread).
/// Measured 2026-11-27 on this machine (x86-64, one thread; CatBoost regressors of 500 trees of
/// depth 6, 300 of depth 8 and 50 of depth 10, 20 features): 51, 58 and 55 ns a pair.
const OBLIVIOUS_BUILD_UNIT: f64 = 59.0;

/// A row's cost in an oblivious tree of depth `d`, in the same unit: `d` split tests and
/// table reads plus the tree's fixed cost. Measured as above (and on depths 3 and 4): 11 to
/// 32 ns a tree, about `6 + 2.5·d` ns. `linear` took 0.44 to 1.05 ns a unit of its estimate,
/// the most at the shallow depths where the two engines are close (depth 3: `linear` 8.6 ns a
/// tree, `oblivious` 11; depth 4: 19 and 14), so this is in units of about 1.1 ns.
fn oblivious_row_units(depth: usize) -> f64 {
    5.0 + 2.8 * depth as f64
}

/// Most work the tables may take to build when the caller does not say how many rows will be
/// explained (about two seconds on one thread): an explainer built for a few rows should not
/// wait longer for its tables than those rows would take.
const OBLIVIOUS_UNHINTED_SETUP: f64 = 2.2e9;

/// `oblivious` when every tree is oblivious and tabulated, the tables fit `memory_bytes`, and
/// building them plus a row's tests and reads costs less than `linear` (and `fast-v2`, where
/// its tables fit) for `rows` rows; with no row count given (`hinted` false), only if the
/// tables build in [`OBLIVIOUS_UNHINTED_SETUP`].
fn oblivious_choice(p: &PreparedModel, rows: f64, hinted: bool, memory_bytes: usize) -> Option<AutoChoice> {
    let (mut bytes, mut setup, mut per_row) = (0usize, 0.0, 0.0);
    for tree in p.model.trees() {
        let shape = ObliviousShape::of(tree).filter(|s| s.depth() <= MAX_TABLE_DEPTH)?;
        bytes = bytes.saturating_add(shape.table_bytes());
        setup += shape.index_pairs() * OBLIVIOUS_BUILD_UNIT;
        per_row += oblivious_row_units(shape.depth());
    }
    if !hinted && setup > OBLIVIOUS_UNHINTED_SETUP {
        return None;
    }
    if bytes > memory_bytes {
        return None;
    }
    let c = costs(p);
    let oblivious = setup + rows * per_row;
    let mut best_other = rows * c.linear_per_row;
    if table_bytes(p).is_some_and(|b| b <= memory_bytes) {
        best_other = best_other.min(c.v2_setup + rows * c.v2_per_row);
    }
    (oblivious < best_other).then(|| AutoChoice {
        algorithm: Algorithm::Oblivious,
        reason: format!(
            "every tree is oblivious: {:.1} MiB of tables, estimated {:.1}x less work than the other engines for {rows} rows",
            bytes as f64 / 1048576.0,
            best_other / oblivious
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::DEFAULT_V2_MEMORY_BYTES;
    use crate::test_fixtures::fixtures;

    #[test]
    fn catboosts_symmetric_trees_get_oblivious_tables_and_other_models_do_not() {
        let mut picked = 0;
        for f in &fixtures() {
            let p = PreparedModel::new(f.model.clone()).unwrap();
            let choice = choose_algorithm(&p, None, DEFAULT_V2_MEMORY_BYTES);
            if !f.is_catboost_symmetric() {
                assert_ne!(choice.algorithm, Algorithm::Oblivious, "{}: {choice}", f.name);
                continue;
            }
            // Depth 5 and up: d tests and reads a tree beat linear's walk (at depth 4 the two
            // are close and the estimate decides).
            if (5..=10).contains(&p.max_depth) {
                assert_eq!(choice.algorithm, Algorithm::Oblivious, "{}: {choice}", f.name);
            }
            picked += usize::from(choice.algorithm == Algorithm::Oblivious);
            // A handful of rows does not pay for the tables; no memory for them, neither.
            assert_ne!(choose_algorithm(&p, Some(1), DEFAULT_V2_MEMORY_BYTES).algorithm, Algorithm::Oblivious, "{}", f.name);
            assert_ne!(choose_algorithm(&p, None, 0).algorithm, Algorithm::Oblivious, "{}", f.name);
            if p.max_depth == 12 {
                // 4^12 pairs a tree: more than an explainer of an unknown row count should wait
                // for, but paid back by ten million rows.
                assert_ne!(choice.algorithm, Algorithm::Oblivious, "{}: {choice}", f.name);
                assert_eq!(choose_algorithm(&p, Some(10_000_000), DEFAULT_V2_MEMORY_BYTES).algorithm, Algorithm::Oblivious, "{}", f.name);
            }
        }
        assert!(picked >= 1, "no fixture of symmetric trees picked oblivious");
    }
}

//! Splits that test several input features at once: CatBoost's CTRs of feature combinations.
//!
//! A CatBoost CTR is a statistic of the training rows that share the row's value of its
//! *projection*: one categorical feature, or (with `max_ctr_complexity` above 1, which CatBoost
//! sets itself when it trains 200 trees or more) a combination of categorical features, float
//! conditions (`x > border`) and one-hot conditions (`c == value`). A split on the CTR of a
//! combination is a categorical split on the combination's value, which CatBoost identifies by a
//! 64-bit hash of its parts ([`combination_key`]) and looks up in the CTR's table.
//!
//! Such a split reads several input features, so it reads a [`CombinedColumn`] instead: a column
//! the feature block gains after the model's features (a row's value is the code of its
//! combination among those the CTR tables hold, or missing for one they do not hold, which goes
//! the way a CTR of no rows goes). The engines read the column to decide the split, and credit a
//! *player*: SHAP values are Shapley values of players, and a column's player is, as in
//! CatBoost's own `ShapValues`, the set of categorical features of its projection (its float and
//! one-hot conditions are not counted, as CatBoost does not count them). A set of one feature is
//! that feature; a set of several is a player of its own, whose value is then shared equally
//! among its features ([`Combinations::fold_values`], CatBoost's `UnpackInternalShaps`), so the
//! values still add up to the prediction. Interaction values of players are folded the same way
//! on both sides ([`Combinations::fold_interactions`]), which keeps every row of the matrix
//! summing to the feature's SHAP value.

use std::collections::HashMap;

/// CatBoost's multiplier in its hash of a feature combination (`CalcHash` of its model code):
/// each part `v` folds into the key as `key = M · (key + M · v)`, modulo 2^64.
pub(crate) const COMBINATION_HASH_MULTIPLIER: u64 = 0x4906_ba49_4954_cb65;

/// Most codes one combined column may have: codes are stored in the feature block as float32
/// values for CatBoost models, exact up to 2^24.
const MAX_CODES: usize = 1 << 24;

/// One part of a combination, in the order CatBoost hashes them (categorical features first,
/// then float conditions, then one-hot conditions).
#[derive(Debug, Clone, PartialEq)]
pub enum CombinationPart {
    /// A categorical feature's value, by its CatBoost hash (sign-extended to 64 bits).
    Category {
        /// The model's feature index.
        feature: u32,
    },
    /// Whether a numeric feature is above a border, compared in float32 (1) or not (0).
    Above {
        /// The model's feature index.
        feature: u32,
        /// The border.
        border: f32,
        /// Whether a missing value counts as above (CatBoost's `nan_value_treatment` `AsTrue`).
        missing_above: bool,
    },
    /// Whether a categorical feature's value has CatBoost hash `hash` (1) or not (0).
    Equals {
        /// The model's feature index.
        feature: u32,
        /// The category's CatBoost hash.
        hash: u32,
    },
}

impl CombinationPart {
    /// The model feature the part reads.
    pub fn feature(&self) -> u32 {
        match *self {
            CombinationPart::Category { feature } | CombinationPart::Above { feature, .. } | CombinationPart::Equals { feature, .. } => feature,
        }
    }
}

/// CatBoost's key of a combination whose parts have values `values` (a category's hash
/// sign-extended, a condition's 0 or 1).
pub fn combination_key(values: impl IntoIterator<Item = u64>) -> u64 {
    const M: u64 = COMBINATION_HASH_MULTIPLIER;
    values.into_iter().fold(0u64, |key, v| M.wrapping_mul(key.wrapping_add(M.wrapping_mul(v))))
}

/// The key value of a category hash: CatBoost's hashes are signed 32-bit numbers, widened with
/// their sign.
pub fn category_key_value(hash: u32) -> u64 {
    hash as i32 as i64 as u64
}

/// A column of the feature block derived from several features: the code of the row's
/// combination among the keys its CTR tables hold.
#[derive(Debug, Clone, PartialEq)]
pub struct CombinedColumn {
    /// What the column combines, for errors and descriptions: `"city", "store", f0 > 0.5`.
    description: String,
    parts: Vec<CombinationPart>,
    /// Code of each key the tables hold.
    codes: HashMap<u64, u32>,
    /// The player its splits credit (a model feature, or a shared player after them).
    player: u32,
}

impl CombinedColumn {
    /// What the column combines.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Its parts, in hash order.
    pub fn parts(&self) -> &[CombinationPart] {
        &self.parts
    }

    /// The code of a combination key, if a table holds it.
    pub fn code(&self, key: u64) -> Option<u32> {
        self.codes.get(&key).copied()
    }
}

/// What a reader gives to make a [`CombinedColumn`].
#[derive(Debug, Clone)]
pub struct CombinedColumnSpec {
    /// What it combines (see [`CombinedColumn::description`]).
    pub description: String,
    /// Its parts, in hash order.
    pub parts: Vec<CombinationPart>,
    /// The keys its tables hold, in the order their codes are given (each once).
    pub keys: Vec<u64>,
}

/// The combined columns of a model and the players its values are computed for.
#[derive(Debug, Clone, PartialEq)]
pub struct Combinations {
    num_features: usize,
    columns: Vec<CombinedColumn>,
    /// Per column (model features first, then the combined columns), the player it credits.
    players: Vec<u32>,
    /// Per shared player (numbered after the model's features), the features it is shared by:
    /// sorted, at least two.
    shared: Vec<Vec<u32>>,
}

impl Combinations {
    /// The combined columns `specs` of a model of `num_features` features, in column order (the
    /// first is column `num_features`). Errors say which column is wrong.
    pub fn new(num_features: usize, specs: Vec<CombinedColumnSpec>) -> std::result::Result<Combinations, String> {
        let mut players: Vec<u32> = (0..num_features as u32).collect();
        let mut shared: Vec<Vec<u32>> = Vec::new();
        let mut columns = Vec::with_capacity(specs.len());
        for spec in specs {
            let CombinedColumnSpec { description, parts, keys } = spec;
            if let Some(part) = parts.iter().find(|p| p.feature() as usize >= num_features) {
                return Err(format!("combination {description} reads feature {}, but the model has {num_features}", part.feature()));
            }
            let mut categories: Vec<u32> =
                parts.iter().filter(|p| matches!(p, CombinationPart::Category { .. })).map(CombinationPart::feature).collect();
            categories.sort_unstable();
            categories.dedup();
            let player = match categories.as_slice() {
                [] => return Err(format!("combination {description} has no categorical feature")),
                [one] => *one,
                several => {
                    let k = shared.iter().position(|s| s == several).unwrap_or_else(|| {
                        shared.push(several.to_vec());
                        shared.len() - 1
                    });
                    (num_features + k) as u32
                }
            };
            if keys.len() > MAX_CODES {
                return Err(format!("combination {description} has {} table keys, more than shapfusion takes ({MAX_CODES})", keys.len()));
            }
            let mut codes = HashMap::with_capacity(keys.len());
            for key in keys {
                let next = codes.len() as u32;
                codes.entry(key).or_insert(next);
            }
            players.push(player);
            columns.push(CombinedColumn { description, parts, codes, player });
        }
        Ok(Combinations { num_features, columns, players, shared })
    }

    /// The combined columns, in column order after the model's features.
    pub fn columns(&self) -> &[CombinedColumn] {
        &self.columns
    }

    /// Columns of the feature block: the model's features, then the combined columns.
    pub fn num_columns(&self) -> usize {
        self.players.len()
    }

    /// Players the engines compute values for: the model's features, then the shared ones.
    pub fn num_players(&self) -> usize {
        self.num_features + self.shared.len()
    }

    /// Per column, the player it credits.
    pub fn players(&self) -> &[u32] {
        &self.players
    }

    /// Per shared player (numbered after the model's features), the features it is shared by.
    pub fn shared(&self) -> &[Vec<u32>] {
        &self.shared
    }

    /// Each player's share of feature values: `(feature, weight)` pairs, the bias (the last
    /// player) to the bias.
    fn shares(&self) -> Vec<Vec<(usize, f64)>> {
        let f = self.num_features;
        let mut shares: Vec<Vec<(usize, f64)>> = (0..f).map(|j| vec![(j, 1.0)]).collect();
        for features in &self.shared {
            let weight = 1.0 / features.len() as f64;
            shares.push(features.iter().map(|&j| (j as usize, weight)).collect());
        }
        shares.push(vec![(f, 1.0)]);
        shares
    }

    /// Folds rows of player values (`groups` groups of `P + 1`, the bias last) into feature
    /// values (`groups` of `F + 1`): a shared player's value is split equally among its features.
    pub fn fold_values(&self, values: &[f64], groups: usize) -> Vec<f64> {
        let (p, f) = (self.num_players() + 1, self.num_features + 1);
        let shares = self.shares();
        let rows = values.len() / (groups * p).max(1);
        let mut out = vec![0.0; rows * groups * f];
        for (from, to) in values.chunks_exact(p).zip(out.chunks_exact_mut(f)) {
            for (v, share) in from.iter().zip(&shares) {
                for &(j, weight) in share {
                    to[j] += v * weight;
                }
            }
        }
        out
    }

    /// Folds rows of player interaction matrices (`groups` of `(P+1)²`) into feature matrices
    /// (`groups` of `(F+1)²`) by the same shares on both sides, so each row of a matrix still
    /// sums to its feature's folded SHAP value.
    pub fn fold_interactions(&self, values: &[f64], groups: usize) -> Vec<f64> {
        let (p, f) = (self.num_players() + 1, self.num_features + 1);
        let shares = self.shares();
        let rows = values.len() / (groups * p * p).max(1);
        let mut out = vec![0.0; rows * groups * f * f];
        for (from, to) in values.chunks_exact(p * p).zip(out.chunks_exact_mut(f * f)) {
            for (a, share_a) in shares.iter().enumerate() {
                for (b, share_b) in shares.iter().enumerate() {
                    let v = from[a * p + b];
                    if v == 0.0 {
                        continue;
                    }
                    for &(i, wi) in share_a {
                        for &(j, wj) in share_b {
                            to[i * f + j] += v * wi * wj;
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(description: &str, parts: Vec<CombinationPart>) -> CombinedColumnSpec {
        CombinedColumnSpec { description: description.into(), parts, keys: vec![7, 3, 7, 9] }
    }

    #[test]
    fn keys_fold_as_catboost_hashes_a_combination() {
        const M: u64 = COMBINATION_HASH_MULTIPLIER;
        // One category: M · (0 + M · h), the key of CatBoost's one-feature CTR tables.
        let h = 0xdead_beefu32;
        assert_eq!(combination_key([category_key_value(h)]), M.wrapping_mul(M.wrapping_mul(h as i32 as i64 as u64)));
        // Two parts: the first folded, then the second.
        let first = combination_key([5]);
        assert_eq!(combination_key([5, 1]), M.wrapping_mul(first.wrapping_add(M)));
        assert_eq!(category_key_value(0xffff_ffff), u64::MAX, "-1 widens with its sign");
    }

    #[test]
    fn players_are_the_categorical_features_of_a_projection() {
        let a = CombinationPart::Category { feature: 1 };
        let b = CombinationPart::Category { feature: 3 };
        let above = CombinationPart::Above { feature: 0, border: 0.5, missing_above: false };
        let c = Combinations::new(
            4,
            vec![spec("a, b", vec![a.clone(), b.clone()]), spec("a, f0", vec![a.clone(), above.clone()]), spec("b, a, f0", vec![b, a, above])],
        )
        .unwrap();
        assert_eq!(c.num_columns(), 7);
        // {a, b} is one shared player, whatever the order or the float conditions; {a} is a.
        assert_eq!(c.players(), &[0, 1, 2, 3, 4, 1, 4]);
        assert_eq!(c.num_players(), 5);
        assert_eq!(c.shared(), &[vec![1, 3]]);
        // Repeated keys get one code.
        assert_eq!(
            (c.columns()[0].code(7), c.columns()[0].code(3), c.columns()[0].code(9), c.columns()[0].code(1)),
            (Some(0), Some(1), Some(2), None)
        );
        let bad = Combinations::new(2, vec![spec("x", vec![CombinationPart::Category { feature: 2 }])]);
        assert!(bad.unwrap_err().contains("reads feature 2"));
        assert!(Combinations::new(2, vec![spec("x", vec![CombinationPart::Above { feature: 0, border: 0.0, missing_above: true }])]).is_err());
    }

    #[test]
    fn folds_share_a_players_value_and_keep_rows_summing() {
        let a = CombinationPart::Category { feature: 0 };
        let b = CombinationPart::Category { feature: 2 };
        let c = Combinations::new(3, vec![spec("a, b", vec![a, b])]).unwrap();
        // Players 0, 1, 2, {0, 2}, then the bias.
        let values = [1.0, 2.0, 3.0, 4.0, 10.0];
        assert_eq!(c.fold_values(&values, 1), vec![3.0, 2.0, 5.0, 10.0]);
        // A symmetric player matrix whose rows sum to `values`.
        let p = 5;
        let mut m = vec![0.0; p * p];
        for (i, v) in values.iter().enumerate() {
            m[i * p + i] = *v;
        }
        for (i, j, v) in [(0, 3, 0.5), (1, 3, -1.5), (0, 2, 0.25)] {
            m[i * p + j] += v;
            m[j * p + i] += v;
            m[i * p + i] -= v;
            m[j * p + j] -= v;
        }
        let folded = c.fold_interactions(&m, 1);
        let shap = c.fold_values(&values, 1);
        for i in 0..4 {
            let row: f64 = folded[i * 4..(i + 1) * 4].iter().sum();
            assert!((row - shap[i]).abs() < 1e-12, "row {i}: {row} vs {}", shap[i]);
            for j in 0..4 {
                assert_eq!(folded[i * 4 + j], folded[j * 4 + i]);
            }
        }
    }
}

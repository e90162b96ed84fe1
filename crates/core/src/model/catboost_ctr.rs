//! CatBoost's CTR splits ("OnlineCtr"): a categorical feature with more categories than
//! `one_hot_max_size` is split on a statistic of the training rows of the row's category (its
//! CTR), not on the category itself. The JSON carries what CatBoost predicts with:
//! `features_info.ctrs` lists each CTR (its type, prior, shift, scale and borders) and
//! `ctr_data` each table of per-category counts.
//!
//! A CTR of one categorical feature is a function of that feature's category alone, so a split
//! `ctr(category) > border` is a categorical split: the categories whose CTR is above the border
//! go the "greater" way (right), and a category the table does not hold (unseen in training, or
//! missing) takes the CTR of zero counts, so the default direction is that value's. The split's
//! SHAP attribution goes to the categorical feature, as CatBoost's own ShapValues give it.
//!
//! A CTR of a combination of features (`max_ctr_complexity` above 1: several categorical
//! features, or a categorical feature with float or one-hot conditions) is a function of the
//! combination's hash, which its table is keyed by: its split is a categorical split on a
//! combined column of the combination's codes ([`super::combinations`]), whose attribution goes to
//! the combination's categorical features, as CatBoost's own ShapValues give it.
//!
//! The value CatBoost compares is computed in float32, as CatBoost does:
//! `((good + prior_numerator) / (total + prior_denominator) + shift) * scale`, where `good` and
//! `total` depend on the CTR's type (`Borders`, `Buckets`, `Counter`/`FeatureFreq`).

use std::collections::HashMap;

use serde_json::Value;

use super::combinations::{category_key_value, combination_key, COMBINATION_HASH_MULTIPLIER as HASH_MULTIPLIER};
use super::MAX_GROUPS;

/// How a CTR turns a category's counts into the numbers it divides.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CtrKind {
    /// Rows of the category above the target border (classes above `target_border_idx`) over
    /// all of them.
    Borders,
    /// Rows of the category in class `target_border_idx` over all of them.
    Buckets,
    /// The category's row count over the table's `counter_denominator` (`Counter`, and
    /// `FeatureFreq`, which CatBoost computes the same way).
    Counter,
}

/// What a CTR is a statistic of: one categorical feature's values, or a combination's.
#[derive(Debug, Clone, PartialEq)]
enum Projection {
    /// The categorical feature's `cat_feature_index`.
    Single(u64),
    /// A combination: its index in [`Ctrs::combinations`].
    Combined(usize),
}

/// One part of a combination, as `features_info.ctrs[].elements` gives it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Element {
    /// A categorical feature's value (`cat_feature_index`).
    Category(u64),
    /// Whether a float feature (`float_feature_index`) is above a border.
    Above(u64, f32),
    /// Whether a categorical feature (`cat_feature_index`) has the value of a hash.
    Equals(u64, u32),
}

/// A combination some CTRs are statistics of, and the keys their tables hold.
pub(super) struct Combination {
    /// What it combines, named (for errors and descriptions).
    pub description: String,
    /// Its parts, in the order CatBoost hashes them.
    pub elements: Vec<Element>,
    /// The keys of its CTRs' tables, each once, in a stable order: the combined column's codes.
    pub keys: Vec<u64>,
}

/// A CTR split as the tree reads it: the categories (or combinations) whose CTR is above the
/// border, as codes, and whether one the table does not hold is.
pub(super) struct CtrSplit {
    /// What the split reads.
    pub reads: CtrInput,
    /// The codes that go right.
    pub right: Vec<u32>,
    /// Whether a category or combination the table does not hold (unseen in training, or
    /// missing) goes right.
    pub unseen_right: bool,
}

/// What a CTR split reads.
pub(super) enum CtrInput {
    /// A categorical feature (`cat_feature_index`); codes index its category hashes.
    Category(u64),
    /// A combination (its index in [`Ctrs::combinations`]); codes index its keys.
    Combination(usize),
}

/// One entry of `features_info.ctrs`.
struct CtrFeature {
    projection: Projection,
    kind: CtrKind,
    /// The key of its table in `ctr_data`.
    identifier: String,
    prior_numerator: f32,
    prior_denominator: f32,
    shift: f32,
    scale: f32,
    target_border_idx: usize,
    borders: Vec<f64>,
}

/// One table of `ctr_data`: per key (a category's or combination's hash), its counts (one per
/// class, or one row count).
struct CtrTable {
    counts: HashMap<u64, Vec<u64>>,
    counter_denominator: f64,
}

/// The CTRs of one model file, and their tables.
pub(super) struct Ctrs {
    features: Vec<CtrFeature>,
    tables: HashMap<String, CtrTable>,
    /// The combinations CTRs are statistics of, each once.
    combinations: Vec<Combination>,
    /// The `split_index` of the first CTR border: CatBoost numbers its binary features float
    /// borders first, then one-hot values, then CTR borders (in `features_info` order).
    first_split_index: usize,
    /// Categorical split sets already computed, by (CTR, border): the codes that go right and
    /// whether a category the table does not hold does.
    sets: HashMap<(usize, usize), (Vec<u32>, bool)>,
}

impl Ctrs {
    /// Reads `features_info.ctrs` and the `ctr_data` tables of the one-feature CTRs.
    /// `cat_names` and `float_names` name the features by `cat_feature_index` and
    /// `float_feature_index` (for errors);
    /// `first_split_index` is the number of float borders and one-hot values.
    pub(super) fn read(
        info: &Value,
        ctr_data: Option<&Value>,
        cat_names: &dyn Fn(u64) -> String,
        float_names: &dyn Fn(u64) -> String,
        first_split_index: usize,
    ) -> std::result::Result<Ctrs, String> {
        let list = info.get("ctrs").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let mut features = Vec::with_capacity(list.len());
        let mut tables: HashMap<String, CtrTable> = HashMap::new();
        let mut combinations: Vec<Combination> = Vec::new();
        for (c, ctr) in list.iter().enumerate() {
            let bad = |what: &str| format!("features_info.ctrs[{c}] has no {what}");
            let number = |key: &str| ctr.get(key).and_then(Value::as_f64).filter(|x| x.is_finite()).ok_or_else(|| bad(key));
            let kind = match ctr.get("ctr_type").and_then(Value::as_str).ok_or_else(|| bad("ctr_type"))? {
                "Borders" => CtrKind::Borders,
                "Buckets" => CtrKind::Buckets,
                "Counter" | "FeatureFreq" => CtrKind::Counter,
                other => {
                    return Err(format!(
                        "features_info.ctrs[{c}] is a CTR of type {other:?}: not built yet (Borders, Buckets, Counter and FeatureFreq are read)"
                    ))
                }
            };
            let identifier = ctr.get("identifier").and_then(Value::as_str).ok_or_else(|| bad("identifier"))?.to_string();
            let projection = match projection(ctr.get("elements"), cat_names, float_names).map_err(|e| format!("features_info.ctrs[{c}]: {e}"))? {
                Ok(single) => Projection::Single(single),
                Err((description, elements)) => Projection::Combined(match combinations.iter().position(|k| k.elements == elements) {
                    Some(k) => k,
                    None => {
                        combinations.push(Combination { description, elements, keys: Vec::new() });
                        combinations.len() - 1
                    }
                }),
            };
            let borders = ctr
                .get("borders")
                .and_then(Value::as_array)
                .ok_or_else(|| bad("borders"))?
                .iter()
                .map(|b| b.as_f64().ok_or_else(|| format!("features_info.ctrs[{c}] has a border {b} that is not a number")))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let target_border_idx = ctr.get("target_border_idx").and_then(Value::as_u64).ok_or_else(|| bad("target_border_idx"))? as usize;
            if !tables.contains_key(&identifier) {
                let table = ctr_data
                    .and_then(|d| d.get(&identifier))
                    .ok_or_else(|| format!("ctr_data has no table {identifier} (CatBoost writes it unless the model was trained with final_ctr_computation_mode=\"Skip\", which CatBoost cannot predict with either)"))?;
                tables.insert(identifier.clone(), CtrTable::read(table).map_err(|e| format!("ctr_data table {identifier}: {e}"))?);
            }
            if let Projection::Combined(k) = projection {
                let mut keys: Vec<u64> = tables[&identifier].counts.keys().copied().collect();
                // A stable order of codes, whatever the hash map's.
                keys.sort_unstable();
                let combination = &mut combinations[k];
                let mut known: std::collections::HashSet<u64> = combination.keys.iter().copied().collect();
                combination.keys.extend(keys.into_iter().filter(|key| known.insert(*key)));
            }
            features.push(CtrFeature {
                projection,
                kind,
                identifier,
                prior_numerator: number("prior_numerator")? as f32,
                prior_denominator: number("prior_denomerator").or_else(|_| number("prior_denominator"))? as f32,
                shift: number("shift")? as f32,
                scale: number("scale")? as f32,
                target_border_idx,
                borders,
            });
        }
        Ok(Ctrs { features, tables, combinations, first_split_index, sets: HashMap::new() })
    }

    /// The combinations CTRs are statistics of (the combined columns, in order).
    pub(super) fn combinations(&self) -> &[Combination] {
        &self.combinations
    }

    /// A CTR that `features_info.ctrs` lists more than once with the same table, prior, shift,
    /// scale and target border (differing in borders only). CatBoost writes that for a
    /// multi-target (MultiRMSE) model, whose CTRs of each target have tables of their own that
    /// its JSON merges into one: CatBoost's own predictions from such a file differ from the
    /// trained model's.
    pub(super) fn merged_table(&self) -> Option<&str> {
        let same = |a: &CtrFeature, b: &CtrFeature| {
            a.identifier == b.identifier
                && a.target_border_idx == b.target_border_idx
                && (a.prior_numerator, a.prior_denominator, a.shift, a.scale) == (b.prior_numerator, b.prior_denominator, b.shift, b.scale)
        };
        self.features.iter().enumerate().find(|(i, a)| self.features[..*i].iter().any(|b| same(a, b))).map(|(_, a)| a.identifier.as_str())
    }

    /// The category hashes the one-feature CTRs of categorical feature `cat_feature_index` hold
    /// counts for, table by table (a hash in several tables comes once per table).
    pub(super) fn category_hashes(&self, cat_feature_index: u64) -> Vec<u32> {
        let mut hashes = Vec::new();
        // The key of category hash h is M²·h (mod 2^64): h = key · (M²)⁻¹, a sign-extended
        // 32-bit hash for every key that is some category's.
        let inverse = inverse_mod_2_64(HASH_MULTIPLIER.wrapping_mul(HASH_MULTIPLIER));
        for ctr in self.features.iter().filter(|c| c.projection == Projection::Single(cat_feature_index)) {
            if let Some(table) = self.tables.get(&ctr.identifier) {
                let mut keys: Vec<u32> =
                    table.counts.keys().filter_map(|key| i32::try_from(key.wrapping_mul(inverse) as i64).ok()).map(|h| h as u32).collect();
                // A stable order of codes, whatever the hash map's.
                keys.sort_unstable();
                hashes.extend(keys);
            }
        }
        hashes
    }

    /// An "OnlineCtr" split: what it reads, the codes that go right and where a category or
    /// combination the table does not hold goes. A one-feature CTR's codes index the feature's
    /// category hashes (`category_hashes[code]` is the code's hash); a combination's index its
    /// keys ([`Combination::keys`]).
    pub(super) fn split<'h>(&mut self, split: &Value, category_hashes: &dyn Fn(u64) -> Option<&'h [u32]>) -> std::result::Result<CtrSplit, String> {
        let border = split.get("border").and_then(Value::as_f64).ok_or("CTR split has no border")?;
        let target = split.get("ctr_target_border_idx").and_then(Value::as_u64);
        let (c, k) = self.find(split.get("split_index").and_then(Value::as_u64), border, target)?;
        let ctr = &self.features[c];
        let reads = match ctr.projection {
            Projection::Single(feature) => CtrInput::Category(feature),
            Projection::Combined(combination) => CtrInput::Combination(combination),
        };
        if let Some((right, unseen_right)) = self.sets.get(&(c, k)) {
            return Ok(CtrSplit { reads, right: right.clone(), unseen_right: *unseen_right });
        }
        let table = self.tables.get(&ctr.identifier).ok_or_else(|| format!("ctr_data has no table {}", ctr.identifier))?;
        let border = ctr.borders[k] as f32;
        let keys: Vec<u64> = match reads {
            CtrInput::Category(feature) => category_hashes(feature).unwrap_or_default().iter().map(|&h| one_feature_key(h)).collect(),
            CtrInput::Combination(combination) => self.combinations[combination].keys.clone(),
        };
        let mut right = Vec::new();
        for (code, key) in keys.iter().enumerate() {
            let counts = table.counts.get(key).map(Vec::as_slice);
            if ctr.value(table, counts)? > border {
                right.push(code as u32);
            }
        }
        let unseen_right = ctr.value(table, None)? > border;
        self.sets.insert((c, k), (right.clone(), unseen_right));
        Ok(CtrSplit { reads, right, unseen_right })
    }

    /// The CTR and border a split tests: by its `split_index` where that points at a CTR border
    /// equal to the split's, else the one CTR border equal to it (with the same target border).
    fn find(&self, split_index: Option<u64>, border: f64, target: Option<u64>) -> std::result::Result<(usize, usize), String> {
        if let Some(mut i) = split_index.and_then(|i| (i as usize).checked_sub(self.first_split_index)) {
            for (c, ctr) in self.features.iter().enumerate() {
                if i < ctr.borders.len() {
                    if ctr.borders[i] == border {
                        return Ok((c, i));
                    }
                    break;
                }
                i -= ctr.borders.len();
            }
        }
        let mut matches = self.features.iter().enumerate().flat_map(|(c, ctr)| {
            ctr.borders
                .iter()
                .enumerate()
                .filter(move |(_, b)| **b == border && target.is_none_or(|t| t as usize == ctr.target_border_idx))
                .map(move |(k, _)| (c, k))
        });
        match (matches.next(), matches.next()) {
            (Some(found), None) => Ok(found),
            (None, _) => Err(format!("CTR split at border {border}, which no CTR of features_info.ctrs has")),
            (Some(_), Some(_)) => {
                Err(format!("CTR split at border {border}: several CTRs of features_info.ctrs have it, and its split_index names none of them"))
            }
        }
    }
}

impl CtrFeature {
    /// The CTR of a category with `counts` (`None`: a category the table does not hold), in
    /// float32 as CatBoost computes it.
    fn value(&self, table: &CtrTable, counts: Option<&[u64]>) -> std::result::Result<f32, String> {
        let (good, total) = match counts {
            None => (0.0, 0.0),
            Some(counts) => {
                let sum = |c: &[u64]| c.iter().map(|&x| x as f64).sum::<f64>();
                match self.kind {
                    CtrKind::Counter => (sum(&counts[..1]), table.counter_denominator),
                    CtrKind::Buckets => {
                        let good = counts.get(self.target_border_idx).ok_or_else(|| self.no_class(counts.len()))?;
                        (*good as f64, sum(counts))
                    }
                    // Two classes: the second over both, whatever the target border.
                    CtrKind::Borders if counts.len() == 2 => (counts[1] as f64, sum(counts)),
                    CtrKind::Borders => {
                        let above = counts.get(self.target_border_idx + 1..).ok_or_else(|| self.no_class(counts.len()))?;
                        (sum(above), sum(counts))
                    }
                }
            }
        };
        let ctr = (good as f32 + self.prior_numerator) / (total as f32 + self.prior_denominator);
        Ok((ctr + self.shift) * self.scale)
    }

    fn no_class(&self, classes: usize) -> String {
        format!("CTR {} has target_border_idx {}, but its table has {classes} classes", self.identifier, self.target_border_idx)
    }
}

impl CtrTable {
    /// `{"hash_map": [key, count, ...], "hash_stride": 1 + counts per key, "counter_denominator"}`.
    /// Keys that are no one category's (CatBoost's empty-slot marker) are skipped.
    fn read(table: &Value) -> std::result::Result<CtrTable, String> {
        let stride = table.get("hash_stride").and_then(Value::as_u64).ok_or("no hash_stride")? as usize;
        if !(2..=MAX_GROUPS + 1).contains(&stride) {
            return Err(format!("hash_stride {stride} is not 1 + a count per class"));
        }
        let flat = table.get("hash_map").and_then(Value::as_array).ok_or("no hash_map")?;
        if flat.len() % stride != 0 {
            return Err(format!("hash_map has {} numbers, not a multiple of hash_stride {stride}", flat.len()));
        }
        let mut counts = HashMap::with_capacity(flat.len() / stride);
        for entry in flat.chunks_exact(stride) {
            let key = match &entry[0] {
                Value::String(s) => s.parse::<u64>().ok(),
                v => v.as_u64(),
            }
            .ok_or_else(|| format!("hash_map key {} is not a 64-bit hash", entry[0]))?;
            let values = entry[1..]
                .iter()
                .map(Value::as_u64)
                .collect::<Option<Vec<u64>>>()
                .ok_or("hash_map holds a count that is not a non-negative integer")?;
            // CatBoost marks an empty slot of its hash table with the largest key.
            if key != u64::MAX {
                counts.insert(key, values);
            }
        }
        let counter_denominator = table.get("counter_denominator").and_then(Value::as_f64).filter(|d| d.is_finite()).unwrap_or(0.0);
        Ok(CtrTable { counts, counter_denominator })
    }
}

/// What a CTR's `elements` project on: the categorical feature's index when it is one
/// categorical feature's values, else the combination, described (with the features named)
/// and as its parts in the order CatBoost hashes them: categorical features, then float
/// conditions, then one-hot conditions.
#[allow(clippy::type_complexity)]
fn projection(
    elements: Option<&Value>,
    cat_names: &dyn Fn(u64) -> String,
    float_names: &dyn Fn(u64) -> String,
) -> std::result::Result<std::result::Result<u64, (String, Vec<Element>)>, String> {
    let elements = elements.and_then(Value::as_array).filter(|e| !e.is_empty()).ok_or("no elements")?;
    let mut parts = Vec::with_capacity(elements.len());
    for e in elements {
        let kind = e.get("combination_element").and_then(Value::as_str).unwrap_or("?");
        let cat = e.get("cat_feature_index").and_then(Value::as_u64);
        let part = match (kind, cat) {
            ("cat_feature_value", Some(c)) => (0, Element::Category(c), cat_names(c)),
            ("float_feature", _) => {
                let f = e.get("float_feature_index").and_then(Value::as_u64).ok_or("a float_feature element has no float_feature_index")?;
                let border = e.get("border").and_then(Value::as_f64).ok_or("a float_feature element has no border")?;
                (1, Element::Above(f, border as f32), format!("{} > {border}", float_names(f)))
            }
            ("cat_feature_exact_value", Some(c)) => {
                let value = e
                    .get("value")
                    .and_then(Value::as_i64)
                    .filter(|h| (i32::MIN as i64..=u32::MAX as i64).contains(h))
                    .ok_or("a cat_feature_exact_value element has no 32-bit hash value")?;
                (2, Element::Equals(c, value as u32), format!("{} = hash {}", cat_names(c), value as u32))
            }
            _ => {
                return Err(format!(
                    "an element of kind {kind:?}: not built yet (cat_feature_value, float_feature and cat_feature_exact_value are read)"
                ))
            }
        };
        parts.push(part);
    }
    if let [(_, Element::Category(c), _)] = parts.as_slice() {
        return Ok(Ok(*c));
    }
    // CatBoost hashes a combination's categorical features, then its float conditions, then its
    // one-hot conditions, each in the order listed.
    parts.sort_by_key(|(rank, _, _)| *rank);
    let description = parts.iter().map(|(_, _, d)| d.as_str()).collect::<Vec<_>>().join(", ");
    Ok(Err((description, parts.into_iter().map(|(_, e, _)| e).collect())))
}

/// The table key of a one-feature CTR for category hash `h`: CatBoost's hash of a combination of
/// that one category.
fn one_feature_key(h: u32) -> u64 {
    combination_key([category_key_value(h)])
}

/// The inverse of an odd number modulo 2^64 (Newton's iteration: each step doubles the bits).
fn inverse_mod_2_64(a: u64) -> u64 {
    let mut x = a; // right in the low 3 bits for any odd a
    for _ in 0..5 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inverse_multiplies_to_one() {
        for a in [HASH_MULTIPLIER, HASH_MULTIPLIER.wrapping_mul(HASH_MULTIPLIER), 3, u64::MAX] {
            assert_eq!(a.wrapping_mul(inverse_mod_2_64(a)), 1, "{a}");
        }
    }

    #[test]
    fn table_keys_decode_to_the_category_hashes_catboost_combined() {
        // CatBoost's key of hash h: M * (0 + M * h), h sign-extended.
        let hashes = [0u32, 1, 0x7fff_ffff, 0x8000_0000, 0xdead_beef];
        let flat: Vec<Value> = hashes
            .iter()
            .flat_map(|&h| {
                let key = HASH_MULTIPLIER.wrapping_mul(HASH_MULTIPLIER.wrapping_mul(h as i32 as i64 as u64));
                [Value::String(key.to_string()), Value::from(h as u64 % 7), Value::from(1)]
            })
            .chain([Value::String(u64::MAX.to_string()), Value::from(5), Value::from(5)])
            .collect();
        let table = CtrTable::read(&serde_json::json!({"hash_map": flat, "hash_stride": 3, "counter_denominator": 0})).unwrap();
        // The empty-slot marker (2^64 - 1) is no category's key.
        assert_eq!(table.counts.len(), hashes.len());
        for h in hashes {
            assert_eq!(table.counts[&one_feature_key(h)], vec![h as u64 % 7, 1]);
        }
    }

    #[test]
    fn ctr_values_follow_catboost_per_type() {
        let table = CtrTable { counts: HashMap::new(), counter_denominator: 40.0 };
        let ctr = |kind, target_border_idx| CtrFeature {
            projection: Projection::Single(0),
            kind,
            identifier: "t".into(),
            prior_numerator: 0.5,
            prior_denominator: 1.0,
            shift: 0.0,
            scale: 15.0,
            target_border_idx,
            borders: vec![],
        };
        let v = |kind, t, counts: Option<&[u64]>| ctr(kind, t).value(&table, counts).unwrap();
        // Binary Borders: the second class over both.
        assert_eq!(v(CtrKind::Borders, 0, Some(&[3, 1])), (1.5f32 / 5.0) * 15.0);
        // Three classes, target border 0: classes 1 and 2 over all.
        assert_eq!(v(CtrKind::Borders, 0, Some(&[3, 1, 2])), (3.5f32 / 7.0) * 15.0);
        assert_eq!(v(CtrKind::Buckets, 2, Some(&[3, 1, 2])), (2.5f32 / 7.0) * 15.0);
        assert_eq!(v(CtrKind::Counter, 0, Some(&[9])), (9.5f32 / 41.0) * 15.0);
        // A category the table does not hold: zero counts, whatever the type.
        assert_eq!(v(CtrKind::Counter, 0, None), 0.5 * 15.0);
        assert!(ctr(CtrKind::Buckets, 3).value(&table, Some(&[1, 2])).is_err());
    }
}

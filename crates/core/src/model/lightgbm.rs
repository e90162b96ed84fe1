//! LightGBM text model reader (`Booster.save_model("model.txt")`, format `version=v2..v4`).
//!
//! Internal nodes are numbered `0..num_leaves-1` and leaves `~leaf` in the file; we store
//! internal nodes first and leaves after them. Cover is the node's training row count
//! (`internal_count` / `leaf_count`), which is what LightGBM's own `pred_contrib` weighs by.
//! `leaf_value` already includes the tree's `shrinkage`. `average_output` (random forest mode)
//! becomes a tree weight of 1/iterations, so attributions add up to the averaged prediction.
//! Linear trees (`linear_tree=1`; a tree's `is_linear=1`) keep each leaf's linear model
//! (`leaf_const`, `leaf_features`, `leaf_coeff`) beside its `leaf_value`, which LightGBM gives a
//! row missing one of the model's features ([`LinearLeaf`]).

use std::collections::HashMap;

use super::{
    as_index, check_count, Categories, FeatureKind, LinearLeaf, MissingType, ModelFile, ModelFormat, ModelParts, Node, Precision, SplitRule, Tree,
    LEAF, MAX_FEATURES, MAX_GROUPS,
};
use crate::error::Result;

pub(super) fn from_text_bytes(bytes: &[u8], name: &str) -> Result<ModelParts> {
    let file = ModelFile::new(name, ModelFormat::LightgbmText);
    let text = std::str::from_utf8(bytes).map_err(|e| file.error(format!("not UTF-8 text ({e})")))?;
    let err = |detail: String| file.error(detail);

    // Header: key=value lines (and bare flags such as `average_output`) up to the first tree.
    let mut lines = text.lines().enumerate().peekable();
    let mut header: HashMap<&str, &str> = HashMap::new();
    while let Some((_, line)) = lines.peek() {
        if line.starts_with("Tree=") || line.starts_with("end of trees") {
            break;
        }
        let line = lines.next().unwrap().1.trim();
        match line.split_once('=') {
            Some((k, v)) => header.insert(k, v),
            None => header.insert(line, ""),
        };
    }
    let get = |k: &str| header.get(k).copied().ok_or_else(|| err(format!("header has no {k}= line")));
    let parse_usize = |k: &str| -> Result<usize> { get(k)?.trim().parse::<usize>().map_err(|_| err(format!("header {k}= is not a count"))) };
    let num_class = check_count(parse_usize("num_class")?, MAX_GROUPS, "num_class").map_err(err)?;
    let per_iter = header
        .get("num_tree_per_iteration")
        .map(|v| v.trim().parse::<usize>())
        .transpose()
        .map_err(|_| err("num_tree_per_iteration= is not a count".into()))?
        .unwrap_or(num_class)
        .max(1);
    let per_iter = check_count(per_iter, MAX_GROUPS, "num_tree_per_iteration").map_err(err)?;
    let max_feature_idx: i64 = get("max_feature_idx")?.trim().parse().map_err(|_| err("max_feature_idx= is not a number".into()))?;
    if !(-1..MAX_FEATURES as i64).contains(&max_feature_idx) {
        return Err(err(format!("max_feature_idx={max_feature_idx} is not a feature count shapfusion takes (0 to {})", MAX_FEATURES - 1)));
    }
    let num_features = (max_feature_idx + 1) as usize;
    let feature_names: Vec<String> = match header.get("feature_names") {
        Some(v) => v.split_whitespace().map(str::to_string).collect(),
        None => (0..num_features).map(|i| format!("Column_{i}")).collect(),
    };
    if feature_names.len() != num_features {
        return Err(err(format!("{} feature_names for max_feature_idx={max_feature_idx}", feature_names.len())));
    }
    let objective = header.get("objective").map(|s| s.trim().to_string()).unwrap_or_default();
    let average_output = header.contains_key("average_output");
    // LightGBM always ends the tree list with this line; without it the file was cut short.
    if !text.contains("end of trees") {
        return Err(err("no `end of trees` line (the file looks truncated)".into()));
    }
    let mut trees = Vec::new();
    let mut feature_kinds = vec![FeatureKind::Numeric; num_features];
    while let Some((lineno, line)) = lines.next() {
        let line = line.trim();
        if line.starts_with("end of trees") {
            break;
        }
        let Some(idx) = line.strip_prefix("Tree=") else { continue };
        let t: usize = idx.trim().parse().map_err(|_| err(format!("line {}: bad tree header {line:?}", lineno + 1)))?;
        if t != trees.len() {
            return Err(err(format!("line {}: tree {t} out of order (expected {})", lineno + 1, trees.len())));
        }
        let mut fields: HashMap<&str, &str> = HashMap::new();
        for (_, l) in lines.by_ref() {
            let l = l.trim();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once('=') {
                fields.insert(k, v);
            }
        }
        let tree = parse_tree(&fields, t, t % per_iter, &file, num_features, &mut feature_kinds)?;
        trees.push(tree);
    }
    if trees.is_empty() {
        return Err(err("no Tree= sections (the file looks truncated)".into()));
    }
    // LightGBM writes num_tree_per_iteration trees per iteration.
    if per_iter > trees.len() {
        return Err(err(format!("num_tree_per_iteration={per_iter} but the file has only {} trees", trees.len())));
    }
    if average_output {
        let iterations = trees.len().div_ceil(per_iter) as f64;
        for t in &mut trees {
            t.weight = 1.0 / iterations;
        }
    }

    let categories = feature_categories(text, name, header.get("feature_infos").copied(), &mut feature_kinds).map_err(err)?;
    Ok(ModelParts {
        format: ModelFormat::LightgbmText,
        library_version: header.get("version").map(|v| v.to_string()),
        objective,
        feature_names,
        feature_kinds,
        num_groups: per_iter,
        base_margin: vec![0.0; per_iter],
        trees,
        precision: Precision::F64,
        categories,
        combinations: None,
    })
}

/// The categorical features and, where the file stores them, their category names.
///
/// A feature is categorical when its `feature_infos` entry lists codes (`-1:0:2`) rather than
/// a range (`[lo:hi]`) or `none`; it is marked so even when no tree splits on it.
///
/// Names come from the trailing `pandas_categorical:` line, which LightGBM's Python package
/// writes and only its pandas input path reads: one JSON list per pandas `category` column, in
/// column order, code `k` being the `k`-th entry. LightGBM itself never needs it, so this reader
/// is no stricter: `null` or `[]` (a model trained on integer codes: NumPy, the CLI, pandas
/// integer columns named in `categorical_feature`) means no names, and so does a line whose
/// lists cannot be matched to the categorical features one to one (integer-coded and `category`
/// columns mixed, or ordered `category` columns, which LightGBM splits as numbers). Such a model
/// loads and takes integer codes, as LightGBM does.
fn feature_categories(
    text: &str,
    name: &str,
    feature_infos: Option<&str>,
    kinds: &mut [FeatureKind],
) -> std::result::Result<Vec<Option<Categories>>, String> {
    let mut out = vec![None; kinds.len()];
    let infos: Vec<&str> = feature_infos.map(|f| f.split_whitespace().collect()).unwrap_or_default();
    // Without one entry per feature (a hand-edited file) the trees alone say what is categorical.
    let categorical: Vec<usize> = if infos.len() == kinds.len() {
        (0..infos.len()).filter(|&j| infos[j] != "none" && !infos[j].starts_with('[')).collect()
    } else {
        Vec::new()
    };
    for &j in &categorical {
        kinds[j] = FeatureKind::Categorical;
    }
    let Some(line) = text.lines().rev().find_map(|l| l.trim().strip_prefix("pandas_categorical:")) else { return Ok(out) };
    let lists: Option<Vec<Vec<serde_json::Value>>> =
        serde_json::from_str(line).map_err(|e| format!("pandas_categorical is not a JSON list of lists ({e})"))?;
    let lists = lists.unwrap_or_default();
    if lists.is_empty() {
        return Ok(out);
    }
    if categorical.len() != lists.len() {
        tracing::warn!(
            "{name}: pandas_categorical has {} category lists but feature_infos marks {} features categorical, so the lists cannot be matched to features; the model takes category codes only",
            lists.len(),
            categorical.len()
        );
        return Ok(out);
    }
    for (&j, list) in categorical.iter().zip(lists) {
        out[j] = if list.iter().all(serde_json::Value::is_string) {
            Some(Categories::Names(list.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()))
        } else if list.iter().all(serde_json::Value::is_number) {
            Some(Categories::Numbers(list.iter().filter_map(serde_json::Value::as_f64).collect()))
        } else {
            // Mixed or other types (booleans, dates): pandas' own mapping is not reproducible
            // from JSON alone; the column must come as codes.
            None
        };
    }
    Ok(out)
}

fn parse_tree(f: &HashMap<&str, &str>, t: usize, group: usize, file: &ModelFile, num_features: usize, kinds: &mut [FeatureKind]) -> Result<Tree> {
    let err = |detail: String| file.error(format!("Tree={t}: {detail}"));
    let list = |k: &str| -> Result<Vec<f64>> {
        match f.get(k) {
            None => Err(err(format!("missing {k}="))),
            Some(v) => v.split_whitespace().map(|x| x.parse::<f64>().map_err(|_| err(format!("{k}= has a non-number {x:?}")))).collect(),
        }
    };
    let num_leaves: usize =
        f.get("num_leaves").ok_or_else(|| err("missing num_leaves=".into()))?.trim().parse().map_err(|_| err("num_leaves= is not a count".into()))?;
    let leaf_value = list("leaf_value")?;
    if leaf_value.len() != num_leaves {
        return Err(err(format!("leaf_value has {} entries for num_leaves={num_leaves}", leaf_value.len())));
    }
    // Leaves are stored after the internal nodes.
    let n_int = num_leaves.saturating_sub(1);
    let linear_leaves = if f.get("is_linear").map(|v| v.trim()) == Some("1") {
        let lists = [list("leaf_const")?, list("num_features")?, list("leaf_features")?, list("leaf_coeff")?];
        linear_leaves(lists, num_leaves, num_features).map_err(err)?
    } else {
        Vec::new()
    };
    if num_leaves <= 1 {
        // A constant tree (LightGBM writes these when no split has gain).
        let v = leaf_value.first().copied().unwrap_or(0.0);
        let mut nodes = vec![Node::leaf(v, 1.0)];
        let linear_leaves = constant_models_as_values(&mut nodes, linear_leaves);
        return Ok(Tree { nodes, category_words: vec![], group, weight: 1.0, linear_leaves });
    }
    let split_feature = list("split_feature")?;
    let threshold = list("threshold")?;
    let decision_type = list("decision_type")?;
    let left = list("left_child")?;
    let right = list("right_child")?;
    let internal_count = list("internal_count")?;
    let leaf_count = list("leaf_count")?;
    for (k, v) in [
        ("split_feature", &split_feature),
        ("threshold", &threshold),
        ("decision_type", &decision_type),
        ("left_child", &left),
        ("right_child", &right),
        ("internal_count", &internal_count),
    ] {
        if v.len() != n_int {
            return Err(err(format!("{k} has {} entries, expected {n_int} (num_leaves - 1)", v.len())));
        }
    }
    if leaf_count.len() != num_leaves {
        return Err(err(format!("leaf_count has {} entries for num_leaves={num_leaves}", leaf_count.len())));
    }
    let (cat_boundaries, cat_threshold) =
        if f.contains_key("cat_boundaries") { (list("cat_boundaries")?, list("cat_threshold")?) } else { (vec![], vec![]) };
    let category_words: Vec<u32> = cat_threshold
        .iter()
        .map(|&w| as_index(w, 1 << 32).map(|w| w as u32))
        .collect::<Option<_>>()
        .ok_or_else(|| err("cat_threshold= has a value that is not a 32-bit word".into()))?;

    let total = n_int + num_leaves;
    let child = |c: f64, node: usize| -> Result<u32> {
        // Non-negative: internal node; negative: ~leaf.
        let idx = if c >= 0.0 { c } else { n_int as f64 + (-c - 1.0) };
        if c.fract() != 0.0 || idx >= total as f64 {
            return Err(file.tree_error(t, node, format!("child {c} is out of range ({n_int} internal nodes, {num_leaves} leaves)")));
        }
        Ok(idx as u32)
    };

    let mut nodes = Vec::with_capacity(total);
    for i in 0..n_int {
        let bad = |detail: String| file.tree_error(t, i, detail);
        let dt = as_index(decision_type[i], 256).ok_or_else(|| bad(format!("decision_type {:?} is not a byte of flags", decision_type[i])))? as u32;
        let feat = as_index(split_feature[i], num_features)
            .ok_or_else(|| bad(format!("splits on feature {:?} but the model has {num_features} features", split_feature[i])))?;
        let categorical = dt & 1 == 1;
        let default_left = dt & 2 == 2;
        let missing = match (dt >> 2) & 3 {
            0 => MissingType::None,
            1 => MissingType::Zero,
            2 => MissingType::NaN,
            m => return Err(bad(format!("unknown missing type {m} in decision_type {dt}"))),
        };
        let (rule, categories) = if categorical {
            kinds[feat] = FeatureKind::Categorical;
            // The threshold of a categorical split is the index of its set in cat_boundaries.
            let sets = cat_boundaries.len().saturating_sub(1);
            let ci = as_index(threshold[i], sets)
                .ok_or_else(|| bad(format!("category set {:?} is not one of the tree's {sets} (cat_boundaries)", threshold[i])))?;
            let words = category_words.len() + 1;
            let (s, e) = match (as_index(cat_boundaries[ci], words), as_index(cat_boundaries[ci + 1], words)) {
                (Some(s), Some(e)) if s <= e => (s as u32, e as u32),
                _ => {
                    return Err(bad(format!(
                        "cat_boundaries {}..{} is not a range of the tree's {} cat_threshold words",
                        cat_boundaries[ci],
                        cat_boundaries[ci + 1],
                        words - 1
                    )))
                }
            };
            (SplitRule::LgbCategories, (s, e - s))
        } else {
            (SplitRule::LgbLessEqual { threshold: threshold[i], missing }, (0, 0))
        };
        nodes.push(Node {
            left: child(left[i], i)?,
            right: child(right[i], i)?,
            feature: feat as u32,
            rule,
            default_left,
            categories,
            cover: internal_count[i],
            value: 0.0,
        });
    }
    for l in 0..num_leaves {
        nodes.push(Node::leaf(leaf_value[l], leaf_count[l]));
    }
    debug_assert!(nodes.iter().all(|n| n.is_leaf() == (n.left == LEAF)));
    let linear_leaves = constant_models_as_values(&mut nodes, linear_leaves);
    Ok(Tree { nodes, category_words, group, weight: 1.0, linear_leaves })
}

/// The linear leaves that have terms; a model without any (the first tree's, and leaves LightGBM
/// fitted none in) always gives its constant, which becomes the leaf's value. So a linear tree
/// with no terms at all is a tree of constant leaves, explained as any other.
fn constant_models_as_values(nodes: &mut [Node], leaves: Vec<LinearLeaf>) -> Vec<LinearLeaf> {
    leaves
        .into_iter()
        .filter_map(|leaf| {
            if !leaf.terms.is_empty() {
                return Some(leaf);
            }
            nodes[leaf.node as usize].value = leaf.constant;
            None
        })
        .collect()
}

/// The linear models of a linear tree's `num_leaves` leaves from its `leaf_const`,
/// `num_features`, `leaf_features` and `leaf_coeff` lists (`num_features` terms per leaf), leaf
/// `l` being node `num_leaves - 1 + l` (after the internal nodes). A leaf with no terms gives
/// its constant.
fn linear_leaves(lists: [Vec<f64>; 4], num_leaves: usize, num_features: usize) -> std::result::Result<Vec<LinearLeaf>, String> {
    let [constants, counts, features, coefficients] = lists;
    let n_int = num_leaves.saturating_sub(1);
    if constants.len() != num_leaves || counts.len() != num_leaves {
        return Err(format!(
            "a linear tree has {} leaf_const and {} num_features entries for num_leaves={num_leaves}",
            constants.len(),
            counts.len()
        ));
    }
    if features.len() != coefficients.len() {
        return Err(format!("leaf_features has {} entries but leaf_coeff {}", features.len(), coefficients.len()));
    }
    let mut leaves = Vec::with_capacity(num_leaves);
    let mut next = 0usize;
    for (l, (&constant, &count)) in constants.iter().zip(&counts).enumerate() {
        // Each count is checked against the terms still unread before any is taken.
        let count = as_index(count, features.len() - next + 1)
            .ok_or_else(|| format!("leaf {l}: num_features {count} is not a count of the {} leaf_features left", features.len() - next))?;
        let terms = (next..next + count)
            .map(|k| {
                let feature = as_index(features[k], num_features)
                    .ok_or_else(|| format!("leaf {l}: leaf_features has {:?}, not one of the model's {num_features} features", features[k]))?;
                Ok((feature as u32, coefficients[k]))
            })
            .collect::<std::result::Result<Vec<_>, String>>()?;
        next += count;
        leaves.push(LinearLeaf { node: (n_int + l) as u32, constant, terms });
    }
    if next != features.len() {
        return Err(format!("num_features counts {next} terms but leaf_features has {}", features.len()));
    }
    Ok(leaves)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linear_model_text() -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/linear/lgb_linear_regression/model.txt");
        std::fs::read_to_string(path).unwrap()
    }

    /// The text with the values of the first `key=` line of a linear tree with terms (the first
    /// tree's leaves have none) replaced by `change(values)`.
    fn with_line(key: &str, change: impl Fn(&str) -> String) -> String {
        let text = linear_model_text();
        let prefix = format!("{key}=");
        let line = text.lines().filter(|l| l.starts_with(&prefix)).nth(1).unwrap();
        text.replacen(line, &format!("{prefix}{}", change(&line[prefix.len()..])), 1)
    }

    #[test]
    fn linear_leaves_are_read_and_bad_ones_named() {
        let parts = from_text_bytes(linear_model_text().as_bytes(), "linear.txt").unwrap();
        let linear: Vec<&LinearLeaf> = parts.trees.iter().flat_map(|t| &t.linear_leaves).collect();
        assert!(linear.iter().all(|l| !l.terms.is_empty()), "a model without terms is its leaf's value");
        // The first tree's leaves have no terms: a tree of constant leaves, valued `leaf_const`.
        assert!(parts.trees[0].linear_leaves.is_empty() && !parts.trees[1].linear_leaves.is_empty());
        let text = linear_model_text();
        let constants = text.lines().find_map(|l| l.strip_prefix("leaf_const=")).unwrap();
        let leaves = parts.trees[0].nodes.iter().filter(|n| n.is_leaf()).map(|n| n.value.to_string());
        assert_eq!(leaves.collect::<Vec<_>>(), constants.split_whitespace().map(|c| c.parse::<f64>().unwrap().to_string()).collect::<Vec<_>>());
        for tree in &parts.trees {
            for leaf in &tree.linear_leaves {
                assert!(tree.nodes[leaf.node as usize].is_leaf(), "a linear model sits on a leaf");
            }
        }
        // The first value replaced, or the whole list.
        let first = |values: &str, value: &str| format!("{value} {}", values.trim().split_once(' ').map_or("", |(_, rest)| rest));
        let refused = |text: String, needle: &str| {
            let err = from_text_bytes(text.as_bytes(), "linear.txt").unwrap_err().to_string();
            assert!(err.contains("linear.txt") && err.contains(needle), "{needle}: {err}");
        };
        refused(with_line("num_features", |v| first(v, "99")), "num_features 99 is not a count");
        refused(with_line("num_features", |_| "1".into()), "num_features entries for num_leaves=8");
        refused(with_line("leaf_features", |v| first(v, "6")), "not one of the model's 6 features");
        refused(with_line("leaf_coeff", |_| "1.5".into()), "leaf_features has");
    }
}

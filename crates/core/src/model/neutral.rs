//! The shapfusion trees file: a documented, versioned JSON form of tree ensembles as plain node
//! arrays (`docs/src/trees-file.md`). `shapfusion.save_model` writes it for scikit-learn
//! estimators, so the command line, SQL and the workers read them without Python and without
//! ever unpickling anything.
//!
//! Each tree holds sklearn-style parallel arrays (`left`, `right`, `feature`, `threshold`,
//! `missing_left`, `cover`, `value`); a node is a leaf when both children are -1. A numeric
//! split sends NaN the `missing_left` way and `x <= threshold` left, after rounding `x` to the
//! file's `input_precision`. Categorical splits list the codes that go left.

use serde::Deserialize;

use super::{
    check_count, push_category_set, Categories, FeatureKind, MissingType, ModelFile, ModelFormat, ModelParts, Node, Precision, SplitRule, Tree, LEAF,
    MAX_FEATURES, MAX_GROUPS,
};
use crate::error::Result;

/// The version of the shapfusion trees file this build writes and reads.
pub const NEUTRAL_FORMAT_VERSION: u32 = 1;

/// The key the file opens with (format detection looks for it).
pub(super) const FORMAT_KEY: &str = "format";

/// The value of [`FORMAT_KEY`].
const FORMAT_TAG: &str = "shapfusion.trees";

/// Largest category code a categorical split may list (the bitsets are sized by it).
const MAX_CATEGORY: u32 = 1 << 24;

/// What is read first, so that a newer file is refused by its version, not by a field this
/// build does not know.
#[derive(Deserialize)]
struct Header {
    format: String,
    format_version: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[allow(dead_code)]
    format: String,
    #[allow(dead_code)]
    format_version: u32,
    #[serde(default)]
    producer: Option<Producer>,
    objective: String,
    feature_names: Vec<String>,
    #[serde(default)]
    categorical_features: Vec<usize>,
    /// Category names of categorical features (by feature index): a string value is read as
    /// its position here, and the splits' sets hold those positions.
    #[serde(default)]
    categories: std::collections::BTreeMap<String, Vec<String>>,
    num_outputs: usize,
    base_margin: Vec<f64>,
    input_precision: String,
    trees: Vec<TreeArrays>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Producer {
    library: String,
    version: String,
    #[serde(default)]
    estimator: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TreeArrays {
    output: usize,
    #[serde(default = "one")]
    weight: f64,
    left: Vec<i64>,
    right: Vec<i64>,
    feature: Vec<i64>,
    threshold: Vec<f64>,
    missing_left: Vec<bool>,
    cover: Vec<f64>,
    value: Vec<f64>,
    #[serde(default)]
    categorical_splits: Vec<CategoricalSplit>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CategoricalSplit {
    node: usize,
    left_categories: Vec<u32>,
    /// The codes seen in training: a code outside it takes the missing direction (scikit-learn's
    /// HistGradientBoosting). Without it every code not in `left_categories` goes right.
    #[serde(default)]
    known_categories: Option<Vec<u32>>,
}

fn one() -> f64 {
    1.0
}

pub(super) fn from_json_bytes(bytes: &[u8], name: &str) -> Result<ModelParts> {
    let file = ModelFile::new(name, ModelFormat::ShapfusionJson);
    let err = |detail: String| file.error(detail);
    let json = |e: serde_json::Error| file.json_error(e);
    let header: Header = serde_json::from_slice(bytes).map_err(json)?;
    if header.format != FORMAT_TAG {
        return Err(err(format!("\"format\" is {:?}, not {FORMAT_TAG:?}", header.format)));
    }
    if header.format_version != NEUTRAL_FORMAT_VERSION {
        return Err(err(format!(
            "format_version {} is not one this shapfusion reads (version {NEUTRAL_FORMAT_VERSION}); {}",
            header.format_version,
            if header.format_version > NEUTRAL_FORMAT_VERSION {
                "the file was written by a newer shapfusion: upgrade to read it"
            } else {
                "save the model again with this shapfusion"
            }
        )));
    }
    let parsed: File = serde_json::from_slice(bytes).map_err(json)?;
    let nf = check_count(parsed.feature_names.len(), MAX_FEATURES, "the number of features").map_err(&err)?;
    let groups = check_count(parsed.num_outputs, MAX_GROUPS, "num_outputs").map_err(&err)?;
    if groups == 0 {
        return Err(err("num_outputs is 0".into()));
    }
    if parsed.base_margin.len() != groups {
        return Err(err(format!("base_margin has {} values for {groups} outputs", parsed.base_margin.len())));
    }
    let precision = match parsed.input_precision.as_str() {
        "float32" => Precision::F32,
        "float64" => Precision::F64,
        other => return Err(err(format!("input_precision {other:?} is neither \"float32\" nor \"float64\""))),
    };
    let mut feature_kinds = vec![FeatureKind::Numeric; nf];
    for &f in &parsed.categorical_features {
        *feature_kinds.get_mut(f).ok_or_else(|| err(format!("categorical feature {f} is out of range ({nf} features)")))? = FeatureKind::Categorical;
    }
    let mut categories = vec![None; nf];
    for (j, names) in parsed.categories {
        let k = j
            .parse::<usize>()
            .ok()
            .filter(|&k| k < nf)
            .ok_or_else(|| err(format!("categories for feature {j:?}, which is not a feature index below {nf}")))?;
        if feature_kinds[k] != FeatureKind::Categorical {
            return Err(err(format!("categories for feature {k}, which categorical_features does not list")));
        }
        categories[k] = Some(Categories::Names(names));
    }
    let trees = parsed.trees.iter().enumerate().map(|(t, arrays)| tree(arrays, t, nf, groups, &file)).collect::<Result<Vec<_>>>()?;
    let library_version = parsed.producer.map(|p| match p.estimator {
        Some(e) => format!("{} {} ({e})", p.library, p.version),
        None => format!("{} {}", p.library, p.version),
    });
    Ok(ModelParts {
        format: ModelFormat::ShapfusionJson,
        library_version,
        objective: parsed.objective,
        categories,
        combinations: None,
        feature_names: parsed.feature_names,
        feature_kinds,
        num_groups: groups,
        base_margin: parsed.base_margin,
        trees,
        precision,
    })
}

/// One tree from its arrays; every index is checked here or by [`Model::validate`](super::Model::validate).
fn tree(a: &TreeArrays, t: usize, nf: usize, groups: usize, file: &ModelFile) -> Result<Tree> {
    let bad = |node: usize, detail: String| file.tree_error(t, node, detail);
    let n = a.left.len();
    if n == 0 {
        return Err(bad(0, "tree has no nodes".into()));
    }
    for (field, len) in [
        ("right", a.right.len()),
        ("feature", a.feature.len()),
        ("threshold", a.threshold.len()),
        ("missing_left", a.missing_left.len()),
        ("cover", a.cover.len()),
        ("value", a.value.len()),
    ] {
        if len != n {
            return Err(bad(0, format!("{field} has {len} entries but left has {n}")));
        }
    }
    if n > u32::MAX as usize - 1 {
        return Err(bad(0, format!("{n} nodes is more than a tree may hold")));
    }
    if a.output >= groups {
        return Err(bad(0, format!("output {} but the model has {groups} outputs", a.output)));
    }
    let child = |i: usize, c: i64| -> Result<u32> {
        match c {
            -1 => Ok(LEAF),
            c if c >= 0 && (c as usize) < n => Ok(c as u32),
            c => Err(bad(i, format!("child index {c} is out of range (tree has {n} nodes)"))),
        }
    };
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let (left, right) = (child(i, a.left[i])?, child(i, a.right[i])?);
        let mut node = Node::leaf(a.value[i], a.cover[i]);
        if left != LEAF || right != LEAF {
            let feature = a.feature[i];
            if feature < 0 || feature as usize >= nf {
                return Err(bad(i, format!("splits on feature {feature} but the model has {nf} features")));
            }
            node.left = left;
            node.right = right;
            node.feature = feature as u32;
            node.rule = SplitRule::LgbLessEqual { threshold: a.threshold[i], missing: MissingType::NaN };
            node.default_left = a.missing_left[i];
        }
        nodes.push(node);
    }
    let mut category_words = Vec::new();
    for split in &a.categorical_splits {
        let i = split.node;
        let node = nodes.get_mut(i).ok_or_else(|| bad(i, format!("categorical split names node {i}, but the tree has {n} nodes")))?;
        if node.is_leaf() {
            return Err(bad(i, "categorical split on a leaf".into()));
        }
        if let Some(&c) = split.left_categories.iter().chain(split.known_categories.iter().flatten()).find(|&&c| c >= MAX_CATEGORY) {
            return Err(bad(i, format!("category code {c} is larger than shapfusion takes ({MAX_CATEGORY})")));
        }
        // Codes outside the known set take the missing direction. When that is right, every
        // code not in the left set goes right; when it is left, the codes known but not in the
        // left set are the ones going right (XGBoost's rule: a set that goes right, others left).
        let (rule, set): (SplitRule, Vec<u32>) = match (&split.known_categories, node.default_left) {
            (Some(known), true) => {
                let mut left = split.left_categories.clone();
                left.sort_unstable();
                (SplitRule::XgbCategories, known.iter().copied().filter(|c| left.binary_search(c).is_err()).collect())
            }
            _ => (SplitRule::CategoriesLeft { exact: false }, split.left_categories.clone()),
        };
        node.rule = rule;
        node.categories = push_category_set(&mut category_words, &set).map_err(|d| bad(i, d))?;
    }
    Ok(Tree { nodes, category_words, group: a.output, weight: a.weight, linear_leaves: vec![] })
}

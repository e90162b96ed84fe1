//! CatBoost model reader: the JSON of `model.save_model(path, format="json")` (CatBoost 1.x), and
//! the binary `.cbm` of `model.save_model(path)` through the same JSON ([`super::catboost_cbm`]).
//!
//! Models grown with `grow_policy="Depthwise"` or `"Lossguide"` hold ordinary (non-symmetric)
//! trees under `trees`: nested objects, an internal node `{"split", "left", "right"}` (left
//! where the split's condition is false, `x <= border`), a leaf `{"value", "weight"}` (`value`
//! a number, or one per output dimension), its cover the leaf's `weight` and an internal node's
//! the sum of its children's. They are read node by node, without recursion, with the same split
//! rules as below. A leaf no training row reached has weight 0, so cover 0 (a zero-cover node
//! weighs its branches by its children's covers, or evenly when they have none). The default,
//! `SymmetricTree`, writes `oblivious_trees`:
//!
//! A CatBoost tree is oblivious: every level tests one split, and a row's leaf index has bit
//! `d` set when it goes the "greater" way at the file's split `d` (`x > border` for a float
//! feature). Each tree becomes a full binary tree whose root tests the file's last split (the
//! leaf index's highest bit) and whose deepest level tests its first, the order in which
//! CatBoost's own SHAP values weigh the branches (path-dependent SHAP depends on it); left is
//! bit 0. Leaves hold `leaf_values` (one per output
//! dimension, leaf-major) and covers from `leaf_weights`, the training weight in each leaf.
//! `scale_and_bias` gives the tree weight and the per-dimension base margin.
//!
//! Float features compare in float32 (CatBoost's feature type); NaN goes the way the feature's
//! `nan_value_treatment` says (`AsTrue`: as if larger than every border, else smaller). An empty
//! leaf (weight 0) gets a cover of [`EMPTY_LEAF_COVER`]: CatBoost skips empty subtrees in its
//! SHAP values, and a vanishing cover does the same here while keeping every ratio defined.
//! One-hot categorical splits compare CatBoost's hash of the category value
//! ([`super::cityhash`]): the feature keeps the hashes its splits test
//! ([`Categories::CatboostHashes`]), input values are hashed the same way, and a value equal to
//! the split's goes the "greater" way. A CTR split of one categorical feature becomes a
//! categorical split on that feature (the categories whose CTR is above the border go right:
//! [`super::catboost_ctr`]); a CTR split of a combination of features becomes a categorical split
//! on the combination's column ([`super::combinations`]).

use serde_json::Value;

use super::catboost_cbm::Refusal;
use super::catboost_ctr::{CtrInput, Ctrs, Element};
use super::{
    check_count, push_category_set, Categories, CombinationPart, Combinations, CombinedColumnSpec, FeatureKind, MissingType, ModelFile, ModelFormat,
    ModelParts, Node, Precision, SplitRule, Tree, LEAF, MAX_FEATURES, MAX_GROUPS,
};
use crate::error::{Error, Result};

/// The top-level keys CatBoost writes first (format detection; it writes them in name order,
/// `ctr_data` first in a model with CTR splits).
pub(super) const TOP_LEVEL_KEYS: [&str; 5] = ["ctr_data", "features_info", "model_info", "oblivious_trees", "scale_and_bias"];

/// Deepest oblivious tree read (CatBoost allows 16).
pub(super) const MAX_DEPTH: usize = 20;

/// Cover of a leaf no training row reached.
pub const EMPTY_LEAF_COVER: f64 = 1e-200;

pub(super) fn from_json_bytes(bytes: &[u8], name: &str) -> Result<ModelParts> {
    let file = ModelFile::new(name, ModelFormat::CatboostJson);
    let root: Value = serde_json::from_slice(bytes).map_err(|e| file.json_error(e))?;
    from_value(&root, file)
}

/// A `.cbm` file: its model core rewritten as CatBoost's JSON of the same model, then read as that.
pub(super) fn from_cbm_bytes(bytes: &[u8], name: &str) -> Result<ModelParts> {
    let file = ModelFile::new(name, ModelFormat::CatboostBinary);
    let root = super::catboost_cbm::to_json(bytes).map_err(|refusal| match refusal {
        Refusal::Invalid(detail) => file.error(detail),
        Refusal::NotRead(detail) => file.unsupported(detail),
    })?;
    from_value(&root, file)
}

/// The model of CatBoost's JSON `root`; errors name `file` (the JSON, or the `.cbm` it came from).
pub(super) fn from_value(root: &Value, file: ModelFile) -> Result<ModelParts> {
    let err = |detail: String| file.error(detail);
    let info = root.get("features_info").ok_or_else(|| err("missing field features_info".into()))?;

    // Features: float features by their flat (input column) index; categorical ones are named
    // so the refusal below can say which they are.
    let float_features = info.get("float_features").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let cat_features = info.get("categorical_features").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let flat_index = |f: &Value, what: &str| -> Result<usize> {
        let i = f.get("flat_feature_index").and_then(Value::as_u64).ok_or_else(|| err(format!("a {what} feature has no flat_feature_index")))?;
        check_count(i as usize, MAX_FEATURES - 1, "flat_feature_index").map_err(&err)
    };
    let mut nf = 0;
    for f in float_features {
        nf = nf.max(flat_index(f, "float")? + 1);
    }
    for f in cat_features {
        nf = nf.max(flat_index(f, "categorical")? + 1);
    }
    let mut feature_names: Vec<String> = (0..nf).map(|j| format!("f{j}")).collect();
    let mut feature_kinds = vec![FeatureKind::Numeric; nf];
    let mut float_columns = Vec::with_capacity(float_features.len());
    for f in float_features {
        let flat = flat_index(f, "float")?;
        if let Some(id) = f.get("feature_id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            feature_names[flat] = id.to_string();
        }
        let index = f.get("feature_index").and_then(Value::as_u64).ok_or_else(|| err(format!("float feature {flat} has no feature_index")))? as usize;
        let nan_left = f.get("nan_value_treatment").and_then(Value::as_str) != Some("AsTrue");
        float_columns.push((index, flat, nan_left));
    }
    let mut hashes: Vec<Option<Vec<u32>>> = vec![None; nf];
    let mut cat_columns = Vec::with_capacity(cat_features.len());
    // CatBoost numbers its binary features float borders first, then one-hot values, then CTR
    // borders: the first CTR border's split_index.
    let mut first_ctr_split_index: usize = float_features.iter().map(|f| f.get("borders").and_then(Value::as_array).map_or(0, Vec::len)).sum();
    for f in cat_features {
        let flat = flat_index(f, "categorical")?;
        if let Some(id) = f.get("feature_id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            feature_names[flat] = id.to_string();
        }
        feature_kinds[flat] = FeatureKind::Categorical;
        let index = f.get("feature_index").and_then(Value::as_u64).ok_or_else(|| err(format!("categorical feature {flat} has no feature_index")))?;
        // The file holds the hashes as signed 32-bit numbers.
        let values = f.get("values").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let list = values
            .iter()
            .map(category_hash)
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| err(format!("categorical feature {flat} has values that are not 32-bit hashes")))?;
        first_ctr_split_index += list.len();
        hashes[flat] = Some(list);
        cat_columns.push((index, flat));
    }
    let float_column = |index: u64| float_columns.iter().find(|(i, _, _)| *i as u64 == index).map(|&(_, flat, nan_left)| (flat, nan_left));
    let cat_column = |c: u64| cat_columns.iter().find(|(i, _)| *i == c).map(|&(_, flat)| flat);
    let cat_name = |c: u64| cat_column(c).map_or_else(|| format!("categorical feature {c}"), |flat| format!("{:?}", feature_names[flat]));
    let float_name = |f: u64| float_column(f).map_or_else(|| format!("float feature {f}"), |(flat, _)| format!("{:?}", feature_names[flat]));
    let mut ctrs = Ctrs::read(info, root.get("ctr_data"), &cat_name, &float_name, first_ctr_split_index).map_err(&err)?;
    if let Some(identifier) = ctrs.merged_table() {
        // Read as CatBoost reads the file (one table for them all), which is what it predicts with.
        let name = file.name();
        tracing::warn!(
            "{name}: CTR {identifier} is listed several times with one table: CatBoost's JSON of a multi-target (MultiRMSE) model keeps one table for each target's CTRs, so CatBoost's own predictions from this file differ from the trained model's; shapfusion explains the file as CatBoost predicts with it"
        );
    }
    // Every category a split tests has its code before any CTR split's set is made (a CTR split
    // sends the categories its table does not hold one way): one-hot values first, then the
    // categories of the CTR tables.
    for split in splits_of(root) {
        if split.get("split_type").and_then(Value::as_str) == Some("OneHotFeature") {
            let (Some(flat), Some(hash)) =
                (split.get("cat_feature_index").and_then(Value::as_u64).and_then(cat_column), split.get("value").and_then(category_hash))
            else {
                continue; // reported where the split is read
            };
            code_of(hashes[flat].get_or_insert_with(Vec::new), hash);
        }
    }
    for &(index, flat) in &cat_columns {
        let list = hashes[flat].get_or_insert_with(Vec::new);
        // Each hash once: those already listed, then the tables' in their order.
        let mut known: std::collections::HashSet<u32> = list.iter().copied().collect();
        list.extend(ctrs.category_hashes(index).into_iter().filter(|h| known.insert(*h)));
    }

    let (scale, bias) = scale_and_bias(root.get("scale_and_bias"), &err)?;
    // The columns of CTRs of feature combinations, after the features (see `combinations`).
    let combinations = combined_columns(&ctrs, nf, &float_column, &cat_column).map_err(&err)?;
    let splits = SplitReader { float_column: &float_column, cat_column: &cat_column, hashes: &mut hashes, ctrs: &mut ctrs, num_features: nf };
    let mut read = TreeReader { file, scale, splits, dims: 0, trees: Vec::new() };
    match (root.get("oblivious_trees").and_then(Value::as_array), root.get("trees").and_then(Value::as_array)) {
        (Some(oblivious), _) => {
            for (t, tree_json) in oblivious.iter().enumerate() {
                read.oblivious(tree_json, t)?;
            }
        }
        (None, Some(non_symmetric)) => {
            for (t, tree_json) in non_symmetric.iter().enumerate() {
                read.non_symmetric(tree_json, t)?;
            }
        }
        (None, None) => return Err(err("missing field oblivious_trees or trees (CatBoost writes one of them)".into())),
    }
    let TreeReader { dims, trees, .. } = read;
    let dims = dims.max(1);
    let base_margin = match bias.len() {
        0 => vec![0.0; dims],
        1 if dims > 1 => vec![bias[0]; dims],
        n if n == dims => bias,
        n => return Err(err(format!("scale_and_bias has {n} biases for {dims} outputs"))),
    };
    let params = root.get("model_info").and_then(|m| m.get("params"));
    let objective = params.and_then(|p| p.get("loss_function")).and_then(|l| l.get("type")).and_then(Value::as_str).unwrap_or("unknown").to_string();
    let version = root
        .get("model_info")
        .and_then(|m| m.get("catboost_version_info"))
        .and_then(Value::as_str)
        .and_then(|v| v.split("CatBoost release ").nth(1))
        .and_then(|v| v.split(['.', ' ']).take(3).collect::<Vec<_>>().join(".").into());
    Ok(ModelParts {
        format: file.format(),
        library_version: version.map(|v: String| v.trim_end_matches('.').to_string()),
        objective,
        categories: hashes.into_iter().map(|h| h.map(Categories::CatboostHashes)).collect(),
        feature_names,
        feature_kinds,
        num_groups: dims,
        base_margin,
        trees,
        precision: Precision::F32,
        combinations,
    })
}

/// The combined columns of the CTRs of feature combinations, in [`Ctrs::combinations`]'s order
/// (column `num_features + k` is the `k`-th): each part read from the model's features.
fn combined_columns(
    ctrs: &Ctrs,
    num_features: usize,
    float_column: &dyn Fn(u64) -> Option<(usize, bool)>,
    cat_column: &dyn Fn(u64) -> Option<usize>,
) -> std::result::Result<Option<Combinations>, String> {
    if ctrs.combinations().is_empty() {
        return Ok(None);
    }
    let mut specs = Vec::with_capacity(ctrs.combinations().len());
    for combination in ctrs.combinations() {
        let category = |c: u64| {
            cat_column(c)
                .map(|flat| flat as u32)
                .ok_or_else(|| format!("CTR of {} reads categorical feature {c}, which features_info does not list", combination.description))
        };
        let parts = combination
            .elements
            .iter()
            .map(|e| {
                Ok(match *e {
                    Element::Category(c) => CombinationPart::Category { feature: category(c)? },
                    Element::Above(f, border) => {
                        let (flat, nan_left) = float_column(f).ok_or_else(|| {
                            format!("CTR of {} reads float feature {f}, which features_info does not list", combination.description)
                        })?;
                        CombinationPart::Above { feature: flat as u32, border, missing_above: !nan_left }
                    }
                    Element::Equals(c, hash) => CombinationPart::Equals { feature: category(c)?, hash },
                })
            })
            .collect::<std::result::Result<Vec<_>, String>>()?;
        specs.push(CombinedColumnSpec { description: combination.description.clone(), parts, keys: combination.keys.clone() });
    }
    Combinations::new(num_features, specs).map(Some)
}

/// Reads the file's splits into [`Level`]s: float features by their column, one-hot
/// categorical ones by their hash (each feature's hashes, collected in `hashes`, become its
/// category codes).
struct SplitReader<'a> {
    float_column: &'a dyn Fn(u64) -> Option<(usize, bool)>,
    cat_column: &'a dyn Fn(u64) -> Option<usize>,
    hashes: &'a mut Vec<Option<Vec<u32>>>,
    ctrs: &'a mut Ctrs,
    /// The model's features: combined column `k` is column `num_features + k`.
    num_features: usize,
}

impl SplitReader<'_> {
    /// One split: `Err` holds what is wrong with it.
    fn level(&mut self, split: &Value) -> std::result::Result<Level, String> {
        let kind = split.get("split_type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "FloatFeature" => {
                let index = split.get("float_feature_index").and_then(Value::as_u64).ok_or("split has no float_feature_index")?;
                // CatBoost compares in float32: a border of ±inf or NaN is a valid (degenerate)
                // split, decided as CatBoost decides it (x > border).
                let border = split.get("border").and_then(Value::as_f64).ok_or("split has no border")?;
                let (flat, nan_left) =
                    (self.float_column)(index).ok_or_else(|| format!("split on float feature {index}, which features_info does not list"))?;
                Ok(Level {
                    feature: flat as u32,
                    rule: SplitRule::LgbLessEqual { threshold: border, missing: MissingType::NaN },
                    default_left: nan_left,
                    codes: None,
                })
            }
            "OneHotFeature" => {
                let c = split.get("cat_feature_index").and_then(Value::as_u64).ok_or("split has no cat_feature_index")?;
                let flat = (self.cat_column)(c).ok_or_else(|| format!("split on categorical feature {c}, which features_info does not list"))?;
                let hash = split.get("value").and_then(category_hash).ok_or("one-hot split has no 32-bit hash value")?;
                let code = code_of(self.hashes[flat].get_or_insert_with(Vec::new), hash);
                // The value equal to the split's goes the "greater" way (right); any other
                // value, an unseen one or a missing one goes left.
                Ok(Level { feature: flat as u32, rule: SplitRule::XgbCategories, default_left: true, codes: Some(vec![code]) })
            }
            "OnlineCtr" => {
                let hashes = &*self.hashes;
                let cat_column = self.cat_column;
                let feature_hashes = |c: u64| cat_column(c).and_then(|flat| hashes[flat].as_deref());
                let split = self.ctrs.split(split, &feature_hashes)?;
                let column = match split.reads {
                    CtrInput::Category(c) => {
                        (self.cat_column)(c).ok_or_else(|| format!("CTR split on categorical feature {c}, which features_info does not list"))?
                    }
                    CtrInput::Combination(k) => self.num_features + k,
                };
                // The categories (or combinations) whose CTR is above the border go right; one the
                // table does not hold (unseen in training, or missing) goes where the CTR of no
                // rows does.
                Ok(Level { feature: column as u32, rule: SplitRule::XgbCategories, default_left: !split.unseen_right, codes: Some(split.right) })
            }
            other => Err(format!("split of type {other:?}, which CatBoost 1.x does not write (FloatFeature, OneHotFeature and OnlineCtr are read)")),
        }
    }
}

/// A category hash as the file holds it (a signed or unsigned 32-bit number).
fn category_hash(v: &Value) -> Option<u32> {
    v.as_i64().filter(|h| (i32::MIN as i64..=u32::MAX as i64).contains(h)).map(|h| h as u32)
}

/// The code of `hash` in a feature's list of hashes, added at the end if new.
fn code_of(list: &mut Vec<u32>, hash: u32) -> u32 {
    match list.iter().position(|&h| h == hash) {
        Some(k) => k as u32,
        None => {
            list.push(hash);
            (list.len() - 1) as u32
        }
    }
}

/// Every split object of the file's trees: the `splits` of `oblivious_trees`, and the `split`
/// of every node of `trees` (walked with an explicit stack).
fn splits_of(root: &Value) -> Vec<&Value> {
    let mut splits = Vec::new();
    for tree in root.get("oblivious_trees").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
        splits.extend(tree.get("splits").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default());
    }
    let mut stack: Vec<&Value> = root.get("trees").and_then(Value::as_array).map(|t| t.iter().collect()).unwrap_or_default();
    while let Some(node) = stack.pop() {
        if let Some(split) = node.get("split") {
            splits.push(split);
            stack.extend(node.get("left"));
            stack.extend(node.get("right"));
        }
    }
    splits
}

/// Reads the trees of one file into `trees` (a tree per output dimension each), checking that
/// every tree has the same number of outputs (`dims`, set by the first).
struct TreeReader<'a> {
    file: ModelFile<'a>,
    /// The tree weight (`scale_and_bias`'s scale).
    scale: f64,
    splits: SplitReader<'a>,
    dims: usize,
    trees: Vec<Tree>,
}

impl TreeReader<'_> {
    /// One `oblivious_trees` entry.
    fn oblivious(&mut self, tree_json: &Value, t: usize) -> Result<()> {
        let file = self.file;
        let bad = |node: usize, detail: String| file.tree_error(t, node, detail);
        let splits = tree_json.get("splits").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let depth = splits.len();
        if depth > MAX_DEPTH {
            return Err(bad(0, format!("depth {depth} is more than shapfusion reads ({MAX_DEPTH})")));
        }
        let leaves = 1usize << depth;
        let values = numbers(tree_json.get("leaf_values"), "leaf_values").map_err(|d| bad(0, d))?;
        let weights = match tree_json.get("leaf_weights") {
            Some(w) => numbers(Some(w), "leaf_weights").map_err(|d| bad(0, d))?,
            None => return Err(bad(0, format!("no leaf_weights: {WEIGHTS_NEEDED}"))),
        };
        if values.is_empty() || values.len() % leaves != 0 {
            return Err(bad(0, format!("{} leaf_values for {leaves} leaves", values.len())));
        }
        let dim = check_count(values.len() / leaves, MAX_GROUPS, "the output dimension").map_err(|d| bad(0, d))?;
        same_dimension(&mut self.dims, dim).map_err(|d| bad(0, d))?;
        if weights.len() != leaves {
            return Err(bad(0, format!("{} leaf_weights for {leaves} leaves", weights.len())));
        }
        if let Some(w) = weights.iter().find(|w| **w < 0.0) {
            return Err(bad(0, format!("leaf weight {w} is negative")));
        }
        let levels = splits.iter().enumerate().map(|(d, split)| self.splits.level(split).map_err(|e| bad(d, e))).collect::<Result<Vec<_>>>()?;
        for g in 0..dim {
            self.trees.push(oblivious_tree(&levels, &values, &weights, dim, g, self.scale).map_err(|d| bad(0, d))?);
        }
        Ok(())
    }

    /// One `trees` entry (a non-symmetric tree). Nodes are numbered in the order they are read
    /// (depth first, left before right); the JSON is walked with an explicit stack, so its nesting
    /// sets no recursion depth here.
    fn non_symmetric(&mut self, tree_json: &Value, t: usize) -> Result<()> {
        let file = self.file;
        let bad = |node: usize, detail: String| file.tree_error(t, node, detail);
        // (JSON node, the index it gets); its children are pushed right first, so left is read next.
        let mut stack = vec![(tree_json, 0usize)];
        let mut nodes: Vec<Node> = vec![Node::leaf(0.0, 0.0)];
        let mut values: Vec<Vec<f64>> = vec![Vec::new()];
        let mut category_words = Vec::new();
        while let Some((json, i)) = stack.pop() {
            if let Some(split) = json.get("split") {
                let (Some(left), Some(right)) = (json.get("left"), json.get("right")) else {
                    return Err(bad(i, "a node with a split needs both left and right".into()));
                };
                if nodes.len() + 2 > MAX_TREE_NODES {
                    return Err(bad(i, format!("the tree has more than {MAX_TREE_NODES} nodes")));
                }
                let level = self.splits.level(split).map_err(|e| bad(i, e))?;
                let (l, r) = (nodes.len(), nodes.len() + 1);
                nodes.push(Node::leaf(0.0, 0.0));
                nodes.push(Node::leaf(0.0, 0.0));
                values.push(Vec::new());
                values.push(Vec::new());
                let node = &mut nodes[i];
                (node.left, node.right, node.feature, node.rule, node.default_left) =
                    (l as u32, r as u32, level.feature, level.rule, level.default_left);
                if let Some(codes) = &level.codes {
                    node.categories = push_category_set(&mut category_words, codes).map_err(|e| bad(i, e))?;
                }
                stack.push((right, r));
                stack.push((left, l));
                continue;
            }
            let value = match json.get("value") {
                Some(Value::Array(v)) => v.iter().map(|x| x.as_f64().filter(|x| x.is_finite())).collect::<Option<Vec<f64>>>(),
                Some(v) => v.as_f64().filter(|x| x.is_finite()).map(|x| vec![x]),
                None => None,
            }
            .filter(|v| !v.is_empty())
            .ok_or_else(|| bad(i, "a leaf's value is not a finite number or a list of them".into()))?;
            let weight = json.get("weight").and_then(Value::as_f64).ok_or_else(|| bad(i, format!("a leaf has no weight: {WEIGHTS_NEEDED}")))?;
            if !(weight.is_finite() && weight >= 0.0) {
                return Err(bad(i, format!("leaf weight {weight} is not a finite non-negative number")));
            }
            let dim = check_count(value.len(), MAX_GROUPS, "the output dimension").map_err(|d| bad(i, d))?;
            same_dimension(&mut self.dims, dim).map_err(|d| bad(i, d))?;
            nodes[i].cover = weight;
            values[i] = value;
        }
        // Internal covers: the sum of their children's (children come after their parent).
        for i in (0..nodes.len()).rev() {
            if !nodes[i].is_leaf() {
                nodes[i].cover = nodes[nodes[i].left as usize].cover + nodes[nodes[i].right as usize].cover;
            }
        }
        for g in 0..self.dims {
            let mut nodes = nodes.clone();
            for (node, value) in nodes.iter_mut().zip(&values) {
                if node.is_leaf() {
                    node.value = value[g];
                }
            }
            self.trees.push(Tree { nodes, category_words: category_words.clone(), group: g, weight: self.scale, linear_leaves: vec![] });
        }
        Ok(())
    }
}

/// Why a tree without leaf weights is refused.
const WEIGHTS_NEEDED: &str = "path-dependent SHAP weighs branches by them (save the model as trained, not after sum_models or shrinking)";

/// Most nodes one non-symmetric tree may have (CatBoost grows at most 64 leaves by default and
/// 2^16 at its deepest).
const MAX_TREE_NODES: usize = 1 << 20;

/// Checks a tree's output dimension against the earlier trees' (the first sets it).
fn same_dimension(dims: &mut usize, dim: usize) -> std::result::Result<(), String> {
    if *dims == 0 {
        *dims = dim;
    } else if dim != *dims {
        return Err(format!("{dim} outputs per leaf, but earlier trees have {dims}"));
    }
    Ok(())
}

/// `scale_and_bias`: `[scale, [bias per dimension]]` (older files: `[scale, bias]`).
fn scale_and_bias(v: Option<&Value>, err: &dyn Fn(String) -> Error) -> Result<(f64, Vec<f64>)> {
    let Some(v) = v else { return Ok((1.0, Vec::new())) };
    let bad = || err(format!("scale_and_bias {v} is not [scale, [bias, ...]]"));
    let pair = v.as_array().filter(|a| a.len() == 2).ok_or_else(bad)?;
    let scale = pair[0].as_f64().filter(|s| s.is_finite()).ok_or_else(bad)?;
    let bias = match &pair[1] {
        Value::Array(b) => b.iter().map(|x| x.as_f64().filter(|x| x.is_finite()).ok_or_else(bad)).collect::<Result<Vec<_>>>()?,
        x => vec![x.as_f64().filter(|x| x.is_finite()).ok_or_else(bad)?],
    };
    Ok((scale, bias))
}

fn numbers(v: Option<&Value>, what: &str) -> std::result::Result<Vec<f64>, String> {
    let a = v.and_then(Value::as_array).ok_or_else(|| format!("no {what}"))?;
    a.iter().map(|x| x.as_f64().filter(|x| x.is_finite()).ok_or_else(|| format!("{what} holds {x}, not a finite number"))).collect()
}

/// One level of an oblivious tree: what each of its nodes tests.
struct Level {
    feature: u32,
    rule: SplitRule,
    default_left: bool,
    /// The category codes a one-hot or CTR split sends right.
    codes: Option<Vec<u32>>,
}

/// The full binary tree of one oblivious tree for output `g`, nodes in breadth-first order:
/// node `2^d - 1 + k` is at level `d`, which tests the file's split `depth - 1 - d`; bit `i` of
/// `k` is the direction taken at level `i`.
fn oblivious_tree(splits: &[Level], values: &[f64], weights: &[f64], dim: usize, g: usize, scale: f64) -> std::result::Result<Tree, String> {
    let depth = splits.len();
    let leaves = 1usize << depth;
    let mut nodes = Vec::with_capacity(2 * leaves - 1);
    let mut category_words = Vec::new();
    for (d, level) in splits.iter().rev().enumerate() {
        // A categorical level's set, shared by the level's nodes.
        let categories = match &level.codes {
            Some(codes) => push_category_set(&mut category_words, codes)?,
            None => (0, 0),
        };
        let first = (1usize << d) - 1;
        let next = (1usize << (d + 1)) - 1;
        for k in 0..1usize << d {
            debug_assert_eq!(nodes.len(), first + k);
            let mut node = Node::leaf(0.0, 0.0);
            node.left = (next + k) as u32;
            node.right = (next + (k | 1 << d)) as u32;
            node.feature = level.feature;
            node.rule = level.rule;
            node.default_left = level.default_left;
            node.categories = categories;
            nodes.push(node);
        }
    }
    for k in 0..leaves {
        // Level i decided the file's split depth - 1 - i: bit i of k is that bit of the index.
        let leaf = (0..depth).fold(0, |index, i| index | ((k >> i) & 1) << (depth - 1 - i));
        nodes.push(Node::leaf(values[leaf * dim + g], weights[leaf].max(EMPTY_LEAF_COVER)));
    }
    // Internal covers: the sum of their children's, from the deepest level up.
    for i in (0..leaves - 1).rev() {
        let (l, r) = (nodes[i].left as usize, nodes[i].right as usize);
        nodes[i].cover = nodes[l].cover + nodes[r].cover;
    }
    debug_assert!(nodes.iter().all(|n| n.left == LEAF || (n.left as usize) < nodes.len()));
    Ok(Tree { nodes, category_words, group: g, weight: scale, linear_leaves: vec![] })
}

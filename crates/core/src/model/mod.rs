//! Tree ensembles as plain arrays, and the readers that produce them.
//!
//! [`Model`] is format-neutral: XGBoost, LightGBM, CatBoost and Spark ML models and the
//! shapfusion trees file that `shapfusion.save_model` writes for scikit-learn all load into it,
//! and the engines only ever see it. The split rule of every node ([`SplitRule`]) carries the
//! owning library's exact semantics (XGBoost `x < t` on float32, LightGBM `x <= t` on float64,
//! missing-value and category handling), so the engines need not know which library trained
//! the model.

mod catboost;
mod catboost_cbm;
mod catboost_ctr;
pub mod cityhash;
mod combinations;
mod lightgbm;
mod neutral;
mod ubjson;
mod xgboost;

pub use combinations::{category_key_value, combination_key, CombinationPart, Combinations, CombinedColumn, CombinedColumnSpec};
pub use neutral::NEUTRAL_FORMAT_VERSION;
/// The folder of a Spark ML model directory holding its metadata JSON (`part-00000` from
/// Spark 3, `part-00000-<uuid>-c000.txt` from Spark 4), relative to the directory. Spark ML
/// directories are read by `shapfusion-files` (their nodes are Parquet).
pub const SPARK_METADATA_DIR: &str = "metadata";

use std::fmt;
use std::path::Path;

use crate::error::{Error, Result};

/// Marker for "no child": the node is a leaf.
pub const LEAF: u32 = u32::MAX;

/// Most features a model may declare. A count read from a file is checked against this before
/// anything is sized by it (a file saying `num_feature = 4000000000` is refused, not allocated).
pub const MAX_FEATURES: usize = 1 << 20;

/// Most output groups (classes) a model may declare, checked likewise.
pub const MAX_GROUPS: usize = 1 << 16;

/// How far a child's cover may exceed its parent's (float32 rounding of XGBoost's hessian sums).
const COVER_TOLERANCE: f64 = 1e-3;

/// Most 32-bit words of category bitsets one tree may need (64 MiB).
pub const MAX_CATEGORY_WORDS: usize = 1 << 24;

/// Appends the bitset of `codes` to a tree's `category_words` and returns its place in them,
/// `(start, words)`, as [`Node::categories`] holds it; refused when the tree's sets would pass
/// [`MAX_CATEGORY_WORDS`].
pub fn push_category_set(category_words: &mut Vec<u32>, codes: &[u32]) -> std::result::Result<(u32, u32), String> {
    let words = codes.iter().max().map_or(0, |&m| m as usize / 32 + 1);
    let start = category_words.len();
    if start + words > MAX_CATEGORY_WORDS {
        return Err(format!("the tree's category sets need more than {MAX_CATEGORY_WORDS} words"));
    }
    category_words.resize(start + words, 0);
    for &c in codes {
        category_words[start + c as usize / 32] |= 1 << (c % 32);
    }
    Ok((start as u32, words as u32))
}

/// `x` as an index below `len`, when it is an integral value in range. Readers turn floats into
/// indices only through this, never by a saturating `as` cast (which makes NaN, -1 and 1e300 into
/// 0 or `usize::MAX`).
pub fn as_index(x: f64, len: usize) -> Option<usize> {
    (x >= 0.0 && x.fract() == 0.0 && x < len as f64).then_some(x as usize)
}

/// Checks a count read from a model file against a limit, before anything is sized by it.
pub fn check_count(count: usize, limit: usize, what: &str) -> std::result::Result<usize, String> {
    if count > limit {
        return Err(format!("{what} = {count} is more than shapfusion takes ({limit})"));
    }
    Ok(count)
}

/// Which library and file format a model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFormat {
    /// XGBoost `save_model("*.json")`.
    XgboostJson,
    /// XGBoost `save_model("*.ubj")` (Universal Binary JSON).
    XgboostUbjson,
    /// LightGBM `save_model("*.txt")`.
    LightgbmText,
    /// CatBoost `save_model("*.json", format="json")`.
    CatboostJson,
    /// CatBoost `save_model("*.cbm")`, its default: the binary format (FlatBuffers), read
    /// through the JSON of the same model.
    CatboostBinary,
    /// The shapfusion trees file (`shapfusion.save_model`, for scikit-learn estimators), a
    /// documented, versioned JSON form of plain node arrays: `docs/src/trees-file.md`.
    ShapfusionJson,
    /// A Spark ML tree model directory (`model.save(dir)`: metadata JSON and Parquet node data).
    SparkMl,
}

impl ModelFormat {
    /// Every format the readers take, in the order a model directory is searched: the one list
    /// behind the readers, the model directory lookup, help texts and docs.
    pub const ALL: [ModelFormat; 7] = [
        ModelFormat::XgboostJson,
        ModelFormat::XgboostUbjson,
        ModelFormat::LightgbmText,
        ModelFormat::CatboostJson,
        ModelFormat::CatboostBinary,
        ModelFormat::ShapfusionJson,
        ModelFormat::SparkMl,
    ];

    /// The format's name: `XGBoost JSON`.
    pub const fn name(&self) -> &'static str {
        match self {
            ModelFormat::XgboostJson => "XGBoost JSON",
            ModelFormat::XgboostUbjson => "XGBoost UBJSON",
            ModelFormat::LightgbmText => "LightGBM text",
            ModelFormat::CatboostJson => "CatBoost JSON",
            ModelFormat::CatboostBinary => "CatBoost binary",
            ModelFormat::ShapfusionJson => "shapfusion trees JSON",
            ModelFormat::SparkMl => "Spark ML model directory",
        }
    }

    /// The file extension the library saves it with (without the dot); empty for a directory.
    pub const fn extension(&self) -> &'static str {
        match self {
            ModelFormat::XgboostJson | ModelFormat::CatboostJson | ModelFormat::ShapfusionJson => "json",
            ModelFormat::XgboostUbjson => "ubj",
            ModelFormat::LightgbmText => "txt",
            ModelFormat::CatboostBinary => "cbm",
            ModelFormat::SparkMl => "",
        }
    }

    /// Every format with its extension, for help texts: `XGBoost JSON (.json), ...`.
    pub fn list() -> String {
        ModelFormat::ALL
            .iter()
            .map(|f| match f.extension() {
                "" => format!("{} (a directory)", f.name()),
                ext => format!("{} (.{ext})", f.name()),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The model files' extensions, each once, in [`ModelFormat::ALL`]'s order (Spark ML models are
/// directories and have none).
pub const MODEL_EXTENSIONS: [&str; 4] = [
    ModelFormat::XgboostJson.extension(),
    ModelFormat::XgboostUbjson.extension(),
    ModelFormat::LightgbmText.extension(),
    ModelFormat::CatboostBinary.extension(),
];

impl fmt::Display for ModelFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How input values are rounded before they are compared with thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// XGBoost casts every feature value to float32 first.
    F32,
    /// LightGBM compares float64 values.
    F64,
}

/// Whether a feature is numeric or holds integer category codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureKind {
    /// Ordered values compared with thresholds.
    Numeric,
    /// Integer codes compared against category sets.
    Categorical,
}

/// The categories a categorical feature was trained on, as the library stored them in the
/// model (XGBoost's `cats`, LightGBM's `pandas_categorical`): the category with code `k` is
/// the `k`-th, so a value is turned into its code by its position here.
#[derive(Debug, Clone, PartialEq)]
pub enum Categories {
    /// String categories (a pandas categorical of strings, an Arrow dictionary of strings).
    Names(Vec<String>),
    /// Numeric categories (a pandas categorical of numbers).
    Numbers(Vec<f64>),
    /// CatBoost's hashes of the category values its one-hot splits test (CityHash64 of the
    /// string, low 32 bits): a value's code is the position of its hash here. CatBoost hashes
    /// an integer category as its decimal string.
    CatboostHashes(Vec<u32>),
}

impl Categories {
    /// Number of categories.
    pub fn len(&self) -> usize {
        match self {
            Categories::Names(n) => n.len(),
            Categories::Numbers(n) => n.len(),
            Categories::CatboostHashes(h) => h.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a library does with a category value that was not seen in training.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnseenCategory {
    /// XGBoost refuses the row ("Found a category not in the training set").
    Error,
    /// LightGBM treats it as missing (pandas maps it to code -1, which LightGBM reads as NaN).
    Missing,
}

/// LightGBM's missing-value treatment for a numeric split (`decision_type` bits 2–3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingType {
    /// NaN is treated as 0.0; no default direction.
    None,
    /// Zero (|x| ≤ 1e-35) and NaN take the default direction.
    Zero,
    /// NaN takes the default direction.
    NaN,
}

/// The decision rule of an internal node, in the semantics of the library that wrote it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SplitRule {
    /// XGBoost numeric: NaN → default; else left iff `x < threshold` (x already float32-rounded).
    XgbLess {
        /// The float32 threshold, widened exactly.
        threshold: f64,
    },
    /// XGBoost categorical: NaN → default; a valid code in the set goes right, anything else left.
    XgbCategories,
    /// LightGBM numeric: left iff `x <= threshold`, after its missing-value rules.
    LgbLessEqual {
        /// The float64 threshold.
        threshold: f64,
        /// How NaN / zero are treated.
        missing: MissingType,
    },
    /// LightGBM categorical: NaN or negative → right; a code in the set goes left.
    LgbCategories,
    /// A category set that goes left, any other code right (scikit-learn's HistGradientBoosting,
    /// Spark ML, the shapfusion trees file): NaN and negative values take the default direction.
    /// With `exact` (Spark ML) only a value equal to a code in the set goes left; without it the
    /// value is truncated to its code first, as scikit-learn's cast to an integer does.
    CategoriesLeft {
        /// Whether a fractional value is never in the set (Spark), rather than truncated.
        exact: bool,
    },
}

/// One node of a tree. Leaves have `left == right == LEAF`.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Left child index, or [`LEAF`].
    pub left: u32,
    /// Right child index, or [`LEAF`].
    pub right: u32,
    /// Feature tested by the split (unused for leaves).
    pub feature: u32,
    /// The split rule (unused for leaves).
    pub rule: SplitRule,
    /// Direction taken by a missing value, where the rule has one.
    pub default_left: bool,
    /// Category bitset of a categorical split: a range of words in [`Tree::category_words`].
    pub categories: (u32, u32),
    /// Cover: sum of hessians (XGBoost) or row count (LightGBM) of the training rows here.
    pub cover: f64,
    /// Leaf value in margin space, before the tree weight (unused for internal nodes).
    pub value: f64,
}

impl Node {
    /// A leaf node holding `value`.
    pub fn leaf(value: f64, cover: f64) -> Self {
        Node {
            left: LEAF,
            right: LEAF,
            feature: 0,
            rule: SplitRule::XgbLess { threshold: 0.0 },
            default_left: true,
            categories: (0, 0),
            cover,
            value,
        }
    }

    /// Whether the node is a leaf.
    #[inline]
    pub fn is_leaf(&self) -> bool {
        self.left == LEAF
    }
}

/// One regression tree of the ensemble.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// Nodes; node 0 is the root.
    pub nodes: Vec<Node>,
    /// Category bitsets of all categorical splits in this tree (32 categories per word).
    pub category_words: Vec<u32>,
    /// Output group (class) this tree adds to.
    pub group: usize,
    /// Multiplier of every leaf value (DART drop weights, LightGBM `average_output`); usually 1.
    pub weight: f64,
    /// The leaves whose output is a linear model of the row (LightGBM's `linear_tree`), in
    /// node order; empty for a tree of constant leaves, which every other library writes.
    pub linear_leaves: Vec<LinearLeaf>,
}

/// A leaf whose output is a linear model of the row, as LightGBM's `linear_tree` trains them:
/// `constant + Σ coefficient · x[feature]`, the terms added in the file's order, or the leaf's
/// own [`Node::value`] when any of those features is missing (NaN) in the row.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearLeaf {
    /// The leaf's index in [`Tree::nodes`].
    pub node: u32,
    /// The model's constant (LightGBM's `leaf_const`, the tree's shrinkage included).
    pub constant: f64,
    /// `(feature, coefficient)` per term, in the file's order (LightGBM's `leaf_features` and
    /// `leaf_coeff`, shrinkage included).
    pub terms: Vec<(u32, f64)>,
}

impl LinearLeaf {
    /// The model's output for row `x` (indexed by feature), or `None` when one of its features
    /// is NaN there (the leaf then gives its constant value, as LightGBM's `Tree::Predict` does).
    #[inline]
    pub fn output(&self, x: &[f64]) -> Option<f64> {
        let mut out = self.constant;
        for &(feature, coefficient) in &self.terms {
            let v = x[feature as usize];
            if v.is_nan() {
                return None;
            }
            out += coefficient * v;
        }
        Some(out)
    }
}

impl Tree {
    /// Whether a row with value `x` for this node's feature goes to the left child.
    ///
    /// `x` is NaN for a missing value. For XGBoost models it must already be rounded to float32
    /// (the feature block does that), so comparing in f64 gives XGBoost's float32 answer.
    #[inline]
    pub fn goes_left(&self, node: &Node, x: f64) -> bool {
        match node.rule {
            SplitRule::XgbLess { threshold } => {
                if x.is_nan() {
                    node.default_left
                } else {
                    x < threshold
                }
            }
            SplitRule::XgbCategories => {
                if x.is_nan() {
                    return node.default_left;
                }
                // XGBoost: negative or too-large codes are "invalid" and go left, like any
                // category not in the set; codes in the set go right.
                if !(0.0..16_777_216.0).contains(&x) {
                    return true;
                }
                !self.in_category_set(node, x as u32)
            }
            SplitRule::LgbLessEqual { threshold, missing } => {
                let mut x = x;
                if x.is_nan() && missing != MissingType::NaN {
                    x = 0.0;
                }
                let is_missing = match missing {
                    MissingType::None => false,
                    MissingType::Zero => (-1e-35..=1e-35).contains(&x),
                    MissingType::NaN => x.is_nan(),
                };
                if is_missing {
                    node.default_left
                } else {
                    x <= threshold
                }
            }
            SplitRule::LgbCategories => {
                // C++ `static_cast<int>` of NaN or out-of-range values is INT_MIN on x86-64,
                // which LightGBM sends right, as it does negative codes.
                if x.is_nan() || x >= 2_147_483_648.0 || x <= -2_147_483_649.0 {
                    return false;
                }
                let code = x.trunc();
                if code < 0.0 {
                    return false;
                }
                self.in_category_set(node, code as u32)
            }
            SplitRule::CategoriesLeft { exact } => {
                if x.is_nan() || x < 0.0 {
                    return node.default_left;
                }
                if x >= 16_777_216.0 || (exact && x.fract() != 0.0) {
                    return false;
                }
                self.in_category_set(node, x as u32)
            }
        }
    }

    /// Whether category `code` is in the node's bitset.
    #[inline]
    fn in_category_set(&self, node: &Node, code: u32) -> bool {
        let (start, len) = node.categories;
        let word = (code / 32) as usize;
        if word >= len as usize {
            return false;
        }
        (self.category_words[start as usize + word] >> (code % 32)) & 1 == 1
    }

    /// The linear model of leaf `node`, where the tree has one there.
    pub fn linear_leaf(&self, node: usize) -> Option<&LinearLeaf> {
        if self.linear_leaves.is_empty() {
            return None;
        }
        self.linear_leaves.binary_search_by_key(&node, |l| l.node as usize).ok().map(|i| &self.linear_leaves[i])
    }

    /// What leaf `leaf` gives row `x` (indexed by feature), before the tree weight: its value, or
    /// its linear model's output where it has one and none of the model's features is missing.
    #[inline]
    pub fn leaf_output(&self, leaf: usize, x: &[f64]) -> f64 {
        match self.linear_leaf(leaf).and_then(|l| l.output(x)) {
            Some(v) => v,
            None => self.nodes[leaf].value,
        }
    }

    /// The leaf reached by a row (`x` indexed by feature).
    pub fn leaf_of(&self, x: &[f64]) -> usize {
        let mut n = 0usize;
        loop {
            let node = &self.nodes[n];
            if node.is_leaf() {
                return n;
            }
            n = if self.goes_left(node, x[node.feature as usize]) { node.left } else { node.right } as usize;
        }
    }

    /// Depth of the tree (a lone leaf has depth 0).
    pub fn depth(&self) -> usize {
        let mut stack = vec![(0usize, 0usize)];
        let mut depth = 0;
        while let Some((n, d)) = stack.pop() {
            depth = depth.max(d);
            let node = &self.nodes[n];
            if !node.is_leaf() {
                stack.push((node.left as usize, d + 1));
                stack.push((node.right as usize, d + 1));
            }
        }
        depth
    }

    /// Number of leaves reachable from the root.
    pub fn num_leaves(&self) -> usize {
        let mut stack = vec![0usize];
        let mut leaves = 0;
        while let Some(n) = stack.pop() {
            let node = &self.nodes[n];
            if node.is_leaf() {
                leaves += 1;
            } else {
                stack.push(node.left as usize);
                stack.push(node.right as usize);
            }
        }
        leaves
    }

    /// The nodes a path from the root reaches, each before its children (no recursion);
    /// reversed, children come before parents.
    pub fn preorder(&self) -> Vec<usize> {
        let mut order = Vec::with_capacity(self.nodes.len());
        let mut stack = if self.nodes.is_empty() { Vec::new() } else { vec![0usize] };
        while let Some(i) = stack.pop() {
            order.push(i);
            let node = &self.nodes[i];
            if !node.is_leaf() {
                stack.push(node.right as usize);
                stack.push(node.left as usize);
            }
        }
        order
    }

    /// Every node's expected value: a leaf's value times the tree weight, an internal node's
    /// the cover-weighted mean of its children's (their plain mean where both covers are 0),
    /// as XGBoost's `FillNodeMeanValues` computes them for its Saabas values. Nodes no path
    /// reaches keep 0. Children are visited before parents (reversed pre-order, no recursion).
    pub fn node_means(&self) -> Vec<f64> {
        let mut values = vec![0.0; self.nodes.len()];
        for &i in self.preorder().iter().rev() {
            let node = &self.nodes[i];
            values[i] = if node.is_leaf() {
                node.value * self.weight
            } else {
                let (l, r) = (node.left as usize, node.right as usize);
                let (cl, cr) = (self.nodes[l].cover, self.nodes[r].cover);
                if cl + cr > 0.0 {
                    (cl * values[l] + cr * values[r]) / (cl + cr)
                } else {
                    0.5 * (values[l] + values[r])
                }
            };
        }
        values
    }
}

/// What a model is made of, as a reader assembles it: [`Model::new`] checks the parts and makes
/// the model; [`Model::into_parts`] takes one apart again (to keep fewer trees, or to change the
/// covers) for [`Model::new`] to check anew.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelParts {
    /// Format the model was read from.
    pub format: ModelFormat,
    /// Version of the library that wrote it, when the file says.
    pub library_version: Option<String>,
    /// Objective name as the library wrote it (`binary:logistic`, `multiclass`, ...).
    pub objective: String,
    /// Feature names, in the model's order (`f0..` for XGBoost models saved without names).
    pub feature_names: Vec<String>,
    /// Numeric or categorical, per feature.
    pub feature_kinds: Vec<FeatureKind>,
    /// Number of outputs (classes for multiclass models, else 1).
    pub num_groups: usize,
    /// Margin added to every prediction, per group (XGBoost's transformed `base_score`).
    pub base_margin: Vec<f64>,
    /// The trees, each adding to one group.
    pub trees: Vec<Tree>,
    /// Precision of threshold comparisons.
    pub precision: Precision,
    /// Per feature, the training categories stored in the model file, where there are some:
    /// string (or dictionary) input columns are mapped to codes through them.
    pub categories: Vec<Option<Categories>>,
    /// Columns derived from several features that splits read (CatBoost's CTRs of feature
    /// combinations), and the players their values are computed for; `None` for most models.
    pub combinations: Option<Combinations>,
}

/// A tree ensemble ready to explain: trees, features, output groups and base margin. Made only
/// by [`Model::new`] (every reader goes through it), so every model in hand has passed
/// [`Model::new`]'s checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// What the model is made of, checked by [`Model::new`] and read through its accessors.
    parts: ModelParts,
}

impl Model {
    /// The model `parts` describe, after checking the structure of every tree: children in
    /// range, no cycles or shared nodes, features in range, finite non-negative covers (a leaf
    /// value that is not finite is taken, as the libraries take it, with a warning). `name`
    /// (the file) is what errors name.
    pub fn new(parts: ModelParts, name: &str) -> Result<Model> {
        let model = Model { parts };
        model.validate(name)?;
        Ok(model)
    }

    /// The model's parts, to change and make a model of again with [`Model::new`].
    pub fn into_parts(self) -> ModelParts {
        self.parts
    }

    /// Format the model was read from.
    pub fn format(&self) -> ModelFormat {
        self.parts.format
    }

    /// Version of the library that wrote it, when the file says.
    pub fn library_version(&self) -> Option<&str> {
        self.parts.library_version.as_deref()
    }

    /// Objective name as the library wrote it (`binary:logistic`, `multiclass`, ...).
    pub fn objective(&self) -> &str {
        &self.parts.objective
    }

    /// Feature names, in the model's order (`f0..` for XGBoost models saved without names).
    pub fn feature_names(&self) -> &[String] {
        &self.parts.feature_names
    }

    /// Numeric or categorical, per feature.
    pub fn feature_kinds(&self) -> &[FeatureKind] {
        &self.parts.feature_kinds
    }

    /// Number of outputs (classes for multiclass models, else 1).
    pub fn num_groups(&self) -> usize {
        self.parts.num_groups
    }

    /// Margin added to every prediction, per group.
    pub fn base_margin(&self) -> &[f64] {
        &self.parts.base_margin
    }

    /// The trees, each adding to one group.
    pub fn trees(&self) -> &[Tree] {
        &self.parts.trees
    }

    /// Precision of threshold comparisons.
    pub fn precision(&self) -> Precision {
        self.parts.precision
    }

    /// Per feature, the training categories stored in the model file, where there are some
    /// (empty when none are stored).
    pub fn categories(&self) -> &[Option<Categories>] {
        &self.parts.categories
    }

    /// Columns derived from several features that splits read, where the model has some
    /// (CatBoost's CTRs of feature combinations).
    pub fn combinations(&self) -> Option<&Combinations> {
        self.parts.combinations.as_ref()
    }

    /// Per column of the engines' feature block, the player a split on it credits: the column
    /// itself for a feature, its combination's categorical features together for a combined
    /// column ([`Combinations`]).
    pub fn players(&self) -> Vec<u32> {
        self.combinations().map_or_else(|| (0..self.num_features() as u32).collect(), |c| c.players().to_vec())
    }

    /// Whether a tree of the model has leaves that are linear models (LightGBM's `linear_tree`).
    pub fn has_linear_leaves(&self) -> bool {
        self.parts.trees.iter().any(|t| !t.linear_leaves.is_empty())
    }

    /// Refuses `what` (an engine, an index, an output) for a model with linear leaves: only
    /// interventional SHAP and interaction values (with a background) take them. Path-dependent
    /// TreeSHAP stands in for a feature a coalition leaves out with the tree's covers, and a
    /// leaf's linear model needs that feature's value, which no model file holds.
    pub fn refuse_linear_leaves(&self, what: &str) -> Result<()> {
        match self.parts.trees.iter().position(|t| !t.linear_leaves.is_empty()) {
            None => Ok(()),
            Some(t) => Err(Error::Unsupported(format!(
                "{what} for a model with linear leaves (LightGBM's linear_tree; tree {t} is one): not defined without a background, since a leaf's linear model needs the values of the features a coalition leaves out, which the model file does not hold; give background rows for its interventional SHAP and interaction values (shap and LightGBM explain no linear trees at all)"
            ))),
        }
    }

    /// Refuses `what` (an engine, an index, an output) for a model whose splits read columns
    /// combining several features: only the computations that credit such a split to its
    /// features together take it (path-dependent SHAP and interaction values from `oblivious`
    /// and `treeshap`, interventional SHAP values); the error names a combination.
    pub fn refuse_combinations(&self, what: &str) -> Result<()> {
        match self.combinations() {
            None => Ok(()),
            Some(c) => Err(Error::Unsupported(format!(
                "{what} for a model with CatBoost CTRs of feature combinations (such as {}): not built yet; its path-dependent SHAP and interaction values are (engines oblivious and treeshap, which auto picks), and its interventional SHAP values",
                c.columns().first().map_or("", |column| column.description())
            ))),
        }
    }
}

impl Model {
    /// Loads a model file, detecting its format from its content. A Spark ML model directory
    /// is refused with a pointer to `shapfusion_files::load_model`, which reads its Parquet.
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        let path = path.as_ref();
        if path.is_dir() {
            return Err(Error::UnsupportedModel {
                path: path.display().to_string(),
                detail: "a directory (a Spark ML model?): Spark ML models are read by shapfusion-files (`shapfusion_files::load_model`), which reads their Parquet".into(),
            });
        }
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        Model::from_bytes(&bytes, &path.display().to_string())
    }

    /// Parses a model from bytes, detecting the format from the content; `name` is used in
    /// error messages.
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<Model> {
        match detect_format(bytes) {
            Some(format) => Model::from_bytes_as(bytes, name, format),
            None => Err(Error::ModelFormat {
                path: name.to_string(),
                format: "tree ensemble",
                detail: if bytes.is_empty() {
                    "the file is empty".into()
                } else {
                    format!("the content is none of the formats read here: {}", ModelFormat::list())
                },
            }),
        }
    }

    /// Parses a model from bytes in the given format (no detection), and validates it. Any
    /// bytes give a model or an error, never a panic or an abort: the fuzz harness in `fuzz/`
    /// drives each reader through this.
    pub fn from_bytes_as(bytes: &[u8], name: &str, format: ModelFormat) -> Result<Model> {
        let model = match format {
            ModelFormat::XgboostJson => xgboost::from_json_bytes(bytes, name)?,
            ModelFormat::XgboostUbjson => xgboost::from_ubjson_bytes(bytes, name)?,
            ModelFormat::LightgbmText => lightgbm::from_text_bytes(bytes, name)?,
            ModelFormat::CatboostJson => catboost::from_json_bytes(bytes, name)?,
            ModelFormat::CatboostBinary => catboost::from_cbm_bytes(bytes, name)?,
            ModelFormat::ShapfusionJson => neutral::from_json_bytes(bytes, name)?,
            ModelFormat::SparkMl => {
                return Err(Error::ModelFormat {
                    path: name.into(),
                    format: ModelFormat::SparkMl.name(),
                    detail: "a Spark ML model is a directory, not one file: give the directory `model.save` wrote".into(),
                })
            }
        };
        Model::new(model, name)
    }

    /// Number of features the model reads.
    pub fn num_features(&self) -> usize {
        self.parts.feature_names.len()
    }

    /// Columns of the engines' feature block: the features, then the columns derived from
    /// several of them ([`Combinations`]); splits read columns.
    pub fn num_columns(&self) -> usize {
        self.parts.combinations.as_ref().map_or(self.num_features(), Combinations::num_columns)
    }

    /// Players the engines compute values for: the features, then those shared by several
    /// features ([`Combinations`]), folded into the features' values before they are returned.
    pub fn num_players(&self) -> usize {
        self.parts.combinations.as_ref().map_or(self.num_features(), Combinations::num_players)
    }

    /// The features read as numbers from a text format (CSV): all but the categorical ones
    /// whose category names the model stores, which may come as names.
    pub fn numeric_input_columns(&self) -> Vec<String> {
        self.parts
            .feature_names
            .iter()
            .enumerate()
            .filter(|(j, _)| !matches!(self.parts.categories.get(*j), Some(Some(Categories::Names(_) | Categories::CatboostHashes(_)))))
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// What this model's library does with a category not seen in training.
    pub fn unseen_category(&self) -> UnseenCategory {
        match self.parts.format {
            ModelFormat::XgboostJson | ModelFormat::XgboostUbjson => UnseenCategory::Error,
            ModelFormat::LightgbmText
            | ModelFormat::CatboostJson
            | ModelFormat::CatboostBinary
            | ModelFormat::ShapfusionJson
            | ModelFormat::SparkMl => UnseenCategory::Missing,
        }
    }

    /// Predicted margin (raw score) of one row, per group, in f64.
    pub fn predict_row(&self, x: &[f64], out: &mut [f64]) {
        out.copy_from_slice(&self.parts.base_margin);
        for tree in &self.parts.trees {
            let leaf = tree.leaf_of(x);
            out[tree.group] += tree.leaf_output(leaf, x) * tree.weight;
        }
    }

    /// Checks the structure of every tree: children in range, no cycles or shared nodes,
    /// features in range, finite non-negative covers (a leaf value that is not finite is
    /// taken, as the libraries take it, with a warning).
    fn validate(&self, name: &str) -> Result<()> {
        let nf = self.num_features();
        if self.parts.feature_kinds.len() != nf {
            return Err(Error::ModelFormat {
                path: name.into(),
                format: "tree ensemble",
                detail: format!("{} feature names but {} feature types", nf, self.parts.feature_kinds.len()),
            });
        }
        if !self.parts.categories.is_empty() && self.parts.categories.len() != nf {
            return Err(Error::ModelFormat {
                path: name.into(),
                format: "tree ensemble",
                detail: format!("stored categories for {} features but the model has {nf}", self.parts.categories.len()),
            });
        }
        if self.parts.base_margin.len() != self.parts.num_groups {
            return Err(Error::ModelFormat {
                path: name.into(),
                format: "tree ensemble",
                detail: format!("base margin {:?} does not fit {} output groups", self.parts.base_margin, self.parts.num_groups),
            });
        }
        if let Some(b) = self.parts.base_margin.iter().find(|b| !b.is_finite()) {
            // A Poisson model trained on all-zero labels has a margin of -inf: the library loads
            // and predicts with it, and so does shapfusion, saying so.
            tracing::warn!("{name}: base margin {b}: predictions and SHAP values are not finite, as the library's");
        }
        // Splits read the features and the columns derived from them (their parts are checked
        // when the combinations are made).
        let columns = self.num_columns();
        let mut warned = false;
        for (t, tree) in self.parts.trees.iter().enumerate() {
            let bad = |node: usize, detail: String| Error::InvalidTree { path: name.into(), tree: t, node, detail };
            if tree.nodes.is_empty() {
                return Err(bad(0, "tree has no nodes".into()));
            }
            if tree.group >= self.parts.num_groups {
                return Err(bad(0, format!("output group {} but the model has {}", tree.group, self.parts.num_groups)));
            }
            if !tree.weight.is_finite() {
                return Err(bad(0, format!("tree weight {} is not finite", tree.weight)));
            }
            let mut seen = vec![false; tree.nodes.len()];
            let mut stack = vec![0usize];
            seen[0] = true;
            while let Some(n) = stack.pop() {
                let node = &tree.nodes[n];
                if !(node.cover.is_finite() && node.cover >= 0.0) {
                    return Err(bad(n, format!("cover {} is not a finite non-negative number", node.cover)));
                }
                if node.is_leaf() {
                    if node.right != LEAF {
                        return Err(bad(n, "node has a right child but no left child".into()));
                    }
                    if !node.value.is_finite() && !warned {
                        // The libraries load and predict with such a model (their outputs are not
                        // finite where it counts); so does shapfusion, and says so once.
                        tracing::warn!(
                            "{name}: tree {t}, node {n}: leaf value {}: predictions and SHAP values that reach it are not finite, as the library's",
                            node.value
                        );
                        warned = true;
                    }
                    continue;
                }
                if node.right == LEAF {
                    return Err(bad(n, "node has a left child but no right child".into()));
                }
                if node.feature as usize >= columns {
                    return Err(bad(n, format!("splits on feature {} but the model has {} features", node.feature, nf)));
                }
                // Any threshold the libraries write is taken: ±inf (every number one way, missing
                // values by the default direction) and NaN (every comparison false) decide as the
                // libraries' own comparisons do. A node with zero cover (no training weight)
                // weighs its branches equally (see `PreparedTree`).
                match node.rule {
                    SplitRule::XgbLess { .. } | SplitRule::LgbLessEqual { .. } => {}
                    SplitRule::XgbCategories | SplitRule::LgbCategories | SplitRule::CategoriesLeft { .. } => {
                        let (start, len) = node.categories;
                        if start as usize + len as usize > tree.category_words.len() {
                            return Err(bad(n, "category set points outside the tree's category list".into()));
                        }
                    }
                }
                for child in [node.left, node.right] {
                    let c = child as usize;
                    if c >= tree.nodes.len() {
                        return Err(bad(n, format!("child index {} is out of range (tree has {} nodes)", child, tree.nodes.len())));
                    }
                    if seen[c] {
                        return Err(bad(n, format!("child {c} is reached twice: the tree has a cycle or shared node")));
                    }
                    // TreeSHAP weighs a branch by child cover / parent cover, a fraction of the
                    // training rows. A child holding more than its parent (beyond float rounding)
                    // is corrupt, and ratios far above 1 would cancel away the attributions.
                    let child_cover = tree.nodes[c].cover;
                    if child_cover > node.cover * (1.0 + COVER_TOLERANCE) {
                        return Err(bad(
                            n,
                            format!(
                                "child {c} has cover {child_cover}, more than its parent's {}: the covers (sum_hessian / counts) are corrupt",
                                node.cover
                            ),
                        ));
                    }
                    seen[c] = true;
                    stack.push(c);
                }
            }
            // Linear leaves: in node order (looked up by binary search), each a leaf, its
            // features the model's. Coefficients are taken as written, as LightGBM takes them.
            let mut previous = None;
            for leaf in &tree.linear_leaves {
                let n = leaf.node as usize;
                if previous.is_some_and(|p| p >= n) {
                    return Err(bad(n, "linear leaves are not in node order".into()));
                }
                previous = Some(n);
                if !tree.nodes.get(n).is_some_and(Node::is_leaf) {
                    return Err(bad(n, "a linear model is given for a node that is not a leaf".into()));
                }
                if let Some(&(f, _)) = leaf.terms.iter().find(|(f, _)| *f as usize >= nf) {
                    return Err(bad(n, format!("the leaf's linear model reads feature {f} but the model has {nf} features")));
                }
            }
        }
        Ok(())
    }

    /// A one-screen description, for `shapfusion models inspect`.
    pub fn summary(&self) -> ModelSummary {
        ModelSummary {
            format: self.parts.format.to_string(),
            library_version: self.parts.library_version.clone(),
            objective: self.parts.objective.clone(),
            trees: self.parts.trees.len(),
            max_depth: self.parts.trees.iter().map(Tree::depth).max().unwrap_or(0),
            leaves: self.parts.trees.iter().map(Tree::num_leaves).sum(),
            features: self.parts.feature_names.clone(),
            categorical: self
                .parts
                .feature_names
                .iter()
                .zip(&self.parts.feature_kinds)
                .filter(|(_, k)| **k == FeatureKind::Categorical)
                .map(|(n, _)| n.clone())
                .collect(),
            stored_categories: self
                .parts
                .feature_names
                .iter()
                .zip(&self.parts.categories)
                .filter_map(|(n, c)| {
                    let values = match c.as_ref()? {
                        Categories::Names(names) => names.clone(),
                        Categories::Numbers(numbers) => numbers.iter().map(f64::to_string).collect(),
                        Categories::CatboostHashes(hashes) => hashes.iter().map(|h| format!("catboost hash {h}")).collect(),
                    };
                    Some((n.clone(), values))
                })
                .collect(),
            output_groups: self.parts.num_groups,
            base_margin: self.parts.base_margin.clone(),
            combinations: self.parts.combinations.iter().flat_map(|c| c.columns()).map(|c| c.description().to_string()).collect(),
            linear_leaves: self.parts.trees.iter().map(|t| t.linear_leaves.len()).sum(),
        }
    }
}

/// What `models inspect` prints.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelSummary {
    /// File format.
    pub format: String,
    /// Library version that wrote it.
    pub library_version: Option<String>,
    /// Objective.
    pub objective: String,
    /// Number of trees.
    pub trees: usize,
    /// Deepest tree.
    pub max_depth: usize,
    /// Total leaves.
    pub leaves: usize,
    /// Feature names in order.
    pub features: Vec<String>,
    /// Names of categorical features.
    pub categorical: Vec<String>,
    /// Training categories the model stores, by feature, in code order.
    pub stored_categories: std::collections::BTreeMap<String, Vec<String>>,
    /// Output groups.
    pub output_groups: usize,
    /// Base margin per group.
    pub base_margin: Vec<f64>,
    /// What each column combining several features combines (CatBoost's CTRs of feature
    /// combinations), in column order.
    pub combinations: Vec<String>,
    /// Leaves whose output is a linear model of the row (LightGBM's `linear_tree`): such a
    /// model's values are computed over a background only.
    pub linear_leaves: usize,
}

/// The model file a reader is reading, for its errors. Every reader builds its errors here, so
/// each names the file, its format and (for a bad tree) the tree and node in one way.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ModelFile<'a> {
    name: &'a str,
    format: ModelFormat,
}

impl<'a> ModelFile<'a> {
    /// The file `name` (what errors call it), read as `format`.
    pub(crate) fn new(name: &'a str, format: ModelFormat) -> Self {
        ModelFile { name, format }
    }

    /// The format being read.
    pub(crate) fn format(&self) -> ModelFormat {
        self.format
    }

    /// The file's name, as errors give it.
    pub(crate) fn name(&self) -> &'a str {
        self.name
    }

    /// The file is not a valid model of its format: `detail` says what is wrong where.
    pub(crate) fn error(&self, detail: impl Into<String>) -> Error {
        Error::ModelFormat { path: self.name.into(), format: self.format.name(), detail: detail.into() }
    }

    /// The file is not JSON (or ends early).
    pub(crate) fn json_error(&self, e: serde_json::Error) -> Error {
        self.error(if e.is_eof() { format!("{e} (the file looks truncated)") } else { e.to_string() })
    }

    /// The file is a valid model that shapfusion cannot explain exactly: `detail` says which
    /// part and why.
    pub(crate) fn unsupported(&self, detail: impl Into<String>) -> Error {
        Error::UnsupportedModel { path: self.name.into(), detail: detail.into() }
    }

    /// Node `node` of tree `tree` is invalid.
    pub(crate) fn tree_error(&self, tree: usize, node: usize, detail: impl Into<String>) -> Error {
        Error::InvalidTree { path: self.name.into(), tree, node, detail: detail.into() }
    }
}

/// Guesses the format from the first bytes of the content (not the file extension).
pub fn detect_format(bytes: &[u8]) -> Option<ModelFormat> {
    if bytes.starts_with(catboost_cbm::MAGIC) {
        return Some(ModelFormat::CatboostBinary);
    }
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = &bytes[start..];
    if rest[0] == b'{' {
        // JSON continues with whitespace, a quote or '}'; UBJSON with a type/length marker.
        if let Some(b'i' | b'U' | b'I' | b'l' | b'L' | b'$' | b'#') = rest.get(1) {
            return Some(ModelFormat::XgboostUbjson);
        }
        // Told apart by their top-level keys: the shapfusion trees file opens with its
        // `"format"` tag; CatBoost's JSON has `oblivious_trees` and XGBoost's has `learner`.
        return Some(match first_json_key(rest) {
            Some(neutral::FORMAT_KEY) => ModelFormat::ShapfusionJson,
            Some("learner") => ModelFormat::XgboostJson,
            Some(key) if catboost::TOP_LEVEL_KEYS.contains(&key) => ModelFormat::CatboostJson,
            _ if contains(rest, b"\"oblivious_trees\"") && !contains(rest, b"\"learner\"") => ModelFormat::CatboostJson,
            _ => ModelFormat::XgboostJson,
        });
    }
    if rest.starts_with(b"tree") {
        return Some(ModelFormat::LightgbmText);
    }
    None
}

/// The first key of a JSON object (`{ "key": ...`), when it has no escapes.
fn first_json_key(json: &[u8]) -> Option<&str> {
    let rest = json.strip_prefix(b"{")?;
    let start = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = rest[start..].strip_prefix(b"\"")?;
    let end = rest.iter().take(64).position(|&b| b == b'"' || b == b'\\')?;
    (rest[end] == b'"').then(|| std::str::from_utf8(&rest[..end]).ok()).flatten()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_formats_from_content() {
        assert_eq!(detect_format(b"  {\"learner\": {}}"), Some(ModelFormat::XgboostJson));
        assert_eq!(detect_format(b"{\"version\": [3, 2, 0], \"learner\": {}}"), Some(ModelFormat::XgboostJson));
        assert_eq!(detect_format(b"{\"format\": \"shapfusion.trees\", \"format_version\": 1}"), Some(ModelFormat::ShapfusionJson));
        assert_eq!(detect_format(b"{\n\"features_info\": {}, \"oblivious_trees\": []}"), Some(ModelFormat::CatboostJson));
        assert_eq!(detect_format(b"{\"zzz\": 1, \"oblivious_trees\": []}"), Some(ModelFormat::CatboostJson));
        assert_eq!(detect_format(b"{L\x00\x00\x00\x00\x00\x00\x00\x07learner"), Some(ModelFormat::XgboostUbjson));
        assert_eq!(detect_format(b"{i\x07learner"), Some(ModelFormat::XgboostUbjson));
        assert_eq!(detect_format(b"tree\nversion=v4\n"), Some(ModelFormat::LightgbmText));
        assert_eq!(detect_format(b"CBM1\x10\x39\x00\x00"), Some(ModelFormat::CatboostBinary));
        assert_eq!(detect_format(b"hello"), None);
        assert_eq!(detect_format(b""), None);
    }

    fn stump(rule: SplitRule, words: Vec<u32>) -> Tree {
        let mut root = Node::leaf(0.0, 2.0);
        root.left = 1;
        root.right = 2;
        root.rule = rule;
        root.default_left = false;
        root.categories = (0, words.len() as u32);
        Tree { nodes: vec![root, Node::leaf(-1.0, 1.0), Node::leaf(1.0, 1.0)], category_words: words, group: 0, weight: 1.0, linear_leaves: vec![] }
    }

    #[test]
    fn xgboost_numeric_rule_is_strict_less() {
        let t = stump(SplitRule::XgbLess { threshold: 0.5 }, vec![]);
        assert!(t.goes_left(&t.nodes[0], 0.25));
        assert!(!t.goes_left(&t.nodes[0], 0.5));
        assert!(!t.goes_left(&t.nodes[0], f64::NAN), "NaN takes the default (right here)");
    }

    #[test]
    fn lightgbm_numeric_rules_follow_missing_type() {
        let t = stump(SplitRule::LgbLessEqual { threshold: 0.5, missing: MissingType::None }, vec![]);
        assert!(t.goes_left(&t.nodes[0], 0.5));
        assert!(t.goes_left(&t.nodes[0], f64::NAN), "NaN is read as 0.0 <= 0.5");
        let t = stump(SplitRule::LgbLessEqual { threshold: 0.5, missing: MissingType::Zero }, vec![]);
        assert!(!t.goes_left(&t.nodes[0], 0.0), "zero is missing -> default right");
        assert!(!t.goes_left(&t.nodes[0], f64::NAN));
        let t = stump(SplitRule::LgbLessEqual { threshold: 0.5, missing: MissingType::NaN }, vec![]);
        assert!(t.goes_left(&t.nodes[0], 0.0));
        assert!(!t.goes_left(&t.nodes[0], f64::NAN));
    }

    #[test]
    fn category_rules_point_opposite_ways() {
        // categories {1, 33}
        let words = vec![1 << 1, 1 << 1];
        let x = stump(SplitRule::XgbCategories, words.clone());
        assert!(!x.goes_left(&x.nodes[0], 1.0), "XGBoost: in the set goes right");
        assert!(!x.goes_left(&x.nodes[0], 33.0));
        assert!(x.goes_left(&x.nodes[0], 2.0));
        assert!(x.goes_left(&x.nodes[0], 1000.0), "beyond the bitset: not in the set");
        assert!(x.goes_left(&x.nodes[0], -1.0), "invalid code goes left");
        let l = stump(SplitRule::LgbCategories, words);
        assert!(l.goes_left(&l.nodes[0], 1.0), "LightGBM: in the set goes left");
        assert!(l.goes_left(&l.nodes[0], 1.7), "codes truncate");
        assert!(!l.goes_left(&l.nodes[0], 2.0));
        assert!(!l.goes_left(&l.nodes[0], -1.0));
        assert!(!l.goes_left(&l.nodes[0], f64::NAN));
    }
}

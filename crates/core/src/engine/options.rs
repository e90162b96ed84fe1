//! What a caller chooses: the engine by name, and the knobs engines share.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The engines callers can ask for by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// Pick per model and row count (see [`auto_choice`](super::auto_choice)).
    #[default]
    Auto,
    /// The original recursive TreeSHAP (Lundberg et al. 2018, algorithm 2): the reference.
    TreeShap,
    /// Fast TreeSHAP v1: hot/cold split of the path, same memory as TreeSHAP.
    FastV1,
    /// Fast TreeSHAP v2: per-leaf tables over the satisfied-feature patterns, bounded memory.
    FastV2,
    /// Gauss–Legendre quadrature of the Shapley weights: exact, O(⌈d/2⌉) per node, no tables.
    Quadrature,
    /// The quadrature rule in Linear TreeSHAP's bottom-up form, sixteen rows per SIMD pass (four for a call of at most four):
    /// exact, O(⌈d/2⌉) per node and row instead of per leaf and path feature, no tables.
    Linear,
    /// A table of each oblivious tree's values by leaf index (CatBoost's symmetric trees):
    /// `d` tests and one table row per tree and row; other trees by `treeshap`.
    Oblivious,
}

impl Algorithm {
    /// The name used on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::Auto => "auto",
            Algorithm::TreeShap => "treeshap",
            Algorithm::FastV1 => "fast-v1",
            Algorithm::FastV2 => "fast-v2",
            Algorithm::Quadrature => "quadrature",
            Algorithm::Linear => "linear",
            Algorithm::Oblivious => "oblivious",
        }
    }

    /// All names, for help texts.
    pub const NAMES: &'static [&'static str] = &["auto", "treeshap", "fast-v1", "fast-v2", "quadrature", "linear", "oblivious"];
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => Algorithm::Auto,
            "treeshap" => Algorithm::TreeShap,
            "fast-v1" | "fast_v1" => Algorithm::FastV1,
            "fast-v2" | "fast_v2" => Algorithm::FastV2,
            "quadrature" => Algorithm::Quadrature,
            "linear" => Algorithm::Linear,
            "oblivious" => Algorithm::Oblivious,
            other => return Err(Error::InvalidArgument(format!("unknown algorithm {other:?}; expected one of {}", Algorithm::NAMES.join(", ")))),
        })
    }
}

/// Which attribution index an explanation computes: how a feature's marginal contributions
/// to the coalitions of the other features are weighted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Index {
    /// Shapley values (SHAP): coalitions weighted by size, so the values add up to the
    /// prediction minus the expected value (the bias column). Interaction values are the
    /// Shapley interaction index, halved off the diagonal as shap lays them out.
    #[default]
    Shapley,
    /// Banzhaf values: every coalition of the other features weighted alike (`1/2^(M-1)`), as
    /// WOODELF and Karczmarz et al. (2022) define them. They do not add up to the prediction:
    /// the bias column holds what they leave, the prediction minus their sum. Interaction
    /// values are the Banzhaf interaction index, whole off the diagonal (WOODELF's layout), with
    /// each row's diagonal entry its Banzhaf value minus the row's other entries, so that rows
    /// still sum to the Banzhaf values.
    Banzhaf,
}

impl Index {
    /// The name used on the command line, in SQL settings and in Flight calls.
    pub fn name(&self) -> &'static str {
        match self {
            Index::Shapley => "shapley",
            Index::Banzhaf => "banzhaf",
        }
    }

    /// All names, for help texts.
    pub const NAMES: &'static [&'static str] = &["shapley", "banzhaf"];
}

impl fmt::Display for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Index {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "shapley" => Ok(Index::Shapley),
            "banzhaf" => Ok(Index::Banzhaf),
            other => Err(Error::InvalidArgument(format!("unknown index {other:?}; expected one of {}", Index::NAMES.join(", ")))),
        }
    }
}

/// Default bound on the interventional engine's aggregated background (tables and patterns
/// together): 1 GiB.
pub const DEFAULT_INTERVENTIONAL_MEMORY_BYTES: usize = 1 << 30;

/// Default bound on the size of the fast-v2 tables: 256 MiB.
pub const DEFAULT_V2_MEMORY_BYTES: usize = 256 << 20;

/// Knobs shared by all engines.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Most memory the fast-v2 tables may take, in bytes.
    pub v2_memory_bytes: usize,
    /// Most memory the interventional engine's aggregated background may take, in bytes.
    pub interventional_memory_bytes: usize,
    /// The attribution index: Shapley values (the default) or Banzhaf values.
    pub index: Index,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            v2_memory_bytes: DEFAULT_V2_MEMORY_BYTES,
            interventional_memory_bytes: DEFAULT_INTERVENTIONAL_MEMORY_BYTES,
            index: Index::Shapley,
        }
    }
}

/// The function of the margin an interventional explanation attributes (shap's
/// `model_output`): the margin itself, the probability of a logistic model, or a loss of the
/// margin against each explained row's label (shap's `model_output="log_loss"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OutputTransform {
    /// The margin (shap's `model_output="raw"`).
    #[default]
    Identity,
    /// `1 / (1 + e^-margin)`, per output group (shap's `model_output="probability"` for
    /// log-odds trees).
    Logistic,
    /// `ln(1 + e^margin) - y * margin`: the negative log-likelihood of the label `y` (0 or 1)
    /// under a log-odds margin (shap's `logistic_nlogloss`, its `model_output="log_loss"` of a
    /// binary classifier).
    LogisticLoss,
    /// `(margin - y)^2`: the squared error against the label `y` (shap's `squared_loss`, its
    /// `model_output="log_loss"` of a squared-error regressor).
    SquaredLoss,
}

impl OutputTransform {
    /// The name used in messages and options (shap's names of the transforms).
    pub fn name(&self) -> &'static str {
        match self {
            OutputTransform::Identity => "identity",
            OutputTransform::Logistic => "logistic",
            OutputTransform::LogisticLoss => "logistic_nlogloss",
            OutputTransform::SquaredLoss => "squared_loss",
        }
    }

    /// Whether the transform is a loss, a function of each explained row's label as well as
    /// of its margin.
    pub fn needs_labels(&self) -> bool {
        matches!(self, OutputTransform::LogisticLoss | OutputTransform::SquaredLoss)
    }

    /// The transform of one margin; `label` is the explained row's label, which only the
    /// losses read.
    #[inline]
    pub fn apply(&self, margin: f64, label: f64) -> f64 {
        match self {
            OutputTransform::Identity => margin,
            OutputTransform::Logistic => 1.0 / (1.0 + (-margin).exp()),
            // ln(1 + e^m) without overflow for large margins (shap's formula is infinite
            // beyond m = 709; the two agree to rounding below it).
            OutputTransform::LogisticLoss => margin.max(0.0) + (-margin.abs()).exp().ln_1p() - label * margin,
            OutputTransform::SquaredLoss => (margin - label) * (margin - label),
        }
    }
}

impl fmt::Display for OutputTransform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OutputTransform {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "identity" => OutputTransform::Identity,
            "logistic" => OutputTransform::Logistic,
            "logistic_nlogloss" => OutputTransform::LogisticLoss,
            "squared_loss" => OutputTransform::SquaredLoss,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown output transform {other:?}; expected identity, logistic, logistic_nlogloss or squared_loss"
                )))
            }
        })
    }
}

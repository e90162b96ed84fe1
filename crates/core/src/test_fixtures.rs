//! The committed fixtures (`tests/fixtures/*`: a model, its input rows and the library's own
//! outputs) for the crate's unit tests; the integration tests have their own loader.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::engine::FeatureBlock;
use crate::model::Model;

/// One fixture's model and input rows.
pub(crate) struct Fixture {
    pub name: String,
    pub model: Arc<Model>,
    pub block: FeatureBlock,
}

impl Fixture {
    /// Whether the model is CatBoost's symmetric (oblivious) trees, not its `Depthwise` or
    /// `Lossguide` ones.
    pub fn is_catboost_symmetric(&self) -> bool {
        self.name.starts_with("cb_") && !self.name.contains("depthwise") && !self.name.contains("lossguide")
    }
}

/// Every fixture directory with an `expected.json`, in name order, but Spark ML's (model
/// directories of Parquet, which `shapfusion-files` reads; the workspace's tests cover them).
pub(crate) fn fixtures() -> Vec<Fixture> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("expected.json").exists() && !p.join("model").is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 10, "fixtures missing under {}", root.display());
    dirs.into_iter()
        .map(|dir| {
            let model_path = ["model.json", "model.ubj", "model.txt"].iter().map(|m| dir.join(m)).find(|p| p.exists()).unwrap();
            let model = Arc::new(Model::load(&model_path).unwrap());
            let block = read_block(&model, &dir.join("input.parquet"));
            Fixture { name: dir.file_name().unwrap().to_string_lossy().into(), model, block }
        })
        .collect()
}

/// The LightGBM linear-tree fixtures (`tests/fixtures/linear/*`), in name order, each with its
/// background rows.
pub(crate) fn linear_fixtures() -> Vec<(Fixture, FeatureBlock)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/linear");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("model.txt").exists()).collect();
    dirs.sort();
    assert!(dirs.len() >= 3, "linear-tree fixtures missing under {}", root.display());
    dirs.into_iter()
        .map(|dir| {
            let model = Arc::new(Model::load(dir.join("model.txt")).unwrap());
            let (block, background) = (read_block(&model, &dir.join("input.parquet")), read_block(&model, &dir.join("background.parquet")));
            (Fixture { name: dir.file_name().unwrap().to_string_lossy().into(), model, block }, background)
        })
        .collect()
}

/// The rows of a Parquet file as `model`'s feature block.
fn read_block(model: &Model, path: &Path) -> FeatureBlock {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap().build().unwrap();
    let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
    let batch = arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    model.feature_block(&batch).unwrap()
}

/// Rows `from..to` of a fixture's block (`to` capped at its row count).
pub(crate) fn block_rows(block: &FeatureBlock, from: usize, to: usize) -> FeatureBlock {
    let to = to.min(block.rows());
    FeatureBlock::new(to - from, block.cols(), block.values()[from * block.cols()..to * block.cols()].to_vec(), crate::model::Precision::F64)
}

/// Largest |a − b| over a row relative to that row's largest |b| (floored at 1e-12), and the
/// row; NaN (the first such row) where a value is NaN in one and not the other.
pub(crate) fn max_row_rel_error(a: &[f64], b: &[f64], row_width: usize) -> (f64, usize) {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let mut worst = (0.0, 0);
    for (r, (ra, rb)) in a.chunks(row_width).zip(b.chunks(row_width)).enumerate() {
        let scale = rb.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
        let err = crate::test_support::max_abs_diff(ra, rb) / scale;
        if err.is_nan() {
            return (err, r);
        }
        if err > worst.0 {
            worst = (err, r);
        }
    }
    worst
}

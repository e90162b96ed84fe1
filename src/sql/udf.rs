//! The scalar UDFs. Planning resolves the (constant) model name, checks the arguments against
//! the model's features and fixes the output type; the resolved model's URL and version (and
//! the background's, with `shap.background` set) travel in the return field's metadata so
//! execution uses exactly the versions that were planned.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{ArrayRef, StructArray};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{exec_datafusion_err, plan_datafusion_err, plan_err, DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::options::ShapOptions;
use crate::device::Device;
use crate::engine::{Algorithm, EngineOptions};
use crate::batch::{compute_pool, explain_block, output_fields, OutputKind};
use crate::features::{block_from_columns, is_numeric};

use crate::model::Model;
use crate::registry::ModelRegistry;

const META_URL: &str = "shapfusion.model.url";
const META_VERSION: &str = "shapfusion.model.version";
const META_BACKGROUND_URL: &str = "shapfusion.background.url";
const META_BACKGROUND_VERSION: &str = "shapfusion.background.version";

/// `shap`, `shap_interactions` or `predict`, bound to a model registry and the session's
/// `shap.*` options.
#[derive(Debug)]
pub struct ShapUdf {
    name: &'static str,
    kind: OutputKind,
    registry: Arc<ModelRegistry>,
    options: ShapOptions,
    algorithm: Algorithm,
    device: Device,
    pool: Arc<rayon::ThreadPool>,
    signature: Signature,
}

impl ShapUdf {
    /// A UDF named `name` computing `kind`.
    pub fn new(name: &'static str, kind: OutputKind, registry: Arc<ModelRegistry>, options: ShapOptions) -> crate::Result<Self> {
        let algorithm: Algorithm = options.algorithm.parse()?;
        let device: Device = options.device.parse()?;
        let pool = compute_pool(options.threads)?;
        Ok(ShapUdf {
            name,
            kind,
            registry,
            options,
            algorithm,
            device,
            pool,
            signature: Signature::user_defined(Volatility::Immutable),
        })
    }

    fn engine_options(&self) -> EngineOptions {
        EngineOptions { v2_memory_bytes: self.options.v2_memory_mb.saturating_mul(1 << 20), ..Default::default() }
    }

    fn usage(&self, model: &Model) -> String {
        format!("{}('<model>', {})", self.name, model.feature_names.join(", "))
    }

    /// The SQL result type: the batch step's output fields, as a struct for `shap`.
    fn output_type(&self, model: &Model) -> DataType {
        let fields = output_fields(model, self.kind);
        match self.kind {
            OutputKind::Shap => DataType::Struct(fields.into()),
            OutputKind::Interactions | OutputKind::Predict => fields[0].data_type().clone(),
        }
    }

    /// The batch step's output columns as this function's one result column.
    fn as_result(&self, model: &Model, columns: Vec<ArrayRef>) -> crate::Result<ArrayRef> {
        let mismatch = |detail: String| crate::Error::Input(format!("{}(): the output does not match the model: {detail}", self.name));
        Ok(match self.kind {
            OutputKind::Shap => Arc::new(
                StructArray::try_new(output_fields(model, self.kind).into(), columns, None).map_err(|e| mismatch(e.to_string()))?,
            ),
            OutputKind::Interactions | OutputKind::Predict => columns.into_iter().next().ok_or_else(|| mismatch("no columns".into()))?,
        })
    }
}

impl ShapUdf {
    /// Computes on the Flight workers of `shap.workers`; the workers load the model from the
    /// URL this session resolved, so they must be able to read it (a shared object store or
    /// the same path mounted).
    #[cfg(feature = "flight")]
    fn invoke_on_workers(&self, loaded: &crate::registry::LoadedModel, background: Option<&crate::registry::LoadedBackground>, columns: Vec<ArrayRef>) -> DfResult<ArrayRef> {
        use crate::flight::ExchangeCommand;
        use arrow::array::RecordBatch;
        use arrow::datatypes::Schema;
        let model = &loaded.model;
        let pool = crate::flight::shared_pool(&self.options.workers, &self.options.worker_token_file).map_err(df_err)?;
        let fields: Vec<Field> =
            model.feature_names.iter().zip(&columns).map(|(n, c)| Field::new(n, c.data_type().clone(), true)).collect();
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        // The workers know the background by its registered name; its content hash pins the rows.
        let command = ExchangeCommand::new(loaded.url.clone(), self.kind)
            .pinned(Some(loaded.content_hash.clone()))
            .with_background(background.map(|b| (b.name.clone(), b.content_hash.clone())));
        let out = crate::registry::run_io(async move { pool.run(&command, batch).await }).map_err(df_err)?;
        self.as_result(model, out.columns().to_vec()).map_err(df_err)
    }

    #[cfg(not(feature = "flight"))]
    fn invoke_on_workers(&self, _loaded: &crate::registry::LoadedModel, _background: Option<&crate::registry::LoadedBackground>, _columns: Vec<ArrayRef>) -> DfResult<ArrayRef> {
        Err(exec_datafusion_err!("shap.workers is set, but this build has no Flight support (build with the `flight` feature)"))
    }
}

impl PartialEq for ShapUdf {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.registry, &other.registry) && same_options(&self.options, &other.options)
    }
}

impl Eq for ShapUdf {}

impl Hash for ShapUdf {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.options.model_dir.hash(state);
        self.options.algorithm.hash(state);
        self.options.device.hash(state);
        self.options.workers.hash(state);
        self.options.background.hash(state);
    }
}


/// The config extension macro derives no `PartialEq`; compare the fields we read.
fn same_options(a: &ShapOptions, b: &ShapOptions) -> bool {
    a.model_dir == b.model_dir
        && a.algorithm == b.algorithm
        && a.device == b.device
        && a.threads == b.threads
        && a.v2_memory_mb == b.v2_memory_mb
        && a.workers == b.workers
        && a.worker_token_file == b.worker_token_file
        && a.background == b.background
}

fn df_err(e: crate::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl ScalarUDFImpl for ShapUdf {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        let Some(first) = arg_types.first() else {
            return plan_err!("{}() needs a model name and the model's feature columns, e.g. {}('fraud', amount, age)", self.name, self.name);
        };
        if !matches!(first, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) {
            return plan_err!("{}(): the first argument must be the model name as a string, got {first}", self.name);
        }
        let mut out = vec![DataType::Utf8];
        for (i, t) in arg_types.iter().enumerate().skip(1) {
            if !is_numeric(t) {
                return plan_err!("{}(): argument {} has type {t}; model features must be numeric (integer, float or boolean)", self.name, i + 1);
            }
            out.push(DataType::Float64);
        }
        Ok(out)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        plan_err!("{}() derives its type from the model; use return_field_from_args", self.name)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let name = match args.scalar_arguments.first() {
            Some(Some(ScalarValue::Utf8(Some(n)) | ScalarValue::LargeUtf8(Some(n)) | ScalarValue::Utf8View(Some(n)))) => n.clone(),
            _ => {
                return plan_err!(
                    "{}(): the first argument must be a constant model name (a string literal), e.g. {}('fraud', amount, age)",
                    self.name,
                    self.name
                )
            }
        };
        let dir = Some(self.options.model_dir.as_str()).filter(|d| !d.is_empty());
        let loaded = self.registry.resolve(&name, dir).map_err(|e| plan_datafusion_err!("{}(): {e}", self.name))?;
        let model = &loaded.model;
        let given = args.arg_fields.len() - 1;
        if given != model.num_features() {
            return plan_err!(
                "{}(): model {name:?} takes {} features in this order: {}; got {given} argument(s) after the model name",
                self.name,
                model.num_features(),
                self.usage(model)
            );
        }
        let mut metadata = HashMap::from([(META_URL.to_string(), loaded.url.clone()), (META_VERSION.to_string(), loaded.version.clone())]);
        if !self.options.background.is_empty() {
            if self.kind == OutputKind::Interactions {
                return plan_err!("{}(): interaction values are path-dependent only; RESET shap.background first", self.name);
            }
            let background = self.registry.background(&self.options.background).map_err(|e| plan_datafusion_err!("{}(): {e}", self.name))?;
            metadata.insert(META_BACKGROUND_URL.to_string(), background.url.clone());
            metadata.insert(META_BACKGROUND_VERSION.to_string(), background.version.clone());
        }
        Ok(Arc::new(Field::new(self.name, self.output_type(model), false).with_metadata(metadata)))
    }

    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        let options = config.extensions.get::<ShapOptions>()?.clone();
        if same_options(&options, &self.options) {
            return None;
        }
        match ShapUdf::new(self.name, self.kind, self.registry.clone(), options) {
            Ok(udf) => Some(ScalarUDF::new_from_impl(udf)),
            Err(e) => {
                // SET has no way to report this; keep the previous settings and say why.
                tracing::warn!("ignoring shap.* settings: {e}");
                None
            }
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let meta = args.return_field.metadata();
        let (url, version) = match (meta.get(META_URL), meta.get(META_VERSION)) {
            (Some(u), Some(v)) => (u, v),
            _ => return Err(exec_datafusion_err!("{}(): the plan carries no model version (planned without return_field_from_args)", self.name)),
        };
        let loaded = self
            .registry
            .get_version(url, version)
            .ok_or_else(|| exec_datafusion_err!("{}(): model {url} changed twice while this query ran; run it again", self.name))?;
        let model = &loaded.model;
        let rows = args.number_rows;
        let columns: Vec<ArrayRef> =
            args.args[1..].iter().map(|c| c.to_array(rows)).collect::<DfResult<_>>()?;
        let background = match (meta.get(META_BACKGROUND_URL), meta.get(META_BACKGROUND_VERSION)) {
            (Some(u), Some(v)) => Some(
                self.registry
                    .get_background_version(u, v)
                    .ok_or_else(|| exec_datafusion_err!("{}(): background {u} changed twice while this query ran; run it again", self.name))?,
            ),
            _ => None,
        };
        if !self.options.workers.is_empty() {
            return self.invoke_on_workers(&loaded, background.as_deref(), columns).map(ColumnarValue::Array);
        }
        let explainer = loaded.engine(self.algorithm, self.device, &self.engine_options(), background.as_deref()).map_err(df_err)?;
        let output = self.pool.install(|| -> crate::Result<ArrayRef> {
            let block = block_from_columns(&columns, &model.feature_names, model)?;
            let columns = explain_block(explainer.as_ref(), &block, self.kind)?;
            self.as_result(model, columns)
        });
        Ok(ColumnarValue::Array(output.map_err(df_err)?))
    }
}

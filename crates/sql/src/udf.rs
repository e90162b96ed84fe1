//! The scalar UDFs. Planning resolves the (constant) model name, checks the arguments against
//! the model's features and fixes the output type; the resolved model's URL and version (and
//! the background's, with `shap.background` set) travel in the return field's metadata so
//! execution uses exactly the versions that were planned.
//!
//! The optimizer's expression simplification also pins each call: `simplify` swaps the
//! session's function for one bound to the model (and background) it resolved, so the plan
//! itself holds the versions. A pinned call is what crosses machines: [`PinnedCall`] is its
//! serialised form (the Ballista codec sends it to executors and the workers receive it, and
//! both load the same model and refuse any other version).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::options::ShapOptions;
use crate::call::{PinnedCall, ResolvedCall};
use crate::errors::to_datafusion;
use crate::explainer_cache::explainer_for;
use crate::registry::{LoadedBackground, LoadedModel, ModelRegistry};
use arrow::array::{ArrayRef, StructArray};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{exec_datafusion_err, plan_err, DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use shapfusion_core::features::{check_feature_type, is_numeric, is_text};
use shapfusion_core::model::Model;
use shapfusion_core::ComputeSettings;
use shapfusion_core::{output_fields, OutputKind};

const META_URL: &str = "shapfusion.model.url";
const META_VERSION: &str = "shapfusion.model.version";
const META_BACKGROUND_URL: &str = "shapfusion.background.url";
const META_BACKGROUND_VERSION: &str = "shapfusion.background.version";

/// `shap`, `shap_interactions` or `predict`, bound to a model registry and the session's
/// `shap.*` options; after simplification, also to the model version it was planned with.
#[derive(Debug, Clone)]
pub struct ShapUdf {
    name: &'static str,
    kind: OutputKind,
    registry: Arc<ModelRegistry>,
    options: ShapOptions,
    /// The compute settings of `options`, parsed once.
    settings: ComputeSettings,
    signature: Signature,
    pinned: Option<Pinned>,
}

/// The model (and background) one call was planned with.
#[derive(Debug, Clone)]
struct Pinned {
    model: Arc<LoadedModel>,
    background: Option<Arc<LoadedBackground>>,
}

impl ShapUdf {
    /// A UDF named `name` computing `kind`.
    pub fn new(name: &'static str, kind: OutputKind, registry: Arc<ModelRegistry>, options: ShapOptions) -> shapfusion_core::Result<Self> {
        let settings = options.compute_settings()?;
        Ok(ShapUdf { name, kind, registry, options, settings, signature: Signature::user_defined(Volatility::Immutable), pinned: None })
    }

    /// This function bound to the versions `model_name` (and `shap.background`) resolve to now.
    fn pin(&self, model_name: &str) -> DfResult<ShapUdf> {
        let (model, background) = self.resolve(model_name)?;
        let mut pinned = self.clone();
        pinned.pinned = Some(Pinned { model, background });
        Ok(pinned)
    }

    /// The model `name` and the session's background, as the registry resolves them now.
    fn resolve(&self, name: &str) -> DfResult<(Arc<LoadedModel>, Option<Arc<LoadedBackground>>)> {
        let dir = Some(self.options.model_dir.as_str()).filter(|d| !d.is_empty());
        let model = self.registry.resolve(name, dir).map_err(|e| to_datafusion(e.context(format!("{}()", self.name))))?;
        if self.options.background.is_empty() {
            return Ok((model, None));
        }
        let background = self.registry.background(&self.options.background).map_err(|e| to_datafusion(e.context(format!("{}()", self.name))))?;
        Ok((model, Some(background)))
    }

    /// The pinned call in serialised form; `None` for a function not yet bound to a version.
    pub fn planned_call(&self) -> Option<PinnedCall> {
        let pinned = self.pinned.as_ref()?;
        Some(self.call_for(&pinned.model, pinned.background.as_deref()))
    }

    /// The call of this function on `model` (and `background`) with this session's settings.
    fn call_for(&self, model: &LoadedModel, background: Option<&LoadedBackground>) -> PinnedCall {
        // The store's URL, so a worker or executor loads the same object the planner did.
        PinnedCall::new(model.url.clone(), self.kind)
            .pinned(Some(model.content_hash.clone()))
            .with_background(background.map(|b| (b.name.clone(), b.content_hash.clone())))
            .with_settings(self.settings)
    }

    /// Rebuilds a pinned call on another machine (`here` names it in errors): the call's model
    /// and background from `registry` (a server's registry serves only its registered models and
    /// its model directory `model_dir`), refused when their content differs from what was
    /// planned, and the caller's settings, refused when this machine cannot honour them.
    pub fn from_planned_call(
        call: &PinnedCall,
        registry: Arc<ModelRegistry>,
        model_dir: Option<&str>,
        here: &str,
    ) -> shapfusion_core::Result<ShapUdf> {
        let settings = call.settings.unwrap_or_default();
        let settings = call.settings_on(&settings, here)?;
        let ResolvedCall { model, background } = call.resolve(&registry, model_dir, here)?;
        let mut options = ShapOptions::default();
        options.background = background.as_ref().map(|b| b.name.clone()).unwrap_or_default();
        let mut udf = ShapUdf::new(super::function_for(call.output), call.output, registry, options)?;
        udf.settings = settings;
        udf.pinned = Some(Pinned { model, background });
        Ok(udf)
    }

    fn usage(&self, model: &Model) -> String {
        format!("{}('<model>', {})", self.name, model.feature_names().join(", "))
    }

    /// The SQL result type: the batch step's output fields, as a struct for `shap`.
    fn output_type(&self, model: &Model) -> DataType {
        let fields = output_fields(model, self.kind);
        match self.kind {
            OutputKind::Shap => DataType::Struct(fields.into()),
            OutputKind::Interactions | OutputKind::Margin => fields[0].data_type().clone(),
        }
    }

    /// The batch step's output columns as this function's one result column.
    fn as_result(&self, model: &Model, columns: Vec<ArrayRef>) -> shapfusion_core::Result<ArrayRef> {
        let mismatch = |detail: String| shapfusion_core::Error::Internal(format!("{}(): the output does not match the model: {detail}", self.name));
        Ok(match self.kind {
            OutputKind::Shap => {
                Arc::new(StructArray::try_new(output_fields(model, self.kind).into(), columns, None).map_err(|e| mismatch(e.to_string()))?)
            }
            OutputKind::Interactions | OutputKind::Margin => columns.into_iter().next().ok_or_else(|| mismatch("no columns".into()))?,
        })
    }
}

impl ShapUdf {
    /// Computes on the workers of `shap.workers`; they load the model from the URL this session
    /// resolved, so they must be able to read it (a shared object store or the same path
    /// mounted), and compute with this session's settings or refuse them.
    fn invoke_on_workers(&self, loaded: &LoadedModel, background: Option<&LoadedBackground>, columns: Vec<ArrayRef>) -> DfResult<ArrayRef> {
        use arrow::array::RecordBatch;
        use arrow::datatypes::Schema;
        let model = &loaded.model;
        let fields: Vec<Field> = model.feature_names().iter().zip(&columns).map(|(n, c)| Field::new(n, c.data_type().clone(), true)).collect();
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        let call = self.call_for(loaded, background);
        let out =
            super::remote::remote().map_err(df_err)?.compute(&self.options.workers, &self.options.worker_token_file, &call, batch).map_err(df_err)?;
        self.as_result(model, out.columns().to_vec()).map_err(df_err)
    }
}

impl PartialEq for ShapUdf {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && Arc::ptr_eq(&self.registry, &other.registry)
            && self.settings == other.settings
            && same_options(&self.options, &other.options)
            && self.pinned_versions() == other.pinned_versions()
    }
}

impl Eq for ShapUdf {}

impl Hash for ShapUdf {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.settings.hash(state);
        self.options.model_dir.hash(state);
        self.options.workers.hash(state);
        self.options.background.hash(state);
        self.pinned_versions().hash(state);
    }
}

/// A pinned model's URL and version, and its background's.
type PinnedVersions<'a> = (&'a str, &'a str, Option<(&'a str, &'a str)>);

impl ShapUdf {
    /// The pinned model's and background's URL and version: what tells two pinned calls apart.
    fn pinned_versions(&self) -> Option<PinnedVersions<'_>> {
        self.pinned
            .as_ref()
            .map(|p| (p.model.url.as_str(), p.model.version.as_str(), p.background.as_ref().map(|b| (b.url.as_str(), b.version.as_str()))))
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
        && a.index == b.index
}

impl ShapUdf {
    /// The model and background versions recorded in the return field at planning time.
    fn planned_versions(&self, return_field: &Field) -> DfResult<(Arc<LoadedModel>, Option<Arc<LoadedBackground>>)> {
        let meta = return_field.metadata();
        let (url, version) = match (meta.get(META_URL), meta.get(META_VERSION)) {
            (Some(u), Some(v)) => (u, v),
            _ => return Err(exec_datafusion_err!("{}(): the plan carries no model version (planned without return_field_from_args)", self.name)),
        };
        let loaded = self
            .registry
            .get_version(url, version)
            .ok_or_else(|| exec_datafusion_err!("{}(): model {url} changed twice while this query ran; run it again", self.name))?;
        let background = match (meta.get(META_BACKGROUND_URL), meta.get(META_BACKGROUND_VERSION)) {
            (Some(u), Some(v)) => Some(
                self.registry
                    .get_background_version(u, v)
                    .ok_or_else(|| exec_datafusion_err!("{}(): background {u} changed twice while this query ran; run it again", self.name))?,
            ),
            _ => None,
        };
        Ok((loaded, background))
    }
}

fn df_err(e: shapfusion_core::Error) -> DataFusionError {
    crate::to_datafusion(e)
}

impl ScalarUDFImpl for ShapUdf {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn aliases(&self) -> &[String] {
        // `margin` was called `predict` before; queries written then keep working.
        static PREDICT: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| vec!["predict".to_string()]);
        match self.kind {
            OutputKind::Margin => &PREDICT,
            _ => &[],
        }
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
            if is_text(t) {
                // Category names of a categorical feature: mapped through the names the model
                // stores (checked against the model in `return_field_from_args`).
                out.push(DataType::Utf8);
                continue;
            }
            if !is_numeric(t) {
                return plan_err!(
                    "{}(): argument {} has type {t}; model features must be numeric (integer, float or boolean), or strings for a categorical feature whose model stores category names",
                    self.name,
                    i + 1
                );
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
        let (loaded, background) = match &self.pinned {
            Some(p) => (p.model.clone(), p.background.clone()),
            None => self.resolve(&name)?,
        };
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
        for (j, field) in args.arg_fields[1..].iter().enumerate() {
            check_feature_type(model, j, field.data_type())
                .map_err(|e| DataFusionError::Plan(format!("{}(): argument {}: {e}", self.name, j + 2)))?;
        }
        let mut metadata = HashMap::from([(META_URL.to_string(), loaded.url.clone()), (META_VERSION.to_string(), loaded.version.clone())]);
        if let Some(background) = background {
            metadata.insert(META_BACKGROUND_URL.to_string(), background.url.clone());
            metadata.insert(META_BACKGROUND_VERSION.to_string(), background.version.clone());
        }
        Ok(Arc::new(Field::new(self.name, self.output_type(model), false).with_metadata(metadata)))
    }

    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        // Pin once, to the versions resolved now; a non-constant name is left for
        // `return_field_from_args` to reject with its message.
        if self.pinned.is_some() {
            return Ok(ExprSimplifyResult::Original(args));
        }
        let name = match args.first() {
            Some(Expr::Literal(ScalarValue::Utf8(Some(n)) | ScalarValue::LargeUtf8(Some(n)) | ScalarValue::Utf8View(Some(n)), _)) => n.clone(),
            _ => return Ok(ExprSimplifyResult::Original(args)),
        };
        let pinned = ScalarUDF::new_from_impl(self.pin(&name)?);
        Ok(ExprSimplifyResult::Simplified(Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(pinned), args))))
    }

    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        if self.pinned.is_some() {
            // A planned call keeps the options it was planned with.
            return None;
        }
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
        let (loaded, background) = match &self.pinned {
            Some(p) => (p.model.clone(), p.background.clone()),
            None => self.planned_versions(&args.return_field)?,
        };
        let model = &loaded.model;
        let rows = args.number_rows;
        let columns: Vec<ArrayRef> = args.args[1..].iter().map(|c| c.to_array(rows)).collect::<DfResult<_>>()?;
        if !self.options.workers.is_empty() {
            return self.invoke_on_workers(&loaded, background.as_deref(), columns).map(ColumnarValue::Array);
        }
        let explainer = explainer_for(&loaded, &self.settings, background.as_deref()).map_err(df_err)?;
        let output = explainer.output_columns_of(&columns, self.kind).and_then(|columns| self.as_result(model, columns));
        Ok(ColumnarValue::Array(output.map_err(df_err)?))
    }
}

//! How a pinned shap call crosses from the scheduler to the executors: Ballista's physical
//! codec, carrying each `shap`/`shap_interactions`/`margin` call as a [`PinnedCall`], the
//! same form the Flight workers receive.
//!
//! DataFusion serialises a scalar function by name and type only (the return field's metadata,
//! where a local plan records the model version, does not travel), so the codec writes the
//! planned model and background versions into the function's definition bytes, and the
//! executor rebuilds the call from them, refusing a model or background whose content differs.

use std::sync::Arc;

use ballista_core::serde::BallistaPhysicalExtensionCodec;
use datafusion::common::{exec_datafusion_err, plan_err, DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::ScalarUDF;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use shapfusion_sql::call::PinnedCall;
use shapfusion_sql::registry::ModelRegistry;
use shapfusion_sql::ShapUdf;

/// Marks a shap call's definition bytes (followed by the [`PinnedCall`] as JSON). An executor
/// of another build sees another tag and says so rather than misreading the call.
const PLANNED_CALL_TAG: &[u8] = b"shapfusion.pinned-call.v2:";

/// Ballista's physical codec with pinned shap calls.
#[derive(Debug)]
pub struct ShapPhysicalCodec {
    inner: BallistaPhysicalExtensionCodec,
    registry: Arc<ModelRegistry>,
    model_dir: Option<String>,
    /// This process in errors: "scheduler", "executor 3f2a… (10.0.0.7:50051)".
    here: String,
}

impl ShapPhysicalCodec {
    /// A codec that rebuilds calls with the models of `registry` (and `model_dir`), naming
    /// `here` in its errors.
    pub fn new(registry: Arc<ModelRegistry>, model_dir: Option<String>, here: impl Into<String>) -> Self {
        ShapPhysicalCodec { inner: BallistaPhysicalExtensionCodec::default(), registry, model_dir, here: here.into() }
    }
}

/// The definition bytes of a pinned call.
pub fn encode_call(call: &PinnedCall) -> Vec<u8> {
    let mut buf = PLANNED_CALL_TAG.to_vec();
    buf.extend(call.to_json());
    buf
}

/// The pinned call in definition bytes, `None` when they are not a shap call's.
pub fn decode_call(buf: &[u8]) -> Option<DfResult<PinnedCall>> {
    if let Some(other) = buf.strip_prefix(b"shapfusion.").filter(|_| !buf.starts_with(PLANNED_CALL_TAG)) {
        let tag = String::from_utf8_lossy(&other[..other.iter().position(|&b| b == b':').unwrap_or(other.len()).min(40)]).into_owned();
        return Some(Err(exec_datafusion_err!(
            "a shap call in the plan is in form {tag:?}, which this build does not read (it reads {:?}); run the same shapfusion version on the scheduler and the executors",
            String::from_utf8_lossy(&PLANNED_CALL_TAG[b"shapfusion.".len()..PLANNED_CALL_TAG.len() - 1])
        )));
    }
    let json = buf.strip_prefix(PLANNED_CALL_TAG)?;
    Some(PinnedCall::from_json(json).map_err(|e| exec_datafusion_err!("a shap call in the plan is malformed: {e}")))
}

impl PhysicalExtensionCodec for ShapPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.inner.try_decode(buf, inputs, ctx, proto_converter)
    }

    fn try_encode(&self, node: Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>, proto_converter: &dyn PhysicalProtoConverterExtension) -> DfResult<()> {
        self.inner.try_encode(node, buf, proto_converter)
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> DfResult<Arc<ScalarUDF>> {
        match decode_call(buf) {
            Some(call) => {
                let udf = ShapUdf::from_planned_call(&call?, self.registry.clone(), self.model_dir.as_deref(), &self.here)
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                Ok(Arc::new(ScalarUDF::new_from_impl(udf)))
            }
            None => self.inner.try_decode_udf(name, buf),
        }
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> DfResult<()> {
        let Some(udf) = node.inner().downcast_ref::<ShapUdf>() else {
            return self.inner.try_encode_udf(node, buf);
        };
        match udf.planned_call() {
            Some(call) => {
                buf.extend(encode_call(&call));
                Ok(())
            }
            None => plan_err!(
                "{}(): the call reached the executors without a model version (the optimizer's simplify_expressions rule pins it; is it disabled?)",
                node.name()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_calls_round_trip_and_other_bytes_are_not_ours() {
        let call = PinnedCall::new("file:///m/fraud.json", shapfusion_core::OutputKind::Shap)
            .pinned(Some("blake3:ab".into()))
            .with_background(Some(("recent".into(), "blake3:cd".into())))
            .with_settings(shapfusion_core::ComputeSettings::default());
        assert_eq!(decode_call(&encode_call(&call)).unwrap().unwrap(), call);
        assert!(decode_call(b"").is_none());
        assert!(decode_call(b"{\"function\":\"shap\"}").is_none());
        let e = decode_call(b"shapfusion.pinned-call.v2:{").unwrap().unwrap_err().to_string();
        assert!(e.contains("malformed"), "{e}");
        let e = decode_call(b"shapfusion.planned-call.v1:{}").unwrap().unwrap_err().to_string();
        assert!(e.contains("planned-call.v1") && e.contains("same shapfusion version"), "{e}");
    }
}

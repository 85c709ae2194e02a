//! What a scaler's annotations say, where more than one part of the controller reads it (the
//! sync and the conflict check both ask whether a scaler is a dry run). It imports nothing of the
//! controller, so any part may import it.

use kube::ResourceExt;

use crate::api::LLMScaler;
use crate::names::DRY_RUN_ANNOTATION;

/// Whether the scaler only observes (evaluates and reports, writes nothing).
pub(super) fn is_dry_run(scaler: &LLMScaler) -> bool {
    scaler
        .annotations()
        .get(DRY_RUN_ANNOTATION)
        .is_some_and(|v| v == "true")
}

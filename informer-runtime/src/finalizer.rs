//! Finalizers for a reconcile: [`finalizer`] adds the controller's finalizer before the first
//! apply, runs the cleanup once the object is being deleted, then removes the finalizer. The
//! decisions and the patches are informer-core's
//! ([`informer_core::controller::finalizer`]); this module performs them.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

pub use informer_core::controller::finalizer::FinalizerNameError;
use informer_core::controller::finalizer::{self as core_fin, Decision};
use informer_core::object::{MetadataError, Object};
use informer_http::write::{Patch, PatchParams, WriteError};
use informer_http::{Api, Backend};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::controller::Action;

/// What the reconcile given to [`finalizer`] is asked to do.
#[derive(Debug)]
pub enum FinalizerEvent<K> {
    /// The object is not being deleted and carries the finalizer: reconcile it toward its
    /// desired state. Must be idempotent, as any reconcile.
    Apply(Arc<K>),
    /// The object is being deleted and still carries the finalizer: release what the
    /// controller holds for it. Must be idempotent: a cleanup that succeeded may run again if
    /// removing the finalizer then fails (a conflict, the process stopping).
    ///
    /// - `Ok(Action::Done)`: cleaned up; the finalizer is removed (the object may then go).
    /// - `Ok(Action::RequeueAfter(d))`: not finished yet (an external resource still being
    ///   deleted, say); the finalizer stays and the key comes back after `d`, without the
    ///   backoff and the warning an error brings.
    /// - `Err(e)`: the cleanup failed; the finalizer stays, [`FinalizerError::Cleanup`].
    Cleanup(Arc<K>),
}

impl<K> FinalizerEvent<K> {
    /// The object, whichever the event.
    pub fn object(&self) -> &Arc<K> {
        match self {
            FinalizerEvent::Apply(o) | FinalizerEvent::Cleanup(o) => o,
        }
    }
}

/// Which finalizer patch failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FinalizerPatch {
    /// Adding the finalizer to an object not being deleted.
    Add,
    /// Removing it after a successful cleanup.
    Remove,
}

impl fmt::Display for FinalizerPatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FinalizerPatch::Add => "adding",
            FinalizerPatch::Remove => "removing",
        })
    }
}

/// Why [`finalizer`] did not finish. Every variant but [`Apply`](Self::Apply) leaves the
/// finalizer where it was; a reconcile returning this error is requeued with backoff by
/// [`Workers`](crate::Workers), and the next attempt starts over from the object's then
/// state.
#[derive(Debug)]
#[non_exhaustive]
pub enum FinalizerError<E> {
    /// The finalizer's name is not a qualified name with a domain prefix.
    InvalidName(FinalizerNameError),
    /// The object's `deletionTimestamp` or `finalizers` is not what Kubernetes writes.
    Metadata(MetadataError),
    /// The apply failed (after the finalizer was added, if it was missing).
    Apply(E),
    /// The cleanup failed; the finalizer stays on the object.
    Cleanup(E),
    /// The object changed between the read the decision was made on and the patch: the
    /// finalizers were changed by someone else (or, adding to an empty list, anything was),
    /// or the object started being deleted. The server refused the patch, so nothing was
    /// overwritten; retry with the current object.
    Conflict {
        /// The patch refused.
        patch: FinalizerPatch,
        /// The server's answer.
        source: WriteError,
    },
    /// The patch failed for another reason (permissions, transport, ...).
    Patch {
        /// The patch that failed.
        patch: FinalizerPatch,
        /// Why.
        source: WriteError,
    },
}

impl<E> FinalizerError<E> {
    /// True for [`Conflict`](Self::Conflict): a lost race, retried on the current object.
    pub fn is_conflict(&self) -> bool {
        matches!(self, FinalizerError::Conflict { .. })
    }
}

impl<E: fmt::Display> fmt::Display for FinalizerError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FinalizerError::InvalidName(e) => write!(f, "invalid finalizer name: {e}"),
            FinalizerError::Metadata(e) => write!(f, "unreadable metadata: {e}"),
            FinalizerError::Apply(e) => write!(f, "apply failed: {e}"),
            FinalizerError::Cleanup(e) => write!(f, "cleanup failed (finalizer kept): {e}"),
            // A failed JSON patch `test` comes back as a bare 422 whose message says only
            // "invalid": say what it means here.
            FinalizerError::Conflict {
                patch,
                source: WriteError::Invalid { causes, .. },
            } if causes.is_empty() => write!(
                f,
                "{patch} the finalizer: the object changed since it was read (the patch's test \
                 of the finalizers failed: 422)"
            ),
            FinalizerError::Conflict { patch, source } => write!(
                f,
                "{patch} the finalizer: the object changed since it was read: {source}"
            ),
            FinalizerError::Patch { patch, source } => {
                write!(f, "{patch} the finalizer failed: {source}")
            }
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for FinalizerError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FinalizerError::InvalidName(e) => Some(e),
            FinalizerError::Metadata(e) => Some(e),
            FinalizerError::Apply(e) | FinalizerError::Cleanup(e) => Some(e),
            FinalizerError::Conflict { source, .. } | FinalizerError::Patch { source, .. } => {
                Some(source)
            }
        }
    }
}

/// Runs `reconcile` for `obj` under the finalizer `name` (a qualified name with a domain
/// prefix, `example.com/cleanup`), written through `api` (in the object's own namespace,
/// whatever `api`'s):
///
/// - not being deleted, finalizer missing: adds it, then calls
///   [`Apply`](FinalizerEvent::Apply) with the object the server returned. Applying in the
///   same call, rather than waiting for the watch event of the add, keeps a controller that
///   filters its events (on `generation`, say: a finalizer does not change it) from never
///   applying;
/// - not being deleted, finalizer present: [`Apply`](FinalizerEvent::Apply);
/// - being deleted, finalizer present: [`Cleanup`](FinalizerEvent::Cleanup); when it returns
///   `Ok(Action::Done)`, removes the finalizer (only ours);
/// - being deleted, finalizer gone: nothing, `Ok(Action::Done)`.
///
/// Both patches are JSON patches testing what the decision was made on (informer-core's
/// `add_patch` and `remove_patch` in `informer_core::controller::finalizer`): another
/// controller's finalizer is never overwritten, and a change in between is a
/// [`FinalizerError::Conflict`]. An object gone meanwhile (404) is not an error: there is
/// nothing left to apply to, or to hold. Any step may be repeated after a crash or a conflict
/// and ends in the same place.
///
/// The result is the reconcile's [`Action`] (or `Done`), for [`Workers`](crate::Workers).
pub async fn finalizer<K, B, E, F, Fut>(
    api: &Api<K, B>,
    name: &str,
    obj: Arc<K>,
    reconcile: F,
) -> Result<Action, FinalizerError<E>>
where
    K: Object + Serialize + DeserializeOwned,
    B: Backend,
    F: FnOnce(FinalizerEvent<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
{
    core_fin::validate_name(name).map_err(FinalizerError::InvalidName)?;
    let decision = core_fin::decide(&*obj, name).map_err(FinalizerError::Metadata)?;
    // The patch goes with the decision, both made on the same read of the finalizers.
    let (decision, ops) = {
        let finalizers = obj.finalizers().map_err(FinalizerError::Metadata)?;
        let ops = match decision {
            Decision::AddFinalizer => {
                core_fin::add_patch(&finalizers, obj.resource_version(), name)
            }
            Decision::Cleanup => core_fin::remove_patch(&finalizers, name),
            Decision::Apply | Decision::Nothing => None,
        };
        (decision, ops)
    };
    let scoped;
    let api = if api.namespace() == obj.namespace() {
        api
    } else {
        scoped = Api::new(
            api.client().clone(),
            api.resource().clone(),
            obj.namespace(),
        );
        &scoped
    };
    match (decision, ops) {
        (Decision::AddFinalizer, Some(ops)) => {
            let Some(added) = send(api, obj.name(), &ops, FinalizerPatch::Add).await? else {
                return Ok(Action::Done);
            };
            reconcile(FinalizerEvent::Apply(Arc::new(added)))
                .await
                .map_err(FinalizerError::Apply)
        }
        (Decision::Cleanup, Some(ops)) => {
            let action = reconcile(FinalizerEvent::Cleanup(obj.clone()))
                .await
                .map_err(FinalizerError::Cleanup)?;
            if action == Action::Done {
                send(api, obj.name(), &ops, FinalizerPatch::Remove).await?;
            }
            Ok(action)
        }
        // `decide` and the patches agree: adding or removing always has a patch.
        (Decision::Nothing | Decision::Cleanup, _) => Ok(Action::Done),
        (Decision::Apply | Decision::AddFinalizer, _) => reconcile(FinalizerEvent::Apply(obj))
            .await
            .map_err(FinalizerError::Apply),
    }
}

/// Sends one finalizer patch: the patched object, `None` if the object is gone.
async fn send<K, B, E>(
    api: &Api<K, B>,
    name: &str,
    ops: &serde_json::Value,
    patch: FinalizerPatch,
) -> Result<Option<K>, FinalizerError<E>>
where
    K: Serialize + DeserializeOwned,
    B: Backend,
{
    match api
        .patch(name, &Patch::Json(ops), &PatchParams::default())
        .await
    {
        Ok(obj) => Ok(Some(obj)),
        Err(WriteError::NotFound(_)) => Ok(None),
        Err(source) if lost_race(&source) => Err(FinalizerError::Conflict { patch, source }),
        Err(source) => Err(FinalizerError::Patch { patch, source }),
    }
}

/// Whether the server refused a finalizer patch because the object changed since it was read:
///
/// - a 409;
/// - a failed `test` operation. kube-apiserver answers it with a bare 422 `Invalid`: no causes,
///   its generic message, the JSON patch library's error dropped. Our patches are well-formed
///   and their other operations apply wherever their tests pass, so a bare 422 is a failed
///   test; a validation error always names its fields in causes;
/// - a finalizer added to an object that started being deleted meanwhile: 422 with the cause
///   `metadata.finalizers` forbidden ("no new finalizers can be added if the object is being
///   deleted").
fn lost_race(e: &WriteError) -> bool {
    match e {
        WriteError::Conflict { .. } => true,
        WriteError::Invalid { causes, .. } => {
            causes.is_empty()
                || causes.iter().any(|c| {
                    c.field.as_deref() == Some("metadata.finalizers")
                        && c.reason.as_deref() == Some("FieldValueForbidden")
                })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_patch_test_says_what_it_means() {
        let bare = FinalizerError::<std::io::Error>::Conflict {
            patch: FinalizerPatch::Add,
            source: WriteError::Invalid {
                causes: Vec::new(),
                status: Default::default(),
            },
        };
        let text = bare.to_string();
        assert!(text.contains("test of the finalizers failed"), "{text}");
        assert!(bare.is_conflict());
    }
}

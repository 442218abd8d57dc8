//! Errors.

use std::fmt;

use informer_core::cache::indexer::IndexError;
use informer_core::informer::HandlerId;
use informer_core::protocol::Failure;

use crate::runtime::SpawnError;

/// Why an informer operation failed. The errors of one informer's operations name it
/// ([`Informer::name`](crate::Informer::name)), and so does their `Display`.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The runtime refused to spawn the driver or a request task.
    Spawn(SpawnError),
    /// A handler's worker thread could not be started.
    Thread(std::io::Error),
    /// Adding an index failed (the name is taken).
    Index(IndexError),
    /// The informer has been shut down.
    Stopped {
        /// Its name.
        informer: String,
    },
    /// A wait for cache sync did not finish in time.
    Timeout {
        /// The name of the informer waited for (the first one not synced, for a wait on
        /// several), if known.
        informer: Option<String>,
        /// The last list or watch failure of the informer waited for, if it had one: usually
        /// why it could not sync (`403 ... pods is forbidden ...`, a refused connection, ...).
        /// Boxed: an error stays small on the success path.
        last_failure: Option<Box<Failure>>,
    },
    /// A handler id (or registration) of another informer was given: nothing was done.
    ForeignHandler {
        /// The informer asked.
        informer: String,
        /// The id given.
        handler: HandlerId,
    },
    /// [`wait_for_resource_version`](crate::Informer::wait_for_resource_version) reached its
    /// deadline before the cache readers see held the resourceVersion.
    ResourceVersionTimeout {
        /// The informer waited on.
        informer: String,
        /// The resourceVersion waited for.
        wanted: String,
        /// The resourceVersion readers saw at the deadline (empty before the first list).
        seen: String,
    },
    /// A resourceVersion that is not an unsigned decimal integer was to be compared (the one
    /// waited for, or the cache's): client-go 1.36 compares resourceVersions as numbers
    /// (KEP-5647), which Kubernetes API servers guarantee.
    ResourceVersionNotNumeric {
        /// The informer waited on.
        informer: String,
        /// The resourceVersion that is not a number.
        resource_version: String,
    },
    /// The informer's object type holds one kind and the resource is of another (a
    /// `K8s<Pod>` informer of ConfigMaps, say): it would cache empty objects.
    KindMismatch {
        /// The resource (`plural` or `group/plural`).
        resource: String,
        /// The resource's kind.
        resource_kind: String,
        /// The kind the type holds.
        type_kind: &'static str,
    },
    /// A shared informer factory already holds an informer for this resource, namespace and
    /// selectors with another object type.
    TypeMismatch {
        /// What the informer watches (`plural` or `group/plural`).
        resource: String,
    },
    /// A snapshot could not be taken or encoded.
    Snapshot(informer_core::snapshot::SnapshotError),
    /// The snapshot file could not be written.
    SnapshotIo(std::io::Error),
    /// The informer has no snapshot file (see `InformerBuilder::snapshot`).
    NoSnapshotFile,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Spawn(e) => write!(f, "{e}"),
            Error::Thread(e) => write!(f, "cannot start a handler thread: {e}"),
            Error::Index(e) => write!(f, "{e}"),
            Error::Stopped { informer } => write!(f, "informer {informer}: it has been shut down"),
            Error::Timeout {
                informer,
                last_failure,
            } => {
                if let Some(name) = informer {
                    write!(f, "informer {name}: ")?;
                }
                f.write_str("timed out waiting for the cache to sync")?;
                match last_failure {
                    Some(cause) => write!(f, "; last list/watch failure: {cause}"),
                    None => Ok(()),
                }
            }
            Error::KindMismatch {
                resource,
                resource_kind,
                type_kind,
            } => write!(
                f,
                "the informer's type holds {type_kind} objects, but {resource} holds {resource_kind}"
            ),
            Error::TypeMismatch { resource } => write!(
                f,
                "the factory already has an informer for {resource} with another object type"
            ),
            Error::Snapshot(e) => write!(f, "{e}"),
            Error::SnapshotIo(e) => write!(f, "cannot write the snapshot file: {e}"),
            Error::NoSnapshotFile => f.write_str("the informer has no snapshot file"),
            Error::ForeignHandler { informer, handler } => write!(
                f,
                "informer {informer}: handler {handler} belongs to another informer; nothing removed"
            ),
            Error::ResourceVersionTimeout {
                informer,
                wanted,
                seen,
            } => write!(
                f,
                "informer {informer}: timed out waiting for resourceVersion {wanted:?} (the cache is at {seen:?})"
            ),
            Error::ResourceVersionNotNumeric {
                informer,
                resource_version,
            } => write!(
                f,
                "informer {informer}: resourceVersion {resource_version:?} is not an unsigned integer and cannot be compared"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Spawn(e) => Some(e),
            Error::Thread(e) => Some(e),
            Error::Index(e) => Some(e),
            Error::Timeout {
                last_failure: Some(cause),
                ..
            } => Some(&**cause),
            Error::Snapshot(e) => Some(e),
            Error::SnapshotIo(e) => Some(e),
            _ => None,
        }
    }
}

impl From<SpawnError> for Error {
    fn from(e: SpawnError) -> Self {
        Error::Spawn(e)
    }
}

impl From<IndexError> for Error {
    fn from(e: IndexError) -> Self {
        Error::Index(e)
    }
}

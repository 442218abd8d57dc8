//! Errors.

use std::fmt;

use informer_core::IndexError;

use crate::runtime::SpawnError;

/// Why an informer operation failed.
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
    Stopped,
    /// A wait for cache sync did not finish in time.
    Timeout,
    /// A shared informer factory already holds an informer for this resource, namespace and
    /// selectors with another object type.
    TypeMismatch {
        /// What the informer watches (`plural` or `group/plural`).
        resource: String,
    },
    /// A snapshot could not be taken or encoded.
    Snapshot(informer_core::SnapshotError),
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
            Error::Stopped => f.write_str("the informer has been shut down"),
            Error::Timeout => f.write_str("timed out waiting for the cache to sync"),
            Error::TypeMismatch { resource } => write!(
                f,
                "the factory already has an informer for {resource} with another object type"
            ),
            Error::Snapshot(e) => write!(f, "{e}"),
            Error::SnapshotIo(e) => write!(f, "cannot write the snapshot file: {e}"),
            Error::NoSnapshotFile => f.write_str("the informer has no snapshot file"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Spawn(e) => Some(e),
            Error::Thread(e) => Some(e),
            Error::Index(e) => Some(e),
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

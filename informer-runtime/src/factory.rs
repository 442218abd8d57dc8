//! One informer per resource, namespace and selectors, shared by every handler
//! (client-go `SharedInformerFactory`).

use std::any::{Any, TypeId};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use informer_core::snapshot::SnapshotCodec;
use informer_http::{Backend, Client, Resource};

use crate::builder::InformerBuilder;
use crate::error::Error;
use crate::informer::Informer;
use crate::runtime::{BoxFuture, Runtime};
use crate::sync::{CacheSync, wait_for_cache_sync};

/// Which objects of a resource an informer covers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct InformerOptions {
    /// Only this namespace (`None`: the factory's namespace, else all).
    pub namespace: Option<String>,
    /// A label selector.
    pub label_selector: Option<String>,
    /// A field selector.
    pub field_selector: Option<String>,
}

impl InformerOptions {
    /// All objects (in the factory's namespace, if it has one).
    pub fn new() -> Self {
        Self::default()
    }
    /// Only this namespace.
    pub fn namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = Some(ns.into());
        self
    }
    /// A label selector.
    pub fn label_selector(mut self, s: impl Into<String>) -> Self {
        self.label_selector = Some(s.into());
        self
    }
    /// A field selector.
    pub fn field_selector(mut self, s: impl Into<String>) -> Self {
        self.field_selector = Some(s.into());
        self
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct FactoryKey {
    resource: Resource,
    options: InformerOptions,
    metadata_only: bool,
}

trait Control: Send + Sync {
    fn start(&self) -> Result<(), Error>;
    fn sync(&self) -> &dyn CacheSync;
    fn shutdown(&self) -> BoxFuture<'_, ()>;
    fn as_any(&self) -> &dyn Any;
    fn type_id_of_object(&self) -> TypeId;
}

impl<K: SnapshotCodec + Send + Sync + 'static, R: Runtime> Control for Informer<K, R> {
    fn start(&self) -> Result<(), Error> {
        Informer::start(self)
    }
    fn sync(&self) -> &dyn CacheSync {
        self
    }
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(Informer::shutdown(self))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn type_id_of_object(&self) -> TypeId {
        TypeId::of::<K>()
    }
}

/// Hands out one [`Informer`] per (resource, namespace, selectors): every caller asking for the
/// same one shares it, and its handlers share one list/watch and one cache.
///
/// ```no_run
/// # async fn f<R: informer_runtime::Runtime + Default, B: informer_http::Backend>(client: informer_http::Client<B>) -> Result<(), informer_runtime::Error> {
/// use std::time::Duration;
/// use informer_core::object::DynamicObject;
/// use informer_runtime::{HandlerFns, SharedInformerFactory};
///
/// let factory = SharedInformerFactory::<R, B>::new(client).with_resync(Duration::from_secs(60));
/// let pods = factory.informer::<DynamicObject>(informer_http::Resource::PODS)?;
/// pods.add_handler(HandlerFns::new().on_add(|p: std::sync::Arc<DynamicObject>, _| println!("{}", p.metadata.name())))?;
/// factory.start()?;
/// factory.wait_for_cache_sync(Some(Duration::from_secs(30))).await?;
/// # Ok(()) }
/// ```
pub struct SharedInformerFactory<R, B> {
    rt: R,
    client: Client<B>,
    resync: Duration,
    namespace: Option<String>,
    snapshot_dir: Option<PathBuf>,
    informers: Mutex<Vec<(FactoryKey, Arc<dyn Control>)>>,
    started: Mutex<bool>,
}

impl<R, B> fmt::Debug for SharedInformerFactory<R, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedInformerFactory")
            .field("resync", &self.resync)
            .field("namespace", &self.namespace)
            .field("snapshot_dir", &self.snapshot_dir)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime + Default, B: Backend> SharedInformerFactory<R, B> {
    /// A factory on the default instance of runtime `R`.
    pub fn new(client: Client<B>) -> Self {
        Self::with_runtime(R::default(), client)
    }
}

impl<R: Runtime, B: Backend> SharedInformerFactory<R, B> {
    /// A factory on runtime `rt`.
    pub fn with_runtime(rt: R, client: Client<B>) -> Self {
        SharedInformerFactory {
            rt,
            client,
            resync: Duration::ZERO,
            namespace: None,
            snapshot_dir: None,
            informers: Mutex::new(Vec::new()),
            started: Mutex::new(false),
        }
    }

    /// The resync period of the informers it creates (default 0: none).
    pub fn with_resync(mut self, period: Duration) -> Self {
        self.resync = period;
        self
    }

    /// Restricts every informer it creates to one namespace.
    pub fn with_namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    /// Warm restarts for every informer it creates: each gets a
    /// [snapshot file](InformerBuilder::snapshot) of its own in `dir`, named after its
    /// resource, namespace, selectors and object type ([`snapshot_path`](Self::snapshot_path)).
    /// An informer resumes from its file at start and writes it at
    /// [`shutdown`](Self::shutdown) (or when its last handle is dropped). `dir` is created at
    /// the first write if missing (`0700` on Unix; the files are `0600`). A
    /// `customize` function of [`informer_with`](Self::informer_with) may add
    /// [`snapshot_every`](InformerBuilder::snapshot_every) or another path.
    pub fn with_snapshot_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.snapshot_dir = Some(dir.into());
        self
    }

    /// The snapshot file in `dir` of the informer of `resource` with `options` (the factory's
    /// namespace applied) holding objects of type `K`: the resource, the namespace and a hash
    /// of the selectors and the type's codec, so that every informer has its own file.
    pub fn snapshot_path<K: SnapshotCodec>(
        &self,
        dir: &Path,
        resource: &Resource,
        options: &InformerOptions,
    ) -> PathBuf {
        let mut options = options.clone();
        if options.namespace.is_none() {
            options.namespace = self.namespace.clone();
        }
        snapshot_file_name::<K>(dir, resource, &options)
    }

    /// The shared informer of `resource` for all objects (in the factory's namespace).
    pub fn informer<K>(&self, resource: Resource) -> Result<Informer<K, R>, Error>
    where
        K: SnapshotCodec + Send + Sync + 'static,
    {
        self.informer_with(resource, InformerOptions::default(), |b| b)
    }

    /// The shared informer of `resource` with `options`. `customize` (indexers, transform,
    /// watch-error hook, [name](InformerBuilder::name), …) applies only when this call creates
    /// it; once the factory has started, a new informer is started at once. Without a name
    /// set there, the informer's name is derived from the resource, namespace and selectors.
    ///
    /// `K` is any object type with a [`SnapshotCodec`] (every type of this crate and
    /// `K8s<T>` have one; for a type of your own, `impl SnapshotCodec for MyType {}` stores it
    /// as JSON), so that [`with_snapshot_dir`](Self::with_snapshot_dir) applies to all.
    pub fn informer_with<K>(
        &self,
        resource: Resource,
        mut options: InformerOptions,
        customize: impl FnOnce(InformerBuilder<K, R>) -> InformerBuilder<K, R>,
    ) -> Result<Informer<K, R>, Error>
    where
        K: SnapshotCodec + Send + Sync + 'static,
    {
        if options.namespace.is_none() {
            options.namespace = self.namespace.clone();
        }
        let key = FactoryKey {
            resource: resource.clone(),
            options: options.clone(),
            // Metadata only is another stream from the server (client-go has a factory of its
            // own for it), so it is another informer, not a type mismatch.
            metadata_only: TypeId::of::<K>()
                == TypeId::of::<informer_core::object::PartialObjectMetadata>(),
        };
        let mut informers = self
            .informers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, c)) = informers.iter().find(|(k, _)| *k == key) {
            return match c.as_any().downcast_ref::<Informer<K, R>>() {
                Some(i) if c.type_id_of_object() == TypeId::of::<K>() => Ok(i.clone()),
                _ => Err(Error::TypeMismatch {
                    resource: resource.plural.to_string(),
                }),
            };
        }
        let snapshot = self
            .snapshot_dir
            .as_deref()
            .map(|dir| snapshot_file_name::<K>(dir, &resource, &options));
        let mut b =
            InformerBuilder::new(self.rt.clone(), &self.client, resource).resync(self.resync);
        if let Some(ns) = &options.namespace {
            b = b.namespace(ns.clone());
        }
        if let Some(s) = &options.label_selector {
            b = b.label_selector(s.clone());
        }
        if let Some(s) = &options.field_selector {
            b = b.field_selector(s.clone());
        }
        if let Some(path) = snapshot {
            b = b.snapshot(path);
        }
        let informer = customize(b).build()?;
        if *self.started.lock().unwrap_or_else(PoisonError::into_inner) {
            informer.start()?;
        }
        informers.push((key, Arc::new(informer.clone())));
        Ok(informer)
    }

    /// Starts every informer created so far, and any created later.
    pub fn start(&self) -> Result<(), Error> {
        *self.started.lock().unwrap_or_else(PoisonError::into_inner) = true;
        for c in self.controls() {
            c.start()?;
        }
        Ok(())
    }

    /// Waits until every informer created so far has synced, at most `timeout` in all.
    pub async fn wait_for_cache_sync(&self, timeout: Option<Duration>) -> Result<(), Error> {
        let controls = self.controls();
        let items: Vec<&dyn CacheSync> = controls.iter().map(|c| c.sync()).collect();
        wait_for_cache_sync(&self.rt, &items, timeout).await
    }

    /// Shuts every informer down (see [`Informer::shutdown`]) and waits.
    pub async fn shutdown(&self) {
        for c in self.controls() {
            c.shutdown().await;
        }
    }

    fn controls(&self) -> Vec<Arc<dyn Control>> {
        self.informers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(_, c)| c.clone())
            .collect()
    }
}

/// `<group>_<version>_<plural>[_<namespace>]-<hash>.snapshot`: readable, and the hash (of the
/// whole key: resource, namespace, selectors, codec) keeps informers that differ only in what
/// a file name cannot show apart. The hash is stable across processes.
fn snapshot_file_name<K: SnapshotCodec>(
    dir: &Path,
    resource: &Resource,
    options: &InformerOptions,
) -> PathBuf {
    let clean = |s: &str| -> String {
        s.chars()
            .take(63)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let group = if resource.group.is_empty() {
        "core"
    } else {
        &resource.group
    };
    let mut name = format!(
        "{}_{}_{}",
        clean(group),
        clean(&resource.version),
        clean(&resource.plural)
    );
    if let Some(ns) = &options.namespace {
        name.push('_');
        name.push_str(&clean(ns));
    }
    let key = format!(
        "{}\0{}\0{}\0{:?}\0{:?}\0{:?}\0{}",
        resource.group,
        resource.version,
        resource.plural,
        options.namespace,
        options.label_selector,
        options.field_selector,
        K::CODEC
    );
    let hash = informer_core::snapshot::checksum(key.as_bytes());
    dir.join(format!("{name}-{hash:016x}.snapshot"))
}

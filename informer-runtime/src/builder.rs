//! Building an informer: what to watch, how to cache and index it.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use event_listener::Event;
use informer_core::cache::indexer::{IndexFunc, LabelIndex, label_index_name};
use informer_core::informer::reflector::{BackoffConfig, ReflectorConfig};
use informer_core::informer::{DeliveryOrder, InformerConfig, Transform};
use informer_core::object::selector::Labels;
use informer_core::protocol::Selectors;
use informer_core::views::Publisher;
use informer_core::{SharedIndexInformer, object::Object};
use informer_http::{Backend, Client, HasResource, Resource, Transport};
use serde::de::DeserializeOwned;

use crate::consistency::{ConsistencyCheck, Divergence, DivergenceHook, SameContent};
use crate::driver::{Driver, WatchError, WatchErrorHook};
use crate::error::Error;
use crate::informer::Informer;
use crate::metrics::Counters;
use crate::resource_version::RvWaiters;
use crate::runtime::Runtime;
use crate::state::{Shared, State, StateLock};

/// Builds an [`Informer`]: what to watch and how to cache and index it.
///
/// ```no_run
/// # async fn f<R: informer_runtime::Runtime + Default, B: informer_http::Backend>(client: informer_http::Client<B>) -> Result<(), informer_runtime::Error> {
/// use std::time::Duration;
/// use informer_core::{object::DynamicObject, cache::indexer::index_fn};
/// use informer_runtime::Informer;
///
/// let informer = Informer::<DynamicObject, R>::builder_for(&client, informer_http::Resource::CONFIGMAPS)
///     .namespace("default")
///     .label_selector("app=web")
///     .resync(Duration::from_secs(30))
///     .index("by-app", index_fn(|o: &DynamicObject| o.label("app").into_iter().collect()))
///     .build()?;
/// # Ok(()) }
/// ```
pub struct InformerBuilder<K, R> {
    rt: R,
    source: Source<K>,
    namespace: Option<String>,
    config: InformerConfig,
    default_resync: Duration,
    indexers: Vec<(String, Box<dyn IndexFunc<K>>)>,
    transform: Option<Transform<K>>,
    watch_error: Option<WatchErrorHook>,
    consistency: Option<(ConsistencyCheck, Option<DivergenceHook>)>,
    consistency_content: Option<SameContent<K>>,
    /// The resource's name (`plural` or `group/plural`, or the transport's name).
    name: String,
    /// The informer's name, when set with [`name`](Self::name).
    explicit_name: Option<String>,
    seed_set: bool,
    /// Set when `K` holds one kind and the resource is of another (refused by `build`).
    kind_mismatch: Option<Error>,
    /// `group/version/plural` (the snapshot identity's resource, before the namespace).
    resource_id: String,
    /// The resource, for an informer of one (not of a bare transport).
    resource: Option<Resource>,
    snapshot: Option<MakeSnapshot<K>>,
    snapshot_period: Option<Duration>,
}

type MakeSnapshot<K> =
    Box<dyn FnOnce(String, Selectors) -> crate::snapshot_file::SnapshotFile<K> + Send>;

type MakeTransport<K> = Box<dyn FnOnce(Option<&str>) -> Arc<dyn Transport<K>> + Send>;

enum Source<K> {
    Transport(Arc<dyn Transport<K>>),
    Api(MakeTransport<K>),
}

impl<K, R> fmt::Debug for InformerBuilder<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformerBuilder")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("config", &self.config)
            .field("default_resync", &self.default_resync)
            .finish_non_exhaustive()
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> InformerBuilder<K, R> {
    /// An informer of `resource` through `client`, decoding objects as `K` (a typed object or
    /// [`DynamicObject`](informer_core::object::DynamicObject)), on runtime `rt`.
    pub fn new<B: Backend>(rt: R, client: &Client<B>, resource: Resource) -> Self
    where
        K: DeserializeOwned,
    {
        let client = client.clone();
        let kind_mismatch = K::type_kind()
            .filter(|k| *k != resource.kind)
            .map(|type_kind| Error::KindMismatch {
                resource: resource.plural.to_string(),
                resource_kind: resource.kind.to_string(),
                type_kind,
            });
        let name = if resource.group.is_empty() {
            resource.plural.to_string()
        } else {
            format!("{}/{}", resource.group, resource.plural)
        };
        let resource_id = format!(
            "{}/{}/{}",
            resource.group, resource.version, resource.plural
        );
        let kept = resource.clone();
        let make: MakeTransport<K> =
            Box::new(move |ns| Arc::new(client.api::<K>(resource, ns)) as Arc<dyn Transport<K>>);
        let mut builder = Self::with_source(rt, Source::Api(make), name);
        builder.kind_mismatch = kind_mismatch;
        builder.resource_id = resource_id;
        builder.resource = Some(kept);
        builder
    }

    /// An informer fed by any [`Transport`] (a wrapper around an `informer_http::Api`,
    /// a fake in tests). [`namespace`](Self::namespace) does not apply: the transport decides.
    pub fn from_transport(
        rt: R,
        transport: Arc<dyn Transport<K>>,
        name: impl Into<String>,
    ) -> Self {
        Self::with_source(rt, Source::Transport(transport), name.into())
    }

    /// Says which resource an informer built on a transport serves
    /// ([`Informer::resource`](crate::Informer::resource)), so that a
    /// [`Controller`](crate::Controller) matches its writes to this informer
    /// (read-your-writes) and its owner kind to the resource's.
    pub fn serving(mut self, resource: Resource) -> Self {
        self.resource = Some(resource);
        self
    }

    fn with_source(rt: R, source: Source<K>, name: String) -> Self {
        InformerBuilder {
            resource_id: name.clone(),
            resource: None,
            snapshot: None,
            snapshot_period: None,
            rt,
            source,
            namespace: None,
            config: InformerConfig::default(),
            default_resync: Duration::ZERO,
            indexers: Vec::new(),
            transform: None,
            watch_error: None,
            consistency: None,
            consistency_content: None,
            name,
            explicit_name: None,
            seed_set: false,
            kind_mismatch: None,
        }
    }

    /// The informer's name (client-go 1.36's informer name, KEP-4346): on every log line it
    /// writes (field `informer`), every metric it exports (label `informer`) and every error
    /// it surfaces ([`Error`]'s `Display`, the [`WatchError`](crate::WatchError)s its
    /// watch-error hook gets). Pick one unique in the process; informer-rs does not check.
    ///
    /// Without it the name is derived, stably, from what the informer watches:
    /// `<resource>[@<namespace>][{<label selector>}][[<field selector>]]`, where
    /// `<resource>` is the plural for the core group and `group/plural` otherwise (for
    /// [`from_transport`](Self::from_transport), the name given there). For example
    /// `configmaps`, `configmaps@ns-a`, `pods@ns-a{app=x}`,
    /// `apps/deployments{tier in (web)}[metadata.name=api]`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.explicit_name = Some(name.into());
        self
    }

    /// Only objects in `namespace` (default: all namespaces).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        let ns: String = namespace.into();
        self.namespace = (!ns.is_empty()).then_some(ns);
        self
    }

    /// A label selector, e.g. `app=web,tier!=db`.
    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.config.reflector.selectors.label = Some(selector.into());
        self
    }

    /// A field selector, e.g. `status.phase=Running`.
    pub fn field_selector(mut self, selector: impl Into<String>) -> Self {
        self.config.reflector.selectors.field = Some(selector.into());
        self
    }

    /// The resync check period, also the resync period of handlers added with
    /// [`Informer::add_handler`] (client-go's `defaultEventHandlerResyncPeriod`). 0 (the
    /// default): no resyncs.
    pub fn resync(mut self, period: Duration) -> Self {
        self.config.resync_check_period = period;
        self.default_resync = period;
        self
    }

    /// In which order changes reach the cache and the handlers: client-go 1.36's in-order
    /// delivery ([`DeliveryOrder::InOrder`], the default: a relist's deletions before its
    /// objects) or client-go's older DeltaFIFO order ([`DeliveryOrder::DeltaFifo`]), for a
    /// controller ported from a client-go that still used it. See [`DeliveryOrder`].
    pub fn delivery_order(mut self, order: DeliveryOrder) -> Self {
        self.config.order = order;
        self
    }

    /// A named index (see [`index_fn`](informer_core::cache::indexer::index_fn)). The namespace index
    /// is built in.
    pub fn index(mut self, name: impl Into<String>, func: impl IndexFunc<K> + 'static) -> Self {
        self.indexers.push((name.into(), Box::new(func)));
        self
    }

    /// An index of the values of label `key` (named [`label_index_name`]`(key)`, e.g.
    /// `label:app`), which [`Store::select`](crate::Store::select) uses for a `key=value` or
    /// `key in (...)` term instead of scanning the cache. Query it by name like any index.
    pub fn label_index(self, key: &str) -> Self
    where
        K: Labels,
    {
        self.index(label_index_name(key), LabelIndex::new(key))
    }

    /// A transform applied to every object before it is cached (e.g. dropping
    /// `managedFields`). It must not change the namespace or name. Like index functions, it
    /// runs inside the driver's step and must not panic.
    pub fn transform(mut self, f: impl Fn(Arc<K>) -> Arc<K> + Send + Sync + 'static) -> Self {
        self.transform = Some(Box::new(f));
        self
    }

    /// A transform that edits each object in place before it is cached, e.g.
    /// `.transform_mut(|cm: &mut DynamicObject| { cm.metadata.remove_other("managedFields"); })`.
    ///
    /// Objects reach it straight from the decoder, so the informer holds the only reference:
    /// the edit happens in place and costs no copy. (Were an object shared, it would be cloned
    /// first, never changed under another holder.) Same rules as
    /// [`transform`](Self::transform): keep the namespace and name, do not panic.
    pub fn transform_mut(self, f: impl Fn(&mut K) + Send + Sync + 'static) -> Self
    where
        K: Clone,
    {
        self.transform(move |mut obj: Arc<K>| {
            f(Arc::make_mut(&mut obj));
            obj
        })
    }

    /// Called with every list or watch failure, as a [`WatchError`] (the typed [`Failure`](crate::Failure)
    /// and this informer's [name](Self::name)); runs on the driver task, so keep it quick.
    pub fn on_watch_error(mut self, f: impl Fn(&WatchError) + Send + Sync + 'static) -> Self {
        self.watch_error = Some(Arc::new(f));
        self
    }

    /// Switches the consistency check on (off by default): every `check.interval`, when the
    /// informer has synced, it lists the resource from the server at the informer's last synced
    /// resourceVersion (`resourceVersionMatch=Exact`, in pages) and compares the keys and
    /// resourceVersions with the cache (and the content, with
    /// [`consistency_content`](Self::consistency_content)). A divergence is logged (`tracing`
    /// error), counted
    /// ([`Metrics::divergences`](crate::Metrics::divergences)), handed to `on_divergence`, and,
    /// with [`ConsistencyCheck::heal`], repaired by a relist. A list that fails (say 410: the
    /// resourceVersion was compacted away) gives no verdict; the next check tries again.
    ///
    /// It costs one full list per interval: meant for tests, soaks and canaries.
    pub fn consistency_check(
        mut self,
        check: ConsistencyCheck,
        on_divergence: impl Fn(&Divergence) + Send + Sync + 'static,
    ) -> Self {
        self.consistency = Some((check, Some(Arc::new(on_divergence))));
        self
    }

    /// With [`consistency_check`](Self::consistency_check): also compare each object's content
    /// when cache and server hold it at the same resourceVersion, with `same(cached, server)`
    /// (`PartialEq::eq` will do for most types), after passing the server's copy through the
    /// informer's transform. A difference is reported in [`Divergence::differing`]. Costs a
    /// comparison (and a transform) per object per check; without `consistency_check` it does
    /// nothing.
    pub fn consistency_content(
        mut self,
        same: impl Fn(&K, &K) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.consistency_content = Some(Arc::new(same));
        self
    }

    /// The list/watch backoff (client-go's defaults unless set).
    pub fn backoff(mut self, backoff: BackoffConfig) -> Self {
        self.config.reflector.backoff = backoff;
        self
    }

    /// The whole reflector configuration (page size, streaming list, watch timeouts, backoff,
    /// seed); selectors set on this builder are kept. Without it, the seed of the backoff
    /// jitter and watch timeouts is random per informer, so that informers restarted together
    /// do not retry in lockstep.
    pub fn reflector_config(mut self, config: ReflectorConfig) -> Self {
        self.seed_set = true;
        let selectors: Selectors = self.config.reflector.selectors.clone();
        self.config.reflector = config;
        self.config.reflector.selectors = selectors;
        self
    }

    /// Warm restarts through the file at `path`: at [`Informer::start`], if it holds a
    /// snapshot of this resource (with these namespace and selectors), the informer loads it,
    /// reports its objects to the handlers as the initial population and watches from its
    /// resourceVersion instead of listing; a 410 then relists and delivers the difference. A
    /// missing, corrupt, truncated or foreign file means a normal list
    /// ([`Informer::snapshot_load`] says why). The cache is written back at
    /// [`Informer::shutdown`], on [`Informer::write_snapshot`] and every
    /// [`snapshot_every`](Self::snapshot_every), atomically. Objects are stored as cached (after
    /// the [`transform`](Self::transform), which is not applied again on load) in `K`'s
    /// [`SnapshotCodec`](informer_core::snapshot::SnapshotCodec): a binary encoding for
    /// [`DynamicObject`](crate::DynamicObject) and
    /// [`PartialObjectMetadata`](crate::PartialObjectMetadata), JSON for other types (which must
    /// serialize back to what they were decoded from). The file is read and decoded a piece
    /// at a time on a thread of its own. It is written readable by its owner only (`0600` on
    /// Unix: it holds every cached object, Secrets included), and its directory is created
    /// (`0700`) if missing.
    pub fn snapshot(mut self, path: impl Into<std::path::PathBuf>) -> Self
    where
        K: informer_core::snapshot::SnapshotCodec,
    {
        let path = path.into();
        self.snapshot = Some(Box::new(move |resource, selectors| {
            crate::snapshot_file::SnapshotFile::new(
                path,
                None,
                informer_core::snapshot::SnapshotIdentity {
                    resource,
                    selectors,
                },
            )
        }));
        self
    }

    /// With [`snapshot`](Self::snapshot): also write the snapshot every `period` once started
    /// (0: only on demand and at shutdown).
    pub fn snapshot_every(mut self, period: Duration) -> Self {
        self.snapshot_period = Some(period);
        self
    }

    /// Creates the informer and its driver task. It does not list or watch before
    /// [`Informer::start`]; handlers may be added before.
    pub fn build(mut self) -> Result<Informer<K, R>, Error> {
        if let Some(e) = self.kind_mismatch.take() {
            return Err(e);
        }
        if !self.seed_set {
            use std::hash::BuildHasher;
            self.config.reflector.seed =
                std::collections::hash_map::RandomState::new().hash_one(&self.name);
        }
        let selectors = self.config.reflector.selectors.clone();
        let snapshot = self.snapshot.map(|make| {
            let resource = match &self.namespace {
                Some(ns) => format!("{}@{ns}", self.resource_id),
                None => format!("{}@", self.resource_id),
            };
            let mut file = make(resource, self.config.reflector.selectors.clone());
            file.every = self.snapshot_period;
            file
        });
        let mut core = SharedIndexInformer::new(self.config);
        // Readers query the store's copies of the cache: the indices live there, not in the
        // core's own cache (which the driver alone reads).
        let mut publisher = Publisher::new();
        for (name, func) in self.indexers {
            publisher.add_index(&name, BoxedIndex(func))?;
        }
        let views = publisher.views().clone();
        if let Some(t) = self.transform {
            core.set_transform(t);
        }
        let name = match self.explicit_name {
            Some(name) => name,
            None => default_name(&self.name, self.namespace.as_deref(), &selectors),
        };
        let transport = match self.source {
            Source::Transport(t) => t,
            Source::Api(make) => make(self.namespace.as_deref()),
        };
        let (exited_tx, exited_rx) = async_channel::unbounded();
        let (cmd_tx, cmd_rx) = async_channel::unbounded();
        let shared = Arc::new(Shared {
            state: Arc::new(StateLock::new(State::new(core, publisher, exited_tx))),
            views,
            base: self.rt.now(),
            rt: self.rt.clone(),
            cmd: cmd_tx,
            changed: Arc::new(Event::new()),
            rv_waiters: Arc::new(RvWaiters::new()),
            counters: Arc::new(Counters::new(&name)),
            name,
            resource: self.resource,
            default_resync: self.default_resync,
            finished: AtomicBool::new(false),
            snapshot,
        });
        if let Some((check, hook)) = self.consistency {
            let task = crate::consistency::run(
                shared.clone(),
                transport.clone(),
                selectors,
                check,
                hook,
                self.consistency_content,
            );
            self.rt.spawn(Box::pin(task))?;
        }
        let driver = Driver::new(
            shared.clone(),
            transport,
            cmd_rx,
            exited_rx,
            self.watch_error,
        );
        self.rt.spawn(Box::pin(driver.run()))?;
        Ok(Informer::from_shared(shared))
    }
}

/// The derived name of an informer of `resource` (see [`InformerBuilder::name`]).
fn default_name(resource: &str, namespace: Option<&str>, selectors: &Selectors) -> String {
    let mut name = resource.to_string();
    if let Some(ns) = namespace.filter(|ns| !ns.is_empty()) {
        name.push('@');
        name.push_str(ns);
    }
    if let Some(label) = selectors.label.as_deref().filter(|s| !s.is_empty()) {
        name.push('{');
        name.push_str(label);
        name.push('}');
    }
    if let Some(field) = selectors.field.as_deref().filter(|s| !s.is_empty()) {
        name.push('[');
        name.push_str(field);
        name.push(']');
    }
    name
}

struct BoxedIndex<K>(Box<dyn IndexFunc<K>>);

impl<K> IndexFunc<K> for BoxedIndex<K> {
    fn index_values<'a>(&self, obj: &'a K) -> informer_core::cache::indexer::IndexValues<'a> {
        self.0.index_values(obj)
    }

    // Forwarded so that the indexer's selector planner recognises a boxed label index.
    fn label_key(&self) -> Option<&str> {
        self.0.label_key()
    }

    // Forwarded so that the store's copies update a label index without building its values.
    fn same_values(&self, old: &K, new: &K) -> bool {
        self.0.same_values(old, new)
    }

    fn single_value<'a>(&self, obj: &'a K) -> Option<Option<&'a str>> {
        self.0.single_value(obj)
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime + Default> Informer<K, R> {
    /// A builder for an informer of `K`'s own resource through `client`, on the default
    /// instance of runtime `R`: `Informer::<K8s<Pod>>::builder(&client)`.
    pub fn builder<B: Backend>(client: &Client<B>) -> InformerBuilder<K, R>
    where
        K: DeserializeOwned + HasResource,
    {
        InformerBuilder::new(R::default(), client, K::resource())
    }

    /// A builder for an informer of `resource` through `client`, on the default instance of
    /// runtime `R`: for [`DynamicObject`](informer_core::object::DynamicObject) (any resource) or a type
    /// without [`HasResource`]. When `K` is tied to one kind and `resource` is of another,
    /// [`build`](InformerBuilder::build) fails with [`Error::KindMismatch`].
    pub fn builder_for<B: Backend>(client: &Client<B>, resource: Resource) -> InformerBuilder<K, R>
    where
        K: DeserializeOwned,
    {
        InformerBuilder::new(R::default(), client, resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names() {
        let sel = |label: Option<&str>, field: Option<&str>| Selectors {
            label: label.map(Into::into),
            field: field.map(Into::into),
            shard: None,
        };
        assert_eq!(
            default_name("configmaps", None, &sel(None, None)),
            "configmaps"
        );
        assert_eq!(
            default_name("configmaps", Some("ns-a"), &sel(None, None)),
            "configmaps@ns-a"
        );
        assert_eq!(
            default_name("pods", Some("ns-a"), &sel(Some("app=x"), None)),
            "pods@ns-a{app=x}"
        );
        assert_eq!(
            default_name(
                "apps/deployments",
                None,
                &sel(Some(""), Some("metadata.name=api"))
            ),
            "apps/deployments[metadata.name=api]"
        );
    }
}

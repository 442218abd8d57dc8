//! The consistency check (client-go has one for its own tests): at an interval, at a quiet
//! moment, list the resource from the server at the informer's last synced resourceVersion and
//! compare it with the cache. Off by default; see
//! [`InformerBuilder::consistency_check`](crate::InformerBuilder::consistency_check).

use std::sync::Arc;
use std::time::Duration;

use informer_core::informer::consistency;
use informer_core::object::Object;
use informer_core::protocol::{Failure, Selectors};
use informer_http::Transport;

use crate::runtime::Runtime;
use crate::state::{Cmd, Shared};

/// Page size of the check's lists.
const PAGE: u32 = 500;

/// How the consistency check runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsistencyCheck {
    pub(crate) interval: Duration,
    pub(crate) heal: bool,
}

impl ConsistencyCheck {
    /// A check every `interval` (at least 100 ms), reporting divergences without healing.
    pub fn every(interval: Duration) -> ConsistencyCheck {
        ConsistencyCheck {
            interval: interval.max(Duration::from_millis(100)),
            heal: false,
        }
    }

    /// Whether a divergence also makes the informer relist (reported to the watch-error hook as
    /// an `Expired` failure whose message names the consistency check).
    pub fn heal(mut self, heal: bool) -> ConsistencyCheck {
        self.heal = heal;
        self
    }
}

pub use informer_core::informer::consistency::Divergence;

/// Called with every divergence the check finds.
pub(crate) type DivergenceHook = Arc<dyn Fn(&Divergence) + Send + Sync>;

/// Compares a cached object with the server's (after the transform): true if the same.
pub(crate) type SameContent<K> = Arc<dyn Fn(&K, &K) -> bool + Send + Sync>;

/// The cache at a quiet moment (synced, the core idle but for its watch): its resourceVersion
/// and objects, from one state of the store (its current copy: reading it never holds the
/// driver up). Only while the informer is watching: during a relist the cache is about to
/// change, and a check then would report what the relist is healing.
fn snapshot<K: Object + 'static, R>(shared: &Shared<K, R>) -> Option<(String, Vec<Arc<K>>)> {
    {
        let state = shared.state.read();
        if state.stopped || !state.core.is_watching() {
            return None;
        }
    }
    shared.views.read(|view| {
        let rv = view.last_sync_resource_version();
        if !view.has_synced() || rv.is_empty() {
            return None;
        }
        Some((
            rv.to_string(),
            view.indexer().list().cloned().collect::<Vec<_>>(),
        ))
    })
}

/// Lists everything at exactly `rv` (all pages).
async fn list_at<K: Object>(
    transport: &dyn Transport<K>,
    selectors: &Selectors,
    rv: &str,
) -> Result<Vec<Arc<K>>, Failure> {
    let mut out = Vec::new();
    let mut continue_token = None;
    loop {
        let req = consistency::list_request(rv, continue_token.take(), selectors, PAGE);
        let page = transport.list(&req).await?;
        out.extend(page.items);
        match page.continue_token {
            Some(t) if !t.is_empty() => continue_token = Some(t),
            _ => return Ok(out),
        }
    }
}

/// The check's task: runs until the informer stops.
pub(crate) async fn run<K: Object + Send + Sync + 'static, R: Runtime>(
    shared: Arc<Shared<K, R>>,
    transport: Arc<dyn Transport<K>>,
    selectors: Selectors,
    check: ConsistencyCheck,
    hook: Option<DivergenceHook>,
    same_content: Option<SameContent<K>>,
) {
    let name = shared.name.clone();
    // After a heal: the relist count to exceed before checking again (the relist waits for the
    // backoff; the same divergence is not reported again meanwhile).
    let mut healing: Option<u64> = None;
    loop {
        shared.rt.sleep(check.interval).await;
        if shared.state.read().stopped {
            return;
        }
        let relists = shared.counters.relists.get();
        match healing {
            Some(at) if relists <= at => continue,
            _ => healing = None,
        }
        let Some((rv, cache)) = snapshot(&shared) else {
            continue;
        };
        let server = match list_at(&*transport, &selectors, &rv).await {
            Ok(s) => s,
            Err(f) => {
                // Compacted away (410) or unavailable: no verdict this time.
                tracing::debug!(informer = %name, error = %f, "consistency check could not list");
                continue;
            }
        };
        let server = match &same_content {
            // The cache holds transformed objects: compare like with like.
            Some(_) => {
                let transformed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let state = shared.state.read();
                    server
                        .into_iter()
                        .map(|o| state.core.transform_object(o))
                        .collect::<Vec<_>>()
                }));
                match transformed {
                    Ok(t) => t,
                    Err(_) => {
                        tracing::error!(informer = %name, "the transform panicked in the consistency check");
                        continue;
                    }
                }
            }
            None => server,
        };
        shared.counters.consistency_checks.add(1);
        let same = same_content
            .as_ref()
            .map(|f| &**f as &dyn Fn(&K, &K) -> bool);
        let d = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            consistency::compare(
                &rv,
                cache.iter().map(|o| &**o),
                server.iter().map(|o| &**o),
                same,
            )
        }));
        let Ok(d) = d else {
            tracing::error!(informer = %name, "the content comparison panicked");
            continue;
        };
        let Some(d) = d else {
            tracing::trace!(informer = %name, resource_version = %rv, objects = cache.len(), "cache consistent");
            continue;
        };
        shared.counters.divergences.add(1);
        tracing::error!(informer = %name, error = %d, heal = check.heal, "consistency check failed");
        if let Some(hook) = &hook {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(&d))).is_err() {
                tracing::error!(informer = %name, "the divergence hook panicked");
            }
        }
        if check.heal {
            if shared.cmd.try_send(Cmd::Relist).is_err() {
                return;
            }
            healing = Some(relists);
        }
    }
}

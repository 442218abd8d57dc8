//! The consistency check (client-go has one for its own tests): at an interval, at a quiet
//! moment, list the resource from the server at the informer's last synced resourceVersion and
//! compare it with the cache. Off by default; see
//! [`InformerBuilder::consistency_check`](crate::InformerBuilder::consistency_check).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use informer_core::Object;
use informer_core::protocol::{Failure, ListRequest, ResourceVersionMatch, Selectors};
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

/// The cache and the server disagree at one resourceVersion: keys (`namespace/name`) the
/// server has and the cache lacks, keys the cache has and the server lacks, and keys whose
/// resourceVersions differ.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Divergence {
    /// The resourceVersion both were compared at.
    pub resource_version: String,
    /// On the server, not in the cache.
    pub missing: Vec<String>,
    /// In the cache, not on the server.
    pub unexpected: Vec<String>,
    /// In both at different resourceVersions: `(key, cached, server)`.
    pub stale: Vec<(String, String, String)>,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cache diverges from the server at resourceVersion {}: {} missing, {} unexpected, {} stale",
            self.resource_version,
            self.missing.len(),
            self.unexpected.len(),
            self.stale.len()
        )?;
        let first = self
            .missing
            .first()
            .map(|k| format!("missing {k}"))
            .or_else(|| self.unexpected.first().map(|k| format!("unexpected {k}")))
            .or_else(|| {
                self.stale
                    .first()
                    .map(|(k, c, s)| format!("{k} cached at {c}, server at {s}"))
            });
        if let Some(first) = first {
            write!(f, " (first: {first})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Divergence {}

/// Called with every divergence the check finds.
pub(crate) type DivergenceHook = Arc<dyn Fn(&Divergence) + Send + Sync>;

/// Compares the cache's `key → resourceVersion` with the server's at `resource_version`.
pub(crate) fn compare(
    resource_version: &str,
    cache: &BTreeMap<String, String>,
    server: &BTreeMap<String, String>,
) -> Option<Divergence> {
    let mut d = Divergence {
        resource_version: resource_version.to_string(),
        missing: Vec::new(),
        unexpected: Vec::new(),
        stale: Vec::new(),
    };
    for (k, srv) in server {
        match cache.get(k) {
            None => d.missing.push(k.clone()),
            Some(c) if c != srv => d.stale.push((k.clone(), c.clone(), srv.clone())),
            Some(_) => {}
        }
    }
    d.unexpected = cache
        .keys()
        .filter(|k| !server.contains_key(*k))
        .cloned()
        .collect();
    (!d.missing.is_empty() || !d.unexpected.is_empty() || !d.stale.is_empty()).then_some(d)
}

fn key_of<K: Object>(o: &K) -> String {
    match o.namespace() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", o.name()),
        _ => o.name().to_string(),
    }
}

/// The cache at a quiet moment (synced, the core idle but for its watch): its resourceVersion
/// and `key → resourceVersion`, from one state of the store.
fn snapshot<K: Object + 'static, R>(
    shared: &Shared<K, R>,
) -> Option<(String, BTreeMap<String, String>)> {
    if shared.state.read().stopped {
        return None;
    }
    // The store's current copy: its resourceVersion and objects belong together, and reading
    // it never holds the driver up (the keys are built after the read).
    let (rv, objects) = shared.views.read(|view| {
        let rv = view.last_sync_resource_version();
        if !view.has_synced() || rv.is_empty() {
            return None;
        }
        Some((
            rv.to_string(),
            view.indexer().list().cloned().collect::<Vec<_>>(),
        ))
    })?;
    let cache = objects
        .iter()
        .map(|o| (key_of(&**o), o.resource_version().unwrap_or("").to_string()))
        .collect();
    Some((rv, cache))
}

/// Lists everything at exactly `rv` (all pages).
async fn list_at<K: Object>(
    transport: &dyn Transport<K>,
    selectors: &Selectors,
    rv: &str,
) -> Result<BTreeMap<String, String>, Failure> {
    let mut out = BTreeMap::new();
    let mut continue_token = None;
    loop {
        let req = ListRequest {
            resource_version: Some(rv.to_string()),
            resource_version_match: Some(ResourceVersionMatch::Exact),
            limit: Some(PAGE),
            continue_token: continue_token.take(),
            selectors: selectors.clone(),
        };
        let page = transport.list(&req).await?;
        for o in &page.items {
            out.insert(key_of(&**o), o.resource_version().unwrap_or("").to_string());
        }
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
        shared.counters.consistency_checks.add(1);
        let Some(d) = compare(&rv, &cache, &server) else {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn compare_finds_missing_unexpected_and_stale() {
        let cache = map(&[("ns/a", "5"), ("ns/b", "6"), ("ns/c", "7")]);
        assert_eq!(compare("9", &cache, &cache), None);
        let server = map(&[("ns/a", "5"), ("ns/b", "8"), ("ns/d", "9")]);
        let d = compare("9", &cache, &server).unwrap();
        assert_eq!(d.missing, vec!["ns/d".to_string()]);
        assert_eq!(d.unexpected, vec!["ns/c".to_string()]);
        assert_eq!(
            d.stale,
            vec![("ns/b".to_string(), "6".to_string(), "8".to_string())]
        );
        assert_eq!(
            d.to_string(),
            "cache diverges from the server at resourceVersion 9: 1 missing, 1 unexpected, 1 stale (first: missing ns/d)"
        );
    }
}

//! The consistency check against a scripted server, on both runtimes: a server whose later
//! lists hold an object its watch never announced (a lost event, as a faulty transport or
//! server would cause) is caught as a typed `Divergence` (hook, metrics) and, with healing on,
//! repaired by a relist; a consistent server passes every check. Content is compared when
//! asked (same resourceVersion, other content: a divergence only then), and a list of more
//! than one page is paged the way the API server accepts (the continue requests carry neither
//! `resourceVersion` nor `resourceVersionMatch`).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use informer_http::Config;
use informer_runtime::{ConsistencyCheck, Divergence, DynamicObject, InformerBuilder, Resource};
use support::{Env, Reply, Server, cm, event, eventually, list_of};

type Seen = Arc<Mutex<Vec<Divergence>>>;

async fn checked<E: Env>(
    server: &Server,
    heal: bool,
) -> (informer_runtime::Informer<DynamicObject, E::R>, Seen) {
    checked_with::<E>(server, heal, false).await
}

async fn checked_with<E: Env>(
    server: &Server,
    heal: bool,
    content: bool,
) -> (informer_runtime::Informer<DynamicObject, E::R>, Seen) {
    let client = E::client(Config::new(server.url.clone()));
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let mut builder =
        InformerBuilder::<DynamicObject, E::R>::new(E::R::default(), &client, Resource::CONFIGMAPS)
            .consistency_check(
                ConsistencyCheck::every(Duration::from_millis(200)).heal(heal),
                move |d| s.lock().unwrap().push(d.clone()),
            );
    if content {
        builder = builder.consistency_content(|a, b| a == b);
    }
    let inf = builder.build().unwrap();
    inf.start().unwrap();
    (inf, seen)
}

/// The first list has `a`; the watch brings `a` at 7 and stays open; every later list (the
/// check's, at resourceVersion 7, and any relist) also has `b`, which no event announced.
fn lost_event_server() -> Server {
    Server::start(Box::new(|r| match (r.watch, r.n) {
        (false, 0) => Reply::Ok(list_of(&[cm("a", 5, "{}")], 5).into_bytes()),
        (false, _) => Reply::Ok(list_of(&[cm("a", 7, "{}"), cm("b", 6, "{}")], 7).into_bytes()),
        (true, 0) => Reply::ThenSilent(event("MODIFIED", &cm("a", 7, "{}")).into_bytes()),
        (true, _) => Reply::Silent,
    }))
}

async fn a_lost_event_is_caught_and_healed<E: Env>() {
    let server = lost_event_server();
    let (inf, seen) = checked::<E>(&server, true).await;
    let store = inf.store();
    let healed = eventually::<E>(Duration::from_secs(20), || store.get("ns/b").is_some()).await;
    assert!(healed, "the relist brought b: {:?}", seen.lock().unwrap());
    let first = seen.lock().unwrap()[0].clone();
    assert_eq!(first.resource_version, "7");
    assert_eq!(first.missing, vec!["ns/b".to_string()]);
    assert!(first.unexpected.is_empty() && first.stale.is_empty());
    // The check listed at the informer's resourceVersion, exactly.
    let check = server
        .requests()
        .into_iter()
        .find(|r| !r.watch && r.n == 1)
        .unwrap();
    assert!(
        check.path.contains("resourceVersion=7")
            && check.path.contains("resourceVersionMatch=Exact"),
        "{}",
        check.path
    );
    // Healed: later checks agree.
    let m0 = inf.metrics();
    let clean = eventually::<E>(Duration::from_secs(20), || {
        inf.metrics().consistency_checks >= m0.consistency_checks + 2
    })
    .await;
    let m = inf.metrics();
    assert!(clean, "{m:?}");
    assert_eq!(m.divergences, 1, "reported once, then healed: {m:?}");
    assert!(m.relists >= 1, "{m:?}");
    assert_eq!(m.watch_errors_by_kind.get("expired"), Some(&1));
    inf.shutdown().await;
}

async fn without_healing_the_divergence_is_reported_again<E: Env>() {
    let server = lost_event_server();
    let (inf, seen) = checked::<E>(&server, false).await;
    let twice = eventually::<E>(Duration::from_secs(20), || seen.lock().unwrap().len() >= 2).await;
    assert!(twice);
    assert!(inf.store().get("ns/b").is_none(), "not healed");
    assert_eq!(inf.metrics().relists, 0);
    inf.shutdown().await;
}

async fn a_consistent_server_passes<E: Env>() {
    let server = Server::start(Box::new(|r| match (r.watch, r.n) {
        (false, 0) => Reply::Ok(list_of(&[cm("a", 5, "{}")], 5).into_bytes()),
        (false, _) => Reply::Ok(list_of(&[cm("a", 7, "{}")], 7).into_bytes()),
        (true, 0) => Reply::ThenSilent(event("MODIFIED", &cm("a", 7, "{}")).into_bytes()),
        (true, _) => Reply::Silent,
    }));
    let (inf, seen) = checked::<E>(&server, true).await;
    let checked = eventually::<E>(Duration::from_secs(20), || {
        inf.metrics().consistency_checks >= 3
    })
    .await;
    assert!(checked);
    assert!(seen.lock().unwrap().is_empty());
    let m = inf.metrics();
    assert_eq!((m.divergences, m.relists), (0, 0), "{m:?}");
    inf.shutdown().await;
}

/// The first list has `a` with one label; the watch says nothing; every later list (the
/// check's) has `a` at the same resourceVersion with another label: content only.
fn changed_content_server() -> Server {
    Server::start(Box::new(|r| match (r.watch, r.n) {
        (false, 0) => Reply::Ok(list_of(&[cm("a", 5, r#"{"v":"1"}"#)], 5).into_bytes()),
        (false, _) => Reply::Ok(list_of(&[cm("a", 5, r#"{"v":"2"}"#)], 5).into_bytes()),
        (true, _) => Reply::Silent,
    }))
}

async fn content_is_compared_when_asked<E: Env>() {
    let server = changed_content_server();
    let (inf, seen) = checked_with::<E>(&server, false, true).await;
    let found = eventually::<E>(Duration::from_secs(20), || !seen.lock().unwrap().is_empty()).await;
    assert!(found, "{:?}", inf.metrics());
    let d = seen.lock().unwrap()[0].clone();
    assert_eq!(d.differing, vec!["ns/a".to_string()]);
    assert!(d.missing.is_empty() && d.unexpected.is_empty() && d.stale.is_empty());
    assert!(d.to_string().contains("1 with other content"), "{d}");
    inf.shutdown().await;

    // Without content comparison the same server passes.
    let server = changed_content_server();
    let (inf, seen) = checked::<E>(&server, false).await;
    let checked = eventually::<E>(Duration::from_secs(20), || {
        inf.metrics().consistency_checks >= 3
    })
    .await;
    assert!(checked);
    assert!(seen.lock().unwrap().is_empty());
    inf.shutdown().await;
}

async fn a_long_list_is_paged_as_the_server_accepts<E: Env>() {
    // 501 objects: the check's list takes two pages of at most 500.
    let items: Vec<String> = (0..501).map(|i| cm(&format!("o{i}"), 5, "{}")).collect();
    let server = Server::start(Box::new(move |r| {
        if r.watch {
            return Reply::Silent;
        }
        if r.n == 0 {
            return Reply::Ok(list_of(&items, 5).into_bytes());
        }
        let (page, token) = if r.path.contains("continue=") {
            (&items[500..], "")
        } else {
            (&items[..500], "next")
        };
        let body = format!(
            r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"5","continue":"{token}"}},"items":[{}]}}"#,
            page.join(",")
        );
        Reply::Ok(body.into_bytes())
    }));
    let (inf, seen) = checked::<E>(&server, false).await;
    let checked = eventually::<E>(Duration::from_secs(20), || {
        inf.metrics().consistency_checks >= 2
    })
    .await;
    assert!(checked, "{:?} {:?}", inf.metrics(), seen.lock().unwrap());
    assert!(seen.lock().unwrap().is_empty(), "both pages were compared");
    let requests = server.requests();
    let first = requests
        .iter()
        .find(|r| !r.watch && r.n >= 1 && !r.path.contains("continue="))
        .unwrap();
    assert!(
        first.path.contains("resourceVersion=5")
            && first.path.contains("resourceVersionMatch=Exact")
            && first.path.contains("limit=500"),
        "{}",
        first.path
    );
    let next = requests
        .iter()
        .find(|r| !r.watch && r.path.contains("continue=next"))
        .unwrap();
    assert!(
        !next.path.contains("resourceVersion"),
        "a continue request carries no resourceVersion(Match): {}",
        next.path
    );
    inf.shutdown().await;
}

on_both_runtimes!(
    content_is_compared_when_asked,
    a_long_list_is_paged_as_the_server_accepts,
    a_lost_event_is_caught_and_healed,
    without_healing_the_divergence_is_reported_again,
    a_consistent_server_passes,
);

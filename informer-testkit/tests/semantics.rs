//! FakeCluster's semantics through the normal `Client` and `Api` (requests built, answers
//! decoded as against a real apiserver). No cluster, no network: milliseconds.

use futures_util::StreamExt;
use informer_core::protocol::{ListRequest, ResourceVersionMatch, WatchEvent, WatchRequest};
use informer_testkit::{FakeCluster, Faults};
use informer_tokio::http::{
    Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy, WriteError,
};
use informer_tokio::{Client, DynamicObject, Failure, Object, Resource};
use serde_json::{Value, json};

fn obj(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("an object")
}

fn cm(name: &str, labels: Value) -> DynamicObject {
    obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": {"k": name}}))
}

fn setup() -> (
    FakeCluster,
    Client,
    Api<DynamicObject, informer_tokio::Backend>,
) {
    let fake = FakeCluster::new();
    let client: Client = fake.client().expect("client");
    let api = client.api::<DynamicObject>(Resource::CONFIGMAPS, Some("default"));
    (fake, client, api)
}

fn rv(o: &DynamicObject) -> u64 {
    o.metadata
        .resource_version()
        .unwrap_or("0")
        .parse()
        .unwrap()
}

fn status_code(e: &WriteError) -> Option<u16> {
    e.status().map(|s| s.code)
}

#[tokio::test(start_paused = true)]
async fn create_get_replace_delete_with_one_resource_version_counter() {
    let (fake, _client, api) = setup();
    let start = fake.resource_version();
    let a = api
        .create(&cm("a", json!({})), &PostParams::default())
        .await
        .unwrap();
    let b = api
        .create(&cm("b", json!({})), &PostParams::default())
        .await
        .unwrap();
    assert_eq!(rv(&a), start + 1);
    assert_eq!(rv(&b), start + 2, "one counter for all objects");
    assert!(!a.metadata.uid().unwrap_or("").is_empty());
    assert_eq!(a.metadata.namespace(), Some("default"));
    let again = api
        .create(&cm("a", json!({})), &PostParams::default())
        .await
        .unwrap_err();
    assert_eq!(status_code(&again), Some(409));
    assert_eq!(again.status().unwrap().reason, "AlreadyExists");

    let got = api.get("a").await.unwrap();
    assert_eq!(rv(&got), rv(&a));
    // Replace with the current version succeeds; with the old one it conflicts.
    let mut v: Value = serde_json::to_value(&got).unwrap();
    v["data"]["k"] = json!("changed");
    let replaced = api
        .replace(&obj(v.clone()), &PostParams::default())
        .await
        .unwrap();
    assert_eq!(rv(&replaced), start + 3);
    let stale = api
        .replace(&obj(v), &PostParams::default())
        .await
        .unwrap_err();
    assert!(stale.is_conflict(), "{stale}");
    // A replace that changes nothing keeps the version.
    let same = api
        .replace(&replaced, &PostParams::default())
        .await
        .unwrap();
    assert_eq!(rv(&same), rv(&replaced));
    assert_eq!(fake.resource_version(), start + 3);

    assert!(
        api.delete("a", &DeleteParams::default())
            .await
            .unwrap()
            .is_none()
    );
    assert!(api.get("a").await.unwrap_err().is_not_found());
    assert!(
        api.delete("a", &DeleteParams::default())
            .await
            .unwrap_err()
            .is_not_found()
    );
}

#[tokio::test(start_paused = true)]
async fn generate_name_missing_namespace_and_name_required() {
    let (_fake, client, api) = setup();
    let g =
        obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "x-"}}));
    let a = api.create(&g, &PostParams::default()).await.unwrap();
    let b = api.create(&g, &PostParams::default()).await.unwrap();
    assert!(
        a.name().starts_with("x-") && a.name().len() == 7,
        "{}",
        a.name()
    );
    assert_ne!(a.name(), b.name());
    let nowhere = client.api::<DynamicObject>(Resource::CONFIGMAPS, Some("nowhere"));
    let e = nowhere
        .create(&cm("c", json!({})), &PostParams::default())
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    let nameless = obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}));
    let e = api
        .create(&nameless, &PostParams::default())
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), Some(422));
}

#[tokio::test(start_paused = true)]
async fn delete_preconditions_finalizers_and_deletion_timestamp() {
    let (_fake, _client, api) = setup();
    let mut c = serde_json::to_value(cm("f", json!({}))).unwrap();
    c["metadata"]["finalizers"] = json!(["example.com/keep"]);
    let created = api.create(&obj(c), &PostParams::default()).await.unwrap();
    let wrong_uid = DeleteParams {
        preconditions: Preconditions {
            uid: Some("nope".into()),
            resource_version: None,
        },
        ..DeleteParams::default()
    };
    assert!(api.delete("f", &wrong_uid).await.unwrap_err().is_conflict());
    let wrong_rv = DeleteParams {
        preconditions: Preconditions {
            uid: None,
            resource_version: Some("1".into()),
        },
        ..DeleteParams::default()
    };
    assert!(api.delete("f", &wrong_rv).await.unwrap_err().is_conflict());
    let right = DeleteParams {
        preconditions: Preconditions {
            uid: created.metadata.uid().map(str::to_string),
            resource_version: created.metadata.resource_version().map(str::to_string),
        },
        ..DeleteParams::default()
    };
    let deleting = api
        .delete("f", &right)
        .await
        .unwrap()
        .expect("stays: a finalizer");
    assert!(deleting.deletion_timestamp().unwrap().is_some());
    assert!(rv(&deleting) > rv(&created));
    // No new finalizer while deleting.
    let add = Patch::Merge(json!({"metadata": {"finalizers": ["example.com/keep", "more"]}}));
    let e = api
        .patch("f", &add, &PatchParams::default())
        .await
        .unwrap_err();
    assert_eq!(status_code(&e), Some(422));
    // Removing the last finalizer deletes it.
    let done = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    api.patch("f", &done, &PatchParams::default())
        .await
        .unwrap();
    assert!(api.get("f").await.unwrap_err().is_not_found());
}

#[tokio::test(start_paused = true)]
async fn merge_json_patch_and_status_subresource() {
    let fake = FakeCluster::new();
    let client: Client = fake.client().unwrap();
    let deps = client.api::<DynamicObject>(Resource::DEPLOYMENTS, Some("default"));
    let d = obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d"}, "spec": {"replicas": 1}, "status": {"replicas": 9}}));
    let created = deps.create(&d, &PostParams::default()).await.unwrap();
    let v = serde_json::to_value(&created).unwrap();
    assert!(v.get("status").is_none(), "status is not taken on create");
    assert_eq!(v["metadata"]["generation"], 1);
    let p = deps
        .patch(
            "d",
            &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"replicas": 5}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["spec"]["replicas"], 3);
    assert_eq!(
        v["metadata"]["generation"], 2,
        "a spec change bumps the generation"
    );
    assert!(
        v.get("status").is_none(),
        "the main resource ignores status"
    );
    let s = deps
        .patch_status(
            "d",
            &Patch::Merge(json!({"status": {"replicas": 3}, "spec": {"replicas": 7}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(v["status"]["replicas"], 3);
    assert_eq!(v["spec"]["replicas"], 3, "/status ignores the spec");
    assert_eq!(v["metadata"]["generation"], 2);
    let j = deps
        .patch(
            "d",
            &Patch::Json(json!([{"op": "test", "path": "/spec/replicas", "value": 3},
            {"op": "replace", "path": "/spec/replicas", "value": 4}])),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(serde_json::to_value(&j).unwrap()["spec"]["replicas"], 4);
    let failed = deps
        .patch(
            "d",
            &Patch::Json(json!([{"op": "test", "path": "/spec/replicas", "value": 3}])),
            &PatchParams::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(status_code(&failed), Some(422));
    // A merge patch carrying a stale resourceVersion is a conflict.
    let stale = deps
        .patch(
            "d",
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 1}})),
            &PatchParams::default(),
        )
        .await
        .unwrap_err();
    assert!(stale.is_conflict());
}

#[tokio::test(start_paused = true)]
async fn server_side_apply_creates_merges_records_managers_and_conflicts() {
    let (_fake, _client, api) = setup();
    let a = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"x": "1", "y": "1"}});
    let created = api
        .patch("s", &Patch::Apply(a), &PatchParams::apply("one"))
        .await
        .unwrap();
    let v = serde_json::to_value(&created).unwrap();
    assert_eq!(v["metadata"]["managedFields"][0]["manager"], "one");
    assert_eq!(v["metadata"]["managedFields"][0]["operation"], "Apply");
    assert_eq!(
        v["metadata"]["managedFields"][0]["fieldsV1"]["f:data"]["f:x"],
        json!({})
    );
    // Another manager changing x conflicts; forced, it takes x over.
    let b = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"x": "2"}});
    let e = api
        .patch("s", &Patch::Apply(b.clone()), &PatchParams::apply("two"))
        .await
        .unwrap_err();
    assert!(e.is_conflict(), "{e}");
    let forced = api
        .patch("s", &Patch::Apply(b), &PatchParams::apply("two").force())
        .await
        .unwrap();
    let v = serde_json::to_value(&forced).unwrap();
    assert_eq!(v["data"], json!({"x": "2", "y": "1"}));
    // "one" re-applies without y (and without x, now two's): y goes, x stays.
    let a2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"z": "1"}});
    let again = api
        .patch("s", &Patch::Apply(a2.clone()), &PatchParams::apply("one"))
        .await
        .unwrap();
    let v = serde_json::to_value(&again).unwrap();
    assert_eq!(v["data"], json!({"x": "2", "z": "1"}));
    // The same apply again changes nothing: the version stays.
    let same = api
        .patch("s", &Patch::Apply(a2), &PatchParams::apply("one"))
        .await
        .unwrap();
    assert_eq!(rv(&same), rv(&again));
}

#[tokio::test(start_paused = true)]
async fn list_paging_resource_version_rules_and_compaction() {
    let (fake, _client, api) = setup();
    for i in 0..5 {
        api.create(
            &cm(&format!("p{i}"), json!({"i": i.to_string()})),
            &PostParams::default(),
        )
        .await
        .unwrap();
    }
    let at = fake.resource_version();
    let first = api
        .list_page(&ListRequest {
            limit: Some(2),
            ..ListRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.resource_version, at.to_string());
    let token = first.continue_token.clone().expect("more pages");
    // A change after the first page is not in the next ones: the snapshot is kept.
    api.delete("p3", &DeleteParams::default()).await.unwrap();
    let second = api
        .list_page(&ListRequest {
            limit: Some(2),
            continue_token: Some(token),
            ..ListRequest::default()
        })
        .await
        .unwrap();
    let names: Vec<&str> = second.items.iter().map(|o| o.name()).collect();
    assert_eq!(names, ["p2", "p3"]);
    // Exact at the earlier version still sees p3; NotOlderThan is now.
    let exact = api
        .list_page(&ListRequest {
            resource_version: Some(at.to_string()),
            resource_version_match: Some(ResourceVersionMatch::Exact),
            ..ListRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(exact.items.len(), 5);
    let now = api
        .list_page(&ListRequest {
            resource_version: Some(at.to_string()),
            resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
            ..ListRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(now.items.len(), 4);
    // rv=0 is never paged.
    let any = api
        .list_page(&ListRequest {
            resource_version: Some("0".into()),
            limit: Some(1),
            ..ListRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(any.items.len(), 4);
    assert!(any.continue_token.is_none());
    // Too new: "Too large resource version".
    let future = api
        .list_page(&ListRequest {
            resource_version: Some((at + 100).to_string()),
            resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
            ..ListRequest::default()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(future, Failure::TooLargeResourceVersion(_)),
        "{future:?}"
    );
    // Compacted: exact lists and old continue tokens are 410.
    fake.compact();
    let gone = api
        .list_page(&ListRequest {
            resource_version: Some(at.to_string()),
            resource_version_match: Some(ResourceVersionMatch::Exact),
            ..ListRequest::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(gone, Failure::Expired(_)), "{gone:?}");
    let gone = api
        .list_page(&ListRequest {
            limit: Some(2),
            continue_token: first.continue_token.clone(),
            ..ListRequest::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(gone, Failure::Expired(_)), "{gone:?}");
}

#[tokio::test(start_paused = true)]
async fn selectors_on_lists_and_watches() {
    let (_fake, _client, api) = setup();
    api.create(&cm("red", json!({"color": "red"})), &PostParams::default())
        .await
        .unwrap();
    api.create(
        &cm("blue", json!({"color": "blue"})),
        &PostParams::default(),
    )
    .await
    .unwrap();
    let mut req = ListRequest::default();
    req.selectors.label = Some("color in (red)".into());
    let reds = api.list_page(&req).await.unwrap();
    assert_eq!(
        reds.items.iter().map(|o| o.name()).collect::<Vec<_>>(),
        ["red"]
    );
    let mut req = ListRequest::default();
    req.selectors.field = Some("metadata.name!=red".into());
    let blues = api.list_page(&req).await.unwrap();
    assert_eq!(
        blues.items.iter().map(|o| o.name()).collect::<Vec<_>>(),
        ["blue"]
    );
    let mut w = WatchRequest {
        resource_version: reds.resource_version.clone(),
        ..WatchRequest::default()
    };
    w.selectors.label = Some("color=red".into());
    let mut events = api.watch_stream(&w).await.unwrap();
    // blue turns red: ADDED for this watch; red turns green: DELETED.
    api.patch(
        "blue",
        &Patch::Merge(json!({"metadata": {"labels": {"color": "red"}}})),
        &PatchParams::default(),
    )
    .await
    .unwrap();
    api.patch(
        "red",
        &Patch::Merge(json!({"metadata": {"labels": {"color": "green"}}})),
        &PatchParams::default(),
    )
    .await
    .unwrap();
    let kinds: Vec<String> = vec![events.next().await.unwrap(), events.next().await.unwrap()]
        .into_iter()
        .map(|e| match e {
            WatchEvent::Added(o) => format!("ADDED {}", o.name()),
            WatchEvent::Modified(o) => format!("MODIFIED {}", o.name()),
            WatchEvent::Deleted(o) => format!("DELETED {}", o.name()),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["ADDED blue", "DELETED red"]);
}

#[tokio::test(start_paused = true)]
async fn watch_replays_from_a_version_bookmarks_times_out_and_410s_after_compaction() {
    let (fake, _client, api) = setup();
    let before = fake.resource_version();
    api.create(&cm("w1", json!({})), &PostParams::default())
        .await
        .unwrap();
    api.delete("w1", &DeleteParams::default()).await.unwrap();
    let w = WatchRequest {
        resource_version: before.to_string(),
        allow_watch_bookmarks: true,
        timeout_seconds: Some(150),
        ..WatchRequest::default()
    };
    let mut events = api.watch_stream(&w).await.unwrap();
    assert!(matches!(events.next().await, Some(WatchEvent::Added(_))));
    assert!(matches!(events.next().await, Some(WatchEvent::Deleted(_))));
    // Nothing happens: two bookmarks (60 s, 120 s of virtual time), then the timeout ends it.
    let start = tokio::time::Instant::now();
    assert!(matches!(
        events.next().await,
        Some(WatchEvent::Bookmark { .. })
    ));
    assert!(matches!(
        events.next().await,
        Some(WatchEvent::Bookmark { .. })
    ));
    assert!(events.next().await.is_none());
    assert_eq!(start.elapsed().as_secs(), 150);
    assert_eq!(fake.open_watches(), 0);
    fake.compact();
    let mut events = api.watch_stream(&w).await.unwrap();
    match events.next().await {
        Some(WatchEvent::Error(Failure::Expired(s))) => assert_eq!(s.code, 410),
        other => panic!("expected a 410 event, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn garbage_collection_background_foreground_and_orphan() {
    let (fake, _client, api) = setup();
    let owner = api
        .create(&cm("owner", json!({})), &PostParams::default())
        .await
        .unwrap();
    let owned = |name: &str| {
        let mut v = serde_json::to_value(cm(name, json!({}))).unwrap();
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "name": "owner", "uid": owner.metadata.uid().unwrap(), "blockOwnerDeletion": true}]);
        obj(v)
    };
    api.create(&owned("child"), &PostParams::default())
        .await
        .unwrap();
    api.delete("owner", &DeleteParams::default()).await.unwrap();
    assert!(
        api.get("child").await.unwrap_err().is_not_found(),
        "background: the child goes"
    );

    let owner = api
        .create(&cm("owner", json!({})), &PostParams::default())
        .await
        .unwrap();
    let mut c = serde_json::to_value(owned("child2")).unwrap();
    c["metadata"]["ownerReferences"][0]["uid"] = json!(owner.metadata.uid().unwrap());
    c["metadata"]["finalizers"] = json!(["example.com/hold"]);
    api.create(&obj(c), &PostParams::default()).await.unwrap();
    let fg = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..DeleteParams::default()
    };
    let waiting = api
        .delete("owner", &fg)
        .await
        .unwrap()
        .expect("waits for its dependents");
    let v = serde_json::to_value(&waiting).unwrap();
    assert_eq!(v["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    let child = api.get("child2").await.unwrap();
    assert!(serde_json::to_value(&child).unwrap()["metadata"]["deletionTimestamp"].is_string());
    api.patch(
        "child2",
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        &PatchParams::default(),
    )
    .await
    .unwrap();
    assert!(
        api.get("owner").await.unwrap_err().is_not_found(),
        "the owner goes after"
    );

    let owner = api
        .create(&cm("owner", json!({})), &PostParams::default())
        .await
        .unwrap();
    let mut c = serde_json::to_value(owned("child3")).unwrap();
    c["metadata"]["ownerReferences"][0]["uid"] = json!(owner.metadata.uid().unwrap());
    api.create(&obj(c), &PostParams::default()).await.unwrap();
    let orphan = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    api.delete("owner", &orphan).await.unwrap();
    let child = fake
        .get(&Resource::CONFIGMAPS, Some("default"), "child3")
        .expect("orphaned");
    assert!(child["metadata"].get("ownerReferences").is_none());
    assert!(api.get("owner").await.unwrap_err().is_not_found());
}

#[tokio::test(start_paused = true)]
async fn crds_namespaces_and_leases() {
    let fake = FakeCluster::new();
    let client: Client = fake.client().unwrap();
    let crds = client.api::<DynamicObject>(Resource::CUSTOMRESOURCEDEFINITIONS, None);
    crds.create(
        &obj(
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}}}]}}),
        ),
        &PostParams::default(),
    )
    .await
    .unwrap();
    let widgets = client.api::<DynamicObject>(
        Resource::new("example.com", "v1", "Widget", "widgets", true),
        Some("default"),
    );
    let w = widgets
        .create(&obj(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"a": 1}})), &PostParams::default())
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&w).unwrap()["metadata"]["generation"],
        1
    );
    let mut by_spec = ListRequest::default();
    by_spec.selectors.field = Some("spec.a=1".into());
    let bad = widgets.list_page(&by_spec).await;
    assert!(
        bad.is_err(),
        "custom resources select on name and namespace only"
    );

    let nss = client.api::<DynamicObject>(Resource::NAMESPACES, None);
    nss.create(
        &obj(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tmp"}})),
        &PostParams::default(),
    )
    .await
    .unwrap();
    let leases = client.api::<DynamicObject>(Resource::LEASES, Some("tmp"));
    leases
        .create(&obj(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
            "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}})), &PostParams::default())
        .await
        .unwrap();
    nss.delete("tmp", &DeleteParams::default()).await.unwrap();
    assert!(
        leases.get("l").await.unwrap_err().is_not_found(),
        "a deleted namespace empties"
    );
    assert!(nss.get("tmp").await.unwrap_err().is_not_found(), "and goes");
}

#[tokio::test(start_paused = true)]
async fn faults_are_injected_by_seed_and_repeat() {
    async fn run(seed: u64) -> Vec<(String, u16)> {
        let fake = FakeCluster::builder()
            .seed(seed)
            .faults(Faults::none().server_error(0.3).conflict(0.3))
            .build();
        let client: Client = fake.client().unwrap();
        let api = client.api::<DynamicObject>(Resource::CONFIGMAPS, Some("default"));
        for i in 0..20 {
            let _ = api
                .create(&cm(&format!("c{i}"), json!({})), &PostParams::default())
                .await;
            let _ = api
                .patch(
                    &format!("c{i}"),
                    &Patch::Merge(json!({"data": {"x": "1"}})),
                    &PatchParams::default(),
                )
                .await;
        }
        fake.trace()
            .into_iter()
            .map(|t| (t.request, t.code))
            .collect()
    }
    let a = run(1).await;
    assert_eq!(a, run(1).await, "the same seed, the same run");
    assert_ne!(a, run(2).await);
    assert!(a.iter().any(|(_, c)| *c == 409));
    assert!(a.iter().any(|(_, c)| *c == 500));
}

#[tokio::test(start_paused = true)]
async fn restart_ends_watches_compacts_and_refuses_for_a_while() {
    let fake = FakeCluster::builder()
        .faults(Faults::none().restart_every(
            std::time::Duration::from_secs(3600),
            std::time::Duration::from_secs(5),
        ))
        .build();
    let client: Client = fake.client().unwrap();
    let api = client.api::<DynamicObject>(Resource::CONFIGMAPS, Some("default"));
    let list = api.list_page(&ListRequest::default()).await.unwrap();
    let mut events = api
        .watch_stream(&WatchRequest {
            resource_version: list.resource_version.clone(),
            ..WatchRequest::default()
        })
        .await
        .unwrap();
    api.create(&cm("later", json!({})), &PostParams::default())
        .await
        .unwrap();
    assert!(matches!(events.next().await, Some(WatchEvent::Added(_))));
    fake.restart();
    assert!(events.next().await.is_none(), "the watch ends");
    let refused = api.list_page(&ListRequest::default()).await.unwrap_err();
    assert!(
        matches!(refused, Failure::ConnectionRefused(_)),
        "{refused:?}"
    );
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let mut events = api
        .watch_stream(&WatchRequest {
            resource_version: list.resource_version,
            ..WatchRequest::default()
        })
        .await
        .unwrap();
    assert!(matches!(
        events.next().await,
        Some(WatchEvent::Error(Failure::Expired(_)))
    ));
}

#[tokio::test(start_paused = true)]
async fn leader_election_takes_over_after_a_crash_in_virtual_time() {
    use informer_tokio::LeaderElectionConfig;
    let fake = FakeCluster::builder()
        .faults(Faults::none().conflict(0.1))
        .build();
    let client: Client = fake.client().unwrap();
    let a =
        informer_tokio::leader_election(&client, "default", "lock", LeaderElectionConfig::new("a"))
            .unwrap();
    a.leading().await;
    let b =
        informer_tokio::leader_election(&client, "default", "lock", LeaderElectionConfig::new("b"))
            .unwrap();
    // b waits while a renews: a minute of virtual time.
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    assert!(a.is_leader() && !b.is_leader());
    // a crashes (the Lease is not written free): b leads once the Lease expired (15 s) and
    // not before.
    let crashed = tokio::time::Instant::now();
    a.abandon().await;
    b.leading().await;
    let took = crashed.elapsed();
    assert!(
        took >= std::time::Duration::from_secs(10),
        "took over after {took:?}"
    );
    assert!(
        took <= std::time::Duration::from_secs(20),
        "took over after {took:?}"
    );
    let lease = fake
        .get(&Resource::LEASES, Some("default"), "lock")
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "b");
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn history_is_compacted_by_itself_past_its_bound() {
    let fake = FakeCluster::builder().history(100).build();
    let client: Client = fake.client().unwrap();
    let api = client.api::<DynamicObject>(Resource::CONFIGMAPS, Some("default"));
    let first = api
        .create(&cm("h", json!({})), &PostParams::default())
        .await
        .unwrap();
    // 101 more changes: past the bound, the older half goes.
    for i in 0..101u32 {
        let p = Patch::Merge(json!({"data": {"n": i.to_string()}}));
        api.patch("h", &p, &PatchParams::default()).await.unwrap();
    }
    let exact = ListRequest {
        resource_version: first.metadata.resource_version().map(str::to_string),
        resource_version_match: Some(ResourceVersionMatch::Exact),
        ..ListRequest::default()
    };
    assert!(
        matches!(api.list_page(&exact).await, Err(Failure::Expired(_))),
        "the oldest half is gone"
    );
    let recent = ListRequest {
        resource_version: Some((fake.resource_version() - 10).to_string()),
        resource_version_match: Some(ResourceVersionMatch::Exact),
        ..ListRequest::default()
    };
    let page = api.list_page(&recent).await.unwrap();
    assert_eq!(page.items.len(), 1, "recent history stays");
    assert_eq!(
        page.items[0].field::<Value>("data").unwrap().unwrap()["n"],
        "90",
        "as it was then"
    );
}

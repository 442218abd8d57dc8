//! Informers on an application's own `kube::Client` (feature `kube`), against a real
//! kube-apiserver: the kube::Client is configured from the cluster's kubeconfig by kube-rs; the
//! informer lists, syncs and sees later changes through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use informer_tokio::{DynamicObject, HandlerFns, Informer, Resource, kube_client};
use testcluster::TestCluster;

fn create(tc: &TestCluster, ns: &str, name: &str) {
    let (status, body) = tc
        .request(
            "POST",
            &format!("/api/v1/namespaces/{ns}/configmaps"),
            Some(&format!(r#"{{"metadata":{{"name":"{name}"}}}}"#)),
        )
        .unwrap();
    assert!((200..300).contains(&status), "{status} {body}");
}

#[test]
fn an_informer_on_a_kube_client_syncs_and_sees_changes() {
    let tc = TestCluster::start().expect("start test cluster");
    let (status, body) = tc
        .request(
            "POST",
            "/api/v1/namespaces",
            Some(r#"{"metadata":{"name":"kube-rs"}}"#),
        )
        .unwrap();
    assert!((200..300).contains(&status), "{status} {body}");
    for i in 0..5 {
        create(&tc, "kube-rs", &format!("before-{i}"));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(&tc.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        let client = kube_client(kube::Client::try_from(config).unwrap());
        let informer = Informer::<DynamicObject>::builder_for(&client, Resource::CONFIGMAPS)
            .namespace("kube-rs")
            .build()
            .unwrap();
        let adds = Arc::new(AtomicUsize::new(0));
        let seen = adds.clone();
        informer
            .add_handler(HandlerFns::new().on_add(move |_: Arc<DynamicObject>, _| {
                seen.fetch_add(1, Ordering::SeqCst);
            }))
            .unwrap();
        informer.start().unwrap();
        informer
            .wait_for_sync(Some(Duration::from_secs(60)))
            .await
            .expect("synced through the kube::Client");
        assert_eq!(informer.store().len(), 5);
        create(&tc, "kube-rs", "after");
        let mut waited = 0;
        while informer.store().get("kube-rs/after").is_none() {
            assert!(
                waited < 600,
                "the watch through kube::Client never delivered"
            );
            informer_tokio::sleep(Duration::from_millis(50)).await;
            waited += 1;
        }
        assert_eq!(informer.store().len(), 6);
        // The store shows a change before its handler runs (the contract: published first,
        // then handed over), so the handler's count may still lag here by a moment.
        let mut waited = 0;
        while adds.load(Ordering::SeqCst) < 6 && waited < 600 {
            informer_tokio::sleep(Duration::from_millis(50)).await;
            waited += 1;
        }
        assert!(adds.load(Ordering::SeqCst) >= 6);
        informer.shutdown().await;

        // The application's k8s-openapi types, unchanged, on the same kube::Client.
        use k8s_openapi::api::core::v1::ConfigMap;
        let typed =
            Informer::<informer_http::K8s<ConfigMap>>::builder_for(&client, Resource::CONFIGMAPS)
                .namespace("kube-rs")
                .build()
                .unwrap();
        typed.start().unwrap();
        typed
            .wait_for_sync(Some(Duration::from_secs(60)))
            .await
            .expect("typed informer synced");
        let after = typed.store().get("kube-rs/after").expect("typed object");
        let cm: &ConfigMap = &after;
        assert_eq!(cm.metadata.name.as_deref(), Some("after"));
        assert_eq!(typed.store().len(), 6);
        typed.shutdown().await;

        // A kube-derive custom resource, with the CRD kube-derive made, as `Kube<T>`.
        use informer_tokio::{HasResource, Kube, Object};
        use kube::CustomResourceExt;
        let crd = serde_json::to_string(&Gizmo::crd()).unwrap();
        let (status, body) = tc
            .request(
                "POST",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                Some(&crd),
            )
            .unwrap();
        assert!((200..300).contains(&status), "{status} {body}");
        let gizmo = r#"{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"g","labels":{"a":"b"}},"spec":{"size":3}}"#;
        let mut waited = 0;
        loop {
            let (status, body) = tc
                .request(
                    "POST",
                    "/apis/example.com/v1/namespaces/kube-rs/gizmos",
                    Some(gizmo),
                )
                .unwrap();
            if (200..300).contains(&status) {
                break;
            }
            // The new resource is served a moment after its CRD is accepted.
            assert!(waited < 600 && status == 404, "{status} {body}");
            informer_tokio::sleep(Duration::from_millis(50)).await;
            waited += 1;
        }
        let resource = Kube::<Gizmo>::resource();
        assert_eq!((resource.plural.as_ref(), resource.namespaced), ("gizmos", true));
        let gizmos = Informer::<Kube<Gizmo>>::builder_for(&client, resource)
            .namespace("kube-rs")
            .build()
            .unwrap();
        gizmos.start().unwrap();
        gizmos
            .wait_for_sync(Some(Duration::from_secs(60)))
            .await
            .expect("custom resources synced");
        let g = gizmos.store().get("kube-rs/g").expect("the gizmo");
        assert_eq!(g.spec.size, 3);
        assert_eq!((g.kind(), g.api_version()), (Some("Gizmo"), Some("example.com/v1")));
        assert_eq!(g.labels().get("a"), Some("b"));
        assert!(g.uid().is_some());
        gizmos.shutdown().await;
    });
}

/// A custom resource as kube-rs users define one.
#[derive(
    kube::CustomResource, serde::Serialize, serde::Deserialize, Clone, Debug, schemars::JsonSchema,
)]
#[kube(group = "example.com", version = "v1", kind = "Gizmo", namespaced)]
struct GizmoSpec {
    size: u32,
}

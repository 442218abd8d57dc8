//! `CompactObject` against realistic Pods (`testcluster::pods`, 500 of them: about 0.3 s in a
//! debug build): every field read back equals the JSON it was decoded from, by either way an
//! object arrives (a watch event names its kind; a list's items get it filled in, as
//! informer-http's list decoder does), through serde, and through a snapshot.

use std::sync::Arc;

use informer_core::object::{CompactObject, DynamicObject, Object, compact::LEARN_OBJECTS};
use informer_core::protocol::Selectors;
use informer_core::snapshot::{Snapshot, SnapshotIdentity};
use serde_json::Value;
use testcluster::pods::Workload;

const PODS: usize = 500;

/// The object's reads, each against the JSON it came from.
fn check_reads(obj: &CompactObject, sent: &Value, what: &str) {
    let meta = &sent["metadata"];
    assert_eq!(obj.name(), meta["name"], "{what}: name");
    assert_eq!(obj.namespace(), meta["namespace"].as_str(), "{what}");
    assert_eq!(obj.uid(), meta["uid"].as_str(), "{what}");
    assert_eq!(
        obj.resource_version(),
        meta["resourceVersion"].as_str(),
        "{what}"
    );
    assert_eq!(obj.api_version(), sent["apiVersion"].as_str(), "{what}");
    assert_eq!(Object::kind(obj), sent["kind"].as_str(), "{what}");
    let labels: Vec<(String, String)> = obj
        .labels()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut sent_labels: Vec<(String, String)> = meta["labels"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    sent_labels.sort();
    assert_eq!(labels, sent_labels, "{what}: labels");
    let owners = obj.owner_references().unwrap();
    let sent_owners = meta["ownerReferences"].as_array().unwrap();
    assert_eq!(owners.len(), sent_owners.len(), "{what}");
    for (o, s) in owners.iter().zip(sent_owners) {
        assert_eq!(
            (
                o.api_version.as_ref(),
                o.kind.as_ref(),
                o.name.as_ref(),
                o.uid.as_ref()
            ),
            (
                s["apiVersion"].as_str().unwrap(),
                s["kind"].as_str().unwrap(),
                s["name"].as_str().unwrap(),
                s["uid"].as_str().unwrap()
            ),
            "{what}: owner"
        );
    }
    assert_eq!(
        obj.controller_owner().unwrap().map(|o| o.uid.to_string()),
        sent_owners[0]["uid"].as_str().map(String::from),
        "{what}"
    );
    assert_eq!(obj.generation().unwrap(), None, "{what}");
    assert!(obj.finalizers().unwrap().is_empty(), "{what}");
    for field in ["spec", "status"] {
        let read: Value = obj.field(field).unwrap().unwrap();
        assert_eq!(&read, &sent[field], "{what}: {field}");
    }
    assert!(obj.field::<Value>("data").is_none(), "{what}");
    let fields = obj.fields();
    assert_eq!(
        fields.get("spec").unwrap().get(),
        sent["spec"].to_string(),
        "{what}"
    );
    // The whole object: serialized, and as a DynamicObject.
    assert_eq!(
        &serde_json::to_value(obj).unwrap(),
        sent,
        "{what}: all of it"
    );
    assert_eq!(
        &serde_json::to_value(obj.to_dynamic()).unwrap(),
        sent,
        "{what}"
    );
}

#[test]
fn every_field_of_every_realistic_pod_reads_back_as_sent() {
    let w = Workload::new(11, PODS);
    let mut compressed = 0;
    let mut json_bytes = 0;
    let mut heap = 0;
    for i in 0..PODS {
        let text = w.stored_json(i, 100 + i as u64, i % 2 == 0);
        let sent: Value = serde_json::from_str(&text).unwrap();

        // A watch event's object: the kind is in the text.
        let (watched, len) = CompactObject::from_json_start(&text).expect("the straight reader");
        assert_eq!(len, text.len());
        check_reads(&watched, &sent, &format!("pod {i} (watch)"));

        // A list's item: no kind in the text; filled in, then compressed.
        let mut item_json = sent.clone();
        let item = item_json.as_object_mut().unwrap();
        item.remove("apiVersion");
        item.remove("kind");
        let item_text = item_json.to_string();
        let (mut listed, _) = CompactObject::from_json_start(&item_text).unwrap();
        assert_eq!(listed.api_version(), None);
        // Compressed as it is read, against the dictionary of objects without a kind (once
        // learned).
        if i >= 2 * LEARN_OBJECTS {
            assert!(listed.is_compressed(), "pod {i}: a list item");
        }
        let fill = CompactObject::type_meta_filler().unwrap();
        fill(&mut listed, "v1", "Pod");
        // (Whether each is compressed may differ: the process's Pod dictionary may be learned,
        // by this test or another running beside it, between the two.)
        // Equal objects: the same metadata, owners, kind and decompressed rest.
        assert_eq!(listed, watched, "pod {i}: both ways give the same object");

        // Through serde (the way taken when the straight reader leaves a text to serde_json).
        let via_serde: CompactObject = serde_json::from_str(&text).unwrap();
        assert_eq!(via_serde, watched, "pod {i}");

        if watched.is_compressed() {
            compressed += 1;
            json_bytes += text.len();
            heap += watched.heap_size();
        }
    }
    // The dictionary is learned from at most LEARN_OBJECTS objects (fewer when 16 KB are
    // met first); every later Pod is compressed, and its own blocks are smaller than its JSON.
    assert!(
        compressed >= PODS - LEARN_OBJECTS,
        "{compressed} of {PODS} compressed"
    );
    assert!(
        heap < json_bytes / 2,
        "own blocks {heap} of JSON {json_bytes}"
    );
}

#[test]
fn objects_without_a_kind_or_with_escapes_round_trip_uncompressed_or_through_serde() {
    // An escape in a key the straight reader keeps: serde decodes it.
    let odd = r#"{"apiVersion":"v1","kind":"Odd","metadata":{"name":"x","labels":{"a\"b":"c"},"ownerReferences":[{"apiVersion":"v1","kind":"K","name":"o","uid":"u","controller":true}],"managedFields":[{"manager":"m"}],"generation":3},"we\"ird":{"a":[1,2.5,null]}}"#;
    assert!(CompactObject::from_json_start(odd).is_none());
    let obj: CompactObject = serde_json::from_str(odd).unwrap();
    assert_eq!(obj.label("a\"b"), Some("c"));
    assert_eq!(obj.generation().unwrap(), Some(3));
    assert_eq!(obj.controller_owner().unwrap().unwrap().name, "o");
    assert_eq!(
        serde_json::to_value(&obj).unwrap(),
        serde_json::from_str::<Value>(odd).unwrap()
    );
    // No apiVersion, no kind: read the same.
    let bare = r#"{"metadata":{"name":"b"},"spec":{"x":1}}"#;
    let (obj, _) = CompactObject::from_json_start(bare).unwrap();
    assert_eq!(obj.field::<Value>("spec").unwrap().unwrap()["x"], 1);
    assert_eq!(
        obj.to_dynamic(),
        DynamicObject::from_json_start(bare).unwrap().0
    );
    // Nothing but metadata.
    let (empty, _) = CompactObject::from_json_start(r#"{"metadata":{}}"#).unwrap();
    assert!(empty.fields().is_empty() && empty.name().is_empty());
}

#[test]
fn a_snapshot_of_compact_pods_loads_the_same_objects() {
    let w = Workload::new(12, 100);
    let items: Vec<Arc<CompactObject>> = (0..100)
        .map(|i| {
            Arc::new(
                CompactObject::from_json_start(&w.stored_json(i, 7, true))
                    .unwrap()
                    .0,
            )
        })
        .collect();
    let id = SnapshotIdentity {
        resource: "/v1/pods@".into(),
        selectors: Selectors::default(),
    };
    let snapshot = Snapshot {
        resource_version: "7".into(),
        items: items.clone(),
    };
    let mut bytes = Vec::new();
    snapshot.encode(&id, &mut bytes).unwrap();
    let back = Snapshot::<CompactObject>::decode(&bytes, &id).unwrap();
    assert_eq!(back.items.len(), items.len());
    for (a, b) in items.iter().zip(&back.items) {
        assert_eq!(
            serde_json::to_value(&**a).unwrap(),
            serde_json::to_value(&**b).unwrap()
        );
    }
    assert!(
        Snapshot::<DynamicObject>::decode(&bytes, &id).is_err(),
        "another codec"
    );
}

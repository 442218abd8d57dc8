use alloc::string::ToString;
use alloc::vec::Vec;

use super::*;
use crate::object::{DynamicObject, ObjectMeta, PartialObjectMetadata};

const OWNED: &str = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{
    "name":"web-config","namespace":"prod","uid":"c-1","resourceVersion":"9",
    "labels":{"app":"web","tier":"front"},"annotations":{"note":"x"},
    "generation":4,"deletionTimestamp":"2024-02-29T12:30:05Z",
    "finalizers":["example.com/cleanup","kubernetes"],
    "ownerReferences":[
        {"apiVersion":"v1","kind":"Service","name":"other","uid":"s-1"},
        {"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"d-1","controller":true,"blockOwnerDeletion":true}
    ],
    "managedFields":[{"manager":"kubectl"}]},
    "data":{"k":"v"}}"#;

struct Typed {
    metadata: ObjectMeta,
}
crate::impl_object!(Typed);

/// Everything an `Object` reads of metadata, as one comparable value.
#[derive(Debug, PartialEq)]
struct Answers {
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
    generation: Option<i64>,
    deletion: Option<Timestamp>,
    finalizers: Vec<String>,
    owners: Vec<OwnerReference>,
    controller: Option<OwnerReference>,
}

fn answers(o: &impl Object) -> Answers {
    let pairs = |m: MetaMap<'_>| m.iter().map(|(k, v)| (k.into(), v.into())).collect();
    Answers {
        labels: pairs(o.labels()),
        annotations: pairs(o.annotations()),
        generation: o.generation().unwrap(),
        deletion: o.deletion_timestamp().unwrap(),
        finalizers: o
            .finalizers()
            .unwrap()
            .iter()
            .map(|f| f.to_string())
            .collect(),
        owners: o
            .owner_references()
            .unwrap()
            .iter()
            .map(|r| r.to_owned())
            .collect(),
        controller: o.controller_owner().unwrap().map(|r| r.to_owned()),
    }
}

#[test]
fn every_object_type_reads_the_same_metadata() {
    let dynamic: DynamicObject = serde_json::from_str(OWNED).unwrap();
    let partial: PartialObjectMetadata = serde_json::from_str(OWNED).unwrap();
    let typed = Typed {
        metadata: dynamic.metadata.clone(),
    };
    let a = answers(&dynamic);
    assert_eq!(a, answers(&partial));
    assert_eq!(a, answers(&typed));
    assert_eq!(a, answers(&alloc::sync::Arc::new(dynamic.clone())));
    assert_eq!(a.labels[0], ("app".into(), "web".into()));
    assert_eq!(a.annotations.len(), 1);
    assert_eq!(a.generation, Some(4));
    assert_eq!(
        a.deletion.unwrap().to_string(),
        "2024-02-29T12:30:05Z",
        "a leap day"
    );
    assert_eq!(a.finalizers, ["example.com/cleanup", "kubernetes"]);
    assert_eq!(a.owners.len(), 2);
    let ctl = a.controller.unwrap();
    assert_eq!(
        (ctl.kind.as_str(), ctl.name.as_str()),
        ("Deployment", "web")
    );
    assert!(ctl.is_controller() && ctl.block_owner_deletion == Some(true));

    // Borrowed from the object: no copy of a string without escapes.
    let fins = dynamic.finalizers().unwrap();
    assert!(fins.iter().all(|f| matches!(f, Cow::Borrowed(_))));
    assert!(fins.contains("kubernetes") && !fins.contains("kube"));
    let owners = dynamic.owner_references().unwrap();
    assert!(matches!(owners[1].name, Cow::Borrowed("web")));
    assert_eq!(owners.controller().unwrap().uid, "d-1");
    assert_eq!(dynamic.labels().get("tier"), Some("front"));
    assert_eq!(dynamic.labels(), partial.labels());
    assert_eq!(dynamic.api_version(), Some("v1"));
    assert_eq!(dynamic.kind(), Some("ConfigMap"));
}

#[test]
fn absent_and_null_fields_read_as_absent() {
    for json in [
        r#"{"metadata":{"name":"a"}}"#,
        r#"{"metadata":{"name":"a","generation":null,"deletionTimestamp":null,"finalizers":null,"ownerReferences":null}}"#,
        r#"{"metadata":{"name":"a","finalizers":[],"ownerReferences":[]}}"#,
    ] {
        let o: DynamicObject = serde_json::from_str(json).unwrap();
        assert_eq!(o.generation(), Ok(None), "{json}");
        assert_eq!(o.deletion_timestamp(), Ok(None));
        assert!(o.finalizers().unwrap().is_empty());
        assert!(o.owner_references().unwrap().is_empty());
        assert_eq!(o.controller_owner(), Ok(None));
        assert!(o.labels().is_empty() && o.annotations().is_empty());
    }
}

#[test]
fn malformed_fields_are_typed_errors() {
    let read = |meta: &str| -> DynamicObject {
        serde_json::from_str(&alloc::format!(r#"{{"metadata":{{"name":"a",{meta}}}}}"#)).unwrap()
    };
    assert_eq!(
        read(r#""generation":"4""#).generation(),
        Err(MetadataError::Malformed {
            field: "generation",
            expected: "an integer"
        })
    );
    assert!(matches!(
        read(r#""generation":1.5"#).generation(),
        Err(MetadataError::Malformed { .. })
    ));
    assert_eq!(
        read(r#""deletionTimestamp":"yesterday""#).deletion_timestamp(),
        Err(MetadataError::BadTimestamp {
            field: "deletionTimestamp",
            error: TimestampError::Syntax
        })
    );
    assert!(matches!(
        read(r#""deletionTimestamp":7"#).deletion_timestamp(),
        Err(MetadataError::Malformed {
            field: "deletionTimestamp",
            ..
        })
    ));
    assert!(matches!(
        read(r#""finalizers":["a",1]"#).finalizers(),
        Err(MetadataError::Malformed {
            field: "finalizers",
            ..
        })
    ));
    assert!(matches!(
        read(r#""finalizers":"a""#).finalizers(),
        Err(MetadataError::Malformed { .. })
    ));
    let no_uid = read(r#""ownerReferences":[{"apiVersion":"v1","kind":"X","name":"o"}]"#);
    assert!(matches!(
        no_uid.owner_references(),
        Err(MetadataError::Malformed {
            field: "ownerReferences",
            ..
        })
    ));
    assert!(no_uid.controller_owner().is_err());
    let e = read(r#""deletionTimestamp":"2024-13-01T00:00:00Z""#)
        .deletion_timestamp()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "metadata.deletionTimestamp is not a timestamp: a date or time field out of range"
    );
    assert!(core::error::Error::source(&e).is_some());
    // Escaped strings are read (owned then).
    let escaped = read(r#""finalizers":["a\/b"]"#);
    assert_eq!(&*escaped.finalizers().unwrap()[0], "a/b");
}

#[test]
fn timestamps_parse_rfc3339_and_print_utc() {
    let ok = |s: &str| Timestamp::parse(s).unwrap();
    assert_eq!(ok("1970-01-01T00:00:00Z").unix_seconds(), 0);
    assert_eq!(ok("2024-02-29T12:30:05Z").unix_seconds(), 1_709_209_805);
    assert_eq!(ok("1969-12-31T23:59:59Z").unix_seconds(), -1);
    let micro = ok("2024-01-02T03:04:05.123456Z");
    assert_eq!(micro.subsec_nanos(), 123_456_000);
    assert_eq!(micro.to_string(), "2024-01-02T03:04:05.123456Z");
    assert_eq!(
        ok("2024-01-02T03:04:05.000000001Z").to_string(),
        "2024-01-02T03:04:05.000000001Z"
    );
    // Offsets are folded into UTC.
    assert_eq!(ok("2024-01-02T05:04:05+02:00"), ok("2024-01-02T03:04:05Z"));
    assert_eq!(
        ok("2024-01-01T23:00:00-01:30").to_string(),
        "2024-01-02T00:30:00Z"
    );
    assert_eq!(ok("2024-01-02t03:04:05z"), ok("2024-01-02T03:04:05Z"));
    assert!(ok("2024-01-02T03:04:05Z") < ok("2024-01-02T03:04:05.5Z"));
    assert_eq!(
        ok("0000-01-01T00:00:00Z").to_string(),
        "0000-01-01T00:00:00Z"
    );
    assert_eq!(
        ok("9999-12-31T23:59:59Z").to_string(),
        "9999-12-31T23:59:59Z"
    );
    for bad in [
        "",
        "2024-01-02",
        "2024-01-02T03:04:05",
        "2024-01-02 03:04:05Z",
        "2024-01-02T03:04:05.Z",
        "2024-01-02T03:04:05.1234567890Z",
        "2024-01-02T03:04:05+0200",
        "2024-01-02T03:04:05Zjunk",
        "+2024-01-02T03:04:05Z",
        "2024-1-02T03:04:05Z",
        "２024-01-02T03:04:05Z",
    ] {
        assert_eq!(
            Timestamp::parse(bad),
            Err(TimestampError::Syntax),
            "{bad:?}"
        );
    }
    for bad in [
        "2023-02-29T00:00:00Z",
        "2024-00-10T00:00:00Z",
        "2024-04-31T00:00:00Z",
        "2024-01-02T24:00:00Z",
        "2024-01-02T23:60:00Z",
        "2024-01-02T23:59:60Z",
        "2024-01-02T03:04:05+24:00",
        "0000-01-01T00:00:00+00:01",
        "9999-12-31T23:59:59-00:01",
    ] {
        assert_eq!(
            Timestamp::parse(bad),
            Err(TimestampError::OutOfRange),
            "{bad:?}"
        );
    }
    assert_eq!(
        Timestamp::from_unix(0, 1_000_000_000),
        Err(TimestampError::OutOfRange)
    );
    // Every day of four centuries prints back as it parses.
    let mut secs = ok("1900-01-01T00:00:00Z").unix_seconds();
    while secs < ok("2300-01-01T00:00:00Z").unix_seconds() {
        let t = Timestamp::from_unix(secs + 3_723, 0).unwrap();
        assert_eq!(Timestamp::parse(&t.to_string()), Ok(t));
        secs += 86_400;
    }
    let json = serde_json::to_string(&micro).unwrap();
    assert_eq!(json, r#""2024-01-02T03:04:05.123456Z""#);
    assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), micro);
    assert!(serde_json::from_str::<Timestamp>(r#""soon""#).is_err());
}

#[test]
fn controller_of_builds_the_reference_a_child_carries() {
    let owner: DynamicObject = serde_json::from_str(OWNED).unwrap();
    let r = controller_of(&owner).unwrap();
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "web-config",
            "uid": "c-1", "controller": true, "blockOwnerDeletion": true})
    );
    let back: OwnerReference = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
    assert_eq!(back, r);
    assert_eq!(back.as_ref().to_owned(), r);
    // A plain reference leaves both flags out.
    let plain = OwnerReference::new("v1", "Service", "s", "u");
    assert_eq!(
        serde_json::to_value(&plain).unwrap(),
        serde_json::json!({"apiVersion": "v1", "kind": "Service", "name": "s", "uid": "u"})
    );
    assert!(!plain.is_controller());

    // What a reference needs, missing.
    let cases = [
        (
            r#"{"kind":"X","metadata":{"name":"a","uid":"u"}}"#,
            "apiVersion",
        ),
        (
            r#"{"apiVersion":"v1","metadata":{"name":"a","uid":"u"}}"#,
            "kind",
        ),
        (
            r#"{"apiVersion":"v1","kind":"X","metadata":{"uid":"u"}}"#,
            "name",
        ),
        (
            r#"{"apiVersion":"v1","kind":"X","metadata":{"name":"a"}}"#,
            "uid",
        ),
        (
            r#"{"apiVersion":"v1","kind":"X","metadata":{"name":"a","uid":""}}"#,
            "uid",
        ),
    ];
    for (json, field) in cases {
        let o: DynamicObject = serde_json::from_str(json).unwrap();
        assert_eq!(
            controller_of(&o),
            Err(MetadataError::Missing { field }),
            "{json}"
        );
    }
    // The metadata representation does not name the object's kind.
    let partial: PartialObjectMetadata = serde_json::from_str(
        r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"a","uid":"u"}}"#,
    )
    .unwrap();
    assert_eq!((partial.api_version(), partial.kind()), (None, None));
    assert_eq!(
        controller_of(&partial),
        Err(MetadataError::Missing {
            field: "apiVersion"
        })
    );
    let r = owner_reference_as(&partial, "v1", "Secret").unwrap();
    assert_eq!((r.kind.as_str(), r.controller), ("Secret", None));
    // A whole object decoded as metadata keeps its own.
    let whole: PartialObjectMetadata = serde_json::from_str(OWNED).unwrap();
    assert_eq!(controller_of(&whole).unwrap().kind, "ConfigMap");
}

proptest::proptest! {
    /// Any text is a timestamp or a typed error, never a panic; what parses prints back as
    /// the same instant.
    #[test]
    fn any_text_parses_or_is_refused(s in "[0-9T:Zz.+ -]{0,40}|\\PC{0,30}") {
        if let Ok(t) = Timestamp::parse(&s) {
            proptest::prop_assert_eq!(Timestamp::parse(&t.to_string()), Ok(t));
        }
    }
}

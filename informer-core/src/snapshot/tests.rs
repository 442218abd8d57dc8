//! Snapshot encoding: round trip, and every way a snapshot is refused.

use super::*;
use crate::sim::SimObject;
use alloc::format;
use alloc::vec;

fn obj(name: &str, rv: u64) -> Arc<SimObject> {
    Arc::new(SimObject {
        name: name.into(),
        namespace: if rv % 2 == 0 { None } else { Some("ns".into()) },
        resource_version: rv.to_string(),
        uid: format!("uid-{name}"),
        data: rv * 7,
        noise: 0,
    })
}

fn identity() -> SnapshotIdentity {
    SnapshotIdentity {
        resource: "/v1/configmaps@".into(),
        selectors: Selectors {
            label: Some("app=web".into()),
            field: None,
        },
    }
}

fn sample() -> Snapshot<SimObject> {
    Snapshot {
        resource_version: "42".into(),
        items: (0..5).map(|i| obj(&format!("o{i}"), i + 1)).collect(),
    }
}

fn encoded(s: &Snapshot<SimObject>, id: &SnapshotIdentity) -> Vec<u8> {
    let mut out = Vec::new();
    s.encode(id, &mut out).unwrap();
    out
}

#[test]
fn round_trip_keeps_objects_and_resource_version() {
    let s = sample();
    let bytes = encoded(&s, &identity());
    let back = Snapshot::<SimObject>::decode(&bytes, &identity()).unwrap();
    assert_eq!(back.resource_version, "42");
    assert_eq!(back.items.len(), 5);
    for (a, b) in s.items.iter().zip(&back.items) {
        assert_eq!(**a, **b);
    }
    let (id, rv) = peek_identity(&bytes).unwrap();
    assert_eq!((id, rv.as_str()), (identity(), "42"));
    // An empty cache is a valid snapshot too.
    let empty = Snapshot::<SimObject> {
        resource_version: "7".into(),
        items: vec![],
    };
    let back = Snapshot::<SimObject>::decode(&encoded(&empty, &identity()), &identity()).unwrap();
    assert!(back.items.is_empty());
}

#[test]
fn every_truncation_is_refused_as_truncated() {
    let bytes = encoded(&sample(), &identity());
    for n in 0..bytes.len() {
        let r = Snapshot::<SimObject>::decode(&bytes[..n], &identity());
        assert_eq!(r.err(), Some(SnapshotError::Truncated), "cut at {n}");
    }
}

#[test]
fn every_flipped_byte_is_refused() {
    let bytes = encoded(&sample(), &identity());
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut b = bytes.clone();
            b[i] ^= bit;
            let r = Snapshot::<SimObject>::decode(&b, &identity());
            assert!(r.is_err(), "byte {i} ^ {bit:#x} accepted");
        }
    }
    // Garbage after the end.
    let mut b = bytes.clone();
    b.push(0);
    assert!(matches!(
        Snapshot::<SimObject>::decode(&b, &identity()),
        Err(SnapshotError::Corrupt(_))
    ));
    // Not a snapshot at all.
    assert!(matches!(
        Snapshot::<SimObject>::decode(b"{\"items\":[]}", &identity()),
        Err(SnapshotError::Corrupt(_))
    ));
}

#[test]
fn other_identity_or_version_is_refused_with_its_own_error() {
    let bytes = encoded(&sample(), &identity());
    let other = SnapshotIdentity {
        resource: "/v1/secrets@".into(),
        ..identity()
    };
    assert_eq!(
        Snapshot::<SimObject>::decode(&bytes, &other).err(),
        Some(SnapshotError::OtherResource {
            expected: "/v1/secrets@".into(),
            found: "/v1/configmaps@".into()
        })
    );
    for selectors in [
        Selectors::default(),
        Selectors {
            label: Some("app=db".into()),
            field: None,
        },
        Selectors {
            label: Some("app=web".into()),
            field: Some("metadata.name=x".into()),
        },
    ] {
        let other = SnapshotIdentity {
            selectors,
            ..identity()
        };
        assert_eq!(
            Snapshot::<SimObject>::decode(&bytes, &other).err(),
            Some(SnapshotError::OtherSelectors)
        );
    }
    // A future format version, with a valid checksum.
    let mut b = bytes.clone();
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    let n = b.len() - 8;
    let sum = checksum(&b[..n]);
    b[n..].copy_from_slice(&sum.to_le_bytes());
    assert_eq!(
        Snapshot::<SimObject>::decode(&b, &identity()).err(),
        Some(SnapshotError::UnknownFormat(2))
    );
}

#[test]
fn well_formed_but_inconsistent_content_is_corrupt() {
    // The same key twice.
    let twice = Snapshot {
        resource_version: "9".into(),
        items: vec![obj("a", 1), obj("a", 1)],
    };
    let r = Snapshot::<SimObject>::decode(&encoded(&twice, &identity()), &identity());
    assert!(matches!(r, Err(SnapshotError::Corrupt(_))), "{r:?}");
    // An object that cannot be keyed.
    let bad = Snapshot {
        resource_version: "9".into(),
        items: vec![obj("a/b", 1)],
    };
    let r = Snapshot::<SimObject>::decode(&encoded(&bad, &identity()), &identity());
    assert!(matches!(r, Err(SnapshotError::Corrupt(_))), "{r:?}");
    // A frame that is not JSON, with a valid checksum: only the content is wrong.
    let mut b = encoded(&sample(), &identity());
    let at = b.iter().position(|&c| c == b'{').unwrap();
    b[at] = b'x';
    let n = b.len() - 8;
    let sum = checksum(&b[..n]);
    b[n..].copy_from_slice(&sum.to_le_bytes());
    let r = Snapshot::<SimObject>::decode(&b, &identity());
    assert!(matches!(r, Err(SnapshotError::Corrupt(_))), "{r:?}");
}

#[test]
fn dynamic_objects_round_trip_exactly() {
    let json = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"default","uid":"u1","resourceVersion":"12","labels":{"a":"b"},"creationTimestamp":"2024-01-01T00:00:00Z"},"data":{"k":"v"}}"#;
    let o: crate::object::DynamicObject = serde_json::from_str(json).unwrap();
    let s = Snapshot {
        resource_version: "12".into(),
        items: vec![Arc::new(o.clone())],
    };
    let mut out = Vec::new();
    s.encode(&identity(), &mut out).unwrap();
    let back = Snapshot::<crate::object::DynamicObject>::decode(&out, &identity()).unwrap();
    assert_eq!(*back.items[0], o);
}

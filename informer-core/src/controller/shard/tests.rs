//! Sharding: the ring, the table's text, membership, a member's and the sharder's decisions,
//! and the simulation with its checker.

use alloc::format;
use alloc::vec::Vec;
use core::time::Duration;

use super::*;
use crate::rng::SplitMix64;
use crate::time::Instant;

mod sim;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn at(n: u64) -> Instant {
    Instant::from_epoch(ms(n))
}

pub(super) fn cfg(member: &str, mode: Mode) -> ShardConfig {
    ShardConfig {
        mode,
        vnodes: 8,
        lease_duration: ms(2000),
        renew_deadline: ms(1400),
        retry_period: ms(400),
        ..ShardConfig::new("ring", member)
    }
}

#[test]
fn shard_01_fnv1a64_matches_the_reference_vectors() {
    // The FNV reference test vectors for 64-bit FNV-1a.
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    // An owned object hashes by its controller owner; by namespace, a namespace hashes alone.
    assert_eq!(
        HashBy::Uid.hash("child-uid", "ns", Some("parent-uid")),
        HashBy::Uid.hash("parent-uid", "ns", None)
    );
    assert_eq!(HashBy::Namespace.hash("u1", "ns", None), fnv1a64(b"ns"));
    assert_eq!(HashBy::Namespace.field_path(), "object.metadata.namespace");
}

#[test]
fn shard_02_ring_partitions_the_space_and_moves_only_the_changed_members_ranges() {
    let members = ["a", "b", "c"];
    let t = ShardTable::ring(&members, 16);
    let mut total = 0.0;
    let mut all: Vec<ShardRange> = Vec::new();
    for m in members {
        let r = t.ranges_of(m);
        let f: f64 = r.iter().map(ShardRange::fraction).sum();
        // 16 virtual nodes: no member far from a third.
        assert!(f > 0.15 && f < 0.55, "{m}: {f}");
        total += f;
        all.extend(r);
    }
    assert!((total - 1.0).abs() < 1e-9, "{total}");
    all.sort();
    assert_eq!(all[0].start, 0);
    assert_eq!(all.last().unwrap().end, 1u128 << 64);
    for w in all.windows(2) {
        assert_eq!(w[0].end, u128::from(w[1].start), "gap or overlap");
    }
    let plus = ShardTable::ring(&["a", "b", "c", "d"], 16);
    let minus = ShardTable::ring(&["a", "c"], 16);
    let mut rng = SplitMix64::new(7);
    let (mut moved_in, mut moved_out) = (0, 0);
    for _ in 0..20_000 {
        let h = rng.next_u64();
        let o = t.owner(h).unwrap();
        assert!(t.ranges_of(o).iter().any(|r| r.contains(h)));
        let p = plus.owner(h).unwrap();
        if p != o {
            assert_eq!(p, "d", "a join moves keys only to the new member");
            moved_in += 1;
        }
        let q = minus.owner(h).unwrap();
        if q != o {
            assert_eq!(o, "b", "a leave moves only the gone member's keys");
            moved_out += 1;
        }
    }
    assert!(moved_in > 2_000 && moved_in < 9_000, "{moved_in}");
    assert!(moved_out > 2_000 && moved_out < 11_000, "{moved_out}");
    // Empty ring: nobody owns anything.
    assert_eq!(ShardTable::ring(&[], 16).owner(5), None);
}

#[test]
fn shard_03_selector_and_table_text() {
    let t = ShardTable::ring(&["a", "b"], 4);
    let sa = t.selector("a", HashBy::Uid).unwrap();
    let sb = t.selector("b", HashBy::Uid).unwrap();
    let both = format!("{sa} || {sb}");
    assert!(both.contains("shardRange(object.metadata.uid, '0x0000000000000000', '0x"));
    assert!(both.contains("'0x10000000000000000')"));
    assert!(sa.split(" || ").all(|p| p.starts_with("shardRange(")));
    assert_eq!(t.selector("zz", HashBy::Uid), None);
    let mut t2 = t.clone();
    t2.version = 42;
    t2.segments[1].1 = None;
    let text = t2.encode();
    assert_eq!(ShardTable::decode(&text), Ok(t2.clone()));
    assert!(t2.has_unowned());
    assert!(!t2.same_assignment(&t));
    for bad in [
        "",
        "v=x;m=a;s=0:0",
        "v=1;m=b,a;s=0:0",
        "v=1;m=a;s=0:3",
        "v=1;m=a;s=5:0",
        "v=1;m=a;s=0:0,0:0",
        "v=1;m=a;s=0:0;x",
        "v=1;m=a;s=zz:0",
    ] {
        assert!(ShardTable::decode(bad).is_err(), "{bad:?} accepted");
    }
    assert!(matches!(
        ShardTable::decode("v=1;m=a;s=0:3"),
        Err(TableError::Invalid(_))
    ));
}

#[test]
fn shard_04_config_is_checked() {
    assert!(cfg("m1", Mode::Labels).validate().is_ok());
    assert!(ShardConfig::new("ring", "m1").validate().is_ok());
    assert_eq!(
        ShardConfig::new("Ring", "m1").validate(),
        Err(ShardError::InvalidRing)
    );
    assert_eq!(
        ShardConfig::new("ring", "m_1").validate(),
        Err(ShardError::InvalidMember)
    );
    let mut c = cfg("m1", Mode::Labels);
    c.vnodes = 0;
    assert_eq!(c.validate(), Err(ShardError::VirtualNodes(0)));
    let mut c = cfg("m1", Mode::Labels);
    c.renew_deadline = c.lease_duration;
    assert!(matches!(c.validate(), Err(ShardError::Timing(_))));
    assert!(Member::new(c.clone()).is_err());
    assert!(Sharder::new(c).is_err());
    let c = cfg("m1", Mode::Labels);
    assert_eq!(c.shard_label(), "ring/shard");
    assert_eq!(c.drain_label(), "ring/drain");
    assert_eq!(c.member_lease(), "ring-m-m1");
}

fn lease(m: &str, rv: &str, ack: Option<u64>) -> MemberLease {
    MemberLease {
        member: m.into(),
        resource_version: rv.into(),
        held: true,
        ack,
    }
}

#[test]
fn shard_05_membership_counts_from_when_a_version_was_first_seen() {
    let mut m = Membership::new(ms(2000));
    assert!(!m.is_observed());
    m.observe(at(0), [lease("a", "1", None), lease("b", "1", Some(3))]);
    assert_eq!(m.alive(at(1999)), ["a", "b"]);
    // a renews (new resourceVersion), b does not.
    m.observe(at(1500), [lease("a", "2", None), lease("b", "1", Some(3))]);
    assert_eq!(m.alive(at(2000)), ["a"]);
    assert_eq!(m.ack("b"), Some(3));
    assert_eq!(m.next_expiry(at(2000)), Some(at(3500)));
    // Released: gone at once; deleted: gone at once.
    let mut rel = lease("a", "3", None);
    rel.held = false;
    m.observe(at(1600), [rel]);
    assert!(m.alive(at(1600)).is_empty());
    assert_eq!(m.expired(at(1600)), ["a"]);
    // Collectable: released at once; expired, only `grace` after it expired.
    assert_eq!(m.expired_for(at(1600), ms(1000)), ["a"]);
    let mut m = Membership::new(ms(2000));
    m.observe(at(0), [lease("b", "1", None)]);
    assert!(m.expired_for(at(2999), ms(1000)).is_empty());
    assert_eq!(m.expired_for(at(3000), ms(1000)), ["b"]);
    m.observe(at(1700), []);
    assert!(!m.is_alive("a", at(1700)));
}

/// Drives a member's Lease to held against a trivial store.
fn joined(member: &mut Member, now: Instant) {
    member.handle_timeout(now);
    let r = member.poll_lease_request().unwrap();
    member.handle_lease_get(r.id, now, GetOutcome::NotFound);
    let r = member.poll_lease_request().unwrap();
    assert!(matches!(r.request, LeaseRequest::Create(_)));
    member.handle_lease_write(
        r.id,
        now,
        WriteOutcome::Written {
            record: Default::default(),
            resource_version: "1".into(),
        },
    );
    assert_eq!(member.poll_event(), Some(MemberEvent::Joined));
}

use crate::controller::leaderelection::{GetOutcome, LeaseRequest, WriteOutcome};

#[test]
fn shard_06_labels_member_starts_only_its_own_and_acks_a_drain_after_its_work() {
    let mut m = Member::new(cfg("m1", Mode::Labels)).unwrap();
    let mine = ObjectShard {
        hash: 1,
        label: Some("m1"),
        draining: false,
    };
    // Not working before its Lease is held.
    assert!(!m.try_start("k", mine));
    joined(&mut m, at(0));
    assert!(!m.try_start(
        "k",
        ObjectShard {
            label: Some("m2"),
            ..mine
        }
    ));
    assert!(m.try_start("k", mine));
    assert!(!m.try_start("k", mine), "already in flight");
    let draining = ObjectShard {
        draining: true,
        ..mine
    };
    assert!(!m.try_start("j", draining));
    m.observe_object("k", draining, "7");
    assert_eq!(m.poll_ack(), None, "acked only once its work ended");
    m.finish("k");
    assert_eq!(
        m.poll_ack(),
        Some(LabelAck {
            key: "k".into(),
            resource_version: "7".into()
        })
    );
    // Seen again at the same version: no second ack; at a newer one (after a 409): again.
    m.observe_object("k", draining, "7");
    assert_eq!(m.poll_ack(), None);
    m.observe_object("k", draining, "8");
    assert_eq!(m.poll_ack().unwrap().resource_version, "8");
    // Losing the Lease retires it: nothing starts any more.
    let deadline = m.poll_timeout().unwrap();
    m.handle_timeout(deadline + ms(5000));
    while let Some(r) = m.poll_lease_request() {
        m.handle_lease_write(r.id, deadline + ms(5000), WriteOutcome::Failed);
    }
    m.handle_timeout(at(100_000));
    assert_eq!(m.state(), MemberState::Retired);
    assert_eq!(m.poll_event(), Some(MemberEvent::Retired));
    assert!(!m.try_start("k", mine));
}

#[test]
fn shard_07_filter_member_acks_a_table_once_nothing_in_flight_is_outside_it() {
    let mut m = Member::new(cfg("a", Mode::Filter)).unwrap();
    joined(&mut m, at(0));
    let mut t1 = ShardTable::ring(&["a"], 8);
    t1.version = 1;
    m.handle_table(t1);
    assert_eq!(m.ack(), Some(1));
    let obj = ObjectShard {
        hash: 12345,
        label: None,
        draining: false,
    };
    assert!(m.try_start("k", obj));
    // Version 2: the range moves away (unowned while a drains it).
    let mut t2 = ShardTable::ring(&["a", "b"], 8);
    t2.version = 2;
    let h = t2.ranges_of("b")[0].start;
    for s in t2.segments.iter_mut() {
        s.1 = None;
    }
    let obj2 = ObjectShard { hash: h, ..obj };
    assert!(m.try_start("j", obj2));
    m.handle_table(t2.clone());
    assert_eq!(m.ack(), Some(1), "j and k are in flight outside version 2");
    assert!(!m.try_start("x", obj2));
    m.finish("j");
    assert_eq!(m.ack(), Some(1));
    m.finish("k");
    assert_eq!(m.ack(), Some(2));
    // An older table changes nothing.
    let mut old = ShardTable::ring(&["a"], 8);
    old.version = 1;
    m.handle_table(old);
    assert_eq!(m.table().unwrap().version, 2);
    // The ack rides on the next Lease write.
    m.handle_timeout(at(400));
    let r = m.poll_lease_request().unwrap();
    assert_eq!(r.ack, Some(2));
}

#[test]
fn shard_08_labels_sharder_labels_drains_and_reassigns_the_gone_at_once() {
    let mut s = Sharder::new(cfg("s", Mode::Labels)).unwrap();
    s.handle_members(at(0), [lease("a", "1", None)]);
    s.handle_object("k", 99, None, false, "1");
    s.handle_timeout(at(0));
    assert_eq!(s.poll_write(), None, "inert unless leading");
    s.set_leading(true);
    s.handle_timeout(at(0));
    let (id, w) = s.poll_write().unwrap();
    assert_eq!(
        w,
        ShardWrite::Label {
            key: "k".into(),
            member: Some("a".into()),
            resource_version: "1".into()
        }
    );
    s.handle_write(id, at(0), WriteResult::Done("2".into()));
    s.handle_timeout(at(10));
    assert_eq!(s.poll_write(), None, "waits for the write to be seen");
    s.handle_object("k", 99, Some("a"), false, "2");
    s.handle_timeout(at(20));
    assert_eq!(s.poll_write(), None);
    // b joins and the ring gives k to b: drain first.
    let h = ShardTable::ring(&["a", "b"], 8).ranges_of("b")[0].start;
    s.handle_object("k", h, Some("a"), false, "3");
    s.handle_members(at(100), [lease("a", "2", None), lease("b", "1", None)]);
    s.handle_timeout(at(100));
    let (id, w) = s.poll_write().unwrap();
    assert!(matches!(w, ShardWrite::Drain { .. }), "{w:?}");
    s.handle_write(id, at(100), WriteResult::Done("4".into()));
    s.handle_object("k", h, Some("a"), true, "4");
    s.handle_timeout(at(200));
    assert_eq!(s.poll_write(), None, "waits for a's ack");
    // a acks (removes the labels): b gets it.
    s.handle_object("k", h, None, false, "5");
    s.handle_timeout(at(300));
    let (id, w) = s.poll_write().unwrap();
    assert!(matches!(w, ShardWrite::Label { member: Some(ref m), .. } if m == "b"));
    s.handle_write(id, at(300), WriteResult::Done("6".into()));
    s.handle_object("k", h, Some("b"), false, "6");
    // b's Lease is not renewed: after lease_duration from when it was seen, k goes back to a
    // at once, without a drain.
    s.handle_members(at(1500), [lease("a", "3", None), lease("b", "1", None)]);
    s.handle_timeout(at(2100));
    let (id, w) = s.poll_write().unwrap();
    assert!(matches!(w, ShardWrite::Label { member: Some(ref m), .. } if m == "a"));
    // A 409: decided again on the next version.
    s.handle_write(id, at(2100), WriteResult::Conflict);
    s.handle_object("k", h, Some("b"), false, "7");
    s.handle_timeout(at(2200));
    assert!(matches!(
        s.poll_write(),
        Some((_, ShardWrite::Label { resource_version, .. })) if resource_version == "7"
    ));
    assert_eq!(s.writes(), 5);
    // The write's answer comes after the informer showed a later change (the owner's ack):
    // decided again at once, not held until a newer version that may never come.
    let mut s = Sharder::new(cfg("s", Mode::Labels)).unwrap();
    s.set_leading(true);
    s.handle_members(at(0), [lease("a", "1", None), lease("b", "1", None)]);
    s.handle_object("k", h, Some("a"), false, "7");
    s.handle_timeout(at(0));
    let (id, w) = s.poll_write().unwrap();
    assert!(matches!(w, ShardWrite::Drain { .. }), "{w:?}");
    s.handle_object("k", h, Some("a"), true, "8");
    s.handle_object("k", h, None, false, "9");
    s.handle_write(id, at(10), WriteResult::Done("8".into()));
    s.handle_timeout(at(20));
    assert!(matches!(
        s.poll_write(),
        Some((_, ShardWrite::Label { member: Some(ref m), ref resource_version, .. }))
            if m == "b" && resource_version == "9"
    ));
    // An owned kind's object is relabelled without a drain.
    s.handle_owned_object("child", h, Some("a"), "1");
    s.handle_timeout(at(30));
    let w = core::iter::from_fn(|| s.poll_write())
        .map(|(_, w)| w)
        .collect::<Vec<_>>();
    assert!(
        w.iter().any(|w| matches!(w, ShardWrite::Label { key, member: Some(m), .. } if key == "child" && m == "b")),
        "{w:?}"
    );
}

#[test]
fn shard_09_filter_sharder_moves_a_range_in_two_steps_after_the_acks() {
    let mut s = Sharder::new(cfg("s", Mode::Filter)).unwrap();
    s.set_leading(true);
    s.handle_members(at(0), [lease("a", "1", None)]);
    s.handle_timeout(at(0));
    let (id, w) = s.poll_write().unwrap();
    assert_eq!(w, ShardWrite::ReadTable);
    s.handle_table_read(id, None);
    s.handle_timeout(at(0));
    let (id, w) = s.poll_write().unwrap();
    let ShardWrite::PublishTable {
        table: t1,
        resource_version: None,
    } = w
    else {
        panic!("{w:?}")
    };
    assert_eq!(t1.version, 1);
    assert_eq!(t1.ranges_of("a").len(), 1, "all of it");
    s.handle_write(id, at(0), WriteResult::Done("10".into()));
    // b joins; a has not acked version 1 yet: nothing.
    s.handle_members(at(400), [lease("a", "2", None), lease("b", "1", None)]);
    s.handle_timeout(at(400));
    assert_eq!(s.poll_write(), None);
    s.handle_members(at(800), [lease("a", "3", Some(1)), lease("b", "2", None)]);
    s.handle_timeout(at(800));
    assert_eq!(s.poll_write(), None, "b must ack version 1 as well");
    s.handle_members(
        at(900),
        [lease("a", "3", Some(1)), lease("b", "3", Some(1))],
    );
    s.handle_timeout(at(900));
    let (id, w) = s.poll_write().unwrap();
    let ShardWrite::PublishTable { table: t2, .. } = w else {
        panic!()
    };
    assert_eq!(t2.version, 2);
    assert!(t2.ranges_of("b").is_empty(), "b gets nothing a still owns");
    assert!(t2.has_unowned());
    s.handle_write(id, at(900), WriteResult::Done("11".into()));
    s.handle_members(
        at(1200),
        [lease("a", "4", Some(2)), lease("b", "4", Some(2))],
    );
    s.handle_timeout(at(1200));
    let (_, w) = s.poll_write().unwrap();
    let ShardWrite::PublishTable { table: t3, .. } = w else {
        panic!()
    };
    assert!(!t3.has_unowned());
    assert!(t3.same_assignment(&ShardTable::ring(&["a", "b"], 8)));
}

#[test]
fn shard_13_shard_view_keeps_what_assignment_reads_and_drops_the_rest() {
    use crate::object::PartialObjectMetadata;
    let c = cfg("a", Mode::Labels);
    let text = r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1",
        "metadata":{"name":"cm","namespace":"ns","uid":"u-1","resourceVersion":"7",
        "labels":{"app":"x","ring/shard":"a","ring/drain":"true"},
        "annotations":{"big":"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"},
        "creationTimestamp":"2026-11-29T00:00:00Z",
        "managedFields":[{"manager":"kubectl","operation":"Apply","fieldsV1":{"f:data":{}}}],
        "ownerReferences":[{"apiVersion":"v1","kind":"Thing","name":"p","uid":"parent-uid",
            "controller":true}]},"data":{"payload":"zzzz"}}"#;
    let full: PartialObjectMetadata = serde_json::from_str(text).unwrap();
    let view: ShardView = serde_json::from_str(text).unwrap();
    // The same hashes (as a primary: by its own uid; as an owned object: by its controller
    // owner, so it lands with the primary it belongs to), labels, key and resourceVersion.
    assert_eq!(c.object_shard(&view), c.object_shard(&full));
    assert_eq!(c.owned_object_shard(&view), c.owned_object_shard(&full));
    assert_eq!(c.hash_of(&view), HashBy::Uid.hash("u-1", "ns", None));
    assert_eq!(
        c.owned_hash_of(&view),
        HashBy::Uid.hash("u-1", "ns", Some("parent-uid"))
    );
    // A primary with a controller owner of its own is hashed by its uid: its children (owned
    // objects whose controller owner it is) hash the same.
    let child: ShardView = serde_json::from_str(
        r#"{"metadata":{"name":"c","namespace":"ns","uid":"u-9","resourceVersion":"8",
        "ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"cm","uid":"u-1",
            "controller":true}]}}"#,
    )
    .unwrap();
    assert_eq!(c.owned_hash_of(&child), c.hash_of(&view));
    assert_eq!(view.key_ref(), full.key_ref());
    assert_eq!(view.resource_version(), Some("7"));
    assert_eq!(view.uid(), Some("u-1"));
    assert_eq!(view.labels().get("app"), Some("x"));
    // Nothing else.
    assert!(view.annotations().is_empty());
    assert!(view.metadata.other().get("managedFields").is_none());
    assert!(view.metadata.other().get("creationTimestamp").is_none());
    assert!(view.metadata.heap_size() < full.metadata.heap_size());
    // Cut from metadata already decoded: the same.
    assert_eq!(ShardView::from(full.metadata.clone()), view);
    assert!(<ShardView as Object>::metadata_only());
    // Without owner or labels, cluster-scoped, escaped: only what is there.
    let bare: ShardView = serde_json::from_str(
        r#"{"metadata":{"name":"b\u0062","uid":"u-2","resourceVersion":"3"}}"#,
    )
    .unwrap();
    assert_eq!(bare.name(), "bb");
    assert!(bare.labels().is_empty() && bare.metadata.other().is_empty());
    assert!(bare.namespace().is_none());
    assert_eq!(c.hash_of(&bare), HashBy::Uid.hash("u-2", "", None));
    assert_eq!(c.owned_hash_of(&bare), c.hash_of(&bare));
    assert_eq!(
        serde_json::from_str::<ShardView>("{}").unwrap(),
        ShardView::default()
    );
}

#[test]
fn shard_14_buckets_mode_labels_each_object_once_and_moves_buckets_by_the_table() {
    // The ring in whole buckets: aligned ranges, every bucket owned once, by the owner of its
    // first hash.
    let ring = ShardTable::ring(&["a", "b", "c"], 64);
    let t = ring.bucketed();
    assert!(
        t.segments
            .iter()
            .all(|(s, _)| s % (1u64 << (64 - BUCKET_BITS)) == 0)
    );
    let mut all: Vec<u8> = ["a", "b", "c"]
        .iter()
        .flat_map(|m| t.buckets_of(m))
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..=255u8).collect::<Vec<_>>());
    for b in 0..=255u8 {
        let start = u64::from(b) << (64 - BUCKET_BITS);
        assert_eq!(t.owner(start), ring.owner(start));
        assert_eq!(t.owner(start | 0xff_ffff_ffff_ffff), ring.owner(start));
    }
    assert_eq!(bucket_of(0xab00_0000_0000_0001), 0xab);
    assert_eq!(bucket_label(0x0f), "0f");
    for b in [0u8, 0x0f, 0xa0, 0xff] {
        assert!(ring::is_bucket_label(&bucket_label(b), b));
        assert!(!ring::is_bucket_label(&bucket_label(b), b.wrapping_add(1)));
    }
    assert!(!ring::is_bucket_label("0F", 0x0f) && !ring::is_bucket_label("f", 0x0f));
    // A member's selector: nothing before a table, its buckets after.
    let mut m = Member::new(cfg("a", Mode::Buckets)).unwrap();
    assert_eq!(m.label_selector().as_deref(), Some("ring/bucket in (none)"));
    let mut v1 = t.clone();
    v1.version = 1;
    m.handle_table(v1);
    let sel = m.label_selector().unwrap();
    let mine = t.buckets_of("a");
    assert!(!mine.is_empty());
    assert_eq!(
        sel,
        format!(
            "ring/bucket in ({})",
            mine.iter()
                .map(|b| bucket_label(*b))
                .collect::<Vec<_>>()
                .join(",")
        )
    );
    assert_eq!(
        Member::new(cfg("a", Mode::Filter))
            .unwrap()
            .label_selector(),
        None
    );
    // The object's bucket label is what the mode reads.
    let c = cfg("a", Mode::Buckets);
    let view: ShardView = serde_json::from_str(
        r#"{"metadata":{"name":"k","namespace":"ns","uid":"u-1","resourceVersion":"3",
        "labels":{"ring/bucket":"1f","ring/shard":"b"}}}"#,
    )
    .unwrap();
    let shard = c.object_shard(&view);
    assert_eq!((shard.label, shard.draining), (Some("1f"), false));
    // The sharder labels an unlabelled object with its bucket, once, at its resourceVersion.
    let mut s = Sharder::new(cfg("s", Mode::Buckets)).unwrap();
    s.set_leading(true);
    s.handle_members(at(0), [lease("a", "1", None), lease("b", "1", None)]);
    let h = 0x1f00_0000_0000_0042;
    s.handle_object("k", h, None, false, "3");
    s.handle_timeout(at(0));
    let writes: Vec<(WriteId, ShardWrite)> = core::iter::from_fn(|| s.poll_write()).collect();
    let labels: Vec<&ShardWrite> = writes
        .iter()
        .map(|(_, w)| w)
        .filter(|w| !matches!(w, ShardWrite::ReadTable))
        .collect();
    assert_eq!(
        labels,
        [&ShardWrite::Bucket {
            key: "k".into(),
            bucket: 0x1f,
            resource_version: "3".into()
        }]
    );
    let (id, _) = writes
        .iter()
        .find(|(_, w)| matches!(w, ShardWrite::Bucket { .. }))
        .unwrap();
    s.handle_write(*id, at(0), WriteResult::Done("4".into()));
    s.handle_object("k", h, Some("1f"), false, "4");
    // A member gone: only the table moves; the object is not written again.
    s.handle_members(at(100), [lease("a", "2", None), lease("b", "1", None)]);
    s.handle_members(at(2500), [lease("a", "3", None), lease("b", "1", None)]);
    s.handle_timeout(at(2500));
    let writes: Vec<ShardWrite> = core::iter::from_fn(|| s.poll_write())
        .map(|(_, w)| w)
        .collect();
    assert!(
        writes
            .iter()
            .all(|w| !matches!(w, ShardWrite::Bucket { .. } | ShardWrite::Label { .. })),
        "{writes:?}"
    );
    assert_eq!(s.writes(), 1);
}

#[test]
fn shard_15_labels_sharder_hands_out_at_most_its_window_of_writes() {
    // 100 unlabelled objects, a window of 4: the sharder holds 4 writes out, no more, and
    // decides the next one only as one is answered (a ring converging over N objects must not
    // hold N decided writes in memory at once).
    let c = ShardConfig {
        writes_in_flight: 4,
        ..cfg("s", Mode::Labels)
    };
    let mut s = Sharder::new(c).unwrap();
    s.set_leading(true);
    s.handle_members(at(0), [lease("a", "1", None)]);
    for i in 0..100u64 {
        s.handle_object(
            &alloc::format!("ns/o{i:03}"),
            i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            None,
            false,
            "1",
        );
    }
    s.handle_timeout(at(0));
    let mut out: Vec<_> = core::iter::from_fn(|| s.poll_write()).collect();
    assert_eq!(out.len(), 4);
    s.handle_timeout(at(1));
    assert_eq!(s.poll_write(), None, "the window is full");
    let mut keys = alloc::collections::BTreeSet::new();
    let mut written = 0;
    while let Some((id, w)) = out.pop() {
        let ShardWrite::Label { key, member, .. } = w else {
            panic!("{w:?}")
        };
        assert_eq!(member.as_deref(), Some("a"));
        assert!(keys.insert(key), "one write per key");
        written += 1;
        s.handle_write(id, at(2), WriteResult::Done("2".into()));
        s.handle_timeout(at(2));
        out.extend(core::iter::from_fn(|| s.poll_write()));
        assert!(out.len() <= 4, "{} writes out", out.len());
    }
    assert_eq!(written, 100);
    assert_eq!(s.writes(), 100);
}

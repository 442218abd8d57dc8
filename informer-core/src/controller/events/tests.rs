use super::*;
use alloc::string::ToString;

fn about(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("ns".into()),
        name: name.into(),
        uid: Some(alloc::format!("uid-{name}")),
        resource_version: None,
    }
}

fn event(name: &str, reason: &str, message: &str) -> EventSpec {
    EventSpec {
        regarding: about(name),
        event_type: EventType::Warning,
        reason: reason.into(),
        action: "Reconcile".into(),
        message: message.into(),
    }
}

const ME: (&str, &str) = ("greeter", "pod-1");

fn at(s: u64) -> Instant {
    Instant::from_epoch(Duration::from_secs(s))
}

fn wall(s: u64) -> Duration {
    Duration::from_secs(1_700_000_000 + s)
}

#[test]
fn an_identical_event_bumps_the_count_of_the_one_written() {
    let mut c = EventCorrelator::default();
    let e = event("a", "FailedSync", "boom");
    let first = c.correlate(at(0), wall(0), ME, &e);
    let Correlated::Create { name, message } = first else {
        panic!("{first:?}")
    };
    assert_eq!(name, alloc::format!("a.{:x}", wall(0).as_nanos()));
    assert_eq!(message, "boom");
    for n in 2..=4 {
        assert_eq!(
            c.correlate(at(n), wall(n), ME, &e),
            Correlated::Bump {
                name: name.clone(),
                count: n as u32,
                message: "boom".into()
            }
        );
    }
    // Another object, reporter, reason or message is another event.
    for other in [
        event("b", "FailedSync", "boom"),
        event("a", "Synced", "boom"),
        event("a", "FailedSync", "bang"),
    ] {
        assert!(matches!(
            c.correlate(at(5), wall(5), ME, &other),
            Correlated::Create { .. }
        ));
    }
    assert!(matches!(
        c.correlate(at(5), wall(5), ("greeter", "pod-2"), &e),
        Correlated::Create { .. }
    ));
}

#[test]
fn ten_similar_messages_in_ten_minutes_aggregate() {
    let mut c = EventCorrelator::default();
    let similar = |m: &str| event("a", "FailedSync", m);
    for i in 0..9 {
        let got = c.correlate(at(i), wall(i), ME, &similar(&i.to_string()));
        assert!(matches!(got, Correlated::Create { .. }), "{i}: {got:?}");
    }
    // An earlier message again is still that event's bump.
    let got = c.correlate(at(9), wall(9), ME, &similar("0"));
    assert!(matches!(got, Correlated::Bump { count: 2, .. }), "{got:?}");
    // The tenth distinct message (client-go's count): one aggregate event, then bumps of it.
    let got = c.correlate(at(10), wall(10), ME, &similar("10"));
    let Correlated::Create { name, message } = got else {
        panic!("{got:?}")
    };
    assert_eq!(message, "(combined from similar events): 10");
    let got = c.correlate(at(11), wall(11), ME, &similar("11"));
    let bump = |count, m: &str| Correlated::Bump {
        name: name.clone(),
        count,
        message: alloc::format!("(combined from similar events): {m}"),
    };
    assert_eq!(got, bump(2, "11"));
    // The window slides: similar events within 10 minutes of one another keep it open...
    assert_eq!(
        c.correlate(at(600), wall(600), ME, &similar("12")),
        bump(3, "12")
    );
    // ...and once 10 minutes pass without one, messages count afresh.
    let later = 600 + 601;
    let got = c.correlate(at(later), wall(later), ME, &similar("new"));
    assert_eq!(
        got,
        Correlated::Create {
            name: alloc::format!("a.{:x}", wall(later).as_nanos()),
            message: "new".into()
        }
    );
}

#[test]
fn an_object_gets_25_events_then_one_per_five_minutes() {
    let mut c = EventCorrelator::default();
    let mut kept = 0;
    for i in 0..40 {
        let got = c.correlate(
            at(0),
            wall(0),
            ME,
            &event("a", "R", &alloc::format!("{}", i % 3)),
        );
        if got != Correlated::Spam {
            kept += 1;
        }
    }
    assert_eq!(kept, 25, "the burst");
    assert_eq!(
        c.correlate(at(299), wall(299), ME, &event("a", "R", "0")),
        Correlated::Spam
    );
    assert_ne!(
        c.correlate(at(300), wall(300), ME, &event("a", "R", "0")),
        Correlated::Spam,
        "one token after five minutes"
    );
    assert_eq!(
        c.correlate(at(301), wall(301), ME, &event("a", "R", "0")),
        Correlated::Spam
    );
    // Another object has its own bucket.
    assert_ne!(
        c.correlate(at(301), wall(301), ME, &event("b", "R", "0")),
        Correlated::Spam
    );
}

#[test]
fn the_caches_stay_bounded() {
    let mut c = EventCorrelator::new(CorrelatorConfig {
        cache_size: 50,
        ..CorrelatorConfig::default()
    });
    for i in 0..10_000u64 {
        let name = alloc::format!("o{i}");
        let _ = c.correlate(at(i), wall(i), ME, &event(&name, "R", &name));
    }
    assert!(c.cached() <= 150, "{}", c.cached());
    for lru in [
        c.similar.order.len(),
        c.written.order.len(),
        c.buckets.order.len(),
    ] {
        assert!(lru <= 2 * 50 + 17, "{lru}");
    }
    // The most recent object is remembered: a repeat bumps it.
    assert!(matches!(
        c.correlate(at(10_000), wall(10_000), ME, &event("o9999", "R", "o9999")),
        Correlated::Bump { count: 2, .. }
    ));
}

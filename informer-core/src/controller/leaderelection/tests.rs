//! Leader election rules with simulated time against a model Lease store.

use alloc::format;
use alloc::vec::Vec;

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn cfg(id: &str, seed: u64) -> LeaderElectionConfig {
    LeaderElectionConfig {
        identity: id.into(),
        lease_duration: ms(4000),
        renew_deadline: ms(3000),
        retry_period: ms(500),
        seed,
    }
}

/// The API server's Lease: its spec and resourceVersion.
#[derive(Default)]
struct Server {
    lease: Option<(LeaseRecord, u64)>,
    rv: u64,
    writes: u32,
}

impl Server {
    fn get(&self) -> GetOutcome {
        match &self.lease {
            None => GetOutcome::NotFound,
            Some((r, rv)) => GetOutcome::Found {
                record: r.clone(),
                resource_version: format!("{rv}"),
            },
        }
    }
    fn write(&mut self, req: &LeaseRequest, now: Instant) -> WriteOutcome {
        let (spec, precondition) = match req {
            LeaseRequest::Create(spec) => {
                if self.lease.is_some() {
                    return WriteOutcome::Conflict;
                }
                (spec, None)
            }
            LeaseRequest::Update {
                spec,
                resource_version,
            } => {
                match &self.lease {
                    Some((_, rv)) if format!("{rv}") == *resource_version => {}
                    _ => return WriteOutcome::Conflict,
                }
                (spec, Some(()))
            }
            LeaseRequest::Get => unreachable!(),
        };
        let _ = precondition;
        self.rv += 1;
        self.writes += 1;
        let t = format!("{}", now.since_epoch().as_millis());
        let record = LeaseRecord {
            holder_identity: Some(spec.holder_identity.clone()),
            lease_duration_seconds: Some(spec.lease_duration_seconds),
            acquire_time: Some(spec.acquire_time.clone().unwrap_or_else(|| t.clone())),
            renew_time: Some(t),
            lease_transitions: Some(spec.lease_transitions),
        };
        self.lease = Some((record.clone(), self.rv));
        WriteOutcome::Written {
            record,
            resource_version: format!("{}", self.rv),
        }
    }
}

/// One candidate in the simulation: requests answered at once unless partitioned (then they
/// hang), or stopped entirely when dead.
struct Node {
    e: LeaderElector,
    partitioned: bool,
    dead: bool,
    events: Vec<(Instant, LeaderEvent)>,
}

impl Node {
    fn new(id: &str, seed: u64) -> Node {
        Node {
            e: LeaderElector::new(cfg(id, seed)).unwrap(),
            partitioned: false,
            dead: false,
            events: Vec::new(),
        }
    }
    fn step(&mut self, now: Instant, server: &mut Server) {
        if self.dead {
            return;
        }
        self.e.handle_timeout(now);
        while let Some((id, req)) = self.e.poll_request() {
            if self.partitioned {
                continue;
            }
            match req {
                LeaseRequest::Get => {
                    let g = server.get();
                    self.e.handle_get(id, now, g);
                }
                w => {
                    let o = server.write(&w, now);
                    self.e.handle_write(id, now, o);
                }
            }
        }
        while let Some(ev) = self.e.poll_event() {
            self.events.push((now, ev));
        }
    }
}

/// Runs the nodes from `from` to `to` in 10 ms ticks, asserting that no two lead at once,
/// and calling `check` after every tick.
fn run(
    nodes: &mut [Node],
    server: &mut Server,
    from: u64,
    to: u64,
    mut check: impl FnMut(u64, &[Node]),
) {
    let mut t = from;
    while t <= to {
        let now = Instant::from_epoch(ms(t));
        for n in nodes.iter_mut() {
            n.step(now, server);
        }
        let leaders = nodes.iter().filter(|n| !n.dead && n.e.is_leader()).count();
        assert!(leaders <= 1, "two leaders at {t} ms");
        check(t, nodes);
        t += 10;
    }
}

#[test]
fn leaderelection_01_config_constraints() {
    assert!(cfg("a", 0).validate().is_ok());
    assert_eq!(cfg("", 0).validate(), Err(ConfigError::NoIdentity));
    let mut c = cfg("a", 0);
    c.renew_deadline = c.lease_duration;
    assert!(matches!(c.validate(), Err(ConfigError::Timing(_))));
    let mut c = cfg("a", 0);
    c.retry_period = ms(2500);
    assert!(matches!(c.validate(), Err(ConfigError::Timing(_))));
    assert!(LeaderElectionConfig::new("x").validate().is_ok());
}

#[test]
fn leaderelection_02_creates_the_lease_and_renews_every_retry_period() {
    let mut server = Server::default();
    let mut nodes = [Node::new("a", 1)];
    run(&mut nodes, &mut server, 0, 0, |_, _| {});
    assert!(nodes[0].e.is_leader());
    assert_eq!(
        nodes[0].events,
        [
            (Instant::ZERO, LeaderEvent::NewLeader("a".into())),
            (Instant::ZERO, LeaderEvent::StartedLeading)
        ]
    );
    let (rec, _) = server.lease.clone().unwrap();
    assert_eq!(rec.lease_duration_seconds, Some(4));
    assert_eq!(rec.lease_transitions, Some(0));
    run(&mut nodes, &mut server, 10, 5000, |_, _| {});
    // Create at 0, renewals at 500, 1000, ..., 5000 (without a GET each time).
    assert_eq!(server.writes, 11);
    let (rec, _) = server.lease.clone().unwrap();
    assert_eq!(rec.acquire_time.as_deref(), Some("0"));
    assert_eq!(rec.renew_time.as_deref(), Some("5000"));
    assert_eq!(rec.lease_transitions, Some(0));
}

#[test]
fn leaderelection_03_two_candidates_one_leader_the_other_waits() {
    let mut server = Server::default();
    let mut nodes = [Node::new("a", 1), Node::new("b", 2)];
    run(&mut nodes, &mut server, 0, 20_000, |_, _| {});
    assert!(nodes[0].e.is_leader());
    assert!(!nodes[1].e.is_leader());
    assert_eq!(nodes[1].e.leader(), Some("a"));
    assert!(
        nodes[1]
            .events
            .iter()
            .all(|(_, e)| *e == LeaderEvent::NewLeader("a".into()))
    );
}

#[test]
fn leaderelection_04_standby_takes_over_within_lease_duration_after_the_leader_dies() {
    let mut server = Server::default();
    let mut nodes = [Node::new("a", 1), Node::new("b", 2)];
    run(&mut nodes, &mut server, 0, 3000, |_, _| {});
    assert!(nodes[0].e.is_leader());
    nodes[0].dead = true;
    let last_renew: u64 = server
        .lease
        .as_ref()
        .unwrap()
        .0
        .renew_time
        .as_ref()
        .unwrap()
        .parse()
        .unwrap();
    let mut took_over = None;
    run(&mut nodes, &mut server, 3010, 15_000, |t, n| {
        if took_over.is_none() && n[1].e.is_leader() {
            took_over = Some(t);
        }
    });
    let t = took_over.expect("b never took over");
    // Not before the lease ran out, and within it plus one jittered retry (2.2 × 500 ms).
    assert!(
        t >= last_renew + 4000,
        "took over at {t}, last renew {last_renew}"
    );
    assert!(
        t <= last_renew + 4000 + 1100 + 500,
        "took over at {t}, last renew {last_renew}"
    );
    let (rec, _) = server.lease.clone().unwrap();
    assert_eq!(rec.holder_identity.as_deref(), Some("b"));
    assert_eq!(rec.lease_transitions, Some(1));
    assert_eq!(rec.acquire_time, Some(format!("{t}")));
}

#[test]
fn leaderelection_05_partitioned_leader_stops_before_anyone_takes_over() {
    for seed in 0..20 {
        let mut server = Server::default();
        let mut nodes = [Node::new("a", seed), Node::new("b", seed + 100)];
        run(&mut nodes, &mut server, 0, 2000, |_, _| {});
        assert!(nodes[0].e.is_leader());
        // a's requests hang from now on; it is still running, and must stop by itself.
        nodes[0].partitioned = true;
        let mut a_stopped = None;
        let mut b_started = None;
        run(&mut nodes, &mut server, 2010, 12_000, |t, n| {
            if a_stopped.is_none() && !n[0].e.is_leader() {
                a_stopped = Some(t);
            }
            if b_started.is_none() && n[1].e.is_leader() {
                b_started = Some(t);
            }
        });
        let (a, b) = (a_stopped.unwrap(), b_started.unwrap());
        assert!(a < b, "seed {seed}: a stopped at {a}, b started at {b}");
        assert!(
            nodes[0]
                .events
                .iter()
                .any(|(_, e)| *e == LeaderEvent::StoppedLeading)
        );
        // Healed: a learns b leads and stays a follower.
        nodes[0].partitioned = false;
        run(&mut nodes, &mut server, 12_010, 20_000, |_, _| {});
        assert!(nodes[1].e.is_leader());
        assert_eq!(nodes[0].e.leader(), Some("b"));
    }
}

#[test]
fn leaderelection_06_release_lets_the_standby_take_over_at_its_next_try() {
    let mut server = Server::default();
    let mut nodes = [Node::new("a", 1), Node::new("b", 2)];
    run(&mut nodes, &mut server, 0, 3000, |_, _| {});
    nodes[0].e.release(Instant::from_epoch(ms(3000)));
    assert!(!nodes[0].e.is_leader());
    let (id, req) = nodes[0].e.poll_request().unwrap();
    let LeaseRequest::Update { spec, .. } = &req else {
        panic!("{req:?}")
    };
    assert_eq!(spec.holder_identity, "");
    assert_eq!(spec.lease_duration_seconds, 1);
    let o = server.write(&req, Instant::from_epoch(ms(3000)));
    nodes[0]
        .e
        .handle_write(id, Instant::from_epoch(ms(3000)), o);
    assert_eq!(nodes[0].e.poll_event(), Some(LeaderEvent::StoppedLeading));
    let mut took_over = None;
    run(&mut nodes, &mut server, 3010, 6000, |t, n| {
        if took_over.is_none() && n[1].e.is_leader() {
            took_over = Some(t);
        }
    });
    assert!(took_over.unwrap() <= 3000 + 1100 + 10);
    // The released candidate makes no further attempt.
    assert_eq!(nodes[0].e.poll_timeout(), None);
}

#[test]
fn leaderelection_07_simultaneous_create_one_wins_on_conflict() {
    let mut server = Server::default();
    let mut a = LeaderElector::new(cfg("a", 1)).unwrap();
    let mut b = LeaderElector::new(cfg("b", 2)).unwrap();
    let now = Instant::ZERO;
    a.handle_timeout(now);
    b.handle_timeout(now);
    let (ia, _) = a.poll_request().unwrap();
    let (ib, _) = b.poll_request().unwrap();
    // Both read "absent".
    a.handle_get(ia, now, GetOutcome::NotFound);
    b.handle_get(ib, now, GetOutcome::NotFound);
    let (ia, ra) = a.poll_request().unwrap();
    let (ib, rb) = b.poll_request().unwrap();
    assert!(matches!(ra, LeaseRequest::Create(_)));
    let oa = server.write(&ra, now);
    let ob = server.write(&rb, now);
    assert_eq!(ob, WriteOutcome::Conflict);
    a.handle_write(ia, now, oa);
    b.handle_write(ib, now, ob);
    assert!(a.is_leader());
    assert!(!b.is_leader());
    // b retries after a jittered retry period.
    let t = b.poll_timeout().unwrap();
    assert!(t >= Instant::from_epoch(ms(500)) && t < Instant::from_epoch(ms(1100)));
}

#[test]
fn leaderelection_08_stale_and_abandoned_attempts_are_ignored() {
    let mut e = LeaderElector::new(cfg("a", 1)).unwrap();
    e.handle_timeout(Instant::ZERO);
    let (id, _) = e.poll_request().unwrap();
    // Unanswered for renew_deadline: abandoned, the next attempt follows.
    e.handle_timeout(Instant::from_epoch(ms(3000)));
    assert!(e.poll_request().is_none());
    let next = e.poll_timeout().unwrap();
    e.handle_timeout(next);
    let (id2, req) = e.poll_request().unwrap();
    assert_ne!(id, id2);
    assert_eq!(req, LeaseRequest::Get);
    // The late answer to the first attempt changes nothing.
    e.handle_get(id, next, GetOutcome::NotFound);
    assert!(e.poll_request().is_none());
    e.handle_get(id2, next, GetOutcome::NotFound);
    assert!(matches!(
        e.poll_request(),
        Some((_, LeaseRequest::Create(_)))
    ));
}

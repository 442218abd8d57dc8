//! Simulation tests: CONFORMANCE 25 over many seeds with faults, and a replay entry point.

extern crate std;

use super::*;
use std::println;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// CONFORMANCE 25: after any sequence of creates, updates, deletes, watch drops, compactions
/// (410), relists and injected faults, once the server is quiet the cache equals the server's
/// state and every handler's folded view equals the cache; no handler ever sees an object go
/// back to an older resourceVersion.
///
/// Runs `INFORMER_SIM_SEEDS` seeds (default 1000), starting at `INFORMER_SIM_SEED_BASE`
/// (default 0). A failure names its seed and the command that replays it with a trace.
#[test]
fn conformance_25_sim_many_seeds_converge() {
    let seeds = env_u64(SEEDS_ENV).unwrap_or(1000);
    let base = env_u64("INFORMER_SIM_SEED_BASE").unwrap_or(0);
    let started = std::time::Instant::now();
    let (total, failures) = run_many(base, seeds, 5);
    for f in &failures {
        std::eprintln!("{f}");
    }
    println!(
        "sim: {seeds} seeds (from {base}) in {:.1?}: {total}",
        started.elapsed()
    );
    let failures: Vec<u64> = failures.iter().map(|f| f.seed).collect();
    assert!(
        failures.is_empty(),
        "failing seeds: {failures:?} (replay one: {SEED_ENV}=<seed> cargo test -p informer-core \
         --lib sim::tests::sim_replay_seed -- --nocapture)"
    );
    if seeds >= 200 {
        // The consistency check ran (and agreed) at quiet moments, several times a seed.
        assert!(
            total.consistency_checks >= seeds,
            "{} consistency checks in {seeds} seeds",
            total.consistency_checks
        );
        // The run must actually exercise the faults it claims to.
        for kind in [
            "compaction",
            "list connection refused",
            "list 429",
            "list expired continue",
            "list too large rv",
            "watch connection refused",
            "watch 429",
            "very short watch",
            "watch ERROR 410 at open",
            "watch dropped",
            "watch ERROR 410",
            "watch ERROR 500",
            "streaming list refused",
            "hung watch",
            "hung list",
            "warm restart",
            "warm restart, snapshot compacted",
            "warm restart, snapshot refused",
            "warm restart, objects loaded after start",
            "warm restart, refused after start",
            "restart, no snapshot",
        ] {
            assert!(
                total.faults.get(kind).copied().unwrap_or(0) > 0,
                "never injected: {kind}"
            );
        }
    }
}

/// Replays `INFORMER_SIM_SEED` (default 0) with a full trace printed on failure.
#[test]
fn sim_replay_seed() {
    let seed = env_u64(SEED_ENV).unwrap_or(0);
    let mut cfg = SimConfig::from_seed(seed);
    cfg.trace = env_u64(SEED_ENV).is_some();
    println!("sim replay: {cfg:?}");
    match run_with(cfg) {
        Ok(r) => println!("sim replay: seed {seed} ok: {r:?}"),
        Err(f) => panic!("{f}"),
    }
}

/// The same seed gives the same workload, network and faults. (The order in which the cache
/// hands objects to handlers follows hashbrown's per-process random hasher, so handler timing,
/// and with it step and notification counts, may vary between runs of the same seed.)
#[test]
fn sim_is_deterministic() {
    for seed in [3, 17, 256] {
        let a = run(seed).unwrap();
        let b = run(seed).unwrap();
        assert_eq!(a.mutations, b.mutations);
        assert_eq!(a.lists, b.lists);
        assert_eq!(a.watches, b.watches);
        assert_eq!(a.faults, b.faults);
    }
}

/// Streaming lists against servers that support them and servers that refuse, with faults.
#[test]
fn sim_streaming_list_converges() {
    for seed in 0..60 {
        let mut cfg = SimConfig::from_seed(10_000 + seed);
        cfg.streaming_list = true;
        cfg.server_streaming = seed % 3 != 0;
        if let Err(f) = run_with(cfg) {
            panic!("{f}");
        }
    }
}

/// The sim's consistency check fails a run whose cache holds other content than the server at
/// the same resourceVersion (as a lost or corrupted event would leave it).
#[test]
fn sim_consistency_check_reports_a_divergence() {
    let mut cfg = SimConfig::from_seed(7);
    cfg.mutations = 20;
    let mut sim = Sim::new(cfg);
    sim.run().unwrap();
    assert_eq!(sim.consistency_check(), Ok(true), "agrees once converged");
    let Flight::Watch(w) = &sim.flight else {
        panic!("watching once converged");
    };
    let id = w.id;
    let victim = sim.inf.indexer().list().next().expect("objects").clone();
    let mut bad = (*victim).clone();
    bad.data += 1;
    let now = sim.now;
    sim.inf.handle_input(
        now,
        id,
        protocol::Input::Event(WatchEvent::Modified(Arc::new(bad))),
    );
    let err = sim.consistency_check().unwrap_err();
    assert!(err.contains("1 with other content"), "{err}");
}

//! `cargo xtask bench pod-watch [--compare] [--pods N] [--events N]`: watch throughput on
//! realistic Pods (issue 42, item 4). informer-bench's `pod-watch` runs the status-update events
//! of `--pods` Pods (10,000) as watch lines through decode, the core pipeline and one handler,
//! for `DynamicObject` and `CompactObject`, with the machine's floor (decode and a bare map) and
//! the heap per Pod after the events (`--events`, 1,000,000); with `--compare`, client-go
//! v1.20.2 runs the same bytes (written by `pod-watch` to a file) through its JSON watch decoding
//! and a typed Pod informer (`bench/peers/client-go/podwatch`), and the table sets them side by
//! side: events/s, events per CPU-second (per core: the target is ≥ 8x client-go), the
//! floor, heap per Pod.

use std::env;
use std::process::Command;

use super::{Result, cargo, load_average, peers, run};

pub fn main(args: &[&str]) -> Result {
    let mut compare = false;
    let (mut pods, mut events) = ("10000".to_owned(), "1000000".to_owned());
    let mut it = args.iter();
    while let Some(&a) = it.next() {
        match a {
            "--compare" => compare = true,
            "--pods" | "--events" => {
                let v = it.next().ok_or(format!("{a} takes a number"))?;
                v.parse::<usize>()
                    .map_err(|_| format!("{a} takes a number, not {v:?}"))?;
                if a == "--pods" {
                    pods = (*v).to_owned();
                } else {
                    events = (*v).to_owned();
                }
            }
            _ => return Err(format!("bench pod-watch: unknown argument {a:?}")),
        }
    }
    // Build everything first, so no build runs while a benchmark measures.
    let peer = if compare {
        Some(peers::client_go()?)
    } else {
        None
    };
    let mut c = cargo();
    c.args([
        "build",
        "--release",
        "-q",
        "-p",
        "informer-bench",
        "--bin",
        "pod-watch",
    ]);
    run("build informer-bench's pod-watch (release)", c)?;
    let exe = super::root().join("target/release/pod-watch");

    let id = std::process::id();
    let report = env::temp_dir().join(format!("informer-bench-pod-watch-{id}.jsonl"));
    let lines = env::temp_dir().join(format!("informer-bench-pod-watch-{id}.events"));
    let _ = std::fs::remove_file(&report);
    let load_before = load_average();
    let mut c = Command::new(&exe);
    c.args(["--pods", &pods, "--events", &events, "--report"])
        .arg(&report);
    if compare {
        c.arg("--write-events").arg(&lines);
    }
    let ours = run(
        "informer-rs: Pod status-update watch lines decoded, through the pipeline and one handler",
        c,
    );
    let theirs = match (&ours, peer) {
        (Ok(()), Some(dir)) => {
            let mut c = Command::new(dir.join("podwatch"));
            c.arg("-input")
                .arg(&lines)
                .args(["-pods", &pods, "-events", &events, "-report"])
                .arg(&report);
            Some(run(
                "client-go v1.20.2: the same lines through its JSON watch decoding and a typed Pod informer",
                c,
            ))
        }
        _ => None,
    };
    let _ = std::fs::remove_file(&lines);
    let load_after = load_average();
    let text = std::fs::read_to_string(&report);
    let _ = std::fs::remove_file(&report);
    ours?;
    let Some(theirs) = theirs else {
        return Ok(());
    };
    theirs?;
    let text = text.map_err(|e| format!("{}: {e}", report.display()))?;
    let rows: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["workload"] == "pods")
        .collect();
    print_comparison(&rows, &load_before, &load_after)
}

fn print_comparison(rows: &[serde_json::Value], before: &str, after: &str) -> Result {
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let peer = rows
        .iter()
        .find(|v| v["bench"] == "client-go")
        .ok_or("bench pod-watch --compare: no client-go figures in the report")?;
    let ours: Vec<_> = rows
        .iter()
        .filter(|v| v["bench"] == "informer-rs")
        .collect();
    if ours.is_empty() {
        return Err("bench pod-watch --compare: no informer-rs figures in the report".into());
    }
    let name = |v: &serde_json::Value| {
        if v["bench"] == "client-go" {
            format!(
                "client-go v1.20.2 (GOMAXPROCS {})",
                v["gomaxprocs"].as_u64().unwrap_or(0)
            )
        } else {
            format!("informer-rs, {}", v["object"].as_str().unwrap_or("?"))
        }
    };
    println!(
        "\nPod watch, same run: {} realistic Pods ({:.0} bytes of JSON each, managedFields \
         included), {} MODIFIED status-update events, decode + cache + one handler\n\
         load average (1/5/15 min) before: {before}; after: {after}",
        f(peer, "pods"),
        f(peer, "json_bytes"),
        f(peer, "events")
    );
    println!(
        "{:<36} {:>11} {:>14} {:>13} {:>13} {:>10}",
        "", "events/s", "events/CPU-s", "heap/Pod B", "after list B", "x JSON"
    );
    for v in ours.iter().copied().chain([peer]) {
        println!(
            "{:<36} {:>11.0} {:>14.0} {:>13.0} {:>13.0} {:>10.2}",
            name(v),
            f(v, "events") / f(v, "wall_s"),
            f(v, "events") / f(v, "cpu_s"),
            f(v, "heap_per_pod_events"),
            f(v, "heap_per_pod_list"),
            f(v, "heap_per_pod_events") / f(v, "json_bytes"),
        );
    }
    let peer_cpu = f(peer, "events") / f(peer, "cpu_s");
    let peer_wall = f(peer, "events") / f(peer, "wall_s");
    for v in &ours {
        let cpu = f(v, "events") / f(v, "cpu_s");
        println!(
            "{} / client-go: {:.1}x events per CPU-second (target >= 8x: {}), {:.1}x events/s, \
             {:.2}x heap per Pod after the events",
            name(v),
            cpu / peer_cpu,
            if cpu / peer_cpu >= 8.0 {
                "met"
            } else {
                "not met"
            },
            (f(v, "events") / f(v, "wall_s")) / peer_wall,
            f(v, "heap_per_pod_events") / f(peer, "heap_per_pod_events"),
        );
        let floor = f(v, "events") / f(v, "floor_s");
        println!(
            "  floor with {} (the same lines decoded, a bare map): {:.0} events/s = {:.1}x \
             client-go; informer-rs reached {:.0}% of it",
            v["object"].as_str().unwrap_or("?"),
            floor,
            floor / peer_wall,
            100.0 * (f(v, "events") / f(v, "wall_s")) / floor
        );
    }
    println!(
        "events/s: events over the wall time of the timed parts (lines built outside them, in \
         chunks of 20,000).\n\
         events/CPU-s: informer-rs runs on one thread (getrusage of the process); client-go \
         decodes in its StreamWatcher's goroutine and runs its reflector, FIFO loop and handler \
         in others, on every core: its CPU time is the whole process's (every thread, GC \
         included), so this is the per-core figure.\n\
         heap/Pod: informer-rs: a counting allocator, what the store, its index and the objects \
         hold, over the Pods; client-go: HeapAlloc after two forced collections, less the same \
         before the list; 'after list' is the same after the initial list."
    );
    Ok(())
}

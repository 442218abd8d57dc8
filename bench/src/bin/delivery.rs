//! `cargo run --release -p informer-bench --bin delivery`: how fast notifications reach an
//! [`EventHandler`](informer_tokio::EventHandler) on tokio, with no cluster. A scripted
//! transport lists `--objects N` ConfigMaps (default 20,000), then streams `--events M`
//! watch updates of them (default 200,000, round-robin over the objects); one handler counts.
//!
//! Printed, per run (`--runs R`, default 3), one line each:
//!
//! - `sync`: wall and process CPU milliseconds from `start` to the handler's sync (every
//!   initial add run);
//! - `events`: wall and process CPU milliseconds from the sync until every event is applied
//!   and the handler idle, the notifications it ran, and CPU nanoseconds per event.
//!
//! Built with the `metrics` feature (`--features metrics`) the Prometheus recorder is installed
//! first (as `Admin::new` does for the admin server), so every counter, gauge and histogram of
//! the informer and its handler is recorded; a last line, `summary:`, gives the runs' median
//! events wall and CPU figures for `cargo xtask bench core` to set the two builds side by side.
//!
//! It measures the runtime's delivery (the driver's hand-over, the handler's batches, the lock)
//! more than the core, whose figures `cargo xtask bench core` prints. The process has the
//! machine's other work beside it: compare runs of one invocation.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use informer_bench::{Script, Usage, page};
use informer_tokio::core::protocol::WatchEvent;
use informer_tokio::{DynamicObject, HandlerFns, Informer, InformerBuilder, Tokio};

fn config_map(i: usize, rv: usize) -> Arc<DynamicObject> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i}"), "namespace": "bench",
                         "resourceVersion": rv.to_string()},
            "data": {"key": "value"}
        }))
        .expect("a ConfigMap"),
    )
}

fn arg(name: &str, default: usize) -> usize {
    informer_bench::arg_value(name)
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
        .unwrap_or(default)
}

fn cpu_ms(a: &Usage, b: &Usage) -> f64 {
    (b.user_s + b.sys_s - a.user_s - a.sys_s) * 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (objects, events, runs) = (
        arg("--objects", 20_000),
        arg("--events", 200_000),
        arg("--runs", 3),
    );
    let rt = tokio::runtime::Runtime::new()?;
    #[cfg(feature = "metrics")]
    let admin = informer_tokio::Admin::new(([127, 0, 0, 1], 0));
    println!(
        "delivery: {objects} objects listed, then {events} watch updates; one handler; metrics {}",
        if cfg!(feature = "metrics") {
            "exported (Prometheus recorder)"
        } else {
            "feature off"
        }
    );
    let (mut walls, mut cpus) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        let items: Vec<_> = (0..objects).map(|i| config_map(i, 1)).collect();
        let watch: Vec<_> = (0..events)
            .map(|j| WatchEvent::Modified(config_map(j % objects, 2 + j)))
            .collect();
        let last_rv = (1 + events).to_string();
        let ran = Arc::new(AtomicUsize::new(0));
        let (on_add, on_update) = (ran.clone(), ran.clone());
        rt.block_on(async {
            let (tx, rx) = async_channel::unbounded();
            for event in watch {
                tx.try_send(event)?;
            }
            let transport = Arc::new(Script::new([page(items, "1")], [rx]));
            let informer: Informer<DynamicObject> =
                InformerBuilder::from_transport(Tokio::default(), transport, "bench").build()?;
            let handler = informer.add_handler(
                HandlerFns::new()
                    .on_add(move |_, _| {
                        on_add.fetch_add(1, Ordering::Relaxed);
                    })
                    .on_update(move |_, _| {
                        on_update.fetch_add(1, Ordering::Relaxed);
                    }),
            )?;
            let (u0, t0) = (Usage::now(), Instant::now());
            informer.start()?;
            handler.wait_for_sync(None).await?;
            let (u1, t1) = (Usage::now(), Instant::now());
            let synced = ran.load(Ordering::Relaxed);
            // Every event applied, and the handler idle: nothing delivered for a while.
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
                if informer.last_sync_resource_version() != last_rv {
                    continue;
                }
                let seen = handler.delivered();
                tokio::time::sleep(Duration::from_millis(20)).await;
                if handler.delivered() == seen {
                    break;
                }
            }
            let (u2, t2) = (Usage::now(), Instant::now());
            walls.push((t2 - t1).as_secs_f64() * 1e3 - 20.0);
            cpus.push(cpu_ms(&u1, &u2));
            let notified = ran.load(Ordering::Relaxed) - synced;
            println!(
                "run {run}: sync wall {:.1} ms cpu {:.1} ms; events wall {:.1} ms cpu {:.1} ms, \
                 {notified} notifications run, {:.0} ns cpu/event",
                (t1 - t0).as_secs_f64() * 1e3,
                cpu_ms(&u0, &u1),
                (t2 - t1).as_secs_f64() * 1e3 - 20.0,
                cpu_ms(&u1, &u2),
                cpu_ms(&u1, &u2) * 1e6 / events as f64,
            );
            informer.shutdown().await;
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
    }
    #[cfg(feature = "metrics")]
    {
        // The exporter saw every notification: the figures above include the recording.
        let scrape = admin.respond("GET", "/metrics").body;
        let delivered: f64 = scrape
            .lines()
            .filter(|l| l.starts_with("informer_handler_delivered_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        println!("exported informer_handler_delivered_total: {delivered}");
        if delivered < (runs * events) as f64 {
            return Err("the Prometheus recorder did not see the notifications".into());
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "summary: events={events} wall_ms={:.1} cpu_ms={:.1}",
        median(&mut walls),
        median(&mut cpus)
    );
    Ok(())
}

//! An informer of every ConfigMap on smol: prints its sync figures, then waits for
//! `--updates` updates (see the `informer_bench` crate docs). `sync-tokio` is the same program
//! on tokio.

use informer_bench::{Run, format_figures, strip_managed_fields};
use informer_smol::{Config, DynamicObject, HandlerFns, Informer, Resource, SnapshotLoad, client};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::start();
    let informer = smol::block_on(async {
        let client = client(Config::infer()?)?;
        let mut builder = Informer::<DynamicObject>::builder_for(&client, Resource::CONFIGMAPS);
        if run.strip_managed_fields {
            builder = builder.transform(strip_managed_fields);
        }
        if let Some(path) = &run.snapshot {
            builder = builder.snapshot(path);
        }
        let informer = builder.build()?;
        run.mark("client and informer built");
        let handler = informer.add_handler(HandlerFns::new().on_update(run.count_updates()))?;
        informer.start()?;
        run.mark("started");
        handler.wait_for_sync(Some(run.timeout)).await?;
        Ok::<_, Box<dyn std::error::Error>>(informer)
    })?;
    run.mark("synced");
    run.synced(informer.store().len());
    run.wait_for_updates()?;
    if let Some(path) = &run.snapshot {
        let (load, bytes) = match informer.snapshot_load() {
            Some(SnapshotLoad::Resumed { bytes, .. }) => ("resumed".to_string(), bytes),
            other => (format!("{other:?}").replace('"', "'"), 0),
        };
        run.resumed(&load, bytes, informer.metrics().lists);
        let t = std::time::Instant::now();
        smol::block_on(informer.write_snapshot())?;
        format_figures(&informer.store().list(), path, t.elapsed().as_secs_f64());
    }
    smol::block_on(informer.shutdown());
    Ok(())
}

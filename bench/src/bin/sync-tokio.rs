//! An informer of every ConfigMap on tokio: prints its sync figures, then waits for
//! `--updates` updates (see the `informer_bench` crate docs). `sync-smol` is the same program
//! on smol. With `--metadata-only` the informer caches `PartialObjectMetadata` (the server
//! sends metadata only).

use std::time::Duration;

use informer_bench::{Run, format_figures, strip_managed_fields};
use informer_tokio::{
    Config, DynamicObject, HandlerFns, Informer, PartialObjectMetadata, Resource, SnapshotLoad,
    client,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::start();
    let rt = tokio::runtime::Runtime::new()?;
    if run.metadata_only {
        return metadata_only(&run, &rt);
    }
    let informer = rt.block_on(async {
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
        rt.block_on(informer.write_snapshot())?;
        format_figures(&informer.store().list(), path, t.elapsed().as_secs_f64());
    }
    rt.block_on(informer.shutdown());
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// `--metadata-only`: the same informer of `PartialObjectMetadata` (the server sends metadata
/// only, no `data`).
fn metadata_only(
    run: &Run,
    rt: &tokio::runtime::Runtime,
) -> Result<(), Box<dyn std::error::Error>> {
    let informer = rt.block_on(async {
        let client = client(Config::infer()?)?;
        let informer =
            Informer::<PartialObjectMetadata>::builder_for(&client, Resource::CONFIGMAPS)
                .build()?;
        let handler = informer.add_handler(HandlerFns::new().on_update(run.count_updates()))?;
        informer.start()?;
        handler.wait_for_sync(Some(run.timeout)).await?;
        Ok::<_, Box<dyn std::error::Error>>(informer)
    })?;
    run.synced(informer.store().len());
    run.wait_for_updates()?;
    rt.block_on(informer.shutdown());
    Ok(())
}

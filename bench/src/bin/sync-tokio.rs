//! An informer of every ConfigMap on tokio: prints its sync figures, then waits for
//! `--updates` updates (see the `informer_bench` crate docs). `sync-smol` is the same program
//! on smol.

use std::time::Duration;

use informer_bench::{Run, strip_managed_fields};
use informer_tokio::{Config, DynamicObject, HandlerFns, Informer, Resource, client};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::start();
    let rt = tokio::runtime::Runtime::new()?;
    let informer = rt.block_on(async {
        let client = client(Config::infer()?)?;
        let mut builder = Informer::<DynamicObject>::builder_for(&client, Resource::CONFIGMAPS);
        if run.strip_managed_fields {
            builder = builder.transform(strip_managed_fields);
        }
        let informer = builder.build()?;
        let handler = informer.add_handler(HandlerFns::new().on_update(run.count_updates()))?;
        informer.start()?;
        handler.wait_for_sync(Some(run.timeout)).await?;
        Ok::<_, Box<dyn std::error::Error>>(informer)
    })?;
    run.synced(informer.store().len());
    run.wait_for_updates()?;
    rt.block_on(informer.shutdown());
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

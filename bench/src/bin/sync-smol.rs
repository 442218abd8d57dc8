//! An informer of every ConfigMap on smol: prints its sync figures, then waits for
//! `--updates` updates (see the `informer_bench` crate docs). `sync-tokio` is the same program
//! on tokio.

use informer_bench::Run;
use informer_smol::{Config, DynamicObject, HandlerFns, Informer, Resource, client};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::start();
    let informer = smol::block_on(async {
        let client = client(Config::infer()?)?;
        let informer = Informer::<DynamicObject>::builder(&client, Resource::CONFIGMAPS).build()?;
        let handler = informer.add_handler(HandlerFns::new().on_update(run.count_updates()))?;
        informer.start()?;
        handler.wait_for_sync(Some(run.timeout)).await?;
        Ok::<_, Box<dyn std::error::Error>>(informer)
    })?;
    run.synced(informer.store().len());
    run.wait_for_updates()?;
    smol::block_on(informer.shutdown());
    Ok(())
}

//! `shard-member`: one member process of a sharded controller, for `cargo xtask bench shard`.
//!
//! A `Controller` of the ConfigMaps of `--namespace` (tokio, `DynamicObject`), sharded in the
//! mode `--mode` (`labels`, the default, `filter` or `buckets`) on the ring `--ring` (member name
//! `--label` plus random digits, Lease duration `--lease-duration` seconds, renew deadline ⅔ of
//! it, retry period 2 s or less, `--writes-in-flight` sharder writes at once, 16 by default):
//! in the labels mode its informer watches only the objects labelled with its shard, in the
//! filter mode all of them; its reconcile counts and returns `Done`.
//!
//! Every `--every-ms` (default 100) it prints one JSON line:
//!
//! ```text
//! {"event":"status","member":"m0-1a2b3c4d","cached":5000,"owned":5000,"table":0,
//!  "working":true,"sharder":false,
//!  "writes":0,"reconciles":5000,"cpu_user_s":1.2,"cpu_sys_s":0.1,"rss_kb":41000,"hwm_kb":52000}
//! ```
//!
//! `owned`: the cached objects this member owns now (in the filter mode, its share of the
//! cache); `table`: the table version it applied (filter mode). `writes` is this member's
//! sharder writes (labels, drains, relabels; tables) so far. It runs until
//! killed (the bench kills it with SIGKILL) or until its Lease is lost (exit status 3).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use informer_bench::Usage;
use informer_tokio::{
    Action, Config, Controller, DynamicObject, Resource, ShardConfig, ShardMode, ShardScope,
    client, member_name, sharding,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |name: &str, default: &str| {
        informer_bench::arg_value(name).unwrap_or_else(|| default.to_string())
    };
    let ring = arg("--ring", "bench");
    let ns = arg("--namespace", "shard-bench");
    let label = arg("--label", "m");
    let lease: f64 = arg("--lease-duration", "15").parse()?;
    let every = Duration::from_millis(arg("--every-ms", "100").parse()?);
    let mode = match arg("--mode", "labels").as_str() {
        "labels" => ShardMode::Labels,
        "filter" => ShardMode::Filter,
        "buckets" => ShardMode::Buckets,
        m => return Err(format!("--mode {m}: labels, filter or buckets").into()),
    };
    let writes_in_flight: usize = arg("--writes-in-flight", "16").parse()?;
    let lease = Duration::from_secs_f64(lease);
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let client = client(Config::infer()?)?;
        let name = member_name(&label);
        let sc = ShardConfig {
            mode,
            writes_in_flight,
            lease_duration: lease,
            renew_deadline: lease * 2 / 3,
            retry_period: (lease / 5).min(Duration::from_secs(2)),
            ..ShardConfig::new(ring, name.clone())
        };
        let sh = sharding(
            &client,
            &ns,
            sc,
            Resource::CONFIGMAPS,
            Vec::new(),
            ShardScope::namespace(&ns),
        )?;
        let mut b =
            informer_tokio::Informer::<DynamicObject>::builder_for(&client, Resource::CONFIGMAPS)
                .namespace(&ns);
        if let Some(sel) = sh.label_selector() {
            b = b.label_selector(sel);
        }
        let informer = b.build()?;
        let store = informer.store();
        let reconciles = Arc::new(AtomicU64::new(0));
        let (sh2, r2) = (sh.clone(), reconciles.clone());
        tokio::spawn(async move {
            // The objects this member owns (filter mode: its cache holds every object),
            // counted again when the table or the cache changed.
            let mut owned = (u64::MAX, usize::MAX, false, 0usize);
            loop {
                let u = Usage::now();
                let (v, n, w) = (sh2.table_version(), store.len(), sh2.is_working());
                if (v, n, w) != (owned.0, owned.1, owned.2) {
                    let c = store.list().iter().filter(|o| sh2.owns(o.as_ref())).count();
                    owned = (v, n, w, c);
                }
                println!(
                    "{{\"event\":\"status\",\"member\":\"{name}\",\"cached\":{},\"owned\":{},\
                     \"table\":{},\"working\":{},\"sharder\":{},\"writes\":{},\"reconciles\":{},\"cpu_user_s\":{:.4},\
                     \"cpu_sys_s\":{:.4},\"rss_kb\":{},\"hwm_kb\":{}}}",
                    n,
                    owned.3,
                    v,
                    w,
                    sh2.is_sharder(),
                    sh2.sharder_writes(),
                    r2.load(Ordering::Relaxed),
                    u.user_s,
                    u.sys_s,
                    u.rss_kb,
                    u.hwm_kb
                );
                tokio::time::sleep(every).await;
            }
        });
        let r = Controller::new(&client, informer)
            .concurrency(4)
            .shard(sh)
            .run(move |_obj: Arc<DynamicObject>, _ctx| {
                reconciles.fetch_add(1, Ordering::Relaxed);
                async { Ok::<_, String>(Action::Done) }
            })
            .await;
        if let Err(e) = r {
            eprintln!("shard-member: {e}");
            std::process::exit(3);
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

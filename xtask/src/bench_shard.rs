//! `cargo xtask bench shard`: one controller sharded over 1 to 4 member processes (labels
//! mode by default, `--mode filter` or `--mode buckets` for the others; issue 43) against a
//! real kube-apiserver v1.20.2 + etcd.
//!
//! 1. Starts a fresh cluster and creates `--objects` ConfigMaps (20,000 by default, ~1 KB each,
//!    `bench e2e`'s) in the namespace `shard-bench`, `--writers` at a time.
//! 2. For each member count in `--members` (default `1,2,3,4`), on a ring of its own
//!    (`bench-<k>`, so every run starts from unlabelled objects): starts k `shard-member`
//!    processes (informer-bench, release) at once and waits until the ring has converged: every
//!    member working and the members' shares add up to the object count, steadily for
//!    `STEADY` (a share: the member's cache in the labels and buckets modes, where each
//!    watches only its own shard's or buckets' label; the cached objects it owns in the filter
//!    mode, where each caches everything). Then, per member: cached objects, RSS, CPU spent until then, and CPU over
//!    the next 5 s (the idle cost of a converged member); the writes the sharder made to
//!    converge.
//! 3. With k ≥ 2: SIGKILL to one member process that is not the sharder (its Lease is left to
//!    expire), and the time until the survivors' shares add up to every object again
//!    (measured from the kill to the first instant of a state that then held for `STEADY`),
//!    with the sharder's writes for it (relabels; tables in the filter and buckets modes).
//! 4. The process's floor: one member over a namespace with no objects (its RSS once working
//!    for 3 s), and what it allows of the RSS target even with a sharder that cost nothing.
//!    Labels mode: the floor of a reassignment, measured last: as many bare label patches as
//!    the largest reassignment wrote, `--writes-in-flight` at once (the sharder's window, 16 by
//!    default), from this process.
//! 5. Prints the table, per-member RSS at the largest member count against one member's (the
//!    issue's target: ≤ 0.3×, labels mode), each reassignment against the Lease duration + 2 s
//!    (the target: ≤ 1×) and, in the labels mode, the floor (the Lease duration + the patches'
//!    time) against it, with the load average before and after.
//!
//! The members are separate processes: RSS and CPU are each process's own (`VmRSS`,
//! `getrusage`), the kill is a real `kill -9`. All of them, the cluster and this process
//! share the machine: the load average says how busy it was.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use testcluster::TestCluster;

use crate::bench_e2e::{Api, configmap, lines_of, parallel};

const USAGE: &str = "usage: cargo xtask bench shard [--objects N] [--members N,N,...] \
                     [--lease-duration SECONDS] [--writers N] [--mode labels|filter|buckets] \
                     [--writes-in-flight N]\n";

/// How long a converged state must hold before it counts.
const STEADY: Duration = Duration::from_secs(3);
const NS: &str = "shard-bench";

struct Options {
    objects: usize,
    members: Vec<usize>,
    lease_s: f64,
    writers: usize,
    /// `labels` or `filter`.
    mode: String,
    /// The sharder's object writes at once (labels mode), and the floor's patches at once.
    in_flight: usize,
}

fn parse(args: &[&str]) -> Result<Options, String> {
    let mut o = Options {
        objects: 20_000,
        members: vec![1, 2, 3, 4],
        lease_s: 15.0,
        writers: 16,
        mode: "labels".into(),
        in_flight: 16,
    };
    let mut args = args.iter();
    let num = |v: Option<&&str>, what: &str| -> Result<usize, String> {
        v.ok_or(USAGE)?
            .replace('_', "")
            .parse::<usize>()
            .map_err(|e| format!("{what}: {e}\n{USAGE}"))
    };
    while let Some(a) = args.next() {
        match *a {
            "--objects" => o.objects = num(args.next(), "--objects")?,
            "--writers" => o.writers = num(args.next(), "--writers")?.max(1),
            "--writes-in-flight" => o.in_flight = num(args.next(), "--writes-in-flight")?.max(1),
            "--mode" => match args.next().copied() {
                Some(m @ ("labels" | "filter" | "buckets")) => o.mode = m.to_string(),
                m => return Err(format!("--mode {m:?}: labels, filter or buckets\n{USAGE}")),
            },
            "--lease-duration" => {
                let v = args.next().ok_or(USAGE)?;
                o.lease_s = v
                    .parse()
                    .map_err(|e| format!("--lease-duration {v}: {e}\n{USAGE}"))?;
            }
            "--members" => {
                let v = args.next().ok_or(USAGE)?;
                o.members = v
                    .split(',')
                    .map(|n| n.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("--members {v}: {e}\n{USAGE}"))?;
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if o.objects == 0 || o.members.is_empty() || o.members.contains(&0) || o.lease_s < 1.0 {
        return Err(format!(
            "--objects and --members need values above 0, --lease-duration 1 s or more\n{USAGE}"
        ));
    }
    Ok(o)
}

/// Builds `shard-member` (informer-bench, release); its executable.
fn build_member() -> Result<PathBuf, String> {
    super::build_release(
        "build the shard-member client (informer-bench, release)",
        &["-p", "informer-bench", "--bin", "shard-member"],
        "shard-member",
    )
}

/// A running member process and its latest status line.
struct Proc {
    child: Child,
    latest: Arc<Mutex<Option<Value>>>,
    alive: bool,
}

impl Proc {
    fn status(&self) -> Option<Value> {
        self.latest.lock().unwrap().clone()
    }
}

fn spawn(
    bin: &PathBuf,
    cluster: &TestCluster,
    ring: &str,
    i: usize,
    o: &Options,
) -> Result<Proc, String> {
    spawn_in(bin, cluster, ring, NS, i, o)
}

fn spawn_in(
    bin: &PathBuf,
    cluster: &TestCluster,
    ring: &str,
    ns: &str,
    i: usize,
    o: &Options,
) -> Result<Proc, String> {
    // `INFORMER_BENCH_WRAP` (a command and its arguments, split on spaces) runs each member
    // under it, e.g. `heaptrack -o /tmp/shard-member` to profile the members' heaps.
    let wrap: Vec<String> = std::env::var("INFORMER_BENCH_WRAP")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    let mut cmd = match wrap.split_first() {
        Some((prog, args)) => {
            let mut c = Command::new(prog);
            c.args(args).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let mut child = cmd
        .args([
            "--ring",
            ring,
            "--namespace",
            ns,
            "--label",
            &format!("m{i}"),
        ])
        .args(["--lease-duration", &o.lease_s.to_string()])
        .args(["--mode", &o.mode])
        .args(["--writes-in-flight", &o.in_flight.to_string()])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting shard-member: {e}"))?;
    let lines = lines_of(&mut child);
    let latest: Arc<Mutex<Option<Value>>> = Arc::default();
    let l2 = latest.clone();
    std::thread::spawn(move || {
        for line in lines {
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && v["event"] == "status"
            {
                *l2.lock().unwrap() = Some(v);
            }
        }
    });
    Ok(Proc {
        child,
        latest,
        alive: true,
    })
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

fn cpu(v: &Value) -> f64 {
    f(v, "cpu_user_s") + f(v, "cpu_sys_s")
}

/// Whether the live members are all working and their shares add up to `n` objects: their
/// caches in the labels mode (each watches only its shard), the objects they own in the filter
/// mode (each caches everything).
fn converged(procs: &[Proc], n: usize, share: &str) -> bool {
    let mut sum = 0;
    for p in procs.iter().filter(|p| p.alive) {
        let Some(s) = p.status() else { return false };
        if s["working"] != true {
            return false;
        }
        sum += s[share].as_u64().unwrap_or(0) as usize;
    }
    sum == n
}

/// Sharder writes of every member so far (a killed member's last report included).
fn writes(procs: &[Proc]) -> u64 {
    procs
        .iter()
        .filter_map(|p| p.status())
        .map(|s| s["writes"].as_u64().unwrap_or(0))
        .sum()
}

/// Waits until [`converged`] has held for [`STEADY`]; the instant it started holding.
fn wait_converged(
    procs: &mut [Proc],
    n: usize,
    share: &str,
    limit: Duration,
) -> Result<Instant, String> {
    let t0 = Instant::now();
    let mut since: Option<Instant> = None;
    loop {
        for p in procs.iter_mut().filter(|p| p.alive) {
            if let Ok(Some(st)) = p.child.try_wait() {
                return Err(format!("a member exited: {st}"));
            }
        }
        if converged(procs, n, share) {
            let s = *since.get_or_insert_with(Instant::now);
            if s.elapsed() >= STEADY {
                return Ok(s);
            }
        } else {
            since = None;
        }
        if t0.elapsed() > limit {
            let seen: Vec<String> = procs
                .iter()
                .filter(|p| p.alive)
                .filter_map(|p| p.status())
                .map(|s| {
                    format!(
                        "{} cached {} owned {} working {}",
                        s["member"], s["cached"], s["owned"], s["working"]
                    )
                })
                .collect();
            return Err(format!("not converged in {limit:?}: {seen:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One member's figures once its ring converged.
struct MemberRow {
    cached: u64,
    sharder: bool,
    rss_mb: f64,
    cpu_s: f64,
    idle_cpu_pct: f64,
}

/// One member count's figures.
struct Run {
    members: usize,
    converge_s: f64,
    writes: u64,
    rows: Vec<MemberRow>,
    /// Seconds from the kill to full reassignment, to the sharder's first write after it,
    /// and the sharder's writes for it.
    reassign: Option<(f64, f64, u64)>,
}

fn one_run(bin: &PathBuf, cluster: &TestCluster, k: usize, o: &Options) -> Result<Run, String> {
    let ring = format!("bench-{k}");
    eprintln!("\n==> {k} member(s), ring {ring}, {} objects", o.objects);
    let t0 = Instant::now();
    let mut procs = Vec::new();
    for i in 0..k {
        procs.push(spawn(bin, cluster, &ring, i, o)?);
    }
    let result = (|| -> Result<Run, String> {
        let share = if o.mode == "filter" {
            "owned"
        } else {
            "cached"
        };
        let at = wait_converged(&mut procs, o.objects, share, Duration::from_secs(900))?;
        let converge_s = (at - t0).as_secs_f64();
        let writes_converged = writes(&procs);
        let first: Vec<Value> = procs.iter().filter_map(|p| p.status()).collect();
        std::thread::sleep(Duration::from_secs(5));
        let second: Vec<Value> = procs.iter().filter_map(|p| p.status()).collect();
        let rows: Vec<MemberRow> = first
            .iter()
            .zip(&second)
            .map(|(a, b)| MemberRow {
                cached: a["cached"].as_u64().unwrap_or(0),
                sharder: a["sharder"] == true,
                rss_mb: f(a, "rss_kb") / 1024.0,
                cpu_s: cpu(a),
                idle_cpu_pct: (cpu(b) - cpu(a)) / 5.0 * 100.0,
            })
            .collect();
        for (r, s) in rows.iter().zip(&first) {
            eprintln!(
                "    {}{}: {} cached, {} owned, RSS {:.1} MB, CPU {:.2} s",
                s["member"].as_str().unwrap_or("?"),
                if r.sharder { " (sharder)" } else { "" },
                r.cached,
                s["owned"],
                r.rss_mb,
                r.cpu_s
            );
        }
        eprintln!("    converged in {converge_s:.1} s, {writes_converged} sharder writes");
        let mut reassign = None;
        if k >= 2 {
            let victim = second
                .iter()
                .position(|s| s["sharder"] != true)
                .ok_or("no member other than the sharder")?;
            let before = writes(&procs);
            let killed = Instant::now();
            procs[victim]
                .child
                .kill()
                .map_err(|e| format!("kill -9: {e}"))?;
            let _ = procs[victim].child.wait();
            procs[victim].alive = false;
            let limit = Duration::from_secs_f64(o.lease_s * 4.0 + 300.0);
            // The sharder's first write after the kill: it has seen the Lease expire.
            while writes(&procs) == before && killed.elapsed() < limit {
                std::thread::sleep(Duration::from_millis(20));
            }
            let first = killed.elapsed().as_secs_f64();
            let at = wait_converged(&mut procs, o.objects, share, limit)?;
            let took = (at.max(killed) - killed).as_secs_f64();
            let w = writes(&procs) - before;
            eprintln!(
                "    kill -9 of member {victim}: the sharder's first write after {first:.1} s, \
                 reassigned in {took:.1} s ({w} sharder writes)"
            );
            reassign = Some((took, first, w));
        }
        Ok(Run {
            members: k,
            converge_s,
            writes: writes_converged,
            rows,
            reassign,
        })
    })();
    for p in &mut procs {
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
    result
}

pub fn main(args: &[&str]) -> super::Result {
    let o = parse(args)?;
    let bin = build_member()?;
    testcluster::ensure_built().map_err(|e| e.to_string())?;
    eprintln!("\n==> local kube-apiserver + etcd");
    let cluster = TestCluster::start().map_err(|e| e.to_string())?;
    let api = Api::new(&cluster)?;
    eprintln!(
        "==> creating {} ConfigMaps (~1 KB) in {NS}, {} writers",
        o.objects, o.writers
    );
    api.send(
        "POST",
        "/api/v1/namespaces",
        &format!(r#"{{"metadata":{{"name":"{NS}"}}}}"#),
    )?;
    let t = Instant::now();
    parallel(o.objects, o.writers, |i| {
        api.send(
            "POST",
            &format!("/api/v1/namespaces/{NS}/configmaps"),
            &configmap(i),
        )
    })?;
    eprintln!(
        "    {:.1} s ({:.0} objects/s)",
        t.elapsed().as_secs_f64(),
        o.objects as f64 / t.elapsed().as_secs_f64()
    );
    let load_before = super::load_average();
    let mut runs = Vec::new();
    for &k in &o.members {
        runs.push(one_run(&bin, &cluster, k, &o)?);
    }
    // The floor of the labels mode's reassignment: as many bare patches as the most a
    // reassignment wrote, `--writes-in-flight` at once, straight from this process.
    let most = runs
        .iter()
        .filter_map(|r| r.reassign.map(|(_, _, w)| w as usize))
        .max()
        .unwrap_or(0)
        .min(o.objects);
    let idle = idle_member(&bin, &cluster, &api, &o).unwrap_or_else(|e| {
        eprintln!("    {e}");
        f64::NAN
    });
    let floor = if o.mode == "labels" && most > 0 {
        eprintln!("\n==> {most} bare label patches, {} at once", o.in_flight);
        let t = Instant::now();
        parallel(most, o.in_flight, |i| {
            api.patch(
                &format!("/api/v1/namespaces/{NS}/configmaps/cm-{i}"),
                &format!(r#"{{"metadata":{{"labels":{{"floor":"{i}"}}}}}}"#),
            )
        })?;
        Some((most, t.elapsed().as_secs_f64()))
    } else {
        None
    };
    print(&runs, &o, &load_before, &super::load_average(), floor, idle);
    Ok(())
}

/// The process's floor: the RSS of one member (the sharder of its ring) over a namespace with
/// no objects, once it has worked for 3 s.
fn idle_member(
    bin: &PathBuf,
    cluster: &TestCluster,
    api: &Api,
    o: &Options,
) -> Result<f64, String> {
    const EMPTY: &str = "shard-empty";
    eprintln!("\n==> one member over no objects (namespace {EMPTY})");
    api.send(
        "POST",
        "/api/v1/namespaces",
        &format!(r#"{{"metadata":{{"name":"{EMPTY}"}}}}"#),
    )?;
    let mut p = spawn_in(bin, cluster, "bench-empty", EMPTY, 0, o)?;
    let t0 = Instant::now();
    let rss = loop {
        if let Ok(Some(st)) = p.child.try_wait() {
            break Err(format!("the idle member exited: {st}"));
        }
        if let Some(s) = p.status()
            && s["working"] == true
            && s["sharder"] == true
        {
            std::thread::sleep(Duration::from_secs(3));
            break p
                .status()
                .map(|s| f(&s, "rss_kb") / 1024.0)
                .ok_or_else(|| "no status".to_string());
        }
        if t0.elapsed() > Duration::from_secs(120) {
            break Err("the idle member did not work within 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = p.child.kill();
    let _ = p.child.wait();
    let rss = rss?;
    eprintln!("    RSS {rss:.1} MB");
    Ok(rss)
}

fn print(
    runs: &[Run],
    o: &Options,
    before: &str,
    after: &str,
    floor: Option<(usize, f64)>,
    idle: f64,
) {
    println!(
        "\nbench shard: {} ConfigMaps (~1 KB), {} mode, member processes (shard-member), \
         Lease duration {} s, {} sharder writes in flight",
        o.objects, o.mode, o.lease_s, o.in_flight
    );
    println!("load average before {before}, after {after}\n");
    println!(
        "{:>7} {:>10} {:>8}  {:>7} {:>7} {:>7}  {:>7} {:>7}  {:>8} {:>9} {:>8}",
        "members",
        "converge s",
        "writes",
        "cached",
        "min",
        "max",
        "RSS MB",
        "max MB",
        "CPU s",
        "idle CPU%",
        "sharder"
    );
    for r in runs {
        let n = r.rows.len() as f64;
        let mean = |g: fn(&MemberRow) -> f64| r.rows.iter().map(g).sum::<f64>() / n;
        let max = |g: fn(&MemberRow) -> f64| r.rows.iter().map(g).fold(f64::MIN, f64::max);
        let min = |g: fn(&MemberRow) -> f64| r.rows.iter().map(g).fold(f64::MAX, f64::min);
        let sharder = r.rows.iter().find(|m| m.sharder);
        println!(
            "{:>7} {:>10.1} {:>8}  {:>7.0} {:>7.0} {:>7.0}  {:>7.1} {:>7.1}  {:>8.2} {:>9.1} {:>8}",
            r.members,
            r.converge_s,
            r.writes,
            mean(|m| m.cached as f64),
            min(|m| m.cached as f64),
            max(|m| m.cached as f64),
            mean(|m| m.rss_mb),
            max(|m| m.rss_mb),
            mean(|m| m.cpu_s),
            mean(|m| m.idle_cpu_pct),
            sharder.map_or("-".into(), |s| format!("{:.1} MB", s.rss_mb)),
        );
    }
    println!("\n(cached, RSS and CPU s: per member, mean; CPU s: spent until converged;");
    println!(" idle CPU%: over the 5 s after; sharder: the sharder member's RSS)");
    if let (Some(one), Some(most)) = (
        runs.iter().find(|r| r.members == 1),
        runs.iter().max_by_key(|r| r.members),
    ) && most.members > 1
    {
        let one_rss = one.rows[0].rss_mb;
        let n = most.rows.len() as f64;
        let mean = most.rows.iter().map(|m| m.rss_mb).sum::<f64>() / n;
        let max = most.rows.iter().map(|m| m.rss_mb).fold(f64::MIN, f64::max);
        let others: Vec<f64> = most
            .rows
            .iter()
            .filter(|m| !m.sharder)
            .map(|m| m.rss_mb)
            .collect();
        let others_mean = others.iter().sum::<f64>() / others.len().max(1) as f64;
        println!(
            "\nper-member RSS at {} members / one member's ({:.1} MB), target ≤ 0.30 (labels mode):",
            most.members, one_rss
        );
        println!(
            "    mean {:.2}   max (the sharder's included) {:.2}   members other than the sharder {:.2}",
            mean / one_rss,
            max / one_rss,
            others_mean / one_rss
        );
        // What the process's floor allows: RSS = floor + objects x slope (the slope from the
        // members other than the sharder); even with a sharder that cost nothing, k members
        // would hold (floor + slope N/k) / (floor + slope N) of one.
        let fit: Vec<(f64, f64)> = most
            .rows
            .iter()
            .filter(|m| !m.sharder && m.cached > 0)
            .map(|m| ((m.rss_mb - idle) / m.cached as f64, m.cached as f64))
            .collect();
        if !fit.is_empty() && idle.is_finite() {
            let slope = fit.iter().map(|(s, _)| s).sum::<f64>() / fit.len() as f64;
            let n = o.objects as f64;
            let k = most.members as f64;
            println!(
                "    a member over no objects (the process's floor): {idle:.1} MB; the members other \
                 than the sharder: {:.2} KB per cached object above it; so, a sharder costing \
                 nothing, the best mean at {} members: {:.2}",
                slope * 1024.0,
                most.members,
                (idle + slope * n / k) / (idle + slope * n)
            );
        }
    }
    let reassigns: Vec<&Run> = runs.iter().filter(|r| r.reassign.is_some()).collect();
    if !reassigns.is_empty() {
        println!(
            "\nreassignment after a kill -9 / (Lease duration + 2 s = {:.0} s), target ≤ 1:",
            o.lease_s + 2.0
        );
        for r in reassigns {
            let (s, first, w) = r.reassign.unwrap_or_default();
            println!(
                "    {} members: {:.1} s ({:.2}), the sharder's first write after {:.1} s, {} sharder \
                 writes ({:.0}/s)",
                r.members,
                s,
                s / (o.lease_s + 2.0),
                first,
                w,
                w as f64 / (s - first).max(0.001)
            );
        }
        if let Some((n, secs)) = floor {
            let rate = n as f64 / secs.max(0.001);
            println!(
                "\nthe floor: {n} bare label patches ({} at once, from one process) took {secs:.1} s \
                 ({rate:.0}/s); nothing moves before the Lease expires, so a reassignment of w \
                 objects takes at least Lease duration + w / {rate:.0}:",
                o.in_flight
            );
            for r in runs.iter().filter(|r| r.reassign.is_some()) {
                let (_, _, w) = r.reassign.unwrap_or_default();
                let f = o.lease_s + w as f64 / rate;
                println!(
                    "    {} members: {f:.1} s ({:.2}) for {w} writes",
                    r.members,
                    f / (o.lease_s + 2.0)
                );
            }
        }
    }
}

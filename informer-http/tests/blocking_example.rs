//! `examples/blocking_loop.rs` against a real kube-apiserver: the blocking loop lists what is
//! there, then sees a create, an update and a delete, in order.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use informer_http::Config;
use testcluster::TestCluster;

#[path = "../examples/blocking_loop.rs"]
mod blocking_loop;

const CM: &str = "/api/v1/namespaces/default/configmaps";

fn configmap(name: &str, value: &str) -> String {
    format!(r#"{{"metadata":{{"name":"{name}"}},"data":{{"v":"{value}"}}}}"#)
}

fn request(cluster: &TestCluster, method: &str, path: &str, body: Option<&str>) {
    let (status, answer) = cluster.request(method, path, body).expect("request");
    assert!(
        (200..300).contains(&status),
        "{method} {path}: {status} {answer}"
    );
}

#[test]
fn blocking_loop_sees_initial_list_then_create_update_delete() {
    let cluster = TestCluster::start().expect("start test cluster");
    for name in ["before-1", "before-2", "before-3"] {
        request(&cluster, "POST", CM, Some(&configmap(name, "0")));
    }
    let config = Config::from_kubeconfig_file(&cluster.kubeconfig, None).expect("kubeconfig");

    let (tx, rx) = mpsc::channel::<String>();
    let informer = thread::spawn(move || {
        blocking_loop::run(&config, Some("default"), Duration::from_secs(60), |line| {
            let stop = line == "delete default/live";
            tx.send(line).unwrap();
            stop
        })
        .expect("the loop fails")
    });
    let next = || {
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the loop saw nothing for 30 s")
    };

    let mut initial: Vec<String> = (0..3).map(|_| next()).collect();
    initial.sort();
    for (line, name) in initial.iter().zip(["before-1", "before-2", "before-3"]) {
        assert!(
            line.starts_with(&format!("add default/{name} rv="))
                && line.ends_with("(initial list)"),
            "{line}"
        );
    }
    assert_eq!(next(), "synced 3 configmaps");

    request(&cluster, "POST", CM, Some(&configmap("live", "1")));
    let add = next();
    assert!(
        add.starts_with("add default/live rv=") && !add.contains("initial"),
        "{add}"
    );
    let rv = add.rsplit('=').next().unwrap().to_string();

    request(
        &cluster,
        "PUT",
        &format!("{CM}/live"),
        Some(&configmap("live", "2")),
    );
    let update = next();
    assert!(
        update.starts_with(&format!("update default/live rv={rv}->")),
        "{update}"
    );

    request(&cluster, "DELETE", &format!("{CM}/live"), None);
    assert_eq!(next(), "delete default/live");
    informer.join().unwrap();
}

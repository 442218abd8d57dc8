//! Throughput of the watch decoder and list decoding on synthetic ConfigMaps.
//!
//! `cargo run --release -p informer-http --no-default-features --example decode_throughput`

use std::time::Instant;

use informer_core::object::DynamicObject;
use informer_core::protocol::WatchEvent;
use informer_http::WatchDecoder;
use informer_http::decode::decode_list;

fn object(i: usize) -> String {
    format!(
        r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"cm-{i:06}","namespace":"ns-{}","uid":"6f1c1d7e-0b7a-4a53-9d7e-{i:012}","resourceVersion":"{}","creationTimestamp":"2024-01-01T00:00:00Z","labels":{{"app":"bench","shard":"{}"}},"managedFields":[{{"manager":"kubectl","operation":"Update","apiVersion":"v1","time":"2024-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{{"f:data":{{".":{{}},"f:k":{{}}}}}}}}]}},"data":{{"k":"{}"}}}}"#,
        i % 10,
        1000 + i,
        i % 4,
        "v".repeat(200)
    )
}

fn main() {
    let n = 100_000;
    let mut stream = Vec::new();
    for i in 0..n {
        stream.extend_from_slice(br#"{"type":"ADDED","object":"#);
        stream.extend_from_slice(object(i).as_bytes());
        stream.extend_from_slice(b"}\n");
    }
    let t = Instant::now();
    let mut d = WatchDecoder::<DynamicObject>::default();
    let mut count = 0;
    for chunk in stream.chunks(16 * 1024) {
        d.feed(chunk);
        while let Some(ev) = d.next_event() {
            if let Ok(WatchEvent::Added(_)) = ev {
                count += 1;
            }
        }
    }
    let dt = t.elapsed();
    assert_eq!(count, n);
    println!(
        "watch: {n} events, {:.1} MiB in {dt:.2?}: {:.0} events/s, {:.0} MiB/s",
        stream.len() as f64 / (1 << 20) as f64,
        n as f64 / dt.as_secs_f64(),
        stream.len() as f64 / (1 << 20) as f64 / dt.as_secs_f64()
    );

    let items: Vec<String> = (0..n).map(object).collect();
    let body = format!(
        r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"999999"}},"items":[{}]}}"#,
        items.join(",")
    );
    let t = Instant::now();
    let page = decode_list::<DynamicObject>(body.as_bytes()).unwrap();
    let dt = t.elapsed();
    assert_eq!(page.items.len(), n);
    println!(
        "list: {n} items, {:.1} MiB in {dt:.2?}: {:.0} items/s",
        body.len() as f64 / (1 << 20) as f64,
        n as f64 / dt.as_secs_f64()
    );
}

//! The `tracing` events an operator relies on: list, relist, watch, list/watch failure,
//! backoff, handler panic.

mod support;

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use informer_runtime::{BackoffConfig, DynamicObject, HandlerFns, InformerBuilder};
use support::fake_transport::FakeTransport;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut line = Line(event.metadata().level().to_string());
        event.record(&mut line);
        LINES.lock().unwrap().push(line.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn list_relist_watch_failure_backoff_and_panic_are_traced() {
    tracing::subscriber::set_global_default(Capture).unwrap();
    // Lists fail twice, then answer one object; watches never answer.
    let obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5"}
    }))
    .unwrap();
    let flaky = FakeTransport::new()
        .list_always(vec![Arc::new(obj)], "5")
        .fail_lists(2);
    smol::block_on(async {
        let inf = InformerBuilder::<DynamicObject, informer_smol::Smol>::from_transport(
            informer_smol::Smol,
            Arc::new(flaky),
            "flaky",
        )
        .backoff(BackoffConfig {
            initial: Duration::from_millis(5),
            cap: Duration::from_millis(20),
            ..BackoffConfig::default()
        })
        .build()
        .unwrap();
        let reg = inf
            .add_handler(HandlerFns::new().on_add(|_, _| panic!("boom")))
            .unwrap();
        inf.start().unwrap();
        reg.wait_for_sync(Some(Duration::from_secs(10)))
            .await
            .unwrap();
        let t0 = Instant::now();
        while inf.metrics().watches == 0 || reg.panics() == 0 {
            assert!(t0.elapsed() < Duration::from_secs(10));
            informer_smol::sleep(Duration::from_millis(5)).await;
        }
        inf.shutdown().await;
    });
    let lines = LINES.lock().unwrap().join("\n");
    for want in [
        "INFO message=list informer=flaky resource_version=Some(\"0\")",
        "relist=true",
        "WARN message=list/watch failed informer=flaky kind=\"connection_refused\" error=connection refused: scripted",
        "INFO message=backing off before the next list/watch informer=flaky delay=",
        "DEBUG message=watch informer=flaky resource_version=5",
        "ERROR message=event handler panicked; it goes on with its next notification informer=flaky handler=0 panic=boom",
        "INFO message=informer stopped informer=flaky",
    ] {
        assert!(lines.contains(want), "no {want:?} in:\n{lines}");
    }
}

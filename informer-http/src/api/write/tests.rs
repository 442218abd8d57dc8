use super::*;
use crate::resource::Resource;
use crate::test_support::{Canned, Scripted, run};
use informer_core::object::DynamicObject;

type Answer = (u16, Vec<(&'static str, &'static str)>, String);

fn api(answers: Vec<Answer>) -> Api<DynamicObject, Scripted> {
    let answers = answers.into_iter().map(|(code, headers, body)| {
        let c = headers
            .into_iter()
            .fold(Canned::new(code, body), |c, (k, v)| c.header(k, v));
        Ok(c)
    });
    Scripted::client(answers, |_| {}).api(Resource::CONFIGMAPS, Some("ns"))
}

fn seen(api: &Api<DynamicObject, Scripted>) -> Vec<(String, String, Option<String>, String)> {
    api.client()
        .backend()
        .seen()
        .iter()
        .map(|r| {
            (
                r.method().to_string(),
                r.uri().to_string(),
                r.headers()
                    .get(http::header::CONTENT_TYPE)
                    .map(|v| v.to_str().unwrap().to_string()),
                String::from_utf8(r.body().to_vec()).unwrap(),
            )
        })
        .collect()
}

const CM: &str = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"k":"v"}}"#;

fn status(code: u16, reason: &str, extra: &str) -> String {
    format!(
        r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"m{code}","reason":"{reason}","code":{code}{extra}}}"#
    )
}

#[test]
fn patches_carry_their_content_type_and_params() {
    let a = api(vec![
        (200, vec![], CM.into()),
        (200, vec![], CM.into()),
        (200, vec![], CM.into()),
        (200, vec![], CM.into()),
    ]);
    let v = serde_json::json!({"data": {"k": "v"}});
    run(a.patch("a", &Patch::Merge(&v), &PatchParams::default())).unwrap();
    run(a.patch(
        "a",
        &Patch::Json(serde_json::json!([{"op": "add", "path": "/data/x", "value": "1"}])),
        &PatchParams::default(),
    ))
    .unwrap();
    let got = run(a.patch("a", &Patch::Apply(&v), &PatchParams::apply("ctl").force())).unwrap();
    assert_eq!(got.metadata.name(), "a");
    run(a.patch_status("a", &Patch::Merge(&v), &PatchParams::default())).unwrap();
    let s = seen(&a);
    assert_eq!(s[0].0, "PATCH");
    assert_eq!(s[0].1, "/api/v1/namespaces/ns/configmaps/a");
    assert_eq!(s[0].2.as_deref(), Some("application/merge-patch+json"));
    assert_eq!(s[0].3, r#"{"data":{"k":"v"}}"#);
    assert_eq!(s[1].2.as_deref(), Some("application/json-patch+json"));
    assert_eq!(
        s[2].1,
        "/api/v1/namespaces/ns/configmaps/a?fieldManager=ctl&force=true"
    );
    assert_eq!(s[2].2.as_deref(), Some("application/apply-patch+yaml"));
    assert_eq!(s[3].1, "/api/v1/namespaces/ns/configmaps/a/status");
}

#[test]
fn create_replace_delete_requests() {
    let a = api(vec![
        (201, vec![], CM.into()),
        (200, vec![], CM.into()),
        (
            200,
            vec![],
            r#"{"kind":"Status","apiVersion":"v1","status":"Success"}"#.into(),
        ),
        (200, vec![], CM.into()),
    ]);
    let obj: DynamicObject = serde_json::from_str(CM).unwrap();
    let params = PostParams {
        field_manager: Some("m".into()),
        dry_run: true,
    };
    run(a.create(&obj, &params)).unwrap();
    run(a.replace(&obj, &PostParams::default())).unwrap();
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        preconditions: Preconditions {
            uid: Some("u".into()),
            resource_version: Some("7".into()),
        },
        ..DeleteParams::default()
    };
    assert_eq!(run(a.delete("a", &dp)).unwrap(), None);
    assert!(
        run(a.delete("a", &DeleteParams::default()))
            .unwrap()
            .is_some()
    );
    let s = seen(&a);
    assert_eq!(
        (s[0].0.as_str(), s[0].1.as_str()),
        (
            "POST",
            "/api/v1/namespaces/ns/configmaps?fieldManager=m&dryRun=All"
        )
    );
    assert_eq!(s[0].2.as_deref(), Some("application/json"));
    assert_eq!(
        (s[1].0.as_str(), s[1].1.as_str()),
        ("PUT", "/api/v1/namespaces/ns/configmaps/a")
    );
    assert_eq!(s[2].0, "DELETE");
    let body: serde_json::Value = serde_json::from_str(&s[2].3).unwrap();
    assert_eq!(body["propagationPolicy"], "Foreground");
    assert_eq!(body["preconditions"]["uid"], "u");
    assert_eq!(body["preconditions"]["resourceVersion"], "7");
}

#[test]
fn error_answers_are_typed() {
    let a = api(vec![
        (404, vec![], status(404, "NotFound", "")),
        (409, vec![], status(409, "AlreadyExists", "")),
        (409, vec![], status(409, "Conflict", "")),
        (
            422,
            vec![],
            status(
                422,
                "Invalid",
                r#","details":{"causes":[{"reason":"FieldValueInvalid","message":"bad","field":"metadata.name"}]}"#,
            ),
        ),
        (415, vec![], status(415, "UnsupportedMediaType", "")),
        (404, vec![], status(404, "NotFound", "")),
    ]);
    let obj: DynamicObject = serde_json::from_str(CM).unwrap();
    assert!(matches!(run(a.get("a")), Err(WriteError::NotFound(s)) if s.message == "m404"));
    assert!(matches!(
        run(a.create(&obj, &PostParams::default())),
        Err(WriteError::Conflict { reason, .. }) if reason == "AlreadyExists"
    ));
    assert!(matches!(
        run(a.replace(&obj, &PostParams::default())),
        Err(WriteError::Conflict { reason, .. }) if reason == "Conflict"
    ));
    let Err(WriteError::Invalid { causes, .. }) = run(a.create(&obj, &PostParams::default()))
    else {
        panic!()
    };
    assert_eq!(causes[0].field.as_deref(), Some("metadata.name"));
    assert!(matches!(
        run(a.patch("a", &Patch::Merge(&obj), &PatchParams::default())),
        Err(WriteError::Api(s)) if s.code == 415
    ));
    assert_eq!(run(a.get_opt("a")).unwrap(), None);
}

#[test]
fn too_many_requests_is_retried_for_every_verb() {
    let a = api(vec![
        (
            429,
            vec![("retry-after", "0")],
            status(429, "TooManyRequests", ""),
        ),
        (429, vec![], status(429, "TooManyRequests", "")),
        (201, vec![], CM.into()),
    ]);
    let obj: DynamicObject = serde_json::from_str(CM).unwrap();
    run(a.create(&obj, &PostParams::default())).unwrap();
    assert_eq!(seen(&a).len(), 3);
    // Never more than MAX_ATTEMPTS.
    let a = api((0..MAX_ATTEMPTS)
        .map(|_| (429, vec![], status(429, "TooManyRequests", "")))
        .collect());
    assert!(matches!(
        run(a.get("a")),
        Err(WriteError::TooManyRequests(_))
    ));
    assert_eq!(seen(&a).len(), MAX_ATTEMPTS as usize);
}

#[test]
fn server_errors_are_retried_only_where_safe() {
    // Create and merge patch: not retried.
    let a = api(vec![
        (500, vec![], status(500, "InternalError", "")),
        (503, vec![], status(503, "ServiceUnavailable", "")),
    ]);
    let obj: DynamicObject = serde_json::from_str(CM).unwrap();
    assert!(matches!(
        run(a.create(&obj, &PostParams::default())),
        Err(WriteError::Server(s)) if s.code == 500
    ));
    assert!(matches!(
        run(a.patch("a", &Patch::Merge(&obj), &PatchParams::default())),
        Err(WriteError::Server(s)) if s.code == 503
    ));
    assert_eq!(seen(&a).len(), 2);
    // Replace, apply, delete, get: retried.
    let a = api(vec![
        (500, vec![], status(500, "InternalError", "")),
        (200, vec![], CM.into()),
        (503, vec![], status(503, "ServiceUnavailable", "")),
        (200, vec![], CM.into()),
        (504, vec![], status(504, "Timeout", "")),
        (200, vec![], CM.into()),
    ]);
    run(a.replace(&obj, &PostParams::default())).unwrap();
    run(a.patch("a", &Patch::Apply(&obj), &PatchParams::apply("m"))).unwrap();
    run(a.delete("a", &DeleteParams::default())).unwrap();
    assert_eq!(seen(&a).len(), 6);
}

#[test]
fn retry_delays_grow_and_honour_retry_after() {
    assert_eq!(retry_delay(0, None), Duration::from_millis(200));
    assert_eq!(retry_delay(1, None), Duration::from_millis(400));
    assert_eq!(retry_delay(10, None), Duration::from_secs(5));
    assert_eq!(
        retry_delay(0, Some(Duration::from_secs(3))),
        Duration::from_secs(3)
    );
    assert_eq!(
        retry_delay(0, Some(Duration::from_secs(3600))),
        Duration::from_secs(30)
    );
}

use super::*;
use base64::Engine as _;
use std::fs;

const CA: &str = include_str!("../../tests/data/ca.crt");
const CLIENT_CRT: &str = include_str!("../../tests/data/client.crt");
const CLIENT_KEY: &str = include_str!("../../tests/data/client.key");

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(&p, text).unwrap();
    p
}

fn single(cluster: &str, user: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: main\n{extra}\
         clusters:\n- name: c1\n  cluster:\n{cluster}\
         users:\n- name: u1\n  user:\n{user}\
         contexts:\n- name: main\n  context:\n    cluster: c1\n    user: u1\n    namespace: team-a\n\
         - name: other\n  context:\n    cluster: c1\n"
    )
}

#[test]
fn token_and_ca_data() {
    let dir = tempfile::tempdir().unwrap();
    let text = single(
        &format!(
            "    server: https://10.0.0.1:6443/\n    certificate-authority-data: {}\n",
            b64(CA)
        ),
        "    token: s3cr3t-token\n",
        "",
    );
    let p = write(dir.path(), "config", &text);
    let cfg = Config::from_kubeconfig_file(&p, None).unwrap();
    assert_eq!(cfg.server, "https://10.0.0.1:6443");
    assert_eq!(cfg.root_ca_pem.as_deref(), Some(CA.as_bytes()));
    assert!(!cfg.insecure_skip_tls_verify);
    assert_eq!(cfg.default_namespace, "team-a");
    assert_eq!(cfg.auth, Auth::Token(Secret::new("s3cr3t-token".into())));
    assert_eq!(
        cfg.authorization().unwrap().unwrap().expose(),
        "Bearer s3cr3t-token"
    );
    let dbg = format!("{cfg:?}");
    assert!(!dbg.contains("s3cr3t"), "{dbg}");
    assert!(dbg.contains("<redacted>"));
    let k = Kubeconfig::read_files(std::slice::from_ref(&p)).unwrap();
    assert!(!format!("{k:?}").contains("s3cr3t"));
    // A named context: no user, default namespace.
    let other = Config::from_kubeconfig_file(&p, Some("other")).unwrap();
    assert_eq!(other.auth, Auth::None);
    assert_eq!(other.default_namespace, "default");
}

#[test]
fn relative_paths_are_resolved_against_the_kubeconfig_directory() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "kube/pki/ca.crt", CA);
    write(dir.path(), "kube/pki/client.crt", CLIENT_CRT);
    write(dir.path(), "kube/pki/client.key", CLIENT_KEY);
    write(dir.path(), "kube/token", "file-token\n");
    let text = single(
        "    server: https://k8s.example:443\n    certificate-authority: pki/ca.crt\n    tls-server-name: api.internal\n",
        "    client-certificate: pki/client.crt\n    client-key: pki/client.key\n    tokenFile: token\n",
        "",
    );
    let p = write(dir.path(), "kube/config", &text);
    // Read from another working directory's point of view: paths are absolute now.
    let cfg = Config::from_kubeconfig_file(&p, None).unwrap();
    assert_eq!(cfg.root_ca_pem.as_deref(), Some(CA.as_bytes()));
    assert_eq!(cfg.tls_server_name.as_deref(), Some("api.internal"));
    let id = cfg.client_identity.as_ref().unwrap();
    assert_eq!(id.cert_pem, CLIENT_CRT.as_bytes());
    assert_eq!(id.key_pem.expose(), CLIENT_KEY.as_bytes());
    assert_eq!(cfg.auth, Auth::TokenFile(dir.path().join("kube/token")));
    assert_eq!(
        cfg.authorization().unwrap().unwrap().expose(),
        "Bearer file-token"
    );
    let dbg = format!("{cfg:?}");
    assert!(
        !dbg.contains("PRIVATE KEY") && !dbg.contains("file-token"),
        "{dbg}"
    );
}

#[test]
fn client_certificate_data_and_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let text = single(
        "    server: https://127.0.0.1:6443\n    insecure-skip-tls-verify: true\n",
        &format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(CLIENT_CRT),
            b64(CLIENT_KEY)
        ),
        "",
    );
    let p = write(dir.path(), "config", &text);
    let cfg = Config::from_kubeconfig_file(&p, None).unwrap();
    assert!(cfg.insecure_skip_tls_verify);
    assert_eq!(cfg.root_ca_pem, None);
    assert!(cfg.client_identity.is_some());
    assert!(!format!("{cfg:?}").contains(&b64(CLIENT_KEY)[..20]));
}

#[test]
fn several_files_merge_first_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(
        dir.path(),
        "a/config",
        "current-context: ctx-b\nusers:\n- name: shared\n  user:\n    token: from-a\n",
    );
    let b = write(
        dir.path(),
        "b/config",
        "current-context: ctx-ignored\nclusters:\n- name: cb\n  cluster:\n    server: https://b:1\n    certificate-authority: ca.crt\n\
             users:\n- name: shared\n  user:\n    token: from-b\n\
             contexts:\n- name: ctx-b\n  context:\n    cluster: cb\n    user: shared\n    namespace: nb\n",
    );
    write(dir.path(), "b/ca.crt", CA);
    let c = write(
        dir.path(),
        "c/config",
        "clusters:\n- name: cb\n  cluster:\n    server: https://c:1\ncontexts:\n- name: ctx-c\n  context:\n    cluster: cb\n",
    );
    // Through a $KUBECONFIG value with an empty entry and a missing file.
    let env = std::env::join_paths([
        a.as_path(),
        Path::new(""),
        &dir.path().join("missing"),
        b.as_path(),
        c.as_path(),
    ])
    .unwrap();
    let paths = Kubeconfig::paths_from(Some(&env), Some(Path::new("/home/x")));
    assert_eq!(paths.len(), 4, "{paths:?}");
    let k = Kubeconfig::read_existing(&paths).unwrap();
    assert_eq!(k.files(), [a.clone(), b.clone(), c.clone()]);
    assert_eq!(k.current_context(), Some("ctx-b"));
    assert_eq!(k.contexts().collect::<Vec<_>>(), ["ctx-b", "ctx-c"]);
    let cfg = k.config(None).unwrap();
    assert_eq!(cfg.server, "https://b:1", "b defined cb first");
    assert_eq!(
        cfg.root_ca_pem.as_deref(),
        Some(CA.as_bytes()),
        "relative to b/"
    );
    assert_eq!(
        cfg.auth,
        Auth::Token(Secret::new("from-a".into())),
        "a defined the user first"
    );
    assert_eq!(cfg.default_namespace, "nb");
    assert_eq!(k.config(Some("ctx-c")).unwrap().server, "https://b:1");
}

fn err_of(text: &str, context: Option<&str>) -> (ConfigError, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "broken.yaml", text);
    let e = Config::from_kubeconfig_file(&p, context).unwrap_err();
    std::mem::forget(dir);
    (e, p)
}

#[test]
fn broken_files_name_the_file_and_the_field() {
    let (e, p) = err_of("clusters: [ {name: x", None);
    assert!(
        matches!(&e, ConfigError::Parse { path, .. } if *path == p),
        "{e:?}"
    );
    assert!(e.to_string().contains("broken.yaml"), "{e}");

    let (e, _) = err_of(
        "clusters:\n- name: c\n  cluster:\n    server: https://a\n    insecure-skip-tls-verify: maybe\n",
        None,
    );
    let ConfigError::Parse { message, .. } = &e else {
        panic!("{e:?}")
    };
    assert!(message.contains("insecure-skip-tls-verify"), "{message}");

    let (e, _) = err_of("clusters: []\n", None);
    assert!(
        matches!(&e, ConfigError::MissingField { field, .. } if field == "current-context"),
        "{e:?}"
    );

    let (e, p) = err_of("current-context: nope\n", None);
    assert!(
        matches!(&e, ConfigError::NotFound { path, field, name } if *path == p && field == "current-context" && name == "nope"),
        "{e:?}"
    );

    let (e, _) = err_of(
        "contexts:\n- name: x\n  context:\n    cluster: ghost\n",
        Some("x"),
    );
    assert!(
        matches!(&e, ConfigError::NotFound { field, name, .. } if field == "contexts[x].context.cluster" && name == "ghost"),
        "{e:?}"
    );

    let (e, _) = err_of(
        "clusters:\n- name: c\n  cluster: {}\ncontexts:\n- name: x\n  context: {cluster: c}\n",
        Some("x"),
    );
    assert!(
        matches!(&e, ConfigError::MissingField { field, .. } if field == "clusters[c].cluster.server"),
        "{e:?}"
    );

    let (e, _) = err_of(
        "clusters:\n- name: c\n  cluster: {server: 'ftp://x'}\ncontexts:\n- name: x\n  context: {cluster: c}\n",
        Some("x"),
    );
    assert!(
        matches!(&e, ConfigError::InvalidField { field, .. } if field == "clusters[c].cluster.server"),
        "{e:?}"
    );

    let (e, _) = err_of(
        "clusters:\n- name: c\n  cluster: {server: 'https://x', certificate-authority-data: '!!notbase64'}\ncontexts:\n- name: x\n  context: {cluster: c}\n",
        Some("x"),
    );
    assert!(
        matches!(&e, ConfigError::InvalidField { field, .. } if field == "clusters[c].cluster.certificate-authority-data"),
        "{e:?}"
    );

    let (e, _) = err_of(
        &format!(
            "clusters:\n- name: c\n  cluster: {{server: 'https://x', certificate-authority-data: '{}'}}\ncontexts:\n- name: x\n  context: {{cluster: c}}\n",
            b64("not a cert")
        ),
        Some("x"),
    );
    assert!(
        matches!(&e, ConfigError::InvalidField { field, .. } if field == "clusters[c].cluster.certificate-authority-data"),
        "{e:?}"
    );

    let (e, _) = err_of(
        "clusters:\n- name: c\n  cluster: {server: 'https://x', certificate-authority: /nonexistent/ca.crt}\ncontexts:\n- name: x\n  context: {cluster: c}\n",
        Some("x"),
    );
    assert!(
        matches!(&e, ConfigError::InvalidField { field, message, .. } if field == "clusters[c].cluster.certificate-authority" && message.contains("/nonexistent/ca.crt")),
        "{e:?}"
    );

    let base = "clusters:\n- name: c\n  cluster: {server: 'https://x'}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n";
    let (e, _) = err_of(base, Some("x"));
    assert!(
        matches!(&e, ConfigError::NotFound { field, name, .. } if field == "contexts[x].context.user" && name == "u"),
        "{e:?}"
    );

    let (e, _) = err_of(
        &format!(
            "{base}users:\n- name: u\n  user:\n    client-certificate-data: {}\n",
            b64(CLIENT_CRT)
        ),
        Some("x"),
    );
    assert!(
        matches!(&e, ConfigError::MissingField { field, .. } if field == "users[u].user.client-key"),
        "{e:?}"
    );

    let (e, _) = err_of(
        &format!(
            "{base}users:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(CLIENT_CRT),
            b64("garbage-key")
        ),
        Some("x"),
    );
    assert!(
        matches!(&e, ConfigError::InvalidField { field, .. } if field == "users[u].user.client-key-data"),
        "{e:?}"
    );
    assert!(!format!("{e:?}{e}").contains("garbage-key"));

    let (e, _) = err_of(
        &format!("{base}users:\n- name: u\n  user:\n    tokenFile: missing-token\n"),
        Some("x"),
    );
    assert!(
        matches!(&e, ConfigError::InvalidField { field, .. } if field == "users[u].user.tokenFile"),
        "{e:?}"
    );

    let (e, _) = err_of(
        &format!("{base}users:\n- name: u\n  user:\n    exec:\n      command: aws\n"),
        Some("x"),
    );
    // An exec section without apiVersion is refused, naming the field.
    assert!(
        matches!(&e, ConfigError::InvalidField { field, .. } if field == "users[u].user.exec.apiVersion"),
        "{e:?}"
    );

    let (e, _) = err_of(
        &format!(
            "{base}users:\n- name: u\n  user:\n    exec:\n      command: aws\n      \
             apiVersion: client.authentication.k8s.io/v1\n"
        ),
        Some("x"),
    );
    // v1 requires interactiveMode, as in client-go.
    assert!(
        matches!(&e, ConfigError::InvalidField { field, .. } if field == "users[u].user.exec.interactiveMode"),
        "{e:?}"
    );
}

#[test]
fn default_paths() {
    assert_eq!(
        Kubeconfig::paths_from(None, Some(Path::new("/home/u"))),
        [PathBuf::from("/home/u/.kube/config")]
    );
    assert_eq!(
        Kubeconfig::paths_from(Some(std::ffi::OsStr::new("")), Some(Path::new("/h"))),
        [PathBuf::from("/h/.kube/config")]
    );
    assert!(Kubeconfig::paths_from(None, None).is_empty());
    let dir = tempfile::tempdir().unwrap();
    let missing = [dir.path().join("nope")];
    assert!(matches!(
        Kubeconfig::read_existing(&missing),
        Err(ConfigError::NoKubeconfig { tried }) if tried == missing
    ));
}

#[test]
fn empty_kubeconfig_file_is_tolerated_in_a_merge() {
    let dir = tempfile::tempdir().unwrap();
    let empty = write(dir.path(), "empty", "");
    let real = write(
        dir.path(),
        "real",
        "current-context: x\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:8080'}\ncontexts:\n- name: x\n  context: {cluster: c}\n",
    );
    let k = Kubeconfig::read_files(&[empty, real]).unwrap();
    assert_eq!(k.config(None).unwrap().server, "http://127.0.0.1:8080");
    assert!(matches!(
        Kubeconfig::read_files(&[dir.path().join("nope")]),
        Err(ConfigError::Io { .. })
    ));
}

#[test]
fn in_cluster_from_a_temp_dir() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "token", "sa-token\n");
    write(dir.path(), "ca.crt", CA);
    write(dir.path(), "namespace", "kube-system");
    let cfg = incluster_from(dir.path(), Some("10.96.0.1"), Some("443")).unwrap();
    assert_eq!(cfg.server, "https://10.96.0.1:443");
    assert_eq!(cfg.default_namespace, "kube-system");
    assert_eq!(cfg.root_ca_pem.as_deref(), Some(CA.as_bytes()));
    assert_eq!(
        cfg.authorization().unwrap().unwrap().expose(),
        "Bearer sa-token"
    );
    assert!(!format!("{cfg:?}").contains("sa-token"));
    // Rotation: the token file is read again for every request.
    write(dir.path(), "token", "rotated");
    assert_eq!(
        cfg.authorization().unwrap().unwrap().expose(),
        "Bearer rotated"
    );

    let v6 = incluster_from(dir.path(), Some("fd00::1"), Some("6443")).unwrap();
    assert_eq!(v6.server, "https://[fd00::1]:6443");

    assert!(matches!(
        incluster_from(dir.path(), None, Some("443")),
        Err(ConfigError::MissingEnv {
            var: "KUBERNETES_SERVICE_HOST"
        })
    ));
    assert!(matches!(
        incluster_from(dir.path(), Some("h"), None),
        Err(ConfigError::MissingEnv {
            var: "KUBERNETES_SERVICE_PORT"
        })
    ));
    assert!(matches!(
        incluster_from(dir.path(), Some("h"), Some("http")),
        Err(ConfigError::InvalidField { .. })
    ));
    fs::remove_file(dir.path().join("namespace")).unwrap();
    assert_eq!(
        incluster_from(dir.path(), Some("h"), Some("1"))
            .unwrap()
            .default_namespace,
        "default"
    );
    write(dir.path(), "ca.crt", "junk");
    assert!(matches!(
        incluster_from(dir.path(), Some("h"), Some("1")),
        Err(ConfigError::InvalidField { field, .. }) if field == "ca.crt"
    ));
    fs::remove_file(dir.path().join("token")).unwrap();
    assert!(matches!(
        incluster_from(dir.path(), Some("h"), Some("1")),
        Err(ConfigError::Io { path, .. }) if path.ends_with("token")
    ));
}

/// A kubeconfig with a distinctive secret in every credential field kubeconfig has: none of
/// them shows in the `Debug` of the kubeconfig, of the configurations and clients built from
/// it, nor in any error it leads to.
#[test]
fn no_credential_reaches_debug_or_errors() {
    // The private key's base64 body: secret too (the certificate is not).
    let key_body: Vec<&str> = CLIENT_KEY
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let secrets: Vec<String> = [
        "SECRET-TOKEN-0001",
        "SECRET-PASSWORD-0002",
        "SECRET-CLIENT-SECRET-0003",
        "SECRET-ID-TOKEN-0004",
        "SECRET-REFRESH-TOKEN-0005",
        "SECRET-EXEC-ARG-0006",
        "SECRET-EXEC-ENV-0007",
        "SECRET-BAD-KEY-DATA-0008",
        "SECRET-NESTED-TOKEN-0009",
        "SECRET-AP-ACCESS-TOKEN-0010",
        "SECRET-NUMERIC-LOOKALIKE-0011",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(key_body.iter().map(|l| l.to_string()))
    .chain([b64(CLIENT_KEY)])
    .collect();
    let text = format!(
        "apiVersion: v1
kind: Config
current-context: token
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: {ca}
- name: both
  cluster:
    server: https://10.0.0.2:6443
    certificate-authority-data: {ca}
    insecure-skip-tls-verify: true
users:
- name: token
  user:
    token: SECRET-TOKEN-0001
    client-certificate-data: {crt}
    client-key-data: {key}
- name: basic
  user:
    username: admin
    password: SECRET-PASSWORD-0002
- name: oidc
  user:
    auth-provider:
      name: oidc
      config:
        client-id: kubernetes
        client-secret: SECRET-CLIENT-SECRET-0003
        id-token: SECRET-ID-TOKEN-0004
        refresh-token: SECRET-REFRESH-TOKEN-0005
        idp-issuer-url: https://issuer.example
- name: gcp
  user:
    auth-provider:
      name: gcp
      config:
        access-token: SECRET-AP-ACCESS-TOKEN-0010
- name: exec
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      interactiveMode: Never
      command: get-token
      args: [\"--token=SECRET-EXEC-ARG-0006\"]
      env:
      - name: TOKEN
        value: SECRET-EXEC-ENV-0007
- name: badkey
  user:
    client-certificate-data: {crt}
    client-key-data: SECRET-BAD-KEY-DATA-0008!!
contexts:
- {{name: token, context: {{cluster: c1, user: token}}}}
- {{name: basic, context: {{cluster: c1, user: basic}}}}
- {{name: oidc, context: {{cluster: c1, user: oidc}}}}
- {{name: gcp, context: {{cluster: c1, user: gcp}}}}
- {{name: exec, context: {{cluster: c1, user: exec}}}}
- {{name: badkey, context: {{cluster: c1, user: badkey}}}}
- {{name: both, context: {{cluster: both, user: token}}}}
",
        ca = b64(CA),
        crt = b64(CLIENT_CRT),
        key = b64(CLIENT_KEY),
    );
    let assert_clean = |what: &str, shown: &str| {
        for s in &secrets {
            assert!(!shown.contains(s.as_str()), "{what} shows {s:?}:\n{shown}");
        }
    };
    let k = Kubeconfig::from_yaml("/kube/config", &text).unwrap();
    assert_clean("Kubeconfig Debug", &format!("{k:?}"));
    assert_clean("Kubeconfig Debug (alternate)", &format!("{k:#?}"));
    // What is not secret still shows: the plugin's command and the provider's name.
    let dbg = format!("{k:?}");
    assert!(
        dbg.contains("get-token") && dbg.contains("oidc") && dbg.contains("admin"),
        "{dbg}"
    );

    let mut configs = Vec::new();
    let mut errors = Vec::new();
    for ctx in ["token", "basic", "oidc", "gcp", "exec", "badkey", "both"] {
        match k.config(Some(ctx)) {
            Ok(cfg) => configs.push(cfg),
            Err(e) => errors.push(e),
        }
    }
    // token, basic, oidc and exec load; gcp (removed from client-go), the bad key and the CA
    // with insecure-skip-tls-verify do not.
    assert_eq!((configs.len(), errors.len()), (4, 3), "{errors:?}");
    assert!(
        matches!(&configs[2].auth, Auth::Oidc(o) if o.client_id.as_deref() == Some("kubernetes"))
    );
    assert!(matches!(&configs[3].auth, Auth::Exec(e) if e.command == "get-token"));
    assert_eq!(
        configs[0].auth,
        Auth::Token(Secret::new("SECRET-TOKEN-0001".into()))
    );
    assert!(
        matches!(&configs[1].auth, Auth::Basic { password, .. } if password.expose() == "SECRET-PASSWORD-0002")
    );
    for cfg in &configs {
        assert_clean("Config Debug", &format!("{cfg:?}"));
        assert_clean("Config Debug (alternate)", &format!("{cfg:#?}"));
        #[cfg(feature = "smol")]
        {
            let c = crate::Client::smol(cfg.clone()).unwrap();
            assert_clean("smol Client Debug", &format!("{c:?} {c:#?}"));
        }
        #[cfg(feature = "tokio")]
        {
            let c = crate::Client::reqwest(cfg.clone()).unwrap();
            assert_clean("reqwest Client Debug", &format!("{c:?} {c:#?}"));
        }
    }
    for e in &errors {
        assert_clean("ConfigError", &format!("{e} {e:?} {e:#?}"));
    }

    // Parse errors: a credential of the wrong type, and a file broken elsewhere.
    for broken in [
        "users:\n- name: u\n  user:\n    token: {nested: SECRET-NESTED-TOKEN-0009}\n".to_string(),
        "users:\n- name: u\n  user:\n    password: [SECRET-NUMERIC-LOOKALIKE-0011]\n".to_string(),
        format!("{text}\nclusters: [ {{name: x\n"),
        text.replace(
            "insecure-skip-tls-verify: true",
            "insecure-skip-tls-verify: maybe",
        ),
    ] {
        let e = Kubeconfig::from_yaml("/kube/config", &broken).unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }), "{e:?}");
        assert_clean("Parse error", &format!("{e} {e:?}"));
    }
}

/// client-go refuses a cluster with a certificate authority and `insecure-skip-tls-verify`
/// ("specifying a root certificates file with the insecure flag is not allowed"): so does
/// this crate, naming the file and the cluster.
#[test]
fn a_certificate_authority_with_the_insecure_flag_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "ca.crt", CA);
    for ca in [
        format!("    certificate-authority-data: {}\n", b64(CA)),
        "    certificate-authority: ca.crt\n".to_string(),
    ] {
        let text = single(
            &format!("    server: https://10.0.0.1:6443\n{ca}    insecure-skip-tls-verify: true\n"),
            "    token: t\n",
            "",
        );
        let p = write(dir.path(), "config", &text);
        let e = Config::from_kubeconfig_file(&p, None).unwrap_err();
        assert!(
            matches!(&e, ConfigError::InsecureWithCertificateAuthority { path, cluster } if *path == p && cluster == "c1"),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("clusters[c1]") && msg.contains("insecure flag is not allowed"),
            "{msg}"
        );
    }
    // `insecure-skip-tls-verify: false` with a CA, or `true` alone, are fine.
    let text = single(
        &format!(
            "    server: https://10.0.0.1:6443\n    certificate-authority-data: {}\n    insecure-skip-tls-verify: false\n",
            b64(CA)
        ),
        "    token: t\n",
        "",
    );
    let p = write(dir.path(), "config", &text);
    assert!(Config::from_kubeconfig_file(&p, None).is_ok());
}

#[test]
fn exec_section_is_read_and_its_secrets_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let text = single(
        &format!(
            "    server: https://10.0.0.1:6443\n    certificate-authority-data: {}\n",
            b64(CA)
        ),
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      \
         command: aws\n      args: [eks, get-token, --token, ARG-SECRET-1]\n      \
         env:\n      - name: AWS_SECRET_ACCESS_KEY\n        value: ENV-SECRET-2\n      \
         installHint: brew install awscli\n      provideClusterInfo: true\n",
        "",
    );
    let p = write(dir.path(), "config", &text);
    let cfg = Config::from_kubeconfig_file(&p, None).unwrap();
    let Auth::Exec(exec) = &cfg.auth else {
        panic!("{cfg:?}")
    };
    assert_eq!(exec.command, "aws");
    assert_eq!(exec.api_version, ExecApiVersion::V1Beta1);
    // v1beta1 defaults to IfAvailable, as in client-go.
    assert_eq!(exec.interactive_mode, InteractiveMode::IfAvailable);
    assert_eq!(exec.args.len(), 4);
    assert_eq!(exec.env[0].0, "AWS_SECRET_ACCESS_KEY");
    assert_eq!(exec.env[0].1.expose(), "ENV-SECRET-2");
    assert_eq!(exec.install_hint.as_deref(), Some("brew install awscli"));
    assert_eq!(exec.user, "u1");
    let info = exec.provide_cluster_info.as_ref().unwrap();
    assert_eq!(info.server, "https://10.0.0.1:6443");
    assert_eq!(
        info.certificate_authority_data.as_deref(),
        Some(CA.as_bytes())
    );
    for shown in [
        format!("{cfg:?}"),
        format!(
            "{:?}",
            Kubeconfig::read_files(std::slice::from_ref(&p)).unwrap()
        ),
    ] {
        assert!(!shown.contains("ARG-SECRET-1"), "{shown}");
        assert!(!shown.contains("ENV-SECRET-2"), "{shown}");
        assert!(shown.contains("aws"), "{shown}");
    }

    // An output a plugin might print to a test: an error never quotes the plugin's stdout.
    let bad = tempfile::tempdir().unwrap();
    let script = write(
        bad.path(),
        "plugin.sh",
        "#!/bin/sh\necho '{\"apiVersion\": 7, \"token\": \"STDOUT-SECRET-3\"}'\n",
    );
    {
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut exec = ExecConfig::new(script.display().to_string(), "u1");
    exec.api_version = ExecApiVersion::V1;
    let mut cfg = Config::new("https://10.0.0.1:6443");
    cfg.auth = Auth::Exec(Box::new(exec));
    let e = cfg.authorization().unwrap_err();
    let shown = format!("{e} {e:?}");
    assert!(!shown.contains("STDOUT-SECRET-3"), "{shown}");
    assert!(shown.contains("not an ExecCredential"), "{shown}");
}

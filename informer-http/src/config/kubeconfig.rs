//! kubeconfig files, merged the way kubectl merges `$KUBECONFIG`.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use super::{Auth, ClientIdentity, Config, ConfigError, Secret, check_certs, check_key};

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct RawFile {
    clusters: Option<Vec<Named<RawCluster>>>,
    users: Option<Vec<Named<RawUser>>>,
    contexts: Option<Vec<Named<RawContext>>>,
    current_context: Option<String>,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    #[serde(rename = "value")]
    value: Option<T>,
}

#[derive(Deserialize, Default, Clone, Debug)]
#[serde(default, rename_all = "kebab-case")]
struct RawCluster {
    server: Option<String>,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    insecure_skip_tls_verify: Option<bool>,
    tls_server_name: Option<String>,
    proxy_url: Option<String>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default, rename_all = "kebab-case")]
struct RawUser {
    token: Option<Secret<String>>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<Secret<String>>,
    username: Option<String>,
    password: Option<Secret<String>>,
    exec: Option<serde_norway::Value>,
    auth_provider: Option<serde_norway::Value>,
}

/// Shows the user entry without any credential: tokens, password and key data are
/// [`Secret`]s; of an `exec` plugin only its command (its `args` and `env` can carry tokens, as
/// client-go also redacts them); of an `auth-provider` only its name (its `config` holds
/// client secrets and tokens).
impl std::fmt::Debug for RawUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawUser")
            .field("token", &self.token)
            .field("token_file", &self.token_file)
            .field("client_certificate", &self.client_certificate)
            .field(
                "client_certificate_data",
                &self.client_certificate_data.as_ref().map(|_| "<present>"),
            )
            .field("client_key", &self.client_key)
            .field("client_key_data", &self.client_key_data)
            .field("username", &self.username)
            .field("password", &self.password)
            .field("exec", &self.exec.as_ref().map(ExecDebug))
            .field(
                "auth_provider",
                &self.auth_provider.as_ref().map(AuthProviderDebug),
            )
            .finish()
    }
}

const REDACTED: &str = "<redacted>";

/// A scalar of a plugin section, shown only when it is a string.
fn plugin_str<'a>(v: &'a serde_norway::Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(serde_norway::Value::as_str)
}

/// An `exec` section: `command` and `apiVersion` shown, `args` and `env` redacted.
struct ExecDebug<'a>(&'a serde_norway::Value);

impl std::fmt::Debug for ExecDebug<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let present = |key: &str| self.0.get(key).map(|_| REDACTED);
        f.debug_struct("Exec")
            .field("command", &plugin_str(self.0, "command"))
            .field("api_version", &plugin_str(self.0, "apiVersion"))
            .field("args", &present("args"))
            .field("env", &present("env"))
            .finish_non_exhaustive()
    }
}

/// An `auth-provider` section: `name` shown, `config` redacted.
struct AuthProviderDebug<'a>(&'a serde_norway::Value);

impl std::fmt::Debug for AuthProviderDebug<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthProvider")
            .field("name", &plugin_str(self.0, "name"))
            .field("config", &self.0.get("config").map(|_| REDACTED))
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize, Default, Clone, Debug)]
#[serde(default)]
struct RawContext {
    cluster: Option<String>,
    user: Option<String>,
    namespace: Option<String>,
}

/// An entry and the file that defined it (relative paths already resolved against it).
#[derive(Clone, Debug)]
struct Sourced<T> {
    file: PathBuf,
    value: T,
}

/// One or more kubeconfig files merged: for clusters, users and contexts the first file that
/// defines a name wins (the whole entry); the first file that sets `current-context` wins.
/// Relative file paths in an entry are resolved against the directory of the file defining it.
#[derive(Clone, Debug)]
pub struct Kubeconfig {
    files: Vec<PathBuf>,
    clusters: BTreeMap<String, Sourced<RawCluster>>,
    users: BTreeMap<String, Sourced<RawUser>>,
    contexts: BTreeMap<String, Sourced<RawContext>>,
    current_context: Option<Sourced<String>>,
}

fn resolve(dir: &Path, p: &mut Option<String>) {
    if let Some(s) = p.as_mut() {
        if !s.is_empty() && Path::new(s.as_str()).is_relative() {
            *s = dir.join(&*s).to_string_lossy().into_owned();
        }
    }
}

impl Kubeconfig {
    /// The files kubectl would read: the entries of `$KUBECONFIG` (`:`-separated), else
    /// `~/.kube/config`.
    pub fn default_paths() -> Vec<PathBuf> {
        Kubeconfig::paths_from(
            std::env::var_os("KUBECONFIG").as_deref(),
            std::env::var_os("HOME").as_deref().map(Path::new),
        )
    }

    /// The files kubectl would read given the value of `$KUBECONFIG` and the home directory:
    /// the non-empty entries of `kubeconfig_env` when it is set and not empty, else
    /// `HOME/.kube/config`.
    pub fn paths_from(kubeconfig_env: Option<&OsStr>, home: Option<&Path>) -> Vec<PathBuf> {
        match kubeconfig_env {
            Some(v) if !v.is_empty() => std::env::split_paths(v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect(),
            _ => home
                .map(|h| vec![h.join(".kube").join("config")])
                .unwrap_or_default(),
        }
    }

    /// Reads the files kubectl would read (see [`Kubeconfig::default_paths`]).
    pub fn read_default() -> Result<Kubeconfig, ConfigError> {
        Kubeconfig::read_existing(&Kubeconfig::default_paths())
    }

    /// Reads and merges those of `paths` that exist, in order: missing files are skipped like
    /// kubectl skips missing `$KUBECONFIG` entries; none at all is
    /// [`ConfigError::NoKubeconfig`].
    pub fn read_existing(paths: &[PathBuf]) -> Result<Kubeconfig, ConfigError> {
        let existing: Vec<PathBuf> = paths.iter().filter(|p| p.exists()).cloned().collect();
        if existing.is_empty() {
            return Err(ConfigError::NoKubeconfig {
                tried: paths.to_vec(),
            });
        }
        Kubeconfig::read_files(&existing)
    }

    /// Reads and merges `paths` in order (each must exist).
    pub fn read_files(paths: &[PathBuf]) -> Result<Kubeconfig, ConfigError> {
        let mut k = Kubeconfig {
            files: Vec::new(),
            clusters: BTreeMap::new(),
            users: BTreeMap::new(),
            contexts: BTreeMap::new(),
            current_context: None,
        };
        if paths.is_empty() {
            return Err(ConfigError::NoKubeconfig { tried: Vec::new() });
        }
        for path in paths {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
                path: path.clone(),
                source,
            })?;
            k.merge_text(path, &text)?;
        }
        Ok(k)
    }

    /// Parses one kubeconfig given as text (`path` is used to resolve relative paths and in
    /// errors).
    pub fn from_yaml(path: impl Into<PathBuf>, text: &str) -> Result<Kubeconfig, ConfigError> {
        let path = path.into();
        let mut k = Kubeconfig {
            files: Vec::new(),
            clusters: BTreeMap::new(),
            users: BTreeMap::new(),
            contexts: BTreeMap::new(),
            current_context: None,
        };
        k.merge_text(&path, text)?;
        Ok(k)
    }

    fn merge_text(&mut self, path: &Path, text: &str) -> Result<(), ConfigError> {
        self.files.push(path.to_path_buf());
        let raw: RawFile = if text.trim().is_empty() {
            RawFile::default()
        } else {
            serde_norway::from_str::<Option<RawFile>>(text)
                .map_err(|e| ConfigError::Parse {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })?
                .unwrap_or_default()
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let missing = |what: &str, name: &str| ConfigError::MissingField {
            path: path.to_path_buf(),
            field: format!("{what}[{name}].{}", &what[..what.len() - 1]),
        };
        for c in raw.clusters.unwrap_or_default() {
            let mut v = c.value.ok_or_else(|| missing("clusters", &c.name))?;
            resolve(dir, &mut v.certificate_authority);
            self.clusters.entry(c.name).or_insert(Sourced {
                file: path.to_path_buf(),
                value: v,
            });
        }
        for u in raw.users.unwrap_or_default() {
            let mut v = u.value.unwrap_or_default();
            resolve(dir, &mut v.token_file);
            resolve(dir, &mut v.client_certificate);
            resolve(dir, &mut v.client_key);
            self.users.entry(u.name).or_insert(Sourced {
                file: path.to_path_buf(),
                value: v,
            });
        }
        for c in raw.contexts.unwrap_or_default() {
            let v = c.value.ok_or_else(|| missing("contexts", &c.name))?;
            self.contexts.entry(c.name).or_insert(Sourced {
                file: path.to_path_buf(),
                value: v,
            });
        }
        if self.current_context.is_none() {
            if let Some(cc) = raw.current_context.filter(|c| !c.is_empty()) {
                self.current_context = Some(Sourced {
                    file: path.to_path_buf(),
                    value: cc,
                });
            }
        }
        Ok(())
    }

    /// The merged `current-context`.
    pub fn current_context(&self) -> Option<&str> {
        self.current_context.as_ref().map(|c| c.value.as_str())
    }

    /// The names of all contexts.
    pub fn contexts(&self) -> impl Iterator<Item = &str> {
        self.contexts.keys().map(String::as_str)
    }

    /// The files read, in merge order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The [`Config`] of `context`, or of the current context.
    pub fn config(&self, context: Option<&str>) -> Result<Config, ConfigError> {
        let first = self.files.first().cloned().unwrap_or_default();
        let (ctx_name, ref_file, ref_field) = match context {
            Some(c) => (c.to_string(), first.clone(), "context".to_string()),
            None => match &self.current_context {
                Some(c) => (
                    c.value.clone(),
                    c.file.clone(),
                    "current-context".to_string(),
                ),
                None => {
                    return Err(ConfigError::MissingField {
                        path: first,
                        field: "current-context".into(),
                    });
                }
            },
        };
        let ctx = self
            .contexts
            .get(&ctx_name)
            .ok_or_else(|| ConfigError::NotFound {
                path: ref_file,
                field: ref_field,
                name: ctx_name.clone(),
            })?;
        let ctx_field = |f: &str| format!("contexts[{ctx_name}].context.{f}");
        let cluster_name = ctx.value.cluster.clone().unwrap_or_default();
        if cluster_name.is_empty() {
            return Err(ConfigError::MissingField {
                path: ctx.file.clone(),
                field: ctx_field("cluster"),
            });
        }
        let cluster = self
            .clusters
            .get(&cluster_name)
            .ok_or_else(|| ConfigError::NotFound {
                path: ctx.file.clone(),
                field: ctx_field("cluster"),
                name: cluster_name.clone(),
            })?;
        let cfile = &cluster.file;
        let cfield = |f: &str| format!("clusters[{cluster_name}].cluster.{f}");
        let c = &cluster.value;
        let server = c.server.clone().filter(|s| !s.is_empty()).ok_or_else(|| {
            ConfigError::MissingField {
                path: cfile.clone(),
                field: cfield("server"),
            }
        })?;
        check_server(&server).map_err(|message| ConfigError::InvalidField {
            path: cfile.clone(),
            field: cfield("server"),
            message,
        })?;
        let mut cfg = Config::new(server);
        cfg.insecure_skip_tls_verify = c.insecure_skip_tls_verify.unwrap_or(false);
        let has_ca = c
            .certificate_authority_data
            .as_deref()
            .is_some_and(|d| !d.trim().is_empty())
            || c.certificate_authority
                .as_deref()
                .is_some_and(|p| !p.is_empty());
        if cfg.insecure_skip_tls_verify && has_ca {
            return Err(ConfigError::InsecureWithCertificateAuthority {
                path: cfile.clone(),
                cluster: cluster_name.clone(),
            });
        }
        cfg.tls_server_name = c.tls_server_name.clone().filter(|s| !s.is_empty());
        cfg.proxy_url = c.proxy_url.clone().filter(|s| !s.is_empty());
        if let Some(url) = &cfg.proxy_url {
            super::Proxy::parse(url, "proxy-url").map_err(|e| ConfigError::InvalidField {
                path: cfile.clone(),
                field: cfield("proxy-url"),
                message: e.to_string(),
            })?;
        }
        cfg.root_ca_pem = load(
            cfile,
            &cfield("certificate-authority"),
            c.certificate_authority_data.as_deref(),
            c.certificate_authority.as_deref(),
        )?;
        if let Some(pem) = &cfg.root_ca_pem {
            let field = if c.certificate_authority_data.is_some() {
                "certificate-authority-data"
            } else {
                "certificate-authority"
            };
            check_certs(pem).map_err(|message| ConfigError::InvalidField {
                path: cfile.clone(),
                field: cfield(field),
                message,
            })?;
        }
        if let Some(ns) = ctx.value.namespace.as_deref().filter(|n| !n.is_empty()) {
            cfg.default_namespace = ns.to_string();
        }

        let Some(user_name) = ctx.value.user.clone().filter(|u| !u.is_empty()) else {
            return Ok(cfg);
        };
        let user = self
            .users
            .get(&user_name)
            .ok_or_else(|| ConfigError::NotFound {
                path: ctx.file.clone(),
                field: ctx_field("user"),
                name: user_name.clone(),
            })?;
        let ufile = &user.file;
        let ufield = |f: &str| format!("users[{user_name}].user.{f}");
        let u = &user.value;
        if let Some(raw) = &u.exec {
            let mut exec = super::exec::parse(raw, &user_name, ufile.clone()).map_err(
                |(field, message)| ConfigError::InvalidField {
                    path: ufile.clone(),
                    field: ufield(&field),
                    message,
                },
            )?;
            if let Some(info) = exec.provide_cluster_info.as_mut() {
                info.server = cfg.server.clone();
                info.tls_server_name = cfg.tls_server_name.clone();
                info.insecure_skip_tls_verify = cfg.insecure_skip_tls_verify;
                info.certificate_authority_data = cfg.root_ca_pem.clone();
                info.proxy_url = cfg.proxy_url.clone();
            }
            cfg.auth = Auth::Exec(Box::new(exec));
        }
        if let Some(ap) = &u.auth_provider {
            match plugin_str(ap, "name") {
                Some("oidc") => {
                    let dir = ufile.parent().unwrap_or(Path::new("."));
                    let oidc = super::oidc::parse(ap.get("config"), &user_name, ufile.clone(), dir)
                        .map_err(|(field, message)| ConfigError::InvalidField {
                            path: ufile.clone(),
                            field: ufield(&field),
                            message,
                        })?;
                    cfg.auth = Auth::Oidc(Box::new(oidc));
                }
                _ => {
                    // gcp and azure were removed from client-go (1.26): exec plugins replace them.
                    return Err(ConfigError::Unsupported {
                        path: ufile.clone(),
                        field: ufield("auth-provider.name"),
                    });
                }
            }
        }
        if u.exec.is_some() || u.auth_provider.is_some() {
            // The plugin's credential is used with (client-go: instead of) a static token.
        } else if let Some(t) = u.token.as_ref().filter(|t| !t.expose().is_empty()) {
            cfg.auth = Auth::Token(t.clone());
        } else if let Some(tf) = u.token_file.as_ref().filter(|t| !t.is_empty()) {
            let path = PathBuf::from(tf);
            let token = std::fs::read_to_string(&path).map_err(|e| ConfigError::InvalidField {
                path: ufile.clone(),
                field: ufield("tokenFile"),
                message: format!("{}: {e}", path.display()),
            })?;
            if token.trim().is_empty() {
                return Err(ConfigError::InvalidField {
                    path: ufile.clone(),
                    field: ufield("tokenFile"),
                    message: format!("{}: empty", path.display()),
                });
            }
            cfg.auth = Auth::TokenFile(path);
        } else if let Some(username) = u.username.as_ref().filter(|n| !n.is_empty()) {
            cfg.auth = Auth::Basic {
                username: username.clone(),
                password: u.password.clone().unwrap_or_default(),
            };
        }
        let cert = load(
            ufile,
            &ufield("client-certificate"),
            u.client_certificate_data.as_deref(),
            u.client_certificate.as_deref(),
        )?;
        let key = load(
            ufile,
            &ufield("client-key"),
            u.client_key_data.as_ref().map(|k| k.expose().as_str()),
            u.client_key.as_deref(),
        )
        .map_err(|e| match e {
            // The base64 decoder's message quotes the offending symbol: not for key data.
            ConfigError::InvalidField { path, field, .. } if field.ends_with("-data") => {
                ConfigError::InvalidField {
                    path,
                    field,
                    message: "not base64 (the value is not shown)".into(),
                }
            }
            e => e,
        })?;
        match (cert, key) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(ConfigError::MissingField {
                    path: ufile.clone(),
                    field: ufield("client-key"),
                });
            }
            (None, Some(_)) => {
                return Err(ConfigError::MissingField {
                    path: ufile.clone(),
                    field: ufield("client-certificate"),
                });
            }
            (Some(cert_pem), Some(key_pem)) => {
                check_certs(&cert_pem).map_err(|message| ConfigError::InvalidField {
                    path: ufile.clone(),
                    field: ufield(if u.client_certificate_data.is_some() {
                        "client-certificate-data"
                    } else {
                        "client-certificate"
                    }),
                    message,
                })?;
                check_key(&key_pem).map_err(|message| ConfigError::InvalidField {
                    path: ufile.clone(),
                    field: ufield(if u.client_key_data.is_some() {
                        "client-key-data"
                    } else {
                        "client-key"
                    }),
                    message,
                })?;
                cfg.client_identity = Some(ClientIdentity {
                    cert_pem,
                    key_pem: Secret(key_pem),
                });
            }
        }
        Ok(cfg)
    }
}

fn check_server(server: &str) -> Result<(), String> {
    let uri: http::Uri = server.parse().map_err(|e| format!("{server:?}: {e}"))?;
    match uri.scheme_str() {
        Some("https") | Some("http") => {}
        _ => return Err(format!("{server:?}: scheme must be https or http")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{server:?}: no host"));
    }
    Ok(())
}

/// `*-data` (base64) wins over the file path, as in kubectl.
fn load(
    file: &Path,
    field: &str,
    data: Option<&str>,
    path: Option<&str>,
) -> Result<Option<Vec<u8>>, ConfigError> {
    if let Some(d) = data.filter(|d| !d.trim().is_empty()) {
        let clean: String = d.chars().filter(|c| !c.is_whitespace()).collect();
        return base64::engine::general_purpose::STANDARD
            .decode(clean)
            .map(Some)
            .map_err(|e| ConfigError::InvalidField {
                path: file.to_path_buf(),
                field: format!("{field}-data"),
                message: format!("not base64: {e}"),
            });
    }
    if let Some(p) = path.filter(|p| !p.is_empty()) {
        return std::fs::read(p)
            .map(Some)
            .map_err(|e| ConfigError::InvalidField {
                path: file.to_path_buf(),
                field: field.to_string(),
                message: format!("{p}: {e}"),
            });
    }
    Ok(None)
}

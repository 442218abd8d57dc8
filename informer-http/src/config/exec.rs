//! The `exec` section of a kubeconfig user: a credential plugin (`aws eks get-token`,
//! `gke-gcloud-auth-plugin`, `kubelogin`, ...), as client-go's
//! `plugin/pkg/client/auth/exec` reads it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{Secret, SourceId};

/// The `client.authentication.k8s.io` version a plugin speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExecApiVersion {
    /// `client.authentication.k8s.io/v1`.
    V1,
    /// `client.authentication.k8s.io/v1beta1`.
    V1Beta1,
}

impl ExecApiVersion {
    /// The `apiVersion` string.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecApiVersion::V1 => "client.authentication.k8s.io/v1",
            ExecApiVersion::V1Beta1 => "client.authentication.k8s.io/v1beta1",
        }
    }
}

/// Whether the plugin may talk to the user through the terminal (`interactiveMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InteractiveMode {
    /// Never: the plugin's standard input is empty.
    Never,
    /// When the program's standard input is a terminal, the plugin gets it.
    IfAvailable,
    /// The plugin needs a terminal: running it without one is an error (never a hang).
    Always,
}

/// What a plugin learns of the cluster when `provideClusterInfo` is set (sent in
/// `KUBERNETES_EXEC_INFO`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecClusterInfo {
    /// The server URL.
    pub server: String,
    /// `tls-server-name`, if any.
    pub tls_server_name: Option<String>,
    /// `insecure-skip-tls-verify`.
    pub insecure_skip_tls_verify: bool,
    /// The CA bundle, PEM.
    pub certificate_authority_data: Option<Vec<u8>>,
    /// `proxy-url`, if any.
    pub proxy_url: Option<String>,
}

/// A credential plugin to run for tokens or client certificates.
///
/// `Debug` shows the command and where it came from, not its arguments or environment (they
/// can carry secrets; client-go redacts them as well). Clones share the plugin's cached
/// credential.
#[derive(Clone)]
#[non_exhaustive]
pub struct ExecConfig {
    /// The program (a path, or a name looked up in `PATH`).
    pub command: String,
    /// Its arguments.
    pub args: Vec<Secret<String>>,
    /// Extra environment variables for it (on top of the program's own environment).
    pub env: Vec<(String, Secret<String>)>,
    /// The protocol version.
    pub api_version: ExecApiVersion,
    /// Shown when the command cannot be found.
    pub install_hint: Option<String>,
    /// Send the cluster's details in `KUBERNETES_EXEC_INFO`.
    pub provide_cluster_info: Option<ExecClusterInfo>,
    /// Whether the plugin may use the terminal.
    pub interactive_mode: InteractiveMode,
    /// A plugin that has not finished after this long is killed (default 60 s; an interactive
    /// one gets 5 minutes).
    pub timeout: Duration,
    /// The kubeconfig user this plugin authenticates (named in errors).
    pub user: String,
    /// The kubeconfig file defining it.
    pub kubeconfig: PathBuf,
    /// Which source this is: shared by its clones, so they share its credential.
    pub(crate) source: SourceId,
}

impl ExecConfig {
    /// A plugin running `command` for the user `user`, speaking `v1`, never interactive.
    pub fn new(command: impl Into<String>, user: impl Into<String>) -> ExecConfig {
        ExecConfig {
            command: command.into(),
            args: Vec::new(),
            env: Vec::new(),
            api_version: ExecApiVersion::V1,
            install_hint: None,
            provide_cluster_info: None,
            interactive_mode: InteractiveMode::Never,
            timeout: Duration::from_secs(60),
            user: user.into(),
            kubeconfig: PathBuf::new(),
            source: SourceId::new(),
        }
    }
}

impl PartialEq for ExecConfig {
    fn eq(&self, o: &Self) -> bool {
        self.command == o.command
            && self.args == o.args
            && self.env == o.env
            && self.api_version == o.api_version
            && self.install_hint == o.install_hint
            && self.provide_cluster_info == o.provide_cluster_info
            && self.interactive_mode == o.interactive_mode
            && self.timeout == o.timeout
            && self.user == o.user
            && self.kubeconfig == o.kubeconfig
    }
}

impl Eq for ExecConfig {}

impl fmt::Debug for ExecConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecConfig")
            .field("command", &self.command)
            .field("args", &format_args!("<{} redacted>", self.args.len()))
            .field(
                "env",
                &self.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            )
            .field("api_version", &self.api_version)
            .field("install_hint", &self.install_hint)
            .field("provide_cluster_info", &self.provide_cluster_info.is_some())
            .field("interactive_mode", &self.interactive_mode)
            .field("timeout", &self.timeout)
            .field("user", &self.user)
            .field("kubeconfig", &self.kubeconfig)
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawExec {
    command: Option<String>,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<RawEnv>>,
    api_version: Option<String>,
    install_hint: Option<String>,
    #[serde(default)]
    provide_cluster_info: bool,
    interactive_mode: Option<String>,
}

#[derive(Deserialize)]
struct RawEnv {
    name: String,
    value: Option<String>,
}

/// Reads an `exec` section. `Err` is the field (below `exec`) and what is wrong; messages never
/// quote arguments or environment values.
pub(crate) fn parse(
    value: &serde_norway::Value,
    user: &str,
    kubeconfig: PathBuf,
) -> Result<ExecConfig, (String, String)> {
    let raw: RawExec = serde_norway::from_value(value.clone()).map_err(|_| {
        (
            "exec".to_string(),
            "not an exec section of the expected shape (command, args, env, apiVersion, \
             installHint, provideClusterInfo, interactiveMode)"
                .to_string(),
        )
    })?;
    let command = raw
        .command
        .filter(|c| !c.is_empty())
        .ok_or_else(|| ("exec.command".to_string(), "missing".to_string()))?;
    let api_version = match raw.api_version.as_deref() {
        Some("client.authentication.k8s.io/v1") => ExecApiVersion::V1,
        Some("client.authentication.k8s.io/v1beta1") => ExecApiVersion::V1Beta1,
        Some(other) => {
            return Err((
                "exec.apiVersion".into(),
                format!(
                    "{other:?} is not supported (client.authentication.k8s.io/v1 or v1beta1; \
                     v1alpha1 was removed from Kubernetes in 1.24)"
                ),
            ));
        }
        None => return Err(("exec.apiVersion".into(), "missing".into())),
    };
    // As client-go: v1 requires the field, v1beta1 defaults to IfAvailable.
    let interactive_mode = match (raw.interactive_mode.as_deref(), api_version) {
        (Some("Never"), _) => InteractiveMode::Never,
        (Some("IfAvailable"), _) => InteractiveMode::IfAvailable,
        (Some("Always"), _) => InteractiveMode::Always,
        (None | Some(""), ExecApiVersion::V1Beta1) => InteractiveMode::IfAvailable,
        (None | Some(""), ExecApiVersion::V1) => {
            return Err((
                "exec.interactiveMode".into(),
                "required for client.authentication.k8s.io/v1 (Never, IfAvailable or Always)"
                    .into(),
            ));
        }
        (Some(other), _) => {
            return Err((
                "exec.interactiveMode".into(),
                format!("{other:?}: must be Never, IfAvailable or Always"),
            ));
        }
    };
    let mut env = Vec::new();
    for e in raw.env.unwrap_or_default() {
        if e.name.is_empty() {
            return Err(("exec.env".into(), "an entry has no name".into()));
        }
        env.push((e.name, Secret(e.value.unwrap_or_default())));
    }
    let timeout = if interactive_mode == InteractiveMode::Never {
        Duration::from_secs(60)
    } else {
        Duration::from_secs(300)
    };
    Ok(ExecConfig {
        command,
        args: raw
            .args
            .unwrap_or_default()
            .into_iter()
            .map(Secret)
            .collect(),
        env,
        api_version,
        install_hint: raw.install_hint.filter(|h| !h.is_empty()),
        provide_cluster_info: raw.provide_cluster_info.then(|| ExecClusterInfo {
            server: String::new(),
            tls_server_name: None,
            insecure_skip_tls_verify: false,
            certificate_authority_data: None,
            proxy_url: None,
        }),
        interactive_mode,
        timeout,
        user: user.to_string(),
        kubeconfig,
        source: SourceId::new(),
    })
}

//! A real kube-apiserver v1.20.2 + etcd on loopback, for tests and `cargo xtask cluster`.
//!
//! [`ensure_built`] installs what is missing from Debian (etcd, etcdctl, curl, openssl and, for
//! the one-time build, Go and the `kubernetes` source package) and builds `kube-apiserver` once
//! into a cache directory outside the repository:
//! `${INFORMER_CACHE_DIR:-$HOME/.cache/informer-rs}/kube-apiserver-v1.20.2/kube-apiserver`.
//! The build is done by the shell script `build-kube-apiserver.sh` shipped in this crate, under a
//! file lock, into a temporary directory that is renamed into place with a marker, so an
//! interrupted build is never taken for a good one. A cold build takes several minutes; a cached
//! call takes milliseconds.
//!
//! [`TestCluster::start`] runs etcd and kube-apiserver on free loopback ports in a fresh temporary
//! directory and waits until `/readyz` answers `ok` and the `default` namespace exists. Dropping
//! the [`TestCluster`] kills both processes (by their own pids) and removes the directory. A
//! watchdog process does the same if the owning process dies without dropping it (for example
//! when a test binary is killed).
//!
//! Nothing here needs `kubectl`: [`TestCluster::request`] makes plain HTTPS calls with `curl`.
//!
//! ```no_run
//! let mut cluster = testcluster::TestCluster::start()?;
//! // Use cluster.server, cluster.token and cluster.ca_pem with any HTTP client, or:
//! let (status, body) = cluster.request("GET", "/api/v1/namespaces/default/configmaps", None)?;
//! assert_eq!(status, 200, "{body}");
//! let rev = cluster.compact()?; // lists at older resourceVersions now answer 410
//! cluster.stop_apiserver()?; // etcd keeps the data
//! cluster.start_apiserver()?; // same port, same data
//! # let _ = rev;
//! # Ok::<(), testcluster::Error>(())
//! ```
//!
//! Requirements: Debian bookworm (or a Debian with bookworm's `kubernetes` source package
//! reachable), root or password-less `sudo` for the first `apt-get install`, `bash`, `flock`.

pub mod pods;
#[cfg(feature = "scripted")]
pub mod scripted;

use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The build script, embedded so the crate works wherever its binary runs.
const BUILD_SCRIPT: &str = include_str!("../build-kube-apiserver.sh");
/// Must match `MARKER_TEXT` in the build script.
const MARKER_TEXT: &str =
    "kube-apiserver v1.20.2 (Debian kubernetes source, reflect2 v1.0.2 vendored)";
/// Directory (inside the cache directory) that holds the finished build.
const VERSION_DIR: &str = "kube-apiserver-v1.20.2";
/// How long [`TestCluster::start`] waits for `/readyz` (and then for the `default` namespace).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a stopped process gets after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Everything that can go wrong while building or running the test cluster.
#[non_exhaustive]
#[derive(Debug)]
pub enum Error {
    /// A file-system or process-spawning operation failed.
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The install/build script failed; its output went to this process's stderr.
    Build {
        /// How it ended.
        status: String,
    },
    /// A needed program is not on `PATH` even after the install step.
    MissingTool {
        /// The program's name.
        tool: String,
    },
    /// A command ran but did not succeed.
    Command {
        /// What was being done.
        what: String,
        /// How it ended.
        status: String,
        /// Its standard error (and/or output), trimmed.
        output: String,
    },
    /// A process of the cluster exited while it was expected to run.
    Exited {
        /// `etcd` or `kube-apiserver`.
        process: String,
        /// How it ended.
        status: String,
        /// The last lines of its log.
        log_tail: String,
    },
    /// Something did not become ready in time.
    Timeout {
        /// What was waited for.
        what: String,
        /// How long.
        waited: Duration,
        /// The last lines of the relevant log.
        log_tail: String,
    },
    /// A state file of a detached cluster is missing or malformed, or its processes are gone.
    State {
        /// What is wrong.
        message: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::Build { status } => write!(
                f,
                "building kube-apiserver failed ({status}); see the build script's output above"
            ),
            Error::MissingTool { tool } => write!(f, "`{tool}` is not on PATH"),
            Error::Command {
                what,
                status,
                output,
            } => write!(f, "{what} failed ({status}): {output}"),
            Error::Exited {
                process,
                status,
                log_tail,
            } => write!(
                f,
                "{process} exited unexpectedly ({status}); end of its log:\n{log_tail}"
            ),
            Error::Timeout {
                what,
                waited,
                log_tail,
            } => write!(
                f,
                "timed out after {waited:.1?} waiting for {what}; end of the log:\n{log_tail}"
            ),
            Error::State { message } => write!(f, "cluster state: {message}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Paths of the programs a cluster runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    /// The cached build of kube-apiserver v1.20.2.
    pub kube_apiserver: PathBuf,
    /// Debian's etcd (3.4).
    pub etcd: PathBuf,
    /// Debian's etcdctl (used with `ETCDCTL_API=3`).
    pub etcdctl: PathBuf,
}

/// The cache directory: `$INFORMER_CACHE_DIR`, else `$HOME/.cache/informer-rs`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("INFORMER_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => Path::new(&home).join(".cache").join("informer-rs"),
        None => std::env::temp_dir().join("informer-rs-cache"),
    }
}

/// Finds an executable on `PATH` (and in the usual system directories).
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"];
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The cached kube-apiserver, if a complete build is there.
fn cached_apiserver(cache: &Path) -> Option<PathBuf> {
    let dir = cache.join(VERSION_DIR);
    let marker = fs::read_to_string(dir.join("complete")).ok()?;
    let bin = dir.join("kube-apiserver");
    (marker == MARKER_TEXT && is_executable(&bin)).then_some(bin)
}

/// The runtime programs, if all are installed.
fn runtime_tools() -> Option<(PathBuf, PathBuf)> {
    let etcd = which("etcd")?;
    let etcdctl = which("etcdctl")?;
    which("curl")?;
    which("openssl")?;
    Some((etcd, etcdctl))
}

static BUILT: Mutex<Option<Binaries>> = Mutex::new(None);

/// Makes sure kube-apiserver v1.20.2 is built and etcd, etcdctl, curl and openssl are installed,
/// doing whatever is missing (apt-get install, `apt-get source kubernetes`, the Go build), and
/// returns the programs' paths.
///
/// Cached: once the build is in [`cache_dir`] and the Debian packages are installed, this only
/// checks that the files are there. Concurrent callers (threads or processes) never build twice:
/// the build script holds a lock and re-checks the cache once it has it.
pub fn ensure_built() -> Result<Binaries, Error> {
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = built.as_ref().filter(|b| is_executable(&b.kube_apiserver)) {
        return Ok(b.clone());
    }
    let cache = cache_dir();
    let cached = cached_apiserver(&cache);
    let tools = runtime_tools();
    if let (Some(kube_apiserver), Some((etcd, etcdctl))) = (cached.clone(), tools.clone()) {
        let b = Binaries {
            kube_apiserver,
            etcd,
            etcdctl,
        };
        *built = Some(b.clone());
        return Ok(b);
    }
    // Say why before the script's own stage lines ("[testcluster build] ...") follow.
    let start = std::time::Instant::now();
    if cached.is_none() {
        eprintln!(
            "testcluster: no complete kube-apiserver build in {}",
            cache.join(VERSION_DIR).display()
        );
    }
    if tools.is_none() {
        let missing: Vec<&str> = ["etcd", "etcdctl", "curl", "openssl"]
            .into_iter()
            .filter(|t| which(t).is_none())
            .collect();
        eprintln!("testcluster: not installed: {}", missing.join(", "));
    }
    run_build_script(&cache, cached.is_some())?;
    eprintln!(
        "testcluster: build step done in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let kube_apiserver = cached_apiserver(&cache).ok_or_else(|| Error::Build {
        status: format!(
            "the script succeeded but {} holds no complete build",
            cache.join(VERSION_DIR).display()
        ),
    })?;
    let missing = |tool: &str| Error::MissingTool { tool: tool.into() };
    let etcd = which("etcd").ok_or_else(|| missing("etcd"))?;
    let etcdctl = which("etcdctl").ok_or_else(|| missing("etcdctl"))?;
    which("curl").ok_or_else(|| missing("curl"))?;
    which("openssl").ok_or_else(|| missing("openssl"))?;
    let b = Binaries {
        kube_apiserver,
        etcd,
        etcdctl,
    };
    *built = Some(b.clone());
    Ok(b)
}

fn run_build_script(cache: &Path, deps_only: bool) -> Result<(), Error> {
    fs::create_dir_all(cache).map_err(io_err(format!("creating {}", cache.display())))?;
    // Write the embedded script atomically (another process may be running an older copy).
    let script = cache.join("build-kube-apiserver.sh");
    let tmp = cache.join(format!("build-kube-apiserver.sh.{}", std::process::id()));
    fs::write(&tmp, BUILD_SCRIPT).map_err(io_err(format!("writing {}", tmp.display())))?;
    fs::rename(&tmp, &script).map_err(io_err(format!("renaming to {}", script.display())))?;
    let mut cmd = Command::new("bash");
    cmd.arg(&script).arg(cache);
    if deps_only {
        cmd.arg("--deps-only");
    }
    eprintln!(
        "testcluster: {} (cache {})",
        if deps_only {
            "installing etcd/curl/openssl"
        } else {
            "installing and building kube-apiserver v1.20.2; the first time takes several minutes"
        },
        cache.display()
    );
    // The script's output goes to stderr so a test run shows progress.
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(io_err("running bash build-kube-apiserver.sh"))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::Build {
            status: status.to_string(),
        })
    }
}

/// How [`TestCluster::start_with`] sets a cluster up.
#[non_exhaustive]
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Directory for the cluster's files; must not exist yet. Default: a fresh directory under
    /// the system temp directory.
    pub dir: Option<PathBuf>,
    /// Run etcd and kube-apiserver in their own process group, so that a Ctrl-C in the
    /// terminal that started them does not stop them (for clusters meant to be detached).
    pub new_process_group: bool,
    /// Extra kube-apiserver flags, appended after the default ones (a later flag wins), e.g.
    /// `--etcd-compaction-interval=0` or `--default-watch-cache-size=0`. Kept across
    /// [`TestCluster::stop_apiserver`]/[`TestCluster::start_apiserver`] and detach/attach.
    pub apiserver_args: Vec<String>,
}

impl StartOptions {
    /// Default options: temp directory, same process group.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `dir` (which must not exist yet) for the cluster's files.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Starts the processes in their own process group (see the field).
    pub fn new_process_group(mut self, yes: bool) -> Self {
        self.new_process_group = yes;
        self
    }

    /// Appends an extra kube-apiserver flag (see the field).
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }
}

/// A running process of the cluster: our child, or (after [`TestCluster::attach`]) a pid.
#[derive(Debug)]
enum Proc {
    Child(Child),
    Pid(u32),
}

impl Proc {
    fn pid(&self) -> u32 {
        match self {
            Proc::Child(c) => c.id(),
            Proc::Pid(p) => *p,
        }
    }
}

/// A running etcd + kube-apiserver on loopback. Dropping it stops both and removes [`dir`].
///
/// [`dir`]: TestCluster::dir
#[derive(Debug)]
pub struct TestCluster {
    /// `https://127.0.0.1:PORT`.
    pub server: String,
    /// Bearer token of an admin user (group `system:masters`).
    pub token: String,
    /// The apiserver's self-signed serving certificate (with its CA), usable as a CA bundle.
    pub ca_pem: Vec<u8>,
    /// A kubeconfig for this cluster with the admin token.
    pub kubeconfig: PathBuf,
    /// The directory holding the cluster's files (etcd data, logs, certificates, state).
    pub dir: PathBuf,
    user_token: String,
    bins: Binaries,
    etcd_port: u16,
    peer_port: u16,
    apiserver_port: u16,
    etcd: Option<Proc>,
    apiserver: Option<Proc>,
    watchdog: Option<Child>,
    detached: bool,
    new_process_group: bool,
    extra_apiserver_args: Vec<String>,
}

static DIR_COUNTER: AtomicU32 = AtomicU32::new(0);

fn random_hex(bytes: usize) -> Result<String, Error> {
    let mut buf = vec![0u8; bytes];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(io_err("reading /dev/urandom"))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Picks `n` distinct free loopback ports (holding all listeners until all are picked).
fn free_ports(n: usize) -> Result<Vec<u16>, Error> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_err("binding 127.0.0.1:0 to find a free port"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_err("reading a bound port"))
}

fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    if all.is_empty() {
        format!("({} is empty or missing)", path.display())
    } else {
        all[start..].join("\n")
    }
}

fn log_file(path: &Path) -> Result<fs::File, Error> {
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io_err(format!("opening {}", path.display())))
}

/// Runs a command to completion; its stdout on success, else an [`Error::Command`].
fn output(what: &str, cmd: &mut Command) -> Result<String, Error> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("{what}: cannot start")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let mut text = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if text.is_empty() {
            text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        }
        Err(Error::Command {
            what: what.into(),
            status: out.status.to_string(),
            output: text,
        })
    }
}

/// Sends a signal with the shell's `kill` (std has no way to signal a pid it did not spawn).
fn signal(pid: u32, sig: &str) {
    let _ = Command::new("sh")
        .args([
            "-c",
            "kill -s \"$1\" \"$2\" 2>/dev/null",
            "sh",
            sig,
            &pid.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Whether `pid` is a live (not zombie) process whose command line mentions `needle`.
fn pid_alive_with(pid: u32, needle: &str) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state is the first field after the parenthesised command name.
    let state = stat.rsplit(')').next().unwrap_or("").trim_start();
    if state.starts_with('Z') || state.starts_with('X') {
        return false;
    }
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmdline).contains(needle)
}

const WATCHDOG: &str = r#"
owner=$1; dir=$2
while kill -0 "$owner" 2>/dev/null && [ -d "$dir" ]; do sleep 1; done
[ -f "$dir/state" ] || exit 0
for p in $(sed -n 's/^\(etcd\|apiserver\)_pid=//p' "$dir/state"); do
    if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$dir"; then kill -9 "$p"; fi
done
rm -rf "$dir"
"#;

/// Established TCP connections this process holds to `port` (on any address): the sockets in
/// `/proc/self/fd` that `/proc/net/tcp` and `tcp6` list as ESTABLISHED to that remote port.
/// For tests and benches that count connections (HTTP/2 sharing one, say).
pub fn connections_to(port: u16) -> usize {
    let mut inodes = std::collections::HashSet::new();
    for fd in fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(target) = fs::read_link(fd.path()) {
            let t = target.to_string_lossy();
            if let Some(n) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                inodes.insert(n.to_string());
            }
        }
    }
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "01" {
                continue;
            }
            let remote = f[2]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if remote == Some(port) && inodes.contains(f[9]) {
                n += 1;
            }
        }
    }
    n
}

impl TestCluster {
    /// The port of [`server`](Self::server) (the apiserver's HTTPS port).
    pub fn port(&self) -> u16 {
        self.server
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the server URL ends in a port")
    }

    /// Builds if needed ([`ensure_built`]), then starts etcd and kube-apiserver on free loopback
    /// ports in a fresh temporary directory and waits (up to 60 s) until `/readyz` is `ok` and
    /// the `default` namespace exists.
    pub fn start() -> Result<TestCluster, Error> {
        Self::start_with(StartOptions::default())
    }

    /// Like [`TestCluster::start`], with options.
    pub fn start_with(options: StartOptions) -> Result<TestCluster, Error> {
        let bins = ensure_built()?;
        let dir = match options.dir {
            Some(d) => d,
            None => std::env::temp_dir().join(format!(
                "informer-testcluster-{}-{}-{}",
                std::process::id(),
                DIR_COUNTER.fetch_add(1, Ordering::Relaxed),
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0)
            )),
        };
        if let Some(parent) = dir.parent() {
            fs::create_dir_all(parent).map_err(io_err(format!("creating {}", parent.display())))?;
        }
        fs::create_dir(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let dir = dir
            .canonicalize()
            .map_err(io_err(format!("resolving {}", dir.display())))?;
        let mut cluster = TestCluster {
            server: String::new(),
            token: random_hex(16)?,
            ca_pem: Vec::new(),
            kubeconfig: dir.join("kubeconfig"),
            dir,
            user_token: random_hex(16)?,
            bins,
            etcd_port: 0,
            peer_port: 0,
            apiserver_port: 0,
            etcd: None,
            apiserver: None,
            watchdog: None,
            detached: false,
            new_process_group: options.new_process_group,
            extra_apiserver_args: options.apiserver_args,
        };
        // From here on, Drop cleans up whatever was started.
        cluster.prepare_files()?;
        cluster.start_watchdog()?;
        let mut last_err = None;
        // A port picked as free may be taken before etcd or the apiserver binds it: retry.
        for _ in 0..3 {
            match cluster.boot() {
                Ok(()) => {
                    cluster.write_kubeconfig()?;
                    return Ok(cluster);
                }
                Err(e) => {
                    cluster.kill_all(false);
                    let port_clash = matches!(&e, Error::Exited { log_tail, .. }
                        if log_tail.contains("address already in use"));
                    if !port_clash {
                        return Err(e);
                    }
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.expect("three attempts failed"))
    }

    fn prepare_files(&mut self) -> Result<(), Error> {
        let d = &self.dir;
        fs::write(
            d.join("tokens.csv"),
            format!(
                "{},admin,admin-uid,\"system:masters\"\n{},user,user-uid,\"informer-users\"\n",
                self.token, self.user_token
            ),
        )
        .map_err(io_err("writing tokens.csv"))?;
        fs::create_dir_all(d.join("certs")).map_err(io_err("creating certs dir"))?;
        output(
            "openssl genrsa (service-account key)",
            Command::new("openssl")
                .args(["genrsa", "-out"])
                .arg(d.join("sa.key"))
                .arg("2048"),
        )?;
        Ok(())
    }

    fn start_watchdog(&mut self) -> Result<(), Error> {
        let child = Command::new("sh")
            .args(["-c", WATCHDOG, "testcluster-watchdog"])
            .arg(std::process::id().to_string())
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io_err("starting the watchdog"))?;
        self.watchdog = Some(child);
        Ok(())
    }

    fn boot(&mut self) -> Result<(), Error> {
        let ports = free_ports(3)?;
        self.etcd_port = ports[0];
        self.peer_port = ports[1];
        self.apiserver_port = ports[2];
        self.server = format!("https://127.0.0.1:{}", self.apiserver_port);
        let _ = fs::remove_dir_all(self.dir.join("etcd"));
        self.spawn_etcd()?;
        self.wait_etcd()?;
        self.spawn_apiserver()?;
        self.wait_apiserver()
    }

    fn etcd_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd_port)
    }

    fn spawn(&self, program: &Path, args: &[String], log: &str) -> Result<Child, Error> {
        let log = self.dir.join(log);
        let out = log_file(&log)?;
        let err = out
            .try_clone()
            .map_err(io_err(format!("opening {}", log.display())))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if self.new_process_group {
            cmd.process_group(0);
        }
        cmd.spawn()
            .map_err(io_err(format!("starting {}", program.display())))
    }

    fn spawn_etcd(&mut self) -> Result<(), Error> {
        let url = self.etcd_url();
        let args = vec![
            "--name=testcluster".to_string(),
            format!("--data-dir={}", self.dir.join("etcd").display()),
            format!("--listen-client-urls={url}"),
            format!("--advertise-client-urls={url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{}", self.peer_port),
            format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{}",
                self.peer_port
            ),
            format!(
                "--initial-cluster=testcluster=http://127.0.0.1:{}",
                self.peer_port
            ),
        ];
        let child = self.spawn(&self.bins.etcd, &args, "etcd.log")?;
        self.etcd = Some(Proc::Child(child));
        self.write_state()
    }

    fn apiserver_args(&self) -> Vec<String> {
        let d = &self.dir;
        let key = d.join("sa.key");
        vec![
            format!("--etcd-servers={}", self.etcd_url()),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={}", self.apiserver_port),
            format!("--cert-dir={}", d.join("certs").display()),
            format!("--token-auth-file={}", d.join("tokens.csv").display()),
            "--authorization-mode=RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", key.display()),
            format!("--service-account-signing-key-file={}", key.display()),
            "--service-cluster-ip-range=10.96.0.0/12".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
        ]
        .into_iter()
        .chain(self.extra_apiserver_args.iter().cloned())
        .collect()
    }

    fn spawn_apiserver(&mut self) -> Result<(), Error> {
        let args = self.apiserver_args();
        let child = self.spawn(&self.bins.kube_apiserver, &args, "kube-apiserver.log")?;
        self.apiserver = Some(Proc::Child(child));
        self.write_state()
    }

    /// Fails with [`Error::Exited`] if the process has exited.
    fn check_running(&mut self, apiserver: bool) -> Result<(), Error> {
        let (slot, name, log) = if apiserver {
            (&mut self.apiserver, "kube-apiserver", "kube-apiserver.log")
        } else {
            (&mut self.etcd, "etcd", "etcd.log")
        };
        let status = match slot {
            Some(Proc::Child(c)) => match c.try_wait() {
                Ok(Some(st)) => Some(st.to_string()),
                _ => None,
            },
            Some(Proc::Pid(p)) => (!pid_alive_with(*p, &self.dir.to_string_lossy()))
                .then(|| format!("pid {p} is gone")),
            None => Some("not started".into()),
        };
        match status {
            Some(status) => Err(Error::Exited {
                process: name.into(),
                status,
                log_tail: tail(&self.dir.join(log), 30),
            }),
            None => Ok(()),
        }
    }

    fn wait_etcd(&mut self) -> Result<(), Error> {
        let url = format!("{}/health", self.etcd_url());
        let healthy =
            |o: &Output| String::from_utf8_lossy(&o.stdout).contains("\"health\":\"true\"");
        let mut probe = Command::new("curl");
        probe.args(["-s", "--max-time", "2", &url]);
        self.poll_until(
            Instant::now(),
            false,
            &format!("etcd at {url}"),
            probe,
            healthy,
        )
    }

    /// Runs `probe` every 100 ms until its output is `ready`, while the process (kube-apiserver
    /// or etcd) runs; gives up `READY_TIMEOUT` after `start` with `what` and the log's tail.
    fn poll_until(
        &mut self,
        start: Instant,
        apiserver: bool,
        what: &str,
        mut probe: Command,
        ready: impl Fn(&Output) -> bool,
    ) -> Result<(), Error> {
        probe.stdin(Stdio::null());
        loop {
            self.check_running(apiserver)?;
            if matches!(&probe.output(), Ok(o) if ready(o)) {
                return Ok(());
            }
            if start.elapsed() > READY_TIMEOUT {
                let log = if apiserver {
                    "kube-apiserver.log"
                } else {
                    "etcd.log"
                };
                return Err(Error::Timeout {
                    what: what.into(),
                    waited: start.elapsed(),
                    log_tail: tail(&self.dir.join(log), 30),
                });
            }
            sleep(Duration::from_millis(100));
        }
    }

    fn ca_file_path(&self) -> PathBuf {
        self.dir.join("certs").join("apiserver.crt")
    }

    fn wait_apiserver(&mut self) -> Result<(), Error> {
        let start = Instant::now();
        // `/readyz` says `ok` once the bootstrap controller has started, not once it has
        // created the `default` namespace: a test that writes there at once could get a 404
        // (`namespaces "default" not found`, seen in CI). So wait for the namespace too.
        for path in ["/readyz", "/api/v1/namespaces/default"] {
            let url = format!("{}{path}", self.server);
            let mut probe = Command::new("curl");
            probe
                .args(["-sk", "--max-time", "2", "-o", "/dev/null"])
                .args(["-w", "%{http_code}", "-H"])
                .arg(format!("Authorization: Bearer {}", self.token))
                .arg(&url);
            let what = format!("kube-apiserver {url}");
            self.poll_until(start, true, &what, probe, |o| o.stdout == b"200")?;
        }
        let ca = self.ca_file_path();
        self.ca_pem = fs::read(&ca).map_err(io_err(format!("reading {}", ca.display())))?;
        Ok(())
    }

    fn write_state(&self) -> Result<(), Error> {
        let pid = |p: &Option<Proc>| p.as_ref().map(Proc::pid).unwrap_or(0);
        let text = format!(
            "server={}\ntoken={}\nuser_token={}\netcd_port={}\npeer_port={}\napiserver_port={}\n\
             etcd_pid={}\napiserver_pid={}\nnew_process_group={}\n",
            self.server,
            self.token,
            self.user_token,
            self.etcd_port,
            self.peer_port,
            self.apiserver_port,
            pid(&self.etcd),
            pid(&self.apiserver),
            self.new_process_group,
        );
        let text = self
            .extra_apiserver_args
            .iter()
            .fold(text, |t, a| t + "apiserver_arg=" + a + "\n");
        let tmp = self.dir.join("state.tmp");
        fs::write(&tmp, text).map_err(io_err("writing state.tmp"))?;
        fs::rename(&tmp, self.dir.join("state")).map_err(io_err("renaming state"))
    }

    fn write_kubeconfig(&self) -> Result<(), Error> {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testcluster\n  cluster:\n    \
             server: {}\n    certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    \
             token: {}\ncontexts:\n- name: testcluster\n  context:\n    cluster: testcluster\n    \
             user: admin\ncurrent-context: testcluster\n",
            self.server,
            base64(&self.ca_pem),
            self.token
        );
        fs::write(&self.kubeconfig, text)
            .map_err(io_err(format!("writing {}", self.kubeconfig.display())))
    }

    /// Path of the CA bundle file ([`TestCluster::ca_pem`] on disk).
    pub fn ca_file(&self) -> PathBuf {
        self.ca_file_path()
    }

    /// Path of kube-apiserver's log (stdout and stderr, appended across restarts).
    pub fn apiserver_log(&self) -> PathBuf {
        self.dir.join("kube-apiserver.log")
    }

    /// Path of etcd's log.
    pub fn etcd_log(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }

    /// The programs this cluster runs.
    pub fn binaries(&self) -> &Binaries {
        &self.bins
    }

    /// The etcd client URL, `http://127.0.0.1:PORT`.
    pub fn etcd_endpoint(&self) -> String {
        self.etcd_url()
    }

    /// A second, valid token of a non-admin user (`user`, group `informer-users`): authenticated
    /// (no 401) but with no RBAC permissions, so lists and watches answer 403.
    pub fn extra_token(&self) -> &str {
        &self.user_token
    }

    /// A well-formed token that no user has: the apiserver answers 401.
    pub fn invalid_token(&self) -> String {
        "0".repeat(self.token.len())
    }

    /// Compacts etcd at its current revision (`etcdctl compact`, `ETCDCTL_API=3`) and returns
    /// that revision. Lists at an older `resourceVersion` with `resourceVersionMatch=Exact` then
    /// answer 410 Gone.
    pub fn compact(&self) -> Result<i64, Error> {
        let endpoint = format!("--endpoints={}", self.etcd_url());
        let status = output(
            "etcdctl endpoint status",
            Command::new(&self.bins.etcdctl)
                .env("ETCDCTL_API", "3")
                .args([endpoint.as_str(), "endpoint", "status", "-w", "json"]),
        )?;
        let revision = json_int_after(&status, "\"revision\":").ok_or_else(|| Error::Command {
            what: "etcdctl endpoint status".into(),
            status: "no revision in its output".into(),
            output: status.trim().to_string(),
        })?;
        let mut cmd = Command::new(&self.bins.etcdctl);
        cmd.env("ETCDCTL_API", "3")
            .args([endpoint.as_str(), "compact", &revision.to_string()]);
        match output("etcdctl compact", &mut cmd) {
            Ok(_) => Ok(revision),
            // Compacting at the revision already compacted to is not an error for us.
            Err(Error::Command { output, .. })
                if output.contains("required revision has been compacted") =>
            {
                Ok(revision)
            }
            Err(e) => Err(e),
        }
    }

    /// Stops only kube-apiserver (SIGTERM, then SIGKILL after 10 s); etcd keeps running.
    pub fn stop_apiserver(&mut self) -> Result<(), Error> {
        if let Some(p) = self.apiserver.take() {
            self.stop_proc(p, "kube-apiserver");
        }
        self.write_state()
    }

    /// (Re)starts kube-apiserver on the same port against the same etcd, and waits for
    /// `/readyz`. Does nothing if it is running.
    pub fn start_apiserver(&mut self) -> Result<(), Error> {
        if self.apiserver.is_some() && self.check_running(true).is_ok() {
            return Ok(());
        }
        self.apiserver = None;
        self.check_running(false)?;
        let start = Instant::now();
        loop {
            self.spawn_apiserver()?;
            match self.wait_apiserver() {
                Ok(()) => return Ok(()),
                // The port may still be held for a moment after the old process died.
                Err(Error::Exited { log_tail, .. })
                    if log_tail.contains("address already in use")
                        && start.elapsed() < Duration::from_secs(20) =>
                {
                    self.apiserver = None;
                    sleep(Duration::from_millis(500));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether kube-apiserver is currently running.
    pub fn apiserver_running(&mut self) -> bool {
        self.apiserver.is_some() && self.check_running(true).is_ok()
    }

    fn stop_proc(&self, p: Proc, name: &str) {
        self.end_proc(p, name, "TERM", STOP_GRACE);
    }

    /// Sends `sig` and waits up to `grace` for the process to go, then kills it (SIGKILL) and
    /// waits for it.
    fn end_proc(&self, p: Proc, name: &str, sig: &str, grace: Duration) {
        match p {
            Proc::Child(mut c) => {
                if let Ok(None) = c.try_wait() {
                    signal(c.id(), sig);
                    let start = Instant::now();
                    while start.elapsed() < grace {
                        if let Ok(Some(_)) = c.try_wait() {
                            return;
                        }
                        sleep(Duration::from_millis(20));
                    }
                    if sig != "KILL" {
                        eprintln!("testcluster: {name} ignored SIG{sig}; killing it");
                    }
                    let _ = c.kill();
                }
                let _ = c.wait();
            }
            Proc::Pid(pid) => {
                let dir = self.dir.to_string_lossy().into_owned();
                if !pid_alive_with(pid, &dir) {
                    return;
                }
                signal(pid, sig);
                let start = Instant::now();
                while start.elapsed() < grace {
                    if !pid_alive_with(pid, &dir) {
                        return;
                    }
                    sleep(Duration::from_millis(20));
                }
                if sig != "KILL" {
                    eprintln!("testcluster: {name} (pid {pid}) ignored SIG{sig}; killing it");
                }
                signal(pid, "KILL");
                while pid_alive_with(pid, &dir) && start.elapsed() < grace + STOP_GRACE {
                    sleep(Duration::from_millis(20));
                }
            }
        }
    }

    /// Stops both processes: gracefully (SIGTERM, [`STOP_GRACE`]) when the cluster lives on,
    /// at once (SIGKILL) when it is being thrown away with its data.
    fn kill_all(&mut self, graceful: bool) {
        let (sig, grace) = if graceful {
            ("TERM", STOP_GRACE)
        } else {
            ("KILL", STOP_GRACE)
        };
        if let Some(p) = self.apiserver.take() {
            self.end_proc(p, "kube-apiserver", sig, grace);
        }
        if let Some(p) = self.etcd.take() {
            self.end_proc(p, "etcd", sig, grace);
        }
    }

    /// Leaves the cluster running after this value is gone: nothing is stopped or removed.
    /// Returns the directory to pass to [`TestCluster::attach`] later (its `state` file records
    /// the pids, ports and tokens).
    pub fn detach(mut self) -> PathBuf {
        self.detached = true;
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        self.dir.clone()
    }

    /// Takes over a cluster left running by [`TestCluster::detach`] from its directory.
    /// Dropping the result stops it and removes the directory. Fails with [`Error::State`] if
    /// the state file is missing or malformed, or if neither process runs any more (then the
    /// leftover is cleaned up).
    pub fn attach(dir: impl AsRef<Path>) -> Result<TestCluster, Error> {
        let dir = dir.as_ref().to_path_buf();
        let state_path = dir.join("state");
        let text = fs::read_to_string(&state_path).map_err(|e| Error::State {
            message: format!("cannot read {}: {e}", state_path.display()),
        })?;
        let get = |key: &str| -> Result<String, Error> {
            text.lines()
                .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
                .map(str::to_string)
                .ok_or_else(|| Error::State {
                    message: format!("{} has no `{key}`", state_path.display()),
                })
        };
        let num = |key: &str| -> Result<u32, Error> {
            get(key)?.parse().map_err(|_| Error::State {
                message: format!("{}: `{key}` is not a number", state_path.display()),
            })
        };
        let bins = ensure_built()?;
        let port = |key: &str| -> Result<u16, Error> {
            u16::try_from(num(key)?).map_err(|_| Error::State {
                message: format!("{}: `{key}` is not a port", state_path.display()),
            })
        };
        let dir_str = dir.to_string_lossy().into_owned();
        let proc_of =
            |pid: u32| (pid != 0 && pid_alive_with(pid, &dir_str)).then_some(Proc::Pid(pid));
        let cluster = TestCluster {
            server: get("server")?,
            token: get("token")?,
            ca_pem: fs::read(dir.join("certs").join("apiserver.crt")).unwrap_or_default(),
            kubeconfig: dir.join("kubeconfig"),
            user_token: get("user_token")?,
            bins,
            etcd_port: port("etcd_port")?,
            peer_port: port("peer_port")?,
            apiserver_port: port("apiserver_port")?,
            etcd: proc_of(num("etcd_pid")?),
            apiserver: proc_of(num("apiserver_pid")?),
            watchdog: None,
            detached: false,
            new_process_group: get("new_process_group")? == "true",
            extra_apiserver_args: text
                .lines()
                .filter_map(|l| l.strip_prefix("apiserver_arg="))
                .map(str::to_string)
                .collect(),
            dir,
        };
        if cluster.etcd.is_none() && cluster.apiserver.is_none() {
            let message = format!(
                "no process of the cluster in {} runs any more; removed it",
                cluster.dir.display()
            );
            drop(cluster);
            return Err(Error::State { message });
        }
        Ok(cluster)
    }

    /// Makes an HTTPS request with the admin token: `method` (`GET`, `POST`, ...), `path`
    /// (starting with `/`, query included) and an optional JSON body. Returns the HTTP status
    /// and the body (compact JSON, as a client library would get it). The server certificate is
    /// verified against [`TestCluster::ca_pem`].
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, String), Error> {
        self.request_as(&self.token, method, path, body)
    }

    /// Like [`TestCluster::request`], with the given bearer token.
    pub fn request_as(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, String), Error> {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--max-time", "30", "-X", method, "--cacert"])
            .arg(self.ca_file_path())
            .arg("-H")
            .arg(format!("Authorization: Bearer {token}"))
            // Not curl's own User-Agent: the apiserver pretty-prints JSON for curl.
            .args(["-A", "testcluster", "-H", "Accept: application/json"])
            .args(["-w", "\n%{http_code}"]);
        if body.is_some() {
            cmd.args([
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                "@-",
            ]);
        }
        cmd.arg(format!("{}{}", self.server, path));
        let what = format!("curl -X {method} {path}");
        let mut child = cmd
            .stdin(if body.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err(format!("{what}: cannot start curl")))?;
        if let (Some(body), Some(mut stdin)) = (body, child.stdin.take()) {
            stdin
                .write_all(body.as_bytes())
                .map_err(io_err(format!("{what}: writing the body")))?;
        }
        let out = child
            .wait_with_output()
            .map_err(io_err(format!("{what}: waiting for curl")))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let parsed = text
            .rsplit_once('\n')
            .and_then(|(body, code)| Some((code.trim().parse::<u16>().ok()?, body.to_string())));
        match parsed {
            Some((code, body)) if out.status.success() && code != 0 => Ok((code, body)),
            _ => Err(Error::Command {
                what,
                status: out.status.to_string(),
                output: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            }),
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        // Its data goes with it: nothing to shut down gracefully (a kube-apiserver draining
        // its clients' requests can take the whole grace period).
        self.kill_all(false);
        let _ = fs::remove_dir_all(&self.dir);
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// The integer after the first `key` in `text` (a tiny stand-in for a JSON parser).
fn json_int_after(text: &str, key: &str) -> Option<i64> {
    let rest = &text[text.find(key)? + key.len()..];
    let rest = rest.trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn cluster_can_be_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<TestCluster>();
        send_sync::<Error>();
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want);
        }
    }

    #[test]
    fn json_int_after_finds_revision() {
        let s = r#"[{"Endpoint":"x","Status":{"header":{"cluster_id":1,"revision":42,"raft_term":2}}}]"#;
        assert_eq!(json_int_after(s, "\"revision\":"), Some(42));
        assert_eq!(json_int_after(s, "\"nope\":"), None);
    }
}

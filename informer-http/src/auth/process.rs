//! Running credential plugins: a [`ProcessRunner`] runs a command with its environment,
//! standard input and a timeout. The default, [`ThreadRunner`], runs it with `std::process` on
//! a helper thread and wakes the awaiting task when it is done, so it serves tokio, smol and
//! blocking programs alike without blocking an executor thread. The plugin's standard error
//! is forwarded, line by line as it arrives, to this program's standard error (prompts and
//! warnings reach the user as with kubectl); a plugin still running after its timeout is
//! killed.

use std::fmt;
use std::future::Future;
use std::io::{BufRead as _, Read as _};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::transport::BoxFuture;

/// A command to run. `Debug` shows the program only.
#[non_exhaustive]
pub struct ProcessSpec {
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables added to the program's own.
    pub env: Vec<(String, String)>,
    /// Give it this program's standard input (else an empty one).
    pub inherit_stdin: bool,
    /// Kill it after this long.
    pub timeout: Duration,
}

impl fmt::Debug for ProcessSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessSpec")
            .field("program", &self.program)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What a finished command left.
#[non_exhaustive]
pub struct ProcessOutput {
    /// It exited with status 0.
    pub success: bool,
    /// How it exited, for messages (`exit status: 1`).
    pub status: String,
    /// Its standard output (the credential: never logged).
    pub stdout: Vec<u8>,
    /// Its standard error (already forwarded to this program's standard error).
    pub stderr: Vec<u8>,
}

impl fmt::Debug for ProcessOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessOutput")
            .field("status", &self.status)
            .field("stdout", &format_args!("<{} bytes>", self.stdout.len()))
            .finish_non_exhaustive()
    }
}

/// Runs credential plugins: "run this command with this environment and standard input, with a
/// timeout". An error of kind `NotFound` means the program does not exist, `TimedOut` that it
/// was killed after the timeout.
pub trait ProcessRunner: Send + Sync + fmt::Debug {
    /// Runs `spec` to completion.
    fn run(&self, spec: ProcessSpec) -> BoxFuture<'static, std::io::Result<ProcessOutput>>;
}

/// Runs the command with `std::process` on a helper thread; the returned future completes when
/// it is done (works under any executor, and with `futures::executor::block_on`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadRunner;

impl ProcessRunner for ThreadRunner {
    fn run(&self, spec: ProcessSpec) -> BoxFuture<'static, std::io::Result<ProcessOutput>> {
        on_thread("informer-exec", move || run_blocking(&spec))
    }
}

/// Runs `f` on a new thread; the future completes with its result.
pub(super) fn on_thread<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> BoxFuture<'static, std::io::Result<T>> {
    let slot: Arc<Mutex<OneShot<std::io::Result<T>>>> = Arc::default();
    let tx = slot.clone();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let out = f();
            let mut s = tx.lock().unwrap_or_else(|e| e.into_inner());
            s.value = Some(out);
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        });
    match spawned {
        Ok(_) => Box::pin(Receive(slot)),
        Err(e) => Box::pin(std::future::ready(Err(e))),
    }
}

struct OneShot<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

impl<T> Default for OneShot<T> {
    fn default() -> Self {
        OneShot {
            value: None,
            waker: None,
        }
    }
}

struct Receive<T>(Arc<Mutex<OneShot<T>>>);

impl<T> Future for Receive<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match s.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Most of a plugin's standard error kept for an error message.
const STDERR_KEPT: usize = 4096;
/// Largest standard output read from a plugin.
const MAX_STDOUT: u64 = 1 << 20;

/// Runs `spec` on this thread: standard error forwarded line by line as it arrives, killed
/// after the timeout.
pub fn run_blocking(spec: &ProcessSpec) -> std::io::Result<ProcessOutput> {
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(if spec.inherit_stdin {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out_thread = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(s) = stdout {
            let _ = s.take(MAX_STDOUT).read_to_end(&mut buf);
        }
        buf
    });
    let err_thread = std::thread::spawn(move || {
        let mut kept: Vec<u8> = Vec::new();
        if let Some(s) = stderr {
            let mut r = std::io::BufReader::new(s);
            let mut line = Vec::new();
            while matches!(r.read_until(b'\n', &mut line), Ok(n) if n > 0) {
                {
                    use std::io::Write as _;
                    let mut e = std::io::stderr().lock();
                    let _ = e.write_all(&line);
                    if !line.ends_with(b"\n") {
                        let _ = e.write_all(b"\n");
                    }
                }
                kept.extend_from_slice(&line);
                if kept.len() > STDERR_KEPT {
                    kept.drain(..kept.len() - STDERR_KEPT);
                }
                line.clear();
            }
        }
        kept
    });
    let deadline = Instant::now() + spec.timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "credential plugin timed out",
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = out_thread.join().unwrap_or_default();
    let stderr = err_thread.join().unwrap_or_default();
    Ok(ProcessOutput {
        success: status.success(),
        status: status.to_string(),
        stdout,
        stderr,
    })
}

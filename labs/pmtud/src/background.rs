//! What the lab runs beside its measurements: child processes inside a namespace, helper threads
//! that have entered one, and a scratch directory. Each has a time limit and is stopped or
//! removed on drop, so an error or a panic leaves nothing running.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use netlab::Netns;
use rustix::process::{kill_process, Pid, Signal};

use super::LabError;

/// How often a wait looks at a child; also the resolution of the wall times measured.
const POLL: Duration = Duration::from_millis(1);
/// How long a helper thread may take to get ready.
const HELPER_READY: Duration = Duration::from_secs(5);

/// Whether an executable named `name` is in a directory of `PATH`.
pub(crate) fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
}

/// A directory for the lab's files (JSON, warts, logs), removed on drop.
#[derive(Debug)]
pub(crate) struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    pub(crate) fn new() -> Result<Self, LabError> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fpmtud-lab-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).map_err(LabError::io(format!("create {}", dir.display())))?;
        Ok(Self { dir })
    }

    /// A path for `name` inside the directory.
    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// How a finished child ended.
#[derive(Debug)]
pub(crate) struct Finished {
    /// Its stdout.
    pub stdout: String,
    /// From spawn to exit.
    pub wall: Duration,
}

/// A child process started inside a namespace (`ip netns exec`, which execs the program, so
/// the child's pid is the program's). Its output goes to files, so no pipe can fill up. Dropped
/// while running, it gets SIGTERM, then SIGKILL if it has not exited a second later.
#[derive(Debug)]
pub(crate) struct Child {
    what: String,
    child: std::process::Child,
    exited: Option<ExitStatus>,
    stdout: PathBuf,
    stderr: PathBuf,
    started: Instant,
}

impl Child {
    /// Starts `program args...` in `ns`; `name` names its output files in `scratch`.
    pub(crate) fn spawn_in<S: AsRef<OsStr>>(
        ns: &Netns,
        scratch: &Scratch,
        name: &str,
        program: impl AsRef<OsStr>,
        args: &[S],
    ) -> Result<Self, LabError> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns.name()])
            .arg(program.as_ref())
            .args(args);
        let what = describe(&cmd);
        let stdout = scratch.file(&format!("{name}.stdout"));
        let stderr = scratch.file(&format!("{name}.stderr"));
        let open = |path: &Path| {
            File::create(path).map_err(LabError::io(format!("create {}", path.display())))
        };
        cmd.stdin(Stdio::null())
            .stdout(open(&stdout)?)
            .stderr(open(&stderr)?);
        let started = Instant::now();
        let child = cmd.spawn().map_err(LabError::io(format!("start {what}")))?;
        Ok(Self {
            what,
            child,
            exited: None,
            stdout,
            stderr,
            started,
        })
    }

    /// Whether the child is still running.
    pub(crate) fn running(&mut self) -> Result<bool, LabError> {
        if self.exited.is_none() {
            self.exited = self
                .child
                .try_wait()
                .map_err(LabError::io(format!("wait for {}", self.what)))?;
        }
        Ok(self.exited.is_none())
    }

    /// What it printed on stderr so far.
    pub(crate) fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for the child to exit, at most `limit` and only while `stop` is unset (else it
    /// stops the child and fails); fails if it exits unsuccessfully.
    pub(crate) fn wait_within(
        &mut self,
        limit: Duration,
        stop: &AtomicBool,
    ) -> Result<Finished, LabError> {
        let deadline = self.started + limit;
        while self.running()? {
            if stop.load(Ordering::Relaxed) {
                self.terminate(Duration::from_secs(1));
                return Err(LabError::Interrupted);
            }
            if Instant::now() >= deadline {
                self.terminate(Duration::from_secs(1));
                return Err(LabError::Timeout {
                    what: self.what.clone(),
                    limit,
                });
            }
            std::thread::sleep(POLL);
        }
        let wall = self.started.elapsed();
        self.finished(wall)
    }

    /// Stops the child: SIGTERM, then SIGKILL after `grace`. Returns its output; fails unless
    /// it exited successfully (a daemon that handles SIGTERM does).
    pub(crate) fn stop(&mut self, grace: Duration) -> Result<Finished, LabError> {
        self.terminate(grace);
        let wall = self.started.elapsed();
        self.finished(wall)
    }

    fn finished(&self, wall: Duration) -> Result<Finished, LabError> {
        let Some(status) = self.exited else {
            return Err(LabError::Io {
                what: format!("reap {}", self.what),
                source: io::Error::other("the child could not be waited for"),
            });
        };
        if !status.success() {
            return Err(LabError::Failed {
                what: self.what.clone(),
                status,
                stderr: tail(&self.stderr()),
            });
        }
        let stdout = fs::read_to_string(&self.stdout)
            .map_err(LabError::io(format!("read {}", self.stdout.display())))?;
        Ok(Finished { stdout, wall })
    }

    /// SIGTERM, up to `grace` for the child to exit, then SIGKILL. Never fails: it is also
    /// the drop path.
    fn terminate(&mut self, grace: Duration) {
        if !self.running().unwrap_or(false) {
            return;
        }
        let _ = kill_process(Pid::from_child(&self.child), Signal::TERM);
        let deadline = Instant::now() + grace;
        while self.running().unwrap_or(false) && Instant::now() < deadline {
            std::thread::sleep(POLL * 5);
        }
        if self.exited.is_none() {
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.terminate(Duration::from_secs(1));
    }
}

/// The last lines of a tool's stderr, for an error message.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Sets the flag when dropped, so a helper thread stops even if the body panics.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `helper` on a thread inside `ns` while `body` runs on this one. The helper must send on
/// its channel once it is ready (its socket bound) and return soon after the flag is set; it
/// is told to stop when `body` returns or panics, and its result is returned with `body`'s.
pub(crate) fn with_helper<H: Send, T>(
    ns: &Netns,
    what: &str,
    helper: impl FnOnce(&AtomicBool, mpsc::Sender<()>) -> io::Result<H> + Send,
    body: impl FnOnce() -> T,
) -> Result<(T, H), LabError> {
    let stop = AtomicBool::new(false);
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::scope(|s| {
        let stop = &stop;
        let thread = s.spawn(move || ns.enter(move || helper(stop, ready_tx)));
        let guard = StopOnDrop(stop);
        let ready = ready_rx.recv_timeout(HELPER_READY);
        let out = ready.is_ok().then(body);
        drop(guard);
        let joined = thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let helper_result = joined?.map_err(LabError::io(what.to_owned()))?;
        match out {
            Some(out) => Ok((out, helper_result)),
            None => Err(LabError::Timeout {
                what: format!("{what} getting ready"),
                limit: HELPER_READY,
            }),
        }
    })
}

//! Product scenarios, each run on every platform: one trial per scenario and platform, on the
//! embedded platform and on a real `nats-server -js` of its own.
//!
//! A scenario is an `async fn(TestPlatform, Duration)` in the file of what it is about (`tool`,
//! `worker`, `planner`, `llm_planner`, `agent`, `platform`) with `scenario!(its_name);` above
//! it. That is all it takes to run it on both platforms: it gets a fresh [`TestPlatform`] and
//! how long to wait for an event (5 s embedded, 20 s NATS), and asserts the same behaviour on
//! both.
//!
//! ```text
//! cargo test -p soorma-tests --test scenarios                  # every trial
//! cargo test -p soorma-tests --test scenarios -- worker        # worker scenarios, both platforms
//! cargo test -p soorma-tests --test scenarios -- nats::        # the NATS trials
//! cargo test -p soorma-tests --test scenarios -- --list
//! ```
//!
//! Trials are named `<platform>::<file>::<scenario>` and run in parallel (twice as many as CPUs
//! unless `--test-threads` or `RUST_TEST_THREADS` says otherwise), each with its own
//! multi-threaded tokio runtime whose threads carry the trial's name. As with the built-in
//! harness, panic messages are shown only for a trial that fails (some scenarios make handlers
//! panic on purpose). When no nats-server is installed (`SOORMA_NATS_SERVER` unset and none on
//! `PATH`), the NATS trials are reported as ignored, with the reason.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use libtest_mimic::{Completion, Failed, Trial};
use soorma::nats::NatsConfig;
use soorma::testing::TestPlatform;
use soorma_tests::nats_server::{self, NatsServer};

/// Registers the scenario fn of this name (in the calling module) to run on every platform.
macro_rules! scenario {
    ($name:ident) => {
        inventory::submit! {
            $crate::Scenario::new(module_path!(), stringify!($name), |t, wait| Box::pin($name(t, wait)))
        }
    };
}

mod support;

mod agent;
mod cancel;
mod llm_planner;
mod memory;
mod planner;
mod platform;
mod tool;
mod wiring;
mod worker;
mod workflow;

/// How long embedded scenarios wait for an event.
const EMBEDDED_WAIT: Duration = Duration::from_secs(5);
/// How long NATS scenarios wait for an event: a real server on a possibly busy machine.
const NATS_WAIT: Duration = Duration::from_secs(20);
/// Tokio worker threads per trial.
const WORKER_THREADS: usize = 4;

/// A scenario's future: runs it on the platform it was given.
type ScenarioFuture = Pin<Box<dyn Future<Output = ()>>>;

/// A scenario registered with [`scenario!`].
struct Scenario {
    /// `module_path!()` where it was registered: `scenarios::<file>`.
    module: &'static str,
    name: &'static str,
    run: fn(TestPlatform, Duration) -> ScenarioFuture,
}

inventory::collect!(Scenario);

impl Scenario {
    /// Used by [`scenario!`].
    const fn new(
        module: &'static str,
        name: &'static str,
        run: fn(TestPlatform, Duration) -> ScenarioFuture,
    ) -> Self {
        Self { module, name, run }
    }

    /// `<file>::<scenario>`.
    fn path(&self) -> String {
        let file = self
            .module
            .split_once("::")
            .map_or(self.module, |(_, file)| file);
        format!("{file}::{}", self.name)
    }
}

/// Where a trial runs its scenario.
#[derive(Clone, Copy)]
enum Target {
    Embedded,
    Nats,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Embedded => "embedded",
            Target::Nats => "nats",
        }
    }
}

fn main() {
    let args = soorma_tests::trial_arguments();
    soorma_tests::init_tracing();
    capture_panics();
    let no_nats = nats_server::locate().is_none();
    if no_nats && !args.list {
        eprintln!(
            "note: the NATS trials are ignored: SOORMA_NATS_SERVER is unset and there is no \
             nats-server on PATH; {}",
            nats_server::INSTALL_HINT
        );
    }
    let mut scenarios: Vec<&'static Scenario> = inventory::iter::<Scenario>.into_iter().collect();
    scenarios.sort_by_key(|s| s.path());
    // The NATS trials first: they take longest, so the run does not end waiting on one of them.
    let mut trials = Vec::with_capacity(scenarios.len() * 2);
    for target in [Target::Nats, Target::Embedded] {
        for &scenario in &scenarios {
            let name = format!("{}::{}", target.name(), scenario.path());
            let skip = no_nats && matches!(target, Target::Nats);
            trials.push(Trial::ignorable_test(name.clone(), move || {
                if skip {
                    return Ok(Completion::ignored_with("no nats-server installed"));
                }
                run(&name, target, scenario).map(|()| Completion::Completed)
            }));
        }
    }
    libtest_mimic::run(&args, trials).exit();
}

/// What the threads of each running trial (named after it) printed when they panicked.
static PANICS: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// Records the panics of a running trial's threads in [`PANICS`] instead of printing them; other
/// threads' panics are printed as usual.
fn capture_panics() {
    let print = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or_default();
        let mut panics = PANICS.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(out) = panics.get_mut(name) else {
            drop(panics);
            return print(info);
        };
        let _ = writeln!(out, "thread '{name}' {info}");
        let backtrace = std::backtrace::Backtrace::capture();
        if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            let _ = writeln!(out, "stack backtrace:\n{backtrace}");
        }
    }));
}

/// Runs one trial on a thread of its own named after it, with its own runtime and platform.
fn run(name: &str, target: Target, scenario: &'static Scenario) -> Result<(), Failed> {
    let thread_name = name.to_owned();
    PANICS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.to_owned(), String::new());
    let trial = std::thread::Builder::new()
        .name(thread_name.clone())
        .spawn(move || {
            // Started before the runtime, stopped after it.
            let server = matches!(target, Target::Nats).then(NatsServer::start);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(WORKER_THREADS)
                .thread_name(thread_name)
                .enable_all()
                .build()
                .expect("a tokio runtime");
            runtime.block_on(async {
                let (platform, wait) = match &server {
                    None => (TestPlatform::new(), EMBEDDED_WAIT),
                    Some(server) => {
                        let nats = soorma::nats::connect(NatsConfig::new(server.url()))
                            .await
                            .expect("connect to the test nats-server");
                        let platform = TestPlatform::with_platform(nats)
                            .await
                            .expect("observe the NATS platform");
                        (platform, NATS_WAIT)
                    }
                };
                (scenario.run)(platform, wait).await;
            });
            drop(runtime);
            drop(server);
        })
        .map(std::thread::JoinHandle::join);
    let panics = PANICS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(name)
        .unwrap_or_default();
    match trial {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Failed::from(panics.trim_end())),
        Err(e) => Err(Failed::from(format!(
            "cannot start the trial's thread: {e}"
        ))),
    }
}

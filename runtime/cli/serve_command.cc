#include "runtime/cli/serve_command.h"

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "comm/mpi_session.h"
#include "monitoring/metrics.h"
#include "runtime/text/chat_template.h"
#include "runtime/cli/engine_flags.h"
#include "runtime/cli/step_log.h"
#include "runtime/model/generation_config.h"
#include "runtime/server/http_server.h"
#include "runtime/server/openai_api.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "serve: address to bind");
ABSL_FLAG(int, port, 8000, "serve: HTTP port (0 picks a free one and prints it)");
ABSL_FLAG(std::string, api_key, "", "serve: require `Authorization: Bearer KEY`");
ABSL_FLAG(std::string, served_model_name, "",
          "serve: the model name clients use; default: the target directory's name");
ABSL_FLAG(int, metrics_port, 0, "serve: Prometheus /metrics port on rank 0 (0: off)");
ABSL_FLAG(bool, accept_unknown_fields, false,
          "serve: accept request fields the API does not know (logged once each) instead of "
          "answering 400 naming the field");
ABSL_FLAG(std::string, generation_config, "auto",
          "serve: auto takes the sampling defaults (temperature, top_p, top_k, min_p) of requests that "
          "leave them out from the target's generation_config.json; off keeps the API's own "
          "(1, 1, none)");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "serve: address the metrics port binds (apart from --host, so that a server open "
          "to clients keeps its metrics local unless asked)");
ABSL_FLAG(double, drain_seconds, 30,
          "serve: on SIGTERM, how long in-flight requests may finish before they are "
          "cancelled");
ABSL_FLAG(int64_t, max_body_bytes, 1 << 20, "serve: largest request body (413 beyond)");
ABSL_FLAG(double, header_timeout, 10,
          "serve: seconds a client may take to send a request's line and headers (408 beyond; "
          "no worker thread waits for them)");
ABSL_FLAG(double, body_timeout, 10,
          "serve: seconds a client may take to send a request's body (408 beyond)");
ABSL_FLAG(int, max_connections, 1024,
          "serve: HTTP connections open at once, in all (503 with Retry-After beyond; 0: no "
          "cap). Each takes 3 file descriptors");
ABSL_FLAG(int, max_connections_per_client, 256,
          "serve: HTTP connections open at once from one client address (429 with Retry-After "
          "beyond; 0: no cap)");
ABSL_FLAG(std::string, step_log, "",
          "serve: write a JSON line per decode step (batch, plans, measured and predicted "
          "seconds) to this file; empty: off");
ABSL_FLAG(double, step_timeout, 60,
          "serve: seconds one iteration of the engine's loop (a step's plans, its passes on the "
          "device, its commit) may run before the engine counts as stalled: /health answers 503 "
          "and every rank exits with the step it stalled at; 0: never");
ABSL_FLAG(int, http_threads, 0,
          "serve: HTTP connections served at once (each streaming client holds one); 0: one "
          "per request the engine can hold (--max-running-requests + --max-waiting-requests) "
          "and 8 for probes, at most 4096");

namespace verdict {
namespace {

// Watches the stop signals (SIGTERM, SIGINT: blocked in every thread) on a
// thread of its own for as long as it lives, and tells who sent each one.
// An operator's signal (directly or through deploy/launch.sh) asks for a
// drain: `on_drain` runs, and the process goes on. The launcher's SIGTERM
// (MpiSession::SignalFromLauncher) means the job is being torn down, most
// often because a peer rank died: the collectives would wait for that peer
// until --comm-timeout, but the launcher sends SIGKILL a second later, so
// `on_launcher` must end this process's work at once and not return.
class StopSignalWatcher {
 public:
  StopSignalWatcher(const sigset_t& signals, std::function<void()> on_drain,
                    std::function<void(pid_t launcher)> on_launcher)
      : signals_(signals),
        on_drain_(std::move(on_drain)),
        on_launcher_(std::move(on_launcher)),
        thread_([this] { Watch(); }) {}
  StopSignalWatcher(const StopSignalWatcher&) = delete;
  StopSignalWatcher& operator=(const StopSignalWatcher&) = delete;
  ~StopSignalWatcher() {
    done_.store(true);
    thread_.join();
  }

 private:
  void Watch() {
    // sigtimedwait rather than sigwaitinfo, so that the destructor can end
    // the thread within one tick.
    const timespec tick{0, 100 * 1000 * 1000};
    while (!done_.load()) {
      siginfo_t info;
      if (sigtimedwait(&signals_, &info, &tick) <= 0) continue;
      if (MpiSession::SignalFromLauncher(info.si_pid)) on_launcher_(info.si_pid);
      on_drain_();
    }
  }

  const sigset_t signals_;
  const std::function<void()> on_drain_;
  const std::function<void(pid_t)> on_launcher_;
  std::atomic<bool> done_{false};
  std::thread thread_;  // last: starts once the rest is set
};

// Ends the process when one iteration of the engine's loop runs longer than
// `timeout`. A kernel that never ends, or a wait that no collective's
// deadline covers, would otherwise hold every request while /health went
// on answering 200. Checks every 100 ms on a thread of its own; `on_stall`
// does not return. A zero timeout watches nothing.
class StepWatchdog {
 public:
  StepWatchdog(const Engine& engine, absl::Duration timeout,
               std::function<void(const absl::Status&)> on_stall)
      : engine_(engine), timeout_(timeout), on_stall_(std::move(on_stall)) {
    if (timeout_ > absl::ZeroDuration()) thread_ = std::thread([this] { Watch(); });
  }
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;
  ~StepWatchdog() {
    done_.store(true);
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Watch() {
    while (!done_.load()) {
      absl::SleepFor(absl::Milliseconds(100));
      const std::optional<absl::Duration> running = engine_.StepRunningFor(absl::Now());
      if (!running.has_value() || *running <= timeout_) continue;
      on_stall_(absl::DeadlineExceededError(absl::StrFormat(
          "an iteration of the engine's loop has run for %.1f s, longer than --step-timeout "
          "(%.1f s): the device or a rank stopped making progress",
          absl::ToDoubleSeconds(*running), absl::ToDoubleSeconds(timeout_))));
    }
  }

  const Engine& engine_;
  const absl::Duration timeout_;
  const std::function<void(const absl::Status&)> on_stall_;
  std::atomic<bool> done_{false};
  std::thread thread_;  // last: starts once the rest is set
};

// Waits until `stop` is true, checking every 100 ms (it reads flags that
// other threads set without notifying anyone).
template <typename Predicate>
void WaitUntil(Predicate stop) {
  while (!stop()) absl::SleepFor(absl::Milliseconds(100));
}

// --generation-config: the checkpoint's sampling defaults, said once.
absl::StatusOr<SamplingDefaults> SamplingDefaultsFromFlags(const std::string& model_dir) {
  const std::string mode = absl::GetFlag(FLAGS_generation_config);
  if (mode == "off") return SamplingDefaults();
  if (mode != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--generation-config must be auto or off, not '", mode, "'"));
  }
  if (absl::StartsWith(model_dir, "builtin:")) return SamplingDefaults();
  absl::StatusOr<GenerationConfig> config = LoadGenerationConfig(model_dir);
  if (!config.ok()) return config.status();
  SamplingDefaults defaults{config->temperature, config->top_p, config->top_k, config->min_p};
  if (config->has_sampling_defaults()) {
    std::fprintf(stderr,
                 "verdict serve: sampling defaults from %s/generation_config.json:%s%s%s%s "
                 "(--generation-config off ignores them)\n",
                 model_dir.c_str(),
                 defaults.temperature ? absl::StrCat(" temperature ", *defaults.temperature).c_str()
                                      : "",
                 defaults.top_p ? absl::StrCat(" top_p ", *defaults.top_p).c_str() : "",
                 defaults.top_k ? absl::StrCat(" top_k ", *defaults.top_k).c_str() : "",
                 defaults.min_p ? absl::StrCat(" min_p ", *defaults.min_p).c_str() : "");
  }
  return defaults;
}

// How long the handlers of a dead engine's requests get to end their
// responses before the process exits.
constexpr absl::Duration kDeadEngineGrace = absl::Seconds(2);

// How long rank 0's handlers get to write the error events of a job the
// launcher is tearing down: well within the second between the launcher's
// SIGTERM and its SIGKILL (Open MPI's odls_base_sigkill_timeout, 1 s), so
// that the process exits on its own, with its log written.
constexpr absl::Duration kLauncherTeardownGrace = absl::Milliseconds(500);

// Logged the moment the engine's loop fails, with the rank and the step.
void ReportDeadEngine(const Engine& engine, const absl::Status& error) {
  std::fprintf(stderr,
               "verdict serve (rank %d): the engine stopped at decode step %lld and cannot "
               "serve: %s; /health answers 503 and every rank exits\n",
               engine.rank(), static_cast<long long>(engine.stats().steps),
               error.ToString().c_str());
  std::fflush(stderr);
}

// Why the engine stops when the launcher tears the job down.
absl::Status LauncherTeardownError(pid_t launcher) {
  return absl::UnavailableError(
      absl::StrCat("the launcher (pid ", launcher,
                   ") is ending the job: a rank died, or mpirun was told to stop"));
}

// Ends this rank without MPI: MPI_Abort would report to the launcher and
// wait for it, and the launcher is already ending the job (Open MPI's
// daemon sleeps through odls_base_sigkill_timeout before its SIGKILL), and
// MPI_Finalize would wait for the peers.
[[noreturn]] void ExitForTeardown(const absl::Status& error) {
  std::fflush(nullptr);
  std::_Exit(AbortExitCode(error));
}

}  // namespace

int RunServeCommand(absl::Span<char* const> positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "verdict serve: unexpected argument '%s'\n", positional[0]);
    return 2;
  }
  // Block the stop signals before any thread starts, so every thread
  // inherits the mask and only WaitForStop receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const double step_timeout_seconds = absl::GetFlag(FLAGS_step_timeout);
  if (!(step_timeout_seconds >= 0) || step_timeout_seconds > 1e9) {
    std::fprintf(stderr,
                 "verdict serve: --step-timeout takes seconds (0: never), not %g\n",
                 step_timeout_seconds);
    return 2;
  }

  // The chat template is checked before the engine starts, on every rank, so
  // that a template verdict cannot execute stops the job at once.
  const std::string model_dir = TargetModelDirFromFlags();
  const std::string tokenizer_config = model_dir + "/tokenizer_config.json";
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromTokenizerConfigFile(tokenizer_config);
  if (!chat.ok()) {
    std::fprintf(stderr, "verdict serve: chat template: %s\n", chat.status().ToString().c_str());
    return 1;
  }

  absl::StatusOr<EngineRuntime> rt = StartEngineFromFlags();
  if (!rt.ok()) {
    std::fprintf(stderr, "verdict serve: %s\n", rt.status().ToString().c_str());
    return 1;
  }
  Engine& engine = *rt->engine;

  if (engine.rank() != 0) {
    // Followers run the loop; an operator's signal here drains the whole
    // job, the launcher's ends this rank.
    StopSignalWatcher signals(
        stop_signals, [&engine] { engine.RequestDrain(); },
        [&engine](pid_t launcher) {
          const absl::Status error = LauncherTeardownError(launcher);
          ReportDeadEngine(engine, error);
          ExitForTeardown(error);
        });
    absl::Status s = engine.Run();
    if (!s.ok()) {
      // A rank that cannot go on ends the whole job, so that no rank waits
      // in a collective for it and supervisors see the job fail.
      ReportDeadEngine(engine, s);
      rt->comm->Abort(s);
    }
    return 0;
  }

  auto registry = std::make_shared<prometheus::Registry>();
  ServingMetrics metrics(registry);
  engine.set_metrics(&metrics);
  std::unique_ptr<prometheus::Exposer> exposer;
  if (absl::GetFlag(FLAGS_metrics_port) > 0) {
    absl::StatusOr<std::unique_ptr<prometheus::Exposer>> started = StartMetricsExposer(
        absl::StrCat(absl::GetFlag(FLAGS_metrics_host), ":", absl::GetFlag(FLAGS_metrics_port)),
        registry);
    if (!started.ok()) {
      std::fprintf(stderr, "verdict serve: %s\n", started.status().ToString().c_str());
      engine.Shutdown();
      engine.Run().IgnoreError();
      return 1;
    }
    exposer = *std::move(started);
  }
  std::unique_ptr<StepLog> step_log;
  if (const std::string path = absl::GetFlag(FLAGS_step_log); !path.empty()) {
    absl::StatusOr<std::unique_ptr<StepLog>> opened = StepLog::Open(path);
    if (!opened.ok()) {
      std::fprintf(stderr, "verdict serve: %s\n", opened.status().ToString().c_str());
      engine.Shutdown();
      engine.Run().IgnoreError();
      return 1;
    }
    step_log = *std::move(opened);
    engine.set_step_observer([log = step_log.get()](const StepTiming& t) { log->Write(t); });
  }

  absl::Status run_status;
  std::atomic<bool> engine_dead{false};
  std::thread loop([&] {
    run_status = engine.Run();
    if (!run_status.ok()) {
      // Metrics: a loop that stopped on an error serves nothing, whatever
      // the ranks' processes are doing.
      metrics.SetRanksUp(0);
      ReportDeadEngine(engine, run_status);
      engine_dead.store(true);
    }
  });

  std::string name = absl::GetFlag(FLAGS_served_model_name);
  if (name.empty()) {
    name = std::filesystem::path(model_dir).lexically_normal().filename().string();
    if (name.empty() || name == "target") name = "verdict-default";
  }
  if (!chat->has_template()) {
    std::fprintf(stderr,
                 "verdict serve: no chat template in %s; /v1/chat/completions uses the default "
                 "plain format (System:/User:/Assistant:)\n",
                 model_dir.c_str());
  }
  ServedModel served{name, static_cast<int>(engine.max_model_len()), 64,
                     static_cast<int64_t>(std::time(nullptr))};
  OpenAiApi api(served, engine.tokenizer(), *chat);
  api.set_accept_unknown_fields(absl::GetFlag(FLAGS_accept_unknown_fields));
  absl::StatusOr<SamplingDefaults> defaults = SamplingDefaultsFromFlags(model_dir);
  if (!defaults.ok()) {
    std::fprintf(stderr, "verdict serve: %s\n", defaults.status().ToString().c_str());
    engine.Shutdown();
    loop.join();
    return 1;
  }
  api.set_sampling_defaults(*defaults);
  HttpServerOptions http;
  http.host = absl::GetFlag(FLAGS_host);
  http.port = absl::GetFlag(FLAGS_port);
  http.api_key = absl::GetFlag(FLAGS_api_key);
  const int64_t max_body_bytes = absl::GetFlag(FLAGS_max_body_bytes);
  http.max_body_bytes = static_cast<size_t>(std::max<int64_t>(max_body_bytes, 0));
  http.head_timeout = absl::Seconds(absl::GetFlag(FLAGS_header_timeout));
  http.body_timeout = absl::Seconds(absl::GetFlag(FLAGS_body_timeout));
  http.max_connections = absl::GetFlag(FLAGS_max_connections);
  http.max_connections_per_client = absl::GetFlag(FLAGS_max_connections_per_client);
  if (http.head_timeout <= absl::ZeroDuration() || http.body_timeout <= absl::ZeroDuration() ||
      max_body_bytes <= 0 || http.max_connections < 0 || http.max_connections_per_client < 0) {
    std::fprintf(stderr,
                 "verdict serve: --header-timeout, --body-timeout and --max-body-bytes must be "
                 "positive, --max-connections and --max-connections-per-client at least 0\n");
    engine.Shutdown();
    loop.join();
    return 1;
  }
  http.num_threads = absl::GetFlag(FLAGS_http_threads);
  if (http.num_threads <= 0) {
    // A streaming client holds its thread while its request runs or waits
    // in the engine's queue; fewer threads would leave admitted clients
    // unserved (and their connections queued in the kernel) while the
    // engine has room for them. Probes and listings take the spare ones.
    // Capped: civetweb starts every thread up front, and a very long
    // waiting queue would meet the process's thread limit.
    constexpr int64_t kSpareThreads = 8;
    constexpr int64_t kMostThreads = 4096;
    http.num_threads = static_cast<int>(std::min<int64_t>(
        int64_t{engine.options().max_running_requests} +
            engine.options().max_waiting_requests + kSpareThreads,
        kMostThreads));
  }
  {
    // Each open connection takes three descriptors (the client's and both
    // ends of the one to civetweb); a soft limit of 1024, common, would
    // run out well before --max-connections.
    rlimit files = {};
    const rlim_t wanted = 3 * static_cast<rlim_t>(std::max(http.max_connections, 1)) +
                          static_cast<rlim_t>(http.num_threads) + 256;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < wanted) {
      files.rlim_cur = std::min(wanted, files.rlim_max);
      setrlimit(RLIMIT_NOFILE, &files);
    }
  }
  // The loop marks itself failed before it ends its requests with the
  // error, so /health says 503 by the time a client sees that error;
  // engine_dead (set once the loop has returned, or at a launcher's
  // teardown) keeps it so.
  http.alive = [&engine_dead, &engine] { return !engine_dead.load() && engine.ready(); };
  HttpServer server(http, api, engine, [&engine] { return engine.ready(); });
  if (absl::Status s = server.Start(); !s.ok()) {
    std::fprintf(stderr, "verdict serve: %s\n", s.ToString().c_str());
    engine.Shutdown();
    loop.join();
    return 1;
  }
  std::fprintf(stderr,
               "verdict serve: model '%s' on http://%s:%d (tp %d, %d HTTP threads)%s\n",
               name.c_str(), http.host.c_str(), server.port(), rt->comm->world_size(),
               http.num_threads,
               exposer ? absl::StrCat(", metrics on port ", absl::GetFlag(FLAGS_metrics_port))
                             .c_str()
                       : "");

  // From here to the end, through a drain too: a stalled step ends every
  // rank with the error (the loop thread cannot be joined; it is stuck).
  StepWatchdog watchdog(
      engine, absl::Seconds(step_timeout_seconds), [&](const absl::Status& error) {
        engine_dead.store(true);  // /health: 503 from now on
        metrics.SetRanksUp(0);
        ReportDeadEngine(engine, error);
        server.Abandon(error, kDeadEngineGrace);
        rt->comm->Abort(error);
      });

  // From here to the end, through a drain too: the launcher's SIGTERM ends
  // every stream with the error at once, since the engine (waiting on a
  // dead peer) will not; then this rank exits.
  std::atomic<bool> drain_signalled{false};
  StopSignalWatcher signals(
      stop_signals, [&drain_signalled] { drain_signalled.store(true); },
      [&](pid_t launcher) {
        const absl::Status error = LauncherTeardownError(launcher);
        engine_dead.store(true);  // /health: 503 from now on
        metrics.SetRanksUp(0);
        ReportDeadEngine(engine, error);
        server.Abandon(error, kLauncherTeardownGrace);
        ExitForTeardown(error);
      });
  WaitUntil([&] {
    return drain_signalled.load() || engine.drain_requested() || engine_dead.load();
  });
  if (engine_dead.load()) {
    // The engine has failed every request it held; give their handlers a
    // moment to write the error events and [DONE], then end every rank.
    loop.join();
    server.Shutdown(kDeadEngineGrace);
    rt->comm->Abort(run_status);
  }
  std::fprintf(stderr, "verdict serve: draining (up to %.0f s)\n",
               absl::GetFlag(FLAGS_drain_seconds));
  server.Shutdown(absl::Seconds(absl::GetFlag(FLAGS_drain_seconds)));
  engine.Shutdown();
  loop.join();
  if (!run_status.ok()) {
    // The loop failed while draining: end every rank the same way.
    ReportDeadEngine(engine, run_status);
    server.Shutdown(absl::ZeroDuration());
    rt->comm->Abort(run_status);
  }
  std::fprintf(stderr, "verdict serve: stopped\n");
  return 0;
}

}  // namespace verdict

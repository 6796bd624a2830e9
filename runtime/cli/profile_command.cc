#include "runtime/cli/profile_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "runtime/bench/bench_prompts.h"
#include "runtime/cli/engine_flags.h"

ABSL_FLAG(std::string, profile_batch_sizes, "1,2,4,8,16,32,64",
          "profile: the batch sizes B to measure, comma-separated");
ABSL_FLAG(std::string, profile_fractions, "0,0.25,0.5,0.75,1",
          "profile: the verify budgets to pin, as fractions of the block's B * gamma drafts "
          "(each gives M = B + round(fraction * B * gamma) verify tokens)");
ABSL_FLAG(int, profile_repeats, 5,
          "profile: measured steps per cell; the cell's time is their median");
ABSL_FLAG(int, profile_warmup_steps, 2,
          "profile: steps of each cell run at the full batch and pin before measuring");
ABSL_FLAG(std::string, profile_out, "auto",
          "profile: where to write the cost table (load it with --cost-table); auto: into the "
          "first of --cost-table-dirs, named after the GPU, the models and the TP degree, where "
          "serve's --cost-table auto finds it");
ABSL_FLAG(bool, profile_progress, true, "profile: show progress on stderr");
ABSL_FLAG(bool, profile_one_pass, true,
          "profile: also measure, per batch size, steps of one draft pass (the table's "
          "one_pass_draft_seconds, which prices the first pass apart)");

namespace verdict {
namespace {

// Decode steps each request has tokens for beyond the warm-up and measured
// ones: its first steps may run before every request of the cell has
// arrived (the batch is then smaller than B, and they do not count).
constexpr int kSlackSteps = 8;

// M for a pin, with the planner's rounding (verify_planner.cc): the budget
// is floor(f * B * gamma + 0.5) drafts, one row each, plus one row per
// request.
int64_t PinnedVerifyTokens(int batch, double fraction, int gamma) {
  const double drafts = std::floor(fraction * static_cast<double>(int64_t{batch} * gamma) + 0.5);
  return batch + static_cast<int64_t>(drafts);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Every decode step of this rank; on rank 0 also the steps of the cell being
// measured: those at the cell's full batch and pin, after its warm-up.
class StepRecorder {
 public:
  // The loop thread, after each decode step.
  void Record(const StepTiming& t) {
    std::lock_guard<std::mutex> lock(mu_);
    steps_.push_back(t);
    if (watching_ && t.batch_size == batch_ && t.plan_reason == PlanReason::kPinnedBudget &&
        t.pinned_budget_fraction == fraction_ &&
        (t.draft_reason == DraftReason::kPinnedDepth) == depth_pinned_) {
      if (matched_++ >= warmup_) measured_.push_back(t);
    }
    cv_.notify_all();
  }

  // Rank 0: the next steps of this cell count.
  void Watch(int batch, double fraction, bool depth_pinned, int warmup) {
    std::lock_guard<std::mutex> lock(mu_);
    watching_ = true;
    batch_ = batch;
    fraction_ = fraction;
    depth_pinned_ = depth_pinned;
    warmup_ = warmup;
    matched_ = 0;
    measured_.clear();
  }

  // Rank 0: waits for `count` measured steps, reporting each through
  // `progress`, or until `give_up` (polled) says they will not come.
  std::vector<StepTiming> WaitForMeasured(size_t count, const std::function<void(size_t)>& progress,
                                          const std::function<bool()>& give_up) {
    std::unique_lock<std::mutex> lock(mu_);
    size_t shown = 0;
    while (measured_.size() < count) {
      if (measured_.size() != shown) {
        shown = measured_.size();
        progress(shown);
      }
      if (give_up()) break;
      cv_.wait_for(lock, std::chrono::milliseconds(50));
    }
    watching_ = false;
    // The loop thread keeps stepping while this one wakes up: the cell's
    // first `count` measured steps are its measurement.
    if (measured_.size() > count) measured_.resize(count);
    return measured_;
  }

  std::vector<StepTiming> steps() {
    std::lock_guard<std::mutex> lock(mu_);
    return steps_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<StepTiming> steps_;
  bool watching_ = false;
  int batch_ = 0;
  double fraction_ = 0;
  bool depth_pinned_ = false;
  int warmup_ = 0;
  int matched_ = 0;
  std::vector<StepTiming> measured_;
};

// Rank 0: the requests of one cell, until every one has finished.
class CellRequests {
 public:
  absl::Status Submit(Engine& engine, GenerationRequest request) {
    ids_.push_back(request.id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++pending_;
    }
    absl::Status s = engine.Submit(std::move(request), [this](const GenerationEvent& e) {
      if (!e.finished) return;
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
      if (e.finish_reason == FinishReason::kError && error_.empty()) error_ = e.error;
      cv_.notify_all();
    });
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
    }
    return s;
  }

  bool all_finished() {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_ == 0;
  }

  std::string error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

  // Cancels what still runs and waits for the ends.
  void CancelAndWait(Engine& engine) {
    for (const std::string& id : ids_) engine.Cancel(id);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  std::vector<std::string> ids_;
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_ = 0;
  std::string error_;
};

// The cells to measure, in order: batch sizes ascending, fractions
// ascending, then the batch size's one-pass cell; a fraction that gives a
// batch size an M it already has is left out (it would measure the same
// step).
std::vector<ProfileCell> PlanCells(const ProfileOptions& options, int gamma) {
  std::vector<int> batches = options.batch_sizes;
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  std::vector<double> fractions = options.budget_fractions;
  std::sort(fractions.begin(), fractions.end());
  std::vector<ProfileCell> cells;
  for (const int b : batches) {
    int64_t last_m = -1;
    for (const double f : fractions) {
      const int64_t m = PinnedVerifyTokens(b, f, gamma);
      if (m == last_m) continue;
      last_m = m;
      ProfileCell cell;
      cell.batch_size = b;
      cell.budget_fraction = f;
      cell.verify_tokens = m;
      cells.push_back(cell);
    }
    if (options.one_pass_cells && gamma > 1) {
      ProfileCell cell;
      cell.batch_size = b;
      cell.budget_fraction = 1.0;  // every draft of the one pass
      cell.verify_tokens = 2 * int64_t{b};
      cell.draft_depth = 1;
      cells.push_back(cell);
    }
  }
  return cells;
}

absl::Status CheckProfileOptions(const ProfileOptions& options, const Engine& engine) {
  if (absl::Status s = CheckProfileEngineOptions(engine.options()); !s.ok()) return s;
  if (!engine.speculative()) {
    return absl::InvalidArgumentError("the engine has no draft model (give --draft with --model)");
  }
  if (options.batch_sizes.empty() || options.budget_fractions.empty()) {
    return absl::InvalidArgumentError("the grid is empty");
  }
  for (const int b : options.batch_sizes) {
    if (b < 1) {
      return absl::InvalidArgumentError(absl::StrCat("batch size ", b, " is not positive"));
    }
    if (b > engine.options().max_running_requests) {
      return absl::InvalidArgumentError(absl::StrCat("batch size ", b,
                                                     " is above --max-running-requests ",
                                                     engine.options().max_running_requests));
    }
  }
  for (const double f : options.budget_fractions) {
    if (!(f >= 0.0 && f <= 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat("budget fraction ", f, " is outside [0, 1]"));
    }
  }
  if (options.repeats < 1 || options.warmup_steps < 0) {
    return absl::InvalidArgumentError("repeats must be at least 1 and warm-up steps at least 0");
  }
  return absl::OkStatus();
}

// Shows where the profile is on stderr: one line rewritten in place on a
// terminal, a line per finished cell elsewhere (logs).
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1) {}

  void Step(size_t cell, size_t cells, const ProfileCell& c, size_t done, int repeats) {
    if (!enabled_ || !tty_) return;
    Show(absl::StrFormat("%s: step %d/%d", Where(cell, cells, c), done, repeats), false);
  }

  void Done(size_t cell, size_t cells, const ProfileCell& c) {
    if (!enabled_) return;
    Show(absl::StrFormat("%s: median %.3f ms", Where(cell, cells, c), c.median_seconds * 1e3),
         true);
  }

 private:
  static std::string Where(size_t cell, size_t cells, const ProfileCell& c) {
    return absl::StrFormat("verdict profile: cell %d/%d, B=%d, budget %.2f (M=%d)%s", cell + 1,
                           cells, c.batch_size, c.budget_fraction, c.verify_tokens,
                           c.draft_depth > 0 ? ", one draft pass" : "");
  }

  void Show(const std::string& line, bool finished) {
    if (tty_) {
      std::fprintf(stderr, "\r%-79s%s", line.c_str(), finished ? "\n" : "");
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }

  const bool enabled_;
  const bool tty_;
};

// The time at M on the row of one batch size (its cells, M ascending).
double RowSeconds(const std::vector<const ProfileCell*>& row, double m) {
  const size_t n = row.size();
  if (m <= static_cast<double>(row[0]->verify_tokens)) return row[0]->median_seconds;
  for (size_t j = 1; j < n; ++j) {
    const double m0 = static_cast<double>(row[j - 1]->verify_tokens);
    const double m1 = static_cast<double>(row[j]->verify_tokens);
    if (m <= m1) {
      const double t0 = row[j - 1]->median_seconds, t1 = row[j]->median_seconds;
      return t0 + (t1 - t0) * (m - m0) / (m1 - m0);
    }
  }
  const double last = row[n - 1]->median_seconds;
  if (n < 2) return last;
  const double m0 = static_cast<double>(row[n - 2]->verify_tokens);
  const double m1 = static_cast<double>(row[n - 1]->verify_tokens);
  const double slope = (last - row[n - 2]->median_seconds) / (m1 - m0);
  return last + std::max(slope, 0.0) * (m - m1);
}

// A relative --profile-out names a path where the user ran the command (the
// working directory of `bazel run`, if that is how it was started).
std::string OutputPath(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY")) return absl::StrCat(dir, "/", path);
  return path;
}

absl::StatusOr<std::vector<int>> ParseIntList(const std::string& list, const char* flag) {
  std::vector<int> out;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    int v = 0;
    if (!absl::SimpleAtoi(item, &v)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": '", item, "' is not an integer"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<double>> ParseDoubleList(const std::string& list, const char* flag) {
  std::vector<double> out;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    double v = 0;
    if (!absl::SimpleAtod(item, &v)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": '", item, "' is not a number"));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

absl::Status CheckProfileEngineOptions(const EngineOptions& options) {
  const double rate = options.simulate_acceptance;
  if (rate >= 0 && rate != 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("refusing to pin verify budgets under --simulate-acceptance ", rate,
                     "; use 1.0 or leave it off (seeds/002_d567d7ab3f14fa00.txt, \"Cost table\")"));
  }
  if (!options.speculation) {
    return absl::InvalidArgumentError("speculation is off; the cost table prices verified drafts");
  }
  if (options.verify_mode != VerifyMode::kCompact) {
    return absl::InvalidArgumentError(
        "the engine must run compact mode, whose step runs exactly the pinned rows");
  }
  // Every measured step drafts gamma tokens for every request: a table's
  // draft split would let the draft planner draft less, and a speculation
  // limit would stop drafting.
  if (!options.cost_table_path.empty()) {
    return absl::InvalidArgumentError(
        "--cost-table is set; the profile measures a table and needs every step to draft "
        "in full (leave it off)");
  }
  if (options.speculation_max_batch != 0) {
    return absl::InvalidArgumentError(
        "--speculation-max-batch is set; the profile needs every step to draft (leave it 0)");
  }
  return absl::OkStatus();
}

absl::StatusOr<CostTable> CostTableFromCells(const std::vector<ProfileCell>& measured) {
  std::vector<ProfileCell> cells;
  std::vector<const ProfileCell*> one_pass;
  for (const ProfileCell& c : measured) {
    if (c.draft_depth > 0) {
      one_pass.push_back(&c);
    } else {
      cells.push_back(c);
    }
  }
  std::vector<double> batches, tokens;
  for (const ProfileCell& c : cells) {
    batches.push_back(c.batch_size);
    tokens.push_back(static_cast<double>(c.verify_tokens));
  }
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  std::vector<double> seconds;
  for (const double b : batches) {
    std::vector<const ProfileCell*> row;
    for (const ProfileCell& c : cells) {
      if (c.batch_size == b) row.push_back(&c);
    }
    std::sort(row.begin(), row.end(), [](const ProfileCell* x, const ProfileCell* y) {
      return x->verify_tokens < y->verify_tokens;
    });
    for (const double m : tokens) seconds.push_back(RowSeconds(row, m));
  }
  absl::StatusOr<CostTable> table =
      CostTable::Create(batches, std::move(tokens), std::move(seconds));
  if (!table.ok()) return table;
  const int passes = cells.empty() ? 0 : cells.front().draft_passes;
  const bool split = passes > 0 && std::all_of(cells.begin(), cells.end(), [&](const ProfileCell& c) {
                       return c.draft_passes == passes && !c.draft_pass_seconds.empty();
                     });
  if (!split) return table;
  // One pass's price at a batch size is the median over all its cells'
  // steps. Cells are measured at different times, so on a loaded machine a
  // cell's median step can come out shorter than that many passes at the
  // median price; the price is then held to the draft share of that cell's
  // own steps (each step's draft time over its whole time, both measured in
  // the same step), so that every cell keeps a positive verify.
  std::vector<double> pass_seconds;
  for (const double b : batches) {
    std::vector<double> at_batch;
    for (const ProfileCell& c : cells) {
      if (c.batch_size == b) {
        at_batch.insert(at_batch.end(), c.draft_pass_seconds.begin(), c.draft_pass_seconds.end());
      }
    }
    double price = Median(at_batch);
    for (const ProfileCell& c : cells) {
      if (c.batch_size != b || passes * price < c.median_seconds) continue;
      if (c.seconds.size() != c.draft_pass_seconds.size()) continue;  // not measured together
      std::vector<double> share;
      for (size_t i = 0; i < c.seconds.size(); ++i) {
        if (c.seconds[i] > 0) share.push_back(c.draft_pass_seconds[i] / c.seconds[i]);
      }
      if (!share.empty()) price = std::min(price, Median(share) * c.median_seconds);
    }
    pass_seconds.push_back(price);
  }
  if (absl::Status s = table->SetDraftSplit(std::move(pass_seconds), passes); !s.ok()) {
    return absl::InternalError(absl::StrCat("the measured draft split does not fit the table: ",
                                            s.message()));
  }
  std::vector<double> one_pass_seconds;
  for (const double b : batches) {
    std::vector<double> at_batch;
    for (const ProfileCell* c : one_pass) {
      if (c->batch_size == b && c->draft_passes == 1) {
        at_batch.insert(at_batch.end(), c->draft_pass_seconds.begin(), c->draft_pass_seconds.end());
      }
    }
    if (at_batch.empty()) return table;  // one-pass cells left out, or not for every B
    one_pass_seconds.push_back(Median(at_batch));
  }
  if (absl::Status s = table->SetOnePassDraft(std::move(one_pass_seconds)); !s.ok()) {
    std::fprintf(stderr,
                 "verdict profile: the one-pass draft phase is left out of the table (the "
                 "draft planner prices P passes as P mean passes): %s\n",
                 std::string(s.message()).c_str());
  }
  return table;
}

absl::StatusOr<ProfileResult> RunProfile(Engine& engine, const ProfileOptions& options) {
  if (absl::Status s = CheckProfileOptions(options, engine); !s.ok()) return s;
  const int gamma = engine.options().num_draft_tokens;
  // Every step of a request commits at most gamma + 1 tokens; each request
  // has tokens for every step it may run, so that no pinned budget is cut
  // short by a request's length limit.
  const int steps_per_cell = options.warmup_steps + options.repeats + kSlackSteps;
  const int max_tokens = steps_per_cell * (gamma + 1);
  std::vector<std::vector<int32_t>> prompts;
  for (const BenchPrompt& p : BuiltinPrompts()) {
    absl::StatusOr<std::vector<int32_t>> ids = engine.tokenizer().Encode(p.text, true);
    if (!ids.ok()) return ids.status();
    if (static_cast<int64_t>(ids->size()) + max_tokens > engine.max_model_len()) {
      return absl::InvalidArgumentError(
          absl::StrCat(steps_per_cell, " steps per cell need ", max_tokens,
                       " tokens per request, more than the context of ", engine.max_model_len(),
                       " allows; lower --profile-repeats or --profile-warmup-steps"));
    }
    prompts.push_back(*std::move(ids));
  }
  // Admission reserves each request's whole context up front, so the largest
  // batch must fit in the KV cache at once: refuse the grid before measuring
  // anything rather than fail at its last cells.
  size_t longest_prompt = 0;
  for (const std::vector<int32_t>& p : prompts) longest_prompt = std::max(longest_prompt, p.size());
  const int largest_batch = *std::max_element(options.batch_sizes.begin(), options.batch_sizes.end());
  const int64_t positions = static_cast<int64_t>(largest_batch) *
                            (static_cast<int64_t>(longest_prompt) + max_tokens + gamma + 1);
  if (positions > engine.options().kv_cache_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch size ", largest_batch, " needs at least ", positions,
        " KV cache positions per model (", max_tokens, " tokens per request); raise "
        "--kv-cache-tokens above ", engine.options().kv_cache_tokens,
        " or lower the largest --profile-batch-sizes"));
  }

  ProfileResult result;
  StepRecorder recorder;
  engine.set_step_observer([&recorder](const StepTiming& t) { recorder.Record(t); });
  if (engine.rank() != 0) {
    absl::Status run = engine.Run();
    engine.set_step_observer(nullptr);
    if (!run.ok()) return run;
    result.steps = recorder.steps();
    return result;
  }

  absl::Status run;
  std::thread loop([&] { run = engine.Run(); });
  std::vector<ProfileCell> cells = PlanCells(options, gamma);
  ProgressLine progress(options.progress);
  absl::Status status;
  for (size_t index = 0; index < cells.size() && status.ok(); ++index) {
    ProfileCell& cell = cells[index];
    recorder.Watch(cell.batch_size, cell.budget_fraction, cell.draft_depth > 0,
                   options.warmup_steps);
    status = engine.PinVerifyBudget(cell.budget_fraction);
    if (status.ok()) {
      status = engine.PinDraftDepth(cell.draft_depth > 0 ? std::optional<int>(cell.draft_depth)
                                                         : std::nullopt);
    }
    if (!status.ok()) break;
    CellRequests requests;
    for (int i = 0; i < cell.batch_size && status.ok(); ++i) {
      GenerationRequest r;
      r.id = absl::StrCat("profile-", index, "-", i);
      r.prompt_token_ids = prompts[i % prompts.size()];
      r.params.max_tokens = max_tokens;
      r.params.temperature = 0.0f;
      r.params.ignore_eos = true;
      r.params.seed = static_cast<uint64_t>(i);
      status = requests.Submit(engine, std::move(r));
    }
    const std::vector<StepTiming> measured = recorder.WaitForMeasured(
        static_cast<size_t>(options.repeats),
        [&](size_t done) { progress.Step(index, cells.size(), cell, done, options.repeats); },
        [&] { return !status.ok() || requests.all_finished() || !engine.ready(); });
    requests.CancelAndWait(engine);
    if (!status.ok()) break;
    if (measured.size() < static_cast<size_t>(options.repeats)) {
      const std::string error = requests.error();
      status = absl::InternalError(absl::StrCat(
          "B=", cell.batch_size, ", budget ", cell.budget_fraction, ": ",
          !error.empty() ? error
                         : absl::StrCat("only ", measured.size(), " of ", options.repeats,
                                        " steps ran at the full batch before the requests "
                                        "ended (is the KV cache, --kv-cache-tokens, too "
                                        "small for ",
                                        cell.batch_size, " requests?)")));
      break;
    }
    for (const StepTiming& t : measured) {
      // The pin reached the step: it ran exactly the rows the cell names.
      if (t.verify_tokens != cell.verify_tokens) {
        status = absl::InternalError(absl::StrCat(
            "B=", cell.batch_size, ", budget ", cell.budget_fraction, ": step ", t.step,
            " verified ", t.verify_tokens, " tokens, not ", cell.verify_tokens));
        break;
      }
      // Without a draft split the engine drafts every request's cap, gamma
      // here (each request has tokens for every step of the cell), or the
      // pinned depth.
      const int want_passes = cell.draft_depth > 0 ? cell.draft_depth : gamma;
      if (t.draft_passes != want_passes) {
        status = absl::InternalError(absl::StrCat("B=", cell.batch_size, ", budget ",
                                                  cell.budget_fraction, ": step ", t.step,
                                                  " ran ", t.draft_passes,
                                                  " draft passes, not ", want_passes));
        break;
      }
      // The whole step's cost (scheduler/cost_table.h): the drafts that a
      // budget verifies were paid for in the same step.
      cell.seconds.push_back(t.draft_seconds + t.verify_seconds);
      cell.draft_passes = t.draft_passes;
      cell.draft_pass_seconds.push_back(t.draft_seconds / t.draft_passes);
    }
    if (!status.ok()) break;
    cell.median_seconds = Median(cell.seconds);
    progress.Done(index, cells.size(), cell);
  }
  engine.Shutdown();
  loop.join();
  engine.set_step_observer(nullptr);
  if (!status.ok()) return status;
  if (!run.ok()) return run;

  absl::StatusOr<CostTable> table = CostTableFromCells(cells);
  if (!table.ok()) return table.status();
  table->set_measured_tp(engine.world_size());
  if (engine.cost_table_key().has_value()) table->set_origin(engine.cost_table_key()->origin);
  if (!options.output_path.empty()) {
    const std::filesystem::path dir = std::filesystem::path(options.output_path).parent_path();
    std::error_code error;
    if (!dir.empty()) std::filesystem::create_directories(dir, error);
    if (error) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create ", dir.string(), " for the cost table: ", error.message()));
    }
    if (absl::Status s = table->Save(options.output_path); !s.ok()) return s;
  }
  result.cells = std::move(cells);
  result.table = *std::move(table);
  result.steps = recorder.steps();
  return result;
}

int RunProfileCommand(absl::Span<char* const> positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "verdict profile: unexpected argument '%s'\n", positional[0]);
    return 2;
  }
  ProfileOptions options;
  absl::StatusOr<std::vector<int>> batches =
      ParseIntList(absl::GetFlag(FLAGS_profile_batch_sizes), "--profile-batch-sizes");
  absl::StatusOr<std::vector<double>> fractions =
      ParseDoubleList(absl::GetFlag(FLAGS_profile_fractions), "--profile-fractions");
  for (const absl::Status& s : {batches.status(), fractions.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "verdict profile: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  options.batch_sizes = *batches;
  options.budget_fractions = *fractions;
  options.repeats = absl::GetFlag(FLAGS_profile_repeats);
  options.warmup_steps = absl::GetFlag(FLAGS_profile_warmup_steps);
  const std::string out = absl::GetFlag(FLAGS_profile_out);
  options.output_path = out == "auto" ? "" : OutputPath(out);
  options.progress = absl::GetFlag(FLAGS_profile_progress);
  options.one_pass_cells = absl::GetFlag(FLAGS_profile_one_pass);
  const int largest = options.batch_sizes.empty() ? 1
                                                  : *std::max_element(options.batch_sizes.begin(),
                                                                      options.batch_sizes.end());

  // Compact mode, room for the largest batch, and the refusals, before the
  // models load.
  absl::StatusOr<EngineRuntime> rt = StartEngineFromFlags([&](EngineOptions* o) {
    o->verify_mode = VerifyMode::kCompact;
    o->max_running_requests = std::max(o->max_running_requests, largest);
    o->max_waiting_requests = std::max(o->max_waiting_requests, largest);
    // The profile measures a table; serve's default of finding one is not
    // a table named by the operator.
    if (o->cost_table_path == kAutoCostTable) o->cost_table_path.clear();
    return CheckProfileEngineOptions(*o);
  });
  if (!rt.ok()) {
    std::fprintf(stderr, "verdict profile: %s\n", rt.status().ToString().c_str());
    return 1;
  }
  Engine& engine = *rt->engine;
  if (out == "auto" && engine.rank() == 0 && engine.cost_table_key().has_value()) {
    const std::vector<std::string> dirs = CostTableDirsFromFlags();
    options.output_path = absl::StrCat(dirs.front(), "/", CostTableFileName(*engine.cost_table_key()));
  }
  absl::StatusOr<ProfileResult> result = RunProfile(engine, options);
  if (!result.ok()) {
    std::fprintf(stderr, "verdict profile (rank %d): %s\n", engine.rank(),
                 result.status().ToString().c_str());
    return 1;
  }
  if (engine.rank() != 0) return 0;
  std::printf("%6s %9s %7s %7s %11s %11s %11s %11s\n", "B", "fraction", "M", "passes",
              "median ms", "min ms", "max ms", "draft ms");
  for (const ProfileCell& c : result->cells) {
    const auto [lo, hi] = std::minmax_element(c.seconds.begin(), c.seconds.end());
    std::printf("%6d %9.3f %7lld %7d %11.3f %11.3f %11.3f %11.3f\n", c.batch_size,
                c.budget_fraction, static_cast<long long>(c.verify_tokens), c.draft_passes,
                c.median_seconds * 1e3, *lo * 1e3, *hi * 1e3,
                c.draft_passes * Median(c.draft_pass_seconds) * 1e3);
  }
  if (!options.output_path.empty()) {
    std::fprintf(stderr, "verdict profile: wrote %s (serve it with --cost-table %s)\n",
                 options.output_path.c_str(), options.output_path.c_str());
  }
  return 0;
}

}  // namespace verdict

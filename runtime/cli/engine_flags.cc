#include "runtime/cli/engine_flags.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/create_communicator.h"
#include "runtime/text/tokenizer_match.h"

ABSL_FLAG(std::string, model, "",
          "target model directory (Hugging Face layout), or builtin:NAME for a public model's "
          "shape with --load-format dummy (llama-3.1-8b, llama-3.2-1b, qwen3-0.6b); default: "
          "the bundled models/target");
ABSL_FLAG(std::string, draft, "",
          "draft model directory; default: the bundled models/draft when --model is unset");
ABSL_FLAG(std::string, load_format, "auto",
          "auto: read the safetensors weights; dummy: seeded random weights at the models' "
          "shapes (benchmarks)");
ABSL_FLAG(int, tp, 0,
          "tensor-parallel degree; must equal the number of ranks mpirun starts (0: the number "
          "of ranks)");
ABSL_FLAG(int, num_draft_tokens, 5, "draft tokens proposed per request and step (gamma)");
ABSL_FLAG(int, draft_tp, 0,
          "tensor-parallel degree of the draft: 0 (or the TP degree) shards it like the "
          "target, 1 runs a whole draft on every rank (no collectives in the draft passes)");
ABSL_FLAG(std::string, verify_mode, "static",
          "static (verify every draft), cap-accept (verify every draft, accept at most the "
          "planned length) or compact (verify only the planned rows; a plan of every draft runs "
          "as static)");
ABSL_FLAG(std::string, speculation, "on", "on: speculative decoding; off: autoregressive");
ABSL_FLAG(std::string, overlap, "off",
          "on: overlap scheduling, the CPU plans step N+1 (from confidences one or two steps "
          "old) while a worker thread runs step N; off: one step at a time, planned from its "
          "fresh drafts");
ABSL_FLAG(std::string, prefill, "in-step",
          "in-step: a joining prompt is read in its first step's own passes (the target's "
          "verify forward, the draft's first pass once the request drafts), so a join costs no "
          "extra read of the weights; separate: each model reads the joining prompts in a "
          "prefill pass of its own before the step");
ABSL_FLAG(int, max_running_requests, 64, "requests decoded together at most");
ABSL_FLAG(int, max_waiting_requests, 1024, "requests queued beyond the running ones at most");
ABSL_FLAG(int, speculation_max_batch, 0,
          "an override of the draft planner: steps of more running requests than this draft "
          "nothing (each request decodes one token, as with --speculation off); 0: no limit");
ABSL_FLAG(int64_t, max_model_len, 0, "context length; 0: the target's max_position_embeddings");
ABSL_FLAG(int64_t, kv_cache_tokens, 65536, "KV cache positions per model");
ABSL_FLAG(std::string, cost_table, "auto",
          "cost table JSON (verdict profile); auto: the first table in --cost-table-dirs "
          "measured on this GPU, these models' shapes, TP degree and --num-draft-tokens; none: "
          "no table. Without a table every draft is verified, and without its draft split "
          "every request drafts --num-draft-tokens each step");
ABSL_FLAG(std::string, cost_table_dirs, "",
          "directories (':'-separated) that --cost-table auto searches, in order; empty: "
          "$VERDICT_COST_TABLE_DIR or ~/.cache/verdict/cost_tables (where verdict profile "
          "writes), then the bundled deploy/cost_tables");
ABSL_FLAG(uint64_t, seed, 0, "seeds the requests that bring no seed of their own");
ABSL_FLAG(int, plan_check_interval, 64,
          "steps between comparisons of the ranks' plans (1: every step)");
ABSL_FLAG(int, cpu_threads, 0, "threads of the CPU backend; 0: all cores");
ABSL_FLAG(std::string, tokenizer, "",
          "directory of the tokenizer.model; default: the target's, or the bundled one for a "
          "builtin:NAME target shape");
ABSL_FLAG(std::string, backend, "cpu",
          "where the models run: cpu (float32, any machine) or cuda (bf16, one GPU per rank)");
ABSL_FLAG(std::string, cuda_graphs, "on",
          "cuda backend: on replays draft and verify steps from CUDA graphs, each step padded "
          "to a launch shape that repeats (requests to a bucket, tokens to a multiple of the "
          "longest query); exact replays only step shapes that repeat unpadded; off runs "
          "every step eagerly");
ABSL_FLAG(std::string, cuda_graph_capture, "blocks",
          "cuda backend with --cuda-graphs on: the step shapes captured as CUDA graphs at start, "
          "before serving: blocks (a block of tokens per request: plain decode, full verify "
          "steps, the draft's passes), all (also every token tier of ragged steps, as compact "
          "packing makes; a longer start) or off (each shape captured on its second use)");
ABSL_FLAG(int, cuda_graph_capture_batch, 0,
          "cuda backend: the start-up capture covers steps of up to this many requests (0: "
          "--max-running-requests)");
ABSL_FLAG(std::string, one_shot_all_reduce, "auto",
          "at TP > 1 on the CUDA backend, small all-reduces as one-shot kernels over the "
          "peer-mapped memory of the host's GPUs (on), on NCCL (off), or one-shot where every "
          "rank can map its peers' memory and NCCL elsewhere (auto)");
ABSL_FLAG(double, comm_timeout, 30, "seconds a collective may take before every rank aborts");
ABSL_FLAG(double, simulate_acceptance, -1,
          "benchmarks at real shapes: accept every verified draft with this probability (0 to 1) "
          "instead of the target's test; needs --load-format dummy; ignored with --speculation "
          "off; negative: off");

namespace verdict {
namespace {

// A flag with two spellings: true for `first`, false for `second`, an error
// naming the flag for anything else.
absl::StatusOr<bool> IsFirstChoice(const char* name, const absl::Flag<std::string>& flag,
                                   absl::string_view first, absl::string_view second) {
  const std::string value = absl::GetFlag(flag);
  if (value != first && value != second) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be ", first, " or ",
                                                   second, ", got '", value, "'"));
  }
  return value == first;
}

bool HasTokenizer(const std::string& dir) {
  return std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json") ||
         std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.model");
}

// The target's tokenizer, loaded once here: the draft's is compared with
// it, and the engine serves with it. The draft proposes ids that the target
// verifies and the target's tokenizer decodes, so a draft folder that ships
// a tokenizer must ship the target's. A folder without one (the engine
// still checks the vocabulary sizes) has nothing to compare; a target
// without one is the engine's error to report.
absl::Status LoadTargetTokenizer(ModelSource* target, const ModelSource* draft) {
  const std::string target_dir =
      target->tokenizer_dir.empty() ? target->dir : target->tokenizer_dir;
  if (!HasTokenizer(target_dir)) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(target_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  target->tokenizer = *std::move(tokenizer);
  if (draft == nullptr || !HasTokenizer(draft->dir)) return absl::OkStatus();
  return CheckDraftTokenizer(*target->tokenizer, target_dir, draft->dir);
}

}  // namespace

// A relative model directory that is not under the working directory is
// looked up where `bazel run` was started, in the binary's runfiles, and in
// the folders above the binary (a bundle or an install keeps models/ beside
// bin/), so the bundled models are found wherever verdict is started from.
std::string ResolveModelDir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.empty() || absl::StartsWith(dir, "builtin:") || fs::exists(dir) ||
      fs::path(dir).is_absolute()) {
    return dir;
  }
  std::vector<fs::path> roots;
  if (const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY")) roots.push_back(workspace);
  std::error_code error;
  const fs::path binary = fs::canonical("/proc/self/exe", error);
  if (!error) {
    roots.push_back(fs::path(binary.string() + ".runfiles") / "verdict");
    for (fs::path p = binary.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
      roots.push_back(p);
    }
  }
  for (const fs::path& root : roots) {
    if (fs::exists(root / dir, error)) return (root / dir).string();
  }
  return dir;
}

std::vector<std::string> CostTableDirsFromFlags() {
  const std::string flag = absl::GetFlag(FLAGS_cost_table_dirs);
  if (!flag.empty()) return absl::StrSplit(flag, ':', absl::SkipEmpty());
  std::vector<std::string> dirs;
  if (const char* dir = std::getenv("VERDICT_COST_TABLE_DIR"); dir != nullptr && *dir != 0) {
    dirs.push_back(dir);
  } else if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache != nullptr && *cache != 0) {
    dirs.push_back(absl::StrCat(cache, "/verdict/cost_tables"));
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != 0) {
    dirs.push_back(absl::StrCat(home, "/.cache/verdict/cost_tables"));
  }
  dirs.push_back(ResolveModelDir("deploy/cost_tables"));
  return dirs;
}

std::string TargetModelDirFromFlags() {
  const std::string model = absl::GetFlag(FLAGS_model);
  return ResolveModelDir(model.empty() ? "models/target" : model);
}

std::string TokenizerDirFromFlags() {
  const std::string dir = ResolveModelDir(absl::GetFlag(FLAGS_tokenizer));
  if (!dir.empty()) return dir;
  const std::string target = TargetModelDirFromFlags();
  return absl::StartsWith(target, "builtin:") ? ResolveModelDir("models/target") : target;
}

absl::StatusOr<EngineRuntime> StartEngineFromFlags(
    const std::function<absl::Status(EngineOptions*)>& adjust_options) {
  EngineRuntime rt;
  // Started without a launcher, the process is a world of one: MPI is not
  // initialised at all, since a singleton MPI_Init opens listening sockets
  // on every interface that nothing would ever connect to.
  const bool launched = MpiSession::LaunchedByLauncher();
  if (launched) {
    absl::StatusOr<std::shared_ptr<MpiSession>> mpi = MpiSession::Acquire();
    if (!mpi.ok()) return mpi.status();
    rt.mpi = *std::move(mpi);
  }
  CommOptions comm_options;
  comm_options.timeout = absl::Seconds(absl::GetFlag(FLAGS_comm_timeout));
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      CreateCommunicator(launched ? Backend::kMpi : Backend::kLocal, comm_options);
  if (!comm.ok()) return comm.status();
  rt.comm = *std::move(comm);
  const int tp = absl::GetFlag(FLAGS_tp);
  if (tp != 0 && tp != rt.comm->world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp ", tp, " but mpirun started ", rt.comm->world_size(),
        " ranks; launch with mpirun -np ", tp, " (one rank per GPU)"));
  }

  EngineOptions options;
  options.num_draft_tokens = absl::GetFlag(FLAGS_num_draft_tokens);
  options.draft_tp = absl::GetFlag(FLAGS_draft_tp);
  absl::StatusOr<VerifyMode> mode = ParseVerifyMode(absl::GetFlag(FLAGS_verify_mode));
  if (!mode.ok()) return mode.status();
  options.verify_mode = *mode;
  absl::StatusOr<bool> speculation = IsFirstChoice("speculation", FLAGS_speculation, "on", "off");
  if (!speculation.ok()) return speculation.status();
  options.speculation = *speculation;
  absl::StatusOr<bool> overlap = IsFirstChoice("overlap", FLAGS_overlap, "on", "off");
  if (!overlap.ok()) return overlap.status();
  options.overlap = *overlap;
  absl::StatusOr<bool> in_step = IsFirstChoice("prefill", FLAGS_prefill, "in-step", "separate");
  if (!in_step.ok()) return in_step.status();
  options.fused_prefill = *in_step;
  options.max_running_requests = absl::GetFlag(FLAGS_max_running_requests);
  options.speculation_max_batch = absl::GetFlag(FLAGS_speculation_max_batch);
  options.max_waiting_requests = absl::GetFlag(FLAGS_max_waiting_requests);
  options.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  options.kv_cache_tokens = absl::GetFlag(FLAGS_kv_cache_tokens);
  options.cost_table_path = absl::GetFlag(FLAGS_cost_table);
  if (options.cost_table_path == "none") options.cost_table_path.clear();
  options.cost_table_dirs = CostTableDirsFromFlags();
  options.seed = absl::GetFlag(FLAGS_seed);
  options.plan_check_interval = absl::GetFlag(FLAGS_plan_check_interval);
  options.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  options.simulate_acceptance = absl::GetFlag(FLAGS_simulate_acceptance);
  absl::StatusOr<bool> cpu = IsFirstChoice("backend", FLAGS_backend, "cpu", "cuda");
  if (!cpu.ok()) return cpu.status();
  options.backend = *cpu ? ModelBackend::kCpu : ModelBackend::kCuda;
  options.comm_timeout = comm_options.timeout;
  const std::string graphs = absl::GetFlag(FLAGS_cuda_graphs);
  if (graphs != "on" && graphs != "exact" && graphs != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--cuda-graphs must be on, exact or off, not '", graphs, "'"));
  }
  options.cuda_graphs = graphs != "off";
  options.pad_graph_shapes = graphs == "on";
  const std::string capture = absl::GetFlag(FLAGS_cuda_graph_capture);
  if (capture == "blocks") {
    options.graph_capture = GraphCaptureTiers::kBlocks;
  } else if (capture == "all") {
    options.graph_capture = GraphCaptureTiers::kAll;
  } else if (capture == "off") {
    options.graph_capture = GraphCaptureTiers::kOff;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cuda-graph-capture must be blocks, all or off, not '", capture, "'"));
  }
  options.graph_capture_batch = absl::GetFlag(FLAGS_cuda_graph_capture_batch);
  if (options.graph_capture_batch < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cuda-graph-capture-batch must be 0 or positive, not ", options.graph_capture_batch));
  }
  const std::string one_shot = absl::GetFlag(FLAGS_one_shot_all_reduce);
  if (one_shot == "auto") {
    options.one_shot_all_reduce = OneShotAllReduce::kAuto;
  } else if (one_shot == "on") {
    options.one_shot_all_reduce = OneShotAllReduce::kOn;
  } else if (one_shot == "off") {
    options.one_shot_all_reduce = OneShotAllReduce::kOff;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--one-shot-all-reduce must be auto, on or off, not '", one_shot, "'"));
  }

  absl::StatusOr<bool> real_weights =
      IsFirstChoice("load-format", FLAGS_load_format, "auto", "dummy");
  if (!real_weights.ok()) return real_weights.status();
  const bool dummy = !*real_weights;
  std::string model = absl::GetFlag(FLAGS_model);
  std::string draft = absl::GetFlag(FLAGS_draft);
  if (model.empty() && draft.empty()) draft = "models/draft";
  ModelSource target{TargetModelDirFromFlags(), dummy, 1};
  target.tokenizer_dir = TokenizerDirFromFlags();
  if (model.empty() && !std::filesystem::exists(target.dir)) {
    return absl::NotFoundError(
        "the bundled model models/target was not found (not under the working directory, the "
        "binary's runfiles, or the folders above the binary); pass --model DIR");
  }
  std::optional<ModelSource> draft_source;
  if (!draft.empty()) draft_source = ModelSource{ResolveModelDir(draft), dummy, 2};
  if (absl::Status s = LoadTargetTokenizer(&target, draft_source ? &*draft_source : nullptr);
      !s.ok()) {
    return s;
  }
  if (adjust_options) {
    if (absl::Status s = adjust_options(&options); !s.ok()) return s;
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(options, target, draft_source, rt.comm.get());
  if (!engine.ok()) return engine.status();
  rt.engine = *std::move(engine);
  return rt;
}

}  // namespace verdict

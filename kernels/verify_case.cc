#include "kernels/verify_case.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/verify_sampler.h"
#include "runtime/base/json_number.h"

namespace verdict {

const char kSampleCaseFormat[] = R"(JSON file of one verify step for `verdict sample`:
{"vocab_size": V,
 "nextn": 5,  (optional; default: most drafts of one request)
 "penalty": 5e-5,  (optional; alpha = exp(-penalty) in the residual)
 "simulated_acceptance": 0.7,  (optional; accept every draft with this
   chance instead of the target's test; negative = off, the default)
 "requests": [{...}, ...],  (in row order; rows are packed)
 "bitmasks": [{"step": k, "requests": [r, ...],
   "allowed_token_ids": [[ids], ...] or "bits": [[u32 words], ...]}]}
   (optional; one entry per listed request; applies to row ftp[r] + k)
A request:
 "target_logits": [[V numbers], ...]  (seqlen_q rows) or
 "target_probs": [[V numbers], ...]  (logit = log p, p = 0 -> -1e30),
 "draft_token_ids": [seqlen_q - 1 ids]  (row k verifies draft k),
 "draft_probs": [[V numbers], ...]  (one row per draft) or
 "draft_topk": [[[id, p], ...], ...]  (sparse; other ids have p = 0),
 optional: "temperature" (1; 0 = greedy), "top_k" (0 = off),
 "top_p" (1 = off), "min_p" (0 = off), "seed" (0), "position" (0),
 "verify_len" (-1 = all drafts; the planned length for cap-accept),
 "stop_token_ids" ([]), "golden_token_ids" (one per row, -1 = none).
Integer fields take JSON integers that fit the field (5, not 5.0); numbers
must be finite (as float32 for logits and draft probabilities).
Output on stdout, JSON. With --trials=1, every output field:
 "rows": per row request, local_step, is_verify, draft_token_id,
 raw_accept, accept, is_final, candidate_token_id,
 verified_token_id, logprob (null = -inf);
 "requests": per request last_valid_offset, sampled_token_id,
 emitted_stop_token, emitted_token_ids;
 "num_generated_tokens", "num_verified_tokens".
With --trials=N > 1 (trial t adds t to every request's seed):
 per request "accepted_length_histogram" (index = accepted drafts),
 "mean_emitted_tokens", and per output position "emitted" and
 "token_histogram" ({"token id": count}).
Bad input exits 1 with a message naming the request and row.)";

namespace {

using nlohmann::json;

absl::Status CaseError(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("case: ", where, ": ", what));
}

// A value refused by runtime/base/json_number, whose message starts with the
// field's JSON path: that path is the `where` of the error.
absl::Status CaseError(const absl::Status& refused) {
  return absl::InvalidArgumentError(absl::StrCat("case: ", refused.message()));
}

// `path` is the row's JSON path, which names a refused entry.
absl::Status ReadFloatRow(const json& value, int32_t vocab, bool probs, const std::string& where,
                          const std::string& path, std::vector<float>* out) {
  if (!value.is_array()) return CaseError(where, "expected an array");
  if (static_cast<int64_t>(value.size()) != vocab) {
    return CaseError(where, absl::StrCat("has ", value.size(), " entries, vocab_size is ", vocab));
  }
  out->clear();
  for (size_t j = 0; j < value.size(); ++j) {
    const json& x = value[j];
    if (!x.is_number()) return CaseError(where, "expected numbers");
    const std::string entry = absl::StrCat(path, "[", j, "]");
    if (probs) {
      // A probability only needs to be finite: its log is.
      absl::StatusOr<double> v = JsonFiniteNumber(x, entry);
      if (!v.ok()) return CaseError(v.status());
      out->push_back(*v > 0 ? static_cast<float>(std::log(*v)) : -1e30f);
    } else {
      // A logit past the float range would reach the sampler as Inf.
      absl::StatusOr<float> v = JsonFiniteFloat(x, entry);
      if (!v.ok()) return CaseError(v.status());
      out->push_back(*v);
    }
  }
  return absl::OkStatus();
}

// Token ids (and request indices) are int32 in the sampler; the vocabulary
// bound is checked where it applies. `path` is the array's JSON path.
absl::Status ReadIds(const json& value, const std::string& where, const std::string& path,
                     std::vector<int32_t>* out) {
  if (!value.is_array()) return CaseError(where, "expected an array of token ids");
  out->clear();
  for (size_t j = 0; j < value.size(); ++j) {
    const json& x = value[j];
    if (!x.is_number_integer()) return CaseError(where, "expected integer token ids");
    absl::StatusOr<int32_t> id = JsonIntegerAs<int32_t>(x, absl::StrCat(path, "[", j, "]"));
    if (!id.ok()) return CaseError(id.status());
    out->push_back(*id);
  }
  return absl::OkStatus();
}

// An optional field of `object`, whose JSON path is `prefix` + key. Integer
// fields take integers that fit T; floating-point fields take numbers that
// are finite as T.
template <typename T>
absl::Status ReadNumber(const json& object, const char* key, const std::string& where,
                        const std::string& prefix, T* out) {
  if (!object.contains(key)) return absl::OkStatus();
  const json& v = object.at(key);
  if (!v.is_number()) return CaseError(where, absl::StrCat("\"", key, "\" must be a number"));
  const std::string path = absl::StrCat(prefix, key);
  if constexpr (std::is_integral_v<T>) {
    absl::StatusOr<T> value = JsonIntegerAs<T>(v, path);
    if (!value.ok()) return CaseError(value.status());
    *out = *value;
  } else {
    static_assert(std::is_same_v<T, float>, "case fields are integers or float32");
    absl::StatusOr<float> value = JsonFiniteFloat(v, path);
    if (!value.ok()) return CaseError(value.status());
    *out = *value;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostVerifyStep>> ParseVerifyCase(const json& c) {
  if (!c.is_object()) return CaseError("top level", "expected an object");
  if (!c.contains("vocab_size") || !c.at("vocab_size").is_number_integer()) {
    return CaseError("top level", "\"vocab_size\" (integer) is required");
  }
  absl::StatusOr<int32_t> read_vocab =
      JsonIntegerAs<int32_t>(c.at("vocab_size"), "vocab_size", 1, kMaxVocabSize);
  if (!read_vocab.ok()) return CaseError(read_vocab.status());
  const int32_t vocab = *read_vocab;
  if (!c.contains("requests") || !c.at("requests").is_array()) {
    return CaseError("top level", "\"requests\" (array) is required");
  }
  const json& requests = c.at("requests");
  SamplerConfig config;
  if (absl::Status s = ReadNumber(c, "penalty", "top level", "", &config.penalty); !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadNumber(c, "simulated_acceptance", "top level", "", &config.simulated_acceptance);
      !s.ok()) {
    return s;
  }
  int32_t max_drafts = 0;
  for (const json& r : requests) {
    if (r.is_object() && r.contains("draft_token_ids") && r.at("draft_token_ids").is_array()) {
      max_drafts = std::max(max_drafts, static_cast<int32_t>(r.at("draft_token_ids").size()));
    }
  }
  config.nextn = max_drafts;
  if (absl::Status s = ReadNumber(c, "nextn", "top level", "", &config.nextn); !s.ok()) return s;
  auto step = std::make_unique<HostVerifyStep>(vocab, config);

  // Bitmasks, grouped per request as (step, words).
  std::map<int32_t, std::vector<std::pair<int32_t, std::vector<uint32_t>>>> masks;
  if (c.contains("bitmasks")) {
    const json& list = c.at("bitmasks");
    if (!list.is_array()) return CaseError("bitmasks", "expected an array");
    for (size_t m = 0; m < list.size(); ++m) {
      const std::string where = absl::StrCat("bitmasks[", m, "]");
      const json& b = list[m];
      if (!b.is_object() || !b.contains("step") || !b.at("step").is_number_integer() ||
          !b.contains("requests") || !b.at("requests").is_array()) {
        return CaseError(where, "needs \"step\" and \"requests\"");
      }
      absl::StatusOr<int32_t> k = JsonIntegerAs<int32_t>(b.at("step"), where + ".step");
      if (!k.ok()) return CaseError(k.status());
      std::vector<int32_t> listed;
      if (absl::Status s = ReadIds(b.at("requests"), where, where + ".requests", &listed);
          !s.ok()) {
        return s;
      }
      const bool by_ids = b.contains("allowed_token_ids");
      const json& payload = by_ids ? b.at("allowed_token_ids") : b.value("bits", json());
      if (!payload.is_array() || payload.size() != listed.size()) {
        return CaseError(where, "needs one \"allowed_token_ids\" or \"bits\" entry per request");
      }
      for (size_t i = 0; i < listed.size(); ++i) {
        std::vector<uint32_t> words;
        if (by_ids) {
          std::vector<int32_t> ids;
          if (absl::Status s = ReadIds(payload[i], where,
                                       absl::StrCat(where, ".allowed_token_ids[", i, "]"), &ids);
              !s.ok()) {
            return s;
          }
          for (const int32_t id : ids) {
            if (id < 0 || id >= vocab) return CaseError(where, "allowed id out of the vocabulary");
          }
          words = BitmaskAllowing(vocab, ids);
        } else {
          if (!payload[i].is_array()) return CaseError(where, "bits must be arrays of words");
          for (size_t j = 0; j < payload[i].size(); ++j) {
            const json& w = payload[i][j];
            if (!w.is_number_unsigned()) return CaseError(where, "bits must be unsigned words");
            absl::StatusOr<uint32_t> word =
                JsonIntegerAs<uint32_t>(w, absl::StrCat(where, ".bits[", i, "][", j, "]"));
            if (!word.ok()) return CaseError(word.status());
            words.push_back(*word);
          }
          if (static_cast<int32_t>(words.size()) != (vocab + 31) / 32) {
            return CaseError(where, absl::StrCat("bits need ", (vocab + 31) / 32, " words"));
          }
        }
        masks[listed[i]].push_back({*k, words});
      }
    }
  }
  for (const auto& [r, unused] : masks) {
    if (r < 0 || r >= static_cast<int32_t>(requests.size())) {
      return CaseError("bitmasks", absl::StrCat("request ", r, " does not exist"));
    }
  }

  for (size_t i = 0; i < requests.size(); ++i) {
    const json& r = requests[i];
    const std::string where = absl::StrCat("request ", i);
    const std::string path = absl::StrCat("requests[", i, "].");
    if (!r.is_object()) return CaseError(where, "expected an object");
    VerifyRequest req;
    const bool probs = r.contains("target_probs");
    const json& rows = probs ? r.at("target_probs") : r.value("target_logits", json());
    if (!rows.is_array() || rows.empty()) {
      return CaseError(where, "needs \"target_logits\" or \"target_probs\" (one row at least)");
    }
    for (size_t k = 0; k < rows.size(); ++k) {
      std::vector<float> row;
      if (absl::Status s = ReadFloatRow(
              rows[k], vocab, probs, absl::StrCat(where, ", row ", k),
              absl::StrCat(path, probs ? "target_probs[" : "target_logits[", k, "]"), &row);
          !s.ok()) {
        return s;
      }
      req.logits.push_back(std::move(row));
    }
    const size_t drafts = rows.size() - 1;
    if (drafts > 0) {
      if (!r.contains("draft_token_ids")) return CaseError(where, "needs \"draft_token_ids\"");
      if (absl::Status s = ReadIds(r.at("draft_token_ids"), where, path + "draft_token_ids",
                                   &req.draft_token_ids);
          !s.ok()) {
        return s;
      }
    }
    if (req.draft_token_ids.size() != drafts) {
      return CaseError(where, absl::StrCat("has ", rows.size(), " target rows, so ", drafts,
                                           " draft token ids, not ", req.draft_token_ids.size()));
    }
    if (drafts > 0 && r.contains("draft_probs")) {
      const json& ps = r.at("draft_probs");
      if (!ps.is_array() || ps.size() != drafts) {
        return CaseError(where, "needs one \"draft_probs\" row per draft");
      }
      for (size_t k = 0; k < drafts; ++k) {
        std::vector<float> p;
        if (absl::Status s = ReadFloatRow(ps[k], vocab, false, absl::StrCat(where, ", draft ", k),
                                          absl::StrCat(path, "draft_probs[", k, "]"), &p);
            !s.ok()) {
          return s;
        }
        req.draft_probs.push_back(std::move(p));
      }
    } else if (drafts > 0 && r.contains("draft_topk")) {
      // Sparse lists become dense rows: the sampler reads the same p either way.
      const json& lists = r.at("draft_topk");
      if (!lists.is_array() || lists.size() != drafts) {
        return CaseError(where, "needs one \"draft_topk\" list per draft");
      }
      for (size_t k = 0; k < drafts; ++k) {
        std::vector<float> p(vocab, 0.0f);
        if (!lists[k].is_array()) return CaseError(where, "draft_topk lists are arrays");
        for (size_t j = 0; j < lists[k].size(); ++j) {
          const json& e = lists[k][j];
          if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() || !e[1].is_number()) {
            return CaseError(absl::StrCat(where, ", draft ", k), "entries are [id, p]");
          }
          const std::string entry = absl::StrCat(path, "draft_topk[", k, "][", j, "]");
          absl::StatusOr<int32_t> id = JsonIntegerAs<int32_t>(e[0], entry + "[0]");
          if (!id.ok()) return CaseError(id.status());
          if (*id < 0 || *id >= vocab) {
            return CaseError(absl::StrCat(where, ", draft ", k), "id out of the vocabulary");
          }
          absl::StatusOr<float> prob = JsonFiniteFloat(e[1], entry + "[1]");
          if (!prob.ok()) return CaseError(prob.status());
          p[*id] += *prob;
        }
        req.draft_probs.push_back(std::move(p));
      }
    } else if (drafts > 0) {
      return CaseError(where, "needs \"draft_probs\" or \"draft_topk\"");
    }
    for (absl::Status s : {ReadNumber(r, "temperature", where, path, &req.temperature),
                           ReadNumber(r, "top_k", where, path, &req.top_k),
                           ReadNumber(r, "top_p", where, path, &req.top_p),
                           ReadNumber(r, "min_p", where, path, &req.min_p),
                           ReadNumber(r, "seed", where, path, &req.seed),
                           ReadNumber(r, "position", where, path, &req.position),
                           ReadNumber(r, "verify_len", where, path, &req.verify_len)}) {
      if (!s.ok()) return s;
    }
    if (r.contains("stop_token_ids")) {
      if (absl::Status s =
              ReadIds(r.at("stop_token_ids"), where, path + "stop_token_ids", &req.stop_token_ids);
          !s.ok()) {
        return s;
      }
    }
    if (r.contains("golden_token_ids")) {
      if (absl::Status s = ReadIds(r.at("golden_token_ids"), where, path + "golden_token_ids",
                                   &req.golden_token_ids);
          !s.ok()) {
        return s;
      }
      if (req.golden_token_ids.size() != rows.size()) {
        return CaseError(where, "needs one golden_token_ids entry per row");
      }
    }
    if (auto it = masks.find(static_cast<int32_t>(i)); it != masks.end()) {
      req.bitmasks = it->second;
    }
    step->Add(req);
  }
  return step;
}

namespace {

using nlohmann::ordered_json;

ordered_json LogprobJson(float x) {
  return std::isfinite(x) ? ordered_json(x) : ordered_json(nullptr);
}

}  // namespace

absl::StatusOr<ordered_json> RunVerifyCase(const HostVerifyStep& step, int trials) {
  if (trials < 1) return absl::InvalidArgumentError("--trials must be at least 1");
  VerifyInputs in = step.Inputs();
  std::vector<uint64_t> seeds = step.seeds();
  in.seeds = seeds.data();
  HostVerifyOutputs out(in);
  VerifyOutputs view = out.View();
  const int32_t requests = in.num_requests;
  const auto emitted = [&](int32_t r) {
    std::vector<int32_t> tokens;
    const int32_t ftp = in.first_token_positions[r];
    for (int32_t k = 0; k < out.last_valid_offset[r]; ++k) {
      tokens.push_back(out.verified_token_ids[ftp + k]);
    }
    tokens.push_back(out.sampled_token_ids[r]);
    return tokens;
  };

  if (trials == 1) {
    if (absl::Status s = VerifySampleCpu(in, &view); !s.ok()) return s;
    ordered_json rows = ordered_json::array();
    for (int32_t row = 0; row < in.total_q; ++row) {
      const int32_t r = out.row_to_req[row];
      const int32_t k = out.local_step[row];
      const bool has_draft = k < in.seqlen_q[r] - 1;
      rows.push_back({
          {"row", row},
          {"request", r},
          {"local_step", k},
          {"is_verify", out.is_verify[row] != 0},
          {"draft_token_id",
           has_draft ? ordered_json(in.draft_token_ids[in.first_token_positions[r] - r + k]) : ordered_json()},
          {"raw_accept", out.raw_accept[row] != 0},
          {"accept", out.accept[row] != 0},
          {"is_final", out.is_final[row] != 0},
          {"candidate_token_id", out.candidate_token_ids[row]},
          {"verified_token_id", out.verified_token_ids[row]},
          {"logprob", LogprobJson(out.token_logprobs[row])},
      });
    }
    ordered_json reqs = ordered_json::array();
    for (int32_t r = 0; r < requests; ++r) {
      reqs.push_back({
          {"request", r},
          {"last_valid_offset", out.last_valid_offset[r]},
          {"sampled_token_id", out.sampled_token_ids[r]},
          {"emitted_stop_token", out.emitted_stop_token[r] != 0},
          {"emitted_token_ids", emitted(r)},
      });
    }
    return ordered_json{{"rows", rows},
                {"requests", reqs},
                {"num_generated_tokens", out.num_generated_tokens},
                {"num_verified_tokens", out.num_verified_tokens}};
  }

  std::vector<std::vector<int64_t>> lengths(requests);
  std::vector<std::vector<std::map<int32_t, int64_t>>> tokens(requests);
  std::vector<int64_t> emitted_total(requests, 0);
  for (int32_t r = 0; r < requests; ++r) {
    lengths[r].assign(in.seqlen_q[r], 0);
    tokens[r].resize(in.seqlen_q[r]);
  }
  for (int t = 0; t < trials; ++t) {
    for (int32_t r = 0; r < requests; ++r) seeds[r] = step.seeds()[r] + static_cast<uint64_t>(t);
    if (absl::Status s = VerifySampleCpu(in, &view); !s.ok()) return s;
    for (int32_t r = 0; r < requests; ++r) {
      ++lengths[r][out.last_valid_offset[r]];
      const std::vector<int32_t> e = emitted(r);
      emitted_total[r] += static_cast<int64_t>(e.size());
      for (size_t k = 0; k < e.size(); ++k) ++tokens[r][k][e[k]];
    }
  }
  ordered_json reqs = ordered_json::array();
  for (int32_t r = 0; r < requests; ++r) {
    ordered_json positions = ordered_json::array();
    for (size_t k = 0; k < tokens[r].size(); ++k) {
      int64_t n = 0;
      ordered_json histogram = ordered_json::object();
      for (const auto& [id, count] : tokens[r][k]) {
        histogram[std::to_string(id)] = count;
        n += count;
      }
      if (n == 0) break;
      positions.push_back({{"position", k}, {"emitted", n}, {"token_histogram", histogram}});
    }
    reqs.push_back({{"request", r},
                    {"accepted_length_histogram", lengths[r]},
                    {"mean_emitted_tokens", static_cast<double>(emitted_total[r]) / trials},
                    {"positions", positions}});
  }
  return ordered_json{{"trials", trials}, {"requests", reqs}};
}

}  // namespace verdict

// The flag is named `case` as the command line spells it; the macro only
// pastes the name into identifiers, so the keyword is no obstacle.
ABSL_FLAG(std::string, case, "",
          "`verdict sample`: the JSON case file (its format: `verdict sample --help`)");
ABSL_FLAG(int, trials, 1,
          "`verdict sample`: how many times to run the case (trial t adds t to "
          "every request's seed); > 1 prints histograms");

namespace verdict {

int RunSampleCommand(absl::Span<char* const> /*positional*/) {
  const std::string path = absl::GetFlag(FLAGS_case);
  if (path.empty()) {
    std::fprintf(stderr, "verdict sample: --case=FILE.json is required\n\n%s\n",
                 kSampleCaseFormat);
    return 2;
  }
  std::ifstream file(path);
  if (!file) {
    std::fprintf(stderr, "verdict sample: cannot read %s\n", path.c_str());
    return 1;
  }
  std::stringstream text;
  text << file.rdbuf();
  const json parsed = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    std::fprintf(stderr, "verdict sample: %s is not valid JSON\n", path.c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<HostVerifyStep>> step = ParseVerifyCase(parsed);
  if (!step.ok()) {
    std::fprintf(stderr, "verdict sample: %s: %s\n", path.c_str(),
                 std::string(step.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<nlohmann::ordered_json> report = RunVerifyCase(**step, absl::GetFlag(FLAGS_trials));
  if (!report.ok()) {
    std::fprintf(stderr, "verdict sample: %s\n", std::string(report.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", report->dump(2).c_str());
  return 0;
}

}  // namespace verdict

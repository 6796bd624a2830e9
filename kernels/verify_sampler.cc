// CPU twin of the fused verify sampler: the reference semantics
// (kernels/verify_sampler.h). It walks each row with the same arithmetic as
// the kernel (kernels/sampling_math.h) and the same shared pieces
// (kernels/verify_sampler_internal.h), so both backends make the same
// decisions bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/philox.h"
#include "kernels/sampling_math.h"
#include "kernels/verify_sampler.h"
#include "kernels/verify_sampler_internal.h"

namespace verdict {
namespace {

using namespace sampling_math;  // NOLINT: the arithmetic vocabulary of this file
using verify_internal::ErrorKey;
using verify_internal::Kept;
using verify_internal::MinKey;
using verify_internal::RowKind;
using verify_internal::RowSetup;

constexpr int32_t kNoId = 0x7FFFFFFF;

// A running exponential race over one row.
struct Race {
  float key = 0.0f;
  int32_t id = kNoId;
  void Offer(float k, int32_t i) {
    if (RaceBeats(k, i, key, id)) {
      key = k;
      id = i;
    }
  }
  bool empty() const { return id == kNoId; }
};

// Fixed-point mass of the kept ids, tile by tile (verify_internal::
// kMassTileIds), each tile's at the row maximum in tile_masses. Tile maxima
// come out +0 for a zero maximum whatever the sign of the zeros, as in the
// kernel.
uint64_t KeptMass(const std::vector<float>& z, float row_max, float threshold,
                  std::vector<uint64_t>* tile_masses) {
  uint64_t mass = 0;
  const size_t size = z.size();
  tile_masses->assign(verify_internal::NumMassTiles(static_cast<int32_t>(size)), 0);
  for (size_t begin = 0; begin < size; begin += verify_internal::kMassTileIds) {
    const size_t end = std::min(size, begin + verify_internal::kMassTileIds);
    float tile_max = kNegInf;
    for (size_t i = begin; i < end; ++i) {
      if (Kept(z[i], threshold) && z[i] > tile_max) tile_max = z[i];
    }
    if (tile_max == kNegInf) continue;
    tile_max = FAdd(tile_max, 0.0f);
    uint64_t tile_sum = 0;
    for (size_t i = begin; i < end; ++i) {
      if (Kept(z[i], threshold)) tile_sum += FixedExpNonPositive(FSub(z[i], tile_max));
    }
    const uint64_t tile_mass = verify_internal::TileMassAtRowMax(tile_sum, tile_max, row_max);
    (*tile_masses)[begin / verify_internal::kMassTileIds] = tile_mass;
    mass += tile_mass;
  }
  return mass;
}

// The k-th largest allowed z (k < number of allowed ids).
float TopKThreshold(const std::vector<float>& z, int32_t k) {
  std::vector<float> allowed;
  allowed.reserve(z.size());
  for (const float zi : z) {
    if (zi > kNegInf) allowed.push_back(zi);
  }
  std::nth_element(allowed.begin(), allowed.begin() + (k - 1), allowed.end(),
                   std::greater<float>());
  return allowed[k - 1];
}

// The smallest value v among the kept ids with mass(z > v) < top_p * mass
// (header comment of verify_sampler.h). Values are visited from the top in
// groups of equal z; mass(z > v) only grows, so the first group that fails
// ends the walk.
float TopPThreshold(const std::vector<float>& z, float row_max, float threshold,
                    uint64_t kept_mass, float top_p) {
  std::vector<float> kept;
  for (const float zi : z) {
    if (Kept(zi, threshold)) kept.push_back(zi);
  }
  std::sort(kept.begin(), kept.end(), std::greater<float>());
  const double limit = DMul(static_cast<double>(top_p), FixedToDouble(kept_mass));
  uint64_t above = 0;
  float lowest = kept.front();
  for (size_t i = 0; i < kept.size();) {
    size_t j = i;
    uint64_t group = 0;
    while (j < kept.size() && kept[j] == kept[i]) {
      group += FixedExpNonPositive(FSub(kept[j], row_max));
      ++j;
    }
    if (!(FixedToDouble(above) < limit)) break;
    lowest = kept[i];
    above += group;
    i = j;
  }
  return lowest;
}

class RowSampler {
 public:
  RowSampler(const VerifyInputs& in, float alpha) : in_(in), alpha_(alpha) {}

  // Computes one row's raw accept, candidate and logprob into `out`; returns
  // the row's error key (0 if none).
  uint64_t Run(int32_t row, const VerifyOutputs& out) {
    const RowSetup s = verify_internal::SetupRow(in_, row);
    out.row_to_req[row] = s.info.request;
    out.local_step[row] = s.info.local_step;
    out.is_verify[row] = s.info.kind == RowKind::kVerify ? 1 : 0;
    out.raw_accept[row] = 0;
    out.candidate_token_ids[row] = -1;
    out.token_logprobs[row] = 0.0f;
    if (s.info.kind == RowKind::kUncovered || s.info.kind == RowKind::kSkipped) return 0;

    const int32_t v_size = in_.vocab_size;
    uint64_t key = s.error_key;

    // At most one bitmask per row.
    int32_t mask = -1;
    int32_t masks = 0;
    for (int32_t m = 0; m < in_.num_bitmasks; ++m) {
      if (in_.bitmask_request_indices[m] == s.info.request &&
          in_.bitmask_steps[m] == s.info.local_step) {
        if (mask < 0) mask = m;
        ++masks;
      }
    }
    if (masks > 1) {
      key = MinKey(key, ErrorKey(row, VerifyErrorCode::kDuplicateBitmask,
                                 static_cast<uint32_t>(masks)));
    }

    // The row scan: z, its maximum (argmax ties to the lowest id), allowed ids.
    z_.assign(v_size, kNegInf);
    float row_max = kNegInf;
    int32_t argmax = kNoId;
    int32_t allowed = 0;
    int32_t non_finite = kNoId;
    const int64_t base = static_cast<int64_t>(row) * v_size;
    for (int32_t v = 0; v < v_size; ++v) {
      float zi = ScaleLogit(verify_internal::LoadLogit(in_, base + v), s.inv_temperature);
      if (!IsFinite(zi)) {
        non_finite = std::min(non_finite, v);
        continue;
      }
      if (mask >= 0 && !verify_internal::BitmaskAllows(in_, mask, v)) zi = kNegInf;
      z_[v] = zi;
      if (zi > kNegInf) {
        ++allowed;
        if (zi > row_max) {
          row_max = zi;
          argmax = v;
        }
      }
    }
    if (non_finite != kNoId) {
      key = MinKey(key, ErrorKey(row, VerifyErrorCode::kNonFiniteLogit,
                                 static_cast<uint32_t>(non_finite)));
    }
    if (allowed == 0) key = MinKey(key, ErrorKey(row, VerifyErrorCode::kNoAllowedToken, 0));
    if (key != 0) return key;

    const bool verify = s.info.kind == RowKind::kVerify;
    const bool simulated = verify && verify_internal::SimulatesAcceptance(in_, s.golden);
    int32_t candidate = -1;
    bool raw = true;
    float threshold = kNegInf;
    uint64_t mass = 0;

    if (s.greedy) {
      mass = KeptMass(z_, row_max, threshold, &tile_masses_);
      candidate = s.golden >= 0 ? s.golden : argmax;
      raw = !verify || s.draft == candidate;
      if (simulated) {
        raw = verify_internal::SimulatedAccept(s.seed, s.position,
                                               in_.config.simulated_acceptance);
        candidate = raw ? s.draft : argmax;
      }
    } else {
      threshold = MinPThreshold(row_max, s.min_p);
      if (s.top_k > 0 && s.top_k < allowed) {
        threshold = std::max(threshold, TopKThreshold(z_, s.top_k));
      }
      mass = KeptMass(z_, row_max, threshold, &tile_masses_);
      if (s.top_p < 1.0f) {
        threshold = TopPThreshold(z_, row_max, threshold, mass, s.top_p);
        mass = KeptMass(z_, row_max, threshold, &tile_masses_);
      }
      const float mass_f = FixedToFloat(mass);
      if (s.golden >= 0) {
        candidate = s.golden;
        raw = !verify || s.draft == s.golden;
      } else if (verify) {
        if (simulated) {
          raw = verify_internal::SimulatedAccept(s.seed, s.position,
                                                 in_.config.simulated_acceptance);
        } else {
          const float zd = z_[s.draft];
          const float q_draft =
              Kept(zd, threshold) ? FDiv(ExpNonPositive(FSub(zd, row_max)), mass_f) : 0.0f;
          raw = AcceptDraft(verify_internal::AcceptUniform(s.seed, s.position), s.p_draft,
                            q_draft);
        }
        if (raw) {
          candidate = s.draft;
        } else if (EarlierRowsAccepted(s, row, out)) {
          const uint64_t p_key = ResidualRace(s, row, row_max, threshold, mass_f, &candidate);
          if (p_key != 0) return p_key;
        }
      } else if (EarlierRowsAccepted(s, row, out)) {
        candidate = TargetRace(s, row_max, threshold, RandomStream::kBonus);
      }
    }

    out.raw_accept[row] = raw ? 1 : 0;
    if (candidate < 0) return 0;  // after a rejected row: nothing drawn
    out.candidate_token_ids[row] = candidate;
    const float zc = z_[candidate];
    out.token_logprobs[row] =
        Kept(zc, threshold) ? verify_internal::KeptLogprob(zc, row_max, FixedToFloat(mass))
                            : kNegInf;
    return 0;
  }

 private:
  // Whether every earlier row of the row's request accepted its draft, so
  // that the row can be the request's final row (rows run in order here;
  // an earlier row that failed left raw_accept 0).
  bool EarlierRowsAccepted(const RowSetup& s, int32_t row, const VerifyOutputs& out) const {
    for (int32_t r = in_.first_token_positions[s.info.request]; r < row; ++r) {
      if (out.raw_accept[r] == 0) return false;
    }
    return true;
  }

  // A race in two levels (verify_sampler.h): the tiles race with
  // tile_weights, then the ids of the winning tile with weight(v). -1 when
  // no tile has weight.
  template <typename WeightFn>
  int32_t TwoLevelRace(const RowSetup& s, RandomStream stream,
                       const std::vector<uint64_t>& tile_weights, WeightFn weight) const {
    Race tiles;
    for (size_t t = 0; t < tile_weights.size(); ++t) {
      if (tile_weights[t] == 0) continue;
      const int32_t tile = static_cast<int32_t>(t);
      tiles.Offer(verify_internal::TileRaceKey(s.seed, s.position, stream, tile, tile_weights[t]),
                  tile);
    }
    if (tiles.empty()) return -1;
    const int32_t begin = tiles.id * verify_internal::kMassTileIds;
    const int32_t end = std::min(in_.vocab_size, begin + verify_internal::kMassTileIds);
    Race race;
    PhiloxBlock bits{};
    for (int32_t v = begin; v < end; ++v) {
      if ((v & 3) == 0) bits = PhiloxDraw(s.seed, s.position, 0, stream, v >> 2);
      const float w = weight(v);
      if (w > 0.0f) race.Offer(RaceKey(w, RaceExponential(bits.v[v & 3])), v);
    }
    return race.id;  // a tile with weight holds an id with weight
  }

  // The race over q itself (bonus rows; a residual with no positive weight):
  // the tiles weigh their kept masses.
  int32_t TargetRace(const RowSetup& s, float row_max, float threshold, RandomStream stream) {
    return TwoLevelRace(s, stream, tile_masses_, [&](int32_t v) {
      return Kept(z_[v], threshold) ? ExpNonPositive(FSub(z_[v], row_max)) : 0.0f;
    });
  }

  // The race over max(q - alpha p, 0) (seed 000's residual with the
  // penalty). Returns an error key if p has a bad entry.
  uint64_t ResidualRace(const RowSetup& s, int32_t row, float row_max, float threshold,
                        float mass_f, int32_t* candidate) {
    const int32_t v_size = in_.vocab_size;
    const int64_t j = s.info.draft_index;
    p_.assign(v_size, 0.0f);
    if (in_.draft_probs) {
      const float* p_row = in_.draft_probs + j * in_.draft_vocab_size;
      for (int32_t v = 0; v < v_size; ++v) {
        if (!(p_row[v] >= 0.0f) || !IsFinite(p_row[v])) {
          return ErrorKey(row, VerifyErrorCode::kBadDraftProb, static_cast<uint32_t>(v));
        }
        p_[v] = p_row[v];
      }
    } else {
      for (int32_t i = 0; i < in_.draft_topk; ++i) {
        const int32_t id = in_.draft_topk_ids[j * in_.draft_topk + i];
        p_[id] = FAdd(p_[id], in_.draft_topk_probs[j * in_.draft_topk + i]);
      }
    }
    const float alpha_s = FMul(alpha_, mass_f);
    // Two levels, as for q: the tiles race with the fixed-point sums of
    // their residual weights, then the ids of the winning tile.
    const auto weight = [&](int32_t v) {
      const float e = Kept(z_[v], threshold) ? ExpNonPositive(FSub(z_[v], row_max)) : 0.0f;
      return ResidualWeight(e, alpha_s, p_[v]);
    };
    std::vector<uint64_t> tile_weights(verify_internal::NumMassTiles(v_size), 0);
    for (int32_t v = 0; v < v_size; ++v) {
      tile_weights[v / verify_internal::kMassTileIds] += ToFixed(weight(v));
    }
    const int32_t id = TwoLevelRace(s, RandomStream::kResidual, tile_weights, weight);
    // No residual weight: the row samples from q.
    *candidate = id >= 0 ? id : TargetRace(s, row_max, threshold, RandomStream::kResidual);
    return 0;
  }

  const VerifyInputs& in_;
  const float alpha_;
  std::vector<float> z_;
  std::vector<float> p_;
  // The kept mass of each tile of the current row (KeptMass).
  std::vector<uint64_t> tile_masses_;
};

absl::Status CheckOutputs(const VerifyInputs& in, const VerifyOutputs* out) {
  if (out == nullptr) return absl::InvalidArgumentError("verify sampler: outputs is null");
  const bool rows_ok = in.total_q == 0 ||
                       (out->row_to_req && out->local_step && out->is_verify && out->raw_accept &&
                        out->accept && out->is_final && out->verified_token_ids &&
                        out->candidate_token_ids && out->token_logprobs);
  const bool requests_ok = in.num_requests == 0 || (out->last_valid_offset &&
                                                    out->sampled_token_ids &&
                                                    out->emitted_stop_token);
  const bool steps_ok =
      in.config.nextn <= 0 || (out->num_generated_tokens && out->num_verified_tokens);
  if (!rows_ok || !requests_ok || !steps_ok || out->confidence_stride < 0) {
    return absl::InvalidArgumentError(
        "verify sampler: an output array is missing for a non-empty dimension");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VerifyErrorStatus(const VerifyErrorRecord& record) {
  if (record.key == 0) return absl::OkStatus();
  const VerifyErrorCode code = verify_internal::ErrorCode(record.key);
  const uint32_t detail = verify_internal::ErrorDetail(record.key);
  const int32_t signed_detail = static_cast<int32_t>(detail);
  std::string where = "verify sampler";
  if (record.request >= 0) absl::StrAppend(&where, ": request ", record.request);
  if (record.row >= 0) absl::StrAppend(&where, ", row ", record.row);
  std::string what;
  switch (code) {
    case VerifyErrorCode::kBadShape:
      what =
          "bad step shape (sizes out of range, a missing array, a bad penalty, or a simulated "
          "acceptance rate above 1 or NaN)";
      break;
    case VerifyErrorCode::kVocabMismatch:
      what = absl::StrCat("vocabulary mismatch: the draft distributions or bitmasks have size ",
                          detail, " where the target's vocabulary implies another");
      break;
    case VerifyErrorCode::kMissingDraftProbs:
      what = "the step has drafts but no draft token ids or draft distributions";
      break;
    case VerifyErrorCode::kEmptyRequest:
      what = "empty request (seqlen_q < 1)";
      break;
    case VerifyErrorCode::kBadLayout:
      what = "rows are not packed (first_token_positions / seqlen_q / total_q disagree)";
      break;
    case VerifyErrorCode::kBadSamplingParams:
      what = "bad sampling parameters (temperature must be finite and >= 0, top_p > 0, min_p in [0, 1])";
      break;
    case VerifyErrorCode::kStopTokenOutOfRange:
      what = "stop token ids out of range or bad stop_token_offsets";
      break;
    case VerifyErrorCode::kBadBitmask:
      what = absl::StrCat("bitmask ", detail, " names a request or step that does not exist");
      break;
    case VerifyErrorCode::kDuplicateBitmask:
      what = absl::StrCat(detail, " bitmasks apply to the row (at most one may)");
      break;
    case VerifyErrorCode::kNonFiniteLogit:
      what = absl::StrCat("logit of vocabulary id ", detail,
                          " is NaN or infinite (after temperature scaling)");
      break;
    case VerifyErrorCode::kNoAllowedToken:
      what = "the bitmask allows no token";
      break;
    case VerifyErrorCode::kDraftTokenOutOfRange:
      what = absl::StrCat("draft token id ", signed_detail, " is out of the vocabulary");
      break;
    case VerifyErrorCode::kGoldenTokenOutOfRange:
      what = absl::StrCat("golden token id ", signed_detail, " is out of the vocabulary");
      break;
    case VerifyErrorCode::kBadSparseDraft:
      what = absl::StrCat("sparse draft entry ", detail,
                          " has an id out of the vocabulary or a probability that is "
                          "negative or not finite");
      break;
    case VerifyErrorCode::kBadDraftProb:
      what = absl::StrCat("draft probability of vocabulary id ", detail,
                          " is negative or not finite");
      break;
    default:
      what = absl::StrCat("unknown error code ", static_cast<uint32_t>(code));
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

absl::Status VerifySampleCpu(const VerifyInputs& in, VerifyOutputs* out) {
  uint64_t key = verify_internal::CheckStep(in);
  if (key == 0) {
    if (absl::Status status = CheckOutputs(in, out); !status.ok()) return status;
    for (int32_t r = 0; r < in.num_requests; ++r) {
      key = MinKey(key, verify_internal::CheckRequest(in, r));
    }
  }
  if (key == 0) {
    for (int32_t m = 0; m < in.num_bitmasks; ++m) {
      key = MinKey(key, verify_internal::CheckBitmask(in, m));
    }
  }
  if (key == 0) {
    const float alpha = static_cast<float>(std::exp(-static_cast<double>(in.config.penalty)));
    RowSampler sampler(in, alpha);
    for (int32_t row = 0; row < in.total_q; ++row) key = MinKey(key, sampler.Run(row, *out));
  }
  if (key == 0) {
    const int32_t slots = in.config.nextn;
    std::fill(out->num_generated_tokens, out->num_generated_tokens + slots, 0);
    std::fill(out->num_verified_tokens, out->num_verified_tokens + slots, 0);
    int32_t* counters[2] = {out->num_generated_tokens, out->num_verified_tokens};
    for (int32_t r = 0; r < in.num_requests; ++r) {
      verify_internal::FinalizeRequest(
          in, *out, r, [&](int32_t row) { return out->raw_accept[row] != 0; },
          [&](int32_t row) { return out->candidate_token_ids[row]; },
          [&](int which, int32_t slot) { ++counters[which][slot]; });
    }
  }
  const VerifyErrorRecord record = verify_internal::MakeErrorRecord(in, key);
  if (out != nullptr && out->error != nullptr) *out->error = record;
  return VerifyErrorStatus(record);
}

}  // namespace verdict

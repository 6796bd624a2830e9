// Pieces of the verify sampler shared verbatim by the CPU twin
// (verify_sampler.cc) and the CUDA kernel (verify_sampler.cu): input checks,
// the row -> (request, local step) map, the per-row scalar setup and the
// per-request bookkeeping. Sharing the code is what keeps the two backends'
// semantics identical; the per-vocabulary-id arithmetic they share lives in
// kernels/sampling_math.h.
#ifndef VERDICT_KERNELS_VERIFY_SAMPLER_INTERNAL_H_
#define VERDICT_KERNELS_VERIFY_SAMPLER_INTERNAL_H_

#include <cstdint>

#include "kernels/philox.h"
#include "kernels/sampling_math.h"
#include "kernels/verify_sampler.h"

namespace verdict {
namespace verify_internal {

// ---------------------------------------------------------------- errors

// (row + 1) << 40 | code << 32 | detail; row -1 for step and request errors.
VERDICT_HD uint64_t ErrorKey(int64_t row, VerifyErrorCode code, uint32_t detail) {
  return (static_cast<uint64_t>(row + 1) << 40) |
         (static_cast<uint64_t>(static_cast<uint32_t>(code)) << 32) | detail;
}

VERDICT_HD uint64_t MinKey(uint64_t a, uint64_t b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return a < b ? a : b;
}

VERDICT_HD int64_t ErrorRow(uint64_t key) { return static_cast<int64_t>(key >> 40) - 1; }
VERDICT_HD VerifyErrorCode ErrorCode(uint64_t key) {
  return static_cast<VerifyErrorCode>((key >> 32) & 0xFFu);
}
VERDICT_HD uint32_t ErrorDetail(uint64_t key) { return static_cast<uint32_t>(key); }

// ---------------------------------------------------------------- loads

VERDICT_HD float LoadLogit(const VerifyInputs& in, int64_t index) {
  if (in.logits_dtype == LogitsDtype::kBFloat16) {
    return sampling_math::BFloat16ToFloat(static_cast<const uint16_t*>(in.logits)[index]);
  }
  return static_cast<const float*>(in.logits)[index];
}

// ---------------------------------------------------------------- parameters

VERDICT_HD float Temperature(const VerifyInputs& in, int r) {
  return in.temperatures ? in.temperatures[r] : 1.0f;
}
VERDICT_HD int32_t TopK(const VerifyInputs& in, int r) { return in.top_ks ? in.top_ks[r] : 0; }
VERDICT_HD float TopP(const VerifyInputs& in, int r) { return in.top_ps ? in.top_ps[r] : 1.0f; }
VERDICT_HD float MinP(const VerifyInputs& in, int r) { return in.min_ps ? in.min_ps[r] : 0.0f; }
VERDICT_HD uint64_t Seed(const VerifyInputs& in, int r) { return in.seeds ? in.seeds[r] : 0; }
VERDICT_HD int64_t Position(const VerifyInputs& in, int r) {
  return in.positions ? in.positions[r] : 0;
}

// Temperature finite and >= 0, top_p > 0, min_p in [0, 1].
VERDICT_HD bool SamplingParamsUsable(const VerifyInputs& in, int r) {
  const float t = Temperature(in, r);
  const float min_p = MinP(in, r);
  return t >= 0.0f && sampling_math::IsFinite(t) && TopP(in, r) > 0.0f && min_p >= 0.0f &&
         min_p <= 1.0f;
}

// Planned verify length L in [0, seqlen_q - 1].
VERDICT_HD int32_t VerifyLength(const VerifyInputs& in, int r) {
  const int32_t drafts = in.seqlen_q[r] - 1;
  if (!in.verify_lens || in.verify_lens[r] < 0) return drafts;
  return in.verify_lens[r] < drafts ? in.verify_lens[r] : drafts;
}

VERDICT_HD int32_t NumDrafts(const VerifyInputs& in) { return in.total_q - in.num_requests; }

// ---------------------------------------------------------------- checks

// Checks that read no array: the launcher runs them on the host before it
// launches, the CPU twin first.
VERDICT_HD uint64_t StepError(VerifyErrorCode code, uint32_t detail) {
  return ErrorKey(-1, code, detail);
}

VERDICT_HD uint64_t CheckStep(const VerifyInputs& in) {
  if (in.vocab_size < 1 || in.vocab_size > kMaxVocabSize || in.num_requests < 0 ||
      in.total_q < 0 || in.total_q >= (1 << 24) - 1 || in.config.nextn < 0 ||
      in.config.nextn > kMaxNextn ||
      in.num_bitmasks < 0 || !(in.config.penalty >= 0.0f) ||
      !sampling_math::IsFinite(in.config.penalty) ||
      !(in.config.simulated_acceptance < 0.0f || in.config.simulated_acceptance <= 1.0f)) {
    return StepError(VerifyErrorCode::kBadShape, 0);
  }
  if (in.num_requests > 0 && (!in.first_token_positions || !in.seqlen_q)) {
    return StepError(VerifyErrorCode::kBadShape, 0);
  }
  if (in.total_q > 0 && (!in.logits || in.num_requests == 0)) {
    return StepError(VerifyErrorCode::kBadShape, 0);
  }
  if (in.logits_dtype != LogitsDtype::kFloat32 && in.logits_dtype != LogitsDtype::kBFloat16) {
    return StepError(VerifyErrorCode::kBadShape, 0);
  }
  const bool dense = in.draft_probs != nullptr;
  const bool sparse = in.draft_topk_ids != nullptr || in.draft_topk_probs != nullptr;
  if (dense && sparse) return StepError(VerifyErrorCode::kBadShape, 0);
  if (sparse && (!in.draft_topk_ids || !in.draft_topk_probs || in.draft_topk < 1)) {
    return StepError(VerifyErrorCode::kBadShape, 0);
  }
  if (dense && in.draft_vocab_size != in.vocab_size) {
    return StepError(VerifyErrorCode::kVocabMismatch, static_cast<uint32_t>(in.draft_vocab_size));
  }
  if (in.num_bitmasks > 0) {
    if (!in.bitmask_request_indices || !in.bitmask_steps || !in.bitmask_bits) {
      return StepError(VerifyErrorCode::kBadShape, 0);
    }
    if (in.bitmask_words != (in.vocab_size + 31) / 32) {
      return StepError(VerifyErrorCode::kVocabMismatch, static_cast<uint32_t>(in.bitmask_words));
    }
  }
  if (NumDrafts(in) > 0 && (!in.draft_token_ids || (!dense && !sparse))) {
    return StepError(VerifyErrorCode::kMissingDraftProbs, 0);
  }
  return 0;
}

// Checks of request r (needs CheckStep to have passed).
VERDICT_HD uint64_t CheckRequest(const VerifyInputs& in, int r) {
  const uint32_t detail = static_cast<uint32_t>(r);
  const int64_t seqlen = in.seqlen_q[r];
  if (seqlen < 1) return ErrorKey(-1, VerifyErrorCode::kEmptyRequest, detail);
  const int64_t expected =
      r == 0 ? 0 : static_cast<int64_t>(in.first_token_positions[r - 1]) + in.seqlen_q[r - 1];
  const int64_t ftp = in.first_token_positions[r];
  if (ftp != expected || (r == in.num_requests - 1 && ftp + seqlen != in.total_q) ||
      ftp + seqlen > in.total_q) {
    return ErrorKey(-1, VerifyErrorCode::kBadLayout, detail);
  }
  if (!SamplingParamsUsable(in, r)) {
    return ErrorKey(-1, VerifyErrorCode::kBadSamplingParams, detail);
  }
  if (in.stop_token_offsets) {
    const int32_t begin = in.stop_token_offsets[r];
    const int32_t end = in.stop_token_offsets[r + 1];
    if ((r == 0 && begin != 0) || end < begin || (end > begin && !in.stop_token_ids)) {
      return ErrorKey(-1, VerifyErrorCode::kStopTokenOutOfRange, detail);
    }
    for (int32_t i = begin; i < end; ++i) {
      if (in.stop_token_ids[i] < 0 || in.stop_token_ids[i] >= in.vocab_size) {
        return ErrorKey(-1, VerifyErrorCode::kStopTokenOutOfRange, detail);
      }
    }
  }
  return 0;
}

// Checks of bitmask m (needs every request to have passed).
VERDICT_HD uint64_t CheckBitmask(const VerifyInputs& in, int m) {
  const int32_t r = in.bitmask_request_indices[m];
  const int32_t step = in.bitmask_steps[m];
  if (r < 0 || r >= in.num_requests || step < 0 || step >= in.seqlen_q[r]) {
    return ErrorKey(-1, VerifyErrorCode::kBadBitmask, static_cast<uint32_t>(m));
  }
  return 0;
}

// ---------------------------------------------------------------- rows

enum class RowKind : int32_t {
  kUncovered = 0,  // no request owns the row (only with a bad layout)
  kVerify = 1,     // k < L: verifies draft k
  kBonus = 2,      // k == L: fresh sample
  kSkipped = 3,    // k > L: past the planned verify length
};

// Plain data (the kernel keeps one in shared memory).
struct RowInfo {
  RowKind kind;
  int32_t request;
  int32_t local_step;
  int32_t draft_index;  // j = ftp - r + k (verify rows)
};

VERDICT_HD RowInfo UncoveredRow() { return RowInfo{RowKind::kUncovered, -1, -1, -1}; }

// The request owning `row` for a packed layout: the last r with
// first_token_positions[r] <= row (-1 if none), by binary search.
VERDICT_HD int32_t FindRequest(const VerifyInputs& in, int32_t row) {
  int32_t lo = 0, hi = in.num_requests;  // first request with ftp > row
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    if (in.first_token_positions[mid] <= row) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo - 1;
}

// Where `row` sits in request r (as found by FindRequest). Never reads out of
// bounds, whatever the layout; rows of requests with unusable sampling
// parameters are left uncovered (the request checks report those).
VERDICT_HD RowInfo LocateRowIn(const VerifyInputs& in, int32_t row, int32_t r) {
  RowInfo info = UncoveredRow();
  if (r < 0 || r >= in.num_requests) return info;
  const int64_t k = static_cast<int64_t>(row) - in.first_token_positions[r];
  const int32_t seqlen = in.seqlen_q[r];
  if (k < 0 || k >= seqlen) return info;
  if (!SamplingParamsUsable(in, r)) return info;
  info.request = r;
  info.local_step = static_cast<int32_t>(k);
  const int32_t verify_len = VerifyLength(in, r);
  if (k < verify_len) {
    const int64_t j = static_cast<int64_t>(in.first_token_positions[r]) - r + k;
    if (j < 0 || j >= NumDrafts(in)) return UncoveredRow();
    info.kind = RowKind::kVerify;
    info.draft_index = static_cast<int32_t>(j);
  } else {
    info.kind = k == verify_len ? RowKind::kBonus : RowKind::kSkipped;
  }
  return info;
}

VERDICT_HD RowInfo LocateRow(const VerifyInputs& in, int32_t row) {
  return LocateRowIn(in, row, FindRequest(in, row));
}

// Everything about a row that is a scalar: where it is, its request's
// parameters, its draft and golden ids, p(draft), and the errors these show.
struct RowSetup {
  RowInfo info = UncoveredRow();
  bool greedy = false;
  float inv_temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  int64_t position = 0;  // absolute position of this row
  int32_t draft = -1;    // verify rows
  int32_t golden = -1;
  float p_draft = 0.0f;  // verify rows that run the acceptance test
  uint64_t error_key = 0;
};

// How request r's rows turn logits into q (the part of RowSetup that the
// kernel's stream needs before the rest of the setup is known).
struct RowSampling {
  bool greedy;
  float inv_temperature;
  int32_t top_k;
};

VERDICT_HD RowSampling SamplingOf(const VerifyInputs& in, int r) {
  const float t = Temperature(in, r);
  return RowSampling{t == 0.0f, sampling_math::InverseTemperature(t), TopK(in, r)};
}

// The rest of a row's setup, once its RowInfo is known.
VERDICT_HD RowSetup SetupLocatedRow(const VerifyInputs& in, int32_t row, const RowInfo& info) {
  RowSetup s;
  s.info = info;
  if (s.info.kind == RowKind::kUncovered || s.info.kind == RowKind::kSkipped) return s;
  const int r = s.info.request;
  const RowSampling sampling = SamplingOf(in, r);
  s.greedy = sampling.greedy;
  s.inv_temperature = sampling.inv_temperature;
  s.top_k = sampling.top_k;
  s.top_p = TopP(in, r);
  s.min_p = MinP(in, r);
  s.seed = Seed(in, r);
  s.position = Position(in, r) + s.info.local_step;
  const int32_t v = in.vocab_size;
  if (s.info.kind == RowKind::kVerify) {
    s.draft = in.draft_token_ids[s.info.draft_index];
    if (s.draft < 0 || s.draft >= v) {
      s.error_key = ErrorKey(row, VerifyErrorCode::kDraftTokenOutOfRange,
                             static_cast<uint32_t>(s.draft));
      return s;
    }
  }
  if (in.golden_token_ids) {
    s.golden = in.golden_token_ids[row];
    if (s.golden < -1 || s.golden >= v) {
      s.error_key = ErrorKey(row, VerifyErrorCode::kGoldenTokenOutOfRange,
                             static_cast<uint32_t>(s.golden));
      return s;
    }
  }
  if (s.info.kind == RowKind::kVerify && !s.greedy && s.golden < 0) {
    const int64_t j = s.info.draft_index;
    if (in.draft_probs) {
      s.p_draft = in.draft_probs[j * in.draft_vocab_size + s.draft];
      if (!(s.p_draft >= 0.0f) || !sampling_math::IsFinite(s.p_draft)) {
        s.error_key =
            ErrorKey(row, VerifyErrorCode::kBadDraftProb, static_cast<uint32_t>(s.draft));
      }
    } else {
      // Repeated ids add up, in list order (the same order on both backends).
      float p = 0.0f;
      for (int32_t i = 0; i < in.draft_topk; ++i) {
        const int32_t id = in.draft_topk_ids[j * in.draft_topk + i];
        const float prob = in.draft_topk_probs[j * in.draft_topk + i];
        if (id < 0 || id >= v || !(prob >= 0.0f) || !sampling_math::IsFinite(prob)) {
          s.error_key =
              ErrorKey(row, VerifyErrorCode::kBadSparseDraft, static_cast<uint32_t>(i));
          return s;
        }
        if (id == s.draft) p = sampling_math::FAdd(p, prob);
      }
      s.p_draft = p;
    }
  }
  return s;
}

VERDICT_HD RowSetup SetupRow(const VerifyInputs& in, int32_t row) {
  return SetupLocatedRow(in, row, LocateRow(in, row));
}

VERDICT_HD bool BitmaskAllows(const VerifyInputs& in, int32_t mask, int32_t id) {
  const uint32_t word =
      in.bitmask_bits[static_cast<int64_t>(mask) * in.bitmask_words + (id >> 5)];
  return (word >> (id & 31)) & 1u;
}

// z of one id as the row's scan computes it (mask = -1: no bitmask).
VERDICT_HD float ProcessedLogit(const VerifyInputs& in, int32_t row, int32_t mask, int32_t id,
                                float inv_temperature) {
  if (mask >= 0 && !BitmaskAllows(in, mask, id)) return sampling_math::kNegInf;
  return sampling_math::ScaleLogit(
      LoadLogit(in, static_cast<int64_t>(row) * in.vocab_size + id), inv_temperature);
}

// An id is in q's support iff it is allowed (z > -inf) and z >= the row's
// top-k/top-p threshold.
VERDICT_HD bool Kept(float z, float threshold) {
  return z > sampling_math::kNegInf && z >= threshold;
}

// log q(id) for a kept id: (z - max) - log S, with S the kept mass.
VERDICT_HD float KeptLogprob(float z, float row_max, float mass) {
  return sampling_math::FSub(sampling_math::FSub(z, row_max), sampling_math::LogPositive(mass));
}

// ---------------------------------------------------------------- mass

// The kept mass S of a row is summed by tiles of kMassTileIds consecutive
// ids (tile t holds ids [t * kMassTileIds, (t + 1) * kMassTileIds)). A tile
// sums the 2^-40 fixed-point weights exp(z - m_t) of its kept ids relative to
// its own kept maximum m_t, and that sum is scaled to the row maximum M by
// TileMassAtRowMax. A tile's sum needs nothing outside the tile, so the
// kernel reads each logit once, without a first pass for M, and integer
// addition keeps the total independent of how tiles are spread over threads,
// CTAs and backends.
inline constexpr int32_t kMassTileIds = 1024;

VERDICT_HD int32_t NumMassTiles(int32_t vocab_size) {
  return (vocab_size + kMassTileIds - 1) / kMassTileIds;
}

// A tile's fixed-point sum relative to its maximum, rescaled to the row's:
// round(sum * exp(m_t - M)), the product taken in double (a tile's sum stays
// below 2^53, so it converts exactly) and rounded to an integer, IEEE
// operations that both backends round alike. The tile holding M contributes
// its sum as is.
VERDICT_HD uint64_t TileMassAtRowMax(uint64_t tile_sum, float tile_max, float row_max) {
  if (tile_sum == 0) return 0;
  const float scale = sampling_math::ExpNonPositive(sampling_math::FSub(tile_max, row_max));
  return sampling_math::DoubleToFixed(
      sampling_math::DMul(sampling_math::FixedToDouble(tile_sum), static_cast<double>(scale)));
}

// A race over q runs in two levels: the tiles race with their kept masses
// (the terms of the normaliser S), then the ids of the winning tile with
// their weights. Each level picks in proportion to its weights, so the id
// follows q, and the second level reads one tile, not the row. The tiles'
// draws use this row argument of the Philox counter (the ids' use 0).
inline constexpr uint32_t kTileRaceRow = 1;

// The first level's key of `tile` with kept mass `tile_mass` (> 0): tile t
// takes word t % 4 of block t / 4.
VERDICT_HD float TileRaceKey(uint64_t seed, int64_t position, RandomStream stream, int32_t tile,
                             uint64_t tile_mass) {
  const PhiloxBlock bits =
      PhiloxDraw(seed, position, kTileRaceRow, stream, static_cast<uint32_t>(tile) >> 2);
  const int word = tile & 3;
  const uint32_t w = word == 0 ? bits.v[0] : word == 1 ? bits.v[1] : word == 2 ? bits.v[2] : bits.v[3];
  return sampling_math::RaceKey(sampling_math::FixedToFloat(tile_mass),
                                sampling_math::RaceExponential(w));
}

// The uniform of the acceptance test of the row at `position`.
VERDICT_HD float AcceptUniform(uint64_t seed, int64_t position) {
  return UniformOpen01(PhiloxDraw(seed, position, 0, RandomStream::kAccept, 0).v[0]);
}

// Whether a verify row's accept decision is simulated (verify_sampler.h):
// golden ids still decide their rows.
VERDICT_HD bool SimulatesAcceptance(const VerifyInputs& in, int32_t golden) {
  return in.config.simulated_acceptance >= 0.0f && golden < 0;
}

// The simulated accept decision of the verify row at `position`: U < rate
// with U from its own stream, so no other draw of the row is reused.
VERDICT_HD bool SimulatedAccept(uint64_t seed, int64_t position, float rate) {
  return UniformOpen01(
             PhiloxDraw(seed, position, 0, RandomStream::kSimulatedAcceptance, 0).v[0]) < rate;
}

// The record of error `key`: the row it names and that row's request (for a
// row-level key the layout has passed its checks, so LocateRow is exact).
VERDICT_HD VerifyErrorRecord MakeErrorRecord(const VerifyInputs& in, uint64_t key) {
  VerifyErrorRecord record;
  record.key = key;
  if (key == 0) return record;
  const int64_t row = ErrorRow(key);
  const uint32_t detail = ErrorDetail(key);
  if (row >= 0) {
    record.row = static_cast<int32_t>(row);
    record.request = LocateRow(in, record.row).request;
    return record;
  }
  switch (ErrorCode(key)) {
    case VerifyErrorCode::kEmptyRequest:
    case VerifyErrorCode::kBadLayout:
    case VerifyErrorCode::kBadSamplingParams:
    case VerifyErrorCode::kStopTokenOutOfRange:
      record.request = static_cast<int32_t>(detail);
      break;
    case VerifyErrorCode::kBadBitmask: {
      const int32_t r = in.bitmask_request_indices[detail];
      if (r >= 0 && r < in.num_requests) record.request = r;
      break;
    }
    default:
      break;
  }
  return record;
}

// ---------------------------------------------------------------- requests

// Applies the accepted prefix to request r's rows, fills its per-request
// outputs and its stop flag, and counts its rows through count(which, slot)
// (which 0 = num_generated_tokens, 1 = num_verified_tokens). raw_accept(row)
// and candidate(row) read what the row pass wrote.
template <typename RawFn, typename CandidateFn, typename CountFn>
VERDICT_HD void FinalizeRequest(const VerifyInputs& in, const VerifyOutputs& out, int r,
                                RawFn raw_accept, CandidateFn candidate, CountFn count) {
  const int32_t ftp = in.first_token_positions[r];
  const int32_t seqlen = in.seqlen_q[r];
  const int32_t verify_len = VerifyLength(in, r);
  const int32_t slots = in.config.nextn;
  const int32_t first_draft = ftp - r;
  bool alive = true;
  int32_t accepted = 0;
  int32_t sampled = -1;
  for (int32_t k = 0; k < seqlen; ++k) {
    const int32_t row = ftp + k;
    if (k > verify_len) {
      out.accept[row] = 0;
      out.is_final[row] = 0;
      out.verified_token_ids[row] = -1;
      continue;
    }
    const bool verify = k < verify_len;
    const bool blocked = !verify || !raw_accept(row);
    const bool effective = alive && !blocked;
    const bool final_row = alive && blocked;
    out.accept[row] = effective ? 1 : 0;
    out.is_final[row] = final_row ? 1 : 0;
    out.verified_token_ids[row] = effective ? in.draft_token_ids[first_draft + k] : -1;
    if (effective) {
      ++accepted;
      if (slots > 0) count(0, k < slots - 1 ? k : slots - 1);
    }
    if (final_row) sampled = candidate(row);
    if (verify && slots > 0) count(1, k < slots - 1 ? k : slots - 1);
    alive = alive && !blocked;
  }
  out.last_valid_offset[r] = accepted;
  out.sampled_token_ids[r] = sampled;

  bool stop = false;
  if (in.stop_token_offsets) {
    const int32_t begin = in.stop_token_offsets[r];
    const int32_t end = in.stop_token_offsets[r + 1];
    for (int32_t t = 0; t <= accepted && !stop; ++t) {
      const int32_t token = t < accepted ? in.draft_token_ids[first_draft + t] : sampled;
      for (int32_t i = begin; i < end; ++i) {
        if (in.stop_token_ids[i] == token) stop = true;
      }
    }
  }
  out.emitted_stop_token[r] = stop ? 1 : 0;
  if (stop && out.next_draft_confidences) {
    for (int32_t c = 0; c < out.confidence_stride; ++c) {
      out.next_draft_confidences[static_cast<int64_t>(r) * out.confidence_stride + c] = 0.0f;
    }
  }
}

}  // namespace verify_internal
}  // namespace verdict

#endif  // VERDICT_KERNELS_VERIFY_SAMPLER_INTERNAL_H_

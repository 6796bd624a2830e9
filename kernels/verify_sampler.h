// Fused speculative verification and sampling for one decode step.
//
// Input: the step's flat layout (seed 000): target logits [total_q, V], and
// per request its rows (first_token_positions, seqlen_q), its drafts, its
// draft distributions p, its sampling parameters and its planned verify
// length. Output: per row the accept decisions and the verified draft ids, per
// request the accepted prefix (last_valid_offset), the token of its final row
// and whether it emitted a stop token, per step the counters. The CPU twin
// (VerifySampleCpu) is the reference; the CUDA launcher (InvokeVerifySample)
// makes the same decisions in one launch.
//
// Semantics, in the order the sampler applies them:
//  * Rows. Request r owns rows ftp[r] .. ftp[r] + seqlen_q[r] - 1 (row_to_req,
//    local_step k). Requests are packed: ftp[0] = 0, ftp[r+1] = ftp[r] +
//    seqlen_q[r], total_q = sum seqlen_q. Row k with k < L verifies draft k
//    (the token the draft model proposed after the row's input token), where
//    L = min(verify_lens[r], seqlen_q[r] - 1) is the planned verify length
//    (cap-accept: acceptance never passes it); row L is the bonus row; rows
//    after L are not looked at. Draft k of request r is draft index
//    j = ftp[r] - r + k (num_drafts = total_q - num_requests).
//  * The processed target distribution q of a row: z = logit * (1 / T); ids
//    whose bit is 0 in the row's structured-output bitmask get z = -inf; top-k
//    keeps the ids with z >= the k-th largest z (ties at the threshold are all
//    kept); min-p keeps the ids with z >= max z + log(min_p)
//    (sampling_math::MinPThreshold: p >= min_p * p_max, vLLM's rule, applied
//    after temperature); top-k and min-p both keep an upper set of values, so
//    the kept set after both is the smaller of the two; top-p then keeps the
//    ids of that set whose value v has mass(z > v) < top_p * mass(set) (ties
//    kept together, the largest value always kept); q = softmax over the
//    kept ids. Weights are
//    exp(z - max z) in 2^-40 fixed point (kernels/sampling_math.h). The
//    mass of a set of ids is summed by tiles of 1024 ids, each relative to
//    its own maximum and then rescaled to the row's
//    (verify_internal::TileMassAtRowMax); the masses of top-p's walk,
//    mass(z > v), add each id's weight relative to the row maximum.
//  * Verify row, T > 0: accept draft d iff u * p(d) < q(d), u from Philox
//    stream kAccept, i.e. with probability min(1, q/p) (seed 000, rule 1). On
//    reject the row samples from max(q - alpha p, 0), alpha = exp(-penalty):
//    the residual of seed 000 with DeepInfer's penalty, which keeps it
//    non-empty when q and p agree up to rounding. Should the residual still
//    have no weight (every tile's fixed-point sum 0: p not normalised), the
//    row samples from q.
//  * Bonus row, T > 0: a fresh sample from q (stream kBonus).
//  * Only a row that can be its request's final row draws a sample: one
//    whose earlier rows all accepted their drafts. A row after a rejected
//    one is never emitted, so where it would draw (a residual or bonus
//    sample) its candidate is -1 and its logprob 0, and its p is not read
//    (nor checked). Its raw accept is still decided and reported.
//  * T = 0 (greedy): q is one-hot at argmax z (lowest id on ties); accept iff
//    the draft is the argmax; the sampled token is the argmax.
//  * Golden override g >= 0 for a row: the row's token is g; a verify row
//    accepts iff d == g.
//  * Simulated acceptance (config.simulated_acceptance = a in [0, 1]; off
//    when negative): a verify row without a golden id accepts its draft iff
//    U < a, U from Philox stream kSimulatedAcceptance at the row's seed and
//    absolute position, whatever q and p say, so benchmarks on dummy weights
//    see a chosen acceptance rate with the real step's shapes and work. An
//    accepted row's token is its draft; a rejected row samples as above (the
//    residual, or the argmax for greedy rows). The accepted prefix, the
//    planned verify length, the bonus row, counters and stops are unchanged,
//    so a request accepts k < L drafts with chance a^k (1 - a), all L with
//    a^L. Not lossless: the output no longer follows the target.
//  * Categorical samples are exponential races: id i draws E_i ~ Exp(1) from
//    Philox (seed, position + k, row argument 0, stream, block i / 4) and the
//    largest w_i / E_i wins, ties to the lower id. A race runs in two levels:
//    first the mass tiles race, tile t with weight W_t and E_t from Philox
//    (seed, position + k, row argument 1, stream, block t / 4), then the ids
//    of the winning tile as above. For q, W_t is the tile's kept mass at the
//    row maximum (the terms of S); for the residual, the sum of its ids'
//    weights in 2^-40 fixed point. Each level picks in proportion to its
//    weights, so the sample follows the race's distribution. Every draw is
//    keyed by the request's seed and absolute token position, never by the
//    batch row, so a request draws the same numbers in any batch, on any
//    rank and backend.
//  * Accepted prefix: row k is blocked if it is not a verify row or its raw
//    accept is false; a row is alive if no earlier row of its request is
//    blocked; accept = alive && !blocked; is_final = alive && blocked. The
//    final row's token is the request's sampled token (residual sample or
//    bonus), last_valid_offset = its local step = accepted drafts.
//  * Counters: num_generated_tokens[s] counts effective accepts and
//    num_verified_tokens[s] verify rows at local step s, steps >= nextn - 1
//    in slot nextn - 1.
//  * Stop: a request whose emitted tokens (accepted drafts, then the sampled
//    token) contain one of its stop ids gets emitted_stop_token = 1 and its
//    row of next_draft_confidences set to 0 (seed 000: the next step then
//    verifies none of its drafts).
//  * Logprobs: token_logprobs[row] is log q(candidate) of the row's candidate
//    token (draft if raw-accepted, else the row's sample or golden id), -inf
//    if q gives it 0. For greedy rows q is replaced there by the masked
//    softmax at temperature 1, since the one-hot would always say 0.
//  * Errors: bad input is reported with the request and row it concerns; of
//    several, the smallest (row, code, detail) (request-level errors first).
#ifndef VERDICT_KERNELS_VERIFY_SAMPLER_H_
#define VERDICT_KERNELS_VERIFY_SAMPLER_H_

#include <cstdint>

#include "absl/status/status.h"

namespace verdict {

// DeepInfer's DRAFT_PROB_PENALTY (seed 000).
inline constexpr float kDefaultDraftProbPenalty = 5e-5f;

// The largest vocabulary the sampler takes (keeps block indices of the
// Philox counter below 2^24 and fixed-point sums below 2^63).
inline constexpr int32_t kMaxVocabSize = 1 << 23;

// The most counter slots a step may ask for.
inline constexpr int32_t kMaxNextn = 256;

struct SamplerConfig {
  // alpha = exp(-penalty) scales p in the residual.
  float penalty = kDefaultDraftProbPenalty;
  // Draft slots per request: num_generated_tokens and num_verified_tokens
  // have nextn entries (none when 0).
  int32_t nextn = 0;
  // Accept rate of every verified draft, in [0, 1], replacing the target's
  // decision (--simulate-acceptance, dummy weights only); negative: off.
  float simulated_acceptance = -1.0f;
};

enum class LogitsDtype : int32_t { kFloat32 = 0, kBFloat16 = 1 };

// Pointers and sizes of one step's inputs: host pointers for the CPU twin,
// device pointers for the launcher. Pointers marked optional may be null.
struct VerifyInputs {
  int32_t num_requests = 0;
  int32_t total_q = 0;
  int32_t vocab_size = 0;

  // [total_q, vocab_size], row-major, float or bfloat16 bits.
  const void* logits = nullptr;
  LogitsDtype logits_dtype = LogitsDtype::kFloat32;

  const int32_t* first_token_positions = nullptr;  // [num_requests]
  const int32_t* seqlen_q = nullptr;               // [num_requests]
  // Optional [num_requests]: absolute token position of row ftp[r] (0).
  const int64_t* positions = nullptr;
  // Optional [num_requests]: planned verify length; negative or null means
  // all drafts (seqlen_q - 1); larger values are capped there.
  const int32_t* verify_lens = nullptr;

  // [num_drafts]: the draft verified by each verify row (see header comment).
  const int32_t* draft_token_ids = nullptr;
  // Draft distributions, one of two forms, row j for draft j:
  // dense [num_drafts, draft_vocab_size] (draft_vocab_size must equal
  // vocab_size), or sparse top-k ids and probabilities [num_drafts,
  // draft_topk] (ids outside the list have p = 0, repeated ids add up).
  const float* draft_probs = nullptr;
  int32_t draft_vocab_size = 0;
  const int32_t* draft_topk_ids = nullptr;
  const float* draft_topk_probs = nullptr;
  int32_t draft_topk = 0;

  // Optional sampling parameters [num_requests]: temperature (1; 0 = greedy),
  // top_k (0 = off), top_p (1 = off), min_p (0 = off), seed (0).
  const float* temperatures = nullptr;
  const int32_t* top_ks = nullptr;
  const float* top_ps = nullptr;
  const float* min_ps = nullptr;
  const uint64_t* seeds = nullptr;

  // Optional structured-output bitmasks: mask m applies to row
  // ftp[bitmask_request_indices[m]] + bitmask_steps[m] (the seed's per-step
  // lists, flattened); bits [num_bitmasks, bitmask_words], bit v of word
  // v / 32 set = id v allowed. At most one mask per row.
  int32_t num_bitmasks = 0;
  const int32_t* bitmask_request_indices = nullptr;
  const int32_t* bitmask_steps = nullptr;
  const uint32_t* bitmask_bits = nullptr;
  int32_t bitmask_words = 0;

  // Optional [total_q]: golden override per row, -1 = none.
  const int32_t* golden_token_ids = nullptr;

  // Optional stop ids, CSR: request r's ids are
  // stop_token_ids[stop_token_offsets[r] .. stop_token_offsets[r + 1]).
  const int32_t* stop_token_offsets = nullptr;  // [num_requests + 1]
  const int32_t* stop_token_ids = nullptr;

  SamplerConfig config;
};

// Why a step was refused. The order is the order of the checks: of several
// errors the smallest (row, code, detail) is reported.
enum class VerifyErrorCode : uint32_t {
  kOk = 0,
  // Step and request level (row 0 in the error key).
  kBadShape,            // detail: 0 (counts or config out of range, missing arrays)
  kVocabMismatch,       // detail: the other side's vocabulary (or words)
  kMissingDraftProbs,   // detail: 0
  kEmptyRequest,        // detail: request
  kBadLayout,           // detail: request
  kBadSamplingParams,   // detail: request
  kStopTokenOutOfRange, // detail: request
  kBadBitmask,          // detail: mask index
  // Row level.
  kDuplicateBitmask,    // detail: number of masks for the row
  kNonFiniteLogit,      // detail: vocabulary id
  kNoAllowedToken,      // detail: 0
  kDraftTokenOutOfRange,   // detail: draft id (as uint32)
  kGoldenTokenOutOfRange,  // detail: golden id (as uint32)
  kBadSparseDraft,      // detail: list position
  kBadDraftProb,        // detail: vocabulary id
};

// The reported error: `key` packs (row + 1) << 40 | code << 32 | detail, 0
// when the step is fine; request and row are decoded from it (-1 if none).
struct VerifyErrorRecord {
  uint64_t key = 0;
  int32_t request = -1;
  int32_t row = -1;
};

struct VerifyOutputs {
  // Per row [total_q].
  int32_t* row_to_req = nullptr;
  int32_t* local_step = nullptr;
  uint8_t* is_verify = nullptr;      // k < planned verify length
  uint8_t* raw_accept = nullptr;     // the row's own decision (bonus rows: 1)
  uint8_t* accept = nullptr;         // effective accept (prefix applied)
  uint8_t* is_final = nullptr;
  int32_t* verified_token_ids = nullptr;   // draft id where accepted, else -1
  int32_t* candidate_token_ids = nullptr;  // the row's token, -1 if skipped
  float* token_logprobs = nullptr;         // log q(candidate), 0 if skipped
  // Per request [num_requests].
  int32_t* last_valid_offset = nullptr;
  int32_t* sampled_token_ids = nullptr;
  uint8_t* emitted_stop_token = nullptr;
  // Per step [config.nextn].
  int32_t* num_generated_tokens = nullptr;
  int32_t* num_verified_tokens = nullptr;
  // Optional [num_requests, confidence_stride]: the next drafts' confidences.
  float* next_draft_confidences = nullptr;
  int32_t confidence_stride = 0;
  // Optional on the CPU; required by the launcher, which writes it on every
  // launch (read it back with ReadVerifyError).
  VerifyErrorRecord* error = nullptr;
  // Launcher only: VerifyWorkspaceBytes(total_q) of device memory (or more),
  // zeroed once when allocated; every launch leaves it zeroed again. One per
  // stream.
  void* workspace = nullptr;
};

// The launcher's workspace for steps of up to `total_q` rows: counters, and
// one word per row through which a row learns whether its request's earlier
// rows accepted (rows run in parallel).
inline constexpr int64_t VerifyWorkspaceBytes(int64_t total_q) {
  return 64 + 4 * (total_q > 1 ? total_q : 1);
}

// Status of an error record: OK for key 0, otherwise InvalidArgument naming
// the request, the row and the offending value.
absl::Status VerifyErrorStatus(const VerifyErrorRecord& record);

// CPU twin: the reference semantics. Host pointers. Returns the first error
// (see VerifyErrorCode) and writes outputs->error if given.
absl::Status VerifySampleCpu(const VerifyInputs& inputs, VerifyOutputs* outputs);

// CUDA launcher: one kernel launch on `cuda_stream` (a cudaStream_t) for the
// whole step. Device pointers. Returns launch errors and the step-level input
// errors that need no device memory (shapes, missing arrays, vocabulary
// mismatch); every other input error lands in device_outputs->error: read it
// with ReadVerifyError after the launch. Same messages as the CPU twin.
absl::Status InvokeVerifySample(const VerifyInputs& device_inputs,
                                VerifyOutputs* device_outputs, void* cuda_stream);

// Copies the launch's error record to the host (synchronising the stream)
// and turns it into a Status.
absl::Status ReadVerifyError(const VerifyOutputs& device_outputs, void* cuda_stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_VERIFY_SAMPLER_H_

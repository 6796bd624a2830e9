// A C entry point to the fused verify sampler, for the peer benchmark
// (verify_sample_peers.py): Python loads it with ctypes and passes PyTorch
// tensors' device pointers, so that our kernel, PyTorch eager and FlashInfer
// run on the very same inputs in one process.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/verify_sampler.h"
#include "kernels/verify_sampler_internal.h"
#include "kernels/verify_sampler_launch.h"

namespace {

std::string& LastError() {
  static std::string message;
  return message;
}

int64_t Align(int64_t x) { return (x + 63) / 64 * 64; }

// Carves every output array out of one device buffer.
verdict::VerifyOutputs Carve(void* base, int32_t total_q, int32_t num_requests, int32_t nextn,
                             int64_t* bytes) {
  verdict::VerifyOutputs out;
  char* p = static_cast<char*>(base);
  int64_t at = 0;
  const auto take = [&](int64_t n) {
    char* q = p == nullptr ? nullptr : p + at;
    at += Align(n);
    return q;
  };
  const int64_t t = total_q, r = num_requests, s = nextn > 0 ? nextn : 0;
  out.workspace = take(verdict::VerifyWorkspaceBytes(total_q));
  out.error = reinterpret_cast<verdict::VerifyErrorRecord*>(take(sizeof(verdict::VerifyErrorRecord)));
  out.row_to_req = reinterpret_cast<int32_t*>(take(4 * t));
  out.local_step = reinterpret_cast<int32_t*>(take(4 * t));
  out.verified_token_ids = reinterpret_cast<int32_t*>(take(4 * t));
  out.candidate_token_ids = reinterpret_cast<int32_t*>(take(4 * t));
  out.token_logprobs = reinterpret_cast<float*>(take(4 * t));
  out.is_verify = reinterpret_cast<uint8_t*>(take(t));
  out.raw_accept = reinterpret_cast<uint8_t*>(take(t));
  out.accept = reinterpret_cast<uint8_t*>(take(t));
  out.is_final = reinterpret_cast<uint8_t*>(take(t));
  out.last_valid_offset = reinterpret_cast<int32_t*>(take(4 * r));
  out.sampled_token_ids = reinterpret_cast<int32_t*>(take(4 * r));
  out.emitted_stop_token = reinterpret_cast<uint8_t*>(take(r));
  out.num_generated_tokens = reinterpret_cast<int32_t*>(take(4 * s));
  out.num_verified_tokens = reinterpret_cast<int32_t*>(take(4 * s));
  *bytes = at;
  return out;
}

}  // namespace

extern "C" {

// Bytes of the device buffer (zeroed once by the caller) that holds the
// outputs and the workspace of a step.
int64_t verdict_verify_outputs_bytes(int32_t total_q, int32_t num_requests, int32_t nextn) {
  int64_t bytes = 0;
  Carve(nullptr, total_q, num_requests, nextn, &bytes);
  return bytes;
}

// Launches the sampler on `stream` (temperature, top-k, top-p and min-p per
// request, each array null for "off"; dense draft distributions). Returns 0,
// or 1 with verdict_verify_last_error.
int32_t verdict_verify_sample(int32_t num_requests, int32_t total_q, int32_t vocab,
                              const float* logits, const int32_t* first_token_positions,
                              const int32_t* seqlen_q, const int64_t* positions,
                              const int32_t* draft_token_ids, const float* draft_probs,
                              const float* temperatures, const int32_t* top_ks,
                              const float* top_ps, const float* min_ps, const uint64_t* seeds,
                              int32_t nextn, void* outputs, void* stream) {
  verdict::VerifyInputs in;
  in.num_requests = num_requests;
  in.total_q = total_q;
  in.vocab_size = vocab;
  in.logits = logits;
  in.first_token_positions = first_token_positions;
  in.seqlen_q = seqlen_q;
  in.positions = positions;
  in.draft_token_ids = total_q > num_requests ? draft_token_ids : nullptr;
  in.draft_probs = total_q > num_requests ? draft_probs : nullptr;
  in.draft_vocab_size = total_q > num_requests ? vocab : 0;
  in.temperatures = temperatures;
  in.top_ks = top_ks;
  in.top_ps = top_ps;
  in.min_ps = min_ps;
  in.seeds = seeds;
  in.config.nextn = nextn;
  int64_t bytes = 0;
  verdict::VerifyOutputs out = Carve(outputs, total_q, num_requests, nextn, &bytes);
  uint64_t step_key = 0;
  std::string message;
  if (verdict::verify_internal::LaunchVerifySample(in, &out, stream, &step_key, &message) !=
      verdict::verify_internal::LaunchStatus::kOk) {
    LastError() = message + (step_key != 0 ? " (error key " + std::to_string(step_key) + ")" : "");
    return 1;
  }
  return 0;
}

// Waits for the stream, checks the step's error record, copies
// last_valid_offset to `host_last_valid_offset` [num_requests] and counts the
// requests whose final row rejected its draft (those rows read their whole p).
int32_t verdict_verify_read_result(void* outputs, int32_t total_q, int32_t num_requests,
                                   int32_t nextn, void* stream, int32_t* host_last_valid_offset,
                                   int32_t* host_residual_rows) {
  int64_t bytes = 0;
  verdict::VerifyOutputs out = Carve(outputs, total_q, num_requests, nextn, &bytes);
  verdict::VerifyErrorRecord record;
  if (cudaStreamSynchronize(static_cast<cudaStream_t>(stream)) != cudaSuccess ||
      cudaMemcpy(&record, out.error, sizeof(record), cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(host_last_valid_offset, out.last_valid_offset, sizeof(int32_t) * num_requests,
                 cudaMemcpyDeviceToHost) != cudaSuccess) {
    LastError() = "verify sampler: copying the results back failed";
    return 1;
  }
  std::vector<uint8_t> is_verify(total_q), is_final(total_q);
  if (total_q > 0 &&
      (cudaMemcpy(is_verify.data(), out.is_verify, total_q, cudaMemcpyDeviceToHost) != cudaSuccess ||
       cudaMemcpy(is_final.data(), out.is_final, total_q, cudaMemcpyDeviceToHost) != cudaSuccess)) {
    LastError() = "verify sampler: copying the row decisions back failed";
    return 1;
  }
  *host_residual_rows = 0;
  for (int32_t row = 0; row < total_q; ++row) *host_residual_rows += is_verify[row] && is_final[row];
  if (record.key != 0) {
    LastError() = "verify sampler: input error code " +
                  std::to_string(static_cast<uint32_t>(verdict::verify_internal::ErrorCode(record.key))) +
                  " at request " + std::to_string(record.request) + ", row " +
                  std::to_string(record.row) + ", detail " +
                  std::to_string(verdict::verify_internal::ErrorDetail(record.key));
    return 1;
  }
  return 0;
}

const char* verdict_verify_last_error() { return LastError().c_str(); }

}  // extern "C"

#include "runtime/engine/device_sampling.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"
#include "runtime/model/device_memory.h"

namespace verdict {
namespace {

constexpr size_t kAlign = 16;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Small arrays packed into one page-locked host buffer and mirrored on the
// device with one copy each way.
class Staging {
 public:
  void Clear() {
    used_ = 0;
    pending_.clear();
  }

  // Reserves room for `count` elements; returns the offset. Data is copied
  // in by Put (or written by the device, for outputs).
  template <typename T>
  size_t Add(size_t count) {
    const size_t offset = used_;
    used_ = AlignUp(used_ + count * sizeof(T));
    return offset;
  }
  template <typename T>
  size_t Put(const T* data, size_t count) {
    const size_t offset = Add<T>(count);
    if (data != nullptr && count > 0) pending_.push_back({offset, data, count * sizeof(T)});
    return offset;
  }

  // Allocates for what was added, fills the host side, copies it up.
  absl::Status Upload(cudaStream_t stream) {
    if (absl::Status s = Reserve(); !s.ok()) return s;
    for (const Pending& p : pending_) std::memcpy(host_.as<char>() + p.offset, p.data, p.bytes);
    if (used_ > 0) {
      VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_.as<char>(), host_.as<char>(), used_,
                                                   cudaMemcpyHostToDevice, stream));
    }
    return absl::OkStatus();
  }
  absl::Status Reserve() {
    if (absl::Status s = device_.Reserve(used_); !s.ok()) return s;
    return host_.Reserve(used_);
  }
  absl::Status Download(cudaStream_t stream) {
    if (used_ == 0) return absl::OkStatus();
    VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_.as<char>(), device_.as<char>(), used_,
                                                 cudaMemcpyDeviceToHost, stream));
    return absl::OkStatus();
  }

  template <typename T>
  T* device(size_t offset) const {
    return reinterpret_cast<T*>(device_.as<char>() + offset);
  }
  template <typename T>
  const T* host(size_t offset) const {
    return reinterpret_cast<const T*>(host_.as<char>() + offset);
  }

 private:
  struct Pending {
    size_t offset;
    const void* data;
    size_t bytes;
  };
  DeviceBuffer device_;
  PinnedBuffer host_;
  size_t used_ = 0;
  std::vector<Pending> pending_;
};

template <typename T>
void CopyOut(const Staging& staging, size_t offset, std::vector<T>& dst) {
  if (!dst.empty()) std::memcpy(dst.data(), staging.host<T>(offset), dst.size() * sizeof(T));
}

}  // namespace

struct DeviceSampling::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  DeviceBuffer draft_logits, verify_logits, draft_probs, store, packed, workspace, draft_workspace;
  Staging draft_in, draft_out, verify_in, verify_out;
  // The step's draft passes (BeginDrafts): their queue, rows (also the
  // store's), and where each array sits in the staging buffers.
  cudaStream_t draft_stream = nullptr;
  int draft_rows = 0;
  bool draft_has_min_p = false;
  size_t o_temp = 0, o_topk = 0, o_topp = 0, o_minp = 0, o_seed = 0, o_pos = 0;
  size_t o_tokens = 0, o_signals = 0, o_errors = 0;

  ~Impl() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

absl::StatusOr<std::unique_ptr<DeviceSampling>> DeviceSampling::Create(int vocab_size, int gamma) {
  std::unique_ptr<DeviceSampling> s(new DeviceSampling(vocab_size, gamma));
  s->impl_ = std::make_unique<Impl>();
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&s->impl_->device));
  VERDICT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s->impl_->stream, cudaStreamNonBlocking));
  if (absl::Status st = s->impl_->draft_workspace.Reserve(kDraftSampleWorkspaceBytes); !st.ok()) {
    return st;
  }
  VERDICT_CUDA_RETURN_IF_ERROR(
      cudaMemset(s->impl_->draft_workspace.as<void>(), 0, kDraftSampleWorkspaceBytes));
  // The launcher's occupancy lookup, done here rather than in a pass that a
  // CUDA graph may capture.
  (void)DraftSampleCtasPerRow(1);
  return s;
}

DeviceSampling::DeviceSampling(int vocab_size, int gamma) : vocab_(vocab_size), gamma_(gamma) {}
DeviceSampling::~DeviceSampling() = default;

absl::StatusOr<float*> DeviceSampling::DraftLogits(int64_t rows) {
  VERDICT_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->device));
  if (absl::Status s = impl_->draft_logits.Reserve(static_cast<size_t>(rows) * vocab_ * 4);
      !s.ok()) {
    return s;
  }
  return impl_->draft_logits.as<float>();
}

absl::StatusOr<float*> DeviceSampling::VerifyLogits(int64_t rows) {
  VERDICT_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->device));
  if (absl::Status s = impl_->verify_logits.Reserve(static_cast<size_t>(rows) * vocab_ * 4);
      !s.ok()) {
    return s;
  }
  return impl_->verify_logits.as<float>();
}

absl::Status DeviceSampling::BeginDrafts(const DraftSampleInputs& params, void* stream) {
  Impl& m = *impl_;
  // The caller may be a worker thread (overlap scheduling).
  VERDICT_CUDA_RETURN_IF_ERROR(cudaSetDevice(m.device));
  const int n = params.num_rows;
  m.draft_stream = stream != nullptr ? static_cast<cudaStream_t>(stream) : m.stream;
  m.draft_rows = n;
  if (n == 0) return absl::OkStatus();
  const size_t row_bytes = static_cast<size_t>(vocab_) * sizeof(float);
  // The store holds [n, gamma, vocab]; a step's passes all fill it.
  if (absl::Status s = m.store.Reserve(static_cast<size_t>(n) * gamma_ * row_bytes); !s.ok()) {
    return s;
  }
  if (absl::Status s = m.draft_probs.Reserve(static_cast<size_t>(n) * row_bytes); !s.ok()) {
    return s;
  }
  // Every pass's positions go up with the parameters: no upload between passes.
  std::vector<int64_t> positions(static_cast<size_t>(gamma_) * n);
  for (int j = 0; j < gamma_; ++j) {
    for (int s = 0; s < n; ++s) positions[static_cast<size_t>(j) * n + s] = params.positions[s] + j;
  }
  m.draft_in.Clear();
  m.o_temp = m.draft_in.Put(params.temperatures, n);
  m.o_topk = m.draft_in.Put(params.top_ks, n);
  m.o_topp = m.draft_in.Put(params.top_ps, n);
  m.draft_has_min_p = params.min_ps != nullptr;
  m.o_minp = m.draft_in.Put(params.min_ps, params.min_ps ? n : 0);
  m.o_seed = m.draft_in.Put(params.seeds, n);
  m.o_pos = m.draft_in.Put(positions.data(), positions.size());
  if (absl::Status s = m.draft_in.Upload(m.draft_stream); !s.ok()) return s;
  m.draft_out.Clear();
  m.o_tokens = m.draft_out.Add<int32_t>(static_cast<size_t>(gamma_) * n);
  m.o_signals = m.draft_out.Add<float>(static_cast<size_t>(gamma_) * n);
  m.o_errors = m.draft_out.Add<DraftErrorRecord>(gamma_);
  return m.draft_out.Reserve();
}

absl::Status DeviceSampling::SampleDraft(int j) {
  Impl& m = *impl_;
  VERDICT_CUDA_RETURN_IF_ERROR(cudaSetDevice(m.device));
  const int n = m.draft_rows;
  if (n == 0) return absl::OkStatus();
  if (j < 0 || j >= gamma_) return absl::InvalidArgumentError(absl::StrCat("draft pass ", j));
  const size_t row_bytes = static_cast<size_t>(vocab_) * sizeof(float);
  const size_t first = static_cast<size_t>(j) * n;
  DraftSampleInputs in;
  in.num_rows = n;
  in.vocab_size = vocab_;
  in.logits = m.draft_logits.as<float>();
  in.temperatures = m.draft_in.device<float>(m.o_temp);
  in.top_ks = m.draft_in.device<int32_t>(m.o_topk);
  in.top_ps = m.draft_in.device<float>(m.o_topp);
  in.min_ps = m.draft_has_min_p ? m.draft_in.device<float>(m.o_minp) : nullptr;
  in.seeds = m.draft_in.device<uint64_t>(m.o_seed);
  in.positions = m.draft_in.device<int64_t>(m.o_pos) + first;
  DraftSampleOutputs out;
  out.token_ids = m.draft_out.device<int32_t>(m.o_tokens) + first;
  out.signals = m.draft_out.device<float>(m.o_signals) + first;
  out.probs = m.draft_probs.as<float>();
  out.error = m.draft_out.device<DraftErrorRecord>(m.o_errors) + j;
  if (absl::Status s = DraftSampleCuda(in, &out, m.draft_workspace.as<void>(), m.draft_stream);
      !s.ok()) {
    return s;
  }
  // Row s's p to slot (s, j) of the store: one strided copy for the pass.
  VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
      m.store.as<char>() + static_cast<size_t>(j) * row_bytes, gamma_ * row_bytes,
      m.draft_probs.as<char>(), row_bytes, row_bytes, n, cudaMemcpyDeviceToDevice,
      m.draft_stream));
  return absl::OkStatus();
}

const int32_t* DeviceSampling::DraftTokens(int j) const {
  const Impl& m = *impl_;
  return m.draft_out.device<int32_t>(m.o_tokens) + static_cast<size_t>(j) * m.draft_rows;
}

absl::Status DeviceSampling::FinishDrafts(int passes, int32_t* tokens, float* signals) {
  Impl& m = *impl_;
  VERDICT_CUDA_RETURN_IF_ERROR(cudaSetDevice(m.device));
  const int n = m.draft_rows;
  if (n == 0) return absl::OkStatus();
  if (passes < 0 || passes > gamma_) {
    return absl::InvalidArgumentError(absl::StrCat(passes, " draft passes"));
  }
  if (absl::Status s = m.draft_out.Download(m.draft_stream); !s.ok()) return s;
  VERDICT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.draft_stream));
  for (int j = 0; j < passes; ++j) {
    const DraftErrorRecord& error = m.draft_out.host<DraftErrorRecord>(m.o_errors)[j];
    if (absl::Status s = DraftErrorStatus(error); !s.ok()) return s;
  }
  const size_t count = static_cast<size_t>(passes) * n;
  std::memcpy(tokens, m.draft_out.host<int32_t>(m.o_tokens), count * sizeof(int32_t));
  std::memcpy(signals, m.draft_out.host<float>(m.o_signals), count * sizeof(float));
  return absl::OkStatus();
}

absl::Status DeviceSampling::Verify(const VerifyInputs& params,
                                    absl::Span<const int32_t> store_rows, HostVerifyOutputs* host) {
  Impl& m = *impl_;
  VERDICT_CUDA_RETURN_IF_ERROR(cudaSetDevice(m.device));
  const int b = params.num_requests;
  const int t = params.total_q;
  if (static_cast<int>(store_rows.size()) != b) {
    return absl::InvalidArgumentError("verify: one store row per request");
  }
  const size_t row_bytes = static_cast<size_t>(vocab_) * sizeof(float);
  const int num_drafts = t - b;

  // Pack each request's verified drafts' p in verify order. Requests that
  // verify every draft of consecutive store rows form one contiguous copy.
  if (absl::Status s = m.packed.Reserve(std::max<size_t>(1, num_drafts) * row_bytes); !s.ok()) {
    return s;
  }
  {
    int64_t dst = 0;
    for (int r = 0; r < b; ++r) {
      const int drafts = params.seqlen_q[r] - 1;
      if (drafts <= 0) continue;
      if (store_rows[r] < 0 || store_rows[r] >= m.draft_rows || drafts > gamma_) {
        return absl::InvalidArgumentError(absl::StrCat("verify: request ", r, " has ", drafts,
                                                       " drafts but store row ", store_rows[r]));
      }
      VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          m.packed.as<char>() + dst * row_bytes,
          m.store.as<char>() + static_cast<size_t>(store_rows[r]) * gamma_ * row_bytes,
          static_cast<size_t>(drafts) * row_bytes, cudaMemcpyDeviceToDevice, m.stream));
      dst += drafts;
    }
  }

  m.verify_in.Clear();
  const size_t o_ftp = m.verify_in.Put(params.first_token_positions, b);
  const size_t o_seqlen = m.verify_in.Put(params.seqlen_q, b);
  const size_t o_pos = m.verify_in.Put(params.positions, params.positions ? b : 0);
  const size_t o_lens = m.verify_in.Put(params.verify_lens, params.verify_lens ? b : 0);
  const size_t o_drafts = m.verify_in.Put(params.draft_token_ids, num_drafts);
  const size_t o_temp = m.verify_in.Put(params.temperatures, params.temperatures ? b : 0);
  const size_t o_topk = m.verify_in.Put(params.top_ks, params.top_ks ? b : 0);
  const size_t o_topp = m.verify_in.Put(params.top_ps, params.top_ps ? b : 0);
  const size_t o_minp = m.verify_in.Put(params.min_ps, params.min_ps ? b : 0);
  const size_t o_seed = m.verify_in.Put(params.seeds, params.seeds ? b : 0);
  const int num_stops = params.stop_token_offsets ? params.stop_token_offsets[b] : 0;
  const size_t o_stop_off =
      m.verify_in.Put(params.stop_token_offsets, params.stop_token_offsets ? b + 1 : 0);
  const size_t o_stop_ids = m.verify_in.Put(params.stop_token_ids, num_stops);
  if (absl::Status s = m.verify_in.Upload(m.stream); !s.ok()) return s;

  VerifyInputs in = params;
  in.logits = m.verify_logits.as<float>();
  in.logits_dtype = LogitsDtype::kFloat32;
  in.first_token_positions = m.verify_in.device<int32_t>(o_ftp);
  in.seqlen_q = m.verify_in.device<int32_t>(o_seqlen);
  in.positions = params.positions ? m.verify_in.device<int64_t>(o_pos) : nullptr;
  in.verify_lens = params.verify_lens ? m.verify_in.device<int32_t>(o_lens) : nullptr;
  in.draft_token_ids = m.verify_in.device<int32_t>(o_drafts);
  in.draft_probs = m.packed.as<float>();
  in.draft_vocab_size = vocab_;
  in.temperatures = params.temperatures ? m.verify_in.device<float>(o_temp) : nullptr;
  in.top_ks = params.top_ks ? m.verify_in.device<int32_t>(o_topk) : nullptr;
  in.top_ps = params.top_ps ? m.verify_in.device<float>(o_topp) : nullptr;
  in.min_ps = params.min_ps ? m.verify_in.device<float>(o_minp) : nullptr;
  in.seeds = params.seeds ? m.verify_in.device<uint64_t>(o_seed) : nullptr;
  in.stop_token_offsets =
      params.stop_token_offsets ? m.verify_in.device<int32_t>(o_stop_off) : nullptr;
  in.stop_token_ids = num_stops > 0 ? m.verify_in.device<int32_t>(o_stop_ids) : nullptr;

  // Outputs: one region, one copy back.
  Staging& o = m.verify_out;
  o.Clear();
  const size_t nextn = static_cast<size_t>(std::max(1, params.config.nextn));
  const size_t conf = static_cast<size_t>(host->confidence_stride) * b;
  const size_t r2r = o.Add<int32_t>(t), ls = o.Add<int32_t>(t), iv = o.Add<uint8_t>(t),
               ra = o.Add<uint8_t>(t), ac = o.Add<uint8_t>(t), fi = o.Add<uint8_t>(t),
               vt = o.Add<int32_t>(t), ct = o.Add<int32_t>(t), lp = o.Add<float>(t),
               lvo = o.Add<int32_t>(b), st = o.Add<int32_t>(b), es = o.Add<uint8_t>(b),
               ng = o.Add<int32_t>(nextn), nv = o.Add<int32_t>(nextn),
               // In and out: the kernel zeroes a stopped request's confidences.
      nc = o.Put(host->next_draft_confidences.data(), conf), er = o.Add<VerifyErrorRecord>(1);
  if (absl::Status s = o.Upload(m.stream); !s.ok()) return s;
  VerifyOutputs out;
  out.row_to_req = o.device<int32_t>(r2r);
  out.local_step = o.device<int32_t>(ls);
  out.is_verify = o.device<uint8_t>(iv);
  out.raw_accept = o.device<uint8_t>(ra);
  out.accept = o.device<uint8_t>(ac);
  out.is_final = o.device<uint8_t>(fi);
  out.verified_token_ids = o.device<int32_t>(vt);
  out.candidate_token_ids = o.device<int32_t>(ct);
  out.token_logprobs = o.device<float>(lp);
  out.last_valid_offset = o.device<int32_t>(lvo);
  out.sampled_token_ids = o.device<int32_t>(st);
  out.emitted_stop_token = o.device<uint8_t>(es);
  out.num_generated_tokens = o.device<int32_t>(ng);
  out.num_verified_tokens = o.device<int32_t>(nv);
  out.next_draft_confidences = conf > 0 ? o.device<float>(nc) : nullptr;
  out.confidence_stride = host->confidence_stride;
  out.error = o.device<VerifyErrorRecord>(er);
  // The launcher's workspace is zeroed when it grows; each launch leaves it
  // zeroed again.
  if (m.workspace.bytes() < static_cast<size_t>(VerifyWorkspaceBytes(t))) {
    if (absl::Status s = m.workspace.Reserve(VerifyWorkspaceBytes(t)); !s.ok()) return s;
    VERDICT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(m.workspace.as<void>(), 0, m.workspace.bytes(), m.stream));
  }
  out.workspace = m.workspace.as<void>();
  if (absl::Status s = InvokeVerifySample(in, &out, m.stream); !s.ok()) return s;
  if (absl::Status s = o.Download(m.stream); !s.ok()) return s;
  VERDICT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  host->error = *o.host<VerifyErrorRecord>(er);
  if (absl::Status s = VerifyErrorStatus(host->error); !s.ok()) return s;
  CopyOut(o, r2r, host->row_to_req);
  CopyOut(o, ls, host->local_step);
  CopyOut(o, iv, host->is_verify);
  CopyOut(o, ra, host->raw_accept);
  CopyOut(o, ac, host->accept);
  CopyOut(o, fi, host->is_final);
  CopyOut(o, vt, host->verified_token_ids);
  CopyOut(o, ct, host->candidate_token_ids);
  CopyOut(o, lp, host->token_logprobs);
  CopyOut(o, lvo, host->last_valid_offset);
  CopyOut(o, st, host->sampled_token_ids);
  CopyOut(o, es, host->emitted_stop_token);
  CopyOut(o, ng, host->num_generated_tokens);
  CopyOut(o, nv, host->num_verified_tokens);
  CopyOut(o, nc, host->next_draft_confidences);
  return absl::OkStatus();
}

}  // namespace verdict

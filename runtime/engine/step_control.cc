#include "runtime/engine/step_control.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace verdict {
namespace {

class Writer {
 public:
  template <typename T>
  void Pod(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void String(const std::string& s) {
    Pod<uint64_t>(s.size());
    out_ += s;
  }
  template <typename T>
  void Vector(const std::vector<T>& v) {
    Pod<uint64_t>(v.size());
    if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Pod(T* value) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(value, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool String(std::string* s) {
    uint64_t n;
    if (!Pod(&n) || in_.size() < n) return false;
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  template <typename T>
  bool Vector(std::vector<T>* v) {
    uint64_t n;
    if (!Pod(&n) || n > in_.size() / sizeof(T)) return false;
    v->resize(n);
    // An empty vector's data() may be null, which memcpy must not get.
    if (n > 0) std::memcpy(v->data(), in_.data(), n * sizeof(T));
    in_.remove_prefix(n * sizeof(T));
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

void WriteParams(Writer& w, const SamplingParams& p) {
  w.Pod(p.temperature);
  w.Pod(p.top_k);
  w.Pod(p.top_p);
  w.Pod(p.min_p);
  w.Pod<uint8_t>(p.seed.has_value());
  w.Pod<uint64_t>(p.seed.value_or(0));
  w.Pod(p.max_tokens);
  w.Pod<uint64_t>(p.stop.size());
  for (const std::string& s : p.stop) w.String(s);
  w.Vector(p.stop_token_ids);
  w.Pod<uint8_t>(p.ignore_eos);
  w.Pod(p.logprobs);
  w.Pod<uint8_t>(p.speculation);
  w.Pod(p.max_draft_tokens);
}

bool ReadParams(Reader& r, SamplingParams* p) {
  uint8_t has_seed, ignore_eos, speculation;
  uint64_t seed, num_stop;
  if (!r.Pod(&p->temperature) || !r.Pod(&p->top_k) || !r.Pod(&p->top_p) ||
      !r.Pod(&p->min_p) || !r.Pod(&has_seed) ||
      !r.Pod(&seed) || !r.Pod(&p->max_tokens) || !r.Pod(&num_stop)) {
    return false;
  }
  if (has_seed) p->seed = seed;
  p->stop.resize(num_stop);
  for (std::string& s : p->stop) {
    if (!r.String(&s)) return false;
  }
  if (!r.Vector(&p->stop_token_ids) || !r.Pod(&ignore_eos) || !r.Pod(&p->logprobs) ||
      !r.Pod(&speculation) || !r.Pod(&p->max_draft_tokens)) {
    return false;
  }
  p->ignore_eos = ignore_eos;
  p->speculation = speculation;
  return true;
}

}  // namespace

std::string SerializeStepControl(const StepControl& control) {
  Writer w;
  w.Pod<uint8_t>(control.shutdown);
  w.Pod<uint64_t>(control.arrived.size());
  for (const ArrivedRequest& a : control.arrived) {
    w.String(a.request.id);
    w.Vector(a.request.prompt_token_ids);
    WriteParams(w, a.request.params);
  }
  w.Pod<uint64_t>(control.cancelled.size());
  for (const std::string& id : control.cancelled) w.String(id);
  w.Pod<uint8_t>(control.budget_pin.has_value());
  if (control.budget_pin.has_value()) {
    w.Pod<uint8_t>(control.budget_pin->fraction.has_value());
    w.Pod<double>(control.budget_pin->fraction.value_or(0.0));
  }
  w.Pod<uint8_t>(control.draft_pin.has_value());
  if (control.draft_pin.has_value()) {
    w.Pod<uint8_t>(control.draft_pin->depth.has_value());
    w.Pod<int32_t>(control.draft_pin->depth.value_or(0));
  }
  return w.Take();
}

absl::StatusOr<StepControl> ParseStepControl(std::string_view bytes) {
  Reader r(bytes);
  StepControl control;
  uint8_t shutdown = 0;
  uint64_t num_arrived, num_cancelled;
  bool ok = r.Pod(&shutdown) && r.Pod(&num_arrived) && num_arrived <= bytes.size();
  control.shutdown = shutdown;
  if (ok) control.arrived.resize(num_arrived);
  for (uint64_t i = 0; ok && i < num_arrived; ++i) {
    GenerationRequest& req = control.arrived[i].request;
    ok = r.String(&req.id) && r.Vector(&req.prompt_token_ids) && ReadParams(r, &req.params);
  }
  ok = ok && r.Pod(&num_cancelled) && num_cancelled <= bytes.size();
  if (ok) control.cancelled.resize(num_cancelled);
  for (uint64_t i = 0; ok && i < num_cancelled; ++i) ok = r.String(&control.cancelled[i]);
  uint8_t has_pin = 0, pinned = 0;
  double fraction = 0.0;
  ok = ok && r.Pod(&has_pin) && has_pin <= 1;
  if (ok && has_pin) {
    ok = r.Pod(&pinned) && pinned <= 1 && r.Pod(&fraction);
    if (ok) {
      control.budget_pin = BudgetPinChange{};
      if (pinned) control.budget_pin->fraction = fraction;
    }
  }
  uint8_t has_draft_pin = 0, depth_pinned = 0;
  int32_t depth = 0;
  ok = ok && r.Pod(&has_draft_pin) && has_draft_pin <= 1;
  if (ok && has_draft_pin) {
    ok = r.Pod(&depth_pinned) && depth_pinned <= 1 && r.Pod(&depth);
    if (ok) {
      control.draft_pin = DraftPinChange{};
      if (depth_pinned) control.draft_pin->depth = depth;
    }
  }
  if (!ok || !r.done()) {
    return absl::DataLossError(
        absl::StrCat("step control message of ", bytes.size(), " bytes is malformed"));
  }
  return control;
}

absl::Status BroadcastStepControl(Communicator& comm, StepControl* control) {
  if (comm.world_size() == 1) return absl::OkStatus();
  std::string bytes;
  if (comm.rank() == 0) bytes = SerializeStepControl(*control);
  if (absl::Status s = BroadcastBytes(comm, &bytes); !s.ok()) return s;
  if (comm.rank() == 0) return absl::OkStatus();
  absl::StatusOr<StepControl> parsed = ParseStepControl(bytes);
  if (!parsed.ok()) return parsed.status();
  *control = std::move(*parsed);
  return absl::OkStatus();
}

}  // namespace verdict

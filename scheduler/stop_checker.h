// Stop conditions of one request, checked after every appended token
// (seed 000: "_check_stop runs after each appended token"; a stop at accepted
// draft 1 drops draft 2 and the sampled token).
//
// Conditions: EOS (unless ignored), a stop token id, the token limit, and
// stop strings. Stop strings are matched on the detokenized text; text that
// could still be the start of a stop string is held back, so the caller
// never streams characters that a later token turns into a stop.
#ifndef VERDICT_SCHEDULER_STOP_CHECKER_H_
#define VERDICT_SCHEDULER_STOP_CHECKER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace verdict {

struct StopConditions {
  std::vector<int32_t> eos_token_ids;  // from the model's generation config
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;
  int max_tokens = 16;
};

enum class StopReason { kNone, kEos, kStopToken, kStopString, kLength };

class StopChecker {
 public:
  explicit StopChecker(StopConditions conditions);

  // Appends one generated token with the text it adds (may be empty, e.g.
  // an incomplete UTF-8 sequence). Returns the reason generation stops at
  // this token, or kNone. Once stopped, further calls are ignored and
  // return the same reason. A stop token or EOS contributes no text.
  StopReason Append(int32_t token_id, const std::string& text_delta);

  // The text a generation's detokenizer still held when the generation
  // ended (IncrementalDetokenizer::Finish): part of the output unless a
  // stop string already ended it; a stop string inside it ends it there.
  void AppendFinalText(const std::string& text);

  StopReason reason() const { return reason_; }
  const StopConditions& conditions() const { return conditions_; }
  int num_tokens() const { return num_tokens_; }

  // Text that is safe to emit now: everything appended so far minus what
  // was already taken, minus a held-back tail that may start a stop
  // string. After a stop, the rest up to (not including) the stop string.
  std::string TakeEmittableText();

 private:
  // Adds generated text, ending the output at the first stop string that
  // the new text completes.
  void AppendText(const std::string& text);
  // Length of the longest suffix of text_ that is a proper prefix of some
  // stop string (text that might still become a stop).
  size_t HeldBackLength() const;

  StopConditions conditions_;
  size_t max_stop_length_ = 0;
  std::string text_;     // all text of this request's generated tokens
  size_t emitted_ = 0;   // bytes of text_ already returned
  int num_tokens_ = 0;
  StopReason reason_ = StopReason::kNone;
};

const char* StopReasonName(StopReason reason);

}  // namespace verdict

#endif  // VERDICT_SCHEDULER_STOP_CHECKER_H_

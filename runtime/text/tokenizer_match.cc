#include "runtime/text/tokenizer_match.h"

#include <cstdint>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace verdict {
namespace {

absl::Status Differ(const std::string& target_dir, const std::string& draft_dir,
                    const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat(
      "the draft's tokenizer (", draft_dir, ") is not the target's (", target_dir,
      "): ", what, "; speculation needs one vocabulary for both models"));
}

std::string Quoted(const std::string& s) { return absl::StrCat("\"", absl::Utf8SafeCEscape(s), "\""); }

}  // namespace

absl::Status CheckSameTokenizer(const Tokenizer& target, const std::string& target_dir,
                                const Tokenizer& draft, const std::string& draft_dir) {
  if (target.vocab_size() != draft.vocab_size()) {
    return Differ(target_dir, draft_dir,
                  absl::StrCat("vocabulary size ", target.vocab_size(), " (target) vs ",
                               draft.vocab_size(), " (draft)"));
  }
  if (target.bos_id() != draft.bos_id()) {
    return Differ(target_dir, draft_dir,
                  absl::StrCat("BOS id ", target.bos_id(), " (target) vs ", draft.bos_id(),
                               " (draft)"));
  }
  if (target.eos_id() != draft.eos_id()) {
    return Differ(target_dir, draft_dir,
                  absl::StrCat("EOS id ", target.eos_id(), " (target) vs ", draft.eos_id(),
                               " (draft)"));
  }
  for (int32_t id = 0; id < target.vocab_size(); ++id) {
    const std::string t = target.IdToPiece(id);
    const std::string d = draft.IdToPiece(id);
    if (t != d) {
      return Differ(target_dir, draft_dir,
                    absl::StrCat("id ", id, " is ", Quoted(t), " (target) vs ", Quoted(d),
                                 " (draft)"));
    }
    const int32_t one[] = {id};
    absl::StatusOr<std::string> tt = target.Decode(one, /*skip_special_tokens=*/true);
    absl::StatusOr<std::string> dt = draft.Decode(one, /*skip_special_tokens=*/true);
    if (!tt.ok()) return tt.status();
    if (!dt.ok()) return dt.status();
    if (*tt != *dt) {
      return Differ(target_dir, draft_dir,
                    absl::StrCat("id ", id, " (", Quoted(t), ") decodes to ", Quoted(*tt),
                                 " (target) vs ", Quoted(*dt),
                                 " (draft); special in one tokenizer only?"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDraftTokenizer(const std::string& target_dir, const std::string& draft_dir) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> target = LoadTokenizer(target_dir);
  if (!target.ok()) return target.status();
  return CheckDraftTokenizer(**target, target_dir, draft_dir);
}

absl::Status CheckDraftTokenizer(const Tokenizer& target, const std::string& target_dir,
                                 const std::string& draft_dir) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> draft = LoadTokenizer(draft_dir);
  if (!draft.ok()) return draft.status();
  return CheckSameTokenizer(target, target_dir, **draft, draft_dir);
}

}  // namespace verdict

// Splits a Jinja template into tokens, applying the whitespace rules that
// transformers configures (trim_blocks, lstrip_blocks, the default
// keep_trailing_newline=False) and the explicit `-` / `+` tag modifiers, so
// that text tokens already hold exactly the bytes the template outputs.
// Comments are dropped and `{% raw %}` bodies become text.
#ifndef VERDICT_RUNTIME_TEXT_JINJA_LEXER_H_
#define VERDICT_RUNTIME_TEXT_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace verdict::jinja {

enum class TokenKind {
  kText,
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,   // text holds the unescaped value
  kInteger,  // int_value
  kFloat,    // float_value
  kOperator,
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;
  int line;  // 1-based line of the template where the token starts
  int64_t int_value = 0;
  double float_value = 0;
};

// Errors (InvalidArgument, "line N: ..."): an unclosed tag, comment, string
// or raw block, or a character no token starts with.
absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source);

}  // namespace verdict::jinja

#endif  // VERDICT_RUNTIME_TEXT_JINJA_LEXER_H_

// Renders a parsed Jinja template the way transformers' apply_chat_template
// renders with jinja2 (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loop controls): its scoping (a for loop's body is a new
// scope per iteration, `if` is not a scope, namespace() objects carry
// values out of loops), Python's truthiness, arithmetic and str(), the
// filters, tests and methods chat templates use, and transformers' globals
// raise_exception, strftime_now and its tojson.
#ifndef VERDICT_RUNTIME_TEXT_JINJA_EVALUATOR_H_
#define VERDICT_RUNTIME_TEXT_JINJA_EVALUATOR_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/text/jinja/parser.h"
#include "runtime/text/jinja/value.h"

namespace verdict::jinja {

struct RenderOptions {
  // strftime_now(format): Python's datetime.now().strftime(format). Unset:
  // the local time of this machine; tests fix the time here.
  std::function<std::string(const std::string& format)> strftime_now;
};

// A compiled template; copies share the parsed tree.
class Template {
 public:
  // Errors (InvalidArgument, "line N: ..."): syntax errors and constructs
  // the interpreter does not implement, so a template fails when loaded
  // rather than when a request first reaches the construct.
  static absl::StatusOr<Template> Compile(absl::string_view source);

  // Renders with `context` as the template's variables. Errors
  // (InvalidArgument, "line N: ..."): raise_exception() and what jinja2
  // raises at run time (undefined attributes, type errors, ...).
  absl::StatusOr<std::string> Render(const Dict& context,
                                     const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

// The local time formatted as Python's datetime.now().strftime does.
std::string StrftimeNow(const std::string& format);

}  // namespace verdict::jinja

#endif  // VERDICT_RUNTIME_TEXT_JINJA_EVALUATOR_H_

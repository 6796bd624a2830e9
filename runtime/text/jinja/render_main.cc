// jinja_render: renders templates with this interpreter for the jinja2
// parity test. Each stdin line is a JSON object {"template": "...",
// "context": {...}, "now": [year, month, day, hour, minute, second]}; each
// stdout line is {"text": "..."} or {"error": "..."}. `now` fixes what
// strftime_now() formats, so both renderers see the same clock.
#include <ctime>
#include <iostream>
#include <string>

#include "nlohmann/json.hpp"
#include "runtime/text/jinja/evaluator.h"
#include "runtime/text/jinja/value.h"

namespace {

using verdict::jinja::Dict;
using verdict::jinja::RenderOptions;
using verdict::jinja::Template;
using verdict::jinja::Value;

nlohmann::ordered_json RenderLine(const std::string& line) {
  nlohmann::ordered_json request = nlohmann::ordered_json::parse(line, nullptr, false);
  if (request.is_discarded() || !request.is_object() || !request.contains("template")) {
    return {{"error", "bad request line"}};
  }
  absl::StatusOr<Template> compiled = Template::Compile(request["template"].get<std::string>());
  if (!compiled.ok()) return {{"error", std::string(compiled.status().message())}};
  Value context = Value::FromJson(request.value("context", nlohmann::ordered_json::object()));
  RenderOptions options;
  if (request.contains("now")) {
    std::tm fixed{};
    const auto& now = request["now"];
    fixed.tm_year = now[0].get<int>() - 1900;
    fixed.tm_mon = now[1].get<int>() - 1;
    fixed.tm_mday = now[2].get<int>();
    fixed.tm_hour = now[3].get<int>();
    fixed.tm_min = now[4].get<int>();
    fixed.tm_sec = now[5].get<int>();
    std::time_t t = timegm(&fixed);
    gmtime_r(&t, &fixed);  // fills in the weekday and day of the year
    options.strftime_now = [fixed](const std::string& format) {
      char buf[512];
      size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &fixed);
      return std::string(buf, n);
    };
  }
  absl::StatusOr<std::string> text = compiled->Render(context.dict(), options);
  if (!text.ok()) return {{"error", std::string(text.status().message())}};
  return {{"text", *text}};
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::cout << RenderLine(line).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
    std::cout.flush();
  }
  return 0;
}

#include "runtime/base/command_line.h"

namespace verdict {

std::vector<std::string> NormalizeFlagNames(int argc, char** argv) {
  std::vector<std::string> out;
  out.reserve(argc);
  bool flags_done = false;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i > 0 && !flags_done && arg == "--") {
      flags_done = true;
    } else if (i > 0 && !flags_done && arg.size() > 2 && arg[0] == '-') {
      const size_t start = arg[1] == '-' ? 2 : 1;
      const size_t end = arg.find('=');
      for (size_t k = start; k < arg.size() && k < end; ++k) {
        if (arg[k] == '-') arg[k] = '_';
      }
    }
    out.push_back(std::move(arg));
  }
  return out;
}

}  // namespace verdict

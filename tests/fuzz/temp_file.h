// For parsers that read files: one scratch path per fuzzing process.
#ifndef VERDICT_TESTS_FUZZ_TEMP_FILE_H_
#define VERDICT_TESTS_FUZZ_TEMP_FILE_H_

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace verdict::fuzz {

// A folder of this process's own under the test's (or the system's)
// temporary directory.
inline std::string ScratchDir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string d = std::string(base != nullptr ? base : "/tmp") + "/verdict_fuzz_" +
                    std::to_string(getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes `data` to ScratchDir()/name and returns the path.
inline std::string WriteScratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = ScratchDir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace verdict::fuzz

#endif  // VERDICT_TESTS_FUZZ_TEMP_FILE_H_

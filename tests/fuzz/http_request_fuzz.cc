// Raw bytes on one connection to a real HttpServer in this process: the
// request line, URI and query, headers (Authorization, Content-Length,
// Transfer-Encoding, Content-Type, Expect, Connection), the body framing
// (Content-Length or chunked, cut short, several requests pipelined) and
// the bodies of every endpoint. civetweb parses the framing; verdict's
// routing, bearer check, body reading and API parsing see what it makes of
// it, as they do in production.
//
// Each input is written to a fresh loopback connection whose sending side
// is then closed, so the server always sees the end of the input and must
// answer (or close) at once. It must not crash, must close the connection
// within kAnswerTimeout, and must never answer 500: nothing a client sends
// is an internal error.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "runtime/engine/generation.h"
#include "runtime/server/http_server.h"
#include "runtime/server/openai_api.h"
#include "runtime/server/serving_test_util.h"
#include "runtime/text/chat_template.h"

namespace {

constexpr int kAnswerTimeoutSeconds = 10;

// Finishes every request at once, on the caller's thread, with one token:
// the fuzzer looks at the HTTP layer, and an engine that answers later
// would only slow it down. (ScriptedGenerationService keeps a thread per
// request, which a long run cannot afford.)
class InstantService : public verdict::GenerationService {
 public:
  absl::Status Submit(verdict::GenerationRequest request,
                      verdict::GenerationCallback on_event) override {
    verdict::GenerationEvent event;
    event.request_id = request.id;
    event.token_ids = {verdict::ByteTokenizer::IdOf('a')};
    event.text = "a";
    if (request.params.logprobs > 0) event.logprobs = {-0.5f};
    event.finished = true;
    event.finish_reason = verdict::FinishReason::kLength;
    event.usage.prompt_tokens = static_cast<int>(request.prompt_token_ids.size());
    event.usage.completion_tokens = 1;
    on_event(event);
    return absl::OkStatus();
  }
  void Cancel(const std::string&) override {}
};

// The server, started once per process; its port.
int ServerPort() {
  static const int port = [] {
    auto* tokenizer = new verdict::ByteTokenizer();
    auto* api = new verdict::OpenAiApi(verdict::ServedModel{"tiny", 64, 8, 1700000000}, *tokenizer,
                                       verdict::ChatTemplate());
    auto* service = new InstantService();
    verdict::HttpServerOptions options;
    options.port = 0;
    options.api_key = "fuzz-key";
    options.max_body_bytes = 4096;  // small, so that 413 is within reach
    options.num_threads = 4;
    options.request_timeout_ms = 2000;
    options.body_timeout = absl::Seconds(5);
    options.log = [](absl::string_view) {};  // ignored-field warnings would flood the output
    auto* server = new verdict::HttpServer(options, *api, *service);
    absl::Status started = server->Start();
    if (!started.ok()) {
      std::fprintf(stderr, "http_request: %s\n", std::string(started.message()).c_str());
      std::abort();
    }
    return server->port();
  }();
  return port;
}

// A connection to the server. A signal (libFuzzer's timers among them) can
// interrupt a blocking connect, which then goes on asynchronously: that
// socket is dropped and a fresh one tried.
int Connect() {
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    timeval timeout = {kAnswerTimeoutSeconds, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(ServerPort()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    const int error = errno;
    close(fd);
    if (error != EINTR) {
      errno = error;
      std::perror("http_request: connect");
      std::abort();
    }
  }
}

// Sends `input`, closes the sending side and returns everything the server
// wrote until it closed. Aborts when the server keeps the connection open.
// Sends and receives interrupted by a signal are retried.
std::string Exchange(absl::string_view input) {
  const int fd = Connect();
  // The server may answer and close before reading everything (413, or a
  // malformed request line): a failed send is fine.
  while (!input.empty()) {
    const ssize_t n = send(fd, input.data(), input.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    input.remove_prefix(static_cast<size_t>(n));
  }
  shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      answer.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      std::fprintf(stderr, "http_request: the server kept the connection open for %d s\n",
                   kAnswerTimeoutSeconds);
      std::abort();
    }
    break;  // closed (or reset)
  }
  close(fd);
  return answer;
}

}  // namespace

// libFuzzer checks for leaks after any input whose mallocs and frees do
// not balance, and the server's threads are often still freeing when an
// input's exchange ends; each check scans the whole heap, which took the
// rate from 4,000 to under 500 inputs a second. So the per-input check is
// off by default (an explicit -detect_leaks=1 still wins, coming later);
// LeakSanitizer still checks the whole run at exit.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  static std::vector<char*> args;
  args.assign(*argv, *argv + *argc);
  static char no_leak_checks[] = "-detect_leaks=0";
  args.insert(args.begin() + 1, no_leak_checks);
  args.push_back(nullptr);
  *argc = static_cast<int>(args.size()) - 1;
  *argv = args.data();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string answer = Exchange(absl::string_view(reinterpret_cast<const char*>(data), size));
  // A status line starts the answer or follows a line end; JSON bodies
  // escape their line ends, so a path or body cannot fake one.
  if (absl::StartsWith(answer, "HTTP/1.1 500 ") || absl::StrContains(answer, "\nHTTP/1.1 500 ")) {
    std::fprintf(stderr, "http_request: the server answered 500:\n%s\n", answer.c_str());
    std::abort();
  }
  return 0;
}

#include "runtime/server/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "civetweb.h"
#include "runtime/server/request_headers.h"

namespace verdict {
namespace {

// Distinct request fields logged as ignored; past this, new names are not
// remembered (a client inventing names must not grow the set forever).
constexpr size_t kMaxLoggedFields = 1024;

// How long a shutdown waits, after civetweb has stopped, for the gate to
// relay the last answers to clients that read slowly.
constexpr absl::Duration kLastBytesGrace = absl::Seconds(1);

constexpr absl::string_view kCompletionsPath = "/v1/completions";
constexpr absl::string_view kChatPath = "/v1/chat/completions";
constexpr absl::string_view kModelsPath = "/v1/models";
// vLLM's paths, outside /v1.
constexpr absl::string_view kTokenizePath = "/tokenize";
constexpr absl::string_view kDetokenizePath = "/detokenize";

void SendResponse(mg_connection* conn, int status, absl::string_view content_type,
                  absl::string_view body, absl::string_view extra_headers = "") {
  std::string head = absl::StrFormat(
      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nCache-Control: no-store\r\n"
      "%s\r\n",
      status, mg_get_response_code_text(conn, status), content_type, body.size(), extra_headers);
  head.append(body.data(), body.size());
  mg_write(conn, head.data(), head.size());
}

int SendJson(mg_connection* conn, int status, absl::string_view body,
             absl::string_view extra_headers = "") {
  SendResponse(conn, status, "application/json", body, extra_headers);
  return status;
}

// One HTTP/1.1 chunk in a single write; false when the client is gone.
bool WriteChunk(mg_connection* conn, absl::string_view data) {
  std::string frame = absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n");
  return mg_write(conn, frame.data(), frame.size()) == static_cast<int>(frame.size());
}

enum class BodyResult { kOk, kTooLarge, kReadError };

// An announced length past `limit` never gets here: Route refuses it first.
BodyResult ReadBody(mg_connection* conn, size_t limit, std::string* body) {
  const mg_request_info* info = mg_get_request_info(conn);
  // Reserved up to 1 MiB: the announced length is the client's word, and
  // the bytes may never come.
  constexpr long long kMostReserved = 1 << 20;
  if (info->content_length >= 0) {
    body->reserve(static_cast<size_t>(std::min(info->content_length, kMostReserved)));
  }
  char buf[16384];
  for (;;) {
    int n = mg_read(conn, buf, sizeof(buf));
    if (n == 0) {
      // A body shorter than its Content-Length was cut short (the client
      // closed its end, or its read deadline shut ours).
      const bool short_body = info->content_length >= 0 &&
                              body->size() < static_cast<size_t>(info->content_length);
      return short_body ? BodyResult::kReadError : BodyResult::kOk;
    }
    if (n < 0) return BodyResult::kReadError;
    // Chunked bodies have no length up front; stop reading past the limit.
    if (body->size() + static_cast<size_t>(n) > limit) return BodyResult::kTooLarge;
    body->append(buf, static_cast<size_t>(n));
  }
}

// The name of a unix-domain socket's end (local or peer), as the kernel
// gives it.
std::optional<std::string> UnixName(int fd, bool peer) {
  sockaddr_un name = {};
  socklen_t length = sizeof(name);
  sockaddr* end = reinterpret_cast<sockaddr*>(&name);
  if ((peer ? getpeername(fd, end, &length) : getsockname(fd, end, &length)) != 0 ||
      name.sun_family != AF_UNIX) {
    return std::nullopt;
  }
  return std::string(reinterpret_cast<const char*>(&name), static_cast<size_t>(length));
}

// The first open descriptor of this process that `matches`, or -1.
int FindOwnDescriptor(absl::FunctionRef<bool(int fd)> matches) {
  DIR* fds = opendir("/proc/self/fd");
  if (fds == nullptr) return -1;
  int found = -1;
  while (dirent* entry = readdir(fds)) {
    int fd = -1;
    if (!absl::SimpleAtoi(entry->d_name, &fd) || fd == dirfd(fds)) continue;
    if (matches(fd)) {
      found = fd;
      break;
    }
  }
  closedir(fds);
  return found;
}

// The socket of this process whose peer is named `peer`, or -1. civetweb
// does not tell a handler which socket it serves; the gate's end of each
// connection has a name of its own, so the one socket connected to it is
// civetweb's end.
int SocketWithPeer(const std::string& peer) {
  return FindOwnDescriptor([&peer](int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && UnixName(fd, /*peer=*/true) == peer;
  });
}

// civetweb's listening socket: the one listening on `port` of 127.0.0.1.
int ListenerOnPort(int port) {
  return FindOwnDescriptor([port](int fd) {
    int listening = 0;
    socklen_t size = sizeof(listening);
    sockaddr_in local = {};
    socklen_t length = sizeof(local);
    return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) == 0 && listening &&
           getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
           local.sin_family == AF_INET && ntohs(local.sin_port) == port &&
           local.sin_addr.s_addr == htonl(INADDR_LOOPBACK);
  });
}

// Whether the client closed its end (or the connection broke); false for
// no socket (-1: poll ignores a negative descriptor).
bool PeerHungUp(int fd) {
  pollfd p = {fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// Stops civetweb without waiting out its listener's poll period (2 s in
// 1.15): the listener sees the stop flag only when a poll returns, so
// connections to its socket are made until mg_stop is done.
void StopCivetweb(mg_context* ctx, const sockaddr_un& listener, socklen_t length) {
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    while (length > 0 && !stopped.load()) {
      int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0) {
        connect(fd, reinterpret_cast<const sockaddr*>(&listener), length);
        close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  mg_stop(ctx);
  stopped = true;
  waker.join();
}

constexpr char kListenerDirPrefix[] = "verdict-http-";
constexpr char kListenerSocketName[] = "civetweb.sock";
// Each server holds an flock on this file of its listener directory for as
// long as the directory is its own; the kernel releases it when the process
// dies, however it dies, so a lock nobody holds means a dead server.
constexpr char kListenerLockName[] = "lock";

// Creates and locks the lock file of the new listener directory `dir`; its
// descriptor, or -1. The file is locked under another name and only then
// renamed into place, so a sweeper never finds an unlocked lock file in a
// live server's directory.
int LockListenerDirectory(const std::string& dir) {
  const std::string staging = absl::StrCat(dir, "/", kListenerLockName, ".new");
  const int fd = open(staging.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  if (flock(fd, LOCK_EX | LOCK_NB) == 0 &&
      rename(staging.c_str(), absl::StrCat(dir, "/", kListenerLockName).c_str()) == 0) {
    return fd;
  }
  unlink(staging.c_str());
  close(fd);
  return -1;
}

// Whether the server that held the lock file `lock` is gone: the lock can
// be taken, and the file is still linked (a sweeper that took the lock
// first has not removed the directory already).
bool LockOwnerIsGone(int lock) {
  struct stat info = {};
  return flock(lock, LOCK_EX | LOCK_NB) == 0 && fstat(lock, &info) == 0 && info.st_nlink > 0;
}

// Whether nothing listens at the socket in the listener directory `dir`
// (a descriptor) any more: a connection is refused. A socket is bound a
// moment before it listens, so only sockets bound at least a minute ago
// count. The rule for directories without a lock file.
bool HasStaleSocket(int dir) {
  struct stat info = {};
  if (fstatat(dir, kListenerSocketName, &info, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISSOCK(info.st_mode)) {
    return false;
  }
  if (time(nullptr) - info.st_mtime < 60) return false;
  // The socket's path through the opened directory, not through its name,
  // which may have been swapped since; it fits in sun_path.
  const std::string path = absl::StrCat("/proc/self/fd/", dir, "/", kListenerSocketName);
  sockaddr_un name = {};
  name.sun_family = AF_UNIX;
  std::memcpy(name.sun_path, path.c_str(), path.size() + 1);
  // Non-blocking: a live server whose backlog is full answers EAGAIN at
  // once instead of holding this start-up.
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool refused = connect(fd, reinterpret_cast<const sockaddr*>(&name), sizeof(name)) != 0 &&
                       errno == ECONNREFUSED;
  close(fd);
  return refused;
}

// Removes what servers of this user that died without their teardown (a
// SIGKILL, a crash) left in `base`: listener directories whose lock file
// nobody holds. One whose lock is held is a live server's and is kept,
// however old its socket (its server may be stalled before it listens).
// A directory without a lock file is a server's from before the lock (or
// one's about to take it, with no socket yet): it goes when its socket
// refuses a connection and was bound over a minute ago. Everything below
// goes through descriptors, so a name swapped for a symlink meanwhile
// cannot redirect a removal, and no symlink is followed.
void RemoveStaleListenerDirectories(const std::string& base) {
  DIR* entries = opendir(base.c_str());
  if (entries == nullptr) return;
  const int base_fd = dirfd(entries);
  while (const dirent* entry = readdir(entries)) {
    if (!absl::StartsWith(entry->d_name, kListenerDirPrefix)) continue;
    // Fails on a symlink (O_NOFOLLOW) and on anything but a directory.
    const int dir = openat(base_fd, entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0) continue;
    struct stat info = {};
    if (fstat(dir, &info) == 0 && info.st_uid == geteuid()) {
      // O_NONBLOCK: a FIFO by that name cannot hold the sweep up.
      const int lock =
          openat(dir, kListenerLockName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      const bool dead = lock >= 0 ? LockOwnerIsGone(lock) : errno == ENOENT && HasStaleSocket(dir);
      if (dead) {
        unlinkat(dir, kListenerSocketName, 0);
        unlinkat(dir, kListenerLockName, 0);
        unlinkat(base_fd, entry->d_name, AT_REMOVEDIR);  // only if empty
      }
      // Released only now: a sweeper racing this one finds the lock held,
      // or the lock file gone, and keeps its hands off.
      if (lock >= 0) close(lock);
    }
    close(dir);
  }
  closedir(entries);
}

// A new directory, mode 0700, for civetweb's listener, with its lock taken
// (the descriptor in `lock_fd`): under $TMPDIR when the socket's path fits
// there, else under /tmp; empty if none can be made.
std::string PrivateDirectory(int* lock_fd) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::vector<std::string> bases;
  // Room for "/verdict-http-XXXXXX/civetweb.sock" within sun_path (108).
  if (tmpdir != nullptr && tmpdir[0] == '/' && std::strlen(tmpdir) < 60) bases.push_back(tmpdir);
  bases.push_back("/tmp");
  for (const std::string& base : bases) {
    RemoveStaleListenerDirectories(base);
    std::string name = absl::StrCat(base, "/", kListenerDirPrefix, "XXXXXX");
    if (mkdtemp(name.data()) == nullptr) continue;  // mkdtemp makes it 0700
    *lock_fd = LockListenerDirectory(name);
    if (*lock_fd >= 0) return name;
    rmdir(name.c_str());
  }
  return "";
}

// Runs `work` on a thread of its own with the process's default stack
// (8 MiB) and returns its result. civetweb's worker threads have 100 KiB
// stacks in Debian's build, too few for the parsers, the chat template's
// evaluator, the tokenizer and the reply's JSON under every build
// (AddressSanitizer's frames overflowed them on ordinary requests). A
// thread costs tens of microseconds, next to milliseconds of generation.
// Where no thread can be made (the process is at its limit), the work runs
// here: the depth limit on bodies keeps it within these stacks in a plain
// build.
template <typename Work>
auto OnAFullStack(Work work) -> decltype(work()) {
  std::optional<decltype(work())> result;
  try {
    std::thread([&] { result.emplace(work()); }).join();
  } catch (const std::system_error&) {
    if (!result.has_value()) result.emplace(work());
  }
  return *std::move(result);
}

absl::Status DrainingError() {
  return absl::UnavailableError("the server is shutting down and admits no new requests");
}

uint64_t RandomSalt() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

// One generation request in flight: the engine's events, queued by the
// engine's callback and taken by the handler thread.
struct HttpServer::Generation {
  absl::Mutex mu;
  std::deque<GenerationEvent> events ABSL_GUARDED_BY(mu);
  bool submitted ABSL_GUARDED_BY(mu) = false;
  bool cancel_requested ABSL_GUARDED_BY(mu) = false;  // by Shutdown
  bool abandoned ABSL_GUARDED_BY(mu) = false;  // Shutdown stops waiting for the engine
  // What the client is told once abandoned.
  absl::Status abandon_reason ABSL_GUARDED_BY(mu) =
      absl::UnavailableError("the server shut down before the request finished");

  // Waits up to `timeout` for events; returns them (empty on timeout).
  // `abandoned_out` (with the reason in `reason_out`) once the handler must
  // stop waiting for the engine.
  std::deque<GenerationEvent> Take(absl::Duration timeout, bool* abandoned_out,
                                   absl::Status* reason_out) {
    absl::MutexLock lock(&mu);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return !events.empty() || abandoned; };
    mu.AwaitWithTimeout(absl::Condition(&ready), timeout);
    *abandoned_out = abandoned && events.empty();
    if (*abandoned_out) *reason_out = abandon_reason;
    std::deque<GenerationEvent> out;
    out.swap(events);
    return out;
  }
};

HttpServer::HttpServer(HttpServerOptions options, const OpenAiApi& api,
                       GenerationService& service, std::function<bool()> ready)
    : options_(std::move(options)),
      api_(api),
      service_(service),
      ready_(std::move(ready)),
      id_salt_(RandomSalt()) {}

HttpServer::~HttpServer() { Shutdown(absl::ZeroDuration()); }

absl::Status HttpServer::Start() {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  if (ctx_ != nullptr) return absl::FailedPreconditionError("the HTTP server is already running");
  static std::once_flag init_once;
  std::call_once(init_once, [] { mg_init_library(0); });

  // Connections beyond the busy workers wait in the kernel's accept queue;
  // an overflowing queue drops handshakes that end in resets a minute
  // later. The kernel caps it at net.core.somaxconn.
  const int backlog = std::max({options_.num_threads, options_.max_connections, 1024});
  ConnectionGateOptions gate_options;
  gate_options.host = options_.host;
  gate_options.port = options_.port;
  gate_options.backlog = backlog;
  gate_options.head_timeout = options_.head_timeout;
  gate_options.max_connections = options_.max_connections;
  gate_options.max_connections_per_client = options_.max_connections_per_client;
  gate_options.retry_after_seconds = options_.retry_after_seconds;
  auto gate = std::make_unique<ConnectionGate>(
      gate_options, [this](absl::string_view path) { return Probe(path); });
  if (absl::Status listening = gate->Listen(); !listening.ok()) return listening;

  // civetweb binds a loopback port of its own, which TakeOverListener
  // trades for a unix-domain socket before civetweb's listener thread
  // starts: so no connection reaches civetweb but through the gate, and
  // the process listens on no TCP port but the gate's.
  const std::string threads = absl::StrCat(options_.num_threads);
  const std::string timeout = absl::StrCat(options_.request_timeout_ms);
  const std::string backlog_text = absl::StrCat(backlog);
  const char* config[] = {"listening_ports",    "127.0.0.1:0",   "num_threads",       threads.c_str(),
                          "request_timeout_ms", timeout.c_str(), "enable_keep_alive", "yes",
                          "decode_url",         "yes",           "listen_backlog",    backlog_text.c_str(),
                          nullptr};
  mg_callbacks callbacks = {};
  callbacks.init_context = [](const mg_context* ctx) {
    static_cast<HttpServer*>(mg_get_user_data(ctx))->TakeOverListener(ctx);
  };
  // begin_request sees every request, from the first one on, before any
  // of civetweb's own handling.
  callbacks.begin_request = [](mg_connection* conn) {
    return static_cast<HttpServer*>(mg_get_request_info(conn)->user_data)->Route(conn);
  };
  // Errors civetweb answers itself (a malformed request line, headers too
  // large, a body that is cut short) get the API's JSON error body too.
  callbacks.http_error = [](mg_connection* conn, int status, const char* message) {
    const std::string body = ErrorBody(status, message != nullptr && message[0] != '\0'
                                                   ? message
                                                   : mg_get_response_code_text(conn, status));
    mg_printf(conn,
              "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
              "Connection: close\r\n\r\n%s",
              status, mg_get_response_code_text(conn, status), body.size(), body.c_str());
    return 0;  // answered
  };
  gate_ = std::move(gate);
  upstream_length_ = 0;
  takeover_error_.clear();
  mg_init_data init = {&callbacks, this, config};
  char error_text[256] = "";
  unsigned error_code = 0;
  mg_error_data error = {&error_code, error_text, sizeof(error_text)};
  ctx_ = mg_start2(&init, &error);
  if (ctx_ == nullptr) {
    RemoveListenerPath();  // init_context may have made it
    gate_.reset();
    return absl::UnavailableError(absl::StrCat("cannot start the HTTP workers: ",
                                               error_text[0] ? error_text : "unknown"));
  }
  absl::Status started = takeover_error_.empty()
                             ? gate_->Start(upstream_, upstream_length_)
                             : absl::InternalError(takeover_error_);
  if (!started.ok()) {
    StopCivetweb(ctx_, upstream_, upstream_length_);
    ctx_ = nullptr;
    RemoveListenerPath();
    gate_.reset();
    return started;
  }
  port_ = gate_->port();
  {
    absl::MutexLock lock(&mu_);
    draining_ = false;
  }
  return absl::OkStatus();
}

void HttpServer::TakeOverListener(const mg_context* ctx) {
  mg_server_port ports[2] = {};
  const int n = mg_get_server_ports(const_cast<mg_context*>(ctx), 2, ports);
  const int tcp = n == 1 ? ListenerOnPort(ports[0].port) : -1;
  if (tcp < 0) {
    takeover_error_ = "cannot find civetweb's listening socket";
    return;
  }
  // A path in a directory of its own, mode 0700: only this user's
  // processes can reach civetweb past the gate (an abstract name would
  // let any local user connect, around the gate's caps and deadlines).
  int lock_fd = -1;
  const std::string dir = PrivateDirectory(&lock_fd);
  const int dir_error = errno;
  {
    absl::MutexLock lock(&listener_mu_);
    listener_dir_ = dir;
    listener_lock_fd_ = lock_fd;
  }
  const std::string path = dir.empty() ? "" : absl::StrCat(dir, "/", kListenerSocketName);
  sockaddr_un name = {};
  name.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(name.sun_path)) {
    RemoveListenerPath();
    takeover_error_ = absl::StrCat("cannot make a private directory for civetweb's listener: ",
                                   dir.empty() ? std::strerror(dir_error) : "its path is too long");
    return;
  }
  std::memcpy(name.sun_path, path.c_str(), path.size() + 1);
  const socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  const int unix_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  // dup3 puts the new socket under the number civetweb polls and accepts
  // on, and closes the TCP one.
  const bool ok =
      unix_fd >= 0 && bind(unix_fd, reinterpret_cast<const sockaddr*>(&name), length) == 0 &&
      listen(unix_fd, std::max({options_.num_threads, options_.max_connections, 1024})) == 0 &&
      dup3(unix_fd, tcp, O_CLOEXEC) == tcp;
  const int error = errno;
  if (unix_fd >= 0) close(unix_fd);
  if (!ok) {
    RemoveListenerPath();
    takeover_error_ = absl::StrCat("cannot give civetweb a unix-domain listener: ",
                                   std::strerror(error));
    return;
  }
  upstream_ = name;
  upstream_length_ = length;
}

void HttpServer::RemoveListenerPath() {
  absl::MutexLock lock(&listener_mu_);
  if (listener_dir_.empty()) return;
  unlink(absl::StrCat(listener_dir_, "/", kListenerSocketName).c_str());
  unlink(absl::StrCat(listener_dir_, "/", kListenerLockName).c_str());
  rmdir(listener_dir_.c_str());
  // Released last: until the directory is gone, sweepers see it as live.
  close(listener_lock_fd_);
  listener_lock_fd_ = -1;
  listener_dir_.clear();
}

void HttpServer::Shutdown(absl::Duration deadline) {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  if (ctx_ == nullptr) return;
  const absl::Time stop_waiting = absl::Now() + deadline;
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_.empty(); };
  std::vector<std::pair<std::string, std::shared_ptr<Generation>>> left;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    mu_.AwaitWithDeadline(absl::Condition(&idle), stop_waiting);
    left.assign(active_.begin(), active_.end());
  }
  if (!left.empty()) {
    Log(absl::StrCat("shutting down: cancelling ", left.size(), " request(s) still running"));
    for (auto& [id, generation] : left) {
      bool submitted;
      {
        absl::MutexLock lock(&generation->mu);
        generation->cancel_requested = true;
        submitted = generation->submitted;
      }
      // A request not yet submitted is cancelled by its handler after Submit.
      if (submitted) service_.Cancel(id);
    }
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&idle), options_.cancel_grace)) {
      // The engine has not confirmed the cancellations; stop waiting for it.
      for (auto& [id, generation] : active_) {
        absl::MutexLock generation_lock(&generation->mu);
        generation->abandoned = true;
      }
      mu_.Await(absl::Condition(&idle));
    }
  }
  // civetweb first: its connections close, and the gate relays the last
  // of their answers; then the gate closes the port. The gate is kept (a
  // stopped one) so that an Abandon running now can still call it.
  StopCivetweb(ctx_, upstream_, upstream_length_);
  ctx_ = nullptr;
  RemoveListenerPath();
  gate_->Flush(absl::Now() + kLastBytesGrace);
  gate_->Stop();
}

void HttpServer::Abandon(const absl::Status& reason, absl::Duration wait) {
  // Not under lifecycle_mu_: a Shutdown waiting for these very requests
  // holds it. The handlers take their reason at their next wake-up, which
  // this one causes.
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_.empty(); };
  const absl::Time deadline = absl::Now() + wait;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    for (auto& [id, generation] : active_) {
      absl::MutexLock generation_lock(&generation->mu);
      generation->abandoned = true;
      generation->abandon_reason = reason;
    }
    mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
  }
  // The handlers' last bytes are in civetweb's sockets; the caller is
  // about to end the process, so they must reach the clients' sockets.
  if (gate_ != nullptr) gate_->Flush(deadline);
  RemoveListenerPath();
}

int HttpServer::in_flight() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(active_.size());
}

int HttpServer::Route(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  const absl::string_view method = info->request_method;
  const absl::string_view path = info->local_uri;
  const bool get = method == "GET";
  const bool post = method == "POST";
  auto method_not_allowed = [&](absl::string_view allowed) {
    return SendJson(conn, 405,
                    ErrorBody(405, absl::StrCat(method, " is not allowed on ", path, "; use ",
                                                allowed)),
                    absl::StrCat("Allow: ", allowed, "\r\n"));
  };
  auto not_found = [&] {
    return SendJson(conn, 404, ErrorBody(404, absl::StrCat("no such endpoint: ", path)));
  };

  // Before anything reads the body: an ambiguous one is refused whatever
  // the endpoint, and the connection is closed, since where the next
  // request would start is unknown.
  std::vector<HeaderField> headers;
  headers.reserve(static_cast<size_t>(std::max(info->num_headers, 0)));
  for (int i = 0; i < info->num_headers; ++i) {
    headers.push_back({info->http_headers[i].name, info->http_headers[i].value});
  }
  if (absl::Status framing = CheckBodyFraming(headers); !framing.ok()) {
    mg_disable_keep_alive(conn);
    return SendJson(conn, 400, ErrorBody(400, framing.message()), "Connection: close\r\n");
  }
  // So is a body announced larger than the limit, before any endpoint or
  // key check answers without reading it: civetweb, deciding whether such
  // a connection stays open, adds the announced length to the request's
  // (a signed overflow for a length near 2^63, after which it would move
  // its buffer by a negative offset), unless the connection is closing.
  if (info->content_length > static_cast<long long>(options_.max_body_bytes)) {
    return RefuseTooLarge(conn);
  }

  if (path == "/health" || path == "/ready") {
    if (!get) return method_not_allowed("GET");
    const ProbeAnswer answer = Probe(path);
    return SendJson(conn, answer.status, answer.body);
  }
  const bool tokenizer_path = path == kTokenizePath || path == kDetokenizePath;
  if (!absl::StartsWith(path, "/v1/") && !tokenizer_path) return not_found();
  if (!Authorized(conn)) {
    return SendJson(conn, 401,
                    ErrorBody(401, "a valid API key is required: Authorization: Bearer <key>", "",
                              "invalid_api_key"),
                    "WWW-Authenticate: Bearer\r\n");
  }
  if (path == kCompletionsPath || path == kChatPath) {
    if (!post) return method_not_allowed("POST");
    return HandleGenerate(conn, path == kChatPath ? ApiEndpoint::kChatCompletions
                                                  : ApiEndpoint::kCompletions);
  }
  if (tokenizer_path) {
    if (!post) return method_not_allowed("POST");
    return HandleTokenizer(conn, path == kTokenizePath);
  }
  if (path == kModelsPath) {
    if (!get) return method_not_allowed("GET");
    return SendJson(conn, 200, api_.ModelsBody());
  }
  if (absl::StartsWith(path, absl::StrCat(kModelsPath, "/"))) {
    if (!get) return method_not_allowed("GET");
    absl::StatusOr<std::string> model = api_.ModelBody(path.substr(kModelsPath.size() + 1));
    if (!model.ok()) return SendError(conn, model.status());
    return SendJson(conn, 200, *model);
  }
  return not_found();
}

ProbeAnswer HttpServer::Probe(absl::string_view path) const {
  if (path == "/health") {
    if (options_.alive && !options_.alive()) return {503, R"({"status":"unhealthy"})"};
    return {200, R"({"status":"ok"})"};
  }
  bool draining;
  {
    absl::MutexLock lock(&mu_);
    draining = draining_;
  }
  if (draining) return {503, R"({"status":"draining"})"};
  if (ready_ && !ready_()) return {503, R"({"status":"not ready"})"};
  return {200, R"({"status":"ready"})"};
}

// Finding a connection's socket scans every descriptor of the process
// (SocketWithPeer): at hundreds of connections that is thousands of system
// calls, more than serving a short request costs. Most requests never need
// the socket (a body that arrives within its deadline, a stream), so it is
// looked for only when asked for, once per connection.
class HttpServer::ConnectionSocket {
 public:
  // `peer`: the name of the gate's end of the connection (none: no
  // socket); `known`: the socket an earlier request of the connection
  // found (-1: none yet).
  ConnectionSocket(std::optional<std::string> peer, int known)
      : peer_(std::move(peer)), known_(known) {}

  // The socket (-1: none); the first call looks for it. Thread-safe: the
  // body deadline's thread may be the one to ask.
  int Get() {
    absl::MutexLock lock(&mu_);
    if (!searched_ && peer_.has_value()) {
      searched_ = true;
      found_ = known_ >= 0 && UnixName(known_, /*peer=*/true) == *peer_ ? known_
                                                                         : SocketWithPeer(*peer_);
    }
    return found_;
  }
  const std::optional<std::string>& peer() const { return peer_; }
  // The socket if it was looked for, else what the connection knew.
  int last_known() const {
    absl::MutexLock lock(&mu_);
    return searched_ ? found_ : known_;
  }

 private:
  const std::optional<std::string> peer_;
  const int known_;
  mutable absl::Mutex mu_;
  bool searched_ ABSL_GUARDED_BY(mu_) = false;
  int found_ ABSL_GUARDED_BY(mu_) = -1;
};

namespace {

// What a civetweb worker thread knows of the connection it serves: a
// worker serves one connection at a time, and only the first request of a
// connection names it (the gate adds the header).
struct ServedConnection {
  const HttpServer* server = nullptr;
  std::string peer;
  int fd = -1;  // -1: not looked for yet
};
thread_local ServedConnection served_connection;

}  // namespace

HttpServer::ConnectionSocket HttpServer::SocketOf(mg_connection* conn) const {
  ServedConnection& served = served_connection;
  const char* token = mg_get_header(conn, std::string(ConnectionGate::kConnectionHeader).c_str());
  std::optional<std::string> peer;
  if (token != nullptr && gate_ != nullptr) peer = gate_->UpstreamName(token);
  if (peer.has_value()) {
    served = {this, *peer, -1};
    return ConnectionSocket(std::move(peer), -1);
  }
  // A later request of a kept-alive connection.
  if (served.server == this) return ConnectionSocket(served.peer, served.fd);
  return ConnectionSocket(std::nullopt, -1);
}

void HttpServer::RememberSocket(const ConnectionSocket& socket) const {
  ServedConnection& served = served_connection;
  if (served.server == this && socket.peer() == served.peer) served.fd = socket.last_known();
}

bool HttpServer::Authorized(mg_connection* conn) const {
  if (options_.api_key.empty()) return true;
  const char* header = mg_get_header(conn, "Authorization");
  return header != nullptr && BearerKeyMatches(header, options_.api_key);
}

int HttpServer::SendError(mg_connection* conn, const absl::Status& status) {
  const int http_status = HttpStatusFor(status);
  std::string headers;
  if (http_status == 429 || http_status == 503) {
    headers = absl::StrCat("Retry-After: ", options_.retry_after_seconds, "\r\n");
  }
  return SendJson(conn, http_status, ErrorBody(status), headers);
}

std::optional<int> HttpServer::ReceiveBody(mg_connection* conn, ConnectionSocket& socket,
                                           std::string* out) {
  std::string& body = *out;
  BodyResult read;
  bool read_timed_out = false;
  {
    std::unique_ptr<ReadDeadlines::Watch> watch;
    if (socket.peer().has_value()) {
      watch = read_deadlines_.Arm([&socket] { return socket.Get(); },
                                  absl::Now() + options_.body_timeout);
    }
    read = ReadBody(conn, options_.max_body_bytes, &body);
    read_timed_out = watch != nullptr && watch->expired();
  }
  if (read_timed_out) {
    mg_disable_keep_alive(conn);
    return SendJson(conn, 408,
                    ErrorBody(408, absl::StrCat("the request body did not arrive within ",
                                                absl::FormatDuration(options_.body_timeout))),
                    "Connection: close\r\n");
  }
  switch (read) {
    case BodyResult::kOk:
      break;
    case BodyResult::kTooLarge:
      return RefuseTooLarge(conn);
    case BodyResult::kReadError:
      mg_disable_keep_alive(conn);
      return SendJson(conn, 400,
                      ErrorBody(400, "the request body could not be read (cut short, or no "
                                     "bytes within the read timeout)"),
                      "Connection: close\r\n");
  }
  return std::nullopt;
}

int HttpServer::RefuseTooLarge(mg_connection* conn) {
  // The rest of the body is not read; the connection cannot be reused.
  mg_disable_keep_alive(conn);
  return SendJson(conn, 413,
                  ErrorBody(413,
                            absl::StrCat("the request body is larger than the limit of ",
                                         options_.max_body_bytes, " bytes"),
                            "body", "request_too_large"),
                  "Connection: close\r\n");
}

int HttpServer::HandleTokenizer(mg_connection* conn, bool tokenize) {
  // No engine is involved, so a draining server still answers these.
  ConnectionSocket socket = SocketOf(conn);
  std::string body;
  const std::optional<int> sent = ReceiveBody(conn, socket, &body);
  RememberSocket(socket);
  if (sent.has_value()) return *sent;
  absl::StatusOr<ApiReply> reply = OnAFullStack([&] {
    return tokenize ? api_.TokenizeReply(body) : api_.DetokenizeReply(body);
  });
  if (!reply.ok()) return SendError(conn, reply.status());
  LogIgnoredFields(reply->ignored_fields);
  return SendJson(conn, 200, reply->body);
}

int HttpServer::HandleGenerate(mg_connection* conn, ApiEndpoint endpoint) {
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return SendError(conn, DrainingError());
  }
  ConnectionSocket socket = SocketOf(conn);
  std::string body;
  if (std::optional<int> sent = ReceiveBody(conn, socket, &body)) {
    RememberSocket(socket);
    return *sent;
  }
  // Everything after the body needs more stack than a worker has: the
  // parsers, the chat template and the tokenizer, and the reply's encoding
  // (a body with logprobs overflowed the worker's stack in nlohmann's dump
  // under AddressSanitizer). The worker waits for the request here.
  const int status = OnAFullStack([&] { return Generate(conn, endpoint, body, socket); });
  RememberSocket(socket);
  return status;
}

int HttpServer::Generate(mg_connection* conn, ApiEndpoint endpoint, const std::string& body,
                         ConnectionSocket& socket) {
  absl::StatusOr<ApiRequest> parsed = endpoint == ApiEndpoint::kChatCompletions
                                          ? api_.ParseChat(body)
                                          : api_.ParseCompletion(body);
  if (!parsed.ok()) return SendError(conn, parsed.status());
  ApiRequest& request = *parsed;
  LogIgnoredFields(request.ignored_fields);
  const std::string id =
      NextId(endpoint == ApiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-");
  request.generation.id = id;

  auto generation = std::make_shared<Generation>();
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return SendError(conn, DrainingError());
    active_[id] = generation;
  }
  // The callback runs on the engine's delivery thread: queue and return.
  absl::Status submitted =
      service_.Submit(request.generation, [generation](const GenerationEvent& event) {
        absl::MutexLock lock(&generation->mu);
        generation->events.push_back(event);
      });
  if (!submitted.ok()) {
    Finish(id);
    return SendError(conn, submitted);
  }
  bool cancel;
  {
    absl::MutexLock lock(&generation->mu);
    generation->submitted = true;
    cancel = generation->cancel_requested;
  }
  if (cancel) service_.Cancel(id);

  int status = request.stream ? ServeStream(conn, request, *generation)
                              : ServeBody(conn, request, *generation, socket);
  Finish(id);
  return status;
}

int HttpServer::ServeStream(mg_connection* conn, const ApiRequest& request,
                            Generation& generation) {
  const std::string& id = request.generation.id;
  ResponseEncoder encoder(api_, request, id, absl::ToUnixSeconds(absl::Now()));
  std::string head = absl::StrCat(
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
      "Transfer-Encoding: chunked\r\nX-Request-Id: ",
      id, "\r\n\r\n");
  bool client_gone = mg_write(conn, head.data(), head.size()) != static_cast<int>(head.size());
  while (!client_gone && !encoder.finished()) {
    bool abandoned = false;
    absl::Status reason;
    std::deque<GenerationEvent> events = generation.Take(options_.heartbeat, &abandoned, &reason);
    if (abandoned) {
      WriteChunk(conn, absl::StrCat("data: ", ErrorBody(reason), "\n\ndata: [DONE]\n\n"));
      break;
    }
    std::string out;
    for (const GenerationEvent& event : events) out += encoder.StreamEvent(event);
    // An SSE comment when idle: clients ignore it, and a failed write shows
    // that the client is gone while the request still waits in the queue.
    if (events.empty()) out = ": keep-alive\n\n";
    if (!out.empty()) client_gone = !WriteChunk(conn, out);
  }
  if (client_gone) {
    if (!encoder.finished()) service_.Cancel(id);
    return 200;
  }
  WriteChunk(conn, "");  // the last chunk
  return 200;
}

int HttpServer::ServeBody(mg_connection* conn, const ApiRequest& request, Generation& generation,
                          ConnectionSocket& socket) {
  const std::string& id = request.generation.id;
  ResponseEncoder encoder(api_, request, id, absl::ToUnixSeconds(absl::Now()));
  bool client_gone = false;
  while (!encoder.finished()) {
    bool abandoned = false;
    absl::Status reason;
    for (const GenerationEvent& event : generation.Take(kHangUpPoll, &abandoned, &reason)) {
      encoder.Add(event);
    }
    if (abandoned) return SendError(conn, reason);
    // A client that hung up cancels its request; the engine then finishes
    // it, and the loop ends with its final event.
    if (!client_gone && !encoder.finished() && PeerHungUp(socket.Get())) {
      client_gone = true;
      service_.Cancel(id);
    }
  }
  if (client_gone) return kClientClosedRequest;
  absl::StatusOr<std::string> body = encoder.Body();
  if (!body.ok()) return SendError(conn, body.status());
  return SendJson(conn, 200, *body, absl::StrCat("X-Request-Id: ", id, "\r\n"));
}

void HttpServer::Finish(const std::string& id) {
  absl::MutexLock lock(&mu_);
  active_.erase(id);
}

std::string HttpServer::NextId(absl::string_view prefix) {
  uint64_t n;
  {
    absl::MutexLock lock(&mu_);
    n = ++next_id_;
  }
  return absl::StrFormat("%s%016x%x", prefix, id_salt_, n);
}

void HttpServer::LogIgnoredFields(const std::vector<std::string>& fields) {
  for (const std::string& field : fields) {
    {
      absl::MutexLock lock(&mu_);
      if (logged_fields_.size() >= kMaxLoggedFields || !logged_fields_.insert(field).second) {
        continue;
      }
    }
    Log(absl::StrCat("ignoring unknown request field '", field,
                     "' (logged once per field name)"));
  }
}

void HttpServer::Log(absl::string_view message) const {
  if (options_.log) {
    options_.log(message);
  } else {
    std::fprintf(stderr, "verdict http: %.*s\n", static_cast<int>(message.size()),
                 message.data());
  }
}

}  // namespace verdict

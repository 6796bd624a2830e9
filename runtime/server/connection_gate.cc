#include "runtime/server/connection_gate.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "runtime/server/connection_caps.h"
#include "runtime/server/http_exchange.h"
#include "runtime/server/openai_api.h"
#include "runtime/server/request_head.h"

namespace verdict {
namespace {

// Bytes buffered per direction of a relayed connection; past this the gate
// stops reading that side, so a slow reader slows its writer down.
constexpr size_t kMaxBuffered = size_t{256} << 10;
constexpr size_t kReadChunk = size_t{64} << 10;
constexpr int kReadsPerTurn = 16;
// Connections being refused or closed that are read until the client
// closes; past this many, a refused connection is closed at once.
constexpr int kMaxLingering = 4096;
// How often deadlines are checked: the granularity of the head timeout.
constexpr absl::Duration kTick = absl::Milliseconds(50);

// epoll keys: the listener, the wake-up eventfd, then 2 * id + side.
constexpr uint64_t kListenerKey = 0;
constexpr uint64_t kWakeKey = 1;

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 408:
      return "Request Timeout";
    case 429:
      return "Too Many Requests";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

// The client's address as caps count it: IPv4 clients of an IPv6 socket
// count as their IPv4 address.
std::string AddressOf(const sockaddr_storage& peer) {
  char text[INET6_ADDRSTRLEN] = "";
  if (peer.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr, text, sizeof(text));
  } else if (peer.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof(text));
    } else {
      inet_ntop(AF_INET6, &a, text, sizeof(text));
    }
  }
  return text;
}

std::string Response(int status, absl::string_view body, bool close,
                     absl::string_view extra_headers) {
  return absl::StrFormat(
      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
      "Cache-Control: no-store\r\n%s%s\r\n%s",
      status, ReasonPhrase(status), body.size(), close ? "Connection: close\r\n" : "",
      extra_headers, body);
}

bool WouldBlock(int error) { return error == EAGAIN || error == EWOULDBLOCK || error == EINTR; }

// Sends from the front of `pending` until it is empty or `fd` would block;
// false if the socket refused (the peer is gone or shut its read side).
bool SendPending(int fd, std::string& pending) {
  while (!pending.empty()) {
    const ssize_t n = send(fd, pending.data(), pending.size(), MSG_NOSIGNAL);
    if (n > 0) {
      pending.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && WouldBlock(errno)) {
      return true;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

struct ConnectionGate::Connection {
  enum class Phase {
    kHead,    // reading a request head (the first, or the next on an idle
              // kept-alive connection); the gate answers probes
    kRelay,   // passed on to civetweb; bytes are relayed both ways
    kLinger,  // answered for the last time; the client's bytes are dropped
  };
  uint64_t id = 0;
  int client = -1;
  int upstream = -1;
  std::string address;
  bool counted = false;  // admitted, so in the caps
  Phase phase = Phase::kHead;
  absl::Time deadline;  // of the head (kHead) or of the linger (kLinger)
  std::string from_client;
  std::string to_client;
  bool client_eof = false;          // the client shut its sending side
  bool client_shut = false;         // the gate shut the client's receiving side
  bool upstream_shut = false;       // the gate shut civetweb's receiving side
  bool upstream_refuses = false;    // civetweb reads no more (its socket's read side shut)
  bool close_when_flushed = false;  // the last answer is queued
  bool dead = false;
  int answered = 0;   // requests answered on this connection (probes, relayed ones)
  std::string token;  // kConnectionHeader's value; empty until passed on
  // The requests passed on and civetweb's answers (kRelay), to tell when
  // the connection is over before civetweb closes its end.
  HttpExchange exchange;
  uint64_t sent_to_client = 0;  // bytes handed to the client's socket
  uint64_t upstream_base = 0;   // of those, the count before civetweb's first
  uint32_t client_events = 0;
  uint32_t upstream_events = 0;
  bool client_watched = false;
  bool upstream_watched = false;
};

struct ConnectionGate::State {
  explicit State(const ConnectionGateOptions& options)
      : caps(options.max_connections, options.max_connections_per_client) {
    std::random_device device;
    random.seed((static_cast<uint64_t>(device()) << 32) ^ device());
  }
  absl::flat_hash_map<uint64_t, std::unique_ptr<Connection>> connections;
  uint64_t next_id = 1;
  ConnectionCaps caps;
  int lingering = 0;
  bool listener_paused = false;
  absl::Time resume_listener;
  std::mt19937_64 random;
  std::vector<char> scratch = std::vector<char>(kReadChunk);
};

ConnectionGate::ConnectionGate(ConnectionGateOptions options,
                               std::function<ProbeAnswer(absl::string_view)> probe)
    : options_(std::move(options)),
      probe_(std::move(probe)),
      state_(std::make_unique<State>(options_)) {}

ConnectionGate::~ConnectionGate() { Stop(); }

absl::Status ConnectionGate::Listen() {
  const std::string where = absl::StrCat(options_.host, ":", options_.port);
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(options_.port);
  if (int e = getaddrinfo(options_.host.empty() ? nullptr : options_.host.c_str(), service.c_str(),
                          &hints, &found);
      e != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", where, ": ", gai_strerror(e)));
  }
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  std::string error;
  if (fd < 0) {
    error = std::strerror(errno);
  } else if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
             bind(fd, found->ai_addr, found->ai_addrlen) != 0 ||
             listen(fd, options_.backlog) != 0) {
    error = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  if (!error.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", where, ": ", error));
  }
  sockaddr_storage bound = {};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  listen_fd_ = fd;
  return absl::OkStatus();
}

absl::Status ConnectionGate::Start(const sockaddr_un& upstream, socklen_t upstream_length) {
  if (listen_fd_ < 0) return absl::FailedPreconditionError("the gate is not listening");
  upstream_ = upstream;
  upstream_length_ = upstream_length;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("epoll: ", std::strerror(errno)));
  }
  epoll_event listener = {EPOLLIN, {.u64 = kListenerKey}};
  epoll_event wake = {EPOLLIN, {.u64 = kWakeKey}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &listener);
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake);
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void ConnectionGate::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  std::vector<uint64_t> ids;
  for (const auto& [id, c] : state_->connections) ids.push_back(id);
  for (uint64_t id : ids) Destroy(id);
  for (int* fd : {&listen_fd_, &epoll_fd_, &wake_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

bool ConnectionGate::Flush(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (stop_ || !thread_.joinable()) return false;
  const uint64_t ticket = ++flushes_asked_;
  // Under mu_, so that Stop (which sets stop_ under it) cannot have closed
  // the eventfd yet.
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  auto answered = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || flushes_done_ >= ticket;
  };
  mu_.AwaitWithDeadline(absl::Condition(&answered), deadline);
  return flushes_done_ >= ticket;
}

std::optional<std::string> ConnectionGate::UpstreamName(absl::string_view token) const {
  absl::MutexLock lock(&mu_);
  auto it = upstream_names_.find(token);
  if (it == upstream_names_.end()) return std::nullopt;
  return it->second;
}

int ConnectionGate::open_connections() const {
  absl::MutexLock lock(&mu_);
  return open_;
}

void ConnectionGate::Run() {
  std::vector<epoll_event> events(256);
  absl::Time next_check = absl::Now() + kTick;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
    }
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                             static_cast<int>(absl::ToInt64Milliseconds(kTick)));
    // New connections are taken after the others' events: a client that
    // closed one connection and opened the next finds the first one
    // released, when both arrived together.
    if (HandleEvents(events.data(), n)) Accept();
    const absl::Time now = absl::Now();
    if (now >= next_check) {
      CheckDeadlines(now);
      next_check = now + kTick;
    }
    AnswerFlushes();
  }
}

bool ConnectionGate::HandleEvents(const epoll_event* events, int n) {
  bool accept = false;
  for (int i = 0; i < n; ++i) {
    const uint64_t key = events[i].data.u64;
    if (key == kListenerKey) {
      accept = true;
      continue;
    }
    if (key == kWakeKey) {
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof(count));
      continue;
    }
    auto it = state_->connections.find(key >> 1);
    if (it == state_->connections.end()) continue;  // closed earlier in this batch
    Connection& c = *it->second;
    const bool client_side = (key & 1) == 0;
    // A reset, or a connection closed both ways: nothing more can be
    // delivered to the client.
    if (client_side && (events[i].events & (EPOLLERR | EPOLLHUP)) != 0) c.dead = true;
    if (!c.dead) Pump(c);
    if (c.dead) {
      Destroy(c.id);
    } else {
      Watch(c);
    }
  }
  return accept;
}

bool ConnectionGate::Relayed() const {
  for (const auto& [id, c] : state_->connections) {
    // A kept-alive connection reading its next head may still hold
    // civetweb's end.
    if (c->phase != Connection::Phase::kRelay && c->upstream < 0) continue;
    if (!c->to_client.empty()) return false;
    int unread = 0;
    if (c->upstream >= 0 && ioctl(c->upstream, FIONREAD, &unread) == 0 && unread > 0) return false;
  }
  return true;
}

void ConnectionGate::AnswerFlushes() {
  uint64_t asked;
  {
    absl::MutexLock lock(&mu_);
    if (flushes_done_ == flushes_asked_) return;
    asked = flushes_asked_;
  }
  // The calls numbered up to `asked` were made before this check, so the
  // bytes they wait for were in the sockets or buffers it looks at.
  if (!Relayed()) return;
  absl::MutexLock lock(&mu_);
  flushes_done_ = asked;
}

void ConnectionGate::Accept() {
  State& s = *state_;
  for (;;) {
    sockaddr_storage peer = {};
    socklen_t length = sizeof(peer);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &length,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: the pending connection would make the
        // listener readable forever. Stop watching it for a moment.
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        s.listener_paused = true;
        s.resume_listener = absl::Now() + absl::Milliseconds(100);
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    // The gate relays what civetweb writes as it comes (stream events);
    // Nagle's algorithm would hold small writes back for an ACK.
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::string address = AddressOf(peer);
    ConnectionCaps::Verdict verdict = s.caps.TryAdmit(address);
    if (verdict != ConnectionCaps::Verdict::kAdmitted) {
      // The client may have closed another connection just before it
      // opened this one, while the gate was accepting: what is ready now
      // is handled (releasing such a connection) before the refusal.
      epoll_event ready[64];
      HandleEvents(ready, epoll_wait(epoll_fd_, ready, 64, 0));
      verdict = s.caps.TryAdmit(address);
    }
    switch (verdict) {
      case ConnectionCaps::Verdict::kAdmitted:
        break;
      case ConnectionCaps::Verdict::kAddressFull:
        Refuse(fd, 429,
               absl::StrCat("too many connections from ", address, ": at most ",
                            options_.max_connections_per_client, " at once"));
        continue;
      case ConnectionCaps::Verdict::kTotalFull:
        Refuse(fd, 503,
               absl::StrCat("the server holds its limit of ", options_.max_connections,
                            " connections"));
        continue;
    }
    auto c = std::make_unique<Connection>();
    c->id = s.next_id++;
    c->client = fd;
    c->address = std::move(address);
    c->counted = true;
    c->deadline = absl::Now() + options_.head_timeout;
    {
      absl::MutexLock lock(&mu_);
      ++open_;
    }
    Connection& ref = *c;
    s.connections.emplace(ref.id, std::move(c));
    Watch(ref);
  }
}

void ConnectionGate::Refuse(int fd, int status, absl::string_view message) {
  State& s = *state_;
  const std::string response =
      Response(status, ErrorBody(status, message), /*close=*/true,
               absl::StrCat("Retry-After: ", options_.retry_after_seconds, "\r\n"));
  if (s.lingering >= kMaxLingering) {
    // Too many to wait for: the answer goes out and the connection closes.
    (void)!send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    close(fd);
    return;
  }
  auto c = std::make_unique<Connection>();
  c->id = s.next_id++;
  c->client = fd;
  c->to_client = response;
  c->close_when_flushed = true;
  c->phase = Connection::Phase::kLinger;
  c->deadline = absl::Now() + options_.linger;
  ++s.lingering;
  Connection& ref = *c;
  s.connections.emplace(ref.id, std::move(c));
  Pump(ref);
  if (ref.dead) {
    Destroy(ref.id);
  } else {
    Watch(ref);
  }
}

void ConnectionGate::Pump(Connection& c) {
  std::vector<char>& buf = state_->scratch;
  using Phase = Connection::Phase;
  // The client's bytes.
  const size_t client_room = c.phase == Phase::kHead ? options_.max_head_bytes + 1 : kMaxBuffered;
  // A bounded number of reads per turn (the epoll interest is level-
  // triggered, so the rest waits for the next): a client that sends as
  // fast as the gate drops its bytes must not keep the thread to itself.
  for (int reads = 0; reads < kReadsPerTurn && !c.client_eof &&
                      (c.phase == Phase::kLinger || c.from_client.size() < client_room);
       ++reads) {
    const size_t want = c.phase == Phase::kLinger
                            ? buf.size()
                            : std::min(buf.size(), client_room - c.from_client.size());
    const ssize_t n = recv(c.client, buf.data(), want, 0);
    if (n > 0) {
      if (c.phase == Phase::kRelay) c.exchange.FromClient(absl::string_view(buf.data(), n));
      // Dropped once the answer is the last one, or when civetweb reads no more.
      if (c.phase != Phase::kLinger && !c.upstream_refuses) c.from_client.append(buf.data(), n);
      continue;
    }
    if (n == 0) {
      c.client_eof = true;
    } else if (!WouldBlock(errno)) {
      c.dead = true;
      return;
    }
    break;
  }
  if (c.phase == Phase::kHead) TakeHeads(c);
  if (c.dead) return;
  // To civetweb.
  if (c.phase == Phase::kRelay && c.upstream >= 0) {
    if (!c.upstream_refuses && !SendPending(c.upstream, c.from_client)) {
      // civetweb shut its socket's read side (a body past its deadline)
      // but may still be answering: keep reading its side.
      c.upstream_refuses = true;
    }
    if (c.upstream_refuses) c.from_client.clear();
    if (c.client_eof && c.from_client.empty() && !c.upstream_shut) {
      // The client's hang-up, passed on: the handler sees it as before.
      shutdown(c.upstream, SHUT_WR);
      c.upstream_shut = true;
    }
  }
  // From civetweb.
  while (c.upstream >= 0 && c.to_client.size() < kMaxBuffered) {
    const ssize_t n =
        recv(c.upstream, buf.data(), std::min(buf.size(), kMaxBuffered - c.to_client.size()), 0);
    if (n > 0) {
      c.to_client.append(buf.data(), n);
      c.exchange.FromUpstream(absl::string_view(buf.data(), n));
      continue;
    }
    // civetweb closed the connection (or it broke): nothing more comes.
    if (n == 0 || !WouldBlock(errno)) CloseUpstream(c);
    break;
  }
  // To the client.
  const size_t queued = c.to_client.size();
  const bool sent = SendPending(c.client, c.to_client);
  c.sent_to_client += queued - c.to_client.size();
  if (!sent) {
    c.dead = true;  // the client is gone
    return;
  }
  if (c.phase == Phase::kRelay && c.upstream >= 0 && Over(c)) {
    // civetweb has nothing more to do here: the connection stops counting
    // now, not once civetweb's worker gets round to closing its end (the
    // client may well have connected again by then). Whatever civetweb
    // writes after a last answer is not for the client.
    c.to_client.clear();
    StartLinger(c);
    if (c.dead) return;
  }
  if (!c.to_client.empty()) return;
  switch (c.phase) {
    case Phase::kHead:
      if (c.close_when_flushed) {
        StartLinger(c);
      } else if (c.client_eof) {
        c.dead = true;  // gone before a whole request arrived
      } else if (!c.token.empty() && c.upstream < 0 && c.from_client.empty()) {
        // civetweb ended an idle kept-alive connection (its keep-alive
        // timeout) before the next request began: so does the gate, as
        // before. Once a next head has begun, its own deadline holds.
        StartLinger(c);
      }
      break;
    case Phase::kRelay:
      if (c.upstream < 0) {
        StartLinger(c);
      } else if (c.exchange.idle() && c.from_client.empty() && !c.upstream_refuses &&
                 !c.upstream_shut) {
        // Every request is answered and handed to the client: the gate
        // reads the next head itself, under the first head's deadline
        // (counted from now, as after a probe), instead of letting civetweb
        // read it unbounded by that deadline. A lost() exchange never gets
        // here: its bytes go on as they come.
        c.phase = Phase::kHead;
        c.deadline = absl::Now() + options_.head_timeout;
        ++c.answered;
      }
      break;
    case Phase::kLinger:
      if (!c.client_shut) {
        shutdown(c.client, SHUT_WR);
        c.client_shut = true;
      }
      if (c.client_eof) c.dead = true;
      break;
  }
}

bool ConnectionGate::Over(const Connection& c) const {
  const HttpExchange& e = c.exchange;
  if (e.lost() || c.sent_to_client < c.upstream_base + e.answered_through()) return false;
  // The last answer is relayed whole, and either it ends the connection,
  // or the client, which sends nothing more, has every answer it asked for.
  return e.closing() || (c.client_eof && e.idle());
}

void ConnectionGate::TakeHeads(Connection& c) {
  while (c.phase == Connection::Phase::kHead && !c.close_when_flushed) {
    const std::optional<size_t> length = RequestHeadLength(c.from_client);
    if (!length.has_value()) {
      // Too long a head, or one cut short: civetweb answers it as it
      // always has.
      if (c.from_client.size() > options_.max_head_bytes ||
          (c.client_eof && !c.from_client.empty())) {
        PassOn(c);
      }
      return;
    }
    const std::optional<ProbeRequest> probe =
        ParseProbe(absl::string_view(c.from_client).substr(0, *length));
    // Once a connection has been passed on, its probes go to civetweb too,
    // so that every byte the client gets is civetweb's, as the exchange
    // counts them.
    if (!probe.has_value() || !c.token.empty()) {
      PassOn(c);
      return;
    }
    const ProbeAnswer answer = probe_(probe->path);
    c.from_client.erase(0, *length);
    c.to_client += Response(answer.status, answer.body, !probe->keep_alive, "");
    ++c.answered;
    c.close_when_flushed = !probe->keep_alive;
    c.deadline = absl::Now() + options_.head_timeout;  // for the next request's head
  }
}

void ConnectionGate::PassOn(Connection& c) {
  char byte;
  if (c.upstream >= 0 && recv(c.upstream, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
    // civetweb closed this end just now (its keep-alive timeout) and the
    // gate has not read that yet: the request goes to a fresh one.
    CloseUpstream(c);
  }
  if (c.upstream >= 0) {
    // A later request of a kept-alive connection civetweb still holds:
    // it goes on as the client sent it.
    c.exchange.FromClient(c.from_client);
    c.phase = Connection::Phase::kRelay;
    return;
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un self = {};
  self.sun_family = AF_UNIX;
  socklen_t self_length = sizeof(self);
  // Binding to an empty name makes the kernel pick a unique abstract one;
  // the handler finds its socket as the one whose peer has that name.
  bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&self), sizeof(sa_family_t)) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_length) == 0 &&
            connect(fd, reinterpret_cast<const sockaddr*>(&upstream_), upstream_length_) == 0;
  if (!ok) {
    // civetweb's accept queue is full (or the process is out of
    // descriptors): tell the client to come back.
    if (fd >= 0) close(fd);
    c.to_client += Response(503, ErrorBody(503, "the server cannot take another connection now"),
                            /*close=*/true,
                            absl::StrCat("Retry-After: ", options_.retry_after_seconds, "\r\n"));
    c.close_when_flushed = true;
    return;
  }
  // The client's bytes as it sent them, from the first request civetweb
  // gets; and what is queued for the client before civetweb's first byte.
  // A later request whose connection civetweb has dropped meanwhile (its
  // keep-alive timeout ran out while the head came) starts afresh.
  c.exchange = HttpExchange();
  c.exchange.FromClient(c.from_client);
  c.upstream_base = c.sent_to_client + c.to_client.size();
  const uint64_t high = state_->random();
  c.token = absl::StrFormat("%016x%016x", high, state_->random());
  {
    absl::MutexLock lock(&mu_);
    upstream_names_[c.token] =
        std::string(reinterpret_cast<const char*>(&self), static_cast<size_t>(self_length));
  }
  // After the request line (past any empty lines before it, which HTTP
  // allows), so that civetweb's parsing of the rest is unchanged.
  const size_t start = c.from_client.find_first_not_of("\r\n");
  const size_t line_end = start == std::string::npos ? start : c.from_client.find('\n', start);
  if (line_end != std::string::npos) {
    c.from_client.insert(line_end + 1, absl::StrCat(kConnectionHeader, ": ", c.token, "\r\n"));
  }
  c.upstream = fd;
  c.phase = Connection::Phase::kRelay;
}

void ConnectionGate::StartLinger(Connection& c) {
  State& s = *state_;
  CloseUpstream(c);
  if (c.counted) {
    s.caps.Release(c.address);
    c.counted = false;
    absl::MutexLock lock(&mu_);
    --open_;
  }
  if (c.client_eof || s.lingering >= kMaxLingering) {
    c.dead = true;
    return;
  }
  c.phase = Connection::Phase::kLinger;
  c.deadline = absl::Now() + options_.linger;
  c.from_client.clear();
  ++s.lingering;
  shutdown(c.client, SHUT_WR);
  c.client_shut = true;
}

void ConnectionGate::CloseUpstream(Connection& c) {
  if (c.upstream < 0) return;
  if (c.upstream_watched) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.upstream, nullptr);
  close(c.upstream);
  c.upstream = -1;
  c.upstream_watched = false;
  c.upstream_events = 0;
  absl::MutexLock lock(&mu_);
  upstream_names_.erase(c.token);
}

void ConnectionGate::Watch(Connection& c) {
  using Phase = Connection::Phase;
  // Level-triggered interest in what each side can do next. A side with
  // no interest leaves the epoll set: its hang-up would otherwise be
  // reported again and again while the gate waits on the other side.
  auto update = [this](int fd, uint64_t key, uint32_t want, uint32_t& have, bool& watched) {
    if (want == 0) {
      if (watched) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      watched = false;
    } else if (!watched || want != have) {
      epoll_event event = {want, {.u64 = key}};
      epoll_ctl(epoll_fd_, watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &event);
      watched = true;
    }
    have = want;
  };
  const size_t client_room = c.phase == Phase::kHead ? options_.max_head_bytes + 1 : kMaxBuffered;
  const bool read_client =
      !c.client_eof && (c.phase == Phase::kLinger || c.from_client.size() < client_room);
  update(c.client, c.id << 1,
         (read_client ? EPOLLIN | EPOLLRDHUP : 0u) |
             (c.to_client.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT)),
         c.client_events, c.client_watched);
  if (c.upstream >= 0) {
    const bool write_upstream =
        c.phase == Phase::kRelay && !c.from_client.empty() && !c.upstream_refuses;
    update(c.upstream, (c.id << 1) | 1,
           (c.to_client.size() < kMaxBuffered ? static_cast<uint32_t>(EPOLLIN) : 0u) |
               (write_upstream ? static_cast<uint32_t>(EPOLLOUT) : 0u),
           c.upstream_events, c.upstream_watched);
  }
}

void ConnectionGate::Destroy(uint64_t id) {
  State& s = *state_;
  auto it = s.connections.find(id);
  if (it == s.connections.end()) return;
  Connection& c = *it->second;
  CloseUpstream(c);
  if (c.counted) {
    s.caps.Release(c.address);
    absl::MutexLock lock(&mu_);
    --open_;
  }
  if (c.phase == Connection::Phase::kLinger) --s.lingering;
  if (c.client_watched) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.client, nullptr);
  close(c.client);
  s.connections.erase(it);
}

void ConnectionGate::CheckDeadlines(absl::Time now) {
  State& s = *state_;
  if (s.listener_paused && now >= s.resume_listener) {
    epoll_event listener = {EPOLLIN, {.u64 = kListenerKey}};
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &listener);
    s.listener_paused = false;
  }
  std::vector<uint64_t> expired, stale;
  for (const auto& [id, c] : s.connections) {
    if (c->phase != Connection::Phase::kRelay && !c->close_when_flushed && now >= c->deadline) {
      expired.push_back(id);
    } else if (c->phase == Connection::Phase::kLinger && now >= c->deadline) {
      expired.push_back(id);
    } else if (c->phase == Connection::Phase::kHead && now >= c->deadline + options_.linger) {
      stale.push_back(id);  // a last answer the client has not read for that long
    }
  }
  for (uint64_t id : stale) Destroy(id);
  for (uint64_t id : expired) {
    Connection& c = *s.connections.at(id);
    if (c.phase == Connection::Phase::kLinger) {
      Destroy(id);
      continue;
    }
    if (c.answered > 0 && c.from_client.empty()) {
      // An idle kept-alive connection: closed without a word, since a
      // client sending its next request just then would take an answer
      // for it.
      c.close_when_flushed = true;
      Pump(c);
      if (c.dead) {
        Destroy(id);
      } else {
        Watch(c);
      }
      continue;
    }
    // The head did not arrive in time: the answer says so, and the
    // connection closes.
    c.from_client.clear();
    c.to_client +=
        Response(408,
                 ErrorBody(408, absl::StrCat("the request head did not arrive within ",
                                             absl::FormatDuration(options_.head_timeout))),
                 /*close=*/true, "");
    c.close_when_flushed = true;
    Pump(c);
    if (c.dead) {
      Destroy(id);
    } else {
      Watch(c);
    }
  }
}

}  // namespace verdict

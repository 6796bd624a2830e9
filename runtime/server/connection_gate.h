// The connection gate: verdict's own listener in front of civetweb.
//
// civetweb 1.15 gives a worker thread to every connection it accepts, from
// the first byte on, and has no hook at accept time. So a client that
// sends its request head slowly, or opens many connections, holds worker
// threads that /health, /ready and every other client then wait for. The
// gate owns the listening TCP socket instead. One thread with epoll
// accepts each connection, refuses it when the client's address or the
// server as a whole holds too many (429 or 503, a JSON error and
// Retry-After), and reads the request head within a deadline (408 beyond).
// It answers GET /health and GET /ready itself, so probes never wait for
// a worker. Any other request is passed on to civetweb over a unix-domain
// connection (civetweb's listener; see HttpServer::Start), and the gate
// then relays bytes both ways until either end closes. It propagates each
// end's close to the other, so a handler still sees its client hang up.
//
// An admitted connection counts against the caps until civetweb is done
// with it (http_exchange.h): the answer to a request that asked to close
// (or an answer that says so) has been handed to the client whole, or the
// client has closed its sending side with every request answered, or
// either end has closed. The gate then closes its end to civetweb itself,
// without waiting for civetweb's worker to close (which it does only after
// its handler's thread has finished, often after the client has read its
// answer and connected again), so nothing more is served on a connection
// that no longer counts. A client that half-closes while its answer is
// still coming keeps counting until the answer is whole.
//
// Once every request of a kept-alive connection is answered and handed to
// the client (HttpExchange::idle()), the gate reads the next head itself
// under the same deadline as the first (408 beyond, counted from then),
// then passes it on to civetweb's end of the connection, or to a fresh one
// if civetweb dropped it meanwhile (its keep-alive timeout). If civetweb
// drops an idle connection before the next request begins, the gate
// closes it too. Bytes sent before the connection is idle (pipelined), and
// every byte of a lost() exchange, go on as they come, unread.
//
// The first head passed on to each civetweb connection gets one header
// prepended, kConnectionHeader, whose value is a token the handler
// exchanges (UpstreamName) for the name of the gate's end of the unix
// connection, and so finds its own socket. The token is random and never
// sent to the client; later requests on the same civetweb connection go
// to it as the client sent them.
#ifndef VERDICT_RUNTIME_SERVER_CONNECTION_GATE_H_
#define VERDICT_RUNTIME_SERVER_CONNECTION_GATE_H_

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace verdict {

struct ConnectionGateOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 picks a free port; see port()
  int backlog = 1024;
  absl::Duration head_timeout = absl::Seconds(10);  // request line and headers (408 beyond)
  int max_connections = 0;                          // open at once in all; 0: no cap (503 beyond)
  int max_connections_per_client = 0;               // from one address; 0: no cap (429 beyond)
  size_t max_head_bytes = 16384;  // a longer head goes to civetweb unread, which refuses it
  int retry_after_seconds = 1;
  // How long a refused or finished connection is read (and the bytes
  // dropped) after the gate's last write, so that closing it does not
  // reset the connection before the client has read the answer.
  absl::Duration linger = absl::Seconds(2);
};

struct ProbeAnswer {
  int status;
  std::string body;  // JSON
};

class ConnectionGate {
 public:
  static constexpr absl::string_view kConnectionHeader = "X-Verdict-Connection";

  // `probe` answers a GET of "/health" or "/ready" (the path); called on
  // the gate's thread, so it must not block.
  ConnectionGate(ConnectionGateOptions options,
                 std::function<ProbeAnswer(absl::string_view path)> probe);
  // Stops if still running.
  ~ConnectionGate();

  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  // Binds and listens on host:port (nothing is accepted before Start).
  absl::Status Listen();
  // The bound port; 0 before Listen.
  int port() const { return port_; }

  // Starts accepting; admitted connections go to the unix-domain listener
  // at `upstream`.
  absl::Status Start(const sockaddr_un& upstream, socklen_t upstream_length);

  // Closes the listener and every connection, and joins the thread.
  // Bytes civetweb wrote that the gate has not relayed yet are lost: call
  // Flush first.
  void Stop();

  // Waits until every byte civetweb had written to a relayed connection
  // when Flush was called has been handed to the client's socket (from
  // there the kernel delivers it, even after this process has exited), or
  // until `deadline`; false at the deadline, or once the gate has stopped.
  // A client that reads nothing makes Flush wait for the deadline.
  bool Flush(absl::Time deadline);

  // The address (as getsockname returns it) of the gate's end of the unix
  // connection that carries the connection `token` named in
  // kConnectionHeader; nullopt once that connection has closed, or for a
  // token the gate never issued. Thread-safe.
  std::optional<std::string> UpstreamName(absl::string_view token) const;

  // Connections open now (admitted ones, not those being refused).
  int open_connections() const;

 private:
  struct Connection;

  void Run();
  // Handles the connections' epoll events; whether the listener's was
  // among them (the caller accepts).
  bool HandleEvents(const epoll_event* events, int n);
  void Accept();
  void Refuse(int fd, int status, absl::string_view message);
  // Does all the reading and writing `c` can do now without blocking.
  void Pump(Connection& c);
  // Takes the complete request heads at the front of the client's bytes:
  // answers probes, or passes the rest of the connection on to civetweb.
  void TakeHeads(Connection& c);
  void PassOn(Connection& c);
  // Whether civetweb is done with relayed connection `c` and all it wrote
  // has been handed to the client: its last answer ends the connection, or
  // the client closed its sending side with every request answered.
  bool Over(const Connection& c) const;
  // Shuts the client's sending side and reads what it still sends until
  // it closes or the linger time has passed.
  void StartLinger(Connection& c);
  void CloseUpstream(Connection& c);
  void Watch(Connection& c);
  void Destroy(uint64_t id);
  void CheckDeadlines(absl::Time now);
  // Whether every relayed connection has handed all civetweb wrote to it
  // to the client's socket.
  bool Relayed() const;
  // Answers the Flush calls made before this check, if Relayed().
  void AnswerFlushes();

  const ConnectionGateOptions options_;
  const std::function<ProbeAnswer(absl::string_view)> probe_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: Stop wakes the thread
  int port_ = 0;
  sockaddr_un upstream_ = {};
  socklen_t upstream_length_ = 0;
  std::thread thread_;

  // Touched by the gate's thread only.
  struct State;
  std::unique_ptr<State> state_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Flush calls are numbered; the thread answers all up to flushes_done_.
  uint64_t flushes_asked_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t flushes_done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, std::string> upstream_names_ ABSL_GUARDED_BY(mu_);
  int open_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_SERVER_CONNECTION_GATE_H_

// The HTTP front end: an OpenAI-compatible server on civetweb in front of a
// GenerationService.
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions (JSON or
// server-sent events), POST /tokenize and POST /detokenize (vLLM's; see
// openai_api.h), GET /v1/models, GET /v1/models/{name}, GET /health (200
// while the process can serve, 503 once it cannot) and GET /ready (200 only
// while the engine is ready and the server admits requests). With an API
// key, /v1/*, /tokenize and /detokenize need "Authorization: Bearer <key>";
// the probes do not.
//
// Connections arrive at verdict's own listener (connection_gate.h), which
// caps them per client address and in all, bounds the time a request head
// may take, answers /health and /ready itself, and passes the rest on to
// civetweb. Each request is then served on one of civetweb's worker
// threads, which blocks on the request's event queue until the engine's
// next event; so num_threads bounds the concurrent requests (streams
// included). A client that goes away mid-stream is noticed at the next
// write (a token or an idle heartbeat comment) and its request is
// cancelled. A full engine queue answers 429 and a draining server 503,
// both with Retry-After.
#ifndef VERDICT_RUNTIME_SERVER_HTTP_SERVER_H_
#define VERDICT_RUNTIME_SERVER_HTTP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/engine/generation.h"
#include "runtime/server/connection_gate.h"
#include "runtime/server/openai_api.h"
#include "runtime/server/read_deadline.h"

struct mg_connection;
struct mg_context;

namespace verdict {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                         // 0 picks a free port; see port()
  std::string api_key;                     // empty: no authentication
  size_t max_body_bytes = size_t{1} << 20; // larger request bodies get 413
  int num_threads = 128;                   // concurrent connections served
  int request_timeout_ms = 30000;          // one socket read or write
  absl::Duration head_timeout = absl::Seconds(10);  // request line and headers (408 beyond)
  absl::Duration body_timeout = absl::Seconds(10);  // a whole request body (408 beyond)
  // Connections open at once, in all (503 beyond) and from one client
  // address (429 beyond); 0: no cap. Each open connection takes three file
  // descriptors (the client's and both ends of the one to civetweb).
  int max_connections = 1024;
  int max_connections_per_client = 256;
  absl::Duration heartbeat = absl::Seconds(5);  // idle streams send ": keep-alive"
  absl::Duration cancel_grace = absl::Seconds(2);  // Shutdown: cancel to hang-up
  int retry_after_seconds = 1;             // Retry-After of 429 and 503
  // Whether the process can still serve, for /health (called from handler
  // threads); unset means always. Once it says no, /health answers 503 and
  // supervisors restart the process.
  std::function<bool()> alive;
  // Where warnings go (unknown request fields, start-up); stderr if unset.
  std::function<void(absl::string_view)> log;
};

class HttpServer {
 public:
  // `api` and `service` must outlive the server. `ready` says whether the
  // engine can take requests (for /ready; called from handler threads);
  // unset means always.
  HttpServer(HttpServerOptions options, const OpenAiApi& api, GenerationService& service,
             std::function<bool()> ready = nullptr);
  // Shuts down at once (in-flight requests are cancelled) if still serving.
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and starts serving. Errors: the port cannot be bound,
  // or the server was started before (FailedPrecondition).
  absl::Status Start();

  // The bound port (the chosen one when options.port was 0); 0 before Start.
  int port() const { return port_; }

  // Graceful stop: new generation requests get 503 from now on; in-flight
  // requests may finish until `deadline` has passed; the rest are
  // cancelled (streams end with an error event, others get 503); then the
  // listener closes. Safe to call twice; must not be called from a request
  // handler.
  void Shutdown(absl::Duration deadline);

  // For an engine that will never answer again (a peer rank is gone and the
  // launcher is ending the job): every request in flight ends now with
  // `reason`, without cancelling it in the engine or waiting for the engine
  // (streams get an error event and [DONE], others the error), and new
  // generation requests get 503. Waits up to `wait` for the handlers to
  // have written their last bytes and for the gate to have handed them to
  // the clients' sockets, so that the process may exit right after; then
  // removes civetweb's listener path, which an exit without destructors
  // would leave behind (the gate keeps its port and answers probes until
  // the process ends). Safe from any thread but a request handler, during
  // Shutdown too.
  void Abandon(const absl::Status& reason, absl::Duration wait);

  // Generation requests being served now.
  int in_flight() const;

 private:
  struct Generation;

  int Route(mg_connection* conn);
  // The answer to GET /health or /ready (`path`), from civetweb's threads
  // or the gate's.
  ProbeAnswer Probe(absl::string_view path) const;
  // The socket civetweb serves `conn` on, watched for the client's hang-up
  // and shut by the body deadline; found when first asked for (see the
  // class). SocketOf reads what names it, RememberSocket keeps what was
  // found for the connection's next request; both on civetweb's worker
  // thread.
  class ConnectionSocket;
  ConnectionSocket SocketOf(mg_connection* conn) const;
  void RememberSocket(const ConnectionSocket& socket) const;
  // civetweb's init_context: trades civetweb's TCP listener for a
  // unix-domain one that only the gate connects to, at a path in a
  // directory only this user can enter.
  void TakeOverListener(const mg_context* ctx);
  // Removes that path and its directory (after civetweb has stopped).
  void RemoveListenerPath();
  int HandleGenerate(mg_connection* conn, ApiEndpoint endpoint);
  // The rest of a generation request once its body has arrived: parse,
  // submit, serve the reply. Runs on a full stack (OnAFullStack).
  int Generate(mg_connection* conn, ApiEndpoint endpoint, const std::string& body,
               ConnectionSocket& socket);
  // POST /tokenize (true) or /detokenize (false).
  int HandleTokenizer(mg_connection* conn, bool tokenize);
  // Reads the request body into `body` within the body timeout and size
  // limit; otherwise answers the client (408, 413 or 400) and returns the
  // status sent. `socket` as for ServeBody.
  std::optional<int> ReceiveBody(mg_connection* conn, ConnectionSocket& socket, std::string* body);
  // 413 for a body over --max-body-bytes, and the connection closed.
  int RefuseTooLarge(mg_connection* conn);
  int ServeStream(mg_connection* conn, const ApiRequest& request, Generation& generation);
  // `socket`: the connection's socket, watched for the client's hang-up
  // (none found: not watched).
  int ServeBody(mg_connection* conn, const ApiRequest& request, Generation& generation,
                ConnectionSocket& socket);
  bool Authorized(mg_connection* conn) const;
  int SendError(mg_connection* conn, const absl::Status& status);
  void LogIgnoredFields(const std::vector<std::string>& fields);
  void Log(absl::string_view message) const;
  std::string NextId(absl::string_view prefix);
  void Finish(const std::string& id);

  // How often the handler of a non-streaming request checks that its client
  // is still connected.
  static constexpr absl::Duration kHangUpPoll = absl::Milliseconds(50);
  // The status logged for a request whose client hung up (nothing is sent).
  static constexpr int kClientClosedRequest = 499;

  const HttpServerOptions options_;
  const OpenAiApi& api_;
  GenerationService& service_;
  const std::function<bool()> ready_;
  const uint64_t id_salt_;  // makes ids differ between server runs
  ReadDeadlines read_deadlines_;  // bounds the time a request body may take

  // Start and Shutdown run one at a time (lifecycle_mu_); handlers never
  // touch these.
  absl::Mutex lifecycle_mu_;
  mg_context* ctx_ ABSL_GUARDED_BY(lifecycle_mu_) = nullptr;
  int port_ = 0;
  // Set by Start before civetweb's threads start and stopped by Shutdown
  // after they have; kept until the next Start or the destructor, so that
  // handlers and Abandon read it without a lock.
  std::unique_ptr<ConnectionGate> gate_;
  // civetweb's unix-domain listener, and why taking it over failed.
  sockaddr_un upstream_ = {};
  socklen_t upstream_length_ = 0;
  std::string takeover_error_;
  // The listener's private directory, and the descriptor that holds the
  // flock of its lock file (which tells sweeping servers that this one is
  // alive); both let go by Shutdown or Abandon, which may run at once on
  // two threads.
  absl::Mutex listener_mu_;
  std::string listener_dir_ ABSL_GUARDED_BY(listener_mu_);
  int listener_lock_fd_ ABSL_GUARDED_BY(listener_mu_) = -1;

  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::shared_ptr<Generation>> active_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> logged_fields_ ABSL_GUARDED_BY(mu_);
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_SERVER_HTTP_SERVER_H_

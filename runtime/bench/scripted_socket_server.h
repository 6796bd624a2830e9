// A one-shot server for the load generator's tests: it answers the first
// connection, once it has read the request head, with `response`, `piece`
// bytes per write, pausing between writes, so the client sees chunk headers
// and CRLFs split across reads; and a test can play a server that answers
// what the real one never would (malformed bodies, counts that do not fit).
#ifndef VERDICT_RUNTIME_BENCH_SCRIPTED_SOCKET_SERVER_H_
#define VERDICT_RUNTIME_BENCH_SCRIPTED_SOCKET_SERVER_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/match.h"

namespace verdict {

class ScriptedSocketServer {
 public:
  ScriptedSocketServer(std::string response, size_t piece) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(fd_, 1);
    thread_ = std::thread([this, response, piece] {
      int conn = accept(fd_, nullptr, nullptr);
      if (conn < 0) return;
      // Read the request head before answering.
      std::string request;
      char buf[4096];
      while (!absl::StrContains(request, "\r\n\r\n")) {
        ssize_t n = recv(conn, buf, sizeof(buf), 0);
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
      request_ = request;
      for (size_t at = 0; at < response.size(); at += piece) {
        std::string part = response.substr(at, piece);
        if (send(conn, part.data(), part.size(), MSG_NOSIGNAL) < 0) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      close(conn);
    });
  }
  ~ScriptedSocketServer() {
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }
  const std::string& request() const { return request_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::string request_;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_BENCH_SCRIPTED_SOCKET_SERVER_H_

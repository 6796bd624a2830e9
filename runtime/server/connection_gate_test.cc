#include "runtime/server/connection_gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

// Stands in for civetweb: a unix-domain listener with a kernel-chosen
// abstract name, as HttpServer gives civetweb.
class Upstream {
 public:
  Upstream() {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    name_.sun_family = AF_UNIX;
    length_ = sizeof(name_);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&name_), sizeof(sa_family_t)), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&name_), &length_), 0);
  }
  ~Upstream() { close(fd_); }

  const sockaddr_un& name() const { return name_; }
  int fd() const { return fd_; }
  socklen_t length() const { return length_; }

  // Accepts the gate's connection and reads the request head it passes on.
  int AcceptAndReadHead(std::string* head) {
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    char c;
    while (head->find("\r\n\r\n") == std::string::npos && recv(conn, &c, 1, 0) == 1) {
      head->push_back(c);
    }
    return conn;
  }

 private:
  int fd_ = -1;
  sockaddr_un name_ = {};
  socklen_t length_ = 0;
};

int ConnectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

bool SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads `n` bytes (fewer if the connection ends first).
std::string ReadBytes(int fd, size_t n) {
  std::string bytes(n, '\0');
  size_t got = 0;
  for (ssize_t r; got < n && (r = recv(fd, bytes.data() + got, n - got, 0)) > 0;) got += r;
  bytes.resize(got);
  return bytes;
}

// Whether `fd` reads its end (or an error) within `timeout`.
bool EndsWithin(int fd, absl::Duration timeout) {
  pollfd p = {fd, POLLIN, 0};
  char c;
  return poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1 &&
         recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

std::string ReadToEnd(int fd) {
  std::string bytes;
  char buf[65536];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) bytes.append(buf, n);
  return bytes;
}

// Far more than the sockets and the gate's buffers hold together, so that
// most of it is still on its way when the writer has written it all.
std::string Payload() {
  std::string bytes(size_t{8} << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>('a' + (i * 7919) % 26);
  return bytes;
}

constexpr char kRequest[] = "GET /stream HTTP/1.1\r\nHost: verdict\r\n\r\n";

// A started gate in front of an Upstream.
class ConnectionGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(gate_.Listen().ok());
    ASSERT_TRUE(gate_.Start(upstream_.name(), upstream_.length()).ok());
  }

  // A client connection whose request the gate has passed on: the
  // client's socket, and civetweb's end (conn).
  void PassOnARequest(int* client, int* conn) {
    *client = ConnectTo(gate_.port());
    ASSERT_TRUE(SendAll(*client, kRequest));
    std::string head;
    *conn = upstream_.AcceptAndReadHead(&head);
    EXPECT_NE(head.find(std::string(ConnectionGate::kConnectionHeader) + ": "), std::string::npos)
        << head;
  }

  Upstream upstream_;
  ConnectionGate gate_{{}, [](absl::string_view) { return ProbeAnswer{200, "{}"}; }};
};

// What a process that exits right after its handlers have written their
// last bytes relies on: once Flush returns true, stopping the gate loses
// nothing civetweb wrote before it.
TEST_F(ConnectionGateTest, FlushHandsEveryWrittenByteToTheClientBeforeStop) {
  int client = -1, conn = -1;
  PassOnARequest(&client, &conn);
  std::string received;
  std::thread reader([&] { received = ReadToEnd(client); });

  const std::string payload = Payload();
  ASSERT_TRUE(SendAll(conn, payload));

  EXPECT_TRUE(gate_.Flush(absl::Now() + absl::Seconds(30)));
  gate_.Stop();  // closes the client's connection: the reader sees its end
  reader.join();
  EXPECT_EQ(received.size(), payload.size());
  EXPECT_TRUE(received == payload) << "the relayed bytes differ from the written ones";
  close(conn);
  close(client);
}

// A client that reads nothing cannot hold a flush past its deadline.
TEST_F(ConnectionGateTest, FlushGivesUpAtTheDeadlineOnAClientThatDoesNotRead) {
  int client = -1, conn = -1;
  PassOnARequest(&client, &conn);
  // Fills every buffer on the way: writes until a write 100 ms after the
  // last one that went through still finds no room.
  const std::string payload = Payload();
  size_t written = 0;
  for (int stuck = 0; stuck < 2 && written < payload.size();) {
    const ssize_t n = send(conn, payload.data() + written, payload.size() - written,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      written += static_cast<size_t>(n);
      stuck = 0;
    } else {
      ++stuck;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_LT(written, payload.size());

  const absl::Duration wait = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  EXPECT_FALSE(gate_.Flush(start + wait));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, wait);
  EXPECT_LT(took, wait + absl::Seconds(5));
  gate_.Stop();
  // A stopped gate answers at once.
  EXPECT_FALSE(gate_.Flush(absl::Now() + absl::Seconds(30)));
  close(conn);
  close(client);
}

// With nothing on its way, a flush returns within the gate's turn.
TEST_F(ConnectionGateTest, FlushOfAnIdleGateReturnsAtOnce) {
  const absl::Time start = absl::Now();
  EXPECT_TRUE(gate_.Flush(start + absl::Seconds(30)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// A gate that admits one connection per client address, in front of an
// Upstream that answers when the test says and never closes on its own:
// as civetweb does while its worker thread finishes after its last write.
class OneConnectionEachTest : public ::testing::Test {
 protected:
  static ConnectionGateOptions OneEach() {
    ConnectionGateOptions options;
    options.max_connections_per_client = 1;
    return options;
  }

  void SetUp() override {
    ASSERT_TRUE(gate_.Listen().ok());
    ASSERT_TRUE(gate_.Start(upstream_.name(), upstream_.length()).ok());
  }

  // Whether the gate passes a new connection's request on to the
  // Upstream (true) or answers it itself (false; the answer in
  // `refusal`). One of the two happens at once.
  bool Admitted(std::string* refusal) {
    const int client = ConnectTo(gate_.port());
    EXPECT_TRUE(SendAll(client, kRequest));
    pollfd p[2] = {{upstream_.fd(), POLLIN, 0}, {client, POLLIN, 0}};
    const bool passed_on = poll(p, 2, 10000) > 0 && (p[0].revents & POLLIN) != 0;
    if (passed_on) {
      std::string head;
      close(upstream_.AcceptAndReadHead(&head));
    } else {
      *refusal = ReadToEnd(client);
    }
    close(client);
    return passed_on;
  }

  // Waits until the gate counts no connection; false after 10 s.
  bool NoneCounted() {
    for (int i = 0; i < 10000 && gate_.open_connections() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return gate_.open_connections() == 0;
  }

  Upstream upstream_;
  ConnectionGate gate_{OneEach(), [](absl::string_view) { return ProbeAnswer{200, "{}"}; }};
};

constexpr char kAnswer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";

// What `verdict bench` does: one request per connection, with
// "Connection: close", the next one sent on a new connection as soon as
// the answer is read. The first connection stops counting when its answer
// has been relayed, so the next one is admitted however late civetweb
// closes its end; the gate closes its own end to civetweb then.
TEST_F(OneConnectionEachTest, AnAnsweredConnectionCloseRequestStopsCountingAtOnce) {
  const int client = ConnectTo(gate_.port());
  ASSERT_TRUE(SendAll(client, "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  std::string head;
  const int conn = upstream_.AcceptAndReadHead(&head);
  ASSERT_TRUE(SendAll(conn, kAnswer));
  EXPECT_EQ(ReadBytes(client, sizeof(kAnswer) - 1), kAnswer);
  std::string refusal;
  EXPECT_TRUE(Admitted(&refusal)) << refusal;
  // The client's connection ends after the answer, and civetweb's too.
  EXPECT_TRUE(EndsWithin(client, absl::Seconds(10)));
  EXPECT_TRUE(EndsWithin(conn, absl::Seconds(10)));
  close(conn);
  close(client);
}

// A kept-alive connection stops counting once the client closes it with
// every answer read, without waiting for civetweb's close.
TEST_F(OneConnectionEachTest, AClientsCloseAfterItsAnswersStopsTheCountAtOnce) {
  const int client = ConnectTo(gate_.port());
  ASSERT_TRUE(SendAll(client, kRequest));
  std::string head;
  const int conn = upstream_.AcceptAndReadHead(&head);
  ASSERT_TRUE(SendAll(conn, kAnswer));
  EXPECT_EQ(ReadBytes(client, sizeof(kAnswer) - 1), kAnswer);
  close(client);
  EXPECT_TRUE(NoneCounted());
  EXPECT_TRUE(EndsWithin(conn, absl::Seconds(10)));
  std::string refusal;
  EXPECT_TRUE(Admitted(&refusal)) << refusal;
  close(conn);
}

// A client that shuts its sending side while its answer is still coming
// holds the connection (and civetweb's worker): it counts until the answer
// is whole.
TEST_F(OneConnectionEachTest, AHalfClosedConnectionCountsUntilItsAnswerIsWhole) {
  const int client = ConnectTo(gate_.port());
  ASSERT_TRUE(SendAll(client, kRequest));
  shutdown(client, SHUT_WR);
  std::string head;
  const int conn = upstream_.AcceptAndReadHead(&head);
  const std::string start = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
  ASSERT_TRUE(SendAll(conn, start));
  EXPECT_EQ(ReadBytes(client, start.size()), start);
  std::string refusal;
  EXPECT_FALSE(Admitted(&refusal));
  EXPECT_NE(refusal.find("429 Too Many Requests"), std::string::npos) << refusal;
  EXPECT_EQ(gate_.open_connections(), 1);

  ASSERT_TRUE(SendAll(conn, "0\r\n\r\n"));
  EXPECT_EQ(ReadBytes(client, 5), "0\r\n\r\n");
  EXPECT_TRUE(NoneCounted());
  EXPECT_TRUE(Admitted(&refusal)) << refusal;
  close(conn);
  close(client);
}

}  // namespace
}  // namespace verdict

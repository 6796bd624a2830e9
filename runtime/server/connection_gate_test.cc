#include "runtime/server/connection_gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
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

}  // namespace
}  // namespace verdict

// How the connection gate (connection_gate.h) tells that civetweb is done
// with a connection before civetweb has closed its end: it follows the
// framing of the requests the client sends and of civetweb's answers
// (request and status lines, Content-Length, chunked bodies), without
// keeping their bytes.
//
// civetweb closes its end of a connection only once the handler's thread
// has returned, some time after the answer's last byte was written, and on
// a busy machine a client that closes as soon as it has read its answer and
// connects again is often faster. The gate counts a connection against the
// caps until the exchange says the connection is over: an answer to a
// request that asked to close (or an answer that says so) has been relayed
// whole, or the client has closed its sending side with every request it
// sent answered whole. The gate then closes its end to civetweb at once,
// so nothing more is served on a connection it no longer counts, whatever
// this framing made of the bytes.
//
// Anything this does not follow exactly (HEAD and CONNECT, upgrades, two
// lengths, a transfer coding other than chunked, answers delimited by the
// close, folded or nameless header lines, heads over 32 KiB) makes the
// exchange lost(): the gate then waits for civetweb's close, as before.
#ifndef VERDICT_RUNTIME_SERVER_HTTP_EXCHANGE_H_
#define VERDICT_RUNTIME_SERVER_HTTP_EXCHANGE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "absl/strings/string_view.h"

namespace verdict {

// The framing of one direction's HTTP/1.x messages, one after another.
class HttpMessageFramer {
 public:
  struct Message {
    bool close = false;    // the message says the connection ends after it
    bool interim = false;  // a 1xx answer: the final one is still to come
  };

  explicit HttpMessageFramer(bool requests) : requests_(requests) {}

  // Consumes the front of `bytes` up to the end of the next message, or
  // all of it if no message ends there (less once lost()); returns the
  // bytes consumed. Sets `*ended` (and `*message`) when a message ended.
  size_t Feed(absl::string_view bytes, bool* ended, Message* message);

  bool lost() const { return state_ == State::kLost; }
  // Between messages (empty lines before a request included).
  bool at_start() const { return state_ == State::kStart; }

 private:
  enum class State {
    kStart,
    kHead,
    kBody,
    kChunkSize,
    kChunkData,
    kChunkDataEnd,
    kTrailer,
    kLost
  };

  // The head in head_ is whole: sets the body's framing and `*message`.
  void TakeHead(Message* message);
  // A line of a chunked body (size or trailer) in line_ is whole.
  void TakeChunkSizeLine();

  bool requests_;  // not const: a connection gate resets its exchange
  State state_ = State::kStart;
  std::string head_;
  size_t head_scanned_ = 0;
  std::string line_;
  uint64_t remaining_ = 0;
  size_t trailer_bytes_ = 0;
  bool seen_cr_ = false;  // kChunkDataEnd: the CR of the CRLF after a chunk
  Message pending_;       // the message whose body is being read
};

// Both directions of one connection.
class HttpExchange {
 public:
  // The client's bytes, in order, from the first request passed on.
  void FromClient(absl::string_view bytes);
  // civetweb's bytes, in order.
  void FromUpstream(absl::string_view bytes);

  bool lost() const { return lost_; }
  // civetweb's bytes through the end of the last whole final answer.
  uint64_t answered_through() const { return answered_through_; }
  // The last whole answer ends the connection: its request asked to close,
  // or it said so. civetweb serves nothing after it.
  bool closing() const { return closing_; }
  // Every request received whole has its whole answer, and no request or
  // answer is partly received.
  bool idle() const;

 private:
  static constexpr size_t kMaxPipelined = 64;

  HttpMessageFramer requests_{/*requests=*/true};
  HttpMessageFramer answers_{/*requests=*/false};
  // Whole requests not answered yet, oldest first (answers come in their
  // order): whether each asked to close.
  std::deque<bool> unanswered_;
  // civetweb answered the request being received before it was whole (a
  // refusal that leaves its body unread).
  bool answered_early_ = false;
  uint64_t upstream_seen_ = 0;
  uint64_t answered_through_ = 0;
  bool closing_ = false;
  bool lost_ = false;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_SERVER_HTTP_EXCHANGE_H_

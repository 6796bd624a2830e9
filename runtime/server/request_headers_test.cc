#include "runtime/server/request_headers.h"

#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace {

TEST(CheckBodyFramingTest, OneLengthOrChunkedOrNeitherIsFine) {
  EXPECT_TRUE(CheckBodyFraming({}).ok());
  EXPECT_TRUE(CheckBodyFraming({{"Host", "x"}, {"content-length", "12"}}).ok());
  EXPECT_TRUE(CheckBodyFraming({{"Transfer-Encoding", " Chunked "}}).ok());
}

TEST(CheckBodyFramingTest, TwoLengthsAreRefusedEvenWhenEqual) {
  const absl::Status s = CheckBodyFraming({{"Content-Length", "2"}, {"CONTENT-LENGTH", "20"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "more than one Content-Length header");
  EXPECT_FALSE(CheckBodyFraming({{"Content-Length", "2"}, {"Content-Length", "2"}}).ok());
}

TEST(CheckBodyFramingTest, LengthBesideChunkedIsRefused) {
  const absl::Status s =
      CheckBodyFraming({{"Content-Length", "3"}, {"Transfer-Encoding", "chunked"}});
  EXPECT_EQ(s.message(), "both Content-Length and Transfer-Encoding");
}

TEST(CheckBodyFramingTest, OnlyASingleChunkedEncodingIsAccepted) {
  for (const char* te : {"gzip", "gzip, chunked", "chunked, gzip", "identity", ""}) {
    EXPECT_FALSE(CheckBodyFraming({{"Transfer-Encoding", te}}).ok()) << te;
  }
  EXPECT_EQ(
      CheckBodyFraming({{"Transfer-Encoding", "chunked"}, {"transfer-encoding", "chunked"}})
          .message(),
      "more than one Transfer-Encoding header");
}

TEST(BearerKeyMatchesTest, SchemeInAnyCaseAndSpacesAroundTheToken) {
  EXPECT_TRUE(BearerKeyMatches("Bearer sk-1", "sk-1"));
  EXPECT_TRUE(BearerKeyMatches("bearer sk-1", "sk-1"));
  EXPECT_TRUE(BearerKeyMatches("  BEARER    sk-1  ", "sk-1"));
}

TEST(BearerKeyMatchesTest, AnythingElseIsRefused) {
  for (const char* value : {"", "Bearer", "Bearer ", "sk-1", "Basic sk-1", "Bearer sk-", "Bearer sk-12",
                            "Bearer sk-2", "Bearer sk-1 x", "Bearersk-1", "Bearer\tsk-1"}) {
    EXPECT_FALSE(BearerKeyMatches(value, "sk-1")) << value;
  }
}

// The whole header is compared byte by byte: a NUL cannot cut the key short.
TEST(BearerKeyMatchesTest, EmbeddedNulIsPartOfTheToken) {
  EXPECT_FALSE(BearerKeyMatches(absl::string_view("Bearer sk\0-1", 12), "sk"));
}

}  // namespace
}  // namespace verdict

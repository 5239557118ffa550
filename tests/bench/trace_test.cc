// mrbench's trace format (docs/man/mrbench.1): what is accepted, and every malformed line
// rejected with its line number and the reason.
#include "bench/trace.h"

#include <cerrno>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "mrcache/errno_status.h"

namespace mrbench {
namespace {

std::string ErrorOf(absl::string_view text) {
  absl::StatusOr<Trace> t = ParseTrace(text, "t");
  EXPECT_FALSE(t.ok());
  if (t.ok()) return "";
  EXPECT_EQ(mrcache::StatusToErrno(t.status()), EINVAL);
  // ErrnoStatus appends the errno's text.
  std::string message(t.status().message());
  const std::string suffix = " (Invalid argument)";
  EXPECT_TRUE(absl::EndsWith(message, suffix)) << message;
  return message.substr(0, message.size() - suffix.size());
}

TEST(TraceParse, AcceptsAllOperationsCommentsAndBlankLines) {
  absl::StatusOr<Trace> t = ParseTrace(
      "# header\n\nalloc 1 4096\nxfer 1 0 100   # comment\n"
      "xfer 1 96 4000 1\n  free 1\n",
      "t");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->ops.size(), 4u);
  EXPECT_EQ(t->ops[0].kind, TraceOp::kAlloc);
  EXPECT_EQ(t->ops[0].length, 4096u);
  EXPECT_EQ(t->ops[1].access, kDefaultAccess);
  EXPECT_EQ(t->ops[2].offset, 96u);
  EXPECT_EQ(t->ops[2].access, 1);
  EXPECT_EQ(t->ops[3].kind, TraceOp::kFree);
  EXPECT_EQ(t->transfers(), 2u);
}

TEST(TraceParse, FormatRoundTrips) {
  absl::StatusOr<Trace> t = ParseTrace("alloc 7 100\nxfer 7 1 2 3\nxfer 7 0 100\nfree 7\n", "t");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<Trace> again = ParseTrace(FormatTrace(*t), "t");
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->ops.size(), t->ops.size());
  for (size_t i = 0; i < t->ops.size(); ++i) {
    EXPECT_EQ(again->ops[i].kind, t->ops[i].kind);
    EXPECT_EQ(again->ops[i].offset, t->ops[i].offset);
    EXPECT_EQ(again->ops[i].length, t->ops[i].length);
    EXPECT_EQ(again->ops[i].access, t->ops[i].access);
  }
}

TEST(TraceParse, RejectsUnknownOperation) {
  EXPECT_EQ(ErrorOf("alloc 1 10\nsend 1 0 10\n"),
            "t:2: unknown operation 'send' (expected alloc, free or xfer)");
}

TEST(TraceParse, RejectsWrongArgumentCount) {
  EXPECT_EQ(ErrorOf("alloc 1\n"), "t:1: 'alloc' takes alloc ID BYTES, got 1 argument(s)");
  EXPECT_EQ(ErrorOf("alloc 1 10\nfree 1 2\n"), "t:2: 'free' takes free ID, got 2 argument(s)");
  EXPECT_EQ(ErrorOf("alloc 1 10\nxfer 1 0\n"),
            "t:2: 'xfer' takes xfer ID OFFSET LENGTH [ACCESS], got 2 argument(s)");
  EXPECT_EQ(ErrorOf("alloc 1 10\nxfer 1 0 1 7 9\n"),
            "t:2: 'xfer' takes xfer ID OFFSET LENGTH [ACCESS], got 5 argument(s)");
}

TEST(TraceParse, RejectsBadNumbers) {
  EXPECT_EQ(ErrorOf("alloc x 10\n"), "t:1: bad buffer ID 'x'");
  EXPECT_EQ(ErrorOf("alloc 4294967296 10\n"), "t:1: bad buffer ID '4294967296'");
  EXPECT_EQ(ErrorOf("alloc 1 -5\n"), "t:1: bad byte count '-5'");
  EXPECT_EQ(ErrorOf("alloc 1 10\nxfer 1 a 1\n"), "t:2: bad offset 'a'");
  EXPECT_EQ(ErrorOf("alloc 1 10\nxfer 1 0 1k\n"), "t:2: bad length '1k'");
  EXPECT_EQ(ErrorOf("alloc 1 10\nxfer 1 0 1 rw\n"), "t:2: bad access 'rw'");
}

TEST(TraceParse, RejectsZeroSizes) {
  EXPECT_EQ(ErrorOf("alloc 1 0\n"), "t:1: alloc of 0 bytes");
  EXPECT_EQ(ErrorOf("alloc 1 10\nxfer 1 0 0\n"), "t:2: xfer of 0 bytes");
}

TEST(TraceParse, RejectsLifecycleErrors) {
  EXPECT_EQ(ErrorOf("alloc 1 10\nalloc 1 10\n"), "t:2: buffer 1 is already allocated");
  EXPECT_EQ(ErrorOf("free 3\n"), "t:1: free of buffer 3, which is not allocated");
  EXPECT_EQ(ErrorOf("alloc 1 10\nfree 1\nfree 1\n"),
            "t:3: free of buffer 1, which is not allocated");
  EXPECT_EQ(ErrorOf("xfer 2 0 1\n"), "t:1: xfer on buffer 2, which is not allocated");
}

TEST(TraceParse, RejectsTransferOutsideBuffer) {
  EXPECT_EQ(ErrorOf("alloc 1 10\nxfer 1 5 6\n"),
            "t:2: xfer [5, 11) is outside buffer 1 of 10 bytes");
  EXPECT_EQ(ErrorOf("alloc 1 10\nxfer 1 18446744073709551615 2\n"),
            "t:2: xfer [18446744073709551615, 1) is outside buffer 1 of 10 bytes");
}

TEST(TraceParse, RejectsInvalidAccess) {
  std::string error = ErrorOf("alloc 1 10\nxfer 1 0 1 2\n");  // REMOTE_WRITE without LOCAL_WRITE
  EXPECT_EQ(error.rfind("t:2: bad access 2: ", 0), 0u) << error;
}

TEST(TraceParse, MalformedLineMeansNoTrace) {
  absl::StatusOr<Trace> t = ParseTrace("alloc 1 10\nxfer 1 0 10\nbogus\n", "t");
  EXPECT_FALSE(t.ok());
}

TEST(TraceFile, MissingFileIsAnError) {
  absl::StatusOr<Trace> t = ReadTraceFile("/nonexistent/trace.txt");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(mrcache::StatusToErrno(t.status()), ENOENT);
}

TEST(TraceValidate, NamesTheOperationIndex) {
  Trace t;
  t.name = "w";
  t.ops.push_back({TraceOp::kFree, 4, 0, 0, 0});
  absl::Status s = ValidateTrace(t);
  EXPECT_EQ(s.message(),
            "w: operation 1: free of buffer 4, which is not allocated (Invalid argument)");
}

// Recorded traces: the shim's MRCACHE_RECORD stream (interpose/recorder.h).

constexpr char kRecorded[] =
    "# mrcache-record 1\n"
    "config max_regions=64 bridge_bytes=0 remote_keys=private\n"
    "reg 5 0x7f0000001000 8192 1\n"
    "reg 9 0x7f0000004000 100 7   # held across the release\n"
    "release 0x7f0000000000 65536\n"
    "dereg 5\n"
    "reg 5 0x7F0000001000 8192 1\n"
    "dereg 9\n";

TEST(RecordedTraceParse, AcceptsHeaderConfigAndEvents) {
  absl::StatusOr<Trace> t = ParseTrace(kRecorded, "r");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->recorded());
  EXPECT_EQ(t->recorded_config.max_regions, 64u);
  EXPECT_EQ(t->recorded_config.bridge_bytes, 0u);
  EXPECT_EQ(t->recorded_config.remote_keys, mrcache::RemoteKeys::kPrivate);
  ASSERT_EQ(t->ops.size(), 6u);
  EXPECT_EQ(t->ops[0].kind, TraceOp::kReg);
  EXPECT_EQ(t->ops[0].offset, 0x7f0000001000u);
  EXPECT_EQ(t->ops[0].length, 8192u);
  EXPECT_EQ(t->ops[0].access, 1);
  EXPECT_EQ(t->ops[2].kind, TraceOp::kRelease);
  EXPECT_EQ(t->ops[2].length, 65536u);
  EXPECT_EQ(t->transfers(), 3u);  // the registrations
}

TEST(RecordedTraceParse, RenumbersIdsSoAReusedIdIsANewRegistration) {
  absl::StatusOr<Trace> t = ParseTrace(kRecorded, "r");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ops[0].id, 1u);  // reg 5
  EXPECT_EQ(t->ops[1].id, 2u);  // reg 9
  EXPECT_EQ(t->ops[3].id, 1u);  // dereg 5
  EXPECT_EQ(t->ops[4].id, 3u);  // reg 5 again
  EXPECT_EQ(t->ops[5].id, 2u);  // dereg 9
}

TEST(RecordedTraceParse, WithoutConfigLineUsesTheLibraryDefaults) {
  absl::StatusOr<Trace> t = ParseTrace("# mrcache-record 1\nreg 1 0x1000 10 1\n", "r");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->recorded_config.max_regions, mrcache::Config().max_regions);
}

TEST(RecordedTraceParse, FormatRoundTrips) {
  absl::StatusOr<Trace> t = ParseTrace(kRecorded, "r");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<Trace> again = ParseTrace(FormatTrace(*t), "r");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->recorded());
  EXPECT_EQ(again->recorded_config.max_regions, 64u);
  ASSERT_EQ(again->ops.size(), t->ops.size());
  for (size_t i = 0; i < t->ops.size(); ++i) {
    EXPECT_EQ(again->ops[i].kind, t->ops[i].kind);
    EXPECT_EQ(again->ops[i].id, t->ops[i].id);
    EXPECT_EQ(again->ops[i].offset, t->ops[i].offset);
    EXPECT_EQ(again->ops[i].length, t->ops[i].length);
    EXPECT_EQ(again->ops[i].access, t->ops[i].access);
  }
}

TEST(RecordedTraceParse, RejectsAnUnknownVersion) {
  EXPECT_EQ(ErrorOf("# mrcache-record 2\nreg 1 0x1000 10 1\n"),
            "t:1: unsupported mrcache-record version '2' (this mrbench reads version 1)");
}

TEST(RecordedTraceParse, RejectsBadLinesNamingThem) {
  const std::string h = "# mrcache-record 1\n";
  EXPECT_EQ(ErrorOf(h + "xfer 1 0 10\n"),
            "t:2: unknown operation 'xfer' (a recorded trace has config, reg, dereg and release)");
  EXPECT_EQ(ErrorOf(h + "reg 1 0x1000 10\n"),
            "t:2: 'reg' takes reg ID ADDR LENGTH ACCESS, got 3 argument(s)");
  EXPECT_EQ(ErrorOf(h + "reg 1 4096 10 1\n"), "t:2: bad address '4096' (expected 0x...)");
  EXPECT_EQ(ErrorOf(h + "reg 1 0x10g0 10 1\n"), "t:2: bad address '0x10g0' (expected 0x...)");
  EXPECT_EQ(ErrorOf(h + "reg 1 0x11112222333344445 10 1\n"),
            "t:2: bad address '0x11112222333344445' (expected 0x...)");
  EXPECT_EQ(ErrorOf(h + "reg x 0x1000 10 1\n"), "t:2: bad registration ID 'x'");
  EXPECT_EQ(ErrorOf(h + "reg 1 0x1000 -1 1\n"), "t:2: bad length '-1'");
  EXPECT_EQ(ErrorOf(h + "reg 1 0x1000 0 1\n"), "t:2: reg of 0 bytes");
  EXPECT_EQ(ErrorOf(h + "reg 1 0xffffffffffffffff 2 1\n"),
            "t:2: reg range wraps around the address space");
  EXPECT_EQ(ErrorOf(h + "release 0x1000 0\n"), "t:2: release of 0 bytes");
  EXPECT_EQ(ErrorOf(h + "release 0x1000\n"),
            "t:2: 'release' takes release ADDR LENGTH, got 1 argument(s)");
  std::string access = ErrorOf(h + "reg 1 0x1000 10 2\n");  // REMOTE_WRITE without LOCAL_WRITE
  EXPECT_EQ(access.rfind("t:2: bad access 2: ", 0), 0u) << access;
}

TEST(RecordedTraceParse, RejectsRegistrationLifecycleErrors) {
  const std::string h = "# mrcache-record 1\n";
  EXPECT_EQ(ErrorOf(h + "reg 1 0x1000 10 1\nreg 1 0x2000 10 1\n"),
            "t:3: registration 1 is already registered");
  EXPECT_EQ(ErrorOf(h + "dereg 4\n"), "t:2: dereg of registration 4, which is not registered");
  EXPECT_EQ(ErrorOf(h + "reg 1 0x1000 10 1\ndereg 1\ndereg 1\n"),
            "t:4: dereg of registration 1, which is not registered");
}

TEST(RecordedTraceParse, RejectsBadOrMisplacedConfigLines) {
  const std::string h = "# mrcache-record 1\n";
  EXPECT_EQ(ErrorOf(h + "config max_regions\n"),
            "t:2: bad configuration entry 'max_regions' (expected KEY=VALUE)");
  std::string unknown = ErrorOf(h + "config no_such_key=1\n");
  EXPECT_EQ(unknown.rfind("t:2: ", 0), 0u) << unknown;
  EXPECT_NE(unknown.find("no_such_key"), std::string::npos) << unknown;
  EXPECT_EQ(ErrorOf(h + "config max_regions=1\nconfig max_regions=2\n"),
            "t:3: a second config line");
  EXPECT_EQ(ErrorOf(h + "release 0x1000 4096\nconfig max_regions=2\n"),
            "t:3: the config line comes after events");
}

TEST(RecordedTraceValidate, RejectsWorkloadOperationsInARecordedTrace) {
  Trace t;
  t.name = "w";
  t.recorded_version = 1;
  t.ops.push_back({TraceOp::kAlloc, 1, 0, 0, 4096});
  absl::Status s = ValidateTrace(t);
  EXPECT_EQ(s.message(),
            "w: operation 1: a workload operation in a recorded trace (Invalid argument)");
}

}  // namespace
}  // namespace mrbench

// SanitizerRuntime() finds a sanitizer runtime that the application, not
// mrcache, brought into the process: here the executable itself exports
// __msan_init (MemorySanitizer's initialisation symbol; no GCC build has a
// real one), as a sanitized application's executable or its runtime library
// does, while the monitor code is built without any sanitizer.
#include <string>

#include "gtest/gtest.h"
#include "mrcache/internal/log.h"
#include "mrcache/monitors/monitor.h"

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// Never called: only its presence in the dynamic symbol table counts.
extern "C" __attribute__((visibility("default"), used)) void __msan_init() {}
#endif

namespace mrcache {
namespace {

TEST(SanitizerDetectionTest, ARuntimeSymbolOfTheApplicationIsFound) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "built with a sanitizer: its own runtime is found first "
                  "(monitor_selection_test checks that)";
#endif
  EXPECT_EQ(SanitizerRuntime(), "MemorySanitizer");
}

void CountLine(void* arg, int level, const char* message) {
  if (std::string(message).find("monitor 'auto' includes uffd") != std::string::npos) {
    ++*static_cast<int*>(arg);
  }
}

// The only test here that acquires a monitor: the process's first `auto`
// lease logs the choice, later ones do not.
TEST(SanitizerDetectionTest, AutoThenIncludesUffdAndSaysSoOnce) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "built with a sanitizer: monitor_selection_test checks this build";
#endif
  int lines = 0;
  SetLogCallback(&CountLine, &lines);
  for (int i = 0; i < 2; ++i) {
    auto lease = AcquireMonitor("auto");
    ASSERT_TRUE(lease.ok()) << lease.status();
    const std::string name = (*lease)->name();
    EXPECT_NE(name.find("uffd"), std::string::npos) << name;
  }
  SetLogCallback(nullptr, nullptr);
  EXPECT_EQ(lines, 1);
}

}  // namespace
}  // namespace mrcache

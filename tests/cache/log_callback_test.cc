// log_callback_test.cc: mrcache's messages reach the application's callback
// instead of stderr, and a callback that drops them silences mrcache.
#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/mrcache.h"
#include "tests/cache/child_stderr.h"

namespace {

struct Captured {
  std::vector<int> levels;
  std::vector<std::string> messages;
};

void Capture(void* arg, int level, const char* message) {
  auto* c = static_cast<Captured*>(arg);
  c->levels.push_back(level);
  c->messages.push_back(message);
}

void Drop(void*, int, const char*) {}

// What the child wrote to stderr; a child that failed a check exits non-zero.
template <typename F>
std::string StderrOfChild(F body) {
  mrcache_test::ChildResult r = mrcache_test::RunInChild(body);
  EXPECT_EQ(r.exit_status, 0);
  return r.stderr_text;
}

// A bad MRCACHE_* value makes mrc_config_create fail with a message.
void CreateConfigWithBadEnvironment() {
  setenv("MRCACHE_MAX_REGIONS", "lots", 1);
  mrc_config_t* cfg = nullptr;
  if (mrc_config_create(&cfg) != EINVAL) _exit(2);
}

TEST(LogCallback, MessagesGoToTheCallbackWithTheirLevel) {
  std::string err = StderrOfChild([] {
    Captured captured;
    mrc_set_log_callback(&Capture, &captured);
    CreateConfigWithBadEnvironment();
    if (captured.messages.size() != 1 || captured.levels[0] != MRC_LOG_ERROR ||
        captured.messages[0].find("MRCACHE_MAX_REGIONS") == std::string::npos) {
      _exit(3);
    }
  });
  EXPECT_EQ(err, "");
}

TEST(LogCallback, ADroppingCallbackSilencesMrcache) {
  EXPECT_EQ(StderrOfChild([] {
              mrc_set_log_callback(&Drop, nullptr);
              CreateConfigWithBadEnvironment();
            }),
            "");
}

TEST(LogCallback, WithoutACallbackMessagesGoToStderr) {
  std::string err = StderrOfChild([] { CreateConfigWithBadEnvironment(); });
  EXPECT_NE(err.find("mrcache: "), std::string::npos) << err;
  EXPECT_NE(err.find("MRCACHE_MAX_REGIONS"), std::string::npos) << err;
}

TEST(LogCallback, ANullCallbackRestoresStderr) {
  std::string err = StderrOfChild([] {
    mrc_set_log_callback(&Drop, nullptr);
    mrc_set_log_callback(nullptr, nullptr);
    CreateConfigWithBadEnvironment();
  });
  EXPECT_NE(err.find("MRCACHE_MAX_REGIONS"), std::string::npos) << err;
}

}  // namespace

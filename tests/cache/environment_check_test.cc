// environment_check_test.cc: a misspelled MRCACHE_* variable is named in one
// warning, with the variable the user probably meant.
#include "mrcache/environment_check.h"

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "mrcache/mrcache.h"
#include "tests/cache/child_stderr.h"

namespace mrcache {
namespace {

TEST(EnvironmentCheck, KnownVariablesAreNotReported) {
  const char* env[] = {"MRCACHE_MAX_BYTES=1G",
                       "MRCACHE_MONITOR=patch",
                       "MRCACHE_STATS=1",
                       "MRCACHE_PRELOAD_LIB=/x.so",
                       "PATH=/bin",
                       nullptr};
  EXPECT_TRUE(FindUnknownVariables(env).empty());
}

TEST(EnvironmentCheck, AMisspelledVariableGetsTheClosestKnownName) {
  const char* env[] = {"MRCACHE_MAX_BYTE=1G", "MRCACHE_MONTOR=none", nullptr};
  std::vector<UnknownVariable> unknown = FindUnknownVariables(env);
  ASSERT_EQ(unknown.size(), 2u);
  EXPECT_EQ(unknown[0].name, "MRCACHE_MAX_BYTE");
  EXPECT_EQ(unknown[0].suggestion, "MRCACHE_MAX_BYTES");
  EXPECT_EQ(unknown[1].name, "MRCACHE_MONTOR");
  EXPECT_EQ(unknown[1].suggestion, "MRCACHE_MONITOR");
}

TEST(EnvironmentCheck, ANameFarFromEveryKnownOneGetsNoSuggestion) {
  const char* env[] = {"MRCACHE_COMPLETELY_DIFFERENT=1", nullptr};
  std::vector<UnknownVariable> unknown = FindUnknownVariables(env);
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0].suggestion, "");
  EXPECT_EQ(UnknownVariablesWarning(unknown),
            "ignoring unknown environment variable MRCACHE_COMPLETELY_DIFFERENT");
}

TEST(EnvironmentCheck, OtherPrefixesAreNotOurs) {
  const char* env[] = {"MRCACHEX=1", "UCX_MEMTYPE_CACHE=n", "mrcache_max_bytes=1", nullptr};
  EXPECT_TRUE(FindUnknownVariables(env).empty());
}

TEST(EnvironmentCheck, OneWarningNamesEveryUnknownVariable) {
  std::vector<UnknownVariable> unknown = {{"MRCACHE_MAX_BYTE", "MRCACHE_MAX_BYTES"},
                                          {"MRCACHE_MONTOR", "MRCACHE_MONITOR"}};
  EXPECT_EQ(UnknownVariablesWarning(unknown),
            "ignoring unknown environment variables MRCACHE_MAX_BYTE (did you mean "
            "MRCACHE_MAX_BYTES?), MRCACHE_MONTOR (did you mean MRCACHE_MONITOR?)");
}

// Through the C API, in a child whose stderr is a pipe: the warning is
// printed once however many configs are created, and the known variables
// still apply.
TEST(EnvironmentCheck, MrcConfigCreateWarnsOncePerProcess) {
  mrcache_test::ChildResult r = mrcache_test::RunInChild([] {
    setenv("MRCACHE_MAX_BYTE", "1G", 1);
    setenv("MRCACHE_MAX_REGIONS", "7", 1);
    for (int i = 0; i < 3; ++i) {
      mrc_config_t* cfg = nullptr;
      if (mrc_config_create(&cfg) != 0) _exit(2);
      char value[32];
      if (mrc_config_get(cfg, "max_regions", value, sizeof value) != 0 || std::string(value) != "7")
        _exit(3);
      mrc_config_destroy(cfg);
    }
  });
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.stderr_text,
            "mrcache: ignoring unknown environment variable MRCACHE_MAX_BYTE (did you mean "
            "MRCACHE_MAX_BYTES?)\n");
}

}  // namespace
}  // namespace mrcache

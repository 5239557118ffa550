// Config::Show and FormatSize: values written as the configuration key table
// writes them, and read back by Set unchanged.
#include <string>

#include "gtest/gtest.h"
#include "mrcache/config.h"

namespace mrcache {
namespace {

TEST(FormatSize, UsesTheLargestSuffixThatDividesExactly) {
  EXPECT_EQ(FormatSize(0), "0");
  EXPECT_EQ(FormatSize(100), "100");
  EXPECT_EQ(FormatSize(4096), "4K");
  EXPECT_EQ(FormatSize(1536 << 10), "1536K");
  EXPECT_EQ(FormatSize(size_t{128} << 20), "128M");
  EXPECT_EQ(FormatSize(size_t{1} << 30), "1G");
  EXPECT_EQ(FormatSize(size_t{3} << 40), "3T");
}

TEST(FormatSize, ParseSizeReadsItBack) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{65536},
                     (uint64_t{5} << 30) + 4096, uint64_t{1} << 50}) {
    auto parsed = ParseSize(FormatSize(v));
    ASSERT_TRUE(parsed.ok()) << v;
    EXPECT_EQ(*parsed, v);
  }
}

// A default documented as one bare value (`1G`, `16384`, `off`) is what Show
// prints for it.
TEST(ConfigShow, PrintsEveryDefaultAsTheKeyTableDocumentsIt) {
  const Config defaults;
  int compared = 0;
  for (const ConfigKeyInfo& key : Config::KeyTable()) {
    std::string doc = key.default_value;
    if (doc.size() > 2 && doc.front() == '`' && doc.back() == '`')
      doc = doc.substr(1, doc.size() - 2);
    if (doc.find_first_of(" `") != std::string::npos) continue;  // prose, not one value
    auto shown = defaults.Show(key.name);
    ASSERT_TRUE(shown.ok()) << key.name;
    EXPECT_EQ(*shown, doc) << key.name;
    ++compared;
  }
  EXPECT_GE(compared, 10);
}

TEST(ConfigShow, SetAcceptsWhatShowPrintsForEveryKey) {
  Config config;
  ASSERT_TRUE(config.Set("max_bytes", "1536K").ok());
  ASSERT_TRUE(config.Set("alignment", "2M").ok());
  for (const std::string& key : Config::Keys()) {
    auto shown = config.Show(key);
    ASSERT_TRUE(shown.ok()) << key;
    Config copy = config;
    ASSERT_TRUE(copy.Set(key, *shown).ok()) << key << "=" << *shown;
    EXPECT_EQ(*copy.Get(key), *config.Get(key)) << key;
  }
  EXPECT_EQ(*config.Show("max_bytes"), "1536K");
  EXPECT_EQ(*config.Get("max_bytes"), "1572864") << "Get keeps plain digits";
}

TEST(ConfigShow, WritesCountsAsPlainNumbersAndByteCountsWithSuffixes) {
  Config config;
  ASSERT_TRUE(config.Set("max_regions", "1024").ok());
  ASSERT_TRUE(config.Set("uring_slots", "2048").ok());
  ASSERT_TRUE(config.Set("pool_retain_bytes", "2048").ok());
  EXPECT_EQ(*config.Show("max_regions"), "1024");
  EXPECT_EQ(*config.Show("uring_slots"), "2048");
  EXPECT_EQ(*config.Show("pool_retain_bytes"), "2K");
}

TEST(ConfigShow, UnknownKeyIsNotFound) { EXPECT_FALSE(Config().Show("nope").ok()); }

}  // namespace
}  // namespace mrcache

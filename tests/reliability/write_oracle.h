// write_oracle.h: the stale-registration oracle of the race tests. A device
// write through a cached region (mrc_region_device_write; with the uring
// registrar it goes through the pinned pages) must be what the CPU then reads
// at the region's addresses: a stale registration makes the CPU miss it.
#ifndef MRCACHE_TESTS_RELIABILITY_WRITE_ORACLE_H_
#define MRCACHE_TESTS_RELIABILITY_WRITE_ORACLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/mrcache.h"

namespace mrcache {
namespace testing {

// MRCACHE_RACE_ITERATIONS if set to a positive count, else `fallback`.
inline int RaceIterations(int fallback) {
  const char* env = std::getenv("MRCACHE_RACE_ITERATIONS");
  int n = env != nullptr ? std::atoi(env) : 0;
  return n > 0 ? n : fallback;
}

// Counts what the oracle saw, across threads.
struct Tally {
  std::atomic<uint64_t> writes{0}, stale{0}, corrupted{0}, failures{0};
};

// Gets [addr, addr + len) from `cache` with `access`, device-writes `len`
// bytes of `seed`'s pattern at its start, checks them with the CPU, puts.
// False if the CPU missed them. A failed get or write is a test failure,
// counted in tally->failures.
inline bool WriteThroughCache(mrc_cache_t* cache, char* addr, size_t len, int access, uint32_t seed,
                              Tally* tally) {
  mrc_region_t* r = nullptr;
  int rc = mrc_get(cache, addr, len, access, &r);
  if (rc != 0) {
    ++tally->failures;
    ADD_FAILURE() << "mrc_get: " << mrc_strerror(rc);
    return true;
  }
  mrc_region_info_t info;
  mrc_region_info(r, &info);
  std::vector<unsigned char> pattern(len);
  std::mt19937 rng(seed);
  for (auto& b : pattern) b = static_cast<unsigned char>(rng());
  size_t offset = static_cast<size_t>(addr - static_cast<char*>(info.addr));
  rc = mrc_region_device_write(cache, r, offset, pattern.data(), len);
  bool seen = true;
  if (rc != 0) {
    ++tally->failures;
    ADD_FAILURE() << "device write: " << mrc_strerror(rc);
  } else {
    ++tally->writes;
    seen = std::memcmp(addr, pattern.data(), len) == 0;
    if (!seen) ++tally->stale;
  }
  EXPECT_EQ(mrc_put(cache, r), 0);
  return seen;
}

}  // namespace testing
}  // namespace mrcache

#endif  // MRCACHE_TESTS_RELIABILITY_WRITE_ORACLE_H_

// bad_input_catalogue_test.cc: every bad input of the C API and its errno.
//
// One table: each row names a misuse of mrcache.h (null pointers, zero or
// overflowing lengths, unknown or inconsistent access bits, unknown config
// keys and values, double put, device writes out of range, verbs without a
// protection domain, memory that cannot be pinned, ...) and the errno the
// API must return for it. The test runs every row, checks the errno, checks
// that nothing leaked (registrations == deregistrations on the caches used),
// and prints the table as markdown lines:
//   RELIABILITY bad_input | <input> | <errno> |
//   RELIABILITY bad_inputs tried=N matched=M
// docs/RELIABILITY.md carries that table.
#define _GNU_SOURCE 1
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/mrcache.h"

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr int kLW = 1, kRW = 2, kRR = 4, kRA = 8, kOnDemand = 64;

struct Row {
  std::string input;
  int expected;
  std::function<int()> run;
};

std::string ErrnoName(int err) {
  if (err == 0) return "0 (success)";
  const char* n = strerrorname_np(err);
  return n != nullptr ? n : std::to_string(err);
}

class BadInputCatalogue : public ::testing::Test {
 protected:
  void SetUp() override {
    buf_ = static_cast<char*>(
        mmap(nullptr, 8 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(buf_, MAP_FAILED);
    readonly_ =
        static_cast<char*>(mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(readonly_, MAP_FAILED);
    sim_ = MakeCache("sim");
    other_ = MakeCache("sim");
    uring_ = MakeCache("uring");
    // A first get attaches this thread to each cache, which maps a one-page
    // table of its own (mrcache/core/thread_cache.h): do it now, so that the
    // table cannot land in the hole below.
    for (mrc_cache_t* c : {sim_, other_, uring_}) {
      mrc_region_t* r = nullptr;
      ASSERT_EQ(mrc_get(c, buf_, kPage, kLW, &r), 0);
      ASSERT_EQ(mrc_put(c, r), 0);
      ASSERT_EQ(mrc_flush(c), 0);
    }
    // Last, so that no mapping made above reuses it: the middle page of three.
    char* three = static_cast<char*>(
        mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(three, MAP_FAILED);
    hole_ = three + kPage;
    ASSERT_EQ(munmap(hole_, kPage), 0);
  }

  void TearDown() override {
    for (mrc_cache_t* c : {sim_, other_, uring_}) {
      if (c == nullptr) continue;
      mrc_flush(c);
      mrc_stats_t s;
      mrc_stats(c, &s);
      EXPECT_EQ(s.regions, 0u) << "a region is still held after the catalogue";
      EXPECT_EQ(s.registrations, s.deregistrations);
      mrc_cache_destroy(c);
    }
    munmap(buf_, 8 * kPage);
    munmap(readonly_, kPage);
    munmap(hole_ - kPage, 3 * kPage);
  }

  mrc_cache_t* MakeCache(const char* registrar) {
    mrc_config_t* cfg = nullptr;
    EXPECT_EQ(mrc_config_create(&cfg), 0);
    EXPECT_EQ(mrc_config_set(cfg, "registrar", registrar), 0);
    EXPECT_EQ(mrc_config_set(cfg, "monitor", "none"), 0);
    mrc_cache_t* cache = nullptr;
    int err = mrc_cache_create(cfg, nullptr, &cache);
    mrc_config_destroy(cfg);
    EXPECT_EQ(err, 0) << registrar;
    return cache;
  }

  // mrc_get followed by mrc_put when it succeeds; the errno of the get.
  static int GetPut(mrc_cache_t* cache, void* addr, size_t len, int access) {
    mrc_region_t* r = nullptr;
    int err = mrc_get(cache, addr, len, access, &r);
    if (err == 0) {
      EXPECT_EQ(mrc_put(cache, r), 0);
    }
    return err;
  }

  // Sets one key on a fresh config; the errno of mrc_config_set.
  static int SetKey(const char* key, const char* value) {
    mrc_config_t* cfg = nullptr;
    EXPECT_EQ(mrc_config_create(&cfg), 0);
    int err = mrc_config_set(cfg, key, value);
    mrc_config_destroy(cfg);
    return err;
  }

  // Device write through a held region of the given cache.
  static int DeviceWrite(mrc_cache_t* cache, void* addr, size_t offset, const void* src,
                         size_t len) {
    mrc_region_t* r = nullptr;
    EXPECT_EQ(mrc_get(cache, addr, kPage, kLW, &r), 0);
    int err = mrc_region_device_write(cache, r, offset, src, len);
    EXPECT_EQ(mrc_put(cache, r), 0);
    return err;
  }

  std::vector<Row> Catalogue();

  char* buf_ = nullptr;
  char* hole_ = nullptr;
  char* readonly_ = nullptr;
  mrc_cache_t* sim_ = nullptr;
  mrc_cache_t* other_ = nullptr;
  mrc_cache_t* uring_ = nullptr;
};

int NoopReg(void*, void*, size_t, int, uint64_t* h, uint32_t* l, uint32_t* r) {
  *h = 1;
  *l = *r = 1;
  return 0;
}
int NoopDereg(void*, uint64_t) { return 0; }

std::vector<Row> BadInputCatalogue::Catalogue() {
  char* b = buf_;
  mrc_cache_t* sim = sim_;
  mrc_cache_t* other = other_;
  mrc_cache_t* uring = uring_;
  char* hole = hole_;
  char* ro = readonly_;
  const char src[16] = "device bytes";
  std::vector<Row> rows = {
      // ---- configuration ----
      {"mrc_config_create(NULL)", EINVAL, [] { return mrc_config_create(nullptr); }},
      {"mrc_config_set(NULL config)", EINVAL,
       [] { return mrc_config_set(nullptr, "max_regions", "1"); }},
      {"mrc_config_set(key NULL)", EINVAL, [] { return SetKey(nullptr, "1"); }},
      {"mrc_config_set(value NULL)", EINVAL, [] { return SetKey("max_regions", nullptr); }},
      {"mrc_config_set unknown key \"max_region\"", EINVAL,
       [] { return SetKey("max_region", "1"); }},
      {"mrc_config_set max_regions \"many\"", EINVAL, [] { return SetKey("max_regions", "many"); }},
      {"mrc_config_set max_regions \"-1\"", EINVAL, [] { return SetKey("max_regions", "-1"); }},
      {"mrc_config_set max_regions \"\" (empty)", EINVAL, [] { return SetKey("max_regions", ""); }},
      {"mrc_config_set max_bytes \"12Q\"", EINVAL, [] { return SetKey("max_bytes", "12Q"); }},
      {"mrc_config_set max_bytes \"99999999999999999999\" (overflow)", EINVAL,
       [] { return SetKey("max_bytes", "99999999999999999999"); }},
      {"mrc_config_set alignment \"3000\" (not a power of two)", EINVAL,
       [] { return SetKey("alignment", "3000"); }},
      {"mrc_config_set alignment \"4\" (below the minimum of 8)", EINVAL,
       [] { return SetKey("alignment", "4"); }},
      {"mrc_config_set registrar \"nic\"", EINVAL, [] { return SetKey("registrar", "nic"); }},
      {"mrc_config_set monitor \"bogus\"", EINVAL, [] { return SetKey("monitor", "bogus"); }},
      {"mrc_config_set odp \"sometimes\"", EINVAL, [] { return SetKey("odp", "sometimes"); }},
      {"mrc_config_set remote_keys \"public\"", EINVAL,
       [] { return SetKey("remote_keys", "public"); }},
      {"mrc_config_set sim_mlock \"2\"", EINVAL, [] { return SetKey("sim_mlock", "2"); }},
      {"mrc_config_get unknown key", ENOENT,
       [] {
         mrc_config_t* cfg;
         mrc_config_create(&cfg);
         char buf[64];
         int err = mrc_config_get(cfg, "nope", buf, sizeof buf);
         mrc_config_destroy(cfg);
         return err;
       }},
      {"mrc_config_get buffer too small", ERANGE,
       [] {
         mrc_config_t* cfg;
         mrc_config_create(&cfg);
         char buf[2];
         int err = mrc_config_get(cfg, "max_regions", buf, sizeof buf);
         mrc_config_destroy(cfg);
         return err;
       }},
      {"mrc_config_get(buf NULL)", EINVAL,
       [] {
         mrc_config_t* cfg;
         mrc_config_create(&cfg);
         int err = mrc_config_get(cfg, "max_regions", nullptr, 8);
         mrc_config_destroy(cfg);
         return err;
       }},
      {"MRCACHE_MAX_REGIONS=lots in the environment, then mrc_config_create", EINVAL,
       [] {
         setenv("MRCACHE_MAX_REGIONS", "lots", 1);
         mrc_config_t* cfg = nullptr;
         int err = mrc_config_create(&cfg);
         unsetenv("MRCACHE_MAX_REGIONS");
         if (err == 0) mrc_config_destroy(cfg);
         return err;
       }},
      // ---- cache creation ----
      {"mrc_cache_create(cache out NULL)", EINVAL,
       [] { return mrc_cache_create(nullptr, nullptr, nullptr); }},
      {"mrc_cache_create registrar=verbs without an ibv_pd", EINVAL,
       [] {
         mrc_config_t* cfg;
         mrc_config_create(&cfg);
         mrc_config_set(cfg, "registrar", "verbs");
         mrc_config_set(cfg, "monitor", "none");
         mrc_cache_t* c = nullptr;
         int err = mrc_cache_create(cfg, nullptr, &c);
         mrc_config_destroy(cfg);
         if (err == 0) mrc_cache_destroy(c);
         return err;
       }},
      {"mrc_cache_create registrar=uring odp=explicit (no ODP support)", ENOTSUP,
       [] {
         mrc_config_t* cfg;
         mrc_config_create(&cfg);
         mrc_config_set(cfg, "registrar", "uring");
         mrc_config_set(cfg, "odp", "explicit");
         mrc_cache_t* c = nullptr;
         int err = mrc_cache_create(cfg, nullptr, &c);
         mrc_config_destroy(cfg);
         if (err == 0) mrc_cache_destroy(c);
         return err;
       }},
      {"mrc_cache_create_custom(ops NULL)", EINVAL,
       [] {
         mrc_cache_t* c = nullptr;
         int err = mrc_cache_create_custom(nullptr, nullptr, nullptr, &c);
         if (err == 0) mrc_cache_destroy(c);
         return err;
       }},
      {"mrc_cache_create_custom(ops->dereg NULL)", EINVAL,
       [] {
         mrc_registrar_ops_t ops{NoopReg, nullptr};
         mrc_cache_t* c = nullptr;
         int err = mrc_cache_create_custom(nullptr, &ops, nullptr, &c);
         if (err == 0) mrc_cache_destroy(c);
         return err;
       }},
      {"mrc_cache_create_custom(cache out NULL)", EINVAL,
       [] {
         mrc_registrar_ops_t ops{NoopReg, NoopDereg};
         return mrc_cache_create_custom(nullptr, &ops, nullptr, nullptr);
       }},
      // ---- get ----
      {"mrc_get(cache NULL)", EINVAL,
       [b] {
         mrc_region_t* r;
         return mrc_get(nullptr, b, kPage, kLW, &r);
       }},
      {"mrc_get(region out NULL)", EINVAL,
       [sim, b] { return mrc_get(sim, b, kPage, kLW, nullptr); }},
      {"mrc_get length 0", EINVAL, [sim, b] { return GetPut(sim, b, 0, kLW); }},
      {"mrc_get addr + length overflows", EINVAL,
       [sim, b] { return GetPut(sim, b, SIZE_MAX - 10, kLW); }},
      {"mrc_get range ends in the last page of the address space", EINVAL,
       [sim] { return GetPut(sim, reinterpret_cast<void*>(UINTPTR_MAX - 100), 50, kLW); }},
      {"mrc_get unknown access bit 1<<29", EINVAL,
       [sim, b] { return GetPut(sim, b, kPage, kLW | (1 << 29)); }},
      {"mrc_get negative access", EINVAL, [sim, b] { return GetPut(sim, b, kPage, -1); }},
      {"mrc_get REMOTE_WRITE without LOCAL_WRITE", EINVAL,
       [sim, b] { return GetPut(sim, b, kPage, kRW); }},
      {"mrc_get REMOTE_ATOMIC without LOCAL_WRITE", EINVAL,
       [sim, b] { return GetPut(sim, b, kPage, kRA | kRR); }},
      {"mrc_get addr NULL (page 0)", EFAULT, [sim] { return GetPut(sim, nullptr, kPage, kLW); }},
      {"mrc_get unmapped memory", EFAULT, [sim, hole] { return GetPut(sim, hole, kPage, kLW); }},
      {"mrc_get range running into unmapped memory", EFAULT,
       [sim, hole] { return GetPut(sim, hole - 100, 200, kLW); }},
      {"mrc_get kernel address", EFAULT,
       [sim] { return GetPut(sim, reinterpret_cast<void*>(0xffff880000000000ull), kPage, kLW); }},
      {"mrc_get (uring) unmapped memory", EFAULT,
       [uring, hole] { return GetPut(uring, hole, kPage, kLW); }},
      {"mrc_get (uring) read-only memory (pinned for writing)", EFAULT,
       [uring, ro] { return GetPut(uring, ro, kPage, kLW); }},
      {"mrc_get (uring) IBV_ACCESS_ON_DEMAND (no ODP)", ENOTSUP,
       [uring, b] { return GetPut(uring, b, kPage, kLW | kOnDemand); }},
      // ---- put ----
      {"mrc_put(cache NULL)", EINVAL,
       [sim, b] {
         mrc_region_t* r;
         EXPECT_EQ(mrc_get(sim, b, kPage, kLW, &r), 0);
         int err = mrc_put(nullptr, r);
         EXPECT_EQ(mrc_put(sim, r), 0);
         return err;
       }},
      {"mrc_put(region NULL)", EINVAL, [sim] { return mrc_put(sim, nullptr); }},
      {"mrc_put twice (double put)", EINVAL,
       [sim, b] {
         mrc_region_t* r;
         EXPECT_EQ(mrc_get(sim, b, kPage, kLW, &r), 0);
         EXPECT_EQ(mrc_put(sim, r), 0);
         return mrc_put(sim, r);  // still cached (unused): detected, not freed memory
       }},
      {"mrc_put to another cache", EINVAL,
       [sim, other, b] {
         mrc_region_t* r;
         EXPECT_EQ(mrc_get(sim, b, kPage, kLW, &r), 0);
         int err = mrc_put(other, r);
         EXPECT_EQ(mrc_put(sim, r), 0);
         return err;
       }},
      // ---- invalidate, flush, callbacks ----
      {"mrc_invalidate(cache NULL)", EINVAL, [b] { return mrc_invalidate(nullptr, b, kPage); }},
      {"mrc_invalidate length 0", EINVAL, [sim, b] { return mrc_invalidate(sim, b, 0); }},
      {"mrc_invalidate addr + length overflows", EINVAL,
       [sim, b] { return mrc_invalidate(sim, b, SIZE_MAX); }},
      {"mrc_flush(NULL)", EINVAL, [] { return mrc_flush(nullptr); }},
      {"mrc_set_retire_callback(cache NULL)", EINVAL,
       [] { return mrc_set_retire_callback(nullptr, nullptr, nullptr); }},
      // ---- device writes ----
      {"mrc_region_device_write(cache NULL)", EINVAL,
       [sim, b, &src] {
         mrc_region_t* r;
         EXPECT_EQ(mrc_get(sim, b, kPage, kLW, &r), 0);
         int err = mrc_region_device_write(nullptr, r, 0, src, 4);
         EXPECT_EQ(mrc_put(sim, r), 0);
         return err;
       }},
      {"mrc_region_device_write(region NULL)", EINVAL,
       [sim, &src] { return mrc_region_device_write(sim, nullptr, 0, src, 4); }},
      {"mrc_region_device_write(src NULL)", EINVAL,
       [sim, b] { return DeviceWrite(sim, b, 0, nullptr, 4); }},
      {"mrc_region_device_write offset past the region", EINVAL,
       [sim, b, &src] { return DeviceWrite(sim, b, 2 * kPage, src, 1); }},
      {"mrc_region_device_write offset + length past the region", EINVAL,
       [sim, b, &src] { return DeviceWrite(sim, b, kPage - 2, src, 4); }},
      {"mrc_region_device_write offset + length overflows", EINVAL,
       [sim, b, &src] { return DeviceWrite(sim, b, 8, src, SIZE_MAX - 4); }},
      {"mrc_region_device_write (uring) offset + length past the region", EINVAL,
       [uring, b, &src] { return DeviceWrite(uring, b, kPage, src, 1); }},
  };
  return rows;
}

TEST_F(BadInputCatalogue, EveryBadInputGetsItsErrno) {
  std::vector<Row> rows = Catalogue();
  int matched = 0;
  for (const Row& row : rows) {
    int got = row.run();
    EXPECT_EQ(ErrnoName(got), ErrnoName(row.expected)) << row.input;
    if (got == row.expected) ++matched;
    std::printf("RELIABILITY bad_input | %s | %s |\n", row.input.c_str(), ErrnoName(got).c_str());
  }
  std::printf("RELIABILITY bad_inputs tried=%zu matched=%d\n", rows.size(), matched);
}

// Functions that return nothing tolerate null arguments.
TEST_F(BadInputCatalogue, VoidFunctionsIgnoreNullArguments) {
  mrc_stats(nullptr, nullptr);
  mrc_stats_t s;
  mrc_stats(nullptr, &s);
  mrc_region_info(nullptr, nullptr);
  mrc_region_info_t info;
  std::memset(&info, 0xab, sizeof info);
  mrc_region_info(nullptr, &info);
  EXPECT_EQ(info.addr, nullptr);
  EXPECT_EQ(info.length, 0u);
  mrc_config_destroy(nullptr);
  mrc_cache_destroy(nullptr);
  EXPECT_EQ(mrc_region_handle(nullptr), 0u);
  EXPECT_NE(mrc_strerror(EINVAL), nullptr);
  EXPECT_NE(mrc_strerror(123456), nullptr);
}

}  // namespace

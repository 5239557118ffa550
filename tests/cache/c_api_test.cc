// c_api_test.cc: the C API (mrcache.h) as runtimes use it: custom registrar
// callbacks, configuration keys, errors, and the stale-registration oracle on
// the uring registrar.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/mrcache.h"
#include "mrcache/registrars/uring_registrar.h"

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr int kRW = 1 | 2 | 4;  // IBV_ACCESS_LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ

// A runtime's registrar: allocates a record per registration and counts.
struct Runtime {
  int regs = 0;
  int deregs = 0;
  std::set<uint64_t> live;
};

int RuntimeReg(void* ctx, void* addr, size_t length, int access, uint64_t* handle, uint32_t* lkey,
               uint32_t* rkey) {
  auto* rt = static_cast<Runtime*>(ctx);
  auto* record = new std::vector<char>(64);  // allocation inside the callback
  *handle = reinterpret_cast<uint64_t>(record);
  *lkey = 100 + rt->regs;
  *rkey = 200 + rt->regs;
  rt->regs++;
  rt->live.insert(*handle);
  return 0;
}

int RuntimeDereg(void* ctx, uint64_t handle) {
  auto* rt = static_cast<Runtime*>(ctx);
  if (rt->live.erase(handle) != 1) return EINVAL;
  delete reinterpret_cast<std::vector<char>*>(handle);
  rt->deregs++;
  return 0;
}

class CApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(mrc_config_create(&cfg_), 0);
    ASSERT_EQ(mrc_config_set(cfg_, "monitor", "none"), 0);
    buf_ = static_cast<char*>(
        mmap(nullptr, 16 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(buf_, MAP_FAILED);
  }
  void TearDown() override {
    mrc_config_destroy(cfg_);
    munmap(buf_, 16 * kPage);
  }
  mrc_config_t* cfg_ = nullptr;
  char* buf_ = nullptr;
};

TEST_F(CApiTest, CustomRegistrarCallbacksRegisterOnceAndDeregisterAtDestroy) {
  Runtime rt;
  mrc_registrar_ops_t ops = {RuntimeReg, RuntimeDereg};
  mrc_cache_t* cache = nullptr;
  ASSERT_EQ(mrc_cache_create_custom(cfg_, &ops, &rt, &cache), 0);
  mrc_region_t* r = nullptr;
  ASSERT_EQ(mrc_get(cache, buf_, 100, kRW, &r), 0);
  mrc_region_info_t info;
  mrc_region_info(r, &info);
  EXPECT_EQ(info.addr, buf_);
  EXPECT_EQ(info.lkey, 100u);
  EXPECT_EQ(info.rkey, 200u);
  EXPECT_EQ(mrc_region_handle(r), *rt.live.begin());
  ASSERT_EQ(mrc_put(cache, r), 0);
  ASSERT_EQ(mrc_get(cache, buf_ + 10, 10, kRW, &r), 0);
  ASSERT_EQ(mrc_put(cache, r), 0);
  EXPECT_EQ(rt.regs, 1);
  mrc_stats_t st;
  mrc_stats(cache, &st);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.regions, 1u);
  mrc_cache_destroy(cache);
  EXPECT_EQ(rt.deregs, rt.regs);
  EXPECT_TRUE(rt.live.empty());
}

TEST_F(CApiTest, CustomRegistrarErrorIsReturnedAsErrno) {
  mrc_registrar_ops_t ops = {
      [](void*, void*, size_t, int, uint64_t*, uint32_t*, uint32_t*) { return ENOSPC; },
      [](void*, uint64_t) { return 0; }};
  mrc_cache_t* cache = nullptr;
  ASSERT_EQ(mrc_cache_create_custom(cfg_, &ops, nullptr, &cache), 0);
  mrc_region_t* r = nullptr;
  EXPECT_EQ(mrc_get(cache, buf_, 100, kRW, &r), ENOSPC);
  mrc_cache_destroy(cache);
}

TEST_F(CApiTest, CustomRegistrarWithoutCallbacksIsEinval) {
  mrc_registrar_ops_t ops = {nullptr, nullptr};
  mrc_cache_t* cache = nullptr;
  EXPECT_EQ(mrc_cache_create_custom(cfg_, &ops, nullptr, &cache), EINVAL);
  EXPECT_EQ(mrc_cache_create_custom(cfg_, nullptr, nullptr, &cache), EINVAL);
}

TEST_F(CApiTest, UnknownConfigKeyIsEinval) {
  EXPECT_EQ(mrc_config_set(cfg_, "no_such_key", "1"), EINVAL);
}

TEST_F(CApiTest, BadConfigValuesAreEinval) {
  EXPECT_EQ(mrc_config_set(cfg_, "max_regions", "many"), EINVAL);
  EXPECT_EQ(mrc_config_set(cfg_, "alignment", "3000"), EINVAL);
  EXPECT_EQ(mrc_config_set(cfg_, "registrar", "magic"), EINVAL);
  EXPECT_EQ(mrc_config_set(cfg_, "odp", "sometimes"), EINVAL);
  EXPECT_EQ(mrc_config_set(cfg_, "monitor", "psychic"), EINVAL);
}

TEST_F(CApiTest, ConfigKeysRoundTrip) {
  ASSERT_EQ(mrc_config_set(cfg_, "max_bytes", "64M"), 0);
  char buf[32];
  ASSERT_EQ(mrc_config_get(cfg_, "max_bytes", buf, sizeof buf), 0);
  EXPECT_STREQ(buf, "67108864");
  EXPECT_EQ(mrc_config_get(cfg_, "nope", buf, sizeof buf), ENOENT);
  EXPECT_EQ(mrc_config_get(cfg_, "max_bytes", buf, 2), ERANGE);
}

TEST_F(CApiTest, EnvironmentSetsDefaults) {
  setenv("MRCACHE_MAX_REGIONS", "77", 1);
  mrc_config_t* cfg = nullptr;
  ASSERT_EQ(mrc_config_create(&cfg), 0);
  char buf[32];
  ASSERT_EQ(mrc_config_get(cfg, "max_regions", buf, sizeof buf), 0);
  EXPECT_STREQ(buf, "77");
  mrc_config_destroy(cfg);
  unsetenv("MRCACHE_MAX_REGIONS");
}

TEST_F(CApiTest, BadEnvironmentValueFailsConfigCreate) {
  setenv("MRCACHE_MAX_BYTES", "lots", 1);
  mrc_config_t* cfg = nullptr;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(mrc_config_create(&cfg), EINVAL);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("MRCACHE_MAX_BYTES"), std::string::npos) << err;
  unsetenv("MRCACHE_MAX_BYTES");
}

TEST_F(CApiTest, NullArgumentsAreEinval) {
  mrc_region_t* r = nullptr;
  EXPECT_EQ(mrc_get(nullptr, buf_, 1, kRW, &r), EINVAL);
  EXPECT_EQ(mrc_put(nullptr, r), EINVAL);
  EXPECT_EQ(mrc_invalidate(nullptr, buf_, 1), EINVAL);
  EXPECT_EQ(mrc_flush(nullptr), EINVAL);
  EXPECT_EQ(mrc_cache_create(cfg_, nullptr, nullptr), EINVAL);
  EXPECT_EQ(mrc_config_set(nullptr, "max_bytes", "1"), EINVAL);
}

TEST_F(CApiTest, VerbsRegistrarWithoutPdIsEinval) {
  ASSERT_EQ(mrc_config_set(cfg_, "registrar", "verbs"), 0);
  mrc_cache_t* cache = nullptr;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(mrc_cache_create(cfg_, nullptr, &cache), EINVAL);
  ::testing::internal::GetCapturedStderr();
}

TEST_F(CApiTest, StrerrorDescribesEveryReturnedErrno) {
  for (int err : {0, EINVAL, ENOMEM, EAGAIN, EFAULT, ENOTSUP, ECHILD, EBUSY}) {
    ASSERT_NE(mrc_strerror(err), nullptr);
    EXPECT_GT(std::strlen(mrc_strerror(err)), 5u);
  }
}

// The oracle (docs/ARCHITECTURE.md): after munmap + mmap at the same address,
// a device write through a stale registration lands in the old pages. After
// mrc_invalidate, the cache must hand out a fresh registration whose device
// write the CPU sees.
TEST_F(CApiTest, UringDeviceWriteAfterInvalidateIsVisibleToTheCpu) {
  if (!mrcache::UringAvailable()) GTEST_SKIP() << "io_uring unavailable";
  ASSERT_EQ(mrc_config_set(cfg_, "registrar", "uring"), 0);
  mrc_cache_t* cache = nullptr;
  ASSERT_EQ(mrc_cache_create(cfg_, nullptr, &cache), 0);
  char* p = static_cast<char*>(
      mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  mrc_region_t* r = nullptr;
  ASSERT_EQ(mrc_get(cache, p, kPage, kRW, &r), 0);
  ASSERT_EQ(mrc_put(cache, r), 0);

  // Memory goes away and comes back at the same address.
  ASSERT_EQ(munmap(p, kPage), 0);
  ASSERT_EQ(mrc_invalidate(cache, p, kPage), 0);
  ASSERT_EQ(mmap(p, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            p);

  ASSERT_EQ(mrc_get(cache, p, kPage, kRW, &r), 0);
  const char msg[] = "written by the device";
  ASSERT_EQ(mrc_region_device_write(cache, r, 0, msg, sizeof msg), 0);
  EXPECT_STREQ(p, msg) << "the device wrote through a stale registration";
  ASSERT_EQ(mrc_put(cache, r), 0);
  mrc_stats_t st;
  mrc_stats(cache, &st);
  EXPECT_EQ(st.invalidations, 1u);
  mrc_cache_destroy(cache);
  munmap(p, kPage);
}

TEST_F(CApiTest, UringDeviceWriteWithoutInvalidateIsStale) {
  // The same sequence without mrc_invalidate (monitor "none"): the cache
  // cannot know, and the oracle detects the stale write. This is what the
  // monitors exist for.
  if (!mrcache::UringAvailable()) GTEST_SKIP() << "io_uring unavailable";
  ASSERT_EQ(mrc_config_set(cfg_, "registrar", "uring"), 0);
  mrc_cache_t* cache = nullptr;
  ASSERT_EQ(mrc_cache_create(cfg_, nullptr, &cache), 0);
  char* p = static_cast<char*>(
      mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  mrc_region_t* r = nullptr;
  ASSERT_EQ(mrc_get(cache, p, kPage, kRW, &r), 0);
  ASSERT_EQ(mrc_put(cache, r), 0);
  ASSERT_EQ(munmap(p, kPage), 0);
  ASSERT_EQ(mmap(p, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            p);
  ASSERT_EQ(mrc_get(cache, p, kPage, kRW, &r), 0);
  const char msg[] = "lost";
  ASSERT_EQ(mrc_region_device_write(cache, r, 0, msg, sizeof msg), 0);
  EXPECT_EQ(p[0], 0) << "expected the stale write to miss the new mapping";
  ASSERT_EQ(mrc_put(cache, r), 0);
  mrc_cache_destroy(cache);
  munmap(p, kPage);
}

TEST_F(CApiTest, DeviceWriteOutsideTheRegionIsEinval) {
  ASSERT_EQ(mrc_config_set(cfg_, "registrar", "sim"), 0);
  mrc_cache_t* cache = nullptr;
  ASSERT_EQ(mrc_cache_create(cfg_, nullptr, &cache), 0);
  mrc_region_t* r = nullptr;
  ASSERT_EQ(mrc_get(cache, buf_, kPage, kRW, &r), 0);
  char c = 1;
  EXPECT_EQ(mrc_region_device_write(cache, r, kPage, &c, 1), EINVAL);
  ASSERT_EQ(mrc_put(cache, r), 0);
  mrc_cache_destroy(cache);
}

TEST_F(CApiTest, ChildAfterForkNeverUsesTheParentsRegistrations) {
  ASSERT_EQ(mrc_config_set(cfg_, "registrar", "sim"), 0);
  mrc_cache_t* cache = nullptr;
  ASSERT_EQ(mrc_cache_create(cfg_, nullptr, &cache), 0);
  mrc_region_t* r = nullptr;
  ASSERT_EQ(mrc_get(cache, buf_, kPage, kRW, &r), 0);
  ASSERT_EQ(mrc_put(cache, r), 0);
  pid_t pid = fork();
  if (pid == 0) {
    mrc_region_t* child = nullptr;
    int err = mrc_get(cache, buf_, kPage, kRW, &child);
    _exit(err == ECHILD ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child got a parent registration";
  ASSERT_EQ(mrc_get(cache, buf_, kPage, kRW, &r), 0) << "the parent is unaffected";
  ASSERT_EQ(mrc_put(cache, r), 0);
  mrc_cache_destroy(cache);
}

}  // namespace

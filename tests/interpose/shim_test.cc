// The behaviour of libmrcache_preload.so as an application sees it, against
// softverbs. run_with_shim.sh preloads the shim before running this binary.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "interpose/preload.h"
#include "tests/interpose/shim_fixture.h"
#include "tests/softverbs/softverbs_client.h"

namespace {

using shim_test::ShimTest;

TEST_F(ShimTest, ShimCachesWithAMemoryMonitor) {
  ibv_mr* mr = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);  // creates the shim
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(Stats().enabled, 1u) << "no memory monitor could be installed: caching is off";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(ShimTest, RepeatedRegistrationOfABufferReachesTheDeviceOnce) {
  const uint64_t regs = DeviceRegistrations();
  for (int i = 0; i < 100; ++i) {
    ibv_mr* mr = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
  }
  EXPECT_EQ(DeviceRegistrations() - regs, 1u);
}

TEST_F(ShimTest, AliasCarriesTheRequestedRangeAndTheCachedKeys) {
  ibv_mr* whole = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* part = ibv_reg_mr(pd_, buf_ + 100, 1000, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(whole, nullptr);
  ASSERT_NE(part, nullptr);
  EXPECT_NE(whole, part);
  EXPECT_EQ(part->addr, buf_ + 100);
  EXPECT_EQ(part->length, 1000u);
  EXPECT_EQ(part->pd, pd_);
  EXPECT_EQ(part->context, ctx_);
  EXPECT_EQ(part->lkey, whole->lkey);
  EXPECT_EQ(part->rkey, whole->rkey);
  EXPECT_TRUE(WriteLands(part, buf_ + 100));
  EXPECT_EQ(ibv_dereg_mr(part), 0);
  EXPECT_EQ(ibv_dereg_mr(whole), 0);
}

TEST_F(ShimTest, EveryRegistrationEntryPointIsOneCacheLookup) {
  volatile int runtime_flags = IBV_ACCESS_LOCAL_WRITE;  // makes ibv_reg_mr call ibv_reg_mr_iova2
  const mrcache_preload_stats s0 = Stats();
  ibv_mr* mrs[] = {
      ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE),
      ibv_reg_mr(pd_, buf_, kBytes, runtime_flags),
      ibv_reg_mr_iova(pd_, buf_, kBytes, reinterpret_cast<uintptr_t>(buf_), IBV_ACCESS_LOCAL_WRITE),
      ibv_reg_mr_iova2(pd_, buf_, kBytes, reinterpret_cast<uintptr_t>(buf_),
                       IBV_ACCESS_LOCAL_WRITE),
  };
  const mrcache_preload_stats s1 = Stats();
  EXPECT_EQ(s1.calls - s0.calls, 4u);
  EXPECT_EQ(s1.cache_lookups - s0.cache_lookups, 4u);
  EXPECT_EQ((s1.hits + s1.misses) - (s0.hits + s0.misses), 4u);
  for (ibv_mr* mr : mrs) {
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
  }
}

TEST_F(ShimTest, RequestsThatMustBypassTheCacheAreRegisteredDirectly) {
  const uint64_t regs = DeviceRegistrations();
  const mrcache_preload_stats s0 = Stats();
  ibv_mr* mw = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ibv_mr* zero = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED);
  ibv_mr* iova = ibv_reg_mr_iova(pd_, buf_, kBytes, 0x200000, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mw, nullptr);
  ASSERT_NE(zero, nullptr);
  ASSERT_NE(iova, nullptr);
  EXPECT_EQ(DeviceRegistrations() - regs, 3u);
  EXPECT_EQ(Stats().bypassed - s0.bypassed, 3u);
  EXPECT_EQ(Stats().live_aliases, 0u) << "bypassed requests get the real MR, not an alias";
  unsigned char src[16];
  memset(src, 0xab, sizeof src);
  ASSERT_EQ(client_.device_write(iova->lkey, 0x200000 + 64, src, sizeof src), 0)
      << "the direct MR keeps its own iova space";
  EXPECT_EQ(memcmp(buf_ + 64, src, sizeof src), 0);
  const uint64_t deregs = client_.Counters().deregistrations;
  EXPECT_EQ(ibv_dereg_mr(mw), 0);
  EXPECT_EQ(ibv_dereg_mr(zero), 0);
  EXPECT_EQ(ibv_dereg_mr(iova), 0);
  EXPECT_EQ(client_.Counters().deregistrations - deregs, 3u);
}

TEST_F(ShimTest, ARegistrationWithoutLocalWriteRefusesDeviceWritesAsPlainVerbs) {
  alignas(4096) static char buf[8192];
  ibv_mr* writable = ibv_reg_mr(pd_, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(writable, nullptr);
  ASSERT_EQ(ibv_dereg_mr(writable), 0);  // cached, unused
  ibv_mr* read_only = ibv_reg_mr(pd_, buf, sizeof buf, 0);
  ASSERT_NE(read_only, nullptr);
  char byte = 1;
  EXPECT_EQ(client_.device_write(read_only->lkey, reinterpret_cast<uintptr_t>(buf), &byte, 1),
            EACCES);
  ASSERT_EQ(ibv_dereg_mr(read_only), 0);
}

TEST_F(ShimTest, DeregOfAnAliasIsAPutThatKeepsTheRegistration) {
  ibv_mr* mr = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  const softverbs_counters held = client_.Counters();
  EXPECT_EQ(Stats().live_aliases, 1u);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(Stats().live_aliases, 0u);
  EXPECT_EQ(client_.Counters().deregistrations, held.deregistrations);
  EXPECT_EQ(client_.Counters().live_mrs, held.live_mrs);
}

TEST_F(ShimTest, AnMrTheShimDidNotCreateGoesStraightToTheLibrary) {
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  using RegFn = ibv_mr* (*)(ibv_pd*, void*, size_t, int);
  auto real_reg = reinterpret_cast<RegFn>(dlvsym(lib, "ibv_reg_mr", "IBVERBS_1.1"));
  ASSERT_NE(real_reg, nullptr);
  ibv_mr* mr = real_reg(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  const uint64_t deregs = client_.Counters().deregistrations;
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(client_.Counters().deregistrations - deregs, 1u);
  dlclose(lib);
}

TEST_F(ShimTest, DeregistrationThroughADlopenHandleWorksOnAliases) {
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW);
  ASSERT_NE(lib, nullptr);
  using DeregFn = int (*)(ibv_mr*);
  auto dereg = reinterpret_cast<DeregFn>(dlsym(lib, "ibv_dereg_mr"));
  ASSERT_NE(dereg, nullptr);
  for (int i = 0; i < 10; ++i) {
    ibv_mr* mr = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    EXPECT_TRUE(WriteLands(mr, buf_ + 4096));
    EXPECT_EQ(dereg(mr), 0);
  }
  EXPECT_EQ(Stats().live_aliases, 0u);
  dlclose(lib);
}

TEST_F(ShimTest, RegistrationAndDeregistrationThroughADlopenHandleWork) {
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW);
  ASSERT_NE(lib, nullptr);
  using RegFn = ibv_mr* (*)(ibv_pd*, void*, size_t, int);
  using DeregFn = int (*)(ibv_mr*);
  auto reg = reinterpret_cast<RegFn>(dlsym(lib, "ibv_reg_mr"));
  auto dereg = reinterpret_cast<DeregFn>(dlsym(lib, "ibv_dereg_mr"));
  ASSERT_NE(reg, nullptr);
  ASSERT_NE(dereg, nullptr);
  const uint64_t regs = DeviceRegistrations();
  for (int i = 0; i < 10; ++i) {
    ibv_mr* mr = reg(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    EXPECT_TRUE(WriteLands(mr, buf_ + 8192));
    EXPECT_EQ(dereg(mr), 0);
  }
  EXPECT_EQ(DeviceRegistrations() - regs, 1u) << "dlsym'd registrations are cached too";
  dlclose(lib);
}

// RTLD_NEXT depends on who calls dlsym: from this executable the next
// definition of ibv_dereg_mr is the preloaded shim's. A hook that lost the
// caller would answer with libibverbs' instead.
TEST_F(ShimTest, DlsymRtldNextStillSeesItsCaller) {
  void* next = dlsym(RTLD_NEXT, "ibv_dereg_mr");
  void* global = dlsym(RTLD_DEFAULT, "ibv_dereg_mr");
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next, global);
  Dl_info info{};
  ASSERT_NE(dladdr(next, &info), 0);
  EXPECT_NE(std::string(info.dli_fname).find("libmrcache_preload.so"), std::string::npos)
      << info.dli_fname;
  EXPECT_NE(dlsym(RTLD_NEXT, "malloc"), nullptr);
}

TEST_F(ShimTest, DeallocPdIsEbusyWhileAnAliasIsHeld) {
  ibv_mr* mr = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);
  EXPECT_TRUE(WriteLands(mr, buf_)) << "a refused dealloc changes nothing";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(ShimTest, DeallocPdDeregistersThePdsUnusedRegions) {
  ibv_mr* mr = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_GT(client_.Counters().live_mrs, before_.live_mrs);
  EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
  pd_ = nullptr;
  EXPECT_EQ(client_.Counters().live_mrs, before_.live_mrs);
}

TEST_F(ShimTest, CloseDeviceReleasesTheCachesOfItsPds) {
  ibv_context* ctx = ibv_open_device(list_[0]);
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  const uint64_t released = client_.Counters().mrs_released_by_close;
  EXPECT_EQ(ibv_close_device(ctx), 0);
  EXPECT_EQ(client_.Counters().mrs_released_by_close, released)
      << "the shim deregistered its cached MRs before the device closed";
  EXPECT_EQ(client_.Counters().live_mrs, before_.live_mrs);
}

TEST_F(ShimTest, ReregOnAnAliasKeepsThePointerAndMovesTheTranslation) {
  char* other = static_cast<char*>(aligned_alloc(page_, kBytes));
  memset(other, 0, kBytes);
  ibv_mr* keep = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* mr = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(keep, nullptr);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, other + 64, 4096, 0), 0);
  EXPECT_EQ(mr->addr, other + 64);
  EXPECT_EQ(mr->length, 4096u);
  EXPECT_EQ(mr->pd, pd_);
  EXPECT_TRUE(WriteLands(mr, other + 64));
  EXPECT_TRUE(WriteLands(keep, buf_)) << "other holders of the cached region are unaffected";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dereg_mr(keep), 0);
  free(other);
}

TEST_F(ShimTest, FailedReregLeavesTheAliasUsable) {
  ibv_mr* mr = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  void* none = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(none, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, none, 4096, 0),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(mr->addr, buf_);
  EXPECT_TRUE(WriteLands(mr, buf_));
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(none, 4096);
}

TEST_F(ShimTest, MemoryFreedAndReallocatedIsNeverServedStale) {
  const size_t bytes = 4 << 20;  // mmapped by malloc, unmapped by free (glibc-internal munmap)
  for (int round = 0; round < 5; ++round) {
    char* p = static_cast<char*>(malloc(bytes));
    ASSERT_NE(p, nullptr);
    memset(p, 0, bytes);
    for (int i = 0; i < 3; ++i) {
      ibv_mr* mr = ibv_reg_mr(pd_, p, bytes, IBV_ACCESS_LOCAL_WRITE);
      ASSERT_NE(mr, nullptr);
      EXPECT_TRUE(WriteLands(mr, p + bytes / 2)) << "round " << round << " registration " << i;
      ASSERT_EQ(ibv_dereg_mr(mr), 0);
    }
    free(p);
  }
}

TEST_F(ShimTest, MunmappedAndRemappedMemoryIsNeverServedStale) {
  const size_t bytes = 1 << 20;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ibv_mr* mr = ibv_reg_mr(pd_, p, bytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  ASSERT_EQ(munmap(p, bytes), 0);
  void* q = mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  ASSERT_EQ(q, p);
  mr = ibv_reg_mr(pd_, q, bytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_TRUE(WriteLands(mr, q));
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  munmap(q, bytes);
}

TEST_F(ShimTest, ThreadsRegisteringAtOnceEachGetWorkingAliases) {
  constexpr int kThreads = 4, kIterations = 300;
  std::vector<char*> own(kThreads);
  for (char*& p : own) {
    p = static_cast<char*>(aligned_alloc(page_, 256 << 10));
    memset(p, 0, 256 << 10);
  }
  const uint64_t regs = DeviceRegistrations();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        char* target = (i % 2 == 0) ? buf_ + t * 4096 : own[t];
        ibv_mr* mr = ibv_reg_mr(pd_, target, 4096, IBV_ACCESS_LOCAL_WRITE);
        if (mr == nullptr || mr->addr != target) {
          ++failures;
          continue;
        }
        unsigned char src[32];
        memset(src, t * 16 + (i & 15), sizeof src);
        if (client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(target), src, sizeof src) !=
                0 ||
            memcmp(target, src, sizeof src) != 0) {
          ++failures;
        }
        if (ibv_dereg_mr(mr) != 0) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(DeviceRegistrations() - regs, static_cast<uint64_t>(4 * kThreads))
      << "each buffer is registered about once, not once per call";
  for (char* p : own) free(p);
}

// ---- remote keys (remote_keys=private, the shim's default) and PDs the
// shim must not touch ----

constexpr int kRemoteWrite = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

// A peer's RDMA WRITE of `len` bytes at `addr` through `rkey`.
int PeerWrite(const softverbs::Client& client, uint32_t rkey, const void* addr, size_t len = 1) {
  std::vector<unsigned char> src(len, 0xa5);
  return client.remote_write(rkey, reinterpret_cast<uintptr_t>(addr), src.data(), len);
}

TEST_F(ShimTest, RemoteKeysArePrivateByDefault) {
  ASSERT_EQ(getenv("MRCACHE_REMOTE_KEYS"), nullptr) << "this run must use the shim's default";
  const mrcache_preload_stats s0 = Stats();
  const uint64_t regs = DeviceRegistrations();
  ibv_mr* a = ibv_reg_mr(pd_, buf_, 4096, kRemoteWrite);
  ibv_mr* b = ibv_reg_mr(pd_, buf_, 4096, kRemoteWrite);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->rkey, b->rkey) << "never shared";
  EXPECT_EQ(DeviceRegistrations() - regs, 2u);
  EXPECT_EQ(Stats().remote_private - s0.remote_private, 2u);
  EXPECT_EQ(ibv_dereg_mr(a), 0);
  EXPECT_EQ(ibv_dereg_mr(b), 0);
}

TEST_F(ShimTest, RkeyOfARemoteAliasDiesAtIbvDeregMr) {
  ibv_mr* mr = ibv_reg_mr(pd_, buf_ + 100, 100, kRemoteWrite);
  ASSERT_NE(mr, nullptr);
  const uint32_t rkey = mr->rkey;
  EXPECT_EQ(PeerWrite(client_, rkey, buf_ + 100, 100), IBV_WC_SUCCESS);
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  memset(buf_, 0, 4096);
  EXPECT_EQ(PeerWrite(client_, rkey, buf_ + 100, 100), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(buf_[100], 0) << "a peer wrote through a deregistered rkey";
}

TEST_F(ShimTest, RkeyOfARemoteAliasReachesExactlyTheRegisteredBytes) {
  ibv_mr* mr = ibv_reg_mr(pd_, buf_ + 100, 100, kRemoteWrite);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(PeerWrite(client_, mr->rkey, buf_ + 99), IBV_WC_REM_ACCESS_ERR) << "one byte before";
  EXPECT_EQ(PeerWrite(client_, mr->rkey, buf_ + 200), IBV_WC_REM_ACCESS_ERR) << "one byte after";
  EXPECT_EQ(PeerWrite(client_, mr->rkey, buf_ + 100, 100), IBV_WC_SUCCESS) << "inside";
  EXPECT_EQ(buf_[99], 0);
  EXPECT_EQ(buf_[200], 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(ShimTest, RegistrationOnADeallocatedPdFailsAsWithoutTheShim) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd, buf_, 4096, IBV_ACCESS_LOCAL_WRITE);  // gives the PD a cache
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  ASSERT_EQ(ibv_dealloc_pd(pd), 0);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf_, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL) << "softverbs' answer for an unknown PD";
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf_, 4096, kRemoteWrite), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(pd), EINVAL) << "a second dealloc";
}

TEST_F(ShimTest, RegistrationOnAForeignPdIsNeverReadByTheShim) {
  // Not a PD of this library, with a context pointer nobody may dereference.
  ibv_pd foreign;
  memset(&foreign, 0, sizeof foreign);
  foreign.context = reinterpret_cast<ibv_context*>(uintptr_t{16});
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(&foreign, buf_, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(&foreign), EINVAL);
}

TEST_F(ShimTest, RegistrationOnAPdOfAClosedDeviceFailsAsWithoutTheShim) {
  ibv_context* ctx = ibv_open_device(list_[0]);
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ASSERT_EQ(ibv_close_device(ctx), 0);  // takes the PD with it
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf_, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(ShimTest, DeregistrationOfAnAliasTwiceFailsAsWithoutTheShim) {
  for (int access : {int{IBV_ACCESS_LOCAL_WRITE}, kRemoteWrite}) {
    ibv_mr* mr = ibv_reg_mr(pd_, buf_, 4096, access);
    ASSERT_NE(mr, nullptr);
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), EINVAL) << "access " << access;
  }
}

// ---- remote_keys=shared (run by shim_shared_keys_test) ----

class SharedRemoteKeysTest : public ShimTest {
 protected:
  void SetUp() override {
    const char* mode = getenv("MRCACHE_REMOTE_KEYS");
    ASSERT_TRUE(mode != nullptr && std::string(mode) == "shared")
        << "run with MRCACHE_REMOTE_KEYS=shared (//tests/interpose:shim_shared_keys_test)";
    ShimTest::SetUp();
  }
};

TEST_F(SharedRemoteKeysTest, RkeyReachesNoPageThatNoRemoteRequestNamed) {
  // Two remote registrations 38 pages apart in one resident buffer: local-only
  // ones there are bridged (the control), remote ones never are.
  memset(buf_, 1, kBytes);
  // Bridging stays within one aligned block: bridge_bytes (128 MiB by
  // default), or 1 MiB under the pin budget of an 8 MiB RLIMIT_MEMLOCK (a
  // quarter of the budget, rounded down to a power of two; README
  // "Pinned-memory budget"). Both requests go in one 1 MiB-aligned block,
  // and so in one block of either size, wherever malloc put buf_ (1 MiB:
  // one side of the 1 MiB boundary in it holds the 42 pages).
  constexpr uintptr_t kBridgeBlock = uintptr_t{1} << 20;
  const uintptr_t first = reinterpret_cast<uintptr_t>(buf_);
  const uintptr_t boundary = (first + kBridgeBlock - 1) & ~(kBridgeBlock - 1);
  char* base = boundary < first + 42 * page_ ? reinterpret_cast<char*>(boundary) : buf_;
  ibv_mr* local_a = ibv_reg_mr(pd_, base + 2 * page_, 100, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* local_b = ibv_reg_mr(pd_, base + 40 * page_, 100, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(local_a, nullptr);
  ASSERT_NE(local_b, nullptr);
  EXPECT_TRUE(WriteLands(local_b, base + 20 * page_)) << "control: local-only requests bridge";
  ibv_mr* remote_a = ibv_reg_mr(pd_, base + 2 * page_, 100, kRemoteWrite);
  ibv_mr* remote_b = ibv_reg_mr(pd_, base + 40 * page_, 100, kRemoteWrite);
  ASSERT_NE(remote_a, nullptr);
  ASSERT_NE(remote_b, nullptr);
  EXPECT_GT(Stats().cache_lookups, 0u);
  EXPECT_EQ(Stats().remote_private, 0u) << "shared mode caches remote registrations";
  EXPECT_EQ(PeerWrite(client_, remote_b->rkey, base + 20 * page_), IBV_WC_REM_ACCESS_ERR)
      << "the rkey reaches a page between the two requests";
  EXPECT_EQ(PeerWrite(client_, remote_b->rkey, base + 2 * page_), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(PeerWrite(client_, remote_b->rkey, base + 40 * page_, 100), IBV_WC_SUCCESS);
  for (ibv_mr* mr : {local_a, local_b, remote_a, remote_b}) {
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
  }
}

}  // namespace

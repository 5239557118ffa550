// The prefaulting decorator (mrcache/registrars/prefault.h): which
// registrations it prefaults, that one registration still covers the whole
// range with the data intact, and that a failed prefault falls back.
#include "mrcache/registrars/prefault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mrcache/cache.h"
#include "mrcache/config.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/sim_registrar.h"
#include "mrcache/registrars/uring_registrar.h"
#include "tests/registrars/mapping.h"

namespace mrcache {
namespace {

using mrcache_test::AnonMapping;

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr size_t kMiB = size_t{1} << 20;

// Resident pages of [addr, addr+length).
size_t ResidentPages(const char* addr, size_t length) {
  std::vector<unsigned char> vec((length + kPage - 1) / kPage);
  if (mincore(const_cast<char*>(addr), length, vec.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

// A registrar that says it pins and registers anything, without touching
// memory: what the decorator does is all there is to see.
class PinningFake : public Registrar {
 public:
  const char* name() const override { return "fake"; }
  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    ++registrations;
    Registration reg;
    reg.addr = addr;
    reg.length = length;
    reg.access = access;
    reg.handle = registrations;
    reg.lkey = reg.rkey = static_cast<uint32_t>(registrations);
    return reg;
  }
  absl::Status Deregister(const Registration&) override { return absl::OkStatus(); }
  int registrations = 0;
};

Config PrefaultConfig(size_t min_bytes, size_t threads) {
  Config config;
  config.prefault_bytes = min_bytes;
  config.prefault_threads = threads;
  return config;
}

TEST(PrefaultTest, BigRegistrationOfUntouchedMemoryIsFaultedInFirst) {
  auto registrar = WithPrefault(std::make_unique<PinningFake>(), PrefaultConfig(kMiB, 2));
  AnonMapping buf(8 * kMiB);
  ASSERT_NE(buf.addr(), nullptr);
  ASSERT_TRUE(registrar->Register(buf.addr(), buf.length(), kAccessLocalWrite).ok());
  EXPECT_EQ(ResidentPages(buf.addr(), buf.length()), buf.length() / kPage);
  const PrefaultStats stats = *GetPrefaultStats(*registrar);
  EXPECT_EQ(stats.prefaults, 1u);
  EXPECT_EQ(stats.prefault_bytes, buf.length());
  EXPECT_EQ(stats.fallbacks, 0u);
}

TEST(PrefaultTest, RegistrationBelowTheThresholdIsNotPrefaulted) {
  auto registrar = WithPrefault(std::make_unique<PinningFake>(), PrefaultConfig(4 * kMiB, 2));
  AnonMapping buf(2 * kMiB);
  ASSERT_TRUE(registrar->Register(buf.addr(), buf.length(), kAccessLocalWrite).ok());
  EXPECT_EQ(ResidentPages(buf.addr(), buf.length()), 0u);
  EXPECT_EQ(GetPrefaultStats(*registrar)->prefaults, 0u);
}

TEST(PrefaultTest, ResidentMemoryIsNotPrefaultedAgain) {
  auto registrar = WithPrefault(std::make_unique<PinningFake>(), PrefaultConfig(kMiB, 2));
  AnonMapping buf(4 * kMiB);
  std::memset(buf.addr(), 1, buf.length());
  ASSERT_TRUE(registrar->Register(buf.addr(), buf.length(), kAccessLocalWrite).ok());
  EXPECT_EQ(GetPrefaultStats(*registrar)->prefaults, 0u);
}

TEST(PrefaultTest, OnDemandRegistrationIsNeverPrefaulted) {
  auto registrar = WithPrefault(std::make_unique<PinningFake>(), PrefaultConfig(kMiB, 2));
  AnonMapping buf(4 * kMiB);
  ASSERT_TRUE(
      registrar->Register(buf.addr(), buf.length(), kAccessLocalWrite | kAccessOnDemand).ok());
  EXPECT_EQ(ResidentPages(buf.addr(), buf.length()), 0u);
  EXPECT_EQ(GetPrefaultStats(*registrar)->prefaults, 0u);
}

TEST(PrefaultTest, RegistrarThatPinsNothingIsNotWrapped) {
  Config config = PrefaultConfig(kMiB, 2);
  std::unique_ptr<Registrar> sim = MakeSimRegistrar(config);
  ASSERT_FALSE(sim->pins_memory());
  const Registrar* inner = sim.get();
  std::unique_ptr<Registrar> wrapped = WithPrefault(std::move(sim), config);
  EXPECT_EQ(wrapped.get(), inner);
  EXPECT_FALSE(GetPrefaultStats(*wrapped).has_value());
}

TEST(PrefaultTest, ZeroBytesTurnsPrefaultOff) {
  auto inner = std::make_unique<PinningFake>();
  const Registrar* raw = inner.get();
  std::unique_ptr<Registrar> wrapped = WithPrefault(std::move(inner), PrefaultConfig(0, 2));
  EXPECT_EQ(wrapped.get(), raw);
}

TEST(PrefaultTest, ReadOnlyAccessPopulatesForReading) {
  auto registrar = WithPrefault(std::make_unique<PinningFake>(), PrefaultConfig(kMiB, 2));
  // MADV_POPULATE_WRITE fails on a read-only mapping; reading succeeds.
  AnonMapping buf(4 * kMiB, PROT_READ);
  ASSERT_NE(buf.addr(), nullptr);
  ASSERT_TRUE(registrar->Register(buf.addr(), buf.length(), kAccessRemoteRead).ok());
  const PrefaultStats stats = *GetPrefaultStats(*registrar);
  EXPECT_EQ(stats.prefaults, 1u);
  EXPECT_EQ(stats.fallbacks, 0u) << "errno " << stats.last_errno;
}

TEST(PrefaultTest, FailedPrefaultFallsBackToThePlainRegistration) {
  auto fake = std::make_unique<PinningFake>();
  PinningFake* inner = fake.get();
  auto registrar = WithPrefault(std::move(fake), PrefaultConfig(kMiB, 2));
  AnonMapping buf(4 * kMiB);
  // A hole no page can be faulted into, in the second helper's chunk.
  ASSERT_EQ(mprotect(buf.addr() + 3 * kMiB, kPage, PROT_NONE), 0);
  auto reg = registrar->Register(buf.addr(), buf.length(), kAccessLocalWrite);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(inner->registrations, 1);
  EXPECT_EQ(reg->length, buf.length());
  const PrefaultStats stats = *GetPrefaultStats(*registrar);
  EXPECT_EQ(stats.prefaults, 1u);
  EXPECT_EQ(stats.fallbacks, 1u);
  EXPECT_NE(stats.last_errno, 0);
}

TEST(PrefaultTest, OneThreadPrefaultsInTheCallingThread) {
  auto registrar = WithPrefault(std::make_unique<PinningFake>(), PrefaultConfig(kMiB, 1));
  AnonMapping buf(8 * kMiB);
  ASSERT_TRUE(registrar->Register(buf.addr(), buf.length(), kAccessLocalWrite).ok());
  EXPECT_EQ(ResidentPages(buf.addr(), buf.length()), buf.length() / kPage);
  EXPECT_EQ(GetPrefaultStats(*registrar)->fallbacks, 0u);
}

TEST(PrefaultTest, AutoThreadsAreTheUsableCpusAtMostEight) {
  const size_t n = AutoPrefaultThreads();
  EXPECT_GE(n, 1u);
  EXPECT_LE(n, 8u);
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(n, std::min<size_t>(8, static_cast<size_t>(CPU_COUNT(&set))));
}

// Over io_uring, which pins for real: the data written before the
// registration is intact, and a device write through the one registration
// lands in the pages the CPU sees, in every helper's chunk.
TEST(PrefaultUringTest, OneRegistrationCoversTheBufferAndSeesItsData) {
  if (!UringAvailable()) GTEST_SKIP() << "io_uring fixed buffers are unavailable here";
  Config config = PrefaultConfig(kMiB, 3);
  auto made = MakeUringRegistrar(config);
  ASSERT_TRUE(made.ok()) << made.status();
  auto registrar = WithPrefault(std::move(*made), config);
  // Under the 8 MiB RLIMIT_MEMLOCK of unprivileged runs.
  AnonMapping buf(6 * kMiB);
  std::memset(buf.addr() + 5 * kMiB, 'b', kPage);  // touched before, the rest is not
  auto reg = registrar->Register(buf.addr(), buf.length(), kAccessLocalWrite);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->addr, buf.addr());
  EXPECT_EQ(reg->length, buf.length());
  EXPECT_EQ(GetPrefaultStats(*registrar)->prefaults, 1u);
  EXPECT_EQ(GetPrefaultStats(*registrar)->fallbacks, 0u);
  EXPECT_TRUE(mrcache_test::AllBytesAre(buf.addr() + 5 * kMiB, kPage, 'b'));
  for (size_t offset : {size_t{0}, 2 * kMiB + 100, 4 * kMiB, buf.length() - kPage}) {
    const std::string data(kPage, static_cast<char>('0' + offset % 10));
    ASSERT_TRUE(registrar->DeviceWrite(*reg, offset, data.data(), data.size()).ok());
    EXPECT_EQ(std::memcmp(buf.addr() + offset, data.data(), data.size()), 0) << offset;
  }
  // Written after the registration, by the CPU: still there.
  std::memset(buf.addr() + kMiB, 'a', kPage);
  EXPECT_TRUE(mrcache_test::AllBytesAre(buf.addr() + kMiB, kPage, 'a'));
  EXPECT_TRUE(registrar->Deregister(*reg).ok());
}

TEST(PrefaultUringTest, CacheFirstGetRegistersTheWholeBufferOnce) {
  if (!UringAvailable()) GTEST_SKIP() << "io_uring fixed buffers are unavailable here";
  Config config = PrefaultConfig(kMiB, 2);
  config.registrar = "uring";
  config.monitor = "none";
  config.stats_shm = false;
  auto cache = Cache::Create(config);
  ASSERT_TRUE(cache.ok()) << cache.status();
  AnonMapping buf(4 * kMiB);
  {
    auto ref = (*cache)->Get(buf.addr(), buf.length(), kAccessLocalWrite);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_LE(ref->info().addr, static_cast<void*>(buf.addr()));
    EXPECT_GE(static_cast<char*>(ref->info().addr) + ref->info().length, buf.addr() + buf.length());
    const std::string data(kPage, 'd');
    ASSERT_TRUE((*cache)->DeviceWrite(ref->get(), 3 * kMiB, data.data(), data.size()).ok());
    EXPECT_TRUE(
        mrcache_test::AllBytesAre(static_cast<char*>(ref->info().addr) + 3 * kMiB, kPage, 'd'));
  }
  EXPECT_EQ((*cache)->stats().registrations, 1u);
  EXPECT_EQ(GetPrefaultStats((*cache)->registrar())->prefaults, 1u);
  cache->reset();
}

TEST(PrefaultConfigTest, KeysDefaultToSixtyFourMegabytesAndAuto) {
  Config config;
  EXPECT_EQ(config.prefault_bytes, size_t{64} << 20);
  EXPECT_EQ(*config.Show("prefault_bytes"), "64M");
  EXPECT_EQ(*config.Get("prefault_threads"), "auto");
}

TEST(PrefaultConfigTest, ValidValuesAreTaken) {
  Config config;
  ASSERT_TRUE(config.Set("prefault_bytes", "1G").ok());
  EXPECT_EQ(config.prefault_bytes, size_t{1} << 30);
  ASSERT_TRUE(config.Set("prefault_bytes", "0").ok());
  EXPECT_EQ(config.prefault_bytes, 0u);
  ASSERT_TRUE(config.Set("prefault_threads", "1").ok());
  EXPECT_EQ(config.prefault_threads, 1u);
  ASSERT_TRUE(config.Set("prefault_threads", "auto").ok());
  EXPECT_EQ(config.prefault_threads, 0u);
}

TEST(PrefaultConfigTest, BadValuesAreEinvalNamingTheKey) {
  for (const char* bad : {"0", "65", "many", "-1", ""}) {
    Config config;
    absl::Status s = config.Set("prefault_threads", bad);
    EXPECT_EQ(StatusToErrno(s), EINVAL) << bad;
    EXPECT_NE(std::string(s.message()).find("prefault_threads"), std::string::npos) << s;
    EXPECT_EQ(config.prefault_threads, 0u) << "unchanged after " << bad;
  }
  Config config;
  absl::Status s = config.Set("prefault_bytes", "lots");
  EXPECT_EQ(StatusToErrno(s), EINVAL);
  EXPECT_NE(std::string(s.message()).find("prefault_bytes"), std::string::npos) << s;
}

TEST(PrefaultConfigTest, EnvironmentVariablesSetTheKeys) {
  setenv("MRCACHE_PREFAULT_BYTES", "2M", 1);
  setenv("MRCACHE_PREFAULT_THREADS", "3", 1);
  auto config = Config::FromEnvironment();
  unsetenv("MRCACHE_PREFAULT_BYTES");
  unsetenv("MRCACHE_PREFAULT_THREADS");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->prefault_bytes, 2 * kMiB);
  EXPECT_EQ(config->prefault_threads, 3u);
}

}  // namespace
}  // namespace mrcache

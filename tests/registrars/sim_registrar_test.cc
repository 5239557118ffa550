// The sim registrar: a deterministic cost model. Each test states one
// behaviour of mrcache/registrars/sim_registrar.h. Costs are read from the simulated-ns
// counter, never from wall time.
#include "mrcache/registrars/sim_registrar.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mrcache/errno_status.h"
#include "tests/registrars/low_memlock.h"
#include "tests/registrars/mapping.h"

namespace mrcache {
namespace {

using mrcache_test::AllBytesAre;
using mrcache_test::AnonMapping;
using mrcache_test::VmLckKib;

constexpr size_t kKiB = 1024, kMiB = 1024 * kKiB;

Config CheapConfig() {
  Config config;
  config.sim_base_ns = 1000;
  config.sim_page_ns = 100;
  config.sim_odp_page_ns = 500;
  return config;
}

class SimRegistrarTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(CheapConfig()); }

  void Make(const Config& config) {
    CheckBalanced();
    registrar_ = MakeSimRegistrar(config);
  }

  void TearDown() override { CheckBalanced(); }

  void CheckBalanced() {
    if (registrar_ == nullptr) return;
    SimRegistrarStats st = Stats();
    EXPECT_EQ(st.live, 0u) << "a test leaked a registration";
    EXPECT_EQ(st.registrations, st.deregistrations);
    EXPECT_EQ(st.mlocked_pages, 0u);
  }

  SimRegistrarStats Stats() const { return *GetSimRegistrarStats(*registrar_); }

  // Simulated cost of one Register of [addr, addr+len) (registered and then
  // deregistered again; the deregistration's cost is not included).
  uint64_t RegisterCost(void* addr, size_t len, int access = kAccessLocalWrite) {
    uint64_t before = Stats().simulated_ns;
    auto reg = registrar_->Register(addr, len, access);
    EXPECT_TRUE(reg.ok()) << reg.status();
    uint64_t cost = Stats().simulated_ns - before;
    if (reg.ok()) {
      EXPECT_TRUE(registrar_->Deregister(*reg).ok());
    }
    return cost;
  }

  std::unique_ptr<Registrar> registrar_;
};

TEST_F(SimRegistrarTest, IsNamedSim) { EXPECT_STREQ(registrar_->name(), "sim"); }

TEST_F(SimRegistrarTest, EveryRegistrationOfTheSameRangeGetsNewKeysFromItsHandle) {
  AnonMapping m(4096);
  std::set<uint64_t> handles;
  std::set<uint32_t> keys;
  std::vector<Registration> regs;
  for (int i = 0; i < 10; ++i) {
    auto reg = registrar_->Register(m.addr(), 4096, 0);
    ASSERT_TRUE(reg.ok());
    EXPECT_NE(reg->handle, 0u);
    EXPECT_EQ(reg->lkey, static_cast<uint32_t>(reg->handle));
    EXPECT_EQ(reg->rkey, reg->lkey);
    handles.insert(reg->handle);
    keys.insert(reg->lkey);
    regs.push_back(*reg);
  }
  EXPECT_EQ(handles.size(), 10u);
  EXPECT_EQ(keys.size(), 10u);
  for (const Registration& reg : regs) {
    EXPECT_TRUE(registrar_->Deregister(reg).ok());
  }
}

TEST_F(SimRegistrarTest, WholeAddressSpaceWithoutOnDemandIsEfault) {
  // Only ODP may cover memory that is not mapped (page 0 never is).
  EXPECT_EQ(StatusToErrno(registrar_->Register(nullptr, SIZE_MAX, kAccessLocalWrite).status()),
            EFAULT);
}

TEST_F(SimRegistrarTest, RegisterCostsBasePlusPerPage) {
  AnonMapping m(64 * kKiB);
  EXPECT_EQ(RegisterCost(m.addr(), 4096), 1000u + 100u);
  EXPECT_EQ(RegisterCost(m.addr(), 64 * kKiB), 1000u + 16 * 100u);
}

TEST_F(SimRegistrarTest, AnUnalignedRangeCostsEveryPageItTouches) {
  AnonMapping m(2 * 4096);
  EXPECT_EQ(RegisterCost(m.addr() + 4000, 200), 1000u + 2 * 100u);
}

TEST_F(SimRegistrarTest, DeregisterCostsHalfTheBase) {
  AnonMapping m(64 * kKiB);
  auto reg = registrar_->Register(m.addr(), m.length(), 0);
  ASSERT_TRUE(reg.ok());
  uint64_t before = Stats().simulated_ns;
  ASSERT_TRUE(registrar_->Deregister(*reg).ok());
  EXPECT_EQ(Stats().simulated_ns - before, 500u);
}

TEST_F(SimRegistrarTest, BiggerRegistrationsCostMore) {
  AnonMapping m(4 * kMiB);
  uint64_t previous = 0;
  for (size_t len = 4 * kKiB; len <= 4 * kMiB; len *= 4) {
    uint64_t cost = RegisterCost(m.addr(), len);
    EXPECT_GT(cost, previous) << len << " bytes";
    previous = cost;
  }
}

TEST_F(SimRegistrarTest, DefaultCostsFollowTheIoUringCurveOfTheDesign) {
  Make(Config{});
  AnonMapping m(16 * kMiB, PROT_READ | PROT_WRITE, MAP_NORESERVE);
  uint64_t c4k = RegisterCost(m.addr(), 4 * kKiB);
  uint64_t c1m = RegisterCost(m.addr(), kMiB);
  uint64_t c4m = RegisterCost(m.addr(), 4 * kMiB);
  uint64_t c16m = RegisterCost(m.addr(), 16 * kMiB);
  // Measured for ibv_reg_mr on ConnectX-class NICs: 4 KiB ~ 3-7 us, 1 MiB ~ 65 us, 4 MiB ~ 0.2 ms,
  // 16 MiB ~ 1.5 ms.
  EXPECT_GE(c4k, 3000u);
  EXPECT_LE(c4k, 7000u);
  EXPECT_GE(c1m, 50000u);
  EXPECT_LE(c1m, 80000u);
  EXPECT_GE(c4m, 150000u);
  EXPECT_LE(c4m, 300000u);
  EXPECT_GE(c16m, 750000u);
  EXPECT_LE(c16m, 2000000u);
}

TEST_F(SimRegistrarTest, ZeroCostsSimulateNothing) {
  Config config;
  config.sim_base_ns = 0;
  config.sim_page_ns = 0;
  Make(config);
  AnonMapping m(64 * kMiB, PROT_READ | PROT_WRITE, MAP_NORESERVE);
  EXPECT_EQ(RegisterCost(m.addr(), m.length()), 0u);
  EXPECT_EQ(Stats().simulated_ns, 0u);
}

TEST_F(SimRegistrarTest, DeviceWriteIntoMemoryUnmappedSinceRegistrationIsEfault) {
  AnonMapping m(2 * 4096);
  auto reg = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite);
  ASSERT_TRUE(reg.ok());
  m.Unmap(4096, 4096);
  char bytes[2] = {1, 2};
  EXPECT_EQ(StatusToErrno(registrar_->DeviceWrite(*reg, 4095, bytes, 2)), EFAULT);
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(SimRegistrarTest, AdvertisesExplicitImplicitOdpAndPrefetch) {
  OdpCapabilities caps = registrar_->odp_capabilities();
  EXPECT_TRUE(caps.explicit_odp);
  EXPECT_TRUE(caps.implicit_odp);
  EXPECT_TRUE(caps.prefetch);
}

TEST_F(SimRegistrarTest, OdpRegistrationCostsOnlyTheBase) {
  AnonMapping m(64 * kKiB);
  EXPECT_EQ(RegisterCost(m.addr(), m.length(), kAccessLocalWrite | kAccessOnDemand), 1000u);
}

TEST_F(SimRegistrarTest, OdpChargesEachPageAtFirstTouchOnly) {
  AnonMapping m(4 * 4096);
  auto reg = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite | kAccessOnDemand);
  ASSERT_TRUE(reg.ok());
  uint64_t before = Stats().simulated_ns;
  char byte = 7;
  ASSERT_TRUE(registrar_->DeviceWrite(*reg, 10, &byte, 1).ok());
  EXPECT_EQ(Stats().simulated_ns - before, 500u);
  ASSERT_TRUE(registrar_->DeviceWrite(*reg, 20, &byte, 1).ok());
  EXPECT_EQ(Stats().simulated_ns - before, 500u) << "page 0 was already faulted in";
  ASSERT_TRUE(registrar_->Prefetch(*reg, m.addr(), m.length()).ok());
  EXPECT_EQ(Stats().simulated_ns - before, 4 * 500u);
  EXPECT_EQ(Stats().odp_faulted_pages, 4u);
  EXPECT_EQ(m.addr()[10], 7);
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(SimRegistrarTest, OdpRegistrationOfUnmappedMemorySucceedsAndTheDeviceAccessFaults) {
  AnonMapping m(4096);
  char* addr = m.addr();
  m.Unmap(0, 4096);
  auto reg = registrar_->Register(addr, 4096, kAccessLocalWrite | kAccessOnDemand);
  ASSERT_TRUE(reg.ok()) << reg.status();
  char byte = 1;
  EXPECT_EQ(StatusToErrno(registrar_->DeviceWrite(*reg, 0, &byte, 1)), EFAULT);
  EXPECT_EQ(StatusToErrno(registrar_->Prefetch(*reg, addr, 4096)), EFAULT);
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(SimRegistrarTest, ImplicitOdpCoversTheWholeAddressSpace) {
  auto reg = registrar_->Register(nullptr, SIZE_MAX, kAccessLocalWrite | kAccessOnDemand);
  ASSERT_TRUE(reg.ok()) << reg.status();
  AnonMapping m(8192);
  uintptr_t where = reinterpret_cast<uintptr_t>(m.addr()) + 4096;
  std::string data(100, 'i');
  ASSERT_TRUE(registrar_->DeviceWrite(*reg, where, data.data(), data.size()).ok());
  EXPECT_TRUE(AllBytesAre(m.addr() + 4096, 100, 'i'));
  EXPECT_TRUE(registrar_->Prefetch(*reg, m.addr(), m.length()).ok());
  EXPECT_EQ(Stats().odp_faulted_pages, 2u);
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(SimRegistrarTest, PrefetchOfANonOdpRegistrationIsEinval) {
  AnonMapping m(4096);
  auto reg = registrar_->Register(m.addr(), 4096, kAccessLocalWrite);
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(StatusToErrno(registrar_->Prefetch(*reg, m.addr(), 4096)), EINVAL);
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(SimRegistrarTest, PrefetchOutsideTheRegistrationIsEinval) {
  AnonMapping m(3 * 4096);
  auto reg = registrar_->Register(m.addr() + 4096, 4096, kAccessLocalWrite | kAccessOnDemand);
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(StatusToErrno(registrar_->Prefetch(*reg, m.addr(), 4096)), EINVAL);
  EXPECT_EQ(StatusToErrno(registrar_->Prefetch(*reg, m.addr() + 4096, 4097)), EINVAL);
  EXPECT_TRUE(registrar_->Prefetch(*reg, m.addr() + 4096, 4096).ok());
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(SimRegistrarTest, MlockPinsUntilTheLastOverlappingRegistrationGoes) {
  Config config = CheapConfig();
  config.sim_mlock = true;
  Make(config);
  AnonMapping m(64 * kKiB);
  long before = VmLckKib();
  auto whole = registrar_->Register(m.addr(), 64 * kKiB, kAccessLocalWrite);
  auto middle = registrar_->Register(m.addr() + 16 * kKiB, 32 * kKiB, kAccessLocalWrite);
  ASSERT_TRUE(whole.ok() && middle.ok());
  EXPECT_EQ(VmLckKib(), before + 64);
  EXPECT_EQ(Stats().mlocked_pages, 16u);
  ASSERT_TRUE(registrar_->Deregister(*whole).ok());
  EXPECT_EQ(VmLckKib(), before + 32) << "the middle is still registered";
  EXPECT_EQ(Stats().mlocked_pages, 8u);
  ASSERT_TRUE(registrar_->Deregister(*middle).ok());
  EXPECT_EQ(VmLckKib(), before);
  EXPECT_EQ(Stats().mlocked_pages, 0u);
}

TEST_F(SimRegistrarTest, OdpRegistrationsAreNeverMlocked) {
  Config config = CheapConfig();
  config.sim_mlock = true;
  Make(config);
  AnonMapping m(64 * kKiB);
  auto reg = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite | kAccessOnDemand);
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(Stats().mlocked_pages, 0u);
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

struct MlockOutcome {
  int small_errno;  // 16 KiB under a 256 KiB limit
  int big_errno;    // 1 MiB over it
  long locked_kib_after;
  char big_message[400];
};

MlockOutcome MlockSmallAndBig() {
  MlockOutcome out{};
  Config config = CheapConfig();
  config.sim_mlock = true;
  std::unique_ptr<Registrar> registrar = MakeSimRegistrar(config);
  AnonMapping small(16 * kKiB), big(kMiB);
  auto s = registrar->Register(small.addr(), small.length(), kAccessLocalWrite);
  out.small_errno = StatusToErrno(s.status());
  if (s.ok()) (void)registrar->Deregister(*s);
  auto b = registrar->Register(big.addr(), big.length(), kAccessLocalWrite);
  out.big_errno = StatusToErrno(b.status());
  std::string msg(b.status().message());
  std::strncpy(out.big_message, msg.c_str(), sizeof out.big_message - 1);
  if (b.ok()) (void)registrar->Deregister(*b);
  out.locked_kib_after = VmLckKib();
  return out;
}

TEST_F(SimRegistrarTest, MlockOverRlimitMemlockIsEnomemNamingTheLimit) {
  auto child = mrcache_test::RunWithLowMemlock<MlockOutcome>(256 * kKiB, MlockSmallAndBig);
  ASSERT_TRUE(child.child_ok);
  ASSERT_EQ(child.setup_errno, 0) << std::strerror(child.setup_errno);
  const MlockOutcome& out = child.outcome;
  EXPECT_EQ(out.small_errno, 0) << std::strerror(out.small_errno);
  EXPECT_EQ(out.big_errno, ENOMEM);
  std::string msg = out.big_message;
  EXPECT_NE(msg.find("RLIMIT_MEMLOCK"), std::string::npos) << msg;
  EXPECT_NE(msg.find("262144 bytes"), std::string::npos) << msg;
  EXPECT_EQ(out.locked_kib_after, 0) << "a failed mlock leaves nothing locked";
}

TEST(SimRegistrarTeardownTest, DestroyingWithLiveMlockedRegistrationsUnlocksThem) {
  Config config = CheapConfig();
  config.sim_mlock = true;
  AnonMapping m(64 * kKiB);
  long before = VmLckKib();
  std::unique_ptr<Registrar> registrar = MakeSimRegistrar(config);
  ASSERT_TRUE(registrar->Register(m.addr(), m.length(), kAccessLocalWrite).ok());
  EXPECT_EQ(VmLckKib(), before + 64);
  registrar.reset();
  EXPECT_EQ(VmLckKib(), before);
}

TEST(SimRegistrarStatsTest, StatsAreOnlyForSimRegistrars) {
  struct Other : Registrar {
    const char* name() const override { return "other"; }
    absl::StatusOr<Registration> Register(void*, size_t, int) override { return Registration{}; }
    absl::Status Deregister(const Registration&) override { return absl::OkStatus(); }
  } other;
  EXPECT_FALSE(GetSimRegistrarStats(other).has_value());
}

}  // namespace
}  // namespace mrcache

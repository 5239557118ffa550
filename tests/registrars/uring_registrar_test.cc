// The uring registrar: real kernel pinning through io_uring fixed buffers.
// Each test states one behaviour of mrcache/registrars/uring_registrar.h.
#include "mrcache/registrars/uring_registrar.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
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
using mrcache_test::VmPinKib;

constexpr size_t kKiB = 1024;

class UringRegistrarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!UringAvailable()) GTEST_SKIP() << "io_uring fixed buffers are unavailable here";
    Config config;
    config.uring_slots = 64;
    auto made = MakeUringRegistrar(config);
    ASSERT_TRUE(made.ok()) << made.status();
    registrar_ = std::move(*made);
  }

  void TearDown() override {
    if (registrar_ == nullptr) return;
    auto stats = GetUringRegistrarStats(*registrar_);
    ASSERT_TRUE(stats.has_value());
    EXPECT_EQ(stats->live, 0u) << "a test leaked a registration";
    EXPECT_EQ(stats->registrations, stats->deregistrations);
  }

  UringRegistrarStats Stats() const { return *GetUringRegistrarStats(*registrar_); }

  std::unique_ptr<Registrar> registrar_;
};

TEST_F(UringRegistrarTest, RegisterReturnsSlotHandleAndKeysOfSlotPlusOne) {
  AnonMapping m(64 * kKiB);
  auto reg = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite | kAccessRemoteRead);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->addr, m.addr());
  EXPECT_EQ(reg->length, m.length());
  EXPECT_EQ(reg->access, kAccessLocalWrite | kAccessRemoteRead);
  EXPECT_LT(reg->handle, 64u);
  EXPECT_EQ(reg->lkey, reg->handle + 1);
  EXPECT_EQ(reg->rkey, reg->handle + 1);
  EXPECT_STREQ(registrar_->name(), "uring");
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(UringRegistrarTest, RegistrationPinsPagesUntilDeregister) {
  AnonMapping m(256 * kKiB);
  long before = VmPinKib();
  ASSERT_GE(before, 0);
  auto reg = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(VmPinKib(), before + 256);
  ASSERT_TRUE(registrar_->Deregister(*reg).ok());
  EXPECT_EQ(VmPinKib(), before);
}

TEST_F(UringRegistrarTest, OnDemandAccessIsEnotsup) {
  AnonMapping m(4096);
  auto reg = registrar_->Register(m.addr(), 4096, kAccessLocalWrite | kAccessOnDemand);
  EXPECT_EQ(StatusToErrno(reg.status()), ENOTSUP);
  EXPECT_FALSE(registrar_->odp_capabilities().explicit_odp);
}

TEST_F(UringRegistrarTest, ReadOnlyMemoryIsEfaultBecauseTheKernelPinsForWriting) {
  AnonMapping m(4096, PROT_READ);
  EXPECT_EQ(StatusToErrno(registrar_->Register(m.addr(), 4096, 0).status()), EFAULT);
}

TEST_F(UringRegistrarTest, MoreThanOneGiBIsEinvalNamingTheLimit) {
  // MAP_NORESERVE and never touched: no memory is used.
  AnonMapping m(kUringMaxBufferBytes + 4096, PROT_READ | PROT_WRITE, MAP_NORESERVE);
  ASSERT_NE(m.addr(), nullptr);
  auto reg = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite);
  EXPECT_EQ(StatusToErrno(reg.status()), EINVAL);
  EXPECT_NE(reg.status().message().find("limited to 1 GiB"), absl::string_view::npos)
      << reg.status();
}

TEST_F(UringRegistrarTest, FullSlotTableIsEnomemAndAFreedSlotIsReused) {
  Config config;
  config.uring_slots = 2;
  auto small = MakeUringRegistrar(config);
  ASSERT_TRUE(small.ok()) << small.status();
  AnonMapping m(3 * 4096);
  auto a = (*small)->Register(m.addr(), 4096, 0);
  auto b = (*small)->Register(m.addr() + 4096, 4096, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = (*small)->Register(m.addr() + 8192, 4096, 0);
  EXPECT_EQ(StatusToErrno(c.status()), ENOMEM);
  EXPECT_NE(c.status().message().find("no free io_uring buffer slot"), absl::string_view::npos)
      << c.status();
  ASSERT_TRUE((*small)->Deregister(*a).ok());
  c = (*small)->Register(m.addr() + 8192, 4096, 0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->handle, a->handle);
  EXPECT_TRUE((*small)->Deregister(*b).ok());
  EXPECT_TRUE((*small)->Deregister(*c).ok());
}

TEST(UringRegistrarConfigTest, MakeSucceedsExactlyWhereUringIsAvailable) {
  auto made = MakeUringRegistrar(Config{});
  if (UringAvailable()) {
    ASSERT_TRUE(made.ok()) << made.status();
    EXPECT_EQ(GetUringRegistrarStats(**made)->slots, Config{}.uring_slots);
  } else {
    EXPECT_EQ(StatusToErrno(made.status()), ENOTSUP) << made.status();
  }
}

TEST(UringRegistrarConfigTest, SlotCountOutsideTheKernelLimitIsEinval) {
  Config config;
  config.uring_slots = 0;
  EXPECT_EQ(StatusToErrno(MakeUringRegistrar(config).status()), EINVAL);
  config.uring_slots = kUringMaxSlots + 1;
  EXPECT_EQ(StatusToErrno(MakeUringRegistrar(config).status()), EINVAL);
}

// What the low-memlock child reports.
struct MemlockOutcome {
  int setup_errno;  // creating the registrar
  int small_errno;  // a 16 KiB registration under a 256 KiB limit
  int big_errno;    // a 1 MiB registration over it
  char big_message[400];
};

MemlockOutcome RegisterSmallAndBig() {
  MemlockOutcome out{};
  Config config;
  config.uring_slots = 4;
  auto registrar = MakeUringRegistrar(config);
  if (!registrar.ok()) {
    out.setup_errno = StatusToErrno(registrar.status());
    return out;
  }
  AnonMapping small(16 * kKiB), big(1024 * kKiB);
  auto s = (*registrar)->Register(small.addr(), small.length(), kAccessLocalWrite);
  out.small_errno = StatusToErrno(s.status());
  if (s.ok()) (void)(*registrar)->Deregister(*s);
  auto b = (*registrar)->Register(big.addr(), big.length(), kAccessLocalWrite);
  out.big_errno = StatusToErrno(b.status());
  std::string msg(b.status().message());
  std::strncpy(out.big_message, msg.c_str(), sizeof out.big_message - 1);
  if (b.ok()) (void)(*registrar)->Deregister(*b);
  return out;
}

TEST_F(UringRegistrarTest, ExceedingRlimitMemlockWithoutCapIpcLockIsEnomemNamingTheLimit) {
  auto child = mrcache_test::RunWithLowMemlock<MemlockOutcome>(256 * kKiB, RegisterSmallAndBig);
  ASSERT_TRUE(child.child_ok);
  ASSERT_EQ(child.setup_errno, 0) << std::strerror(child.setup_errno);
  const MemlockOutcome& out = child.outcome;
  ASSERT_EQ(out.setup_errno, 0) << std::strerror(out.setup_errno);
  EXPECT_EQ(out.small_errno, 0) << std::strerror(out.small_errno);
  EXPECT_EQ(out.big_errno, ENOMEM);
  std::string msg = out.big_message;
  EXPECT_NE(msg.find("RLIMIT_MEMLOCK"), std::string::npos) << msg;
  EXPECT_NE(msg.find("262144 bytes"), std::string::npos) << msg;
}

// docs/ARCHITECTURE.md ("How the tests see a stale registration"): the oracle every
// stale-registration test relies on.
TEST_F(UringRegistrarTest, StaleRegistrationWritesIntoTheOldPagesNotTheNewMapping) {
  AnonMapping m(64 * kKiB);
  std::memset(m.addr(), 0, m.length());
  auto reg = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite);
  ASSERT_TRUE(reg.ok()) << reg.status();
  ASSERT_TRUE(m.Remap()) << "could not map the same address again";

  std::string data(m.length(), 'S');
  ASSERT_TRUE(registrar_->DeviceWrite(*reg, 0, data.data(), data.size()).ok())
      << "the device write through a stale registration succeeds";
  EXPECT_TRUE(AllBytesAre(m.addr(), m.length(), 0)) << "the new mapping stays zero";

  std::string back(m.length(), '\0');
  ASSERT_TRUE(UringDeviceRead(*registrar_, *reg, 0, back.data(), back.size()).ok());
  EXPECT_EQ(back, data) << "the data is in the old pinned pages";
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(UringRegistrarTest, PinnedPagesOutliveMunmapSoADeviceWriteStillSucceeds) {
  AnonMapping m(16 * kKiB);
  auto reg = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite);
  ASSERT_TRUE(reg.ok()) << reg.status();
  m.Unmap(0, m.length());
  std::string data(16 * kKiB, 'U');
  ASSERT_TRUE(registrar_->DeviceWrite(*reg, 0, data.data(), data.size()).ok());
  std::string back(data.size(), '\0');
  ASSERT_TRUE(UringDeviceRead(*registrar_, *reg, 0, back.data(), back.size()).ok());
  EXPECT_EQ(back, data);
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(UringRegistrarTest, ReregisteringTheNewMappingMakesDeviceWritesVisible) {
  AnonMapping m(64 * kKiB);
  auto stale = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite);
  ASSERT_TRUE(stale.ok()) << stale.status();
  ASSERT_TRUE(m.Remap());
  ASSERT_TRUE(registrar_->Deregister(*stale).ok());

  auto fresh = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  std::string data(m.length(), 'F');
  ASSERT_TRUE(registrar_->DeviceWrite(*fresh, 0, data.data(), data.size()).ok());
  EXPECT_TRUE(AllBytesAre(m.addr(), m.length(), 'F'));
  EXPECT_TRUE(registrar_->Deregister(*fresh).ok());
}

TEST_F(UringRegistrarTest, DeviceReadSeesWhatTheCpuWrote) {
  AnonMapping m(8192);
  std::memset(m.addr() + 100, 'c', 50);
  auto reg = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite);
  ASSERT_TRUE(reg.ok());
  std::string back(50, '\0');
  ASSERT_TRUE(UringDeviceRead(*registrar_, *reg, 100, back.data(), back.size()).ok());
  EXPECT_EQ(back, std::string(50, 'c'));
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST(UringRegistrarTeardownTest, DestroyingWithLiveRegistrationsUnpinsAndReportsThem) {
  if (!UringAvailable()) GTEST_SKIP() << "io_uring fixed buffers are unavailable here";
  AnonMapping m(128 * kKiB);
  long before = VmPinKib();
  {
    Config config;
    config.uring_slots = 8;
    auto registrar = MakeUringRegistrar(config);
    ASSERT_TRUE(registrar.ok()) << registrar.status();
    ASSERT_TRUE((*registrar)->Register(m.addr(), 64 * kKiB, 0).ok());
    ASSERT_TRUE((*registrar)->Register(m.addr() + 64 * kKiB, 64 * kKiB, 0).ok());
    EXPECT_EQ(VmPinKib(), before + 128);
    testing::internal::CaptureStderr();
    registrar->reset();
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("2 buffer(s) still registered"), std::string::npos) << err;
  }
  EXPECT_EQ(VmPinKib(), before);
}

TEST(UringRegistrarTeardownTest, CleanTeardownReportsNothing) {
  if (!UringAvailable()) GTEST_SKIP() << "io_uring fixed buffers are unavailable here";
  AnonMapping m(4096);
  Config config;
  config.uring_slots = 8;
  auto registrar = MakeUringRegistrar(config);
  ASSERT_TRUE(registrar.ok());
  auto reg = (*registrar)->Register(m.addr(), 4096, 0);
  ASSERT_TRUE(reg.ok());
  ASSERT_TRUE((*registrar)->Deregister(*reg).ok());
  testing::internal::CaptureStderr();
  registrar->reset();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(UringRegistrarStatsTest, StatsAreOnlyForUringRegistrars) {
  struct Other : Registrar {
    const char* name() const override { return "other"; }
    absl::StatusOr<Registration> Register(void*, size_t, int) override { return Registration{}; }
    absl::Status Deregister(const Registration&) override { return absl::OkStatus(); }
  } other;
  EXPECT_FALSE(GetUringRegistrarStats(other).has_value());
  Registration reg;
  char byte;
  EXPECT_EQ(StatusToErrno(UringDeviceRead(other, reg, 0, &byte, 1)), EINVAL);
}

}  // namespace
}  // namespace mrcache

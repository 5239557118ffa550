// The `verbs` registrar on softverbs: rdma-core calls on a caller's PD,
// errors that keep libibverbs' errno and name the call, device writes through
// softverbs, and ODP capabilities from ibv_query_device_ex.
#include "mrcache/registrars/verbs_registrar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "mrcache/errno_status.h"
#include "mrcache/registrars/odp.h"
#include "tests/softverbs/fixture.h"

namespace mrcache {
namespace {

using ::testing::HasSubstr;

constexpr size_t kBytes = 128 * 1024;

class VerbsRegistrarTest : public softverbs::SoftverbsTest {
 protected:
  void SetUp() override {
    SoftverbsTest::SetUp();
    if (HasFatalFailure()) return;
    auto made = MakeVerbsRegistrar(pd_, config_);
    ASSERT_TRUE(made.ok()) << made.status();
    registrar_ = std::move(*made);
    buf_ = static_cast<char*>(MapPages(kBytes));
    ASSERT_NE(buf_, nullptr);
  }
  void TearDown() override {
    registrar_.reset();
    if (buf_ != nullptr) munmap(buf_, kBytes);
    SoftverbsTest::TearDown();
  }
  Config config_;
  std::unique_ptr<Registrar> registrar_;
  char* buf_ = nullptr;
};

class ExplicitOdpVerbs : public VerbsRegistrarTest {
  const char* odp() const override { return "explicit"; }
};

class ImplicitOdpVerbs : public VerbsRegistrarTest {
  const char* odp() const override { return "implicit"; }
};

TEST(VerbsRegistrar, NullPdIsEinval) {
  auto made = MakeVerbsRegistrar(nullptr, Config());
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(StatusToErrno(made.status()), EINVAL);
}

TEST_F(VerbsRegistrarTest, IsNamedVerbs) { EXPECT_STREQ(registrar_->name(), "verbs"); }

TEST_F(VerbsRegistrarTest, RegisterReturnsTheMrAndItsKeys) {
  auto reg = registrar_->Register(buf_, kBytes, kAccessLocalWrite | kAccessRemoteRead);
  ASSERT_TRUE(reg.ok()) << reg.status();
  const ibv_mr* mr = reg->mr;
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(reg->handle, reinterpret_cast<uintptr_t>(mr));
  EXPECT_EQ(mr->addr, buf_);
  EXPECT_EQ(mr->length, kBytes);
  EXPECT_EQ(mr->pd, pd_);
  EXPECT_EQ(reg->lkey, mr->lkey);
  EXPECT_EQ(reg->rkey, mr->rkey);
  EXPECT_EQ(reg->addr, buf_);
  EXPECT_EQ(reg->length, kBytes);
  EXPECT_EQ(client_.Counters().live_mrs, before_.live_mrs + 1);
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
  EXPECT_EQ(client_.Counters().live_mrs, before_.live_mrs);
}

TEST_F(VerbsRegistrarTest, RemoteWriteWithoutLocalWriteIsEinval) {
  auto reg = registrar_->Register(buf_, kBytes, kAccessRemoteWrite);
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(StatusToErrno(reg.status()), EINVAL);
  EXPECT_THAT(std::string(reg.status().message()), HasSubstr("LOCAL_WRITE"));
}

TEST_F(VerbsRegistrarTest, ZeroLengthIsEinval) {
  auto reg = registrar_->Register(buf_, 0, kAccessLocalWrite);
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(StatusToErrno(reg.status()), EINVAL);
}

TEST_F(VerbsRegistrarTest, UnmappedMemoryIsEfaultNamingTheCall) {
  char* hole = static_cast<char*>(MapPages(kBytes));
  ASSERT_EQ(munmap(hole, kBytes), 0);
  auto reg = registrar_->Register(hole, kBytes, kAccessLocalWrite);
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(StatusToErrno(reg.status()), EFAULT);
  EXPECT_THAT(std::string(reg.status().message()), HasSubstr("ibv_reg_mr_iova2"));
}

TEST_F(VerbsRegistrarTest, OnDemandWithoutOdpKeepsTheDevicesErrno) {
  auto reg = registrar_->Register(buf_, kBytes, kAccessLocalWrite | kAccessOnDemand);
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(StatusToErrno(reg.status()), EOPNOTSUPP);
}

TEST_F(VerbsRegistrarTest, DeregisterOfAnUnknownMrIsEinvalNamingTheCall) {
  ibv_mr forged{};
  Registration reg;
  reg.mr = &forged;
  reg.handle = reinterpret_cast<uintptr_t>(&forged);
  absl::Status s = registrar_->Deregister(reg);
  EXPECT_EQ(StatusToErrno(s), EINVAL);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ibv_dereg_mr"));
}

TEST_F(VerbsRegistrarTest, DeregisterOfARegistrationWithoutAnMrIsEinval) {
  Registration reg;
  reg.handle = 1;  // a number alone names no MR
  absl::Status s = registrar_->Deregister(reg);
  EXPECT_EQ(StatusToErrno(s), EINVAL);
  EXPECT_THAT(std::string(s.message()), HasSubstr("without an MR"));
}

TEST_F(VerbsRegistrarTest, DeviceWriteLandsInTheRegisteredMemory) {
  auto reg = registrar_->Register(buf_, kBytes, kAccessLocalWrite);
  ASSERT_TRUE(reg.ok()) << reg.status();
  const char data[] = "dma";
  ASSERT_TRUE(registrar_->DeviceWrite(*reg, 5000, data, sizeof data).ok());
  EXPECT_STREQ(buf_ + 5000, "dma");
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(VerbsRegistrarTest, DeviceWriteThroughAStaleRegistrationMissesTheNewMapping) {
  memset(buf_, 0, kBytes);
  auto reg = registrar_->Register(buf_, kBytes, kAccessLocalWrite);
  ASSERT_TRUE(reg.ok()) << reg.status();
  ASSERT_EQ(munmap(buf_, kBytes), 0);
  ASSERT_EQ(mmap(buf_, kBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0),
            buf_);
  const char data[] = "stale";
  ASSERT_TRUE(registrar_->DeviceWrite(*reg, 0, data, sizeof data).ok());
  EXPECT_EQ(buf_[0], 0) << "the write should have landed in the old pages";
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(VerbsRegistrarTest, DeviceWriteOutsideTheRegistrationIsEinval) {
  auto reg = registrar_->Register(buf_, 4096, kAccessLocalWrite);
  ASSERT_TRUE(reg.ok()) << reg.status();
  char two[2] = {};
  EXPECT_EQ(StatusToErrno(registrar_->DeviceWrite(*reg, 4095, two, 2)), EINVAL);
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(VerbsRegistrarTest, DeviceWriteKeepsSoftverbsErrno) {
  auto reg = registrar_->Register(buf_, 4096, kAccessRemoteRead);
  ASSERT_TRUE(reg.ok()) << reg.status();
  char byte = 1;
  absl::Status s = registrar_->DeviceWrite(*reg, 0, &byte, 1);
  EXPECT_EQ(StatusToErrno(s), EACCES);
  EXPECT_THAT(std::string(s.message()), HasSubstr("softverbs_device_write"));
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(VerbsRegistrarTest, DeviceWithoutOdpHasNoOdpCapabilities) {
  OdpCapabilities caps = registrar_->odp_capabilities();
  EXPECT_FALSE(caps.explicit_odp);
  EXPECT_FALSE(caps.implicit_odp);
  EXPECT_FALSE(caps.prefetch);
}

TEST_F(VerbsRegistrarTest, PrefetchWithoutOdpIsEnotsup) {
  auto reg = registrar_->Register(buf_, kBytes, kAccessLocalWrite);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(StatusToErrno(registrar_->Prefetch(*reg, buf_, kBytes)), ENOTSUP);
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(ExplicitOdpVerbs, ExplicitOdpDeviceHasExplicitOdpAndPrefetch) {
  OdpCapabilities caps = registrar_->odp_capabilities();
  EXPECT_TRUE(caps.explicit_odp);
  EXPECT_FALSE(caps.implicit_odp);
  EXPECT_TRUE(caps.prefetch);
}

TEST_F(ExplicitOdpVerbs, OdpRegionPinsNothingAndPrefetchReachesTheDevice) {
  auto reg = registrar_->Register(buf_, kBytes, kAccessLocalWrite | kAccessOnDemand);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(client_.Counters().bytes_pinned, before_.bytes_pinned);
  ASSERT_TRUE(registrar_->Prefetch(*reg, buf_ + 4096, 8192).ok());
  EXPECT_EQ(client_.Counters().advise_calls, before_.advise_calls + 1);
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(ExplicitOdpVerbs, PrefetchOutsideTheRegionKeepsTheDevicesErrno) {
  auto reg = registrar_->Register(buf_, 4096, kAccessLocalWrite | kAccessOnDemand);
  ASSERT_TRUE(reg.ok()) << reg.status();
  absl::Status s = registrar_->Prefetch(*reg, buf_, 8192);
  EXPECT_EQ(StatusToErrno(s), EINVAL);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ibv_advise_mr"));
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(ExplicitOdpVerbs, ImplicitRegistrationIsEnotsup) {
  auto reg = RegisterImplicitOdp(*registrar_, kAccessLocalWrite);
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(StatusToErrno(reg.status()), ENOTSUP);
}

TEST_F(ImplicitOdpVerbs, ImplicitOdpDeviceHasEverything) {
  OdpCapabilities caps = registrar_->odp_capabilities();
  EXPECT_TRUE(caps.explicit_odp);
  EXPECT_TRUE(caps.implicit_odp);
  EXPECT_TRUE(caps.prefetch);
}

TEST_F(ImplicitOdpVerbs, ImplicitMrKeysReachAnyAddress) {
  auto reg = RegisterImplicitOdp(*registrar_, kAccessLocalWrite);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->addr, nullptr);
  EXPECT_EQ(reg->length, kImplicitOdpLength);
  EXPECT_EQ(client_.Counters().bytes_pinned, before_.bytes_pinned);
  const char data[] = "anywhere";
  ASSERT_TRUE(
      registrar_->DeviceWrite(*reg, reinterpret_cast<uintptr_t>(buf_) + 64, data, sizeof data)
          .ok());
  EXPECT_STREQ(buf_ + 64, "anywhere");
  EXPECT_TRUE(registrar_->Prefetch(*reg, buf_, kBytes).ok());
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

// MakeVerbsRegistrar refuses an odp mode the device lacks, naming what lacks.
class OdpRequests : public softverbs::SoftverbsTest {
 protected:
  absl::Status Make(OdpMode mode) {
    Config config;
    config.odp = mode;
    auto made = MakeVerbsRegistrar(pd_, config);
    return made.status();
  }
};

TEST_F(OdpRequests, ImplicitOnADeviceWithoutOdpFailsClearly) {
  absl::Status s = Make(OdpMode::kImplicit);
  EXPECT_EQ(StatusToErrno(s), ENOTSUP);
  EXPECT_THAT(std::string(s.message()), HasSubstr("odp=implicit"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("does not support on-demand paging"));
}

TEST_F(OdpRequests, ExplicitOnADeviceWithoutOdpFailsClearly) {
  absl::Status s = Make(OdpMode::kExplicit);
  EXPECT_EQ(StatusToErrno(s), ENOTSUP);
  EXPECT_THAT(std::string(s.message()), HasSubstr("odp=explicit"));
}

TEST_F(OdpRequests, OffAndAutoWorkOnADeviceWithoutOdp) {
  EXPECT_TRUE(Make(OdpMode::kOff).ok());
  EXPECT_TRUE(Make(OdpMode::kAuto).ok());
}

class OdpRequestsOnExplicitDevice : public OdpRequests {
  const char* odp() const override { return "explicit"; }
};

TEST_F(OdpRequestsOnExplicitDevice, ImplicitFailsNamingTheMissingCapability) {
  absl::Status s = Make(OdpMode::kImplicit);
  EXPECT_EQ(StatusToErrno(s), ENOTSUP);
  EXPECT_THAT(std::string(s.message()), HasSubstr("IBV_ODP_SUPPORT_IMPLICIT"));
}

TEST_F(OdpRequestsOnExplicitDevice, ExplicitWorks) { EXPECT_TRUE(Make(OdpMode::kExplicit).ok()); }

}  // namespace
}  // namespace mrcache

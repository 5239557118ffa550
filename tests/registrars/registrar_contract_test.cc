// The contract of mrcache/registrar.h that every registrar keeps, run against
// each of them: uring, sim, and sim with mlock. Registrar-specific behaviour
// (keys, costs, pinning, staleness) is in <name>_registrar_test.cc.
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrar.h"
#include "mrcache/registrars/sim_registrar.h"
#include "mrcache/registrars/uring_registrar.h"
#include "tests/registrars/mapping.h"

namespace mrcache {
namespace {

using mrcache_test::AllBytesAre;
using mrcache_test::AnonMapping;

struct Counts {
  uint64_t registrations = 0, deregistrations = 0, live = 0;
};

class RegistrarContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& kind = GetParam();
    Config config;
    if (kind == "uring") {
      if (!UringAvailable()) GTEST_SKIP() << "io_uring fixed buffers are unavailable here";
      config.uring_slots = 256;
      auto made = MakeUringRegistrar(config);
      ASSERT_TRUE(made.ok()) << made.status();
      registrar_ = std::move(*made);
      return;
    }
    config.sim_base_ns = 100;
    config.sim_page_ns = 10;
    config.sim_mlock = kind == "sim_mlock";
    registrar_ = MakeSimRegistrar(config);
  }

  void TearDown() override {
    if (registrar_ == nullptr) return;
    Counts c = GetCounts();
    EXPECT_EQ(c.live, 0u) << "a test leaked a registration";
    EXPECT_EQ(c.registrations, c.deregistrations);
    if (auto s = GetSimRegistrarStats(*registrar_)) {
      EXPECT_EQ(s->mlocked_pages, 0u);
    }
  }

  Counts GetCounts() const {
    Counts c;
    if (auto u = GetUringRegistrarStats(*registrar_)) {
      c = {u->registrations, u->deregistrations, u->live};
    } else if (auto s = GetSimRegistrarStats(*registrar_)) {
      c = {s->registrations, s->deregistrations, s->live};
    } else {
      ADD_FAILURE() << "no counters for the " << registrar_->name() << " registrar";
    }
    return c;
  }

  int RegisterErrno(void* addr, size_t length, int access = kAccessLocalWrite) {
    auto reg = registrar_->Register(addr, length, access);
    if (reg.ok()) {
      EXPECT_TRUE(registrar_->Deregister(*reg).ok());
    }
    return StatusToErrno(reg.status());
  }

  std::unique_ptr<Registrar> registrar_;
};

TEST_P(RegistrarContractTest, RegisterEchoesRangeAndAccessWithNonZeroKeys) {
  AnonMapping m(8192);
  auto reg = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite | kAccessRemoteRead);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->addr, m.addr());
  EXPECT_EQ(reg->length, m.length());
  EXPECT_EQ(reg->access, kAccessLocalWrite | kAccessRemoteRead);
  EXPECT_NE(reg->lkey, 0u);
  EXPECT_NE(reg->rkey, 0u);
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_P(RegistrarContractTest, CountsRegistrationsDeregistrationsAndLive) {
  AnonMapping m(3 * 4096);
  std::vector<Registration> regs;
  for (int i = 0; i < 3; ++i) {
    auto reg = registrar_->Register(m.addr() + i * 4096, 4096, 0);
    ASSERT_TRUE(reg.ok()) << reg.status();
    regs.push_back(*reg);
  }
  EXPECT_EQ(GetCounts().registrations, 3u);
  EXPECT_EQ(GetCounts().live, 3u);
  ASSERT_TRUE(registrar_->Deregister(regs[0]).ok());
  EXPECT_EQ(GetCounts().deregistrations, 1u);
  EXPECT_EQ(GetCounts().live, 2u);
  for (size_t i = 1; i < regs.size(); ++i) {
    ASSERT_TRUE(registrar_->Deregister(regs[i]).ok());
  }
  EXPECT_EQ(GetCounts().live, 0u);
}

TEST_P(RegistrarContractTest, OverlappingRegistrationsAreIndependent) {
  AnonMapping m(8 * 4096);
  auto whole = registrar_->Register(m.addr(), 8 * 4096, kAccessLocalWrite);
  auto part = registrar_->Register(m.addr() + 4096, 2 * 4096, kAccessLocalWrite);
  ASSERT_TRUE(whole.ok() && part.ok());
  EXPECT_NE(whole->handle, part->handle);
  EXPECT_NE(whole->lkey, part->lkey);
  ASSERT_TRUE(registrar_->Deregister(*whole).ok());
  char byte = 9;
  EXPECT_TRUE(registrar_->DeviceWrite(*part, 0, &byte, 1).ok());
  EXPECT_EQ(m.addr()[4096], 9);
  EXPECT_TRUE(registrar_->Deregister(*part).ok());
}

TEST_P(RegistrarContractTest, ZeroLengthIsEinval) {
  AnonMapping m(4096);
  EXPECT_EQ(RegisterErrno(m.addr(), 0), EINVAL);
}

TEST_P(RegistrarContractTest, RangeWrappingAroundTheAddressSpaceIsEinval) {
  EXPECT_EQ(RegisterErrno(reinterpret_cast<void*>(UINTPTR_MAX - 4095), 8192), EINVAL);
}

TEST_P(RegistrarContractTest, UnknownAccessBitsAreEinval) {
  AnonMapping m(4096);
  EXPECT_EQ(RegisterErrno(m.addr(), 4096, kAccessLocalWrite | (1 << 12)), EINVAL);
}

TEST_P(RegistrarContractTest, RemoteWriteOrAtomicWithoutLocalWriteIsEinval) {
  AnonMapping m(4096);
  EXPECT_EQ(RegisterErrno(m.addr(), 4096, kAccessRemoteWrite), EINVAL);
  EXPECT_EQ(RegisterErrno(m.addr(), 4096, kAccessRemoteAtomic), EINVAL);
  EXPECT_EQ(RegisterErrno(m.addr(), 4096, kAccessRemoteRead), 0);
}

TEST_P(RegistrarContractTest, UnmappedMemoryIsEfault) {
  AnonMapping m(4096);
  char* addr = m.addr();
  m.Unmap(0, 4096);
  EXPECT_EQ(RegisterErrno(addr, 4096), EFAULT);
  EXPECT_EQ(GetCounts().registrations, 0u);
}

TEST_P(RegistrarContractTest, RangeWithAnUnmappedPageInTheMiddleIsEfault) {
  AnonMapping m(3 * 4096);
  m.Unmap(4096, 4096);
  EXPECT_EQ(RegisterErrno(m.addr(), 3 * 4096), EFAULT);
}

TEST_P(RegistrarContractTest, RangeEndingOneByteIntoAnUnmappedPageIsEfault) {
  AnonMapping m(2 * 4096);
  m.Unmap(4096, 4096);
  EXPECT_EQ(RegisterErrno(m.addr() + 100, 4096 - 100 + 1), EFAULT);
  EXPECT_EQ(RegisterErrno(m.addr() + 100, 4096 - 100), 0);
}

TEST_P(RegistrarContractTest, DeregisterOfAnUnknownRegistrationIsEinval) {
  Registration bogus;
  bogus.handle = 7;
  bogus.addr = reinterpret_cast<void*>(0x10000);
  bogus.length = 4096;
  EXPECT_EQ(StatusToErrno(registrar_->Deregister(bogus)), EINVAL);
}

TEST_P(RegistrarContractTest, SecondDeregisterIsEinval) {
  AnonMapping m(4096);
  auto reg = registrar_->Register(m.addr(), 4096, 0);
  ASSERT_TRUE(reg.ok());
  ASSERT_TRUE(registrar_->Deregister(*reg).ok());
  EXPECT_EQ(StatusToErrno(registrar_->Deregister(*reg)), EINVAL);
  EXPECT_EQ(GetCounts().deregistrations, 1u);
}

TEST_P(RegistrarContractTest, DeviceWriteLandsInTheRegisteredMemory) {
  AnonMapping m(16 * 1024);
  auto reg = registrar_->Register(m.addr(), m.length(), kAccessLocalWrite);
  ASSERT_TRUE(reg.ok()) << reg.status();
  std::string data(5000, 'x');
  ASSERT_TRUE(registrar_->DeviceWrite(*reg, 3000, data.data(), data.size()).ok());
  EXPECT_TRUE(AllBytesAre(m.addr(), 3000, 0));
  EXPECT_TRUE(AllBytesAre(m.addr() + 3000, 5000, 'x'));
  EXPECT_TRUE(AllBytesAre(m.addr() + 8000, m.length() - 8000, 0));
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_P(RegistrarContractTest, DeviceWriteOfNothingAtTheEndIsOk) {
  AnonMapping m(4096);
  auto reg = registrar_->Register(m.addr(), 4096, kAccessLocalWrite);
  ASSERT_TRUE(reg.ok());
  char byte = 1;
  EXPECT_TRUE(registrar_->DeviceWrite(*reg, 4096, &byte, 0).ok());
  EXPECT_TRUE(AllBytesAre(m.addr(), 4096, 0));
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_P(RegistrarContractTest, DeviceWriteBeyondTheRegistrationIsEinval) {
  AnonMapping m(8192);
  auto reg = registrar_->Register(m.addr(), 4096, kAccessLocalWrite);
  ASSERT_TRUE(reg.ok());
  char byte = 1;
  EXPECT_EQ(StatusToErrno(registrar_->DeviceWrite(*reg, 4096, &byte, 1)), EINVAL);
  EXPECT_EQ(StatusToErrno(registrar_->DeviceWrite(*reg, 4000, &byte, SIZE_MAX)), EINVAL);
  EXPECT_EQ(StatusToErrno(registrar_->DeviceWrite(*reg, SIZE_MAX, &byte, 2)), EINVAL);
  EXPECT_TRUE(AllBytesAre(m.addr(), 8192, 0));
  EXPECT_TRUE(registrar_->DeviceWrite(*reg, 4095, &byte, 1).ok());
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_P(RegistrarContractTest, DeviceWriteThroughADeregisteredRegistrationIsEinval) {
  AnonMapping m(4096);
  auto reg = registrar_->Register(m.addr(), 4096, kAccessLocalWrite);
  ASSERT_TRUE(reg.ok());
  ASSERT_TRUE(registrar_->Deregister(*reg).ok());
  char byte = 1;
  EXPECT_EQ(StatusToErrno(registrar_->DeviceWrite(*reg, 0, &byte, 1)), EINVAL);
  EXPECT_EQ(m.addr()[0], 0);
}

// Four threads register and deregister overlapping ranges (the same pages) at
// once; no two live registrations may share a handle, and every call succeeds.
TEST_P(RegistrarContractTest, FourThreadsRegisterConcurrently) {
  constexpr int kThreads = 4, kRounds = 50, kPerRound = 8;
  AnonMapping m((kPerRound + 1) * 4096);
  std::mutex mu;
  std::set<uint64_t> live_handles;
  bool duplicate = false;
  int failures = 0;
  auto worker = [&] {
    for (int round = 0; round < kRounds; ++round) {
      std::vector<Registration> mine;
      for (int i = 0; i < kPerRound; ++i) {
        auto reg = registrar_->Register(m.addr() + i * 4096, 2 * 4096, kAccessLocalWrite);
        std::lock_guard<std::mutex> lock(mu);
        if (!reg.ok()) {
          ADD_FAILURE() << reg.status();
          ++failures;
          continue;
        }
        duplicate |= !live_handles.insert(reg->handle).second;
        mine.push_back(*reg);
      }
      for (const Registration& reg : mine) {
        {
          std::lock_guard<std::mutex> lock(mu);
          live_handles.erase(reg.handle);
        }
        absl::Status s = registrar_->Deregister(reg);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          ADD_FAILURE() << s;
          ++failures;
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker);
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  EXPECT_FALSE(duplicate) << "two live registrations shared a handle";
  EXPECT_EQ(GetCounts().registrations, uint64_t{kThreads * kRounds * kPerRound});
  EXPECT_EQ(GetCounts().deregistrations, uint64_t{kThreads * kRounds * kPerRound});
}

INSTANTIATE_TEST_SUITE_P(AllRegistrars, RegistrarContractTest,
                         ::testing::Values("uring", "sim", "sim_mlock"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace mrcache

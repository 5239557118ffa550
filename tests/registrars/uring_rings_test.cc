// The uring registrar's rings (mrcache/registrars/uring_rings.h): a
// registration goes to the ring with the least work in flight, so it does not
// wait while another thread unregisters a big buffer on another ring.
#include "mrcache/registrars/uring_rings.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/types/optional.h"
#include "gtest/gtest.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/uring_registrar.h"
#include "tests/registrars/mapping.h"

namespace mrcache {
namespace {

using mrcache_test::AllBytesAre;
using mrcache_test::AnonMapping;

constexpr size_t kMiB = size_t{1} << 20;

class UringRingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!UringAvailable()) GTEST_SKIP() << "io_uring fixed buffers are unavailable here";
    ASSERT_EQ(rings_.Init(4).err, 0);
  }
  UringRings rings_;
};

TEST_F(UringRingsTest, AllIdleRingsGiveTheFirst) { EXPECT_EQ(rings_.LeastBusy(), 0u); }

TEST_F(UringRingsTest, ARingWithWorkInFlightIsPassedOver) {
  UringRings::Busy unregistering(rings_, 0, 1 << 30);
  EXPECT_EQ(rings_.LeastBusy(), 1u);
}

TEST_F(UringRingsTest, WhenEveryRingIsBusyTheOneWithFewestBytesInFlightIsChosen) {
  UringRings::Busy a(rings_, 0, 64 * kMiB);
  UringRings::Busy b(rings_, 1, 4096);
  EXPECT_EQ(rings_.LeastBusy(), 1u);
  UringRings::Busy c(rings_, 1, 1 << 30);
  EXPECT_EQ(rings_.LeastBusy(), 0u);
}

TEST_F(UringRingsTest, ARingIsIdleAgainWhenItsWorkEnds) {
  { UringRings::Busy unregistering(rings_, 0, 1 << 30); }
  EXPECT_EQ(rings_.LeastBusy(), 0u);
}

// Holds one of a uring registrar's rings: another thread registers a page
// that is missing under a userfaultfd, so the kernel stops inside that
// io_uring_register call, holding its ring's lock, until Release() resolves
// the fault. `skip` says why it could not (userfaultfd unavailable here).
class HeldRing {
 public:
  explicit HeldRing(Registrar& registrar) : registrar_(registrar) {
    uffd_ = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (uffd_ < 0) {
      skip = std::string("userfaultfd: ") + std::strerror(errno);
      return;
    }
    uffdio_api api{};
    api.api = UFFD_API;
    uffdio_register reg{};
    reg.range = {reinterpret_cast<uintptr_t>(page_.addr()), page_.length()};
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (ioctl(uffd_, UFFDIO_API, &api) != 0 || ioctl(uffd_, UFFDIO_REGISTER, &reg) != 0) {
      skip = std::string("userfaultfd setup: ") + std::strerror(errno);
      return;
    }
    thread_ = std::thread(
        [this] { held_ = registrar_.Register(page_.addr(), page_.length(), kAccessLocalWrite); });
    pollfd pfd{uffd_, POLLIN, 0};
    uffd_msg msg{};
    faulted_ = poll(&pfd, 1, 10000) == 1 && read(uffd_, &msg, sizeof msg) == sizeof msg &&
               msg.event == UFFD_EVENT_PAGEFAULT;
  }
  ~HeldRing() {
    Release();
    if (uffd_ >= 0) close(uffd_);
  }

  // True once the registering thread is stopped inside the kernel.
  bool faulted() const { return faulted_; }

  // Lets the held registration finish and deregisters it.
  void Release() {
    if (!thread_.joinable()) return;
    uffdio_zeropage zero{};
    zero.range = {reinterpret_cast<uintptr_t>(page_.addr()), page_.length()};
    EXPECT_EQ(ioctl(uffd_, UFFDIO_ZEROPAGE, &zero), 0) << std::strerror(errno);
    thread_.join();
    ASSERT_TRUE(held_.ok()) << held_.status();
    EXPECT_TRUE(registrar_.Deregister(*held_).ok());
  }

  std::string skip;

 private:
  Registrar& registrar_;
  AnonMapping page_{4096};
  int uffd_ = -1;
  bool faulted_ = false;
  std::thread thread_;
  absl::StatusOr<Registration> held_;
};

class UringRegistrarRingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!UringAvailable()) GTEST_SKIP() << "io_uring fixed buffers are unavailable here";
    Config config;
    config.uring_slots = 8;
    auto made = MakeUringRegistrar(config);
    ASSERT_TRUE(made.ok()) << made.status();
    registrar_ = std::move(*made);
  }
  void TearDown() override {
    if (registrar_ == nullptr) return;
    const UringRegistrarStats stats = *GetUringRegistrarStats(*registrar_);
    EXPECT_EQ(stats.live, 0u);
    EXPECT_EQ(stats.registrations, stats.deregistrations);
  }

  // Registers `page` on another thread; the registration if it returned
  // within 2 s, nullopt otherwise (then it is deregistered once it returns,
  // after `held` is released).
  absl::optional<Registration> RegisterWithin2s(HeldRing& held, AnonMapping& page) {
    std::atomic<bool> returned{false};
    absl::StatusOr<Registration> reg;
    std::thread t([&] {
      reg = registrar_->Register(page.addr(), page.length(), kAccessLocalWrite);
      returned = true;
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!returned.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const bool in_time = returned.load();
    if (!in_time) held.Release();
    t.join();
    EXPECT_TRUE(reg.ok()) << reg.status();
    if (!reg.ok()) return absl::nullopt;
    if (!in_time) {
      EXPECT_TRUE(registrar_->Deregister(*reg).ok());
      return absl::nullopt;
    }
    return *reg;
  }

  std::unique_ptr<Registrar> registrar_;
};

// The kernel unpins a deregistered buffer inside io_uring_register, under the
// ring's lock (milliseconds for a big buffer); a registration must not wait
// for another thread's call on a ring. Held here by a registration stopped
// in a page fault, the one way to hold the lock for as long as a test needs.
TEST_F(UringRegistrarRingsTest, ARegistrationDoesNotWaitForAnotherThreadsCallOnItsRing) {
  HeldRing held(*registrar_);
  if (!held.skip.empty()) GTEST_SKIP() << held.skip;
  ASSERT_TRUE(held.faulted()) << "the held registration never reached its page fault";
  AnonMapping page(4096);
  absl::optional<Registration> reg = RegisterWithin2s(held, page);
  ASSERT_TRUE(reg.has_value()) << "the registration waited for the other thread's call";
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

TEST_F(UringRegistrarRingsTest, DeviceTransfersReachARegistrationOnAnotherRing) {
  HeldRing held(*registrar_);
  if (!held.skip.empty()) GTEST_SKIP() << held.skip;
  ASSERT_TRUE(held.faulted()) << "the held registration never reached its page fault";
  AnonMapping page(4096);
  std::memset(page.addr(), 'c', 4096);
  absl::optional<Registration> reg = RegisterWithin2s(held, page);
  ASSERT_TRUE(reg.has_value()) << "the registration waited for the other thread's call";
  std::string back(4096, '\0');
  EXPECT_TRUE(UringDeviceRead(*registrar_, *reg, 0, back.data(), back.size()).ok());
  EXPECT_EQ(back, std::string(4096, 'c'));
  std::string data(4096, 'R');
  EXPECT_TRUE(registrar_->DeviceWrite(*reg, 0, data.data(), data.size()).ok());
  EXPECT_TRUE(AllBytesAre(page.addr(), 4096, 'R'));
  EXPECT_TRUE(registrar_->Deregister(*reg).ok());
}

}  // namespace
}  // namespace mrcache

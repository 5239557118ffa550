// region_limit_cases.h: gets that would make a region longer than a
// registrar's limit (Registrar::max_region_bytes) by merging, bridging or
// alignment, shared by the tests of every registrar's limit
// (tests/cache/region_limit_test.cc: max_region_bytes on sim and uring;
// tests/verbs/cache_device_limits_test.cc: softverbs' max_mr_size).
//
// A LimitProbe records, through a CountingRegistrar's on_register hook, the
// longest range the cache asked the registrar for, and collects the
// refusals of over-long registrations mrcache logs meanwhile (other
// messages, such as a monitor's warning, are not collected).
// The areas are 4 MiB of resident anonymous memory, 4 MiB-aligned (so in one
// block of any bridge_bytes from 4 MiB up), whose first and last pages are
// read-only: the mapping of the rest is then exactly the area between them.
#ifndef MRCACHE_TESTS_CACHE_REGION_LIMIT_CASES_H_
#define MRCACHE_TESTS_CACHE_REGION_LIMIT_CASES_H_

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/internal/log.h"
#include "mrcache/monitors/monitor.h"
#include "tests/cache/counting_registrar.h"

namespace mrcache {
namespace testing {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kAreaBytes = 4 * kMiB;

// A monitor that reports every release (bridging needs one), or "" if none
// can exist in this build (ENOTSUP); any other failure to install one is a
// test failure.
inline std::string CompleteMonitor() {
  for (const char* name : {"patch", "symbols+uffd"}) {
    auto lease = AcquireMonitor(name);
    if (lease.ok()) return name;
    if (StatusToErrno(lease.status()) != ENOTSUP) {
      ADD_FAILURE() << name << ": " << lease.status();
      return "";
    }
  }
  return "";
}

// The longest registration asked for, and the refusals of longer ones that
// mrcache logged, while alive.
class LimitProbe {
 public:
  explicit LimitProbe(RegistrarCounters* counters) {
    counters->on_register = [longest = longest_](void*, size_t length) {
      size_t seen = longest->load();
      while (length > seen && !longest->compare_exchange_weak(seen, length)) {
      }
    };
    SetLogCallback(&LimitProbe::Collect, this);
  }
  ~LimitProbe() { SetLogCallback(nullptr, nullptr); }
  LimitProbe(const LimitProbe&) = delete;
  LimitProbe& operator=(const LimitProbe&) = delete;

  size_t longest() const { return longest_->load(); }
  std::vector<std::string> refusals() const {
    std::lock_guard<std::mutex> lock(mu_);
    return refusals_;
  }

 private:
  static void Collect(void* self, int, const char* message) {
    if (strstr(message, " bytes exceed ") == nullptr) return;  // CheckRegionLimit's form
    auto* probe = static_cast<LimitProbe*>(self);
    std::lock_guard<std::mutex> lock(probe->mu_);
    probe->refusals_.push_back(message);
  }

  std::shared_ptr<std::atomic<size_t>> longest_ = std::make_shared<std::atomic<size_t>>(0);
  mutable std::mutex mu_;
  std::vector<std::string> refusals_;
};

// kAreaBytes of resident memory as described above; unmapped at destruction.
class LimitArea {
 public:
  LimitArea() {
    void* raw =
        mmap(nullptr, 2 * kAreaBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return;
    const uintptr_t first = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t start = (first + kAreaBytes - 1) & ~(kAreaBytes - 1);
    if (start > first) munmap(raw, start - first);
    munmap(reinterpret_cast<void*>(start + kAreaBytes), first + kAreaBytes - start);
    base_ = reinterpret_cast<char*>(start);
    memset(base_, 1, kAreaBytes);
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    if (mprotect(base_, page, PROT_READ) != 0 ||
        mprotect(base_ + kAreaBytes - page, page, PROT_READ) != 0) {
      munmap(base_, kAreaBytes);
      base_ = nullptr;
    }
  }
  ~LimitArea() {
    if (base_ != nullptr) munmap(base_, kAreaBytes);
  }
  LimitArea(const LimitArea&) = delete;
  LimitArea& operator=(const LimitArea&) = delete;

  char* base() const { return base_; }

 private:
  char* base_ = nullptr;
};

// Gets (and puts) `length` bytes at `at` with `access`, checking that the
// region covers them; the region's length, or 0 after a test failure.
inline size_t GetAndPut(Cache& cache, char* at, size_t length, int access) {
  auto region = cache.Get(at, length, access);
  EXPECT_TRUE(region.ok()) << region.status();
  if (!region.ok()) return 0;
  const RegionInfo info = region->info();
  EXPECT_LE(static_cast<char*>(info.addr), at);
  EXPECT_GE(static_cast<char*>(info.addr) + info.length, at + length) << "covers less than asked";
  return info.length;
}

// Two overlapping requests of 768 KiB whose union is 1280 KiB: they merge
// unless a limit stops them.
inline void GetsThatWouldMergePastOneMiB(Cache& cache, const LimitArea& area, int access) {
  char* at = area.base() + kMiB;
  GetAndPut(cache, at, 768 << 10, access);
  GetAndPut(cache, at + (512 << 10), 768 << 10, access);
}

// Small requests spread over the area, resident and one mapping: the second
// bridges over the whole mapping unless a limit (or bridge_bytes) stops it;
// each 1 MiB-aligned block holds two of them, so that bridging within the
// block still happens below a 1 MiB limit.
inline void GetsThatWouldBridgePastOneMiB(Cache& cache, const LimitArea& area) {
  for (size_t offset : {size_t{64} << 10, 3 * kMiB, 2 * kMiB + 8192, kMiB + 4096, size_t{512} << 10,
                        3 * kMiB + (512 << 10)}) {
    GetAndPut(cache, area.base() + offset, 100, kAccessLocalWrite);
  }
}

}  // namespace testing
}  // namespace mrcache

#endif  // MRCACHE_TESTS_CACHE_REGION_LIMIT_CASES_H_

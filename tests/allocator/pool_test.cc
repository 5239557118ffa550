// The pool of pre-registered buffers (allocator/pool.h), against a registrar
// that counts and remembers registrations.
#include "allocator/pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mrcache/errno_status.h"
#include "tests/allocator/counting_registrar.h"

namespace mrcache {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

class PoolTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    config_.pool_chunk_bytes = 2 * kMiB;
    config_.pool_max_bytes = 256 * kMiB;
    options_.thread_caches = GetParam();
  }
  void TearDown() override {
    pool_.reset();
    // Every test: each registration the pool made is deregistered exactly once.
    EXPECT_EQ(registrar_.registrations(), registrar_.deregistrations());
    EXPECT_EQ(registrar_.live(), 0u);
    EXPECT_EQ(registrar_.bad_deregistrations(), 0u);
  }
  Pool& MakePool() {
    auto pool = Pool::Create(registrar_, config_, options_);
    EXPECT_TRUE(pool.ok()) << pool.status();
    pool_ = std::move(*pool);
    return *pool_;
  }
  // The keys name a live registration that covers [p, p + size).
  void ExpectCovered(void* p, size_t size, const RegionInfo& keys) {
    EXPECT_EQ(keys.addr, p);
    EXPECT_EQ(keys.length, size);
    Registration reg = registrar_.Find(keys.handle);
    ASSERT_NE(reg.handle, 0u) << "keys name no live registration";
    EXPECT_EQ(keys.lkey, reg.lkey);
    EXPECT_EQ(keys.rkey, reg.rkey);
    EXPECT_EQ(keys.access, options_.access);
    auto start = reinterpret_cast<uintptr_t>(reg.addr);
    auto addr = reinterpret_cast<uintptr_t>(p);
    EXPECT_LE(start, addr);
    EXPECT_LE(addr + size, start + reg.length)
        << "buffer of " << size << " runs past its registration";
  }

  CountingRegistrar registrar_;
  Config config_;
  PoolOptions options_;
  std::unique_ptr<Pool> pool_;
};

TEST_P(PoolTest, KeysCoverEveryByteOfEveryAllocation) {
  Pool& pool = MakePool();
  std::vector<size_t> sizes = {1,        63,
                               64,       65,
                               100,      1000,
                               4096,     5000,
                               16384,    65536,
                               65537,    300000,
                               kMiB,     2 * kMiB - 4096,
                               2 * kMiB, 3 * kMiB + 17,
                               9 * kMiB};
  std::vector<void*> buffers;
  for (int round = 0; round < 3; ++round) {
    for (size_t size : sizes) {
      RegionInfo keys;
      absl::StatusOr<void*> p = pool.Alloc(size, &keys);
      ASSERT_TRUE(p.ok()) << p.status();
      ExpectCovered(*p, size, keys);
      std::memset(*p, 0xab, size);  // every byte is mapped and writable
      buffers.push_back(*p);
    }
  }
  for (void* p : buffers) {
    EXPECT_TRUE(pool.Free(p).ok());
  }
}

TEST_P(PoolTest, BuffersAre64ByteAlignedAndNeverOverlap) {
  Pool& pool = MakePool();
  std::map<uintptr_t, size_t> taken;
  for (size_t size = 1; size <= 5000; size += 7) {
    absl::StatusOr<void*> p = pool.Alloc(size);
    ASSERT_TRUE(p.ok()) << p.status();
    auto addr = reinterpret_cast<uintptr_t>(*p);
    EXPECT_EQ(addr % 64, 0u) << "size " << size;
    taken[addr] = std::max<size_t>(size, 64);
  }
  uintptr_t end = 0;
  for (const auto& [addr, size] : taken) {
    EXPECT_GE(addr, end) << "buffers overlap";
    end = addr + size;
  }
  for (const auto& entry : taken) {
    EXPECT_TRUE(pool.Free(reinterpret_cast<void*>(entry.first)).ok());
  }
}

TEST_P(PoolTest, KeysOfAnAddressInsideABufferReachTheEndOfItsChunk) {
  Pool& pool = MakePool();
  RegionInfo alloc_keys;
  void* p = *pool.Alloc(4096, &alloc_keys);
  RegionInfo keys;
  ASSERT_TRUE(pool.Keys(static_cast<char*>(p) + 100, &keys).ok());
  EXPECT_EQ(keys.addr, static_cast<char*>(p) + 100);
  EXPECT_EQ(keys.lkey, alloc_keys.lkey);
  Registration reg = registrar_.Find(keys.handle);
  EXPECT_EQ(static_cast<char*>(keys.addr) + keys.length, static_cast<char*>(reg.addr) + reg.length);
  EXPECT_TRUE(pool.Free(p).ok());
}

TEST_P(PoolTest, KeysOfAForeignAddressIsEinval) {
  Pool& pool = MakePool();
  void* heap = std::malloc(128);
  int stack = 0;
  RegionInfo keys;
  EXPECT_EQ(StatusToErrno(pool.Keys(heap, &keys)), EINVAL);
  EXPECT_EQ(StatusToErrno(pool.Keys(&stack, &keys)), EINVAL);
  EXPECT_EQ(StatusToErrno(pool.Keys(nullptr, &keys)), EINVAL);
  std::free(heap);
}

TEST_P(PoolTest, AllocationLargerThanAChunkGetsItsOwnRegistration) {
  Pool& pool = MakePool();
  void* small = *pool.Alloc(64);
  const uint64_t before = registrar_.registrations();
  RegionInfo keys;
  absl::StatusOr<void*> big = pool.Alloc(5 * kMiB, &keys);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(registrar_.registrations(), before + 1);
  ExpectCovered(*big, 5 * kMiB, keys);
  EXPECT_GE(registrar_.Find(keys.handle).length, 5 * kMiB);
  EXPECT_TRUE(pool.Free(*big).ok());
  EXPECT_TRUE(pool.Free(small).ok());
}

TEST_P(PoolTest, ExtentsOfDifferentChunksNeverMerge) {
  // Small chunks that the kernel tends to place next to each other: after
  // freeing buffers that fill them, a buffer twice as large must still come
  // from a single registration.
  config_.pool_chunk_bytes = 64 << 10;
  Pool& pool = MakePool();
  std::vector<void*> buffers;
  for (int i = 0; i < 32; ++i) buffers.push_back(*pool.Alloc(40 << 10));
  for (void* p : buffers) {
    ASSERT_TRUE(pool.Free(p).ok());
  }
  buffers.clear();
  for (int i = 0; i < 16; ++i) {
    RegionInfo keys;
    absl::StatusOr<void*> p = pool.Alloc(96 << 10, &keys);
    ASSERT_TRUE(p.ok()) << p.status();
    ExpectCovered(*p, 96 << 10, keys);
    buffers.push_back(*p);
  }
  for (void* p : buffers) {
    ASSERT_TRUE(pool.Free(p).ok());
  }
}

TEST_P(PoolTest, ManyThreadsNeitherLoseNorDoubleHandBuffers) {
  Pool& pool = MakePool();
  constexpr int kThreads = 4;
  constexpr int kOps = 20000;
  std::mutex mu;
  std::map<uintptr_t, size_t> live;               // every buffer currently handed out
  std::vector<std::pair<void*, size_t>> handoff;  // freed by another thread
  std::atomic<int> failures{0};
  auto worker = [&](int id) {
    std::mt19937 rng(id);
    std::vector<std::pair<void*, size_t>> mine;
    for (int op = 0; op < kOps; ++op) {
      if (mine.size() < 64 && (rng() % 3 != 0 || mine.empty())) {
        static const size_t kSizes[] = {1, 64, 200, 1024, 4096, 20000, 65536, 300000};
        size_t size = kSizes[rng() % 8];
        RegionInfo keys;
        absl::StatusOr<void*> p = pool.Alloc(size, &keys);
        if (!p.ok()) {
          failures++;
          continue;
        }
        auto addr = reinterpret_cast<uintptr_t>(*p);
        {
          std::lock_guard<std::mutex> lock(mu);
          auto next = live.lower_bound(addr);
          if ((next != live.end() && next->first < addr + size) ||
              (next != live.begin() && std::prev(next)->first + std::prev(next)->second > addr)) {
            failures++;  // handed out while another holder still has it
          }
          live[addr] = size;
        }
        std::memset(*p, id + 1, size);
        mine.emplace_back(*p, size);
      } else {
        size_t i = rng() % mine.size();
        auto [p, size] = mine[i];
        mine[i] = mine.back();
        mine.pop_back();
        const auto* bytes = static_cast<const unsigned char*>(p);
        if (bytes[0] != id + 1 || bytes[size - 1] != id + 1) failures++;  // someone wrote into it
        {
          std::lock_guard<std::mutex> lock(mu);
          live.erase(reinterpret_cast<uintptr_t>(p));
          if (rng() % 4 == 0) {  // let another thread free it
            handoff.emplace_back(p, size);
            continue;
          }
          if (!handoff.empty()) {
            auto other = handoff.back();
            handoff.pop_back();
            if (!pool.Free(other.first).ok()) failures++;
          }
        }
        if (!pool.Free(p).ok()) failures++;
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (auto [p, size] : mine) {
      live.erase(reinterpret_cast<uintptr_t>(p));
      if (!pool.Free(p).ok()) failures++;
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (auto& t : threads) t.join();
  for (auto [p, size] : handoff) {
    EXPECT_TRUE(pool.Free(p).ok());
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(live.empty());
  // The threads have exited and given their caches back: nothing is lost.
  EXPECT_EQ(pool.allocated_buffers(), 0u);
}

TEST_P(PoolTest, PoolMaxBytesGivesEnomemNotACrash) {
  config_.pool_max_bytes = 4 * kMiB;
  Pool& pool = MakePool();
  std::vector<void*> buffers;
  absl::Status last;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<void*> p = pool.Alloc(64 << 10);
    if (!p.ok()) {
      last = p.status();
      break;
    }
    buffers.push_back(*p);
  }
  EXPECT_EQ(StatusToErrno(last), ENOMEM) << last;
  EXPECT_NE(last.message().find("pool_max_bytes"), absl::string_view::npos) << last;
  EXPECT_LE(pool.stats().registered_bytes, 4 * kMiB);
  EXPECT_GE(buffers.size(), 32u);  // at least one full chunk of 64 KiB buffers
  EXPECT_EQ(StatusToErrno(pool.Alloc(5 * kMiB).status()), ENOMEM);
  for (void* p : buffers) {
    ASSERT_TRUE(pool.Free(p).ok());
  }
  // What was freed can be handed out again.
  absl::StatusOr<void*> again = pool.Alloc(64 << 10);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(pool.Free(*again).ok());
}

TEST_P(PoolTest, FreeOfAForeignPointerIsRejectedAndChangesNothing) {
  Pool& pool = MakePool();
  void* mine = *pool.Alloc(256);
  char* heap = static_cast<char*>(std::malloc(256));
  std::memset(heap, 0x5a, 256);
  int stack = 7;
  EXPECT_EQ(StatusToErrno(pool.Free(heap)), EINVAL);
  EXPECT_EQ(StatusToErrno(pool.Free(&stack)), EINVAL);
  absl::Status misaligned = pool.Free(static_cast<char*>(mine) + 8);
  EXPECT_EQ(StatusToErrno(misaligned), EINVAL);
  EXPECT_NE(misaligned.message().find("not a buffer of this pool"), absl::string_view::npos);
  // Nothing was corrupted: the heap block is intact and the pool still works.
  for (int i = 0; i < 256; ++i) {
    ASSERT_EQ(heap[i], 0x5a);
  }
  std::free(heap);
  EXPECT_EQ(stack, 7);
  std::vector<void*> buffers;
  for (int i = 0; i < 1000; ++i) buffers.push_back(*pool.Alloc(256));
  std::sort(buffers.begin(), buffers.end());
  EXPECT_EQ(std::adjacent_find(buffers.begin(), buffers.end()), buffers.end());
  for (void* p : buffers) {
    EXPECT_TRUE(pool.Free(p).ok());
  }
  EXPECT_TRUE(pool.Free(mine).ok());
}

TEST_P(PoolTest, EmptyChunksBeyondPoolRetainBytesAreReleased) {
  config_.pool_retain_bytes = 2 * kMiB;
  Pool& pool = MakePool();
  std::vector<void*> buffers;
  for (int i = 0; i < 100; ++i) buffers.push_back(*pool.Alloc(100000));
  buffers.push_back(*pool.Alloc(5 * kMiB));
  EXPECT_GE(pool.stats().registered_bytes, 100 * 100000u + 5 * kMiB);
  for (void* p : buffers) {
    ASSERT_TRUE(pool.Free(p).ok());
  }
  pool.Trim();
  EXPECT_EQ(pool.allocated_buffers(), 0u);
  const PoolStats stats = pool.stats();
  EXPECT_EQ(stats.registered_bytes, stats.retained_bytes) << "every chunk left is empty";
  EXPECT_EQ(stats.retained_bytes, 2 * kMiB);
  EXPECT_EQ(registrar_.live(), stats.chunks);
  EXPECT_EQ(registrar_.deregistrations(), stats.released_chunks);
  pool_.reset();
  EXPECT_EQ(registrar_.live(), 0u);
}

TEST_P(PoolTest, DestroyWithLiveBuffersReportsThemAndDeregisters) {
  Pool& pool = MakePool();
  ASSERT_TRUE(pool.Alloc(100).ok());
  ASSERT_TRUE(pool.Alloc(5000).ok());
  ASSERT_TRUE(pool.Alloc(3 * kMiB).ok());
  void* freed = *pool.Alloc(64);
  ASSERT_TRUE(pool.Free(freed).ok());
  EXPECT_GT(registrar_.live(), 0u);
  ::testing::internal::CaptureStderr();
  pool_.reset();
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("destroyed with 3 buffer(s) still allocated"), std::string::npos) << err;
  EXPECT_EQ(registrar_.live(), 0u);
}

TEST_P(PoolTest, DestroyWithNoLiveBuffersSaysNothing) {
  Pool& pool = MakePool();
  void* p = *pool.Alloc(100);
  ASSERT_TRUE(pool.Free(p).ok());
  ::testing::internal::CaptureStderr();
  pool_.reset();
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST_P(PoolTest, RegistrarFailureIsTheAllocError) {
  Pool& pool = MakePool();
  registrar_.FailWith(EAGAIN);
  absl::StatusOr<void*> p = pool.Alloc(64);
  EXPECT_EQ(StatusToErrno(p.status()), EAGAIN) << p.status();
  EXPECT_NE(p.status().message().find("injected registration failure"), absl::string_view::npos);
  registrar_.FailWith(0);
  p = pool.Alloc(64);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(pool.Free(*p).ok());
}

TEST_P(PoolTest, ZeroSizeIsEinval) {
  Pool& pool = MakePool();
  EXPECT_EQ(StatusToErrno(pool.Alloc(0).status()), EINVAL);
  EXPECT_EQ(StatusToErrno(pool.Alloc(SIZE_MAX).status()), ENOMEM);
}

TEST_P(PoolTest, BadConfigurationIsEinval) {
  config_.pool_max_bytes = 1 * kMiB;  // below one 2 MiB chunk
  EXPECT_EQ(StatusToErrno(Pool::Create(registrar_, config_, options_).status()), EINVAL);
  config_.pool_max_bytes = 256 * kMiB;
  options_.access = kAccessRemoteWrite;  // remote write without local write
  EXPECT_EQ(StatusToErrno(Pool::Create(registrar_, config_, options_).status()), EINVAL);
}

TEST_P(PoolTest, HugepagesWhenAvailableElseOneLogLine) {
  config_.pool_hugepages = true;
  ::testing::internal::CaptureStderr();
  Pool& pool = MakePool();
  std::vector<void*> buffers;
  for (int i = 0; i < 3; ++i) buffers.push_back(*pool.Alloc(3 * kMiB));  // three chunks
  std::string err = ::testing::internal::GetCapturedStderr();
  PoolStats stats = pool.stats();
  if (stats.hugepage_chunks == stats.chunks) {
    EXPECT_EQ(err, "");
  } else {
    // Fell back: said so exactly once, and every chunk is still registered.
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_NE(err.find("falling back to normal pages"), std::string::npos) << err;
    EXPECT_EQ(stats.hugepage_chunks, 0u);
  }
  for (void* p : buffers) {
    EXPECT_TRUE(pool.Free(p).ok());
  }
}

INSTANTIATE_TEST_SUITE_P(TcacheModes, PoolTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ThreadCaches" : "NoThreadCache";
                         });

}  // namespace
}  // namespace mrcache

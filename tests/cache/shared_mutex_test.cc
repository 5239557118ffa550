// shared_mutex_test.cc: mrcache::SharedMutex (mrcache/internal/mutex.h), the cache's
// reader-writer lock: readers share it, a writer excludes everyone (readers
// in any of the reader slots), a waiting writer holds back new readers, and
// a fork child can release the write lock its parent's thread took before
// fork(). Waits are bounded by polling with a deadline, never by asserting a
// duration.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/internal/mutex.h"

namespace mrcache {
namespace {

// Polls `done` for up to 10 s; true if it became true.
template <typename F>
bool Eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(SharedMutexTest, TwoReadersHoldTheLockAtOnce) {
  SharedMutex mu;
  std::atomic<bool> second_in{false};
  {
    ReaderMutexLock first(&mu);
    std::thread other([&] {
      ReaderMutexLock second(&mu);
      second_in = true;
    });
    EXPECT_TRUE(Eventually([&] { return second_in.load(); }))
        << "a reader waited for another reader";
    other.join();
  }
}

TEST(SharedMutexTest, AWriterWaitsForTheReaders) {
  SharedMutex mu;
  std::atomic<bool> writer_in{false};
  std::thread writer;
  {
    ReaderMutexLock reader(&mu);
    writer = std::thread([&] {
      MutexLock lock(&mu);
      writer_in = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(writer_in.load()) << "the writer went in beside a reader";
  }
  EXPECT_TRUE(Eventually([&] { return writer_in.load(); })) << "the writer never went in";
  writer.join();
}

TEST(SharedMutexTest, AWriterWaitsForAReaderInAnySlot) {
  for (int slot = 0; slot < SharedMutex::kReaderSlots; ++slot) {
    SharedMutex mu;
    std::atomic<bool> writer_in{false};
    std::thread writer;
    {
      ReaderMutexLock reader(&mu, slot);
      writer = std::thread([&] {
        MutexLock lock(&mu);
        writer_in = true;
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      EXPECT_FALSE(writer_in.load()) << "the writer went in beside a reader in slot " << slot;
    }
    EXPECT_TRUE(Eventually([&] { return writer_in.load(); })) << "slot " << slot;
    writer.join();
  }
}

// A writer reads only the slots readers have used: readers that start using
// new slots while writers come and go are still excluded, every time.
TEST(SharedMutexTest, ReadersInSlotsFirstUsedWhileAWriterRunsAreExcluded) {
  for (int round = 0; round < 40; ++round) {
    SharedMutex mu;
    std::atomic<bool> writer_inside{false}, stop{false}, go{false};
    std::atomic<int> readers_inside{0}, overlaps{0};
    std::thread writer([&] {
      while (!stop.load()) {
        MutexLock lock(&mu);
        writer_inside = true;
        if (readers_inside.load() != 0) ++overlaps;
        writer_inside = false;
      }
    });
    std::vector<std::thread> readers;
    for (int slot = 1; slot < SharedMutex::kReaderSlots; ++slot) {
      readers.emplace_back([&, slot] {
        while (!go.load()) {
        }
        for (int i = 0; i < 200; ++i) {
          ReaderMutexLock lock(&mu, slot);
          ++readers_inside;
          if (writer_inside.load()) ++overlaps;
          --readers_inside;
        }
      });
    }
    go = true;
    for (std::thread& r : readers) r.join();
    stop = true;
    writer.join();
    ASSERT_EQ(overlaps.load(), 0) << "round " << round;
  }
}

TEST(SharedMutexTest, AWriterExcludesReaders) {
  SharedMutex mu;
  std::atomic<bool> reader_in{false};
  std::thread reader;
  {
    MutexLock lock(&mu);
    reader = std::thread([&] {
      ReaderMutexLock r(&mu);
      reader_in = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(reader_in.load()) << "a reader went in beside the writer";
  }
  EXPECT_TRUE(Eventually([&] { return reader_in.load(); })) << "the reader never went in";
  reader.join();
}

TEST(SharedMutexTest, AWaitingWriterHoldsBackNewReaders) {
  SharedMutex mu;
  std::atomic<bool> writer_started{false}, writer_in{false}, late_reader_in{false};
  std::thread writer, late_reader;
  {
    ReaderMutexLock early(&mu);
    writer = std::thread([&] {
      writer_started = true;
      MutexLock lock(&mu);
      writer_in = true;
      // Still holding: the late reader must not be in yet.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_FALSE(late_reader_in.load());
    });
    // On a loaded machine the thread may start late: the writer is waiting
    // once it has started and had time to take the lock's state.
    EXPECT_TRUE(Eventually([&] { return writer_started.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the writer is waiting now
    late_reader = std::thread([&] {
      ReaderMutexLock late(&mu);
      EXPECT_TRUE(writer_in.load()) << "a new reader overtook the waiting writer";
      late_reader_in = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(late_reader_in.load()) << "a new reader went in while a writer waited";
  }
  writer.join();
  late_reader.join();
  EXPECT_TRUE(late_reader_in.load());
}

TEST(SharedMutexTest, ASecondWriterSleepsUntilTheFirstUnlocks) {
  SharedMutex mu;
  std::atomic<bool> second_in{false};
  mu.lock();
  std::thread other([&] {
    MutexLock lock(&mu);
    second_in = true;
  });
  // Long past the second writer's spinning: it sleeps on the lock by now.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(second_in.load());
  mu.unlock();
  EXPECT_TRUE(Eventually([&] { return second_in.load(); }));
  other.join();
  // Free again, for a writer and for a reader.
  mu.lock();
  mu.unlock();
  mu.lock_shared(3);
  mu.unlock_shared(3);
}

TEST(SharedMutexTest, ReadersAndWritersNeverOverlap) {
  SharedMutex mu;
  int value = 0;  // guarded by mu; a writer leaves it even
  std::atomic<int> odd_seen{0};
  auto write = [&] {
    for (int i = 0; i < 20000; ++i) {
      MutexLock lock(&mu);
      ++value;
      ++value;
    }
  };
  auto read = [&](int slot) {
    for (int i = 0; i < 20000; ++i) {
      ReaderMutexLock lock(&mu, slot);
      if (value % 2 != 0) ++odd_seen;
    }
  };
  // Two readers share a slot, a third has its own; three writers contend.
  std::thread w1(write), w2(write), w3(write), r1(read, 0), r2(read, 0), r3(read, 5);
  w1.join();
  w2.join();
  w3.join();
  r1.join();
  r2.join();
  r3.join();
  EXPECT_EQ(value, 120000);
  EXPECT_EQ(odd_seen.load(), 0);
}

TEST(SharedMutexTest, AForkChildReleasesTheWriteLockItsParentTook) {
  SharedMutex mu;
  mu.lock();  // as a cache's fork handler does before fork()
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(10);
    mu.UnlockInForkChild();
    { ReaderMutexLock r(&mu); }
    { MutexLock w(&mu); }
    _exit(0);
  }
  mu.unlock();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace mrcache

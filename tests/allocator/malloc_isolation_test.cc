// Linking the pool (and its private jemalloc) leaves the application's own
// malloc/free/operator new as glibc's.
#include <dlfcn.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "allocator/pool.h"
#include "gtest/gtest.h"
#include "tests/allocator/counting_registrar.h"

namespace mrcache {
namespace {

// Sanitizers replace malloc in the executable itself, by design; the glibc
// checks only make sense without them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerMalloc = true;
#else
constexpr bool kSanitizerMalloc = false;
#endif
#define SKIP_UNDER_SANITIZER() \
  if (kSanitizerMalloc) GTEST_SKIP() << "a sanitizer owns malloc in this build"

std::string LibraryOf(void* symbol) {
  Dl_info info;
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

class MallocIsolationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pool = Pool::Create(registrar_, Config());
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = std::move(*pool);
    // The private jemalloc is initialized and in use.
    absl::StatusOr<void*> p = pool_->Alloc(1000);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(pool_->Free(*p).ok());
  }
  void TearDown() override {
    pool_.reset();
    EXPECT_EQ(registrar_.registrations(), registrar_.deregistrations());
  }
  CountingRegistrar registrar_;
  std::unique_ptr<Pool> pool_;
};

TEST_F(MallocIsolationTest, MallocAndFreeResolveToGlibc) {
  SKIP_UNDER_SANITIZER();
  // What the application calls: the first definition in the global scope.
  void* global_malloc = dlsym(RTLD_DEFAULT, "malloc");
  void* global_free = dlsym(RTLD_DEFAULT, "free");
  ASSERT_NE(global_malloc, nullptr);
  EXPECT_NE(LibraryOf(global_malloc).find("libc.so"), std::string::npos)
      << LibraryOf(global_malloc);
  EXPECT_NE(LibraryOf(global_free).find("libc.so"), std::string::npos) << LibraryOf(global_free);
  EXPECT_EQ(global_malloc, reinterpret_cast<void*>(&malloc));
}

TEST_F(MallocIsolationTest, NoJemallocSymbolIsVisibleToTheApplication) {
  for (const char* name : {"mallocx", "dallocx", "mallctl", "je_malloc", "malloc_conf"}) {
    EXPECT_EQ(dlsym(RTLD_DEFAULT, name), nullptr) << name;
  }
}

TEST_F(MallocIsolationTest, OperatorNewIsLibstdcxx) {
  SKIP_UNDER_SANITIZER();
  void* global_new = dlsym(RTLD_DEFAULT, "_Znwm");
  ASSERT_NE(global_new, nullptr);
  EXPECT_NE(LibraryOf(global_new).find("libstdc++"), std::string::npos) << LibraryOf(global_new);
}

TEST_F(MallocIsolationTest, MallocIsServedByGlibcsHeap) {
  SKIP_UNDER_SANITIZER();
  // glibc's own accounting sees the application's allocations.
  struct mallinfo2 before = mallinfo2();
  char* p = static_cast<char*>(std::malloc(50000));  // below the mmap threshold
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, 50000);
  struct mallinfo2 during = mallinfo2();
  EXPECT_GE(during.uordblks, before.uordblks + 50000);
  EXPECT_GE(malloc_usable_size(p), 50000u);
  std::free(p);
  EXPECT_LT(mallinfo2().uordblks, during.uordblks);
}

TEST_F(MallocIsolationTest, PoolBuffersAreNotGlibcHeapMemory) {
  SKIP_UNDER_SANITIZER();
  struct mallinfo2 before = mallinfo2();
  void* p = *pool_->Alloc(50000);
  EXPECT_LT(mallinfo2().uordblks, before.uordblks + 50000);
  EXPECT_TRUE(pool_->Free(p).ok());
}

}  // namespace
}  // namespace mrcache

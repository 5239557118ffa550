// The live statistics page: what caches publish (stats_shm), when the page
// exists, and a reader that trusts nothing it reads.
#include "mrcache/stats_page.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/forwarding_registrar.h"
#include "mrcache/registrars/sim_registrar.h"

namespace mrcache {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

std::string OwnPage() { return StatsPagePath(getuid(), getpid()); }

class StatsPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Exists(OwnPage())) << "a page is left from an earlier test";
    config_.registrar = "sim";
    config_.sim_base_ns = 0;
    config_.sim_page_ns = 0;
  }
  std::unique_ptr<Cache> MakeCache() {
    auto cache = Cache::Create(config_, MakeSimRegistrar(config_));
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::move(*cache) : nullptr;
  }
  // A cache over `rails` sim registrars, each get registering its own buffer.
  std::unique_ptr<Cache> MakeRailsCache(int rails) {
    config_.max_merge_bytes = 0;
    std::vector<std::unique_ptr<Registrar>> registrars;
    for (int r = 0; r < rails; ++r) registrars.push_back(MakeSimRegistrar(config_));
    auto cache = Cache::CreateRails(config_, std::move(registrars));
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::move(*cache) : nullptr;
  }
  // The own page as it is, read without asking for a refresh.
  static ProcessSnapshot ReadUnrequested() {
    std::ifstream in(OwnPage(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    absl::StatusOr<ProcessSnapshot> s = ParseStatsPage(bytes, getpid(), getuid());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : ProcessSnapshot();
  }
  // The page header's count of refresh requests (every reader's, any process).
  static uint32_t RefreshRequests() {
    std::ifstream in(OwnPage(), std::ios::binary);
    StatsPageHeader header{};
    in.read(reinterpret_cast<char*>(&header), sizeof header);
    EXPECT_TRUE(in.good()) << "the page's header";
    return header.refresh_request;
  }
  static uint64_t CountOf(const uint64_t* buckets) {
    uint64_t n = 0;
    for (int b = 0; b < kStatsBuckets; ++b) n += buckets[b];
    return n;
  }
  Config config_;
};

TEST_F(StatsPageTest, ACachePublishesItsCountersLiveAndItsDestroyRemovesThePage) {
  auto cache = MakeCache();
  ASSERT_TRUE(Exists(OwnPage()));
  struct stat st;
  ASSERT_EQ(lstat(OwnPage().c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::vector<char> buf(1 << 20, 1);
  for (int i = 0; i < 10; ++i) {
    auto r = cache->Get(buf.data(), buf.size(), kAccessLocalWrite);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->refreshed_on_request);
  ASSERT_EQ(s->caches.size(), 1u);
  const CacheSnapshot& c = s->caches[0];
  EXPECT_EQ(c.counters[kStatHits], 9u);
  EXPECT_EQ(c.counters[kStatMisses], 1u);
  EXPECT_EQ(c.counters[kStatRegistrations], 1u);
  EXPECT_EQ(c.registrar, "sim");
  EXPECT_EQ(c.rail, "sim");
  EXPECT_GE(c.counters[kStatPinnedBytes], buf.size());
  uint64_t regions = 0, misses = 0;
  for (int b = 0; b < kStatsBuckets; ++b) {
    regions += c.histograms[kHistRegionBytes][b];
    misses += c.histograms[kHistMissNs][b];
  }
  EXPECT_EQ(regions, 1u);
  EXPECT_EQ(misses, 1u);
  EXPECT_EQ(c.histograms[kHistGetBytes][Log2Histogram::BucketOf(buf.size())], 1u);
  cache.reset();
  EXPECT_FALSE(Exists(OwnPage())) << "the last cache's destroy must remove the page";
}

TEST_F(StatsPageTest, AReadingGetsFiguresTakenAfterItAskedAndNoTimerRefreshes) {
  auto cache = MakeCache();
  std::vector<char> buf(1 << 16, 1);
  ASSERT_TRUE(cache->Get(buf.data(), buf.size(), kAccessLocalWrite).ok());
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->refreshed_on_request);
  EXPECT_EQ(s->interval_ns, 0u) << "0: refreshed on request";
  ASSERT_EQ(s->caches.size(), 1u);
  EXPECT_EQ(s->caches[0].counters[kStatHits], 0u);
  // Readers in other processes of this user (other tests running at once,
  // e.g. mrcache-info --prometheus, which reads every page) may ask
  // meanwhile: a window in which one asked proves nothing and is tried again.
  uint64_t hits = 0;
  bool window_without_requests = false;
  for (int attempt = 0; attempt < 5 && !window_without_requests; ++attempt) {
    const uint32_t requests_before = RefreshRequests();
    const ProcessSnapshot before = ReadUnrequested();
    ASSERT_EQ(before.caches.size(), 1u);
    for (int i = 0; i < 10; ++i, ++hits)
      ASSERT_TRUE(cache->Get(buf.data(), buf.size(), kAccessLocalWrite).ok());
    // Time enough for any refresh on a timer to have run.
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    const ProcessSnapshot unrequested = ReadUnrequested();
    if (RefreshRequests() != requests_before) continue;
    window_without_requests = true;
    ASSERT_EQ(unrequested.caches.size(), 1u);
    EXPECT_EQ(unrequested.caches[0].counters[kStatHits], before.caches[0].counters[kStatHits])
        << "refreshed with no reader asking";
  }
  ASSERT_TRUE(window_without_requests) << "another reader asked in every window";
  s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->refreshed_on_request);
  ASSERT_EQ(s->caches.size(), 1u);
  EXPECT_EQ(s->caches[0].counters[kStatHits], hits);
}

TEST_F(StatsPageTest, HistogramsCountTheFirstMissRegistrationAndDeregistrationOfEachSample) {
  config_.max_regions = 1;      // each miss evicts the region before it
  config_.max_merge_bytes = 0;  // no merging: each miss registers its own buffer
  auto cache = MakeCache();
  std::vector<std::vector<char>> bufs;
  for (uint64_t i = 0; i < 2 * kHistogramSampleEvery + 5; ++i) bufs.emplace_back(1 << 16, 1);
  for (auto& b : bufs) ASSERT_TRUE(cache->Get(b.data(), b.size(), kAccessLocalWrite).ok());
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->caches.size(), 1u);
  const CacheSnapshot& c = s->caches[0];
  const uint64_t misses = c.counters[kStatMisses];
  const uint64_t registrations = c.counters[kStatRegistrations];
  const uint64_t deregistrations = c.counters[kStatDeregistrations];
  ASSERT_GE(misses, 2 * kHistogramSampleEvery + 1);
  ASSERT_GE(deregistrations, 2 * kHistogramSampleEvery);
  // The first of every kHistogramSampleEvery, counted from the first.
  auto sampled = [](uint64_t events) {
    return (events + kHistogramSampleEvery - 1) / kHistogramSampleEvery;
  };
  EXPECT_EQ(CountOf(c.histograms[kHistMissNs]), sampled(misses));
  EXPECT_EQ(CountOf(c.histograms[kHistGetBytes]), sampled(misses));
  EXPECT_EQ(CountOf(c.histograms[kHistRegionBytes]), sampled(registrations));
  EXPECT_EQ(CountOf(c.histograms[kHistDeregisterNs]), sampled(deregistrations));
  // Each registration here is an installing miss's: timed with its miss.
  EXPECT_EQ(CountOf(c.histograms[kHistRegisterNs]), CountOf(c.histograms[kHistMissNs]));
  // Every get asked for 64 KiB, and every region is one buffer's pages.
  EXPECT_EQ(c.histograms[kHistGetBytes][Log2Histogram::BucketOf(1 << 16)], sampled(misses));
  EXPECT_EQ(c.histogram_sums[kHistGetBytes], sampled(misses) << 16);
  EXPECT_EQ(CountOf(c.histograms[kHistRegionBytes]),
            c.histograms[kHistRegionBytes][Log2Histogram::BucketOf(1 << 16)] +
                c.histograms[kHistRegionBytes][Log2Histogram::BucketOf((1 << 16) + 4096)]);
}

TEST_F(StatsPageTest, SixtyFourCachesShareOnePageEachInItsOwnSlot) {
  std::vector<std::unique_ptr<Cache>> caches;
  for (int i = 0; i < 64; ++i) caches.push_back(MakeCache());
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->caches.size(), 64u);
  std::set<uint32_t> ids;
  for (const CacheSnapshot& c : s->caches) {
    EXPECT_GE(c.cache_id, 1u);
    EXPECT_TRUE(ids.insert(c.cache_id).second) << "cache id " << c.cache_id << " twice";
  }
  EXPECT_EQ(s->unpublished, 0u);
  caches.resize(10);  // 54 destroyed: their slots are freed, the page stays
  s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->caches.size(), 10u);
  caches.clear();
  EXPECT_FALSE(Exists(OwnPage()));
}

TEST_F(StatsPageTest, ARailsCachePublishesEachRailsRegistrations) {
  std::unique_ptr<Cache> cache = MakeRailsCache(4);
  ASSERT_NE(cache, nullptr);
  // Rail r gets r + 1 buffers of its own; buffer 0 is on every rail.
  std::vector<std::vector<char>> bufs;
  for (int i = 0; i < 10; ++i) bufs.emplace_back(1 << 16, 1);
  ASSERT_TRUE(cache->GetRails(bufs[0].data(), bufs[0].size(), kAccessLocalWrite, 0xf).ok());
  int next = 1;
  for (int r = 1; r < 4; ++r) {
    for (int i = 0; i < r; ++i, ++next) {
      ASSERT_TRUE(
          cache->GetRails(bufs[next].data(), bufs[next].size(), kAccessLocalWrite, uint64_t{1} << r)
              .ok());
    }
  }
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->caches.size(), 1u);
  const CacheSnapshot& c = s->caches[0];
  EXPECT_EQ(c.rail, "sim+sim+sim+sim");
  ASSERT_EQ(c.rails.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(c.rails[r].name, "sim");
    EXPECT_EQ(c.rails[r].counters[kRailRegistrations], static_cast<uint64_t>(r + 1));
    EXPECT_EQ(c.rails[r].counters[kRailRegions], static_cast<uint64_t>(r + 1));
    EXPECT_GE(c.rails[r].counters[kRailRegisteredBytes], (r + 1) * bufs[0].size());
  }
  ASSERT_TRUE(cache->Flush().ok());
  s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(s->caches[0].rails[r].counters[kRailDeregistrations],
              s->caches[0].rails[r].counters[kRailRegistrations])
        << "rail " << r << " after the flush";
  }
}

TEST_F(StatsPageTest, ARailsCachesTotalsCountEachRailAsItsStatsDo) {
  std::unique_ptr<Cache> cache = MakeRailsCache(4);
  ASSERT_NE(cache, nullptr);
  // Two regions: one on all four rails, one on rail 2 alone.
  std::vector<char> a(1 << 16, 1), b(1 << 16, 1);
  ASSERT_TRUE(cache->GetRails(a.data(), a.size(), kAccessLocalWrite, 0xf).ok());
  ASSERT_TRUE(cache->GetRails(b.data(), b.size(), kAccessLocalWrite, 0x4).ok());
  const CacheStats stats = cache->stats();
  EXPECT_EQ(stats.registrations, 5u);
  EXPECT_EQ(stats.regions, 2u);
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->caches.size(), 1u);
  const uint64_t* c = s->caches[0].counters;
  EXPECT_EQ(c[kStatRegistrations], stats.registrations);
  EXPECT_EQ(c[kStatRegions], stats.regions);
  EXPECT_EQ(c[kStatPinnedBytes], stats.pinned_bytes);
  EXPECT_EQ(c[kStatPeakPinnedBytes], stats.peak_pinned_bytes);
  ASSERT_TRUE(cache->Flush().ok());
  s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->caches[0].counters[kStatDeregistrations], 5u);
  EXPECT_EQ(s->caches[0].counters[kStatPinnedBytes], 0u);
}

TEST_F(StatsPageTest, ACacheWithoutRailsPublishesNoRails) {
  auto cache = MakeCache();
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->caches.size(), 1u);
  EXPECT_TRUE(s->caches[0].rails.empty());
}

// Holds every deregistration made off the thread that built it until Open().
class HeldDeregistrations : public ForwardingRegistrar {
 public:
  explicit HeldDeregistrations(std::unique_ptr<Registrar> inner)
      : ForwardingRegistrar(std::move(inner)) {}
  absl::Status Deregister(const Registration& reg) override {
    if (std::this_thread::get_id() != creator_) {
      while (!open_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return inner().Deregister(reg);
  }
  void Open() { open_.store(true); }

 private:
  const std::thread::id creator_ = std::this_thread::get_id();
  std::atomic<bool> open_{false};
};

TEST_F(StatsPageTest, TheDeregistrationQueuesDepthAndTimesArePublished) {
  config_.async_dereg = AsyncDereg::kOn;
  config_.async_dereg_bytes = 0;  // every eviction to the background thread
  config_.max_regions = 1;
  config_.max_merge_bytes = 0;
  auto registrar = std::make_unique<HeldDeregistrations>(MakeSimRegistrar(config_));
  HeldDeregistrations* held = registrar.get();
  auto cache = Cache::Create(config_, std::move(registrar));
  ASSERT_TRUE(cache.ok()) << cache.status();
  std::vector<char> a(1 << 16, 1), b(1 << 16, 1);
  ASSERT_TRUE((*cache)->Get(a.data(), a.size(), kAccessLocalWrite).ok());
  ASSERT_TRUE((*cache)->Get(b.data(), b.size(), kAccessLocalWrite).ok());  // evicts a's
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->caches[0].counters[kStatDeregQueueDepth], 1u) << "a's deregistration is held";
  const auto held_for = std::chrono::milliseconds(20);
  std::this_thread::sleep_for(held_for);
  held->Open();
  ASSERT_TRUE((*cache)->Flush().ok());
  s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  const CacheSnapshot& c = s->caches[0];
  EXPECT_EQ(c.counters[kStatDeregQueueDepth], 0u);
  EXPECT_GE(c.counters[kStatBackgroundDeregNs],
            static_cast<uint64_t>(std::chrono::nanoseconds(held_for).count()))
      << "the background thread was held at least that long";
  EXPECT_EQ(c.counters[kStatDeregistrations], c.counters[kStatRegistrations]);
}

TEST_F(StatsPageTest, StatsShmOffCreatesNothing) {
  config_.stats_shm = false;
  auto cache = MakeCache();
  EXPECT_FALSE(Exists(OwnPage()));
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPage(getpid());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(StatusToErrno(s.status()), ENOENT);
  EXPECT_NE(s.status().message().find("publishes no mrcache statistics"), std::string::npos);
}

TEST_F(StatsPageTest, AForkChildPublishesInAPageOfItsOwnAndLeavesTheParentsAlone) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "TSan cannot start a thread (the child's refresh thread) after a fork of a "
                  "multi-threaded process (die_after_fork)";
#endif
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "GCC 12's ASan has no fork handling for its allocator: the child's allocations "
                  "can block on a lock a thread of the parent held at the fork "
                  "(tests/reliability/fork_test.cc)";
#endif
  auto cache = MakeCache();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto own = MakeCache();
    absl::StatusOr<ProcessSnapshot> s = ReadStatsPage(getpid());
    const bool ok = own != nullptr && s.ok() && s->caches.size() == 1;
    own.reset();
    cache.reset();  // the parent's cache, inherited: its slot is the parent's business
    _exit(ok && !Exists(StatsPagePath(getuid(), getpid())) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPage(getpid());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->caches.size(), 1u) << "the child's destroy touched the parent's page";
}

// ---- the reader, on pages written by hand ----

class StatsPageReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/page";
    bytes_.assign(kStatsPageBytes, '\0');
    StatsPageHeader h{};
    std::memcpy(h.magic, kStatsPageMagic, sizeof h.magic);
    h.version = kStatsPageVersion;
    h.header_bytes = sizeof(StatsPageHeader);
    h.slot_bytes = sizeof(StatsSlot);
    h.slot_count = kStatsSlots;
    h.pid = kPid;
    h.uid = getuid();
    std::memcpy(&bytes_[0], &h, sizeof h);
    StatsSlot slot{};
    slot.live = 1;
    slot.cache_id = 1;
    std::strcpy(slot.rail, "mlx5_0");
    std::strcpy(slot.registrar, "verbs");
    slot.counters[kStatHits] = 42;
    std::memcpy(&bytes_[sizeof h], &slot, sizeof slot);
  }
  StatsSlot* Slot0() { return reinterpret_cast<StatsSlot*>(&bytes_[sizeof(StatsPageHeader)]); }
  StatsPageHeader* Header() { return reinterpret_cast<StatsPageHeader*>(&bytes_[0]); }
  absl::Status Write(mode_t mode = 0600) {
    unlink(path_.c_str());
    const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0) return ErrnoStatus(errno, "create");
    const bool ok = write(fd, bytes_.data(), bytes_.size()) == static_cast<ssize_t>(bytes_.size());
    fchmod(fd, mode);
    close(fd);
    return ok ? absl::OkStatus() : ErrnoStatus(EIO, "write");
  }
  // The reader's error for the page as it is now written.
  std::string ErrorOf() {
    EXPECT_TRUE(Write().ok());
    absl::StatusOr<ProcessSnapshot> s = ReadStatsPageAt(path_, kPid);
    return s.ok() ? "ok" : std::string(s.status().message());
  }
  static constexpr pid_t kPid = 4242;
  std::string path_, bytes_;
};

TEST_F(StatsPageReaderTest, AValidPageReads) {
  ASSERT_TRUE(Write().ok());
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPageAt(path_, kPid);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->refreshed_on_request) << "no publisher answers for a page written by hand";
  std::ifstream in(path_, std::ios::binary);
  StatsPageHeader asked{};
  ASSERT_TRUE(in.read(reinterpret_cast<char*>(&asked), sizeof asked));
  EXPECT_EQ(asked.refresh_request, 1u) << "the reader asks for a refresh in the page's header";
  ASSERT_EQ(s->caches.size(), 1u);
  EXPECT_EQ(s->caches[0].rail, "mlx5_0");
  EXPECT_EQ(s->caches[0].counters[kStatHits], 42u);
}

TEST_F(StatsPageReaderTest, TruncatedPageIsAClearError) {
  bytes_.resize(kStatsPageBytes / 2);
  EXPECT_NE(ErrorOf().find("truncated"), std::string::npos) << ErrorOf();
  bytes_.resize(10);
  EXPECT_NE(ErrorOf().find("truncated"), std::string::npos) << ErrorOf();
  bytes_.clear();
  EXPECT_NE(ErrorOf().find("truncated"), std::string::npos) << ErrorOf();
}

TEST_F(StatsPageReaderTest, WrongVersionIsAClearError) {
  Header()->version = kStatsPageVersion + 1;
  const std::string expected = absl::StrCat("version ", kStatsPageVersion + 1,
                                            ", this reader knows version ", kStatsPageVersion);
  EXPECT_NE(ErrorOf().find(expected), std::string::npos) << ErrorOf();
}

TEST_F(StatsPageReaderTest, GarbledPagesAreClearErrors) {
  Header()->magic[0] = 'X';
  EXPECT_NE(ErrorOf().find("bad magic"), std::string::npos);
  SetUp();
  Header()->slot_count = 1u << 31;
  EXPECT_NE(ErrorOf().find("layout"), std::string::npos);
  SetUp();
  Header()->pid = 1;
  EXPECT_NE(ErrorOf().find("names process 1"), std::string::npos);
  SetUp();
  std::memset(Slot0()->rail, 'A', sizeof Slot0()->rail);
  EXPECT_NE(ErrorOf().find("unterminated name"), std::string::npos);
  SetUp();
  Slot0()->rail[0] = '"';
  EXPECT_NE(ErrorOf().find("control or quote"), std::string::npos);
  SetUp();
  Slot0()->live = 7;
  EXPECT_NE(ErrorOf().find("bad flag"), std::string::npos);
  SetUp();
  Slot0()->seq = 1;  // a writer that died mid-write
  EXPECT_NE(ErrorOf().find("never read consistently"), std::string::npos) << ErrorOf();
  SetUp();
  bytes_ += "x";
  EXPECT_NE(ErrorOf().find("oversized"), std::string::npos);
}

TEST_F(StatsPageReaderTest, ARailsSlotReadsEachRailAndNamesTheCacheByAllOfThem) {
  Slot0()->rail_count = 2;
  std::strcpy(Slot0()->rails[0].name, "mlx5_0");
  std::strcpy(Slot0()->rails[1].name, "mlx5_1");
  Slot0()->rails[1].counters[kRailRegistrations] = 7;
  ASSERT_TRUE(Write().ok());
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPageAt(path_, kPid);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->caches[0].rails.size(), 2u);
  EXPECT_EQ(s->caches[0].rails[1].name, "mlx5_1");
  EXPECT_EQ(s->caches[0].rails[1].counters[kRailRegistrations], 7u);
  EXPECT_EQ(s->caches[0].rail, "mlx5_0+mlx5_1");
}

TEST_F(StatsPageReaderTest, GarbledRailsAreClearErrors) {
  Slot0()->rail_count = kStatsRails + 1;
  EXPECT_NE(ErrorOf().find(absl::StrCat("at most ", kStatsRails, " fit")), std::string::npos)
      << ErrorOf();
  SetUp();
  Slot0()->rail_count = 1;
  std::memset(Slot0()->rails[0].name, 'A', sizeof Slot0()->rails[0].name);
  EXPECT_NE(ErrorOf().find("unterminated name of rail 0"), std::string::npos) << ErrorOf();
  SetUp();
  Slot0()->rail_count = 2;
  std::strcpy(Slot0()->rails[1].name, "a\"b");
  EXPECT_NE(ErrorOf().find("name of rail 1 with control or quote"), std::string::npos) << ErrorOf();
}

TEST_F(StatsPageReaderTest, PageOfAnotherModeOrASymlinkIsNotTrusted) {
  ASSERT_TRUE(Write(0644).ok());
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPageAt(path_, kPid);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not 0600"), std::string::npos) << s.status();
  ASSERT_TRUE(Write().ok());
  const std::string link = ::testing::TempDir() + "/link";
  unlink(link.c_str());
  ASSERT_EQ(symlink(path_.c_str(), link.c_str()), 0);
  s = ReadStatsPageAt(link, kPid);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("symbolic link"), std::string::npos) << s.status();
}

TEST_F(StatsPageReaderTest, PageOwnedByAnotherUserIsNotTrusted) {
  ASSERT_TRUE(Write().ok());
  if (chown(path_.c_str(), 65534, 65534) != 0) {
    GTEST_SKIP() << "cannot give a file to uid 65534 here (not root): " << std::strerror(errno);
  }
  absl::StatusOr<ProcessSnapshot> s = ReadStatsPageAt(path_, kPid);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(StatusToErrno(s.status()), EACCES);
  EXPECT_NE(s.status().message().find("belongs to uid 65534"), std::string::npos) << s.status();
}

TEST(StatsPageName, OnlyThisUsersWellFormedNamesCount) {
  EXPECT_EQ(PidOfStatsPageName("mrcache-1000-42", 1000), 42);
  EXPECT_EQ(PidOfStatsPageName("mrcache-1000-42", 1001), -1);
  EXPECT_EQ(PidOfStatsPageName("mrcache-1000-", 1000), -1);
  EXPECT_EQ(PidOfStatsPageName("mrcache-1000-4x", 1000), -1);
  EXPECT_EQ(PidOfStatsPageName("mrcache-1000-99999999999", 1000), -1);
  EXPECT_EQ(PidOfStatsPageName("other", 1000), -1);
}

TEST(ProcessStartTicks, NamesThisProcessAndNoneForAMissingOne) {
  EXPECT_GT(ProcessStartTicks(getpid()), 0u);
  EXPECT_EQ(ProcessStartTicks(ProcessStartTicks(getpid()) > 0 ? 0x7ffffff0 : 1), 0u);
}

}  // namespace
}  // namespace mrcache

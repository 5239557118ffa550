// Pages of another user are neither listed nor read: a child that turns
// itself into `nobody` publishes a cache; this process (root) neither lists
// its page, nor removes it, nor trusts it, and the child cannot read ours.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "gtest/gtest.h"
#include "interpose/live_stats.h"
#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/sim_registrar.h"
#include "mrcache/stats_page.h"

namespace mrcache {
namespace {

constexpr uid_t kNobody = 65534;

std::unique_ptr<Cache> SimCache() {
  Config config;
  config.registrar = "sim";
  auto cache = Cache::Create(config, MakeSimRegistrar(config));
  return cache.ok() ? std::move(*cache) : nullptr;
}

TEST(OtherUser, PagesOfAnotherUserAreNeitherListedNorRead) {
  if (getuid() != 0) GTEST_SKIP() << "needs root, to start a child as uid 65534 (nobody)";
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t parent = getpid();
  // Forked before any cache (and its threads) exists.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char byte = 0;
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(10);
    auto cache = SimCache();
    if (cache == nullptr) _exit(11);
    if (write(ready[1], &byte, 1) != 1) _exit(12);
    if (read(done[0], &byte, 1) != 1) _exit(13);  // the parent's page exists now
    // Ours (root's) is closed to it: the file's mode, whatever the reader.
    absl::StatusOr<ProcessSnapshot> theirs = ReadStatsPageAt(StatsPagePath(0, parent), parent);
    const bool refused = !theirs.ok() && StatusToErrno(theirs.status()) == EACCES;
    cache.reset();
    _exit(refused ? 0 : 14);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  auto own = SimCache();
  ASSERT_NE(own, nullptr);
  const std::string nobody_page = StatsPagePath(kNobody, child);
  struct stat st;
  ASSERT_EQ(lstat(nobody_page.c_str(), &st), 0) << "the child's page " << nobody_page;
  EXPECT_EQ(st.st_uid, kNobody);

  mrcache_info::Listing listing = mrcache_info::ListLivePages();
  for (const mrcache_info::ListedProcess& p : listing.live) EXPECT_NE(p.pid, child);
  for (pid_t pid : listing.removed) EXPECT_NE(pid, child);
  EXPECT_EQ(lstat(nobody_page.c_str(), &st), 0) << "--list removed another user's page";

  absl::StatusOr<ProcessSnapshot> by_pid = ReadStatsPage(child);
  ASSERT_FALSE(by_pid.ok());
  EXPECT_EQ(StatusToErrno(by_pid.status()), ENOENT) << by_pid.status();
  // Root can open any file: the owner check refuses it.
  absl::StatusOr<ProcessSnapshot> by_path = ReadStatsPageAt(nobody_page, child);
  ASSERT_FALSE(by_path.ok());
  EXPECT_EQ(StatusToErrno(by_path.status()), EACCES);
  EXPECT_NE(by_path.status().message().find("belongs to uid 65534"), std::string::npos)
      << by_path.status();

  ASSERT_EQ(write(done[1], &byte, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10-13: setup; 14: the child read root's page";
  EXPECT_NE(lstat(nobody_page.c_str(), &st), 0) << "the child's page outlived its cache";
}

}  // namespace
}  // namespace mrcache

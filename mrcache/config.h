// config.h: the typed configuration behind mrc_config_t.
//
// Every key is settable by name (Config::Set) with the same spelling as its
// environment variable MRCACHE_<KEY> (upper-case). Defaults are applied first,
// then the environment (FromEnvironment), then explicit Set calls. A bad value
// or an unknown key is EINVAL with a message naming the key and the value.
#ifndef MRCACHE_CONFIG_H_
#define MRCACHE_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mrcache {

enum class OdpMode { kOff, kExplicit, kImplicit, kAuto };
// async_dereg: registrations that leave the cache are deregistered by a
// background thread (on), by the thread that took them out (off), or the
// former when the cache's regions pin memory (auto, the default).
enum class AsyncDereg { kAuto, kOn, kOff };
// The spelling of m as the `odp` key takes it: "off", "explicit",
// "implicit" or "auto".
const char* OdpName(OdpMode m);

// One configuration key as documented (README's table, mrcache-info).
struct ConfigKeyInfo {
  const char* name;           // the key; its environment variable is MRCACHE_<NAME>
  const char* values;         // what it accepts and means (Markdown)
  const char* default_value;  // the default, as documented (Markdown)
};

// What an rkey handed out for a request with remote rights reaches.
//  kShared:  remote-rights regions are cached and shared; each reaches only
//            the union of the page-rounded ranges requested with those remote
//            rights (bridging and alignment above the page size never widen
//            it); an rkey stays valid until its region is deregistered.
//  kPrivate: every request with a remote right gets its own registration of
//            exactly the requested bytes, deregistered at put (the semantics
//            of ibv_reg_mr/ibv_dereg_mr). Local-only requests are cached.
enum class RemoteKeys { kShared, kPrivate };

struct Config {
  std::string registrar;  // "uring" | "sim" | "verbs" | "" (= uring if io_uring works, else sim)
  size_t max_regions = 16384;                // 0 = unlimited
  size_t max_bytes = 0;                      // pinned bytes; 0 = unlimited
  size_t max_merge_bytes = size_t{1} << 30;  // 0 = merging off
  // Bridging: a miss in memory where no region died by invalidation lately,
  // whose bridge_bytes-aligned block holds another compatible region, widens
  // to the resident memory of its own mapping within that block (absorbing
  // the regions there). Needs a complete monitor (patch or uffd) or explicit
  // ODP. 0 = off: only overlapping regions merge.
  size_t bridge_bytes = size_t{128} << 20;
  // Region granularity: 0 = the page size; else a power of two >= 8. Below
  // the page size (e.g. 64, UCX's InfiniBand default) neighbouring buffers
  // that share a page get separate regions (the registrar still pins whole
  // pages); above it (e.g. 2M) fewer, larger registrations.
  size_t alignment = 0;
  static constexpr size_t kMinAlignment = 8;
  // remote_keys: shared (the library's default) | private (the shim's).
  RemoteKeys remote_keys = RemoteKeys::kShared;
  std::string monitor = "auto";
  OdpMode odp = OdpMode::kOff;
  size_t odp_prefetch_bytes = 0;  // 0 = never prefetch
  // Prefault (registrars/prefault.h): a registration of at least this many
  // bytes of memory not yet resident is faulted in over prefault_threads
  // threads before it is pinned. 0 = never. Registrars that pin only.
  size_t prefault_bytes = size_t{64} << 20;
  // Threads a prefault uses, the calling one included: 0 = auto (the CPUs the
  // process may run on, at most 8); 1 = the calling thread alone.
  size_t prefault_threads = 0;
  static constexpr size_t kMaxPrefaultThreads = 64;
  uint64_t sim_base_ns = 3000;  // sim registrar: fixed cost per call
  uint64_t sim_page_ns = 240;   // sim registrar: cost per 4 KiB page
  bool sim_mlock = false;
  uint64_t sim_odp_page_ns = 250;  // sim registrar: ODP first-touch cost per page
  size_t pool_max_bytes = size_t{1} << 30;
  size_t pool_chunk_bytes = size_t{2} << 20;
  bool pool_hugepages = false;
  // Bytes of chunks whose buffers are all free that the pool keeps registered
  // for reuse; an emptied chunk beyond that is deregistered and unmapped.
  size_t pool_retain_bytes = size_t{32} << 20;
  // Access flags (kAccess* of registrar.h) every pool chunk is registered
  // with: kAccessLocalWrite and any of kAccessRemoteRead, kAccessRemoteWrite,
  // kAccessRemoteAtomic. A remote right reaches the whole chunk.
  int pool_access = 1;         // kAccessLocalWrite
  size_t uring_slots = 16384;  // uring registrar: fixed-buffer table size
  // Custom registrar (mrc_cache_create_custom): its callbacks' registrations
  // pin memory that counts against RLIMIT_MEMLOCK (as ibv_reg_mr does), so
  // the pin budget applies; false for callbacks that pin nothing.
  bool custom_pins = true;
  // Publish the cache's counters live in the process's statistics page
  // (/dev/shm/mrcache-<uid>-<pid>, stats_page.h); false creates nothing.
  bool stats_shm = true;
  // The longest region the cache registers (registrars/region_limit.h),
  // below the registrar's own limit (Registrar::max_region_bytes, e.g. the
  // device's max_mr_size). 0 = the registrar's limit only.
  size_t max_region_bytes = 0;
  AsyncDereg async_dereg = AsyncDereg::kAuto;
  // The fewest registered bytes a batch of deregistrations is handed to the
  // background thread for; smaller ones cost about what handing them over
  // costs, and their caller deregisters them. 0 = every batch.
  size_t async_dereg_bytes = size_t{64} << 20;
  // The same threshold for a batch whose regions with their memory unmapped
  // or remapped hold at least this many registered bytes: deregistering
  // those frees their pages, which costs tens of times what unpinning mapped
  // pages costs. 0 = every batch with such a region. Regions mrc_invalidate
  // takes out are never handed over (Invalidation::kByCaller).
  size_t async_dereg_invalidated_bytes = size_t{256} << 10;

  // Sets one key from its string form. EINVAL (with a message) for an unknown
  // key or a malformed/out-of-range value; the config is unchanged then.
  absl::Status Set(absl::string_view key, absl::string_view value);
  // The current value of a key in the form Set accepts. NOT_FOUND if unknown.
  absl::StatusOr<std::string> Get(absl::string_view key) const;
  // The current value of a key as the key table writes it: byte counts with
  // the largest binary suffix that divides them (FormatSize: `1G`, `128M`),
  // everything else as Get. Set accepts it. NOT_FOUND if unknown.
  absl::StatusOr<std::string> Show(absl::string_view key) const;
  // Applies every MRCACHE_<KEY> variable that is set. The first bad one wins.
  // The first call in a process also warns on stderr about MRCACHE_* names
  // that are not mrcache variables (environment_check.h).
  absl::Status ApplyEnvironment();
  // The library's defaults, then the environment.
  static absl::StatusOr<Config> FromEnvironment();
  // `defaults` (e.g. the shim's), then the environment.
  static absl::StatusOr<Config> FromEnvironment(Config defaults);
  // All keys, in documentation order.
  static const std::vector<std::string>& Keys();
  // All keys with their documentation, in the same order. The one table Set,
  // Get and Keys are made from.
  static const std::vector<ConfigKeyInfo>& KeyTable();
  // Cross-key checks (alignment 0 or a power of two >= kMinAlignment, ...),
  // and EINVAL for a monitor list whose only part is `uffd` (with `none` or
  // `jemalloc` at most): it cannot keep registrations fresh under concurrent
  // release.
  absl::Status Validate() const;
};

// "shared" or "private".
const char* RemoteKeysName(RemoteKeys mode);

// Parses "123", "64K", "2M", "1G" (binary multiples). EINVAL otherwise.
absl::StatusOr<uint64_t> ParseSize(absl::string_view text);
// The inverse of ParseSize: `bytes` with the largest suffix (K, M, G, T)
// that divides it exactly, else plain digits ("0", "1G", "1536K", "100").
std::string FormatSize(uint64_t bytes);

}  // namespace mrcache

#endif  // MRCACHE_CONFIG_H_

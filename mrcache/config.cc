#include "mrcache/config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "mrcache/environment_check.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/monitor_table.h"
#include "mrcache/registrar.h"

namespace mrcache {
namespace {

absl::Status BadValue(absl::string_view key, absl::string_view value, absl::string_view expected) {
  return ErrnoStatus(EINVAL, absl::StrCat("config key '", key, "': bad value '", value,
                                          "' (expected ", expected, ")"));
}

absl::StatusOr<bool> ParseBool(absl::string_view v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return ErrnoStatus(EINVAL, "not a boolean");
}

bool IsPowerOfTwo(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

const char* OdpName(OdpMode m) {
  switch (m) {
    case OdpMode::kOff:
      return "off";
    case OdpMode::kExplicit:
      return "explicit";
    case OdpMode::kImplicit:
      return "implicit";
    case OdpMode::kAuto:
      return "auto";
  }
  return "off";
}

const char* RemoteKeysName(RemoteKeys mode) {
  return mode == RemoteKeys::kPrivate ? "private" : "shared";
}

absl::StatusOr<uint64_t> ParseSize(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (t.empty()) return ErrnoStatus(EINVAL, "empty size");
  uint64_t mult = 1;
  char last = static_cast<char>(std::toupper(static_cast<unsigned char>(t.back())));
  if (last == 'K' || last == 'M' || last == 'G' || last == 'T') {
    mult = last == 'K'   ? (1ull << 10)
           : last == 'M' ? (1ull << 20)
           : last == 'G' ? (1ull << 30)
                         : (1ull << 40);
    t.remove_suffix(1);
  }
  uint64_t v = 0;
  if (t.empty() ||
      !std::all_of(t.begin(), t.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) ||
      !absl::SimpleAtoi(t, &v)) {
    return ErrnoStatus(EINVAL, absl::StrCat("'", text, "' is not a size"));
  }
  if (v != 0 && mult > UINT64_MAX / v)
    return ErrnoStatus(EINVAL, absl::StrCat("size '", text, "' overflows"));
  return v * mult;
}

std::string FormatSize(uint64_t bytes) {
  if (bytes == 0) return "0";
  static const struct {
    char suffix;
    int shift;
  } kUnits[] = {{'T', 40}, {'G', 30}, {'M', 20}, {'K', 10}};
  for (const auto& unit : kUnits) {
    const uint64_t one = uint64_t{1} << unit.shift;
    if (bytes % one == 0) return absl::StrCat(bytes / one, std::string(1, unit.suffix));
  }
  return absl::StrCat(bytes);
}

namespace {

// How a key's value is written: Set parses `value` into `config` (returning
// what was expected on a bad value, the config unchanged), Get prints it in
// the form Set accepts.
using SetFn = bool (*)(Config& config, absl::string_view value);
using GetFn = std::string (*)(const Config& config);

// Whether a key's value is a byte count, which Show writes with FormatSize.
enum class ValueKind { kOther, kByteCount };
constexpr ValueKind kByteCount = ValueKind::kByteCount;

struct KeyRow {
  ConfigKeyInfo info;
  const char* expected;  // for the EINVAL message of a bad value
  SetFn set;
  GetFn get;
  ValueKind kind = ValueKind::kOther;
};

bool SetSize(size_t* field, absl::string_view value) {
  auto v = ParseSize(value);
  if (!v.ok()) return false;
  *field = static_cast<size_t>(*v);
  return true;
}
bool SetNs(uint64_t* field, absl::string_view value) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(value, &v)) return false;
  *field = v;
  return true;
}
bool SetBool(bool* field, absl::string_view value) {
  auto v = ParseBool(value);
  if (!v.ok()) return false;
  *field = *v;
  return true;
}
// A size that must also satisfy `ok`; the field is unchanged otherwise.
template <typename Pred>
bool SetCheckedSize(size_t* field, absl::string_view value, Pred ok) {
  size_t v = 0;
  if (!SetSize(&v, value) || !ok(v)) return false;
  *field = v;
  return true;
}
// pool_access: a '+'-joined list of rights; local_write is required (every
// remote right of a registration needs it, and buffers are written locally).
constexpr std::pair<const char*, int> kPoolRights[] = {
    {"local_write", kAccessLocalWrite},
    {"remote_read", kAccessRemoteRead},
    {"remote_write", kAccessRemoteWrite},
    {"remote_atomic", kAccessRemoteAtomic},
};
bool SetPoolAccess(int* field, absl::string_view value) {
  int access = 0;
  for (absl::string_view part : absl::StrSplit(value, '+')) {
    int bit = 0;
    for (const auto& right : kPoolRights) {
      if (part == right.first) bit = right.second;
    }
    if (bit == 0) return false;
    access |= bit;
  }
  if ((access & kAccessLocalWrite) == 0) return false;
  *field = access;
  return true;
}
std::string PoolAccessName(int access) {
  std::string name;
  for (const auto& right : kPoolRights) {
    if (access & right.second) absl::StrAppend(&name, name.empty() ? "" : "+", right.first);
  }
  return name;
}
std::string Num(uint64_t v) { return std::to_string(v); }
// 'auto+uffd' (or 'patch+uffd', 'symbols+uffd'): `name` with each monitor
// that reports libc's releases before they happen, the broadest first.
std::string FencedCombinations(absl::string_view name) {
  std::vector<std::string> lists;
  for (const MonitorRow& row : MonitorTable()) {
    if (row.reports_libc_releases_before) {
      lists.insert(lists.begin(), absl::StrCat("'", row.name, "+", name, "'"));
    }
  }
  if (lists.size() < 2) return absl::StrJoin(lists, "");
  const std::string first = lists.front();
  lists.erase(lists.begin());
  return absl::StrCat(first, " (or ", absl::StrJoin(lists, ", "), ")");
}

// The one table of configuration keys, in documentation order. Set, Get,
// Keys, mrcache-info and the README's table (tests/cache/config_table_test.cc
// checks it) all come from here.
const std::vector<KeyRow>& Rows() {
  // The `monitor` key's texts, from the monitor table; they live as long as
  // the rows that point to them.
  static const std::string* monitor_values = new std::string(MonitorKeyDescription());
  static const std::string* monitor_expected = new std::string(MonitorNames("|") + ", '+'-joined");
  static const auto* rows = new std::vector<KeyRow>{
      {{"registrar",
        "`uring` (io_uring fixed buffers, real pinning), `sim` (cost model), `verbs` (rdma-core on "
        "your PD)",
        "`verbs` with a PD, else `uring` where io_uring works, else `sim`"},
       "uring|sim|verbs",
       [](Config& c, absl::string_view v) {
         if (v != "uring" && v != "sim" && v != "verbs" && !v.empty()) return false;
         c.registrar = std::string(v);
         return true;
       },
       [](const Config& c) { return c.registrar; }},
      {{"max_regions", "count, 0 = unlimited", "16384"},
       "a count, 0 = unlimited",
       [](Config& c, absl::string_view v) { return SetSize(&c.max_regions, v); },
       [](const Config& c) { return Num(c.max_regions); }},
      {{"max_bytes", "bytes kept registered (`K`/`M`/`G` suffixes), 0 = unlimited", "0"},
       "a size such as 512M, 0 = unlimited",
       [](Config& c, absl::string_view v) { return SetSize(&c.max_bytes, v); },
       [](const Config& c) { return Num(c.max_bytes); },
       kByteCount},
      {{"max_merge_bytes", "largest region a merge may create, 0 = merging off", "1G"},
       "a size, 0 = no merging",
       [](Config& c, absl::string_view v) { return SetSize(&c.max_merge_bytes, v); },
       [](const Config& c) { return Num(c.max_merge_bytes); },
       kByteCount},
      {{"bridge_bytes",
        "aligned block within which a miss in stable memory registers the resident rest of its "
        "mapping once "
        "another region is there (needs monitor `patch`/`uffd` or explicit ODP; at most "
        "`max_merge_bytes`, and a "
        "quarter of the pin budget), 0 = off",
        "128M"},
       "a size, 0 = no bridging",
       [](Config& c, absl::string_view v) { return SetSize(&c.bridge_bytes, v); },
       [](const Config& c) { return Num(c.bridge_bytes); },
       kByteCount},
      {{"alignment",
        "region granularity: a power of two >= 8 (`64` keeps heap neighbours apart, as UCX's IB "
        "default does; `2M` "
        "makes fewer, larger registrations; regions with remote rights are never widened beyond "
        "the requested "
        "pages); 0 = page size",
        "page size"},
       "a power of two >= 8, 0 = the page size",
       [](Config& c, absl::string_view v) {
         return SetCheckedSize(&c.alignment, v, [](size_t a) {
           return a == 0 || (IsPowerOfTwo(a) && a >= Config::kMinAlignment);
         });
       },
       [](const Config& c) { return Num(c.alignment); },
       kByteCount},
      {{"remote_keys",
        "`shared` (remote-rights regions cached; an rkey reaches the union of the pages requested "
        "with its rights) "
        "or `private` (each remote-rights request gets its own exact registration, deregistered at "
        "put); see "
        "*Remote keys*",
        "`shared` (the shim: `private`)"},
       "shared|private",
       [](Config& c, absl::string_view v) {
         if (v != "shared" && v != "private") return false;
         c.remote_keys = v == "shared" ? RemoteKeys::kShared : RemoteKeys::kPrivate;
         return true;
       },
       [](const Config& c) { return std::string(RemoteKeysName(c.remote_keys)); }},
      {{"monitor", monitor_values->c_str(), "`auto`"},
       monitor_expected->c_str(),
       [](Config& c, absl::string_view v) {
         if (!KnownMonitorList(v)) return false;
         c.monitor = std::string(v);
         return true;
       },
       [](const Config& c) { return c.monitor; }},
      {{"odp", "`off`, `explicit`, `implicit`, `auto`", "`off`"},
       "off|explicit|implicit|auto",
       [](Config& c, absl::string_view v) {
         for (OdpMode m : {OdpMode::kOff, OdpMode::kExplicit, OdpMode::kImplicit, OdpMode::kAuto}) {
           if (v == OdpName(m)) {
             c.odp = m;
             return true;
           }
         }
         return false;
       },
       [](const Config& c) { return std::string(OdpName(c.odp)); }},
      {{"odp_prefetch_bytes", "prefetch (ibv_advise_mr) ODP ranges at least this large, 0 = never",
        "0"},
       "a size, 0 = never",
       [](Config& c, absl::string_view v) { return SetSize(&c.odp_prefetch_bytes, v); },
       [](const Config& c) { return Num(c.odp_prefetch_bytes); },
       kByteCount},
      {{"prefault_bytes",
        "a registration at least this large of memory not yet resident (`uring`, `verbs`; never "
        "ODP) is first faulted in with `MADV_POPULATE_WRITE` over `prefault_threads` threads, "
        "then pinned at once; 0 = off",
        "64M"},
       "a size, 0 = off",
       [](Config& c, absl::string_view v) { return SetSize(&c.prefault_bytes, v); },
       [](const Config& c) { return Num(c.prefault_bytes); },
       kByteCount},
      {{"prefault_threads",
        "threads a prefault uses, the calling one included: 1 to 64, or `auto` (the CPUs the "
        "process may run on, at most 8)",
        "`auto`"},
       "auto or a count from 1 to 64",
       [](Config& c, absl::string_view v) {
         if (v == "auto") {
           c.prefault_threads = 0;
           return true;
         }
         return SetCheckedSize(&c.prefault_threads, v,
                               [](size_t n) { return n >= 1 && n <= Config::kMaxPrefaultThreads; });
       },
       [](const Config& c) {
         return c.prefault_threads == 0 ? std::string("auto") : Num(c.prefault_threads);
       }},
      {{"sim_base_ns", "sim registrar cost per call", "3000 (io_uring's, measured)"},
       "nanoseconds, a whole number",
       [](Config& c, absl::string_view v) { return SetNs(&c.sim_base_ns, v); },
       [](const Config& c) { return Num(c.sim_base_ns); }},
      {{"sim_page_ns", "sim registrar cost per 4 KiB page", "240 (io_uring's, measured)"},
       "nanoseconds, a whole number",
       [](Config& c, absl::string_view v) { return SetNs(&c.sim_page_ns, v); },
       [](const Config& c) { return Num(c.sim_page_ns); }},
      {{"sim_mlock", "sim registrar pins with mlock (only then does the pin budget apply to it)",
        "0"},
       "0 or 1",
       [](Config& c, absl::string_view v) { return SetBool(&c.sim_mlock, v); },
       [](const Config& c) { return std::string(c.sim_mlock ? "1" : "0"); }},
      {{"sim_odp_page_ns", "sim registrar ODP first-touch cost per page", "250"},
       "nanoseconds, a whole number",
       [](Config& c, absl::string_view v) { return SetNs(&c.sim_odp_page_ns, v); },
       [](const Config& c) { return Num(c.sim_odp_page_ns); }},
      {{"pool_max_bytes", "pooled allocator (`mrc_pool_*`): most bytes it maps", "1G"},
       "a size",
       [](Config& c, absl::string_view v) { return SetSize(&c.pool_max_bytes, v); },
       [](const Config& c) { return Num(c.pool_max_bytes); },
       kByteCount},
      {{"pool_chunk_bytes", "pooled allocator: bytes per registered chunk, a power of two >= 64K",
        "2M"},
       "a power of two >= 64K",
       [](Config& c, absl::string_view v) {
         return SetCheckedSize(&c.pool_chunk_bytes, v,
                               [](size_t b) { return IsPowerOfTwo(b) && b >= (size_t{64} << 10); });
       },
       [](const Config& c) { return Num(c.pool_chunk_bytes); },
       kByteCount},
      {{"pool_hugepages", "pooled allocator: back chunks with huge pages", "0"},
       "0 or 1",
       [](Config& c, absl::string_view v) { return SetBool(&c.pool_hugepages, v); },
       [](const Config& c) { return std::string(c.pool_hugepages ? "1" : "0"); }},
      {{"pool_retain_bytes",
        "pooled allocator: bytes of chunks whose buffers are all free that stay registered for "
        "reuse (a burst of buffers within them costs no new registration); an emptied chunk "
        "beyond them is deregistered and unmapped",
        "32M"},
       "a size",
       [](Config& c, absl::string_view v) { return SetSize(&c.pool_retain_bytes, v); },
       [](const Config& c) { return Num(c.pool_retain_bytes); },
       kByteCount},
      {{"pool_access",
        "pooled allocator: the rights every chunk is registered with, `+`-joined from "
        "`local_write` (required), `remote_read`, `remote_write`, `remote_atomic`; a buffer's "
        "rkey reaches its whole chunk (`mrc_pool_keys`)",
        "`local_write`"},
       "local_write, then any of +remote_read, +remote_write, +remote_atomic",
       [](Config& c, absl::string_view v) { return SetPoolAccess(&c.pool_access, v); },
       [](const Config& c) { return PoolAccessName(c.pool_access); }},
      {{"uring_slots", "uring registrar fixed-buffer table size, 1 to 32768", "16384"},
       "a count from 1 to 32768",
       [](Config& c, absl::string_view v) {
         return SetCheckedSize(&c.uring_slots, v, [](size_t n) { return n >= 1 && n <= 32768; });
       },
       [](const Config& c) { return Num(c.uring_slots); }},
      {{"custom_pins",
        "custom registrar (`mrc_cache_create_custom`): its callbacks pin memory that counts "
        "against `RLIMIT_MEMLOCK`, so the pin budget applies; `0` for callbacks that pin nothing",
        "1"},
       "0 or 1",
       [](Config& c, absl::string_view v) { return SetBool(&c.custom_pins, v); },
       [](const Config& c) { return std::string(c.custom_pins ? "1" : "0"); }},
      {{"stats_shm",
        "`on`: publish the cache's counters and histograms live in the process's page "
        "`/dev/shm/mrcache-<uid>-<pid>` (read with `mrcache-info --pid`); `off` creates nothing",
        "`on`"},
       "on or off",
       [](Config& c, absl::string_view v) { return SetBool(&c.stats_shm, v); },
       [](const Config& c) { return std::string(c.stats_shm ? "on" : "off"); }},
      {{"max_region_bytes",
        "longest region the cache registers: merging, bridging and alignment stop there, a "
        "longer request fails `EINVAL` naming the limit; the `verbs` registrar also applies the "
        "device's `max_mr_size`, `uring` its 1 GiB per buffer; 0 = the registrar's own limit only",
        "0"},
       "a size, 0 = the registrar's limit only",
       [](Config& c, absl::string_view v) { return SetSize(&c.max_region_bytes, v); },
       [](const Config& c) { return Num(c.max_region_bytes); },
       kByteCount},
      {{"async_dereg",
        "registrations that leave the cache (evicted, invalidated and unreferenced, flushed, "
        "merged away) are deregistered by a background thread at the lowest priority (nice 19; a "
        "thread that waits for it deregisters the queued ones itself), off the caller's get or "
        "put: `on`, `off` (by the thread that took them out), or `auto` (on when regions pin "
        "memory: `uring`, `verbs` without ODP, `sim` with sim_mlock)",
        "`auto`"},
       "on, off or auto",
       [](Config& c, absl::string_view v) {
         if (v == "auto") {
           c.async_dereg = AsyncDereg::kAuto;
           return true;
         }
         bool on = false;
         if (!SetBool(&on, v)) return false;
         c.async_dereg = on ? AsyncDereg::kOn : AsyncDereg::kOff;
         return true;
       },
       [](const Config& c) {
         return std::string(c.async_dereg == AsyncDereg::kAuto ? "auto"
                            : c.async_dereg == AsyncDereg::kOn ? "on"
                                                               : "off");
       }},
      {{"async_dereg_bytes",
        "with `async_dereg`, the fewest registered bytes a batch of deregistrations is handed to "
        "the background thread for; a smaller batch is deregistered by the get or put that made "
        "it (it costs about what handing it over costs); 0 = every batch",
        "64M"},
       "a size, 0 = every batch",
       [](Config& c, absl::string_view v) { return SetSize(&c.async_dereg_bytes, v); },
       [](const Config& c) { return Num(c.async_dereg_bytes); },
       kByteCount},
      {{"async_dereg_invalidated_bytes",
        "with `async_dereg`, a batch is also handed to the background thread when its regions "
        "whose memory was unmapped or remapped hold at least this many registered bytes: their "
        "deregistration frees the pages, tens of times the cost of unpinning mapped ones; "
        "skipped while the pin budget is more than half used; 0 = every batch with such a region "
        "(what `mrc_invalidate` takes out is always deregistered before it returns)",
        "256K"},
       "a size, 0 = every batch with a region whose memory is gone",
       [](Config& c, absl::string_view v) { return SetSize(&c.async_dereg_invalidated_bytes, v); },
       [](const Config& c) { return Num(c.async_dereg_invalidated_bytes); },
       kByteCount},
  };
  return *rows;
}

const KeyRow* FindRow(absl::string_view key) {
  for (const KeyRow& row : Rows()) {
    if (key == row.info.name) return &row;
  }
  return nullptr;
}

}  // namespace

const std::vector<ConfigKeyInfo>& Config::KeyTable() {
  static const auto* table = [] {
    auto* t = new std::vector<ConfigKeyInfo>;
    for (const KeyRow& row : Rows()) t->push_back(row.info);
    return t;
  }();
  return *table;
}

const std::vector<std::string>& Config::Keys() {
  static const auto* keys = [] {
    auto* k = new std::vector<std::string>;
    for (const KeyRow& row : Rows()) k->push_back(row.info.name);
    return k;
  }();
  return *keys;
}

absl::Status Config::Set(absl::string_view key, absl::string_view value) {
  const KeyRow* row = FindRow(key);
  if (row == nullptr) return ErrnoStatus(EINVAL, absl::StrCat("unknown config key '", key, "'"));
  if (!row->set(*this, value)) return BadValue(key, value, row->expected);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Config::Get(absl::string_view key) const {
  const KeyRow* row = FindRow(key);
  if (row == nullptr) return ErrnoStatus(ENOENT, absl::StrCat("unknown config key '", key, "'"));
  return row->get(*this);
}

absl::StatusOr<std::string> Config::Show(absl::string_view key) const {
  absl::StatusOr<std::string> value = Get(key);
  uint64_t bytes = 0;
  const KeyRow* row = FindRow(key);
  if (!value.ok() || row->kind != kByteCount || !absl::SimpleAtoi(*value, &bytes)) return value;
  return FormatSize(bytes);
}

absl::Status Config::ApplyEnvironment() {
  WarnAboutUnknownVariablesOnce();
  for (const std::string& key : Keys()) {
    std::string name = "MRCACHE_" + absl::AsciiStrToUpper(key);
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) continue;
    absl::Status s = Set(key, value);
    if (!s.ok()) return ErrnoStatus(EINVAL, absl::StrCat("environment ", name, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> Config::FromEnvironment() { return FromEnvironment(Config()); }

absl::StatusOr<Config> Config::FromEnvironment(Config defaults) {
  absl::Status s = defaults.ApplyEnvironment();
  if (!s.ok()) return s;
  return defaults;
}

absl::Status Config::Validate() const {
  if (alignment != 0 && (!IsPowerOfTwo(alignment) || alignment < kMinAlignment)) {
    return ErrnoStatus(EINVAL, "alignment must be a power of two >= 8 (0 = the page size)");
  }
  // A monitor that reports releases only after the fact (uffd) serves stale
  // registrations under concurrent release without one that reports them
  // before (tests/monitors/README.md, "Concurrent release and reuse").
  if (const MonitorRow* needs = MonitorNeedingAFence(monitor)) {
    return ErrnoStatus(EINVAL, absl::StrCat("monitor '", monitor, "': ", needs->why_not_alone,
                                            "; use ", FencedCombinations(needs->name),
                                            ", which report releases before they happen and add ",
                                            needs->name, "'s events"));
  }
  return absl::OkStatus();
}

}  // namespace mrcache

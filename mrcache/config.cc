#include "mrcache/config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mrcache/environment_check.h"
#include "mrcache/errno_status.h"

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

const char* OdpName(OdpMode m) {
  switch (m) {
    case OdpMode::kOff: return "off";
    case OdpMode::kExplicit: return "explicit";
    case OdpMode::kImplicit: return "implicit";
    case OdpMode::kAuto: return "auto";
  }
  return "off";
}

bool IsPowerOfTwo(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

const char* RemoteKeysName(RemoteKeys mode) {
  return mode == RemoteKeys::kPrivate ? "private" : "shared";
}

absl::StatusOr<uint64_t> ParseSize(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (t.empty()) return ErrnoStatus(EINVAL, "empty size");
  uint64_t mult = 1;
  char last = static_cast<char>(std::toupper(static_cast<unsigned char>(t.back())));
  if (last == 'K' || last == 'M' || last == 'G' || last == 'T') {
    mult = last == 'K' ? (1ull << 10) : last == 'M' ? (1ull << 20) : last == 'G' ? (1ull << 30) : (1ull << 40);
    t.remove_suffix(1);
  }
  uint64_t v = 0;
  if (t.empty() || !std::all_of(t.begin(), t.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) ||
      !absl::SimpleAtoi(t, &v)) {
    return ErrnoStatus(EINVAL, absl::StrCat("'", text, "' is not a size"));
  }
  if (v != 0 && mult > UINT64_MAX / v) return ErrnoStatus(EINVAL, absl::StrCat("size '", text, "' overflows"));
  return v * mult;
}

const std::vector<std::string>& Config::Keys() {
  static const auto* keys = new std::vector<std::string>{
      "registrar",   "max_regions",    "max_bytes",      "max_merge_bytes",  "bridge_bytes", "alignment",
      "remote_keys", "monitor",     "odp",            "odp_prefetch_bytes", "sim_base_ns", "sim_page_ns",
      "sim_mlock",   "sim_odp_page_ns", "pool_max_bytes", "pool_chunk_bytes", "pool_hugepages",
      "uring_slots"};
  return *keys;
}

absl::Status Config::Set(absl::string_view key, absl::string_view value) {
  auto size_key = [&](size_t* field, absl::string_view what) -> absl::Status {
    auto v = ParseSize(value);
    if (!v.ok()) return BadValue(key, value, what);
    *field = static_cast<size_t>(*v);
    return absl::OkStatus();
  };
  auto ns_key = [&](uint64_t* field) -> absl::Status {
    uint64_t v;
    if (!absl::SimpleAtoi(value, &v)) return BadValue(key, value, "nanoseconds, a whole number");
    *field = v;
    return absl::OkStatus();
  };
  auto bool_key = [&](bool* field) -> absl::Status {
    auto v = ParseBool(value);
    if (!v.ok()) return BadValue(key, value, "0 or 1");
    *field = *v;
    return absl::OkStatus();
  };
  if (key == "registrar") {
    if (value != "uring" && value != "sim" && value != "verbs" && !value.empty()) {
      return BadValue(key, value, "uring|sim|verbs");
    }
    registrar = std::string(value);
    return absl::OkStatus();
  }
  if (key == "max_regions") return size_key(&max_regions, "a count, 0 = unlimited");
  if (key == "max_bytes") return size_key(&max_bytes, "a size such as 512M, 0 = unlimited");
  if (key == "max_merge_bytes") return size_key(&max_merge_bytes, "a size, 0 = no merging");
  if (key == "bridge_bytes") return size_key(&bridge_bytes, "a size, 0 = no bridging");
  if (key == "alignment") {
    size_t old = alignment;
    absl::Status s = size_key(&alignment, "a power of two >= 8, 0 = the page size");
    if (!s.ok()) return s;
    if (alignment != 0 && (!IsPowerOfTwo(alignment) || alignment < kMinAlignment)) {
      alignment = old;
      return BadValue(key, value, "a power of two >= 8, 0 = the page size");
    }
    return absl::OkStatus();
  }
  if (key == "remote_keys") {
    if (value == "shared") remote_keys = RemoteKeys::kShared;
    else if (value == "private") remote_keys = RemoteKeys::kPrivate;
    else return BadValue(key, value, "shared|private");
    return absl::OkStatus();
  }
  if (key == "monitor") {
    // Names are checked when the monitor is acquired; reject obvious junk here.
    static const char* kNames[] = {"none", "symbols", "patch", "uffd", "jemalloc", "auto"};
    absl::string_view rest = value;
    while (true) {
      size_t plus = rest.find('+');
      absl::string_view part = rest.substr(0, plus);
      bool known = false;
      for (const char* n : kNames) known |= part == n;
      if (!known) return BadValue(key, value, "none|symbols|patch|uffd|jemalloc|auto, '+'-joined");
      if (plus == absl::string_view::npos) break;
      rest.remove_prefix(plus + 1);
    }
    monitor = std::string(value);
    return absl::OkStatus();
  }
  if (key == "odp") {
    if (value == "off") odp = OdpMode::kOff;
    else if (value == "explicit") odp = OdpMode::kExplicit;
    else if (value == "implicit") odp = OdpMode::kImplicit;
    else if (value == "auto") odp = OdpMode::kAuto;
    else return BadValue(key, value, "off|explicit|implicit|auto");
    return absl::OkStatus();
  }
  if (key == "odp_prefetch_bytes") return size_key(&odp_prefetch_bytes, "a size, 0 = never");
  if (key == "sim_base_ns") return ns_key(&sim_base_ns);
  if (key == "sim_page_ns") return ns_key(&sim_page_ns);
  if (key == "sim_mlock") return bool_key(&sim_mlock);
  if (key == "sim_odp_page_ns") return ns_key(&sim_odp_page_ns);
  if (key == "pool_max_bytes") return size_key(&pool_max_bytes, "a size");
  if (key == "pool_chunk_bytes") {
    size_t old = pool_chunk_bytes;
    absl::Status s = size_key(&pool_chunk_bytes, "a power of two >= 64K");
    if (!s.ok()) return s;
    if (!IsPowerOfTwo(pool_chunk_bytes) || pool_chunk_bytes < (64u << 10)) {
      pool_chunk_bytes = old;
      return BadValue(key, value, "a power of two >= 64K");
    }
    return absl::OkStatus();
  }
  if (key == "pool_hugepages") return bool_key(&pool_hugepages);
  if (key == "uring_slots") {
    size_t old = uring_slots;
    absl::Status s = size_key(&uring_slots, "a count from 1 to 32768");
    if (!s.ok()) return s;
    if (uring_slots == 0 || uring_slots > 32768) {
      uring_slots = old;
      return BadValue(key, value, "a count from 1 to 32768");
    }
    return absl::OkStatus();
  }
  return ErrnoStatus(EINVAL, absl::StrCat("unknown config key '", key, "'"));
}

absl::StatusOr<std::string> Config::Get(absl::string_view key) const {
  if (key == "registrar") return registrar;
  if (key == "max_regions") return std::to_string(max_regions);
  if (key == "max_bytes") return std::to_string(max_bytes);
  if (key == "max_merge_bytes") return std::to_string(max_merge_bytes);
  if (key == "bridge_bytes") return std::to_string(bridge_bytes);
  if (key == "alignment") return std::to_string(alignment);
  if (key == "remote_keys") return std::string(RemoteKeysName(remote_keys));
  if (key == "monitor") return monitor;
  if (key == "odp") return std::string(OdpName(odp));
  if (key == "odp_prefetch_bytes") return std::to_string(odp_prefetch_bytes);
  if (key == "sim_base_ns") return std::to_string(sim_base_ns);
  if (key == "sim_page_ns") return std::to_string(sim_page_ns);
  if (key == "sim_mlock") return std::string(sim_mlock ? "1" : "0");
  if (key == "sim_odp_page_ns") return std::to_string(sim_odp_page_ns);
  if (key == "pool_max_bytes") return std::to_string(pool_max_bytes);
  if (key == "pool_chunk_bytes") return std::to_string(pool_chunk_bytes);
  if (key == "pool_hugepages") return std::string(pool_hugepages ? "1" : "0");
  if (key == "uring_slots") return std::to_string(uring_slots);
  return ErrnoStatus(ENOENT, absl::StrCat("unknown config key '", key, "'"));
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
  return absl::OkStatus();
}

}  // namespace mrcache

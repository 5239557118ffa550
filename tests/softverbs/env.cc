#include "tests/softverbs/env.h"

#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

namespace softverbs {
namespace {

// Parses `text` as digits and, if `allow_suffix`, one binary-multiple letter.
bool ParseNumber(const char* text, bool allow_suffix, uint64_t* out) {
  if (!isdigit(static_cast<unsigned char>(text[0]))) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0) return false;
  unsigned shift = 0;
  if (allow_suffix && *end != '\0') {
    switch (toupper(static_cast<unsigned char>(*end))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
      default:
        return false;
    }
    ++end;
  }
  if (*end != '\0') return false;
  if (shift != 0 && v > (UINT64_MAX >> shift)) return false;
  *out = static_cast<uint64_t>(v) << shift;
  return true;
}

int FromEnvironment(const char* name, bool bytes, uint64_t min, uint64_t max, uint64_t* out) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') return 0;
  uint64_t v = 0;
  if (!ParseNumber(text, bytes, &v) || v < min || v > max) {
    fprintf(stderr, "softverbs: %s=%s is not %s in %" PRIu64 "..%" PRIu64 "\n", name, text,
            bytes ? "a size in bytes (K, M, G, T suffixes allowed)" : "a whole number", min, max);
    return EINVAL;
  }
  *out = v;
  return 0;
}

}  // namespace

int CountFromEnvironment(const char* name, uint64_t min, uint64_t max, uint64_t* out) {
  return FromEnvironment(name, /*bytes=*/false, min, max, out);
}

int BytesFromEnvironment(const char* name, uint64_t min, uint64_t max, uint64_t* out) {
  return FromEnvironment(name, /*bytes=*/true, min, max, out);
}

}  // namespace softverbs

// env.h: reading softverbs' SOFTVERBS_* settings from the environment.
//
// Every setting is read where a real device would learn it (ibv_get_device_list
// or ibv_open_device); a value that does not parse is reported on stderr with
// the variable's name and the verb fails with EINVAL, never a crash.
#ifndef SOFTVERBS_ENV_H_
#define SOFTVERBS_ENV_H_

#include <cstdint>

namespace softverbs {

// Reads the decimal whole number in `name` into *out when the variable is
// set and not empty (else *out keeps its default). A value outside
// [min, max], a sign, a suffix or other garbage prints
// "softverbs: NAME=VALUE is not ..." on stderr and returns EINVAL; else 0.
int CountFromEnvironment(const char* name, uint64_t min, uint64_t max, uint64_t* out);

// As CountFromEnvironment, for a size in bytes: a decimal number optionally
// followed by K, M, G or T (binary: 1M = 1048576), e.g. "1M", "4096".
int BytesFromEnvironment(const char* name, uint64_t min, uint64_t max, uint64_t* out);

}  // namespace softverbs

#endif  // SOFTVERBS_ENV_H_

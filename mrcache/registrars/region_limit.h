// region_limit.h: the config key max_region_bytes over any registrar.
//
// WithRegionLimit wraps a registrar so that a registration longer than
// `max_region_bytes` is refused (EINVAL, logged, naming the key) before it
// reaches the registrar, and max_region_bytes() reports the lower of that
// and the registrar's own limit (a device's max_mr_size, io_uring's 1 GiB).
// The implicit ODP registration (odp.h) is exempt: it names no range.
#ifndef MRCACHE_REGISTRARS_REGION_LIMIT_H_
#define MRCACHE_REGISTRARS_REGION_LIMIT_H_

#include <cstddef>
#include <memory>

#include "mrcache/registrar.h"

namespace mrcache {

// `inner` itself when max_region_bytes is 0 (no limit of the config's own).
std::unique_ptr<Registrar> WithRegionLimit(std::unique_ptr<Registrar> inner,
                                           size_t max_region_bytes);

}  // namespace mrcache

#endif  // MRCACHE_REGISTRARS_REGION_LIMIT_H_

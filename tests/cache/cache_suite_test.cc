// cache_suite_test.cc: the cache suite on the sim registrar (zero cost) and on
// the uring registrar (real kernel pinning).
#include "tests/cache/cache_suite.h"
#include "mrcache/registrars/sim_registrar.h"
#include "mrcache/registrars/uring_registrar.h"

namespace mrcache {
namespace testing {
namespace {

RegistrarParam Sim() {
  return {"sim", [](const Config& c) -> absl::StatusOr<std::unique_ptr<Registrar>> {
            Config zero = c;
            zero.sim_base_ns = 0;
            zero.sim_page_ns = 0;
            return MakeSimRegistrar(zero);
          }};
}

RegistrarParam Uring() {
  return {"uring", [](const Config& c) { return MakeUringRegistrar(c); }};
}

}  // namespace

std::vector<RegistrarParam> SuiteRegistrars() { return {Sim(), Uring()}; }
}  // namespace testing
}  // namespace mrcache

// cache_suite.h: the cache's behaviour suite, parameterised over registrars.
//
// The suite (cache_suite.cc) is written once; each test binary instantiates
// it for the registrars it can run: sim and uring here (cache_suite_test.cc),
// verbs against softverbs in tests/verbs. A parameter names the registrar and
// knows how to build one.
#ifndef MRCACHE_TESTS_CACHE_CACHE_SUITE_H_
#define MRCACHE_TESTS_CACHE_CACHE_SUITE_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "mrcache/config.h"
#include "mrcache/registrar.h"

namespace mrcache {
namespace testing {

struct RegistrarParam {
  std::string name;
  std::function<absl::StatusOr<std::unique_ptr<Registrar>>(const Config&)> make;
};

inline std::ostream& operator<<(std::ostream& os, const RegistrarParam& p) { return os << p.name; }

class CacheSuite : public ::testing::TestWithParam<RegistrarParam> {};

// Defined by each test binary that links the suite: the registrars to run it on.
std::vector<RegistrarParam> SuiteRegistrars();

inline std::string RegistrarParamName(const ::testing::TestParamInfo<RegistrarParam>& info) {
  return info.param.name;
}

}  // namespace testing
}  // namespace mrcache

#endif  // MRCACHE_TESTS_CACHE_CACHE_SUITE_H_

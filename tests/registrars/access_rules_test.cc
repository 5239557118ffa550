// access_rules_test.cc: the two forms of ibv_reg_mr(3)'s access rules in
// mrcache/registrar.h agree: AccessValid (the miss path's test) is true
// exactly when ValidateAccess (the message for a bad request) is OK.
#include <gtest/gtest.h>

#include "mrcache/registrar.h"

namespace mrcache {
namespace {

TEST(AccessRulesTest, AccessValidAgreesWithValidateAccessForEveryCombinationOfBits) {
  // Every combination of the low 20 bits: the known ones and beyond.
  for (int access = 0; access < (1 << 20); ++access) {
    ASSERT_EQ(AccessValid(access), ValidateAccess(access).ok())
        << "access 0x" << std::hex << access;
  }
  EXPECT_TRUE(AccessValid(kAccessLocalWrite | kAccessRemoteWrite));
  EXPECT_FALSE(AccessValid(kAccessRemoteWrite));
}

}  // namespace
}  // namespace mrcache

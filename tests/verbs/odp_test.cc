// ResolveOdpMode: the configured odp mode against what a device offers, both
// as a table and against softverbs' SOFTVERBS_ODP=none|explicit|implicit
// through the verbs registrar's capability query.
#include "mrcache/registrars/odp.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <string>

#include "mrcache/errno_status.h"
#include "mrcache/registrars/verbs_registrar.h"
#include "tests/softverbs/fixture.h"

namespace mrcache {
namespace {

using ::testing::HasSubstr;

OdpCapabilities Caps(bool explicit_odp, bool implicit_odp) {
  OdpCapabilities caps;
  caps.explicit_odp = explicit_odp;
  caps.implicit_odp = implicit_odp;
  caps.prefetch = explicit_odp;
  return caps;
}

TEST(ResolveOdpMode, OffIsAlwaysOff) {
  EXPECT_EQ(*ResolveOdpMode(OdpMode::kOff, Caps(false, false)), OdpMode::kOff);
  EXPECT_EQ(*ResolveOdpMode(OdpMode::kOff, Caps(true, true)), OdpMode::kOff);
}

TEST(ResolveOdpMode, AutoPrefersImplicitThenExplicitThenOff) {
  EXPECT_EQ(*ResolveOdpMode(OdpMode::kAuto, Caps(true, true)), OdpMode::kImplicit);
  EXPECT_EQ(*ResolveOdpMode(OdpMode::kAuto, Caps(true, false)), OdpMode::kExplicit);
  EXPECT_EQ(*ResolveOdpMode(OdpMode::kAuto, Caps(false, false)), OdpMode::kOff);
}

TEST(ResolveOdpMode, ExplicitNeedsOdp) {
  EXPECT_EQ(*ResolveOdpMode(OdpMode::kExplicit, Caps(true, false)), OdpMode::kExplicit);
  auto mode = ResolveOdpMode(OdpMode::kExplicit, Caps(false, false));
  ASSERT_FALSE(mode.ok());
  EXPECT_EQ(StatusToErrno(mode.status()), ENOTSUP);
  EXPECT_THAT(std::string(mode.status().message()), HasSubstr("IBV_ODP_SUPPORT"));
}

TEST(ResolveOdpMode, ImplicitNeedsImplicitOdp) {
  EXPECT_EQ(*ResolveOdpMode(OdpMode::kImplicit, Caps(true, true)), OdpMode::kImplicit);
  auto explicit_only = ResolveOdpMode(OdpMode::kImplicit, Caps(true, false));
  ASSERT_FALSE(explicit_only.ok());
  EXPECT_EQ(StatusToErrno(explicit_only.status()), ENOTSUP);
  EXPECT_THAT(std::string(explicit_only.status().message()),
              HasSubstr("only explicit on-demand paging"));
  auto none = ResolveOdpMode(OdpMode::kImplicit, Caps(false, false));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(StatusToErrno(none.status()), ENOTSUP);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("does not support on-demand paging"));
}

// One row per SOFTVERBS_ODP level: what each requested mode resolves to
// ("" = an ENOTSUP error).
struct DeviceRow {
  const char* softverbs_odp;
  const char* off;
  const char* explicit_mode;
  const char* implicit_mode;
  const char* auto_mode;
};

// The mode's spelling (config.h), "" for ENOTSUP.
std::string Name(const absl::StatusOr<OdpMode>& mode) {
  if (!mode.ok()) return StatusToErrno(mode.status()) == ENOTSUP ? "" : "unexpected error";
  return OdpName(*mode);
}

class OdpOnSoftverbs : public softverbs::SoftverbsTest,
                       public ::testing::WithParamInterface<DeviceRow> {
 protected:
  const char* odp() const override { return GetParam().softverbs_odp; }
};

TEST_P(OdpOnSoftverbs, EveryRequestedModeResolvesAsTheDeviceAllows) {
  auto made = MakeVerbsRegistrar(pd_, Config());
  ASSERT_TRUE(made.ok()) << made.status();
  const OdpCapabilities caps = (*made)->odp_capabilities();
  const DeviceRow& row = GetParam();
  EXPECT_EQ(Name(ResolveOdpMode(OdpMode::kOff, caps)), row.off);
  EXPECT_EQ(Name(ResolveOdpMode(OdpMode::kExplicit, caps)), row.explicit_mode);
  EXPECT_EQ(Name(ResolveOdpMode(OdpMode::kImplicit, caps)), row.implicit_mode);
  EXPECT_EQ(Name(ResolveOdpMode(OdpMode::kAuto, caps)), row.auto_mode);
}

INSTANTIATE_TEST_SUITE_P(Devices, OdpOnSoftverbs,
                         ::testing::Values(DeviceRow{"none", "off", "", "", "off"},
                                           DeviceRow{"explicit", "off", "explicit", "", "explicit"},
                                           DeviceRow{"implicit", "off", "explicit", "implicit",
                                                     "implicit"}),
                         [](const ::testing::TestParamInfo<DeviceRow>& info) {
                           return std::string(info.param.softverbs_odp);
                         });

}  // namespace
}  // namespace mrcache

"""A coexistence probe (tests/coexist/coexist_rounds.h) in its two builds,
with the test of each.

coexist_probe_tests(name, probe, test) defines
  <name>_linked       the probe linked with libmrcache.so (C API, uring registrar)
  <name>_verbs        the probe on plain verbs, run with the shim preloaded
  <name>_linked_test  `test linked`
  <name>_shim_test    `test shim`
both tests on softverbs, in CI's sanitizer phases (tag `sanitize`), except
that linked_under_tsan = False keeps `<name>_linked_test` out of the TSan
phase (tag `no_tsan`, which scripts/test's TSan phase filters out).
"""

load("//tests/softverbs:softverbs.bzl", "softverbs_sh_test")

def coexist_probe_tests(name, probe, test, linked_under_tsan = True):
    common_deps = [
        "//tests/monitors:registration_view",
        "//tests/monitors:release_ways",
        "@system//:dl",
    ]
    native.cc_binary(
        name = name + "_linked",
        testonly = 1,
        srcs = ["coexist_rounds.h", probe, "//:libmrcache.so"],
        local_defines = ["REGISTRATION_VIEW_C_API"],
        deps = common_deps + ["//mrcache:mrcache_h"],
    )
    native.cc_binary(
        name = name + "_verbs",
        testonly = 1,
        srcs = ["coexist_rounds.h", probe],
        local_defines = ["REGISTRATION_VIEW_VERBS"],
        deps = common_deps + ["@system//:ibverbs"],
    )
    softverbs_sh_test(
        name = name + "_linked_test",
        size = "medium",
        tags = ["sanitize"] + ([] if linked_under_tsan else ["no_tsan"]),
        srcs = [test],
        args = ["linked"],
        data = ["coexist_common.sh", ":" + name + "_linked", "//:libmrcache.so"],
    )
    softverbs_sh_test(
        name = name + "_shim_test",
        size = "medium",
        tags = ["sanitize"],
        srcs = [test],
        args = ["shim"],
        data = ["coexist_common.sh", ":" + name + "_verbs", "//interpose:libmrcache_preload.so"],
    )

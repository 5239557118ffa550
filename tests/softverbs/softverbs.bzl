"""Running tests against softverbs, the stand-in libibverbs.so.1.

softverbs_test(name, srcs, deps, ...) is a cc_test linked normally against
the system libibverbs (-libverbs, rdma-core's headers and symbol versions)
that runs with LD_LIBRARY_PATH=tests/softverbs, so the dynamic loader picks
softverbs' libibverbs.so.1 instead of the real one. Extra `env` entries
(e.g. SOFTVERBS_ODP) are merged in.

softverbs_sh_test(name, srcs, data, ...) does the same for a shell test.
"""

SOFTVERBS_LIB = "//tests/softverbs:libibverbs.so.1"

# Tests run in their runfiles tree (the workspace root), so a relative
# directory works; the library sits there as tests/softverbs/libibverbs.so.1.
SOFTVERBS_ENV = {"LD_LIBRARY_PATH": "tests/softverbs"}

def softverbs_test(name, deps = [], data = [], env = {}, **kwargs):
    merged_env = dict(SOFTVERBS_ENV)
    merged_env.update(env)
    native.cc_test(
        name = name,
        deps = deps + ["@system//:ibverbs"],
        data = data + [SOFTVERBS_LIB],
        env = merged_env,
        **kwargs
    )

def softverbs_sh_test(name, data = [], env = {}, **kwargs):
    merged_env = dict(SOFTVERBS_ENV)
    merged_env.update(env)
    native.sh_test(
        name = name,
        data = data + [SOFTVERBS_LIB],
        env = merged_env,
        **kwargs
    )

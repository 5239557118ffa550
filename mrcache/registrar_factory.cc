// registrar_factory.cc: the registrar a config names, and Cache::Create over it.
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/prefault.h"
#include "mrcache/registrars/sim_registrar.h"
#include "mrcache/registrars/uring_registrar.h"
#include "mrcache/registrars/verbs_registrar.h"

namespace mrcache {

absl::StatusOr<std::unique_ptr<Registrar>> CreateRegistrar(const Config& config, ibv_pd* pd) {
  std::string name = config.registrar;
  if (name.empty()) name = pd != nullptr ? "verbs" : UringAvailable() ? "uring" : "sim";
  if (name == "sim") return MakeSimRegistrar(config);
  // The registrars that pin, with big registrations prefaulted (prefault.h).
  absl::StatusOr<std::unique_ptr<Registrar>> pinning;
  if (name == "uring") {
    pinning = MakeUringRegistrar(config);
  } else if (name == "verbs") {
    if (pd == nullptr) {
      return ErrnoStatus(EINVAL, "registrar=verbs needs a protection domain (struct ibv_pd*)");
    }
    pinning = MakeVerbsRegistrar(pd, config);
  } else {
    return ErrnoStatus(EINVAL,
                       absl::StrCat("unknown registrar '", name, "' (expected uring|sim|verbs)"));
  }
  if (!pinning.ok()) return pinning.status();
  return WithPrefault(std::move(*pinning), config);
}

absl::StatusOr<std::unique_ptr<Cache>> Cache::Create(const Config& config, ibv_pd* pd) {
  auto registrar = CreateRegistrar(config, pd);
  if (!registrar.ok()) return registrar.status();
  return Create(config, std::move(*registrar));
}

absl::StatusOr<std::unique_ptr<Cache>> Cache::CreateRails(const Config& config, ibv_pd* const* pds,
                                                          int npds) {
  if (pds == nullptr || npds < 1 || npds > kMaxRails) {
    return ErrnoStatus(EINVAL, absl::StrCat("rails: pds must list 1 to ", kMaxRails,
                                            " protection domains, not ", npds));
  }
  // Rails are PDs: without a registrar named, every rail is verbs (a null
  // pd is then EINVAL), never a mix of verbs and the PD-less default.
  Config rails_config = config;
  if (rails_config.registrar.empty()) rails_config.registrar = "verbs";
  std::vector<std::unique_ptr<Registrar>> rails;
  for (int i = 0; i < npds; ++i) {
    auto registrar = CreateRegistrar(rails_config, pds[i]);
    if (!registrar.ok()) {
      return ErrnoStatus(StatusToErrno(registrar.status()),
                         absl::StrCat("rail ", i, ": ", registrar.status().message()));
    }
    rails.push_back(std::move(*registrar));
  }
  return CreateRails(rails_config, std::move(rails));
}

}  // namespace mrcache

// deregistration.cc: deregistering the dead, inline or on the queue, and the
// quarantine of their Regions (deregistration.h).
#include "mrcache/core/deregistration.h"

#include <utility>

#include "mrcache/registrars/odp.h"

namespace mrcache {

void FreeRegions(Region* list) {
  while (list != nullptr) {
    Region* next = list->next_dead;
    delete list;
    list = next;
  }
}

bool Deregistration::WorthHandingOver(const DeadList& dead) const {
  if (dead.invalidated_by_caller) return false;
  if (dead.bytes >= setup_.async_bytes) return true;
  if (dead.memory_gone_bytes == 0 || dead.memory_gone_bytes < setup_.async_invalidated_bytes) {
    return false;
  }
  const size_t budget = setup_.budget != nullptr ? setup_.budget->budget() : 0;
  return budget == 0 || setup_.budget->pinned() <= budget / 2;
}

void Deregistration::DeregisterDead(DeadList* dead, EndBatch end_batch) {
  if (setup_.lane != nullptr && WorthHandingOver(*dead) &&
      DeregistrationQueue::Process().Push(setup_.lane, dead->head, dead->count)) {
    *dead = DeadList();
    return;
  }
  // async_dereg off, the queue full, or too few bytes to be worth handing
  // over: this thread's own victims.
  DeregisterDeadNow(dead, end_batch);
}

void Deregistration::DeregisterBeforeRegistering(DeadList* dead, size_t need, EndBatch end_batch) {
  const size_t budget = setup_.budget != nullptr ? setup_.budget->budget() : 0;
  if (budget == 0 || setup_.budget->pinned() + need <= budget) {
    Deregister(dead, end_batch);
    return;
  }
  DeregisterNow(dead, end_batch);
  if (setup_.lane != nullptr && setup_.budget->pinned() + need > budget) {
    WaitForAllDeregistrations();
  }
}

void Deregistration::WaitForDeregistrations() {
  if (setup_.lane == nullptr) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (DeregistrationQueue::Process().Drain(setup_.lane)) CountWaitSince(t0);
}

size_t Deregistration::WaitForAllDeregistrations() {
  if (setup_.lane == nullptr) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  size_t bytes = 0;
  if (DeregistrationQueue::Process().DrainAll(&bytes)) CountWaitSince(t0);
  return bytes;
}

void Deregistration::CountWaitSince(std::chrono::steady_clock::time_point t0) {
  const auto waited = std::chrono::steady_clock::now() - t0;
  wait_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count(),
                     std::memory_order_relaxed);
}

DeregistrationQueue::LaneFigures Deregistration::queue_figures() const {
  return setup_.lane != nullptr ? DeregistrationQueue::Process().Figures(setup_.lane)
                                : DeregistrationQueue::LaneFigures{};
}

void Deregistration::SetRetireCallback(Cache::RetireCallback callback) {
  MutexLock lock(&callback_mu_);
  has_retire_cb_.store(static_cast<bool>(callback), std::memory_order_release);
  retire_cb_ = std::move(callback);
}

void Deregistration::DeregisterDeadNow(DeadList* dead, EndBatch end_batch) {
  if (__builtin_expect(has_retire_cb_.load(std::memory_order_acquire), 0)) {
    DeregisterDeadReporting(dead, end_batch);
    return;
  }
  DeregisterEach(dead, nullptr, end_batch);
}

void Deregistration::DeregisterDeadReporting(DeadList* dead, EndBatch end_batch) {
  Cache::RetireCallback cb;
  {
    MutexLock lock(&callback_mu_);
    cb = retire_cb_;
  }
  DeregisterEach(dead, cb ? &cb : nullptr, end_batch);
}

void Deregistration::DeregisterEach(DeadList* dead, const Cache::RetireCallback* cb,
                                    EndBatch end_batch) {
  // Deregister calls this with a region on the list: no test before the first.
  // Usually one region (an eviction), no watched ranges (only uffd watches)
  // and no retire callback.
  Region* r = dead->head;
  do {
    Region* next = r->next_dead;
    setup_.registrar->Deregister(r->reg);
    if (__builtin_expect(setup_.watch_ranges, 0) && !IsImplicitOdp(r->reg)) {
      setup_.monitor->Unwatch(reinterpret_cast<void*>(r->start), r->length());
    }
    if (__builtin_expect(cb != nullptr, 0)) {
      (*cb)(reinterpret_cast<void*>(r->start), r->length(), r->reg.handle);
    }
    Quarantine(r, end_batch);
    r = next;
  } while (__builtin_expect(r != nullptr, 0));
  *dead = DeadList();
}

void Deregistration::Quarantine(Region* r, EndBatch end_batch) {
  Region* head = quarantine_.load(std::memory_order_relaxed);
  do {
    r->next_dead = head;
  } while (!quarantine_.compare_exchange_weak(head, r, std::memory_order_release,
                                              std::memory_order_relaxed));
  if (quarantined_.fetch_add(1, std::memory_order_relaxed) + 1 < kQuarantineBatch) return;
  // Taken before end_batch voids the entries: every Region of the batch was
  // deregistered before that, and none is reused before it.
  Region* batch = quarantine_.exchange(nullptr, std::memory_order_acquire);
  quarantined_.store(0, std::memory_order_relaxed);
  end_batch(batch);
}

}  // namespace mrcache

// helpers.cc: the public libibverbs helpers that need no device: rate
// conversions, event names, kernel-ABI struct copies, address handles built
// from a received work completion and the sysfs root (fork ranges:
// fork_protection.cc).
//
// Each behaves as ibv_rate_to_mult(3), ibv_event_type_str(3),
// ibv_init_ah_from_wc(3) and ibv_fork_init(3) describe.
#include <endian.h>
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace softverbs {
namespace {

// One InfiniBand rate: its enum, its data rate in Mbit/s and, when the rate
// is a whole multiple of 2.5 Gbit/s, that multiple (else 0).
struct Rate {
  ibv_rate rate;
  int mbps;
  int mult;
};

constexpr Rate kRates[] = {
    {IBV_RATE_2_5_GBPS, 2500, 1},       {IBV_RATE_5_GBPS, 5000, 2},
    {IBV_RATE_10_GBPS, 10000, 4},       {IBV_RATE_20_GBPS, 20000, 8},
    {IBV_RATE_30_GBPS, 30000, 12},      {IBV_RATE_40_GBPS, 40000, 16},
    {IBV_RATE_60_GBPS, 60000, 24},      {IBV_RATE_80_GBPS, 80000, 32},
    {IBV_RATE_120_GBPS, 120000, 48},    {IBV_RATE_14_GBPS, 14062, 0},
    {IBV_RATE_56_GBPS, 56250, 0},       {IBV_RATE_112_GBPS, 112500, 0},
    {IBV_RATE_168_GBPS, 168750, 0},     {IBV_RATE_25_GBPS, 25781, 0},
    {IBV_RATE_100_GBPS, 103125, 0},     {IBV_RATE_200_GBPS, 206250, 0},
    {IBV_RATE_300_GBPS, 309375, 0},     {IBV_RATE_28_GBPS, 28125, 11},
    {IBV_RATE_50_GBPS, 53125, 20},      {IBV_RATE_400_GBPS, 425000, 160},
    {IBV_RATE_600_GBPS, 637500, 240},   {IBV_RATE_800_GBPS, 850000, 320},
    {IBV_RATE_1200_GBPS, 1275000, 480},
};

void CopyAhAttrFromKern(ibv_ah_attr* dst, const ib_uverbs_ah_attr* src) {
  memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof dst->grh.dgid.raw);
  dst->grh.flow_label = src->grh.flow_label;
  dst->grh.sgid_index = src->grh.sgid_index;
  dst->grh.hop_limit = src->grh.hop_limit;
  dst->grh.traffic_class = src->grh.traffic_class;
  dst->dlid = src->dlid;
  dst->sl = src->sl;
  dst->src_path_bits = src->src_path_bits;
  dst->static_rate = src->static_rate;
  dst->is_global = src->is_global;
  dst->port_num = src->port_num;
}

}  // namespace
}  // namespace softverbs

using softverbs::kRates;

namespace {

// The fields that ibv_sa_path_rec and ib_user_path_rec both name alike
// (everything but the GIDs, which differ in type), copied either way.
template <typename Dst, typename Src>
void CopyPathRecordFields(Dst* dst, const Src* src) {
  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = src->raw_traffic;
  dst->flow_label = src->flow_label;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->reversible = src->reversible;
  dst->numb_path = src->numb_path;
  dst->pkey = src->pkey;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->mtu = src->mtu;
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time_selector = src->packet_life_time_selector;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
}

}  // namespace

extern "C" {

int ibv_rate_to_mult(ibv_rate rate) {
  for (const auto& r : kRates) {
    if (r.rate == rate) return r.mult != 0 ? r.mult : -1;
  }
  return -1;
}

ibv_rate mult_to_ibv_rate(int mult) {
  for (const auto& r : kRates) {
    if (r.mult != 0 && r.mult == mult) return r.rate;
  }
  return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(ibv_rate rate) {
  for (const auto& r : kRates) {
    if (r.rate == rate) return r.mbps;
  }
  return -1;
}

ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const auto& r : kRates) {
    if (r.mbps == mbps) return r.rate;
  }
  return IBV_RATE_MAX;
}

const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kNames[] = {
      "CQ error",
      "local work queue catastrophic error",
      "invalid request local work queue error",
      "local access violation work queue error",
      "communication established",
      "send queue drained",
      "path migrated",
      "path migration request error",
      "local catastrophic error",
      "port active",
      "port error",
      "LID change",
      "P_Key change",
      "SM change",
      "SRQ catastrophic error",
      "SRQ limit reached",
      "last WQE reached",
      "client reregistration",
      "GID table change",
      "WQ fatal",
  };
  const auto index = static_cast<unsigned>(event);
  return index < sizeof kNames / sizeof kNames[0] ? kNames[index] : "unknown";
}

void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src) {
  softverbs::CopyAhAttrFromKern(dst, src);
}

void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src) {
  dst->qp_state = static_cast<ibv_qp_state>(src->qp_state);
  dst->cur_qp_state = static_cast<ibv_qp_state>(src->cur_qp_state);
  dst->path_mtu = static_cast<ibv_mtu>(src->path_mtu);
  dst->path_mig_state = static_cast<ibv_mig_state>(src->path_mig_state);
  dst->qkey = src->qkey;
  dst->rq_psn = src->rq_psn;
  dst->sq_psn = src->sq_psn;
  dst->dest_qp_num = src->dest_qp_num;
  dst->qp_access_flags = static_cast<unsigned>(src->qp_access_flags);
  dst->cap.max_send_wr = src->max_send_wr;
  dst->cap.max_recv_wr = src->max_recv_wr;
  dst->cap.max_send_sge = src->max_send_sge;
  dst->cap.max_recv_sge = src->max_recv_sge;
  dst->cap.max_inline_data = src->max_inline_data;
  softverbs::CopyAhAttrFromKern(&dst->ah_attr, &src->ah_attr);
  softverbs::CopyAhAttrFromKern(&dst->alt_ah_attr, &src->alt_ah_attr);
  dst->pkey_index = src->pkey_index;
  dst->alt_pkey_index = src->alt_pkey_index;
  dst->en_sqd_async_notify = src->en_sqd_async_notify;
  dst->sq_draining = src->sq_draining;
  dst->max_rd_atomic = src->max_rd_atomic;
  dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
  dst->min_rnr_timer = src->min_rnr_timer;
  dst->port_num = src->port_num;
  dst->timeout = src->timeout;
  dst->retry_cnt = src->retry_cnt;
  dst->rnr_retry = src->rnr_retry;
  dst->alt_port_num = src->alt_port_num;
  dst->alt_timeout = src->alt_timeout;
}

void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src) {
  memcpy(dst->dgid.raw, src->dgid, sizeof dst->dgid.raw);
  memcpy(dst->sgid.raw, src->sgid, sizeof dst->sgid.raw);
  CopyPathRecordFields(dst, src);
}

void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src) {
  memcpy(dst->dgid, src->dgid.raw, sizeof dst->dgid);
  memcpy(dst->sgid, src->sgid.raw, sizeof dst->sgid);
  CopyPathRecordFields(dst, src);
}

// The reply's address: back to the sender's LID (and GID when the message
// carried a GRH, whose source GID becomes the destination; the local GID
// index is the one the GRH's destination GID names).
int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                        ibv_ah_attr* ah_attr) {
  if (context == nullptr || wc == nullptr || ah_attr == nullptr) return EINVAL;
  memset(ah_attr, 0, sizeof *ah_attr);
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port_num;
  if ((wc->wc_flags & IBV_WC_GRH) == 0) return 0;
  if (grh == nullptr) return EINVAL;
  ibv_gid local;
  int index = 0;
  for (;; ++index) {
    if (ibv_query_gid(context, port_num, index, &local) != 0) return ENOENT;
    if (memcmp(&local, &grh->dgid, sizeof local) == 0) break;
  }
  const uint32_t flow = be32toh(grh->version_tclass_flow);
  ah_attr->is_global = 1;
  ah_attr->grh.dgid = grh->sgid;
  ah_attr->grh.sgid_index = static_cast<uint8_t>(index);
  ah_attr->grh.flow_label = flow & 0xfffff;
  ah_attr->grh.hop_limit = 0xff;
  ah_attr->grh.traffic_class = static_cast<uint8_t>((flow >> 20) & 0xff);
  return 0;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  if (pd == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_ah_attr attr;
  int err = ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr);
  if (err != 0) {
    errno = err;
    return nullptr;
  }
  return ibv_create_ah(pd, &attr);
}

// The sysfs mount point: $SYSFS_PATH without trailing slashes, else "/sys".
const char* ibv_get_sysfs_path(void) {
  static const char* const path = [] {
    const char* env = getenv("SYSFS_PATH");
    if (env == nullptr || env[0] == '\0') return static_cast<const char*>("/sys");
    char* copy = strdup(env);
    if (copy == nullptr) return static_cast<const char*>("/sys");
    size_t n = strlen(copy);
    while (n > 1 && copy[n - 1] == '/') copy[--n] = '\0';
    return static_cast<const char*>(copy);
  }();
  return path;
}

}  // extern "C"

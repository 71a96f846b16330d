/* `dpdk-sys` C shim: out-of-line versions of DPDK's static-inline fast path, macros and
 * thread-local variables, which bindgen cannot bind. Implemented in shim.c. */
#ifndef DPDK_SYS_SHIM_H
#define DPDK_SYS_SHIM_H

#include <stdint.h>

struct rte_mbuf;
struct rte_mempool;

/* ethdev fast path */
uint16_t dpdk_shim_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts,
                            uint16_t nb_pkts);
uint16_t dpdk_shim_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
                            uint16_t nb_pkts);
uint16_t dpdk_shim_tx_prepare(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
                              uint16_t nb_pkts);

/* mbuf allocation */
struct rte_mbuf *dpdk_shim_pktmbuf_alloc(struct rte_mempool *mp);
int dpdk_shim_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs,
                                 unsigned int count);
void dpdk_shim_pktmbuf_free(struct rte_mbuf *m);
void dpdk_shim_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int count);
/* Frees `count` mbufs: one mempool put when every one is direct, unchained, of reference
 * count 1 and of one pool (what rte_pktmbuf_free would do to each, without its per-mbuf
 * checks and resets), rte_pktmbuf_free_bulk otherwise. */
void dpdk_shim_pktmbuf_free_burst(struct rte_mbuf **mbufs, unsigned int count);

/* mbuf data access */
void *dpdk_shim_pktmbuf_mtod(struct rte_mbuf *m);
uint16_t dpdk_shim_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t dpdk_shim_pktmbuf_pkt_len(const struct rte_mbuf *m);
uint16_t dpdk_shim_pktmbuf_nb_segs(const struct rte_mbuf *m);
void dpdk_shim_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len);
uint16_t dpdk_shim_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t dpdk_shim_pktmbuf_tailroom(const struct rte_mbuf *m);
char *dpdk_shim_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
char *dpdk_shim_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
char *dpdk_shim_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int dpdk_shim_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
struct rte_mempool *dpdk_shim_pktmbuf_pool(const struct rte_mbuf *m);
/* A slab of `n` shared-info records for external buffers, each given back by DPDK's free
 * callback and reused once reaped (`release(ctx, token)` run, by `dpdk_shim_ext_slab_reap`
 * or when the slab runs out; not after the slab was closed); not thread-safe: the mbufs
 * attached from one slab are freed on the thread that attached them. NULL when `n` is 0 or
 * no memory is left. */
struct dpdk_shim_ext_slab;
struct dpdk_shim_ext_slab *dpdk_shim_ext_slab_new(uint32_t n,
                                                  void (*release)(void *ctx, uint64_t token),
                                                  void *ctx);
/* An mbuf of `mp` whose data are the `len` octets at `addr`, memory outside DPDK's
 * (attached as an external buffer, its IOVA the address: only for drivers that read frames
 * by virtual address), its shared info a record of `s`. `release(ctx, token)` runs once the
 * last mbuf attached to it was freed and the record reaped. NULL when the pool is empty or
 * every record of the slab is in use (counted as exhausted). */
struct rte_mbuf *dpdk_shim_pktmbuf_external(struct rte_mempool *mp,
                                            struct dpdk_shim_ext_slab *s, void *addr,
                                            uint16_t len, uint64_t token);
/* Releases the payloads of the records DPDK gave back since the last reap. */
void dpdk_shim_ext_slab_reap(struct dpdk_shim_ext_slab *s);
/* Records given back so far, attachments refused for want of a record, records in use
 * (attached, or given back and not yet reaped). */
void dpdk_shim_ext_slab_counts(const struct dpdk_shim_ext_slab *s, uint64_t *returned,
                               uint64_t *exhausted, uint32_t *outstanding);
/* Releases what was given back, then frees the slab now, or once its last record in use
 * comes back (without releasing those). */
void dpdk_shim_ext_slab_close(struct dpdk_shim_ext_slab *s);

/* ethdev offload bits (RTE_BIT64 macros) */
uint64_t dpdk_shim_rx_offload_vlan_strip(void);
uint64_t dpdk_shim_tx_offload_vlan_insert(void);
/* Checksum, TSO and segment offload bits: `which` 0 IPv4 checksum, 1 TCP checksum, 2 TCP
 * TSO (rx: LRO), 3 multi-segment transmit (rx: scatter); 0 for any other value. */
uint64_t dpdk_shim_tx_offload_bits(int which);
uint64_t dpdk_shim_rx_offload_bits(int which);
/* ORs `ol_flags` into the mbuf's flags and sets its header lengths and TSO segment size. */
void dpdk_shim_mbuf_set_tx_offload(struct rte_mbuf *m, uint64_t ol_flags, uint16_t l2_len,
                                   uint16_t l3_len, uint16_t l4_len, uint16_t tso_segsz);
/* RSS hash types of TCP over IPv4 and IPv6 (RTE_ETH_RSS_* bits) */
uint64_t dpdk_shim_rss_hf_tcp(void);

/* mempool */
unsigned int dpdk_shim_mempool_avail_count(const struct rte_mempool *mp);
unsigned int dpdk_shim_mempool_size(const struct rte_mempool *mp);

/* EAL */
int dpdk_shim_errno(void);
unsigned int dpdk_shim_lcore_id(void);
int dpdk_shim_socket_id_any(void);
uint64_t dpdk_shim_rdtsc(void);
uint16_t dpdk_shim_pktmbuf_headroom_default(void);

#endif

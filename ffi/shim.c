/* `dpdk-sys` C shim: see shim.h. Each function forwards to one DPDK static-inline
 * function, macro or thread-local, so the Rust side links against real symbols. */
#include <rte_config.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_cycles.h>
#include <rte_memory.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ethdev.h>

#include <stdlib.h>

#include "shim.h"

uint16_t dpdk_shim_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts,
                            uint16_t nb_pkts)
{
	return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t dpdk_shim_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
                            uint16_t nb_pkts)
{
	return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}

uint16_t dpdk_shim_tx_prepare(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
                              uint16_t nb_pkts)
{
	return rte_eth_tx_prepare(port_id, queue_id, tx_pkts, nb_pkts);
}

struct rte_mbuf *dpdk_shim_pktmbuf_alloc(struct rte_mempool *mp)
{
	return rte_pktmbuf_alloc(mp);
}

int dpdk_shim_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs,
                                 unsigned int count)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}

void dpdk_shim_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

void dpdk_shim_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int count)
{
	rte_pktmbuf_free_bulk(mbufs, count);
}

void dpdk_shim_pktmbuf_free_burst(struct rte_mbuf **mbufs, unsigned int count)
{
	struct rte_mempool *pool;
	unsigned int i;

	if (count == 0)
		return;
	pool = mbufs[0]->pool;
	for (i = 0; i < count; i++) {
		const struct rte_mbuf *m = mbufs[i];

		if (m->pool != pool || m->nb_segs != 1 || m->next != NULL ||
		    !RTE_MBUF_DIRECT(m) || rte_mbuf_refcnt_read(m) != 1) {
			rte_pktmbuf_free_bulk(mbufs, count);
			return;
		}
	}
	/* What rte_pktmbuf_prefree_seg would leave of each: already so. */
	rte_mempool_put_bulk(pool, (void **)mbufs, count);
}

void *dpdk_shim_pktmbuf_mtod(struct rte_mbuf *m)
{
	return rte_pktmbuf_mtod(m, void *);
}

uint16_t dpdk_shim_pktmbuf_data_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_data_len(m);
}

uint32_t dpdk_shim_pktmbuf_pkt_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_pkt_len(m);
}

uint16_t dpdk_shim_pktmbuf_nb_segs(const struct rte_mbuf *m)
{
	return m->nb_segs;
}

void dpdk_shim_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len)
{
	m->data_len = len;
	m->pkt_len = len;
}

uint16_t dpdk_shim_pktmbuf_headroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_headroom(m);
}

uint16_t dpdk_shim_pktmbuf_tailroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_tailroom(m);
}

char *dpdk_shim_pktmbuf_append(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_append(m, len);
}

char *dpdk_shim_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_prepend(m, len);
}

char *dpdk_shim_pktmbuf_adj(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_adj(m, len);
}

int dpdk_shim_pktmbuf_trim(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_trim(m, len);
}

struct rte_mempool *dpdk_shim_pktmbuf_pool(const struct rte_mbuf *m)
{
	return m->pool;
}

/* The shared info of one external buffer, with the caller's release callback. */
struct dpdk_shim_ext {
	struct rte_mbuf_ext_shared_info shinfo;
	void (*release)(void *opaque);
	void *opaque;
};

static void dpdk_shim_ext_free(void *addr, void *opaque)
{
	struct dpdk_shim_ext *e = opaque;

	(void)addr;
	e->release(e->opaque);
	free(e);
}

struct rte_mbuf *dpdk_shim_pktmbuf_external(struct rte_mempool *mp, void *addr, uint16_t len,
                                            void (*release)(void *opaque), void *opaque)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(mp);
	struct dpdk_shim_ext *e;

	if (m == NULL)
		return NULL;
	e = malloc(sizeof(*e));
	if (e == NULL) {
		rte_pktmbuf_free(m);
		return NULL;
	}
	e->shinfo.free_cb = dpdk_shim_ext_free;
	e->shinfo.fcb_opaque = e;
	rte_mbuf_ext_refcnt_set(&e->shinfo, 1);
	e->release = release;
	e->opaque = opaque;
	rte_pktmbuf_attach_extbuf(m, addr, (rte_iova_t)(uintptr_t)addr, len, &e->shinfo);
	m->data_len = len;
	m->pkt_len = len;
	return m;
}

uint64_t dpdk_shim_rx_offload_vlan_strip(void)
{
	return RTE_ETH_RX_OFFLOAD_VLAN_STRIP;
}

uint64_t dpdk_shim_tx_offload_vlan_insert(void)
{
	return RTE_ETH_TX_OFFLOAD_VLAN_INSERT;
}

uint64_t dpdk_shim_tx_offload_bits(int which)
{
	switch (which) {
	case 0: return RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
	case 1: return RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
	case 2: return RTE_ETH_TX_OFFLOAD_TCP_TSO;
	case 3: return RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
	default: return 0;
	}
}

uint64_t dpdk_shim_rx_offload_bits(int which)
{
	switch (which) {
	case 0: return RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
	case 1: return RTE_ETH_RX_OFFLOAD_TCP_CKSUM;
	case 2: return RTE_ETH_RX_OFFLOAD_TCP_LRO;
	case 3: return RTE_ETH_RX_OFFLOAD_SCATTER;
	default: return 0;
	}
}

void dpdk_shim_mbuf_set_tx_offload(struct rte_mbuf *m, uint64_t ol_flags, uint16_t l2_len,
                                   uint16_t l3_len, uint16_t l4_len, uint16_t tso_segsz)
{
	m->ol_flags |= ol_flags;
	m->l2_len = l2_len;
	m->l3_len = l3_len;
	m->l4_len = l4_len;
	m->tso_segsz = tso_segsz;
}

uint64_t dpdk_shim_rss_hf_tcp(void)
{
	return RTE_ETH_RSS_IPV4 | RTE_ETH_RSS_NONFRAG_IPV4_TCP | RTE_ETH_RSS_IPV6 |
	       RTE_ETH_RSS_NONFRAG_IPV6_TCP;
}

unsigned int dpdk_shim_mempool_avail_count(const struct rte_mempool *mp)
{
	return rte_mempool_avail_count(mp);
}

unsigned int dpdk_shim_mempool_size(const struct rte_mempool *mp)
{
	return mp->size;
}

int dpdk_shim_errno(void)
{
	return rte_errno;
}

unsigned int dpdk_shim_lcore_id(void)
{
	return rte_lcore_id();
}

int dpdk_shim_socket_id_any(void)
{
	return SOCKET_ID_ANY;
}

uint64_t dpdk_shim_rdtsc(void)
{
	return rte_rdtsc();
}

uint16_t dpdk_shim_pktmbuf_headroom_default(void)
{
	return RTE_PKTMBUF_HEADROOM;
}

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

/* The shared info of one external buffer, with the caller's release callback; a record of
 * its slab, on the slab's free list while no mbuf holds it, on its list of records to reap
 * between DPDK's free callback and the release. */
struct dpdk_shim_ext {
	struct rte_mbuf_ext_shared_info shinfo;
	struct dpdk_shim_ext_slab *slab;
	uint64_t token;
	struct dpdk_shim_ext *next_free;
};

struct dpdk_shim_ext_slab {
	void (*release)(void *ctx, uint64_t token);
	void *ctx;
	struct dpdk_shim_ext *free;
	struct dpdk_shim_ext *to_reap;
	uint32_t outstanding;
	int closed;
	uint64_t returned;
	uint64_t exhausted;
	struct dpdk_shim_ext recs[];
};

struct dpdk_shim_ext_slab *dpdk_shim_ext_slab_new(uint32_t n,
                                                  void (*release)(void *ctx, uint64_t token),
                                                  void *ctx)
{
	struct dpdk_shim_ext_slab *s;
	uint32_t i;

	if (n == 0)
		return NULL;
	s = calloc(1, sizeof(*s) + (size_t)n * sizeof(struct dpdk_shim_ext));
	if (s == NULL)
		return NULL;
	s->release = release;
	s->ctx = ctx;
	/* Linked so that the first record is handed out first. */
	for (i = n; i > 0; i--) {
		s->recs[i - 1].slab = s;
		s->recs[i - 1].next_free = s->free;
		s->free = &s->recs[i - 1];
	}
	return s;
}

/* The caller's release (not once the slab was closed), then the record back on its slab's
 * free list (last in, first out, so the records in use stay few and cache-hot). */
static void dpdk_shim_ext_release(struct dpdk_shim_ext_slab *s, struct dpdk_shim_ext *e)
{
	if (!s->closed)
		s->release(s->ctx, e->token);
	e->next_free = s->free;
	s->free = e;
	s->outstanding--;
}

/* DPDK's free callback: the record goes on the list to reap (the release runs later, on
 * the port's turn, not inside the PMD's burst); freed at once when the slab was closed. */
static void dpdk_shim_ext_free(void *addr, void *opaque)
{
	struct dpdk_shim_ext *e = opaque;
	struct dpdk_shim_ext_slab *s = e->slab;

	(void)addr;
	s->returned++;
	if (s->closed) {
		dpdk_shim_ext_release(s, e);
		if (s->outstanding == 0)
			free(s);
		return;
	}
	e->next_free = s->to_reap;
	s->to_reap = e;
}

void dpdk_shim_ext_slab_reap(struct dpdk_shim_ext_slab *s)
{
	struct dpdk_shim_ext *e = s->to_reap;

	s->to_reap = NULL;
	while (e != NULL) {
		struct dpdk_shim_ext *next = e->next_free;

		dpdk_shim_ext_release(s, e);
		e = next;
	}
}

struct rte_mbuf *dpdk_shim_pktmbuf_external(struct rte_mempool *mp,
                                            struct dpdk_shim_ext_slab *s, void *addr,
                                            uint16_t len, uint64_t token)
{
	struct dpdk_shim_ext *e;
	struct rte_mbuf *m;

	if (s->free == NULL)
		dpdk_shim_ext_slab_reap(s);
	e = s->free;
	if (e == NULL) {
		s->exhausted++;
		return NULL;
	}
	m = rte_pktmbuf_alloc(mp);
	if (m == NULL)
		return NULL;
	s->free = e->next_free;
	s->outstanding++;
	e->shinfo.free_cb = dpdk_shim_ext_free;
	e->shinfo.fcb_opaque = e;
	rte_mbuf_ext_refcnt_set(&e->shinfo, 1);
	e->token = token;
	rte_pktmbuf_attach_extbuf(m, addr, (rte_iova_t)(uintptr_t)addr, len, &e->shinfo);
	m->data_len = len;
	m->pkt_len = len;
	return m;
}

void dpdk_shim_ext_slab_counts(const struct dpdk_shim_ext_slab *s, uint64_t *returned,
                               uint64_t *exhausted, uint32_t *outstanding)
{
	*returned = s->returned;
	*exhausted = s->exhausted;
	*outstanding = s->outstanding;
}

void dpdk_shim_ext_slab_close(struct dpdk_shim_ext_slab *s)
{
	dpdk_shim_ext_slab_reap(s);
	if (s->outstanding == 0)
		free(s);
	else
		s->closed = 1;
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

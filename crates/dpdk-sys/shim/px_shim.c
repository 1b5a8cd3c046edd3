#include "px_shim.h"

uint16_t px_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts, uint16_t nb_pkts)
{
	return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t px_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts, uint16_t nb_pkts)
{
	return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}

struct rte_mbuf *px_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }

int px_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int count)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}

void px_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }

void px_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int count) { rte_pktmbuf_free_bulk(mbufs, count); }

int px_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail) { return rte_pktmbuf_chain(head, tail); }

char *px_pktmbuf_adj(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_adj(m, len); }

int px_pktmbuf_trim(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_trim(m, len); }


char *px_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }

uint16_t px_pktmbuf_headroom(const struct rte_mbuf *m) { return rte_pktmbuf_headroom(m); }

uint16_t px_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }

void px_pktmbuf_reset(struct rte_mbuf *m) { rte_pktmbuf_reset(m); }

uint16_t px_mbuf_refcnt_read(const struct rte_mbuf *m) { return rte_mbuf_refcnt_read(m); }

uint16_t px_mbuf_refcnt_update(struct rte_mbuf *m, int16_t value) { return rte_mbuf_refcnt_update(m, value); }

void px_pktmbuf_attach(struct rte_mbuf *mi, struct rte_mbuf *m) { rte_pktmbuf_attach(mi, m); }

void px_pktmbuf_detach(struct rte_mbuf *m) { rte_pktmbuf_detach(m); }

int px_mbuf_is_direct(const struct rte_mbuf *m) { return RTE_MBUF_DIRECT(m); }

int px_net_intel_cksum_prepare(struct rte_mbuf *m) { return rte_net_intel_cksum_prepare(m); }

int px_errno(void) { return rte_errno; }

unsigned int px_lcore_id(void) { return rte_lcore_id(); }

uint64_t px_rdtsc(void) { return rte_rdtsc(); }

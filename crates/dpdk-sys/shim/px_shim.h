/* Thin exported wrappers over DPDK's `static inline` API, which bindgen cannot link to.
 * Every function here is a one-line call to the DPDK function of the same name without
 * the `px_` prefix; the semantics, including ownership, are DPDK's. */
#ifndef PX_SHIM_H
#define PX_SHIM_H

#include <rte_config.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_net.h>

uint16_t px_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts, uint16_t nb_pkts);
uint16_t px_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts, uint16_t nb_pkts);

struct rte_mbuf *px_pktmbuf_alloc(struct rte_mempool *mp);
int px_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int count);
void px_pktmbuf_free(struct rte_mbuf *m);
void px_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int count);
int px_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail);

char *px_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int px_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
char *px_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
uint16_t px_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t px_pktmbuf_tailroom(const struct rte_mbuf *m);
void px_pktmbuf_reset(struct rte_mbuf *m);

uint16_t px_mbuf_refcnt_read(const struct rte_mbuf *m);
uint16_t px_mbuf_refcnt_update(struct rte_mbuf *m, int16_t value);
void px_pktmbuf_attach(struct rte_mbuf *mi, struct rte_mbuf *m);
void px_pktmbuf_detach(struct rte_mbuf *m);
/* Non-zero when `m` owns its data buffer (not indirect, not external). */
int px_mbuf_is_direct(const struct rte_mbuf *m);

/* The pseudo-header checksums and zeroed IPv4 checksum a NIC's checksum and TSO offloads need,
 * as `ol_flags` asks for them (what rte_eth_tx_prepare does for Intel PMDs). */
int px_net_intel_cksum_prepare(struct rte_mbuf *m);

int px_errno(void);
unsigned int px_lcore_id(void);
uint64_t px_rdtsc(void);

#endif

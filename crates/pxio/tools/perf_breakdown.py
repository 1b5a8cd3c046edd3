#!/usr/bin/env python3
"""Per-packet cost breakdown of the merge engine from `perf script` output (docs/benchmarks.md,
"Profiling the merge engine").

    perf record -e cpu-clock -F 10000 --call-graph dwarf,8192 -o perf.data \
        target/release/merge --flows 800 --schedule poisson-tso --reps 10 --profile-pxio
    perf script -i perf.data -F ip,sym > nic.txt
    python3 crates/pxio/tools/perf_breakdown.py nic.txt 68.0   # its ns/pkt, from a run without perf

Only samples inside pxio's timed region (`pxio_engine::run_once::{{closure}}`) count; each is
given to the step of its innermost frame that matches one (leaf first, inlined frames
included), and its share times the run's ns/pkt is that step's cost per input packet.
"""
import sys, re, collections
cats = [
 ('mbuf alloc/free', r'px_pktmbuf_free|px_pktmbuf_alloc|rte_pktmbuf|rte_mempool|Mbuf as core::ops::drop::Drop|mempool::Mempool::alloc'),
 ('classify (parse)', r'wire::classify|plain_ipv4_tcp|Parsed::of|parse_into|classify_general|classify_l4|classify_ipv4|classify_frame'),
 ('hash (Toeplitz / key_hash)', r'key_hash|toeplitz|Merger<B>>?::hash'),
 ('grouping the burst', r'group_by_flow'),
 ('flow lookup', r'FlowTable::lookup|FlowTable::find|FlowTable::warm|flow_for|recent_flow|FlowTable::claim'),
 ('checksum (IPv4 header, TCP verify)', r'of_20|verify_checksum|range_sum|checksum::Sum::of|sums_equal|pseudo_header|covered_sum'),
 ('segment fields and checks', r'segment::<impl|::segment \(|Layout::of'),
 ('signature compare', r'compatible|MergeSig::matches|short_eq|sig_bytes'),
 ('chain append', r'join_segment|PacketChain>::append|Mbuf::append|MbufChain::append|link_after|append_chain|::prepend|try_join'),
 ('cut (rest header, indirect view)', r'::remainder|cut_sums|share_range|alloc_with|px_pktmbuf_attach|extend_from_slice|::truncate'),
 ('new item', r'insert_item|MergeSig::set|MergeSig::of|alloc_item'),
 ('emit (headers, yield)', r'emit_head|finalize|emit_through|emit_if_done|flush_flow|privatize_head|update_yield|free_item|into_packet|::pass\b|emit_raw'),
 ('delay histogram', r'hdrhistogram|record_delay|flush_delay_record'),
 ('rate model', r'update_flow_on_arrival|update_rate|note_arrival'),
 ('run path (masked compare, join)', r'RunMask|try_extend_tail|extend_run|open_run|admits|join_run|close_run'),
 ('settle and poll (ETM)', r'settle_flow|Merger<B>::settle|::poll|BinaryHeap|schedule|etm_ns|next_deadline'),
 ('placing (item walk, overlap)', r'place::<impl pxio::merge::Merger<B>>::merge'),
 ('burst loop / rx_tcp / rx', r'rx_burst|merge_chunk|rx_tcp|Merger<B>::rx\b|rx_parsed|touch'),
]
def run(path, ns):
    blocks = open(path).read().split('\n\n')
    cnt = collections.Counter(); total = 0
    for b in blocks:
        frames = [l.strip() for l in b.strip().split('\n') if l.strip()]
        if not any('pxio_engine::run_once::{{closure}}' in f for f in frames):
            continue
        total += 1
        cat = 'other'
        for f in frames:
            f = re.sub(r'^[0-9a-f]+ ', '', f)
            if 'pxio_engine::run_once' in f: break
            hit = next((c for c, p in cats if re.search(p, f)), None)
            if hit: cat = hit; break
        cnt[cat] += 1
    print(f'{path}: {total} samples in the timed region, {ns} ns/pkt')
    for c, _ in cats + [('other', '')]:
        if cnt[c]: print(f'  {c:40s} {100*cnt[c]/total:5.1f} %  {ns*cnt[c]/total:5.1f} ns')
for path, ns in zip(sys.argv[1::2], sys.argv[2::2]):
    run(path, float(ns))

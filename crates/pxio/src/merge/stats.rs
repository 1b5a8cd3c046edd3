//! What the engine counts: packets in and out, merges and cuts, and the two measures SIGCOMM'26
//! §7.1 reports for merging, the conversion yield and the added delay (§4.1, Appendix A).

use hdrhistogram::Histogram;

/// Counters of what the engine did. `packets_in` counts every packet handed to
/// [`Merger::rx`](super::Merger::rx); `packets_out` every packet it gave back.
#[derive(Clone, Debug)]
pub struct MergeStats {
    /// Packets received.
    pub packets_in: u64,
    /// Packets emitted (merged or passed through).
    pub packets_out: u64,
    /// TCP payload bytes that entered items.
    pub payload_in: u64,
    /// TCP payload bytes that left in iMTU-bound packets.
    pub payload_full: u64,
    /// Segments that joined another (append, prepend or gap-fill).
    pub merges: u64,
    /// Of [`merges`](Self::merges), the segments that joined their flow's item on the run path
    /// (a segment continuing its flow's only item with the NIC's checksum verdicts: one masked
    /// header compare, see `merge::run`).
    pub run_merges: u64,
    /// Of [`run_merges`](Self::run_merges), the segments that joined before they were parsed:
    /// the fast path of [`Merger::rx_burst`](super::Merger::rx_burst), found by the NIC's RSS
    /// hash (see `merge::fast`).
    pub fast_merges: u64,
    /// Segments cut at the iMTU boundary, their rest held by a refcounted view.
    pub cuts: u64,
    /// Packets passed through without merging (not TCP data, or not eligible).
    pub passthrough: u64,
    /// Malformed packets (passed through untouched, never merged).
    pub malformed: u64,
    /// TCP segments whose checksum did not verify (by the NIC's verdict, or in software): passed
    /// through untouched, never merged, for the receiver to drop.
    pub bad_checksum: u64,
    /// Merged packets dropped because no buffer was left to rewrite their shared headers (the
    /// engine's only drop: the packet would be wrong on the wire).
    pub dropped_no_buffer: u64,
    /// IPv4 TCP packets whose header checksum did not verify: passed through untouched, never
    /// merged, for the receiver to drop.
    pub bad_ip_checksum: u64,
    /// Flows evicted from a full bucket (their items were flushed).
    pub evictions: u64,
    /// Items that waited for an ETM window.
    pub delayed_items: u64,
    /// Items currently held.
    pub held_items: u64,
    /// Added delay per input segment, ns (each item records its mean wait once per segment).
    pub delay_ns: Histogram<u64>,
    /// Longest any segment was held, ns.
    pub max_hold_ns: u64,
}

impl MergeStats {
    pub(super) fn new() -> Self {
        Self {
            packets_in: 0,
            packets_out: 0,
            payload_in: 0,
            payload_full: 0,
            merges: 0,
            run_merges: 0,
            fast_merges: 0,
            cuts: 0,
            passthrough: 0,
            malformed: 0,
            bad_checksum: 0,
            dropped_no_buffer: 0,
            bad_ip_checksum: 0,
            evictions: 0,
            delayed_items: 0,
            held_items: 0,
            delay_ns: Histogram::new_with_bounds(1, 60_000_000_000, 2)
                .expect("static histogram bounds are valid"),
            max_hold_ns: 0,
        }
    }

    /// Share of merged payload bytes that left in iMTU-bound packets.
    pub fn conversion_yield(&self) -> f64 {
        if self.payload_in == 0 {
            0.0
        } else {
            self.payload_full as f64 / self.payload_in as f64
        }
    }
}

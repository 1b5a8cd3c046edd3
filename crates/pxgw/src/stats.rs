//! What the gateway did, per direction, for the periodic table, the final summary,
//! `--stats-json`, Prometheus and `/pxgw/stats`; and what its ports did ([`PortCounters`]), so
//! no frame is lost out of sight (a full RX ring shows as `imissed`, a refused transmission as
//! `tx_dropped`).
//!
//! **Every counter is declared once**, below, with `group!` (`stats::counters`): its field (and
//! JSON key), its doc comment (which is its help text), how it adds up over workers, its
//! Prometheus family and its `/pxgw/stats` name. Merging the workers' reports, the JSON,
//! Prometheus, `/pxgw/stats` and the counter table of `docs/operations.md` (checked by
//! `tests/counters_docs.rs`) all walk that one list ([`Report::visit`]).

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::pmtud::DiscoveredPath;

pub mod counters;
mod load;
mod table;

use counters::{group, Desc, Group, Member, Value};
pub use load::LoadMeter;
pub use table::{Sample, Table};

group! {
    /// Packet and byte counts of one direction.
    #[derive(Eq)]
    pub struct Direction {
        /// Frames received on the port this direction starts at.
        packets_in: counter => "pxgw_received_packets" { port: from }
            help "Frames a worker received, by port.", tm "{}_packets_in";
        /// Bytes of the frames received on the port this direction starts at (Ethernet frames).
        bytes_in: counter => "pxgw_received_bytes" { port: from }
            help "Bytes of the frames a worker received, by port.", tm "{}_bytes_in";
        /// Frames the driver of the port this direction ends at took (`rte_eth_tx_burst`'s
        /// count); frames it kept refusing are in `drops.tx_dropped`, never here.
        packets_out: counter => "pxgw_sent_packets" { port: to }
            help "Frames a worker handed to a port's driver, by port.", tm "{}_packets_out";
        /// Bytes of the frames the driver of the port this direction ends at took.
        bytes_out: counter => "pxgw_sent_bytes" { port: to }
            help "Bytes of the frames a worker handed to a port's driver, by port.", tm "{}_bytes_out";
        /// Largest frame the driver of the port this direction ends at took, bytes.
        max_frame_out: max => "pxgw_sent_frame_max_bytes" { port: to }
            help "Largest frame a worker handed to a port's driver, by port.";
    }
}

group! {
    /// Drops, by reason. Every packet the gateway received is either sent or counted here.
    #[derive(Eq)]
    pub struct Drops {
        /// Frames the TX queue kept refusing (the driver never took them), then freed.
        tx_dropped: counter => "pxgw_drops" { reason: field }
            help "Frames dropped, by reason (every frame is sent or counted here).";
        /// Larger than the external MTU and not splittable (non-TCP).
        oversize: counter => "pxgw_drops" { reason: field };
        /// A TCP packet that could not be split (no buffer, bad checksum, MTU too small).
        split_failed: counter => "pxgw_drops" { reason: field };
        /// A caravan from inside that was malformed.
        caravan_malformed: counter => "pxgw_drops" { reason: field };
        /// No buffer to build a caravan or a header.
        pool_exhausted: counter => "pxgw_drops" { reason: field };
        /// Inbound packets larger than the internal MTU that could not be fragmented (DF set,
        /// IPv6, not IP): dropped, and answered with ICMP as a router would (`inbound_oversize`).
        oversize_inbound: counter => "pxgw_drops" { reason: field };
        /// Merged packets the merge engine dropped because no buffer was left to rewrite their
        /// shared headers.
        merge_no_buffer: counter => "pxgw_drops" { reason: field };
        /// Inbound frames that wore the caravan mark (or may have) and could not be rewritten
        /// without it (shared data, or a first buffer too short for the IP header's first bytes).
        mark_uncleared: counter => "pxgw_drops" { reason: field };
        /// Coalesced inbound TCP packets (LRO, GRO) dropped: a checksum that fails (checked
        /// before a cut, and before one is passed on whole for fresh checksums), or no buffer
        /// for a cut.
        coalesced_failed: counter => "pxgw_drops" { reason: field };
        /// IP packets whose header claims more bytes than the frame holds (or fewer than the
        /// header itself), dropped as Linux drops them (InTruncatedPkts): a frame cut short on
        /// the way, as `net_af_packet` cuts what the kernel coalesced past its ring frame.
        bad_ip_length: counter => "pxgw_drops" { reason: field };
    }
}

impl Drops {
    /// Each reason, named as in the JSON, with its count, in declaration order.
    pub fn by_reason(&self) -> Vec<(&'static str, u64)> {
        let mut v = Vec::with_capacity(Self::FIELDS.len());
        self.visit(&mut |d, value| {
            if let Value::Count(n) = value {
                v.push((d.field, n));
            }
        });
        v
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        let mut sum = 0;
        self.visit(&mut |_, value| {
            if let Value::Count(n) = value {
                sum += n;
            }
        });
        sum
    }
}

group! {
    /// Inbound packets larger than the internal MTU, handled as a router in front of the
    /// b-network would: IPv4 without DF fragmented to the iMTU, the rest dropped (counted in
    /// `drops.oversize_inbound`) and answered toward the outside sender.
    #[derive(Eq)]
    pub struct InboundOversize {
        /// IPv4 packets from outside with DF clear, fragmented to the iMTU.
        fragmented: counter => "pxgw_inbound_oversize_fragmented";
        /// Fragments made of IPv4 packets from outside.
        fragments_out: counter => "pxgw_inbound_oversize_fragments";
        /// ICMPv4 "fragmentation needed" (next-hop MTU = the iMTU) sent to outside senders.
        frag_needed_sent: counter => "pxgw_inbound_oversize_frag_needed_sent";
        /// ICMPv6 Packet Too Big (MTU = the iMTU) sent to outside senders.
        ptb_sent: counter => "pxgw_inbound_oversize_ptb_sent";
        /// Errors to outside senders held back by the rate limits (the packet was still dropped).
        icmp_rate_limited: counter => "pxgw_inbound_oversize_icmp_rate_limited";
        /// Errors to outside senders the rules forbid (an ICMP error, a non-initial fragment,
        /// multicast or broadcast, not IP) or that are turned off.
        icmp_suppressed: counter => "pxgw_inbound_oversize_icmp_suppressed";
    }
}

group! {
    /// Merge engine outcome (inbound TCP).
    pub struct MergeSummary {
        /// TCP payload bytes that went into merge items.
        payload_in: counter => "pxgw_merge_payload_bytes", tm "merge_payload_in";
        /// Of the TCP payload bytes that went into merge items, those that left in iMTU-bound
        /// packets.
        payload_full: counter => "pxgw_merge_full_payload_bytes", tm "merge_payload_full";
        /// Conversion yield: `payload_full / payload_in`, since the start (over an interval,
        /// divide the two counters' changes).
        conversion_yield: total_ratio => "pxgw_merge_yield_ratio", tm "yield_permille";
        /// Mean delay merging added per segment, µs.
        mean_delay_us: ratio;
        /// 99th percentile of the delay merging added per segment, µs.
        p99_delay_us: ratio;
        /// Segments merged into others.
        merges: counter => "pxgw_merges", tm "merges";
        /// Segments cut at the iMTU.
        cuts: counter => "pxgw_merge_cuts", tm "cuts";
        /// Merge items held right now.
        held_items: gauge => "pxgw_merge_held_items", tm "held_items";
        /// TCP segments whose checksum did not verify (the NIC's verdict, or software). They
        /// are passed through unmerged, for the receiver to drop, so this is not a drop.
        bad_checksum: counter => "pxgw_merge_bad_checksum";
        /// IPv4 segments whose header checksum did not verify: passed through unmerged, for the
        /// receiver to drop (not a drop either).
        bad_ip_checksum: counter => "pxgw_merge_bad_ip_checksum";
        /// Flows in the merge engine's flow table right now (its occupancy).
        flows: gauge => "pxgw_merge_flows", tm "merge_flows";
        /// Flows evicted from a full bucket of the flow table (their items were flushed).
        evictions: counter => "pxgw_merge_flow_evictions", tm "merge_evictions";
    }
}

group! {
    /// UDP caravans.
    #[derive(Eq)]
    pub struct CaravanSummary {
        /// Datagrams packed into caravans (inbound).
        datagrams_packed: counter => "pxgw_caravan_datagrams_packed";
        /// Caravans sent inside.
        caravans_built: counter => "pxgw_caravans_built", tm "caravans_built";
        /// Caravans from inside unpacked (outbound).
        caravans_unpacked: counter => "pxgw_caravans_unpacked", tm "caravans_unpacked";
        /// Datagrams the caravans from inside carried.
        datagrams_unpacked: counter => "pxgw_caravan_datagrams_unpacked";
        /// Inbound UDP passed unpacked: its family is not in `[caravan] families`.
        unpacked_family: counter => "pxgw_caravan_passed_unpacked" { reason: "family" }
            help "Inbound UDP passed unpacked, by reason.";
        /// Inbound UDP passed unpacked: double-tagged, or behind an 802.1ad tag.
        unpacked_vlan: counter => "pxgw_caravan_passed_unpacked" { reason: "vlan" };
        /// Inbound UDP passed unpacked: TTL or hop limit at most `[caravan] pass_ttl`.
        unpacked_low_ttl: counter => "pxgw_caravan_passed_unpacked" { reason: "low_ttl" };
        /// Outbound UDP wearing the caravan mark without a caravan header: ordinary datagrams,
        /// passed untouched (`docs/caravan.md`).
        marked_plain: counter => "pxgw_caravan_marked_plain";
        /// Outbound caravans of a version the gateway does not understand, passed untouched.
        unknown_version: counter => "pxgw_caravan_unknown_version";
        /// Inbound datagrams that nothing joined before their caravan would have left: sent
        /// inside as they came, since a caravan of one only adds 16 bytes (`docs/caravan.md`).
        unwrapped_single: counter => "pxgw_caravan_unwrapped_single";
        /// Caravans (or lone datagrams) sent inside before their time because every place for
        /// an open caravan was taken: the oldest leaves to make room for a new flow's.
        closed_early: counter => "pxgw_caravan_closed_early";
        /// Inbound packets that wore the caravan mark and had it cleared: the mark is the
        /// gateway's to give, so an outsider's pre-formed caravan reaches the inside as one
        /// ordinary datagram.
        mark_cleared: counter => "pxgw_caravan_mark_cleared";
    }
}

group! {
    /// Outbound TCP packets split to the path MTU in software (one packet in, `segments` out; a
    /// split the NIC does with TSO leaves pxgw as one packet and is not counted here).
    #[derive(Eq)]
    pub struct SplitSummary {
        /// Outbound TCP packets split to the path MTU in software.
        packets: counter => "pxgw_split_packets";
        /// Segments the software splits made.
        segments: counter => "pxgw_split_segments";
    }
}

group! {
    /// Coalesced TCP (the NIC's LRO, the kernel's GRO or a host's TSO): packets above the iMTU
    /// that are runs of segments; inbound cut at the iMTU and merged as segments are, outbound
    /// split to the path MTU. Never fragmented or answered with ICMP.
    #[derive(Eq)]
    pub struct Coalesced {
        /// Inbound TCP packets above the iMTU (coalesced by LRO or GRO), cut at it.
        inbound: counter => "pxgw_coalesced_inbound";
        /// Segments the coalesced packets were cut into.
        inbound_segments: counter => "pxgw_coalesced_inbound_segments";
        /// Outbound TCP packets above the iMTU (GRO on the inside port, or an inside host's TSO
        /// reaching pxgw whole), split to the path MTU (also counted in `split`).
        outbound: counter => "pxgw_coalesced_outbound";
    }
}

group! {
    /// Frames the gateway itself originates or consumes, which no port delivered for forwarding
    /// or no forwarded frame became (F-PMTUD probes and answers; reports to its own probes).
    #[derive(Eq)]
    pub struct GatewayFrames {
        /// Frames the gateway built and handed to the outside port's queue (F-PMTUD probes,
        /// answers).
        sent: counter => "pxgw_gateway_frames_sent";
        /// Frames from outside addressed to the gateway itself, consumed (reports to its
        /// probes).
        received: counter => "pxgw_gateway_frames_received";
    }
}

group! {
    /// Handshakes and the connection table.
    #[derive(Eq)]
    pub struct MssSummary {
        /// SYN and SYN-ACK segments seen.
        handshakes: counter => "pxgw_mss_handshakes";
        /// SYN and SYN-ACK segments whose MSS option was rewritten.
        rewritten: counter => "pxgw_mss_rewrites", tm "mss_rewrites";
        /// SYN and SYN-ACK segments without an MSS option.
        without_mss: counter => "pxgw_mss_without_option";
        /// Established connections evicted, least recently seen first, to make room for newer
        /// ones (the table never refuses one).
        established_evicted: counter => "pxgw_connections_evicted";
        /// Outside SYN and SYN-ACK segments whose MSS was below the floor (`[mss] min`,
        /// `min_v6`): not raised, so the inside host segments for itself.
        below_floor: counter => "pxgw_mss_below_floor";
        /// SYN and SYN-ACK segments on an established connection that changed nothing (RFC 5961
        /// §4): a spoofed or stale one, or a new incarnation the inside host did not accept.
        syn_ignored: counter => "pxgw_syn_ignored";
        /// Half-open connections held now (a SYN seen, the handshake not completed).
        half_open: gauge => "pxgw_connections_half_open";
        /// Half-open connections evicted to make room for newer ones (a SYN flood shows here).
        half_open_evicted: counter => "pxgw_connections_half_open_evicted";
        /// Connections learned from their data, their handshake unseen (after a restart).
        learned: counter => "pxgw_connections_learned";
        /// Connections learned from one direction only (`[connections] one_way`: behind ECMP).
        learned_one_way: counter => "pxgw_connections_learned_one_way";
    }
}

group! {
    /// F-PMTUD: the gateway's own probing, and its answers to probes from outside.
    #[derive(Eq)]
    pub struct PmtudSummary {
        /// Destinations F-PMTUD probed.
        probed: counter => "pxgw_pmtud_destinations_probed";
        /// F-PMTUD probes sent.
        probes_sent: counter => "pxgw_pmtud_probes_sent", tm "pmtud_probes_sent";
        /// F-PMTUD rounds that ended with a report (an answer).
        discovered: counter => "pxgw_pmtud_answers", tm "pmtud_answers";
        /// F-PMTUD rounds that fell back (no report in time).
        fallbacks: counter => "pxgw_pmtud_fallbacks", tm "pmtud_fallbacks";
        /// Lowered path MTUs in the cache now.
        cached: gauge => "pxgw_pmtud_cached";
        /// F-PMTUD probes from outside that the gateway answered.
        answered: counter => "pxgw_pmtud_probes_answered";
        /// IPv4 fragments received from outside (each shown to the responder, and forwarded).
        /// A probe fragmented on its way counts every fragment: this is how a port that
        /// reassembles fragments before pxgw (DPDK's `net_af_packet`) shows, as 0.
        fragments_in: counter => "pxgw_pmtud_fragments_received";
        /// Lowered path MTUs forgotten after `pmtu.expire_s` (the destination is back at the
        /// eMTU).
        expired: counter => "pxgw_pmtud_expired";
        /// F-PMTUD probes from outside not answered: their source exceeded its rate.
        respond_source_limited: counter => "pxgw_pmtud_respond_source_limited";
        /// F-PMTUD probes from outside not answered: all sources together exceeded
        /// `pmtu.respond_per_sec`.
        respond_global_limited: counter => "pxgw_pmtud_respond_global_limited";
    }
}

group! {
    /// What the gateway did as a router: errors sent, fragments made, path MTUs learned.
    #[derive(Eq)]
    pub struct RouterSummary {
        /// ICMPv4 "fragmentation needed" sent to inside hosts.
        frag_needed_sent: counter => "pxgw_router_frag_needed_sent";
        /// ICMPv6 Packet Too Big sent to inside hosts.
        ptb_sent: counter => "pxgw_router_ptb_sent";
        /// Errors to inside hosts not sent because of the rate limits (the packet was still
        /// dropped).
        icmp_rate_limited: counter => "pxgw_router_icmp_rate_limited";
        /// Errors to inside hosts not sent because the rules forbid one (an ICMP error, a
        /// non-initial fragment, a multicast or broadcast address) or they are turned off.
        icmp_suppressed: counter => "pxgw_router_icmp_suppressed";
        /// IPv4 packets from inside with DF clear fragmented to the external MTU.
        fragmented: counter => "pxgw_router_fragmented";
        /// Fragments made of IPv4 packets from inside.
        fragments_out: counter => "pxgw_router_fragments";
        /// IPv4 packets from inside with DF clear that could not be fragmented (bad options, no
        /// buffer).
        fragment_failed: counter => "pxgw_router_fragment_failed";
        /// Packet Too Big / "fragmentation needed" from outside that capped a destination's
        /// split size.
        ptb_learned: counter => "pxgw_ptb_learned";
        /// IPv6 destinations whose split size fell back to `pmtu.blackhole_mtu` after a black
        /// hole.
        blackhole_fallbacks: counter => "pxgw_pmtu_blackhole_fallbacks";
        /// ICMP errors answering the gateway's own F-PMTUD probes, consumed (never forwarded).
        probe_errors_consumed: counter => "pxgw_router_probe_errors_consumed";
        /// Packet Too Big / "fragmentation needed" quoting a TCP sequence number the inside host
        /// does not have in flight (RFC 5927 §4.1): not learned (still forwarded).
        ptb_out_of_window: counter => "pxgw_ptb_out_of_window";
        /// Packet Too Big / "fragmentation needed" with an MTU below the floor (IPv6's 1280, or
        /// the MSS floor's): not learned (still forwarded).
        ptb_below_floor: counter => "pxgw_ptb_below_floor";
        /// Packet Too Big / "fragmentation needed" quoting a TCP connection this instance does
        /// not know: not learned (still forwarded).
        ptb_unknown: counter => "pxgw_ptb_unknown";
    }
}

group! {
    /// Frame sizes where they cross the gateway: received and sent, per direction. The inbound
    /// pair is the picture of the translation (small frames outside, iMTU-sized inside).
    #[derive(Eq)]
    pub struct FrameSizes {
        /// Frames received from outside (the outside wire).
        inbound_received: sizes => "pxgw_frame_size_bytes" { direction: "inbound", side: "received" }
            help "Frame sizes received and sent (Ethernet, without FCS), per direction.";
        /// Frames sent inside (the inside wire).
        inbound_sent: sizes => "pxgw_frame_size_bytes" { direction: "inbound", side: "sent" };
        /// Frames received from inside.
        outbound_received: sizes => "pxgw_frame_size_bytes" { direction: "outbound", side: "received" };
        /// Frames sent outside.
        outbound_sent: sizes => "pxgw_frame_size_bytes" { direction: "outbound", side: "sent" };
    }
}

group! {
    /// A worker's load, measured with the TSC around its polling loop ([`LoadMeter`]): a poll
    /// that received or sent anything is work, any other poll (and a nap after it) is idle.
    /// Counts since the start, and the same over the last second (`recent_…`), from which the
    /// ratios are taken.
    pub struct WorkerLoad {
        /// Polls that received or sent something.
        busy_polls: counter => "pxgw_worker_busy_polls";
        /// Polls that found nothing to do.
        idle_polls: counter => "pxgw_worker_idle_polls";
        /// TSC cycles spent in polls that received or sent something.
        busy_cycles: counter => "pxgw_worker_busy_cycles";
        /// TSC cycles spent in idle polls and naps.
        idle_cycles: counter => "pxgw_worker_idle_cycles";
        /// The TSC's frequency, Hz (cycles per second).
        tsc_hz: max => "pxgw_worker_tsc_hz";
        /// Busy polls in the last second.
        recent_busy_polls: gauge;
        /// Idle polls in the last second.
        recent_idle_polls: gauge;
        /// Busy cycles in the last second.
        recent_busy_cycles: gauge;
        /// Idle cycles in the last second.
        recent_idle_cycles: gauge;
        /// Frames received in the last second.
        recent_packets: gauge;
        /// Share of the last second's TSC cycles spent in busy polls (0 to 1): the figure to
        /// size cores by.
        busy_ratio: ratio => "pxgw_worker_busy_ratio";
        /// Share of the last second's polls that received or sent something (0 to 1).
        busy_polls_ratio: ratio => "pxgw_worker_busy_polls_ratio";
        /// Busy cycles per frame received over the last second.
        cycles_per_packet: ratio => "pxgw_worker_cycles_per_packet";
    }
}

group! {
    /// A port's counters as the driver reports them (`rte_eth_stats`), under DPDK's names; see
    /// [`dpdk::PortStats`] for how they add up.
    #[derive(Eq)]
    pub struct PortSample {
        /// Frames the port received and delivered to pxgw (ipackets).
        ipackets: counter => "pxgw_port_received_packets" { port: from };
        /// Frames the port dropped because its RX ring was full (imissed).
        imissed: counter => "pxgw_port_missed_packets" { port: from };
        /// Erroneous frames received (ierrors).
        ierrors: counter => "pxgw_port_receive_errors" { port: from };
        /// Frames lost for lack of an mbuf to receive into (rx_nombuf).
        rx_nombuf: counter => "pxgw_port_rx_nombuf" { port: from };
        /// Frames the port transmitted (opackets).
        opackets: counter => "pxgw_port_sent_packets" { port: from };
        /// Frames the driver took but failed to transmit (oerrors).
        oerrors: counter => "pxgw_port_transmit_errors" { port: from };
        /// Bytes the port received (ibytes).
        ibytes: counter => "pxgw_port_received_bytes" { port: from };
        /// Bytes the port transmitted (obytes).
        obytes: counter => "pxgw_port_sent_bytes" { port: from };
    }
}

/// Declares [`Report`]: its counter groups (each with its JSON key, and for a direction the
/// ports it runs from and to), its counters of its own, and what else it carries. Generates
/// the struct, [`Report::MEMBERS`], [`Report::visit`], the merging of counters and their JSON.
macro_rules! report {
    (
        $(#[doc = $rdoc:literal])*
        pub struct Report {
            $(
                $(#[doc = $gdoc:literal])*
                $g:ident : $gty:ident = $gkey:literal $(($from:literal -> $to:literal))?,
            )*
            ;
            $(
                $(#[doc = $sdoc:literal])*
                $s:ident : $skind:ident $(=> $spname:literal)? $(, tm $stm:literal)?;
            )*
            ;
            $(
                $(#[doc = $xdoc:literal])*
                $x:ident : $xty:ty,
            )*
        }
    ) => {
        $(#[doc = $rdoc])*
        #[derive(Clone, Debug, Default)]
        pub struct Report {
            $( $(#[doc = $gdoc])* pub $g: $gty, )*
            $( $(#[doc = $sdoc])* pub $s: counters::__counter_type!($skind), )*
            $( $(#[doc = $xdoc])* pub $x: $xty, )*
        }

        impl Report {
            /// Every counter group, then the report's own counters (key `""`), in declaration
            /// order, with their counters.
            pub const MEMBERS: &'static [(Member, &'static [Desc])] = &[
                $(
                    (
                        Member {
                            key: $gkey,
                            ends: counters::__optional!($(($from, $to))?),
                        },
                        <$gty as Group>::FIELDS,
                    ),
                )*
                (
                    Member { key: "", ends: None },
                    &[
                        $(counters::__counter_desc!($s [$($sdoc)*] $skind $(=> $spname)? $(, tm $stm)?),)*
                    ],
                ),
            ];

            /// Calls `f` with every counter and its value, in [`MEMBERS`](Self::MEMBERS) order.
            pub fn visit(&self, f: &mut dyn FnMut(&'static Member, &'static Desc, Value<'_>)) {
                let mut members = Self::MEMBERS.iter();
                $(
                    if let Some((member, _)) = members.next() {
                        self.$g.visit(&mut |d, v| f(member, d, v));
                    }
                )*
                if let Some((member, descs)) = members.next() {
                    let mut d = descs.iter();
                    $(
                        if let Some(desc) = d.next() {
                            f(member, desc, (&self.$s).into());
                        }
                    )*
                }
            }

            /// Calls `f` with every counter, to change, in [`MEMBERS`](Self::MEMBERS) order.
            pub fn visit_mut(
                &mut self,
                f: &mut dyn FnMut(&'static Member, &'static Desc, counters::ValueMut<'_>),
            ) {
                let mut members = Self::MEMBERS.iter();
                $(
                    if let Some((member, _)) = members.next() {
                        self.$g.visit_mut(&mut |d, v| f(member, d, v));
                    }
                )*
                if let Some((member, descs)) = members.next() {
                    let mut d = descs.iter();
                    $(
                        if let Some(desc) = d.next() {
                            f(member, desc, (&mut self.$s).into());
                        }
                    )*
                }
            }

            /// Adds another worker's counters (not the delay histogram or the paths).
            fn add_counters(&mut self, o: &Report) {
                $( self.$g.add(&o.$g); )*
                let own = Self::MEMBERS.last().map_or(&[][..], |m| m.1);
                let mut d = own.iter();
                $(
                    if let Some(desc) = d.next() {
                        counters::merge(desc.kind, (&mut self.$s).into(), (&o.$s).into());
                    }
                )*
            }

            /// Makes every counter `o`'s (not the delay histogram or the paths): a copy of a few
            /// hundred plain numbers, which allocates nothing.
            pub fn copy_counters_from(&mut self, o: &Report) {
                $( self.$g = o.$g; )*
                $( self.$s = o.$s; )*
            }

            /// The counters as JSON: each group under its key, the report's own at the top.
            fn counters_json(&self) -> serde_json::Map<String, serde_json::Value> {
                let mut m = serde_json::Map::new();
                $( m.insert($gkey.to_owned(), serde_json::json!(self.$g)); )*
                $( m.insert(stringify!($s).to_owned(), serde_json::json!(self.$s)); )*
                m
            }
        }
    };
}

report! {
    /// One worker's counters (and, summed, the gateway's).
    pub struct Report {
        /// Outside → inside.
        inbound: Direction = "inbound" ("external" -> "internal"),
        /// Inside → outside.
        outbound: Direction = "outbound" ("internal" -> "external"),
        /// Merging.
        merge: MergeSummary = "merge",
        /// Caravans.
        caravan: CaravanSummary = "caravan",
        /// Handshakes.
        mss: MssSummary = "mss",
        /// Software splits.
        split: SplitSummary = "split",
        /// Coalesced TCP from outside.
        coalesced: Coalesced = "coalesced",
        /// The gateway's own frames.
        gateway_frames: GatewayFrames = "gateway_frames",
        /// Drops.
        drops: Drops = "drops",
        /// F-PMTUD.
        pmtud: PmtudSummary = "pmtud",
        /// Router behaviour: ICMP errors, fragments, path MTUs learned.
        router: RouterSummary = "router",
        /// Inbound packets above the internal MTU.
        inbound_oversize: InboundOversize = "inbound_oversize",
        /// Frame sizes received and sent.
        sizes: FrameSizes = "frame_sizes",
        /// The worker's load (written by the worker, not the pipeline).
        load: WorkerLoad = "load",
        ;
        /// TCP connections the worker knows.
        connections: gauge => "pxgw_connections", tm "connections";
        ;
        /// Added delay per merged segment, ns (for aggregation).
        delay_ns: Option<Histogram<u64>>,
        /// Path MTUs F-PMTUD discovered (the most recent, per worker).
        pmtud_paths: Vec<DiscoveredPath>,
    }
}

impl Report {
    /// Every declared counter, with the group it belongs to, in declaration order.
    pub fn declared() -> impl Iterator<Item = (&'static Member, &'static Desc)> {
        Self::MEMBERS
            .iter()
            .flat_map(|(m, descs)| descs.iter().map(move |d| (m, d)))
    }

    /// Adds another worker's report.
    pub fn add(&mut self, o: &Report) {
        self.add_counters(o);
        match (&mut self.delay_ns, &o.delay_ns) {
            (Some(a), Some(b)) => {
                let _ = a.add(b);
            }
            (None, Some(b)) => self.delay_ns = Some(b.clone()),
            _ => {}
        }
        self.pmtud_paths.extend_from_slice(&o.pmtud_paths);
        self.finish();
    }

    /// The workers' reports summed.
    pub fn sum(reports: &[Report]) -> Report {
        let mut sum = Report::default();
        for r in reports {
            sum.add(r);
        }
        sum.finish();
        sum
    }

    /// Derives the ratios and means from the counts.
    pub fn finish(&mut self) {
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let m = &mut self.merge;
        m.conversion_yield = ratio(m.payload_full, m.payload_in);
        (m.mean_delay_us, m.p99_delay_us) = match self.delay_ns.as_ref().filter(|h| !h.is_empty()) {
            Some(h) => (h.mean() / 1e3, h.value_at_quantile(0.99) as f64 / 1e3),
            None => (0.0, 0.0),
        };
        let l = &mut self.load;
        l.busy_ratio = ratio(
            l.recent_busy_cycles,
            l.recent_busy_cycles + l.recent_idle_cycles,
        );
        l.busy_polls_ratio = ratio(
            l.recent_busy_polls,
            l.recent_busy_polls + l.recent_idle_polls,
        );
        l.cycles_per_packet = ratio(l.recent_busy_cycles, l.recent_packets);
    }

    /// A report with every counter set to a value of its own (each frame-size histogram holding
    /// one frame of a size of its own), the ratios derived from them.
    #[cfg(test)]
    pub(crate) fn every_counter_set() -> Report {
        let mut r = Report::default();
        let mut n = 0u64;
        r.visit_mut(&mut |_, _, v| {
            n += 1;
            match v {
                counters::ValueMut::Count(c) => *c = 1000 + n,
                counters::ValueMut::Sizes(h) => h.record(100 * n as usize),
                counters::ValueMut::Ratio(_) => {}
            }
        });
        r.finish();
        r
    }

    /// Frames received on both ports.
    pub fn packets_received(&self) -> u64 {
        self.inbound.packets_in + self.outbound.packets_in
    }

    /// The JSON document of `--stats-json`: every declared counter, the discovered paths, the
    /// frame-size bounds, the ports, and how long pxgw ran.
    pub fn to_json(
        &self,
        seconds: f64,
        leaked_mbufs: usize,
        ports: &PortCounters,
    ) -> serde_json::Value {
        let mut m = self.counters_json();
        m.insert("seconds".into(), serde_json::json!(seconds));
        if let Some(p) = m.get_mut("pmtud") {
            p["paths"] = serde_json::json!(self.pmtud_paths);
        }
        if let Some(s) = m.get_mut("frame_sizes") {
            s["bounds"] = serde_json::json!(FRAME_SIZE_BOUNDS);
        }
        m.insert("ports".into(), serde_json::json!(ports));
        m.insert("leaked_mbufs".into(), serde_json::json!(leaked_mbufs));
        serde_json::Value::Object(m)
    }

    /// The `workers` array of `--stats-json`: each worker's own packet counts and load, in
    /// worker order, so one can see that every worker carries traffic, and how busy it is.
    pub fn workers_json(workers: &[Report]) -> serde_json::Value {
        workers
            .iter()
            .enumerate()
            .map(|(i, r)| {
                serde_json::json!({
                    "worker": i,
                    "packets_in": r.inbound.packets_in + r.outbound.packets_in,
                    "packets_out": r.inbound.packets_out + r.outbound.packets_out,
                    "inbound": r.inbound,
                    "outbound": r.outbound,
                    "connections": r.connections,
                    "pmtud": r.pmtud,
                    "load": r.load,
                })
            })
            .collect()
    }

    /// `/pxgw/stats`: the counters declared with a telemetry name, summed over workers (ratios
    /// in thousandths), and `drops`, all drops.
    pub fn telemetry(&self) -> Vec<(String, u64)> {
        let mut v = Vec::new();
        self.visit(&mut |m, d, value| {
            let Some(name) = m.telemetry(d) else { return };
            match value {
                Value::Count(n) => v.push((name, n)),
                Value::Ratio(r) => v.push((name, (r * 1000.0).round() as u64)),
                Value::Sizes(h) => v.push((name, h.count())),
            }
        });
        v.push(("drops".into(), self.drops.total()));
        v
    }

    /// The final summary: totals, drops by reason, and both ports' counters.
    pub fn summary(&self, seconds: f64, ports: &PortCounters) -> String {
        format!(
            "after {seconds:.1} s: inbound {} pkts {} B -> {} pkts {} B; outbound {} pkts {} B -> {} pkts {} B; yield {:.1} %; delay {:.1}/{:.1} us mean/p99; caravans {}/{} datagrams; drops {}\n  ext {}\n  int {}",
            self.inbound.packets_in,
            self.inbound.bytes_in,
            self.inbound.packets_out,
            self.inbound.bytes_out,
            self.outbound.packets_in,
            self.outbound.bytes_in,
            self.outbound.packets_out,
            self.outbound.bytes_out,
            100.0 * self.merge.conversion_yield,
            self.merge.mean_delay_us,
            self.merge.p99_delay_us,
            self.caravan.caravans_built,
            self.caravan.datagrams_packed,
            drops_line(&self.drops),
            ports.external.line(&PortReport::default()),
            ports.internal.line(&PortReport::default()),
        )
    }
}

/// Upper bounds (inclusive) of the frame-size buckets, bytes of the Ethernet frame without FCS:
/// the classic sizes (64, 1518 = MTU 1500 with a VLAN tag, 4018 = MTU 4000, 9018 = MTU 9000)
/// fall on a bound, so a histogram shows on which side of each MTU the frames are. Frames above
/// the last bound land in a final, unbounded bucket.
pub const FRAME_SIZE_BOUNDS: [u64; 12] = [
    64, 128, 256, 512, 1024, 1518, 2048, 4018, 8192, 9018, 16384, 65535,
];

/// A distribution of frame sizes over [`FRAME_SIZE_BOUNDS`]: recording is a binary search over
/// the 12 bounds (branch-free, a few nanoseconds) and two additions; it never allocates, so
/// workers record every frame.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct SizeHistogram {
    /// Frames per bucket (not cumulative): `counts[i]` holds frames of at most
    /// `FRAME_SIZE_BOUNDS[i]` bytes and more than the bound before; the last, frames above
    /// every bound.
    pub counts: [u64; FRAME_SIZE_BOUNDS.len() + 1],
    /// Bytes of all frames recorded.
    pub sum: u64,
}

impl SizeHistogram {
    /// Records one frame of `len` bytes.
    #[inline]
    pub fn record(&mut self, len: usize) {
        self.record_n(len, 1);
    }

    /// Records `n` frames of `len` bytes each.
    #[inline]
    pub fn record_n(&mut self, len: usize, n: u64) {
        let len = len as u64;
        let i = FRAME_SIZE_BOUNDS.partition_point(|&b| b < len);
        self.counts[i] += n;
        self.sum += len * n;
    }

    /// Frames recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds another histogram's frames.
    pub fn add(&mut self, o: &SizeHistogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts) {
            *a += b;
        }
        self.sum += o.sum;
    }
}

/// Frames of one size in a row, on their way into a [`SizeHistogram`]: a burst of one flow's
/// segments is mostly of one size, and comparing a length costs less than finding its bucket.
/// The histogram holds the same counts once the run is flushed.
#[derive(Clone, Copy, Debug, Default)]
pub struct SizeRun {
    len: usize,
    n: u64,
}

impl SizeRun {
    /// Counts a frame of `len` bytes; the run it ends, if any, goes into `h`.
    #[inline]
    pub fn add(&mut self, len: usize, h: &mut SizeHistogram) {
        if len != self.len {
            self.flush(h);
            self.len = len;
        }
        self.n += 1;
    }

    /// Records the run in `h` and starts an empty one.
    #[inline]
    pub fn flush(&mut self, h: &mut SizeHistogram) {
        if self.n > 0 {
            h.record_n(self.len, self.n);
            self.n = 0;
        }
    }
}

impl From<dpdk::PortStats> for PortSample {
    fn from(s: dpdk::PortStats) -> Self {
        Self {
            ipackets: s.ipackets,
            imissed: s.imissed,
            ierrors: s.ierrors,
            rx_nombuf: s.rx_nombuf,
            opackets: s.opackets,
            oerrors: s.oerrors,
            ibytes: s.ibytes,
            obytes: s.obytes,
        }
    }
}

/// The kernel's own counters of the interface behind a kernel-backed port (af_packet, af_xdp,
/// tap), from `/sys/class/net/IF/statistics` ([`crate::sysfs::kernel_counters`]). The kernel
/// does not count here the frames a full `net_af_packet` socket ring dropped; the port's
/// `imissed` does (the `dpdk` crate reads them from the sockets, which DPDK 22.11 does not), so
/// `rx_packets` == `ipackets + imissed`.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct KernelSample {
    /// Frames the interface received.
    pub rx_packets: u64,
    /// Frames the interface dropped on receive.
    pub rx_dropped: u64,
    /// Frames the interface sent.
    pub tx_packets: u64,
    /// Frames the interface dropped on transmit.
    pub tx_dropped: u64,
}

/// One port: the driver's counters, and the kernel interface's when there is one.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PortReport {
    /// The device string from the configuration.
    pub device: String,
    /// The driver's counters.
    #[serde(flatten)]
    pub counters: PortSample,
    /// The kernel interface's counters (kernel-backed ports only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelSample>,
}

impl PortReport {
    /// `ipackets +N imissed +N ierrors +N rx_nombuf +N opackets +N oerrors +N`: the change
    /// since `prev`, then the totals in brackets.
    pub fn line(&self, prev: &PortReport) -> String {
        let (c, p) = (&self.counters, &prev.counters);
        let mut parts = Vec::with_capacity(6);
        for (name, now, before) in [
            ("ipackets", c.ipackets, p.ipackets),
            ("imissed", c.imissed, p.imissed),
            ("ierrors", c.ierrors, p.ierrors),
            ("rx_nombuf", c.rx_nombuf, p.rx_nombuf),
            ("opackets", c.opackets, p.opackets),
            ("oerrors", c.oerrors, p.oerrors),
        ] {
            parts.push(format!("{name} +{} ({now})", now.saturating_sub(before)));
        }
        parts.join(" ")
    }
}

/// Both ports' counters at one moment.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PortCounters {
    /// Toward the Internet.
    pub external: PortReport,
    /// Toward the large-MTU network.
    pub internal: PortReport,
}

impl PortCounters {
    /// Where each port's counters sit: its name, which labels its Prometheus samples.
    pub const MEMBERS: [Member; 2] = [
        Member {
            key: "external",
            ends: Some(("external", "external")),
        },
        Member {
            key: "internal",
            ends: Some(("internal", "internal")),
        },
    ];

    /// Each port's counters with its [`MEMBERS`](Self::MEMBERS) entry.
    pub fn by_port(&self) -> [(&'static Member, &PortSample); 2] {
        [
            (&Self::MEMBERS[0], &self.external.counters),
            (&Self::MEMBERS[1], &self.internal.counters),
        ]
    }
}

fn drops_line(d: &Drops) -> String {
    if d.total() == 0 {
        return "0".into();
    }
    let parts: Vec<String> = d
        .by_reason()
        .into_iter()
        .filter(|&(_, v)| v > 0)
        .map(|(name, v)| format!("{name}={v}"))
        .collect();
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::counters::Kind;
    use super::*;

    /// Frames recorded in runs of one size give the histogram a frame at a time gives.
    #[test]
    fn size_runs_record_what_single_frames_do() {
        let lens = [
            1514, 1514, 1514, 66, 66, 1514, 9014, 60, 60, 60, 70_000, 1514,
        ];
        let mut one = SizeHistogram::default();
        let mut runs = SizeHistogram::default();
        let mut run = SizeRun::default();
        for len in lens {
            one.record(len);
            run.add(len, &mut runs);
        }
        assert_ne!(one, runs, "the last run is still open");
        run.flush(&mut runs);
        assert_eq!(one, runs);
        assert_eq!(runs.count(), lens.len() as u64);
        // Flushed twice, nothing more.
        run.flush(&mut runs);
        assert_eq!(one, runs);
    }

    /// Every declared counter is in the JSON, under its group's key and its field's name, with
    /// its value; merging two workers adds counts and levels, keeps the larger maximum, and adds
    /// histograms bucket by bucket.
    #[test]
    fn every_counter_reaches_json_and_adds_up() {
        let one = Report::every_counter_set();
        let j = one.to_json(1.0, 0, &PortCounters::default());
        let mut seen = 0;
        one.visit(&mut |m, d, v| {
            seen += 1;
            let at = if m.key.is_empty() {
                &j[d.field]
            } else {
                &j[m.key][d.field]
            };
            match v {
                Value::Count(n) => assert_eq!(at, n, "{}", m.path(d)),
                Value::Ratio(x) => assert_eq!(at.as_f64(), Some(x), "{}", m.path(d)),
                Value::Sizes(h) => assert_eq!(at["counts"], serde_json::json!(h.counts)),
            }
        });
        assert_eq!(seen, Report::declared().count());
        let mut two = one.clone();
        two.add(&one);
        let mut values = Vec::new();
        one.visit(&mut |_, d, v| values.push((d.kind, format!("{v:?}"))));
        let mut i = 0;
        two.visit(&mut |m, d, v| {
            let before = &values[i].1;
            i += 1;
            match (d.kind, v) {
                (Kind::Max, Value::Count(n)) => {
                    assert_eq!(format!("{:?}", Value::Count(n)), *before)
                }
                (Kind::Counter | Kind::Gauge, Value::Count(n)) => {
                    assert_eq!(
                        format!("{:?}", Value::Count(n / 2)),
                        *before,
                        "{}",
                        m.path(d)
                    );
                    assert_eq!(n % 2, 0);
                }
                (Kind::Sizes, Value::Sizes(h)) => assert_eq!(h.count(), 2, "{}", m.path(d)),
                _ => {}
            }
        });
    }

    /// Declarations are sound: paths unique, every group's JSON key its field, each Prometheus
    /// family of one kind, telemetry names unique.
    #[test]
    fn declarations_are_consistent() {
        let mut paths = std::collections::BTreeSet::new();
        let mut families = std::collections::BTreeMap::new();
        let mut telemetry = std::collections::BTreeSet::new();
        let mut samples = std::collections::BTreeSet::new();
        for (m, d) in Report::declared() {
            assert!(paths.insert(m.path(d)), "{} twice", m.path(d));
            assert!(!d.help().is_empty(), "{} has no doc comment", m.path(d));
            if let Some(p) = &d.prom {
                assert!(p.name.starts_with("pxgw_"), "{}", p.name);
                let kind = families.entry(p.name).or_insert(d.kind);
                assert_eq!(*kind, d.kind, "{} mixes kinds", p.name);
                assert!(
                    samples.insert((p.name, format!("{:?}", m.labels(d)))),
                    "{} has two samples with the same labels",
                    p.name
                );
            }
            if let Some(t) = m.telemetry(d) {
                assert!(telemetry.insert(t.clone()), "{t} twice");
            }
        }
        assert!(
            telemetry.contains("inbound_packets_in") && telemetry.contains("outbound_bytes_out")
        );
    }

    /// `/pxgw/stats` keeps its names: the ones the gateway lab and the docs read.
    #[test]
    fn telemetry_names() {
        let mut r = Report::every_counter_set();
        r.merge.payload_in = 1000;
        r.merge.payload_full = 959;
        r.finish();
        let t: std::collections::BTreeMap<String, u64> = r.telemetry().into_iter().collect();
        assert_eq!(t["inbound_packets_in"], r.inbound.packets_in);
        assert_eq!(t["outbound_bytes_out"], r.outbound.bytes_out);
        assert_eq!(t["merges"], r.merge.merges);
        assert_eq!(t["mss_rewrites"], r.mss.rewritten);
        assert_eq!(t["pmtud_answers"], r.pmtud.discovered);
        assert_eq!(t["connections"], r.connections);
        assert_eq!(t["yield_permille"], 959);
        assert_eq!(t["drops"], r.drops.total());
        assert_eq!(t.len(), 24);
    }

    /// A frame lands in the bucket of the first bound at or above its size.
    #[test]
    fn frame_sizes_land_on_their_bound() {
        let mut h = SizeHistogram::default();
        for len in [0, 64, 65, 1518, 1519, 9018, 65535, 65536, 1 << 20] {
            h.record(len);
        }
        assert_eq!(h.counts, [2, 1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 2]);
        assert_eq!(h.count(), 9);
    }
}

//! The merge engine's invariants, checked on what it emitted for what it was given: the
//! properties of `crates/pxio/tests/merge_props.rs` (`check_outputs`), compact.
//!
//! - Every byte of every segment whose checksums verify leaves exactly once, at its sequence
//!   number, with the bytes that segment carried (a retransmission carrying other bytes is a
//!   separate arrival of the same offsets: each copy leaves once).
//! - Order: a byte may leave before one that arrived earlier only if it lies below it in
//!   sequence space, and copies of one offset leave in arrival order (merging may repair
//!   reordering, never create it).
//! - What the receiver would reject stays rejected: a packet whose checksums verify holds bytes of
//!   verified segments only, and one that does not verify is a segment that arrived that way,
//!   passed through unchanged (a bad segment costs at most itself).
//! - No emitted IP packet exceeds the iMTU; frames that are not TCP of a known flow leave
//!   untouched.

use crate::parsed::parse_tcp;

/// A flow of the scenario, as the checker knows it.
#[derive(Clone, Debug)]
pub struct Flow {
    /// IPv6 rather than IPv4.
    pub v6: bool,
    /// Source address (IPv4 in the first four bytes).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// The sequence number of stream offset 0.
    pub isn: u32,
    /// Stream length: no offset is at or beyond it.
    pub stream_len: usize,
}

/// One frame given to the engine.
#[derive(Clone, Debug)]
pub struct Sent {
    /// The frame.
    pub frame: Vec<u8>,
    /// The flow it belongs to, `None` for junk (not TCP of a known flow).
    pub flow: Option<usize>,
    /// Stream offset of its first payload byte.
    pub offset: usize,
    /// Payload bytes.
    pub payload: Vec<u8>,
    /// Its IP and TCP checksums verify.
    pub verified: bool,
}

/// A piece of an emitted packet: (input index, first offset, end offset).
type Piece = (usize, usize, usize);

/// Checks `outputs` (in emission order) against `sent` (in arrival order); the error says which
/// invariant broke and where.
pub fn check(
    flows: &[Flow],
    sent: &[Sent],
    outputs: &[Vec<u8>],
    imtu: usize,
) -> Result<(), String> {
    let mut junk_in: Vec<&[u8]> = sent
        .iter()
        .filter(|s| s.flow.is_none())
        .map(|s| s.frame.as_slice())
        .collect();
    let mut bad_in: Vec<&[u8]> = sent
        .iter()
        .filter(|s| s.flow.is_some() && !s.verified)
        .map(|s| s.frame.as_slice())
        .collect();
    let mut junk_out: Vec<&[u8]> = Vec::new();
    // Per flow and offset: the verified inputs carrying it, in arrival order.
    let mut arrivals: Vec<Vec<Vec<usize>>> = flows
        .iter()
        .map(|f| vec![Vec::new(); f.stream_len])
        .collect();
    for (idx, s) in sent.iter().enumerate() {
        if let (Some(fi), true) = (s.flow, s.verified) {
            for a in &mut arrivals[fi][s.offset..s.offset + s.payload.len()] {
                a.push(idx);
            }
        }
    }
    let mut taken: Vec<Vec<usize>> = flows.iter().map(|f| vec![0; f.stream_len]).collect();
    let mut earlier: Vec<Vec<Piece>> = vec![Vec::new(); flows.len()];
    for (n, frame) in outputs.iter().enumerate() {
        let parsed = parse_tcp(frame);
        let fi = parsed.as_ref().and_then(|p| {
            flows.iter().position(|f| {
                f.v6 == p.v6
                    && f.src == p.src
                    && f.dst == p.dst
                    && f.sport == p.sport
                    && f.dport == p.dport
            })
        });
        let (Some(p), Some(fi)) = (parsed, fi) else {
            junk_out.push(frame);
            continue;
        };
        if p.ip_len > imtu {
            return Err(format!(
                "output #{n}: IP packet of {} B > iMTU {imtu}",
                p.ip_len
            ));
        }
        if !p.verifies() {
            let Some(at) = bad_in.iter().position(|b| *b == frame.as_slice()) else {
                return Err(format!(
                    "output #{n} (flow {fi}, seq {}, {} B): its checksums fail and it is not a \
                     failing input passed through unchanged: a bad segment cost more than itself",
                    p.seq,
                    p.payload.len()
                ));
            };
            bad_in.swap_remove(at);
            continue;
        }
        let flow = &flows[fi];
        let off = p.seq.wrapping_sub(flow.isn) as usize;
        if p.payload.is_empty() {
            continue;
        }
        if off + p.payload.len() > flow.stream_len {
            return Err(format!(
                "output #{n} (flow {fi}): bytes {off}..{} beyond the stream",
                off + p.payload.len()
            ));
        }
        let mut pieces: Vec<Piece> = Vec::new();
        for (k, &byte) in p.payload.iter().enumerate() {
            let o = off + k;
            let copy = taken[fi][o];
            let Some(&idx) = arrivals[fi][o].get(copy) else {
                return Err(format!(
                    "output #{n} (flow {fi}): byte {o} delivered more often than a segment whose \
                     checksums verify carried it (copy {copy}): corrupted or duplicated bytes \
                     reached the receiver"
                ));
            };
            taken[fi][o] += 1;
            let s = &sent[idx];
            if byte != s.payload[o - s.offset] {
                return Err(format!(
                    "output #{n} (flow {fi}): copy {copy} of byte {o} is {byte:#04x}, but arrival \
                     {copy} (input #{idx}) carried {:#04x}",
                    s.payload[o - s.offset]
                ));
            }
            match pieces.last_mut() {
                Some(last) if last.0 == idx => last.2 = o + 1,
                _ => pieces.push((idx, o, o + 1)),
            }
        }
        for &(v_idx, v_start, v_end) in &pieces {
            for &(u_idx, u_start, u_end) in &earlier[fi] {
                if !(u_idx < v_idx || u_end <= v_start) {
                    return Err(format!(
                        "output #{n} (flow {fi}): bytes {u_start}..{u_end} of input #{u_idx} left \
                         before bytes {v_start}..{v_end} of input #{v_idx}, which arrived {} and \
                         lie below them: the flow was reordered against its held data",
                        if u_idx == v_idx {
                            "with them"
                        } else {
                            "earlier"
                        }
                    ));
                }
            }
        }
        earlier[fi].extend(pieces);
    }
    for (fi, (t, a)) in taken.iter().zip(&arrivals).enumerate() {
        for (o, (&t, a)) in t.iter().zip(a).enumerate() {
            if t != a.len() {
                return Err(format!(
                    "flow {fi}: byte {o} delivered {t} times, arrived {} times in segments whose \
                     checksums verify",
                    a.len()
                ));
            }
        }
    }
    junk_in.sort();
    junk_out.sort();
    if junk_in != junk_out {
        return Err(format!(
            "frames that are not TCP of a known flow: {} in, {} out, or changed",
            junk_in.len(),
            junk_out.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{v4_addr, Segment, DST_HOST};

    fn flow() -> Flow {
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src[..4].copy_from_slice(&v4_addr(1));
        dst[..4].copy_from_slice(&v4_addr(DST_HOST));
        Flow {
            v6: false,
            src,
            dst,
            sport: 1000,
            dport: 80,
            isn: u32::MAX - 10,
            stream_len: 100,
        }
    }

    fn seg(offset: usize, payload: &[u8]) -> Sent {
        let frame = Segment {
            v6: false,
            src_host: 1,
            sport: 1000,
            dport: 80,
            vlan: None,
            seq: (u32::MAX - 10).wrapping_add(offset as u32),
            ack: 1,
            flags: 0x10,
            window: 100,
            urgent: 0,
            tos: 0,
            flow_label: 0,
            ident: 0,
            dont_frag: true,
            options: &[],
            v6_dest_opts: false,
        }
        .frame(payload);
        Sent {
            frame,
            flow: Some(0),
            offset,
            payload: payload.to_vec(),
            verified: true,
        }
    }

    #[test]
    fn passes_each_byte_once_in_order() {
        let sent = [seg(0, &[1; 20]), seg(20, &[2; 20])];
        let out: Vec<Vec<u8>> = sent.iter().map(|s| s.frame.clone()).collect();
        assert_eq!(check(&[flow()], &sent, &out, 9000), Ok(()));
    }

    #[test]
    fn catches_a_lost_byte_a_duplicate_and_a_reorder() {
        let sent = [seg(0, &[1; 20]), seg(20, &[2; 20])];
        let lost = vec![sent[0].frame.clone()];
        assert!(check(&[flow()], &sent, &lost, 9000)
            .unwrap_err()
            .contains("delivered 0 times"));
        let dup = vec![
            sent[0].frame.clone(),
            sent[0].frame.clone(),
            sent[1].frame.clone(),
        ];
        assert!(check(&[flow()], &sent, &dup, 9000)
            .unwrap_err()
            .contains("more often"));
        // A retransmission of bytes 10..30, sent last, leaving first: with the same bytes it is
        // a reordering, with other bytes the receiver would keep the wrong copy.
        let mut retx = [1u8; 20];
        retx[10..].fill(2);
        let sent = [seg(0, &[1; 20]), seg(20, &[2; 20]), seg(10, &retx)];
        let out = vec![
            sent[2].frame.clone(),
            sent[0].frame.clone(),
            sent[1].frame.clone(),
        ];
        assert!(check(&[flow()], &sent, &out, 9000)
            .unwrap_err()
            .contains("reordered"));
        let sent = [seg(0, &[1; 20]), seg(20, &[2; 20]), seg(10, &[3; 20])];
        let out = vec![
            sent[2].frame.clone(),
            sent[0].frame.clone(),
            sent[1].frame.clone(),
        ];
        assert!(check(&[flow()], &sent, &out, 9000)
            .unwrap_err()
            .contains("but arrival 0"));
    }

    #[test]
    fn catches_corrupted_bytes_made_valid() {
        let mut bad = seg(0, &[1; 20]);
        bad.payload[0] = 9;
        bad.verified = false;
        // What a merged packet of corrupted bytes with a recomputed checksum looks like.
        let out = vec![seg(0, &bad.payload.clone()).frame];
        assert!(check(&[flow()], &[bad], &out, 9000)
            .unwrap_err()
            .contains("more often"));
    }
}

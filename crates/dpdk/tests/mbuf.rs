//! Mbuf and burst semantics on a real EAL: room checks, chains, shallow clones, and that every
//! buffer returns to its pool exactly once.

use dpdk::testing::{assert_no_leaks, pool};
use dpdk::{Burst, Error};

#[test]
fn append_prepend_adj_trim_respect_room() {
    let pool = pool(64, 2048 + 128);
    let mut m = pool.alloc().unwrap();
    assert!(m.is_empty());
    let (head, tail) = (m.headroom(), m.tailroom());
    assert_eq!(head, 128, "DPDK's default headroom");
    assert_eq!(tail, 2048);

    m.extend_from_slice(b"payload").unwrap();
    m.prepend(4).unwrap().copy_from_slice(b"hdr:");
    assert_eq!(m.data(), b"hdr:payload");
    assert_eq!((m.headroom(), m.tailroom()), (head - 4, tail - 7));

    m.adj(4).unwrap();
    m.trim(3).unwrap();
    assert_eq!(m.data(), b"payl");

    assert!(matches!(
        m.append(tail),
        Err(Error::NoRoom {
            what: "tailroom",
            ..
        })
    ));
    assert!(matches!(
        m.prepend(head + 1),
        Err(Error::NoRoom {
            what: "headroom",
            ..
        })
    ));
    assert!(matches!(m.adj(5), Err(Error::NoRoom { what: "data", .. })));
    assert!(matches!(m.trim(5), Err(Error::NoRoom { what: "data", .. })));
    assert_eq!(m.data(), b"payl", "failed calls change nothing");
    drop(m);
    assert_no_leaks(&pool);
}

#[test]
fn chains_concatenate_and_free_every_segment_once() {
    let pool = pool(64, 2048 + 128);
    let mut head = pool.alloc().unwrap();
    head.extend_from_slice(&[1; 1000]).unwrap();
    let mut tail = pool.alloc().unwrap();
    tail.extend_from_slice(&[2; 1500]).unwrap();
    let mut third = pool.alloc().unwrap();
    third.extend_from_slice(&[3; 10]).unwrap();
    tail.chain(third).unwrap();
    head.chain(tail).unwrap();

    assert_eq!(head.len(), 2510);
    assert_eq!(head.num_segs(), 3);
    let lens: Vec<usize> = head.segments().map(<[u8]>::len).collect();
    assert_eq!(lens, [1000, 1500, 10]);
    let bytes = head.to_vec();
    assert!(bytes[..1000].iter().all(|&b| b == 1));
    assert!(bytes[1000..2500].iter().all(|&b| b == 2));
    assert!(bytes[2500..].iter().all(|&b| b == 3));

    // Append and trim work on the last segment; adj on the first.
    head.extend_from_slice(&[4; 5]).unwrap();
    assert_eq!(head.len(), 2515);
    assert_eq!(
        head.segments().last().unwrap(),
        &[3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4]
    );
    head.trim(5).unwrap();
    head.adj(999).unwrap();
    assert_eq!(head.len(), 1511);
    assert_eq!(head.data(), &[1]);

    assert_eq!(pool.in_use(), 3);
    drop(head);
    assert_no_leaks(&pool);
}

#[test]
fn shallow_clone_shares_data_and_blocks_writes() {
    let pool = pool(64, 2048 + 128);
    let mut original = pool.alloc().unwrap();
    original.extend_from_slice(b"shared bytes").unwrap();
    let mut second = pool.alloc().unwrap();
    second.extend_from_slice(b" and more").unwrap();
    original.chain(second).unwrap();

    let clone = original.try_clone(&pool).unwrap();
    assert_eq!(clone.to_vec(), b"shared bytes and more");
    assert_eq!(clone.num_segs(), 2);
    assert_eq!(original.data_refcnt(), 2);
    assert_eq!(clone.data_refcnt(), 2);
    // The clone's data lives in the original's buffer: same address, not a copy.
    assert_eq!(clone.data().as_ptr(), original.data().as_ptr());
    assert_eq!(pool.in_use(), 4, "two direct segments + two indirect ones");

    assert!(matches!(original.data_mut(), Err(Error::SharedData)));
    assert!(matches!(original.append(1), Err(Error::SharedData)));
    let mut clone = clone;
    assert!(matches!(clone.prepend(1), Err(Error::SharedData)));
    // Trimming a clone's view does not write the shared data.
    clone.adj(7).unwrap();
    assert_eq!(clone.to_vec(), b"bytes and more");
    assert_eq!(original.to_vec(), b"shared bytes and more");

    drop(clone);
    assert_eq!(original.data_refcnt(), 1);
    original.data_mut().unwrap()[0] = b'S';
    assert_eq!(original.data(), b"Shared bytes");
    drop(original);
    assert_no_leaks(&pool);
}

#[test]
fn dropping_the_original_first_keeps_the_clone_valid() {
    let pool = pool(16, 2048 + 128);
    let mut original = pool.alloc().unwrap();
    original.extend_from_slice(&[7; 512]).unwrap();
    let clone = original.try_clone(&pool).unwrap();
    drop(original);
    assert_eq!(
        pool.in_use(),
        2,
        "the direct mbuf stays out while the clone uses its buffer"
    );
    assert_eq!(clone.to_vec(), vec![7; 512]);
    drop(clone);
    assert_no_leaks(&pool);
}

#[test]
fn exhausted_pool_is_an_error_not_a_panic() {
    let pool = pool(8, 256);
    let held: Vec<_> = (0..8).map(|_| pool.alloc().unwrap()).collect();
    assert!(matches!(pool.alloc(), Err(Error::PoolExhausted(_))));
    let mut burst = Burst::<4>::new();
    assert!(matches!(
        pool.alloc_bulk(&mut burst, 1),
        Err(Error::PoolExhausted(_))
    ));
    assert!(burst.is_empty());
    let clone = held[0].try_clone(&pool);
    assert!(
        matches!(clone, Err(Error::PoolExhausted(_))),
        "clones need mbufs too"
    );
    drop(held);
    assert_no_leaks(&pool);
}

#[test]
fn burst_holds_n_and_frees_what_it_still_holds() {
    let pool = pool(64, 256);
    let mut burst = Burst::<4>::new();
    pool.alloc_bulk(&mut burst, 3).unwrap();
    assert!(matches!(
        pool.alloc_bulk(&mut burst, 2),
        Err(Error::InvalidArgument(_))
    ));
    burst.push(pool.alloc().unwrap()).unwrap();
    assert!(burst.is_full());
    let extra = pool.alloc().unwrap();
    let extra = burst.push(extra).unwrap_err();
    drop(extra);
    for (i, m) in burst.as_mut_slice().iter_mut().enumerate() {
        m.extend_from_slice(&[i as u8]).unwrap();
    }
    // Take two, and let the drain's drop free the other two.
    let taken: Vec<_> = burst.drain().take(2).collect();
    assert_eq!(taken[0].data(), &[0]);
    assert_eq!(taken[1].data(), &[1]);
    assert!(burst.is_empty());
    assert_eq!(pool.in_use(), 2);
    drop(taken);

    pool.alloc_bulk(&mut burst, 4).unwrap();
    drop(burst);
    assert_no_leaks(&pool);
}

fn three_segment_packet(pool: &dpdk::Mempool) -> dpdk::Mbuf {
    let mut head = pool.alloc().unwrap();
    head.extend_from_slice(&(0..100).collect::<Vec<u8>>())
        .unwrap();
    for start in [100u8, 200] {
        let mut seg = pool.alloc().unwrap();
        seg.extend_from_slice(&(start..start + 50).collect::<Vec<u8>>())
            .unwrap();
        head.chain(seg).map_err(|(e, _)| e).unwrap();
    }
    head
}

#[test]
fn truncate_cuts_inside_a_segment_and_frees_the_rest() {
    let pool = pool(64, 512);
    let mut m = three_segment_packet(&pool);
    assert_eq!((m.len(), m.num_segs()), (200, 3));
    m.truncate(120).unwrap();
    assert_eq!((m.len(), m.num_segs()), (120, 2));
    assert_eq!(pool.in_use(), 2, "the third segment went back to the pool");
    let bytes = m.to_vec();
    assert_eq!(&bytes[..100], &(0..100).collect::<Vec<u8>>()[..]);
    assert_eq!(&bytes[100..], &(100..120).collect::<Vec<u8>>()[..]);
    assert!(matches!(m.truncate(121), Err(Error::NoRoom { .. })));
    m.truncate(0).unwrap();
    assert_eq!((m.len(), m.num_segs()), (0, 1));
    drop(m);
    assert_no_leaks(&pool);
}

#[test]
fn split_off_cuts_anywhere_sharing_at_most_the_one_segment_it_falls_in() {
    let pool = pool(64, 512);
    let whole = three_segment_packet(&pool).to_vec();
    // Inside the head, on each boundary, inside later segments, next to the ends.
    for at in [1, 60, 100, 101, 120, 150, 151, 199] {
        let mut m = three_segment_packet(&pool);
        let before = pool.in_use();
        let rest = m.split_off(at, &pool).unwrap();
        assert_eq!(m.to_vec(), &whole[..at], "kept, cut at {at}");
        assert_eq!(rest.to_vec(), &whole[at..], "rest, cut at {at}");
        // Each head counts its own chain.
        assert_eq!(m.num_segs(), m.segments().count(), "cut at {at}");
        assert_eq!(rest.num_segs(), rest.segments().count(), "cut at {at}");
        let boundary = [100, 150].contains(&at);
        // One view where the cut falls inside a segment, none on a boundary.
        assert_eq!(
            pool.in_use() - before,
            usize::from(!boundary),
            "cut at {at}"
        );
        assert_eq!(
            m.num_segs() + rest.num_segs(),
            3 + usize::from(!boundary),
            "cut at {at}"
        );
        // Either side outlives the other.
        drop(m);
        assert_eq!(rest.to_vec(), &whole[at..], "rest alone, cut at {at}");
        drop(rest);
        assert_no_leaks(&pool);
    }
    // A view of a view is cut as well, and nothing outside the packet is.
    let m = three_segment_packet(&pool);
    let mut view = m.share_range(50, 120, &pool).unwrap();
    drop(m);
    let rest = view.split_off(75, &pool).unwrap();
    assert_eq!(view.to_vec(), &whole[50..125]);
    assert_eq!(rest.to_vec(), &whole[125..170]);
    let mut r = rest.share_range(0, 45, &pool).unwrap();
    for at in [0, 45, 46] {
        let cut = r.split_off(at, &pool);
        assert!(matches!(cut, Err(Error::InvalidArgument(_))), "cut at {at}");
        assert_eq!(
            r.to_vec(),
            &whole[125..170],
            "unchanged after a refused cut"
        );
    }
    drop(r);
    drop((view, rest));
    assert_no_leaks(&pool);
}

#[test]
fn share_range_is_a_zero_copy_view_of_any_byte_range() {
    let pool = pool(64, 512);
    let m = three_segment_packet(&pool);
    let whole = m.to_vec();
    for (offset, len) in [(0, 200), (90, 20), (100, 50), (120, 80), (149, 2), (199, 1)] {
        let view = m.share_range(offset, len, &pool).unwrap();
        assert_eq!(
            view.to_vec(),
            &whole[offset..offset + len],
            "{offset}+{len}"
        );
        // The view points into the original buffers.
        let first = view.data().as_ptr();
        assert!(m.segments().any(|s| s.as_ptr_range().contains(&first)));
    }
    assert!(matches!(
        m.share_range(150, 51, &pool),
        Err(Error::InvalidArgument(_))
    ));
    let view = m.share_range(95, 60, &pool).unwrap();
    assert_eq!(view.num_segs(), 3);
    drop(m);
    // The view keeps the shared segments alive after the original is gone.
    assert_eq!(view.to_vec(), &whole[95..155]);
    drop(view);
    // One segment (its own branch): the view of any range, which outlives the original, and
    // no range past the end.
    let mut one = pool.alloc().unwrap();
    one.extend_from_slice(&whole[..120]).unwrap();
    for (offset, len) in [(0, 120), (0, 1), (54, 66), (119, 1)] {
        let view = one.share_range(offset, len, &pool).unwrap();
        assert_eq!((view.len(), view.num_segs()), (len, 1), "{offset}+{len}");
        assert_eq!(
            view.to_vec(),
            &whole[offset..offset + len],
            "{offset}+{len}"
        );
    }
    assert!(matches!(
        one.share_range(100, 21, &pool),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        one.share_range(10, 0, &pool),
        Err(Error::InvalidArgument(_))
    ));
    let view = one.share_range(7, 50, &pool).unwrap();
    drop(one);
    assert_eq!(view.to_vec(), &whole[7..57]);
    drop(view);
    assert_no_leaks(&pool);
}

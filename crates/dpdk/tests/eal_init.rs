//! EAL start-up errors, in a process of their own: bad arguments are an error (not a panic, not
//! an exit), and the EAL starts only once per process.

use dpdk::testing::test_eal_builder;
use dpdk::{EalBuilder, Error, Mempool, Port, PortId};

#[test]
fn eal_initialises_once_and_reports_bad_input_as_errors() {
    let bad = EalBuilder::new("px-test")
        .no_huge()
        .arg("--no-such-eal-option")
        .init();
    assert!(
        matches!(bad, Err(Error::EalInit(errno)) if errno.0 == libc::EINVAL),
        "bad arguments give EalInit(EINVAL), got {bad:?}"
    );
    assert!(matches!(
        EalBuilder::new("px-test").arg("nul\0byte").init(),
        Err(Error::InvalidArgument(_))
    ));

    // DPDK allows a fresh start after an argument error.
    let eal = test_eal_builder().init().expect("the EAL starts");
    assert!(matches!(
        test_eal_builder().init(),
        Err(Error::AlreadyInitialised)
    ));

    // A device that does not exist.
    assert!(matches!(
        eal.port_by_name("net_ring_missing"),
        Err(Error::NoDevice(_))
    ));
    assert!(matches!(
        eal.vdev("net_af_packet_missing", "iface=px-no-such-if"),
        Err(Error::Vdev { .. })
    ));
    let pool = Mempool::new(&eal, "eal_init_pool", 64, 0, 2048).unwrap();
    assert!(matches!(
        Port::builder(&eal, PortId(1234)).start(&pool),
        Err(Error::NoDevice(_))
    ));
    assert!(
        matches!(
            Mempool::new(&eal, "eal_init_pool", 64, 0, 2048),
            Err(Error::Mempool { .. })
        ),
        "a duplicate pool name is an error"
    );
}

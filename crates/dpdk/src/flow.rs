//! `rte_flow` rules: steer a 5-tuple to a queue, spread it over a queue subset, or drop it
//! (SIGCOMM'26 §4.2: PXIO pins merge-worthy flows to the queues of their merge workers).

use std::ffi::CStr;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{Errno, Error, Result};
use crate::port::PortShared;
use crate::Port;

/// Match on IP addresses, each with a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpMatch {
    /// IPv4 source and/or destination prefix.
    V4 {
        /// Source prefix.
        src: Option<(Ipv4Addr, u8)>,
        /// Destination prefix.
        dst: Option<(Ipv4Addr, u8)>,
    },
    /// IPv6 source and/or destination prefix.
    V6 {
        /// Source prefix.
        src: Option<(Ipv6Addr, u8)>,
        /// Destination prefix.
        dst: Option<(Ipv6Addr, u8)>,
    },
}

/// Transport protocol of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// Match on the transport protocol and, optionally, exact ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L4Match {
    /// Protocol.
    pub proto: L4Proto,
    /// Exact source port.
    pub src_port: Option<u16>,
    /// Exact destination port.
    pub dst_port: Option<u16>,
}

/// What a matching packet gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlowAction {
    /// Delivered to this RX queue.
    Queue(u16),
    /// Spread by RSS over these RX queues.
    Rss(Vec<u16>),
    /// Spread by RSS over these RX queues, hashing `types` with this 40-byte Toeplitz `key`
    /// (a symmetric key keeps both directions of a connection on one queue, as
    /// [`crate::PortBuilder::rss_key`] does for the port's own RSS).
    RssKeyed {
        /// The queues.
        queues: Vec<u16>,
        /// The hash key.
        key: [u8; crate::RSS_KEY_LEN],
        /// The headers hashed.
        types: crate::RssHash,
    },
    /// Dropped by the device.
    Drop,
    /// Matched again against the rules of this group (a higher one than the rule's own): PXIO
    /// keeps hairpin opt-in rules in group 0 and the RX-queue subset rules behind them
    /// (SIGCOMM'26 §4.3, §4.4).
    Jump(u32),
    /// Delivered to `queue` (a hairpin queue, say), and one packet in `ratio` also copied to
    /// `sample_queue` (`RTE_FLOW_ACTION_TYPE_SAMPLE`): the host sees a sample of traffic it
    /// otherwise never receives, to find heavy hitters (SIGCOMM'26 §4.4).
    SampleThenQueue {
        /// The queue every packet goes to.
        queue: u16,
        /// One packet in `ratio` is copied.
        ratio: u32,
        /// Where the copies go.
        sample_queue: u16,
    },
}

/// A rule: ingress, an optional IP match, an optional L4 match, one action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowRule {
    /// The rule's group (0 is where matching starts; see [`FlowAction::Jump`]).
    pub group: u32,
    /// Lower values win (0 is the highest priority).
    pub priority: u32,
    /// IP part of the pattern (any IP packet when `None` and `l4` is `None`; any Ethernet frame).
    pub ip: Option<IpMatch>,
    /// L4 part of the pattern. Needs `ip`, since rte_flow patterns are layered.
    pub l4: Option<L4Match>,
    /// The action.
    pub action: FlowAction,
}

impl FlowRule {
    /// A rule matching every frame, with `action`, at priority 0.
    pub fn new(action: FlowAction) -> Self {
        Self {
            group: 0,
            priority: 0,
            ip: None,
            l4: None,
            action,
        }
    }

    /// Sets the priority.
    pub fn priority(mut self, priority: u32) -> Self {
        self.priority = priority;
        self
    }

    /// Sets the group.
    pub fn group(mut self, group: u32) -> Self {
        self.group = group;
        self
    }

    /// Sets the IP match.
    pub fn ip(mut self, ip: IpMatch) -> Self {
        self.ip = Some(ip);
        self
    }

    /// Sets the L4 match.
    pub fn l4(mut self, proto: L4Proto, src_port: Option<u16>, dst_port: Option<u16>) -> Self {
        self.l4 = Some(L4Match {
            proto,
            src_port,
            dst_port,
        });
        self
    }
}

/// An installed rule; dropping it destroys it (errors are logged), [`Flow::destroy`] reports them.
pub struct Flow {
    port: Arc<PortShared>,
    raw: Option<NonNull<dpdk_sys::rte_flow>>,
}

// SAFETY: the handle is an opaque token that DPDK accepts from any thread.
unsafe impl Send for Flow {}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flow").field("port", &self.port.id).finish()
    }
}

impl Flow {
    /// Removes the rule from the device.
    pub fn destroy(mut self) -> Result<()> {
        self.destroy_inner()
    }

    fn destroy_inner(&mut self) -> Result<()> {
        let Some(raw) = self.raw.take() else {
            return Ok(());
        };
        let mut error = dpdk_sys::rte_flow_error::default();
        // SAFETY: raw was returned by rte_flow_create on this port, which is alive (we hold its
        // Arc), and is destroyed once (take()).
        let ret = unsafe { dpdk_sys::rte_flow_destroy(self.port.id.0, raw.as_ptr(), &mut error) };
        check(self.port.id.0, "destroy", ret, &error)
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_inner() {
            tracing::warn!(error = %e, "rte_flow rule could not be destroyed");
        }
    }
}

impl Port {
    /// Asks the driver whether it would accept `rule`, without installing it.
    pub fn flow_validate(&self, rule: &FlowRule) -> Result<()> {
        let port = self.id().0;
        let spec = Spec::new(
            rule,
            self.shared.hairpin_rx.end.max(self.rx_queue_count()),
            port,
        )?;
        let mut error = dpdk_sys::rte_flow_error::default();
        let (attr, pattern, actions) = spec.raw();
        // SAFETY: every pointer in pattern/actions points into `spec`, alive for the call.
        let ret = unsafe {
            dpdk_sys::rte_flow_validate(port, &attr, pattern.as_ptr(), actions.as_ptr(), &mut error)
        };
        check(port, "validate", ret, &error)
    }

    /// Installs `rule`. DPDK's own message comes back in the error when the driver refuses it,
    /// and [`Error::Unsupported`] when the driver has no rte_flow at all.
    pub fn flow_create(&self, rule: &FlowRule) -> Result<Flow> {
        let port = self.id().0;
        let spec = Spec::new(
            rule,
            self.shared.hairpin_rx.end.max(self.rx_queue_count()),
            port,
        )?;
        let mut error = dpdk_sys::rte_flow_error::default();
        let (attr, pattern, actions) = spec.raw();
        // SAFETY: as in flow_validate; the driver copies what it keeps.
        let raw = unsafe {
            dpdk_sys::rte_flow_create(port, &attr, pattern.as_ptr(), actions.as_ptr(), &mut error)
        };
        match NonNull::new(raw) {
            Some(raw) => Ok(Flow {
                port: self.shared.clone(),
                raw: Some(raw),
            }),
            None => Err(flow_error(port, "create", Errno::last(), &error)),
        }
    }
}

fn check(port: u16, op: &'static str, ret: i32, error: &dpdk_sys::rte_flow_error) -> Result<()> {
    if ret >= 0 {
        Ok(())
    } else {
        Err(flow_error(port, op, Errno::from_ret(ret), error))
    }
}

/// ENOSYS is DPDK's answer for a driver without rte_flow; anything else is a refusal with a
/// message.
fn flow_error(
    port: u16,
    op: &'static str,
    errno: Errno,
    error: &dpdk_sys::rte_flow_error,
) -> Error {
    if errno.0 == libc::ENOSYS {
        return Error::Unsupported(port);
    }
    let message = if error.message.is_null() {
        "no message from the driver".to_owned()
    } else {
        // SAFETY: DPDK sets message to a NUL-terminated string that lives at least as long as
        // the error struct; we copy it immediately.
        unsafe { CStr::from_ptr(error.message) }
            .to_string_lossy()
            .into_owned()
    };
    Error::Flow {
        port,
        op,
        message,
        errno,
    }
}

/// The C structures of one rule, owned together so every pointer stays valid.
struct Spec {
    group: u32,
    priority: u32,
    ip: Option<IpSpec>,
    l4: Option<L4Spec>,
    action: ActionSpec,
}

enum IpSpec {
    V4(dpdk_sys::rte_flow_item_ipv4, dpdk_sys::rte_flow_item_ipv4),
    V6(dpdk_sys::rte_flow_item_ipv6, dpdk_sys::rte_flow_item_ipv6),
}

enum L4Spec {
    Tcp(dpdk_sys::rte_flow_item_tcp, dpdk_sys::rte_flow_item_tcp),
    Udp(dpdk_sys::rte_flow_item_udp, dpdk_sys::rte_flow_item_udp),
}

enum ActionSpec {
    Queue(dpdk_sys::rte_flow_action_queue),
    Rss {
        conf: dpdk_sys::rte_flow_action_rss,
        /// `conf.queue` points here.
        _queues: Box<[u16]>,
        /// `conf.key` points here, when set.
        _key: Option<Box<[u8; crate::RSS_KEY_LEN]>>,
    },
    Drop,
    Jump(dpdk_sys::rte_flow_action_jump),
    Sample {
        /// `sample.actions` points into `sub`, and `sub[0].conf` to `sample_queue`.
        sample: dpdk_sys::rte_flow_action_sample,
        _sub: Box<[dpdk_sys::rte_flow_action; 2]>,
        _sample_queue: Box<dpdk_sys::rte_flow_action_queue>,
        queue: dpdk_sys::rte_flow_action_queue,
    },
}

impl Spec {
    fn new(rule: &FlowRule, rx_queues: u16, port: u16) -> Result<Self> {
        let queue_ok = |q: u16| {
            if q < rx_queues {
                Ok(())
            } else {
                Err(Error::QueueOutOfRange {
                    port,
                    kind: "rx",
                    index: q,
                    count: rx_queues,
                })
            }
        };
        if rule.l4.is_some() && rule.ip.is_none() {
            return Err(Error::InvalidArgument(
                "an L4 match needs an IP match (IpMatch::V4 or V6, possibly with no prefixes)"
                    .into(),
            ));
        }
        let proto = rule.l4.map(|l4| match l4.proto {
            L4Proto::Tcp => 6u8,
            L4Proto::Udp => 17u8,
        });
        let ip = rule.ip.map(|ip| ip_spec(ip, proto)).transpose()?;
        let l4 = rule.l4.map(l4_spec);
        let action = match &rule.action {
            FlowAction::Queue(q) => {
                queue_ok(*q)?;
                ActionSpec::Queue(dpdk_sys::rte_flow_action_queue { index: *q })
            }
            FlowAction::Rss(_) | FlowAction::RssKeyed { .. } => {
                let (queues, key, types) = match &rule.action {
                    FlowAction::RssKeyed { queues, key, types } => {
                        (queues, Some(Box::new(*key)), types.bits())
                    }
                    FlowAction::Rss(queues) => (queues, None, 0),
                    _ => unreachable!("matched above"),
                };
                if queues.is_empty() {
                    return Err(Error::InvalidArgument("RSS action with no queues".into()));
                }
                for &q in queues {
                    queue_ok(q)?;
                }
                let queues: Box<[u16]> = queues.clone().into_boxed_slice();
                let rss = dpdk_sys::rte_flow_action_rss {
                    func: dpdk_sys::RTE_ETH_HASH_FUNCTION_DEFAULT,
                    types,
                    key_len: key.as_ref().map_or(0, |k| k.len() as u32),
                    key: key.as_ref().map_or(std::ptr::null(), |k| k.as_ptr()),
                    queue_num: queues.len() as u32,
                    queue: queues.as_ptr(),
                    ..Default::default()
                };
                ActionSpec::Rss {
                    conf: rss,
                    _queues: queues,
                    _key: key,
                }
            }
            FlowAction::Drop => ActionSpec::Drop,
            FlowAction::Jump(group) => {
                if *group <= rule.group {
                    return Err(Error::InvalidArgument(format!(
                        "a rule in group {} may only jump to a higher group, not {group}",
                        rule.group
                    )));
                }
                ActionSpec::Jump(dpdk_sys::rte_flow_action_jump { group: *group })
            }
            FlowAction::SampleThenQueue {
                queue,
                ratio,
                sample_queue,
            } => {
                queue_ok(*queue)?;
                queue_ok(*sample_queue)?;
                if *ratio == 0 {
                    return Err(Error::InvalidArgument("a sample ratio of 0".into()));
                }
                let sq = Box::new(dpdk_sys::rte_flow_action_queue {
                    index: *sample_queue,
                });
                let sub = Box::new([
                    dpdk_sys::rte_flow_action {
                        type_: dpdk_sys::RTE_FLOW_ACTION_TYPE_QUEUE,
                        conf: (&*sq as *const dpdk_sys::rte_flow_action_queue).cast(),
                    },
                    dpdk_sys::rte_flow_action {
                        type_: dpdk_sys::RTE_FLOW_ACTION_TYPE_END,
                        conf: std::ptr::null(),
                    },
                ]);
                ActionSpec::Sample {
                    sample: dpdk_sys::rte_flow_action_sample {
                        ratio: *ratio,
                        actions: sub.as_ptr(),
                    },
                    _sub: sub,
                    _sample_queue: sq,
                    queue: dpdk_sys::rte_flow_action_queue { index: *queue },
                }
            }
        };
        Ok(Self {
            group: rule.group,
            priority: rule.priority,
            ip,
            l4,
            action,
        })
    }

    /// The attr, pattern and action arrays, pointing into `self`.
    fn raw(
        &self,
    ) -> (
        dpdk_sys::rte_flow_attr,
        Vec<dpdk_sys::rte_flow_item>,
        Vec<dpdk_sys::rte_flow_action>,
    ) {
        let mut attr = dpdk_sys::rte_flow_attr {
            group: self.group,
            priority: self.priority,
            ..Default::default()
        };
        attr.set_ingress(1);
        let mut pattern = vec![item::<u8>(dpdk_sys::RTE_FLOW_ITEM_TYPE_ETH, None)];
        match &self.ip {
            Some(IpSpec::V4(s, m)) => {
                pattern.push(item(dpdk_sys::RTE_FLOW_ITEM_TYPE_IPV4, Some((s, m))))
            }
            Some(IpSpec::V6(s, m)) => {
                pattern.push(item(dpdk_sys::RTE_FLOW_ITEM_TYPE_IPV6, Some((s, m))))
            }
            None => {}
        }
        match &self.l4 {
            Some(L4Spec::Tcp(s, m)) => {
                pattern.push(item(dpdk_sys::RTE_FLOW_ITEM_TYPE_TCP, Some((s, m))))
            }
            Some(L4Spec::Udp(s, m)) => {
                pattern.push(item(dpdk_sys::RTE_FLOW_ITEM_TYPE_UDP, Some((s, m))))
            }
            None => {}
        }
        pattern.push(item::<u8>(dpdk_sys::RTE_FLOW_ITEM_TYPE_END, None));
        let action =
            |type_, conf: *const std::ffi::c_void| dpdk_sys::rte_flow_action { type_, conf };
        let first = match &self.action {
            ActionSpec::Queue(q) => action(
                dpdk_sys::RTE_FLOW_ACTION_TYPE_QUEUE,
                (q as *const dpdk_sys::rte_flow_action_queue).cast(),
            ),
            ActionSpec::Rss { conf: rss, .. } => action(
                dpdk_sys::RTE_FLOW_ACTION_TYPE_RSS,
                (rss as *const dpdk_sys::rte_flow_action_rss).cast(),
            ),
            ActionSpec::Drop => action(dpdk_sys::RTE_FLOW_ACTION_TYPE_DROP, std::ptr::null()),
            ActionSpec::Sample { sample, .. } => action(
                dpdk_sys::RTE_FLOW_ACTION_TYPE_SAMPLE,
                (sample as *const dpdk_sys::rte_flow_action_sample).cast(),
            ),
            ActionSpec::Jump(jump) => action(
                dpdk_sys::RTE_FLOW_ACTION_TYPE_JUMP,
                (jump as *const dpdk_sys::rte_flow_action_jump).cast(),
            ),
        };
        let mut actions = vec![first];
        if let ActionSpec::Sample { queue, .. } = &self.action {
            actions.push(action(
                dpdk_sys::RTE_FLOW_ACTION_TYPE_QUEUE,
                (queue as *const dpdk_sys::rte_flow_action_queue).cast(),
            ));
        }
        actions.push(action(dpdk_sys::RTE_FLOW_ACTION_TYPE_END, std::ptr::null()));
        (attr, pattern, actions)
    }
}

/// One pattern item; `spec_mask` is (spec, mask), or `None` to match any header of that type.
fn item<T>(
    type_: dpdk_sys::rte_flow_item_type,
    spec_mask: Option<(&T, &T)>,
) -> dpdk_sys::rte_flow_item {
    let (spec, mask) = spec_mask.map_or((std::ptr::null(), std::ptr::null()), |(s, m)| {
        ((s as *const T).cast(), (m as *const T).cast())
    });
    dpdk_sys::rte_flow_item {
        type_,
        spec,
        last: std::ptr::null(),
        mask,
    }
}

fn prefix_mask<const N: usize>(prefix: u8) -> Result<[u8; N]> {
    let bits = N * 8;
    if usize::from(prefix) > bits {
        return Err(Error::InvalidArgument(format!(
            "prefix /{prefix} is longer than {bits} bits"
        )));
    }
    let mut mask = [0u8; N];
    for (i, byte) in mask.iter_mut().enumerate() {
        let on = usize::from(prefix).saturating_sub(i * 8).min(8);
        *byte = (0xffu16 << (8 - on)) as u8;
    }
    Ok(mask)
}

fn ip_spec(ip: IpMatch, proto: Option<u8>) -> Result<IpSpec> {
    match ip {
        IpMatch::V4 { src, dst } => {
            let mut spec = dpdk_sys::rte_flow_item_ipv4::default();
            let mut mask = dpdk_sys::rte_flow_item_ipv4::default();
            if let Some((addr, prefix)) = src {
                let m = prefix_mask::<4>(prefix)?;
                // Header fields are big-endian in memory: store the octets as they are.
                spec.hdr.src_addr = u32::from_ne_bytes(addr.octets());
                mask.hdr.src_addr = u32::from_ne_bytes(m);
            }
            if let Some((addr, prefix)) = dst {
                let m = prefix_mask::<4>(prefix)?;
                spec.hdr.dst_addr = u32::from_ne_bytes(addr.octets());
                mask.hdr.dst_addr = u32::from_ne_bytes(m);
            }
            if let Some(proto) = proto {
                spec.hdr.next_proto_id = proto;
                mask.hdr.next_proto_id = 0xff;
            }
            Ok(IpSpec::V4(spec, mask))
        }
        IpMatch::V6 { src, dst } => {
            let mut spec = dpdk_sys::rte_flow_item_ipv6::default();
            let mut mask = dpdk_sys::rte_flow_item_ipv6::default();
            if let Some((addr, prefix)) = src {
                spec.hdr.src_addr = addr.octets();
                mask.hdr.src_addr = prefix_mask::<16>(prefix)?;
            }
            if let Some((addr, prefix)) = dst {
                spec.hdr.dst_addr = addr.octets();
                mask.hdr.dst_addr = prefix_mask::<16>(prefix)?;
            }
            if let Some(proto) = proto {
                spec.hdr.proto = proto;
                mask.hdr.proto = 0xff;
            }
            Ok(IpSpec::V6(spec, mask))
        }
    }
}

fn l4_spec(l4: L4Match) -> L4Spec {
    // Ports are big-endian in memory.
    let port = |p: Option<u16>| {
        (
            p.map_or(0, u16::to_be),
            if p.is_some() { 0xffff } else { 0 },
        )
    };
    let (src, src_mask) = port(l4.src_port);
    let (dst, dst_mask) = port(l4.dst_port);
    match l4.proto {
        L4Proto::Tcp => {
            let mut spec = dpdk_sys::rte_flow_item_tcp::default();
            let mut mask = dpdk_sys::rte_flow_item_tcp::default();
            (spec.hdr.src_port, spec.hdr.dst_port) = (src, dst);
            (mask.hdr.src_port, mask.hdr.dst_port) = (src_mask, dst_mask);
            L4Spec::Tcp(spec, mask)
        }
        L4Proto::Udp => {
            let mut spec = dpdk_sys::rte_flow_item_udp::default();
            let mut mask = dpdk_sys::rte_flow_item_udp::default();
            (spec.hdr.src_port, spec.hdr.dst_port) = (src, dst);
            (mask.hdr.src_port, mask.hdr.dst_port) = (src_mask, dst_mask);
            L4Spec::Udp(spec, mask)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_mask;

    #[test]
    fn prefix_masks() {
        assert_eq!(prefix_mask::<4>(0).unwrap(), [0, 0, 0, 0]);
        assert_eq!(prefix_mask::<4>(12).unwrap(), [0xff, 0xf0, 0, 0]);
        assert_eq!(prefix_mask::<4>(32).unwrap(), [0xff; 4]);
        assert!(prefix_mask::<4>(33).is_err());
        assert_eq!(prefix_mask::<16>(65).unwrap()[8], 0x80);
    }
}

//! Real ports under the rule manager: [`dpdk::Port`] installs rules with `rte_flow`, and refusals
//! come back typed (a driver without `rte_flow`, every vdev here, is
//! [`RuleError::Unsupported`]).

use std::net::{Ipv4Addr, Ipv6Addr};

use dpdk::{Error, Flow, FlowAction, FlowRule, IpMatch, L4Proto, Port};

use crate::rxq::manager::{FlowPort, RuleError, Sample};
use crate::wire::{ip_proto, FlowKey};

impl FlowPort for Port {
    type Rule = FlowRule;
    type Handle = Flow;

    fn name(&self) -> String {
        format!("port {} ({})", self.id(), self.driver())
    }

    fn insert(&mut self, rule: &FlowRule) -> Result<Flow, RuleError> {
        self.flow_create(rule).map_err(|e| match e {
            Error::Unsupported(_) => RuleError::Unsupported { port: self.name() },
            other => RuleError::Refused {
                port: self.name(),
                message: other.to_string(),
            },
        })
    }

    fn remove(&mut self, handle: Flow) -> Result<(), RuleError> {
        handle.destroy().map_err(|e| RuleError::Refused {
            port: self.name(),
            message: e.to_string(),
        })
    }

    fn subset_rule(&self, group: u32, priority: u32, queues: &[u16]) -> FlowRule {
        // The port's own key (symmetric, chosen at start by pxgw): both directions of a
        // connection still meet on one worker inside a subset (pxgw::worker).
        FlowRule::new(FlowAction::RssKeyed {
            queues: queues.to_vec(),
            key: self.rss_key().unwrap_or(crate::toeplitz::SYMMETRIC_RSS_KEY),
            types: dpdk::RssHash::IP | dpdk::RssHash::TCP | dpdk::RssHash::UDP,
        })
        .group(group)
        .priority(priority)
    }

    fn target_rule(&self, key: &FlowKey, priority: u32, group: u32) -> FlowRule {
        let ip = match (key.src_v4(), key.dst_v4()) {
            (Some(s), Some(d)) => IpMatch::V4 {
                src: Some((Ipv4Addr::from(s), 32)),
                dst: Some((Ipv4Addr::from(d), 32)),
            },
            _ => IpMatch::V6 {
                src: Some((Ipv6Addr::from(key.src), 128)),
                dst: Some((Ipv6Addr::from(key.dst), 128)),
            },
        };
        let proto = if key.proto == ip_proto::UDP {
            L4Proto::Udp
        } else {
            L4Proto::Tcp
        };
        FlowRule::new(FlowAction::Jump(group))
            .priority(priority)
            .ip(ip)
            .l4(proto, Some(key.sport), Some(key.dport))
    }

    fn hairpin_rule(&self, priority: u32, sample: Option<Sample>) -> Result<FlowRule, String> {
        let queues = self.hairpin_rx_queues();
        if queues.is_empty() {
            return Err(match self.hairpin_capability() {
                Err(e) => e.to_string(),
                Ok(_) => "the port was started without hairpin queues".into(),
            });
        }
        let action = match sample {
            None => FlowAction::Queue(queues.start),
            Some(s) => FlowAction::SampleThenQueue {
                queue: queues.start,
                ratio: s.ratio,
                sample_queue: s.queue,
            },
        };
        Ok(FlowRule::new(action).priority(priority))
    }
}

//! Interface and address events from the kernel (rtnetlink), for the path manager: a path whose
//! interface goes down (administratively or by losing its carrier) or whose local address is
//! removed is dropped at once, so its records fail over without waiting for a timeout; when an
//! interface comes up, gains an address or a route appears, waiting paths are tried again.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;

use futures_util::stream::StreamExt;
use rtnetlink::packet_core::NetlinkPayload;
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage};
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::{new_multicast_connection, MulticastGroup};
use tracing::debug;

/// What the interface events are for: the path manager (`path_manager.rs`) implements it, so
/// that this module knows nothing of paths and the dependency points one way.
pub(crate) trait InterfaceEvents: Send + Sync {
    /// An interface named `name`, or a local address `addr`, is gone: paths over it are dropped.
    fn interface_down(&self, name: Option<&str>, addr: Option<IpAddr>);
    /// An interface came up, gained an address or a route: waiting paths are tried now.
    fn interface_up(&self);
    /// Resolves when nobody needs the events any more (the manager stopped, its session ended).
    fn ended(&self) -> impl std::future::Future<Output = ()> + Send;
}

/// What we know of one interface: its name and addresses, and whether it can carry traffic.
#[derive(Default)]
struct Interface {
    name: String,
    addresses: Vec<IpAddr>,
    usable: bool,
}

/// Follows rtnetlink's link and address groups for `manager` until its session ends.
pub(crate) async fn follow(manager: impl InterfaceEvents) -> io::Result<()> {
    let groups = [
        MulticastGroup::Link,
        MulticastGroup::Ipv4Ifaddr,
        MulticastGroup::Ipv6Ifaddr,
        MulticastGroup::Ipv4Route,
        MulticastGroup::Ipv6Route,
    ];
    let (connection, handle, mut messages) = new_multicast_connection(&groups)?;
    tokio::spawn(connection);
    let mut interfaces: HashMap<u32, Interface> = HashMap::new();
    // Today's addresses and links, so an interface that goes down can name its addresses.
    let mut addrs = handle.address().get().execute();
    while let Some(Ok(msg)) = addrs.next().await {
        if let Some(ip) = address_of(&msg) {
            interfaces.entry(msg.header.index).or_default().addresses.push(ip);
        }
    }
    let mut links = handle.link().get().execute();
    while let Some(Ok(msg)) = links.next().await {
        let i = interfaces.entry(msg.header.index).or_default();
        i.name = name_of(&msg).unwrap_or_default();
        i.usable = is_usable(&msg);
    }
    loop {
        let message = tokio::select! {
            m = messages.next() => m,
            _ = manager.ended() => return Ok(()),
        };
        let Some((message, _)) = message else { return Ok(()) };
        let NetlinkPayload::InnerMessage(message) = message.payload else { continue };
        match message {
            RouteNetlinkMessage::NewLink(link) | RouteNetlinkMessage::SetLink(link) => {
                let usable = is_usable(&link);
                let i = interfaces.entry(link.header.index).or_default();
                if let Some(name) = name_of(&link) {
                    i.name = name;
                }
                if i.usable && !usable {
                    debug!("interface {} is down", i.name);
                    interface_gone(&manager, i);
                } else if !i.usable && usable {
                    debug!("interface {} is up", i.name);
                    manager.interface_up();
                }
                i.usable = usable;
            }
            RouteNetlinkMessage::DelLink(link) => {
                if let Some(i) = interfaces.remove(&link.header.index) {
                    interface_gone(&manager, &i);
                }
            }
            RouteNetlinkMessage::NewAddress(msg) => {
                if let Some(ip) = address_of(&msg) {
                    let i = interfaces.entry(msg.header.index).or_default();
                    if !i.addresses.contains(&ip) {
                        i.addresses.push(ip);
                    }
                    manager.interface_up();
                }
            }
            RouteNetlinkMessage::DelAddress(msg) => {
                if let Some(ip) = address_of(&msg) {
                    if let Some(i) = interfaces.get_mut(&msg.header.index) {
                        i.addresses.retain(|a| *a != ip);
                    }
                    manager.interface_down(None, Some(ip));
                }
            }
            // A route appearing (DHCP or an operator finishing an interface's setup) may make
            // a waiting path work: try now rather than at its next backoff.
            RouteNetlinkMessage::NewRoute(_) => manager.interface_up(),
            _ => {}
        }
    }
}

fn interface_gone(manager: &impl InterfaceEvents, i: &Interface) {
    manager.interface_down(Some(&i.name), None);
    for a in &i.addresses {
        manager.interface_down(None, Some(*a));
    }
}

/// Up and with a carrier (an interface without one carries nothing, e.g. Wi-Fi out of range).
fn is_usable(link: &LinkMessage) -> bool {
    link.header.flags.contains(LinkFlags::Up) && link.header.flags.contains(LinkFlags::LowerUp)
}

fn name_of(link: &LinkMessage) -> Option<String> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n.clone()),
        _ => None,
    })
}

/// The interface's own address (IFA_LOCAL where given: on point-to-point links IFA_ADDRESS is
/// the peer's).
fn address_of(msg: &AddressMessage) -> Option<IpAddr> {
    let local = msg.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    local.or_else(|| {
        msg.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    })
}

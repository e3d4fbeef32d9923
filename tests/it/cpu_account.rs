//! Issue 30, scope 3: every kind of work a peer sends at its will is
//! charged to one account of CPU per peer (`net::cpu_ledger`), not only its
//! requests: a peer whose account is spent has its data streams and its
//! summaries refused too, and one that goes on is cut off, a flood of CPU
//! reported against it. Real swarms on 127.0.0.1 in this process (mDNS
//! off); the account is spent with `NetHandle::charge_cpu`, as the node's
//! handlers spend it for a costly answer, so each test reaches its path
//! without first flooding another.

use std::time::{Duration, Instant};

use gleaner::data::{serve, Catalog};
use gleaner::model::budget::Overrun;
use gleaner::model::ids::PoolName;
use gleaner::model::state::State;
use gleaner::net::{start, LocalStatus, NetConfig, NetEvent, NetHandle};
use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::net_pool::{dialable_addr, wait_for};
use crate::rogue_pool::consumer::ask_unoffered;

/// How long a data stream's answer is waited for.
const ASK_WAIT: Duration = Duration::from_secs(5);

/// More CPU than any account holds (a burst of 2 s, a debt of 2 s more):
/// the peer's account is at its deepest debt, some 80 s from credit.
const SPENT: Duration = Duration::from_secs(60);

/// A swarm on 127.0.0.1; the floods reported against its peers come out of
/// `overruns`, its other events are dropped; cancelled when dropped.
struct Peer {
    net: NetHandle,
    addr: Multiaddr,
    overruns: mpsc::UnboundedReceiver<(PeerId, Overrun)>,
    cancel: CancellationToken,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn peer(cfg: NetConfig) -> Peer {
    let cancel = CancellationToken::new();
    let (net, mut events, event_loop) =
        start(Keypair::generate_ed25519(), cfg, cancel.clone()).unwrap();
    tokio::spawn(event_loop.run());
    let (tx, overruns) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let NetEvent::Overrun { peer, what } = event {
                let _ = tx.send((peer, what));
            }
        }
    });
    let addr = dialable_addr(&net).await;
    Peer {
        net,
        addr,
        overruns,
        cancel,
    }
}

fn config(pool: &str) -> NetConfig {
    let mut cfg = NetConfig::loopback(&PoolName::new(pool).unwrap());
    cfg.announce_interval = Duration::from_millis(300);
    cfg
}

/// Whether `from` reported a flood of `what` by `peer` within `limit`.
async fn reported(from: &mut Peer, peer: PeerId, what: Overrun, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match tokio::time::timeout(left, from.overruns.recv()).await {
            Ok(Some(got)) if got == (peer, what) => return true,
            Ok(Some(_)) => {}
            _ => return false,
        }
    }
    false
}

/// A host whose account is spent opens data streams at a consumer, within
/// its budget of opens (300 at once): each is dropped unread, and past the
/// 64 drops forgiven the host is cut off, a flood of CPU reported against
/// it. Before data streams were charged to the account, every one was
/// answered and nothing was reported. Another host is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_cpu_account_is_spent_has_its_data_streams_dropped_then_is_cut_off() {
    let mut consumer = peer(config("cpu-streams")).await;
    let tracker = TaskTracker::new();
    tracker.spawn(serve(
        consumer.net.clone(),
        Catalog::new(),
        tracker.clone(),
        consumer.cancel.clone(),
    ));
    let (host, other) = (
        peer(config("cpu-streams")).await,
        peer(config("cpu-streams")).await,
    );
    host.net.dial(consumer.addr.clone()).await.unwrap();
    other.net.dial(consumer.addr.clone()).await.unwrap();
    let to = consumer.net.peer_id();
    assert!(
        ask_unoffered(&host.net, to, 0, ASK_WAIT).await,
        "served while in credit"
    );

    consumer.net.charge_cpu(&host.net.peer_id(), SPENT);
    let mut answered = 0;
    for i in 1..=200u64 {
        answered += u32::from(ask_unoffered(&host.net, to, i, ASK_WAIT).await);
        if let Ok((peer, what)) = consumer.overruns.try_recv() {
            assert_eq!(
                (peer, what),
                (host.net.peer_id(), Overrun::Cpu),
                "after {i}"
            );
            assert_eq!(answered, 0, "streams answered while in debt");
            assert!(i > 64, "cut off after {i} streams, within the 64 forgiven");
            assert!(
                ask_unoffered(&other.net, to, 1, ASK_WAIT).await,
                "another host refused"
            );
            return;
        }
    }
    let late = reported(
        &mut consumer,
        host.net.peer_id(),
        Overrun::Cpu,
        Duration::from_secs(2),
    )
    .await;
    panic!("200 data streams in debt: {answered} answered, a flood of CPU reported: {late}");
}

fn status(cpus: u32) -> LocalStatus {
    LocalStatus {
        logical_cpus: cpus,
        memory_mib: 1024,
        benchmark_score: 1000,
        relative_power_milli: 500,
        state: State::S1,
        slot_free: true,
    }
}

/// `of`'s logical CPUs as `at` lists it, if it does.
async fn listed_cpus(at: &NetHandle, of: PeerId) -> Option<u32> {
    let members = at.members().await.ok()?;
    members
        .iter()
        .find(|m| m.peer == of)
        .map(|m| m.status.logical_cpus)
}

/// A member whose account is spent publishes summaries within its budget
/// of them (32 at once, then 4 a second): none is taken (the one listed
/// before stays), and past the 64 drops forgiven it is cut off, a flood of
/// CPU reported against it, while a third member's change is heard. Before
/// summaries were charged to the account, each was taken and nothing was
/// reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_cpu_account_is_spent_has_its_summaries_ignored_then_is_cut_off() {
    let mut a = peer(config("cpu-summaries")).await;
    let mut cfg = config("cpu-summaries");
    cfg.bootstrap = vec![a.addr.clone()];
    let (b, c) = (peer(cfg.clone()).await, peer(cfg).await);
    let (bid, cid) = (b.net.peer_id(), c.net.peer_id());
    // Both listed as they first said (gossipsub's mesh takes a heartbeat).
    let listed = wait_for(Duration::from_secs(20), || {
        let (a, b, c) = (a.net.clone(), b.net.clone(), c.net.clone());
        async move {
            b.announce(status(1)).await.ok()?;
            c.announce(status(1)).await.ok()?;
            let both = (listed_cpus(&a, bid).await?, listed_cpus(&a, cid).await?);
            (both == (1, 1)).then_some(())
        }
    })
    .await;
    assert!(listed.is_some(), "A never listed B and C");

    a.net.charge_cpu(&bid, SPENT);
    // Within B's budget of summaries: 4 a second, for up to 40 s.
    let until = Instant::now() + Duration::from_secs(40);
    let mut sent = 0u32;
    let mut cut = false;
    while Instant::now() < until && !cut {
        sent += 1;
        b.net.announce(status(2 + sent % 2)).await.unwrap();
        c.net.announce(status(2 + sent % 2)).await.unwrap();
        cut = reported(&mut a, bid, Overrun::Cpu, Duration::from_millis(260)).await;
    }
    assert_eq!(
        listed_cpus(&a.net, bid).await,
        Some(1),
        "a summary of B taken in debt"
    );
    assert!(
        matches!(listed_cpus(&a.net, cid).await, Some(2 | 3)),
        "C's change not heard"
    );
    assert!(cut, "{sent} summaries in debt, no flood of CPU reported");
    assert!(sent > 64, "cut off after {sent}, within the 64 forgiven");
}

//! The live feed: one subscription to the gate's bus, turned into numbered console events that
//! every open page receives over Server-Sent Events.
//!
//! The feed keeps the pending requests (rendered once, as cards), the recent decisions, and a
//! ring of the last events. An event's SSE id is `<epoch>-<seq>`: a page that reconnects with
//! `Last-Event-ID` gets exactly the events it missed while they are still in the ring, and a
//! full snapshot otherwise (a restarted console has another epoch; a feed that lagged behind the
//! bus re-reads the gate and starts a new floor).

use crate::render;
use serde::Serialize;
use signoff::{ConfirmationRequest, ConfirmationResolved, Event, Gate, Subscription, SubscriptionCloser};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::broadcast;
use uuid::Uuid;

/// How many events a reconnecting page can catch up on without a snapshot.
const RING: usize = 4096;

/// A pending request, rendered.
#[derive(Debug, Serialize)]
pub(crate) struct Card {
    pub id: Uuid,
    pub session: String,
    pub deadline_ms: u64,
    #[serde(skip)]
    pub created_at_ms: u64,
    /// The client label the card shows ([`render::client_label`]), for its history row.
    #[serde(skip)]
    pub client: Option<String>,
    pub html: String,
}

/// A decided request, rendered.
#[derive(Debug, Serialize)]
pub(crate) struct Decided {
    pub id: Uuid,
    pub outcome: &'static str,
    pub responder: Option<String>,
    pub html: String,
}

#[derive(Debug, Clone)]
pub(crate) enum Change {
    Request(Arc<Card>),
    Resolved(Arc<Decided>),
    /// The feed re-read the gate: pages must take a fresh snapshot.
    Resync,
}

#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub seq: u64,
    pub change: Change,
}

struct State {
    seq: u64,
    /// Events after `floor` are all in `ring`.
    floor: u64,
    ring: VecDeque<Item>,
    pending: HashMap<Uuid, Arc<Card>>,
    order: BTreeMap<(u64, Uuid), ()>,
    history: VecDeque<Arc<Decided>>,
    history_by_id: HashMap<Uuid, Arc<Decided>>,
}

pub(crate) struct Feed {
    epoch: String,
    history_len: usize,
    state: Mutex<State>,
    tx: broadcast::Sender<Item>,
    closer: SubscriptionCloser,
}

/// What a page receives first.
pub(crate) enum Start {
    Snapshot(Snapshot),
    /// The events after `after`, the last one the page saw.
    Replay {
        after: u64,
        items: Vec<Item>,
    },
}

#[derive(Serialize)]
pub(crate) struct Snapshot {
    pub now_ms: u64,
    pub pending: Vec<Arc<Card>>,
    pub history: Vec<Arc<Decided>>,
    #[serde(skip)]
    pub seq: u64,
}

impl Feed {
    /// Subscribes to the gate (as an approver: a console is someone who can answer) and starts
    /// the task that feeds the console. Must be called within a tokio runtime. The task stops
    /// when the feed is dropped.
    pub fn start(gate: Gate, history_len: usize) -> Arc<Feed> {
        let sub = gate.subscribe();
        let (tx, _) = broadcast::channel(RING);
        let epoch = {
            let id = Uuid::new_v4().simple().to_string();
            id[..12].to_owned()
        };
        let feed = Arc::new(Feed {
            epoch,
            history_len: history_len.max(1),
            state: Mutex::new(State {
                seq: 0,
                floor: 0,
                ring: VecDeque::new(),
                pending: HashMap::new(),
                order: BTreeMap::new(),
                history: VecDeque::new(),
                history_by_id: HashMap::new(),
            }),
            tx,
            closer: sub.closer(),
        });
        feed.reload(&gate);
        tokio::spawn(run(Arc::downgrade(&feed), gate, sub));
        feed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn event_id(&self, seq: u64) -> String {
        format!("{}-{seq}", self.epoch)
    }

    /// Re-reads every pending request from the gate, in pages.
    fn reload(&self, gate: &Gate) {
        let mut cards = Vec::new();
        let mut after = None;
        loop {
            let page = gate.pending_page(after.as_ref(), 500);
            cards.extend(page.requests.iter().map(|r| card(gate, r)));
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let mut s = self.lock();
        s.pending.clear();
        s.order.clear();
        for c in cards {
            s.order.insert((c.created_at_ms, c.id), ());
            s.pending.insert(c.id, c);
        }
        s.seq += 1;
        s.floor = s.seq;
        s.ring.clear();
        let item = Item { seq: s.seq, change: Change::Resync };
        let _ = self.tx.send(item);
    }

    fn apply(&self, gate: &Gate, event: Event) {
        let change = match event {
            Event::ConfirmationRequest(r) => {
                let c = card(gate, &r);
                let mut s = self.lock();
                if s.pending.contains_key(&c.id) || s.history_by_id.contains_key(&c.id) {
                    return;
                }
                s.order.insert((c.created_at_ms, c.id), ());
                s.pending.insert(c.id, c.clone());
                self.push(&mut s, Change::Request(c));
                return;
            }
            Event::ConfirmationResolved(r) => {
                let client = self.lock().pending.get(&r.id).and_then(|c| c.client.clone());
                Arc::new(decided(&r, client.as_deref()))
            }
            Event::ConfirmationResponse(_) | Event::ConfirmationTimeout(_) => return,
        };
        let mut s = self.lock();
        if let Some(c) = s.pending.remove(&change.id) {
            s.order.remove(&(c.created_at_ms, c.id));
        }
        if s.history_by_id.contains_key(&change.id) {
            return;
        }
        s.history_by_id.insert(change.id, change.clone());
        s.history.push_front(change.clone());
        while s.history.len() > self.history_len {
            if let Some(old) = s.history.pop_back() {
                s.history_by_id.remove(&old.id);
            }
        }
        self.push(&mut s, Change::Resolved(change));
    }

    fn push(&self, s: &mut State, change: Change) {
        s.seq += 1;
        let item = Item { seq: s.seq, change };
        s.ring.push_back(item.clone());
        while s.ring.len() > RING {
            s.ring.pop_front();
            s.floor += 1;
        }
        let _ = self.tx.send(item);
    }

    /// What a page starts with, and the live events after it. `resume` is the `Last-Event-ID`
    /// it sent (or the id the page was rendered at).
    pub fn attach(&self, resume: Option<&str>) -> (Start, broadcast::Receiver<Item>) {
        let s = self.lock();
        let rx = self.tx.subscribe();
        let after = resume
            .and_then(|r| r.split_once('-'))
            .filter(|(epoch, _)| *epoch == self.epoch)
            .and_then(|(_, seq)| seq.parse::<u64>().ok())
            .filter(|seq| *seq >= s.floor && *seq <= s.seq);
        let start = match after {
            Some(seq) => Start::Replay { after: seq, items: s.ring.iter().filter(|i| i.seq > seq).cloned().collect() },
            None => Start::Snapshot(Self::snapshot_of(&s)),
        };
        (start, rx)
    }

    pub fn snapshot(&self) -> Snapshot {
        Self::snapshot_of(&self.lock())
    }

    fn snapshot_of(s: &State) -> Snapshot {
        Snapshot {
            now_ms: signoff::event::now_ms(),
            pending: s.order.keys().filter_map(|(_, id)| s.pending.get(id).cloned()).collect(),
            history: s.history.iter().cloned().collect(),
            seq: s.seq,
        }
    }

    /// How `id` was decided, if the console saw it.
    pub fn decided(&self, id: &Uuid) -> Option<Arc<Decided>> {
        self.lock().history_by_id.get(id).cloned()
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.closer.close();
    }
}

fn card(gate: &Gate, r: &Arc<ConfirmationRequest>) -> Arc<Card> {
    Arc::new(Card {
        id: r.id,
        session: r.session_id.to_string(),
        deadline_ms: r.deadline_ms,
        created_at_ms: r.created_at_ms,
        client: render::client_label(r),
        html: render::card(gate, r),
    })
}

fn decided(r: &ConfirmationResolved, client: Option<&str>) -> Decided {
    Decided {
        id: r.id,
        outcome: r.outcome.as_str(),
        responder: r.responder.clone(),
        html: render::history_row(r, client),
    }
}

async fn run(feed: Weak<Feed>, gate: Gate, mut sub: Subscription) {
    while let Some(next) = sub.recv().await {
        let Some(feed) = feed.upgrade() else { break };
        match next {
            Ok(event) => feed.apply(&gate, event),
            // Missed events: re-read what is pending; pages take a fresh snapshot. Decisions
            // missed meanwhile are not in the history (the audit log has them).
            Err(_lagged) => feed.reload(&gate),
        }
    }
}

//! The session's TCP connections: the one place that finds a connection by its ID.

use crate::event::ConnId;

use super::conn::Connection;

/// Connections of a session, including finished ones until they are pruned (a few are kept for
/// reports).
#[derive(Debug, Default)]
pub(super) struct Connections {
    list: Vec<Connection>,
    /// Finished connections whose end was reported to the application (`Event::ConnectionClosed`,
    /// once each); pruned with them.
    reported: Vec<ConnId>,
}

impl Connections {
    pub(super) fn get(&self, id: ConnId) -> Option<&Connection> {
        self.list.iter().find(|c| c.id == id)
    }

    pub(super) fn get_mut(&mut self, id: ConnId) -> Option<&mut Connection> {
        self.list.iter_mut().find(|c| c.id == id)
    }

    /// The session's first connection (ID 0): its secret names the session for rejoins.
    pub(super) fn initial(&self) -> Option<&Connection> {
        self.get(0)
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, Connection> {
        self.list.iter()
    }

    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    pub(super) fn add(&mut self, conn: Connection) {
        // Exactly one more: a `Connection` is ~860 bytes and most sessions have one, which a
        // plain `push` would give room for four.
        self.list.reserve_exact(1);
        self.list.push(conn);
    }

    /// Removes connection `id` (to hand it to another session).
    pub(super) fn take(&mut self, id: ConnId) -> Option<Connection> {
        let idx = self.list.iter().position(|c| c.id == id)?;
        self.reported.retain(|r| *r != id);
        Some(self.list.remove(idx))
    }

    /// Finished connections not reported yet, now counted as reported.
    pub(super) fn take_unreported_finished(&mut self) -> Vec<ConnId> {
        let ids: Vec<ConnId> =
            self.list.iter().filter(|c| c.is_finished() && !self.reported.contains(&c.id)).map(|c| c.id).collect();
        self.reported.extend_from_slice(&ids);
        ids
    }

    /// Connections not finished yet.
    pub(super) fn live(&self) -> usize {
        self.list.iter().filter(|c| !c.is_finished()).count()
    }

    pub(super) fn all_finished(&self) -> bool {
        self.list.iter().all(Connection::is_finished)
    }

    /// Forgets the oldest finished connections beyond a few kept for reports, so a client that
    /// joins and drops connections in a loop cannot grow the table (and every scan of it). The
    /// initial connection stays: its secret names the session.
    pub(super) fn prune_finished(&mut self) {
        const KEEP_FINISHED: usize = 8;
        let reported = &self.reported;
        let finished = |c: &Connection| reported.contains(&c.id) && c.is_finished() && (c.is_gone() || c.tx.is_empty());
        let mut excess = self.list.iter().filter(|c| finished(c)).count().saturating_sub(KEEP_FINISHED);
        if excess > 0 {
            self.list.retain(|c| {
                if excess > 0 && finished(c) && c.id != 0 {
                    excess -= 1;
                    return false;
                }
                true
            });
            let list = &self.list;
            self.reported.retain(|id| list.iter().any(|c| c.id == *id));
        }
    }
}

impl<'a> IntoIterator for &'a Connections {
    type Item = &'a Connection;
    type IntoIter = std::slice::Iter<'a, Connection>;

    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

impl<'a> IntoIterator for &'a mut Connections {
    type Item = &'a mut Connection;
    type IntoIter = std::slice::IterMut<'a, Connection>;

    fn into_iter(self) -> Self::IntoIter {
        self.list.iter_mut()
    }
}

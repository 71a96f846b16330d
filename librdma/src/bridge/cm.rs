//! The connection manager's table on the data-plane thread: which id listens on which port
//! of which device, which id a connection belongs to, and the translation of the stacks'
//! connection manager events into rdma_cm's (`cma_iw_handler`'s mapping in Linux: an MPA
//! reject or refused TCP connection is REJECTED/-ECONNREFUSED, a timeout UNREACHABLE, any
//! other failure CONNECT_ERROR; a closed connection DISCONNECTED, with the QP flushed as
//! Linux siw does).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use dataplane::rdma::{CmError, CmEvent, RdmaHandler};
use iwarp::verbs::{LlpEvent, ModifyQp, QpId, QpState};
use rustc_hash::FxHashMap;
use tcp::{CloseReason, ConnId, State};

use crate::shared::cm::{CmIdShared, CmPending, CmRaw};

/// First port handed out for binds to port 0.
const EPHEMERAL_FIRST: u16 = 40000;

#[derive(Debug)]
struct ConnTrack {
    id: Arc<CmIdShared>,
    qp: Option<QpId>,
}

/// Listeners and connections of the rdma_cm ids.
#[derive(Debug, Default)]
pub struct CmTable {
    listeners: FxHashMap<(usize, u16), Arc<CmIdShared>>,
    conns: FxHashMap<(usize, ConnId), ConnTrack>,
    by_qp: FxHashMap<(usize, QpId), ConnId>,
    /// Connections whose id was destroyed while they were open, closing by themselves.
    released: Vec<(usize, ConnId)>,
    next_port: u16,
}

fn cm_errno(e: CmError) -> i32 {
    match e {
        CmError::Tcp(_) => libc::EADDRINUSE,
        CmError::NoConnection => libc::EINVAL,
        CmError::Verbs(v) => crate::convert::errno_of(v),
        CmError::Mpa(_) => libc::EINVAL,
    }
}

impl CmTable {
    /// A port for a bind to port 0: one no listener of this process uses.
    pub fn ephemeral_port(&mut self) -> u16 {
        loop {
            if self.next_port < EPHEMERAL_FIRST {
                self.next_port = EPHEMERAL_FIRST;
            }
            let p = self.next_port;
            self.next_port = self.next_port.wrapping_add(1);
            if !self.listeners.keys().any(|(_, port)| *port == p) {
                return p;
            }
        }
    }

    /// `id` listens on `addr` of device `dev` (a wildcard address: any of the device's
    /// addresses, of either family; EADDRINUSE when something already listens on the port).
    pub fn listen(
        &mut self,
        dev: usize,
        h: &mut RdmaHandler,
        addr: SocketAddr,
        backlog: usize,
        id: &Arc<CmIdShared>,
    ) -> Result<(), i32> {
        if self.listeners.contains_key(&(dev, addr.port())) {
            return Err(libc::EADDRINUSE);
        }
        h.listen_pending(addr, backlog).map_err(cm_errno)?;
        self.listeners.insert((dev, addr.port()), Arc::clone(id));
        Ok(())
    }

    /// `id` stops listening on `port` of `dev` (the port is free again at once).
    pub fn unlisten(&mut self, dev: usize, h: &mut RdmaHandler, port: u16, id: &Arc<CmIdShared>) {
        if self
            .listeners
            .get(&(dev, port))
            .is_some_and(|l| Arc::ptr_eq(l, id))
        {
            self.listeners.remove(&(dev, port));
            h.unlisten(port);
        }
    }

    /// Connects `qp` of `id` from `local` to `remote`.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &mut self,
        dev: usize,
        h: &mut RdmaHandler,
        local: IpAddr,
        remote: SocketAddr,
        qp: QpId,
        private_data: &[u8],
        ird_ord: (u16, u16),
        id: &Arc<CmIdShared>,
    ) -> Result<ConnId, i32> {
        let conn = h
            .connect_qp(local, remote, qp, private_data, Some(ird_ord))
            .map_err(cm_errno)?;
        self.conns.insert(
            (dev, conn),
            ConnTrack {
                id: Arc::clone(id),
                qp: Some(qp),
            },
        );
        self.by_qp.insert((dev, qp), conn);
        Ok(conn)
    }

    /// Accepts the request `conn` with `qp`, offering `ird_ord` (IRD, ORD) in the Reply.
    pub fn accept(
        &mut self,
        dev: usize,
        h: &mut RdmaHandler,
        conn: ConnId,
        qp: QpId,
        private_data: &[u8],
        ird_ord: (u16, u16),
    ) -> Result<(), i32> {
        let t = self.conns.get_mut(&(dev, conn)).ok_or(libc::EINVAL)?;
        h.accept_with_qp(conn, qp, private_data, Some(ird_ord))
            .map_err(cm_errno)?;
        t.qp = Some(qp);
        self.by_qp.insert((dev, qp), conn);
        Ok(())
    }

    /// Rejects the request `conn`.
    pub fn reject(
        &mut self,
        dev: usize,
        h: &mut RdmaHandler,
        conn: ConnId,
        private_data: &[u8],
    ) -> Result<(), i32> {
        h.reject(conn, private_data).map_err(cm_errno)?;
        self.conns.remove(&(dev, conn));
        Ok(())
    }

    /// Graceful disconnect of `conn`; nothing to do once it is gone.
    pub fn disconnect(&mut self, dev: usize, h: &mut RdmaHandler, conn: ConnId) {
        if self.conns.contains_key(&(dev, conn)) {
            if let Err(e) = h.disconnect(conn) {
                log::debug!("disconnect {conn:?}: {e}");
            }
        }
    }

    /// The id of `conn` is destroyed: a live connection is released (what it sent still
    /// arrives, then TCP closes gracefully: [`RdmaHandler::release`]), a pending request
    /// rejected, and its events are no longer routed.
    pub fn forget(&mut self, dev: usize, h: &mut RdmaHandler, conn: ConnId) {
        if let Some(t) = self.conns.remove(&(dev, conn)) {
            if let Some(qp) = t.qp {
                self.by_qp.remove(&(dev, qp));
                if h.tcp().state(conn).is_some() {
                    log::debug!("id of {conn:?} destroyed with its connection open: released");
                    self.released.push((dev, conn));
                }
                let _ = h.release(conn);
            } else {
                let _ = h.reject(conn, &[]);
            }
        }
    }

    /// `qp` is destroyed (its connection, if any, is being reset by the RNIC).
    pub fn qp_destroyed(&mut self, dev: usize, qp: QpId) {
        self.by_qp.remove(&(dev, qp));
    }

    /// The connection `qp` carries.
    pub fn conn_of(&self, dev: usize, qp: QpId) -> Option<ConnId> {
        self.by_qp.get(&(dev, qp)).copied()
    }

    /// Closes every connection of device `dev` in order (RDMAP §6.2: queued work drains,
    /// then TCP sends its FIN), as Linux siw's socket close does when a program exits.
    pub fn close_all(&mut self, dev: usize, h: &mut RdmaHandler) {
        for c in self.conns_of(dev, h) {
            let _ = h.disconnect(c);
        }
    }

    /// Whether every connection of device `dev` delivered what it had to send: gone, or its
    /// FIN acknowledged.
    pub fn all_closed(&mut self, dev: usize, h: &RdmaHandler) -> bool {
        self.conns_of(dev, h).into_iter().all(|c| {
            matches!(
                h.tcp().state(c),
                None | Some(State::FinWait2 | State::TimeWait)
            )
        })
    }

    /// The connections of device `dev`: those of live ids and those released and not
    /// closed yet (which the process still waits for at its exit).
    fn conns_of(&mut self, dev: usize, h: &RdmaHandler) -> Vec<ConnId> {
        self.released.retain(|&(_, c)| h.tcp().state(c).is_some());
        self.conns
            .keys()
            .chain(self.released.iter())
            .filter(|(d, _)| *d == dev)
            .map(|(_, c)| *c)
            .collect()
    }

    /// Aborts every connection of device `dev` (a Terminate and a reset).
    pub fn abort_all(&mut self, dev: usize, h: &mut RdmaHandler) {
        for c in self.conns_of(dev, h) {
            let _ = h.abort(c);
        }
    }

    /// Routes the connection manager events of device `dev` to the ids' channels.
    pub fn route_events(&mut self, dev: usize, h: &mut RdmaHandler) {
        while let Some(ev) = h.poll_cm_event() {
            match ev {
                CmEvent::Request {
                    id: conn,
                    local,
                    remote,
                    private_data,
                    ird_ord,
                } => self.request(dev, h, conn, local, remote, private_data, ird_ord),
                CmEvent::Established { id, negotiated, .. } => self.post(
                    dev,
                    id,
                    CmRaw::Established {
                        private_data: negotiated.private_data,
                        ird: negotiated.ird,
                        ord: negotiated.ord,
                    },
                ),
                CmEvent::Rejected {
                    id, private_data, ..
                } => self.finish(
                    dev,
                    id,
                    CmRaw::Rejected {
                        private_data,
                        status: -libc::ECONNREFUSED,
                    },
                ),
                CmEvent::ConnectError {
                    id, llp, reason, ..
                } => {
                    log::debug!("connection {id:?} failed: {reason}");
                    self.finish(dev, id, connect_failure(llp));
                }
                CmEvent::RequestWithdrawn { id } => {
                    self.finish(dev, id, CmRaw::ConnectError(-libc::ECONNRESET))
                }
                CmEvent::Disconnected { id, qp, .. } => {
                    // Like siw: the closed connection's QP goes to Error, which flushes what
                    // is still posted (rping's CQ thread waits for that flush).
                    let rnic = h.rnic_mut();
                    // The stream is closed, which ends Closing (VERBS-00 §6.2.5) and
                    // Terminate (§6.2.3: after a Terminate the QP reaches Error once the
                    // LLP is closed; no Modify QP may move it there).
                    if rnic
                        .query_qp(qp)
                        .is_ok_and(|a| matches!(a.state, QpState::Closing | QpState::Terminate))
                    {
                        let _ = rnic.handle_llp_event(qp, LlpEvent::Closed);
                    }
                    let _ = rnic.modify_qp(qp, ModifyQp::to(QpState::Error));
                    self.finish(dev, id, CmRaw::Disconnected);
                }
                CmEvent::ConnectRequest { id, .. } => {
                    log::warn!("connection {id:?}: request on a listener with a QP template");
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn request(
        &mut self,
        dev: usize,
        h: &mut RdmaHandler,
        conn: ConnId,
        local: SocketAddr,
        remote: SocketAddr,
        private_data: Vec<u8>,
        ird_ord: Option<(u16, u16)>,
    ) {
        let Some(listener) = self
            .listeners
            .get(&(dev, local.port()))
            .filter(|l| !l.is_destroyed())
            .cloned()
        else {
            let _ = h.reject(conn, &[]);
            return;
        };
        let channel = listener.channel();
        let child = CmIdShared::new(Arc::clone(&channel));
        self.conns.insert(
            (dev, conn),
            ConnTrack {
                id: Arc::clone(&child),
                qp: None,
            },
        );
        channel.push(CmPending {
            id: child,
            listener: Some(listener),
            kind: CmRaw::ConnectRequest {
                dev,
                lane: usize::from(h.lane().lane),
                conn,
                local,
                remote,
                private_data,
                ird_ord,
            },
        });
    }

    fn post(&self, dev: usize, conn: ConnId, kind: CmRaw) {
        if let Some(t) = self.conns.get(&(dev, conn)) {
            t.id.post(kind);
        }
    }

    /// Posts the last event of `conn` and forgets it.
    fn finish(&mut self, dev: usize, conn: ConnId, kind: CmRaw) {
        if let Some(t) = self.conns.remove(&(dev, conn)) {
            if let Some(qp) = t.qp {
                if self.by_qp.get(&(dev, qp)) == Some(&conn) {
                    self.by_qp.remove(&(dev, qp));
                }
            }
            t.id.post(kind);
        }
    }
}

/// rdma_cm's report of a connection that could not be set up.
fn connect_failure(llp: Option<CloseReason>) -> CmRaw {
    match llp {
        Some(CloseReason::Refused) => CmRaw::Rejected {
            private_data: Vec::new(),
            status: -libc::ECONNREFUSED,
        },
        Some(CloseReason::Reset) => CmRaw::Rejected {
            private_data: Vec::new(),
            status: -libc::ECONNRESET,
        },
        Some(CloseReason::TimedOut) => CmRaw::Unreachable,
        Some(_) => CmRaw::ConnectError(-libc::ECONNRESET),
        None => CmRaw::ConnectError(-libc::EPROTO),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_and_timed_out_connects_map_like_linux_iwarp() {
        assert!(matches!(
            connect_failure(Some(CloseReason::Refused)),
            CmRaw::Rejected { status, .. } if status == -libc::ECONNREFUSED
        ));
        assert_eq!(
            connect_failure(Some(CloseReason::TimedOut)),
            CmRaw::Unreachable
        );
        assert_eq!(connect_failure(None), CmRaw::ConnectError(-libc::EPROTO));
    }
}

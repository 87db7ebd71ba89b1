//! The client's connection-level receive window, as the splice keeps it when cri-bridge writes
//! DATA of its own beside the runtime's (RFC 9113 §6.9).
//!
//! The runtime counts the window from the client's WINDOW_UPDATEs it receives; the client
//! counts it from all the DATA it receives. Each byte cri-bridge writes itself is owed to the
//! runtime's count: it is repaid by holding back as much of the client's next connection
//! WINDOW_UPDATEs. Until then the runtime may believe in more window than the client has; its
//! DATA beyond the client's window waits here, which [`OWN_DATA_CAP`] bounds.

/// Most of cri-bridge's own DATA unrepaid at once: also the most of the runtime's DATA the
/// splice may hold for a client's window.
pub const OWN_DATA_CAP: i64 = 256 << 10;

/// The protocol's initial window (RFC 9113 §6.9.2).
pub const INITIAL_WINDOW: i64 = 65_535;

#[derive(Debug)]
pub struct ClientWindow {
    /// What the client will still take on the connection.
    window: i64,
    /// Own DATA not yet repaid to the runtime's count.
    unrepaid: i64,
}

impl Default for ClientWindow {
    fn default() -> Self {
        ClientWindow { window: INITIAL_WINDOW, unrepaid: 0 }
    }
}

impl ClientWindow {
    /// The client granted `increment` on the connection: what is passed on to the runtime.
    pub fn granted(&mut self, increment: u32) -> u32 {
        let increment = i64::from(increment);
        self.window += increment;
        let repaid = increment.min(self.unrepaid);
        self.unrepaid -= repaid;
        (increment - repaid) as u32
    }

    /// Whether `length` bytes of the runtime's DATA fit the client's window now.
    pub fn fits(&self, length: usize) -> bool {
        length as i64 <= self.window
    }

    /// How many bytes of cri-bridge's own DATA may be written now.
    pub fn own_room(&self) -> usize {
        self.window.min(OWN_DATA_CAP - self.unrepaid).max(0) as usize
    }

    /// `length` bytes of the runtime's DATA were written to the client.
    pub fn sent(&mut self, length: usize) {
        self.window -= length as i64;
    }

    /// `length` bytes of cri-bridge's own DATA were written to the client.
    pub fn sent_own(&mut self, length: usize) {
        self.window -= length as i64;
        self.unrepaid += length as i64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runtime's count never exceeds the client's window plus what waits here.
    #[test]
    fn own_data_is_repaid_before_the_runtime_sees_a_grant() {
        let mut client = ClientWindow::default();
        let mut runtime_view = INITIAL_WINDOW;
        client.sent_own(1000);
        assert_eq!(client.own_room(), (INITIAL_WINDOW - 1000) as usize);
        // The runtime may still send 65,535: 1,000 of it waits for the client's grant.
        assert!(!client.fits(INITIAL_WINDOW as usize));
        let passed = client.granted(600);
        assert_eq!(passed, 0);
        let passed = client.granted(1000);
        assert_eq!(passed, 600);
        runtime_view += i64::from(passed);
        assert_eq!(runtime_view, client.window);
        assert_eq!(client.own_room(), client.window as usize);
    }
}

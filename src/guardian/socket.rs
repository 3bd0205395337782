//! The guardian's end of the socket pair and lc-cli's: lines that never
//! block the sender, and one descriptor passed along with a line
//! (`SCM_RIGHTS`), since the guardian has its own table of descriptors,
//! copied before the one it keeps (a PostgreSQL connection) existed.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Room for one `cmsghdr` and a few descriptors, aligned as `cmsghdr` is.
#[repr(C, align(8))]
struct Control([u8; 128]);

/// Sends `line` without blocking and without SIGPIPE, with `fd` attached
/// if given. A full socket (a stopped guardian) is an error, the line lost.
pub(super) fn send(
    sock: BorrowedFd<'_>,
    line: &[u8],
    fd: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let iov = libc::iovec {
        iov_base: line.as_ptr() as *mut libc::c_void,
        iov_len: line.len(),
    };
    let mut control = Control([0; 128]);
    // SAFETY: a zeroed msghdr is valid (no iovec, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &iov as *const libc::iovec as *mut libc::iovec;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        let int = std::mem::size_of::<libc::c_int>() as u32;
        msg.msg_control = control.0.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE and CMSG_LEN only compute sizes.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(int) } as _;
        // SAFETY: the control buffer is large enough and aligned for one
        // header and one descriptor; CMSG_FIRSTHDR points into it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(int) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd.as_raw_fd());
        }
    }
    // SAFETY: msg points at live buffers for the duration of the call.
    let sent = unsafe {
        libc::sendmsg(
            sock.as_raw_fd(),
            &msg,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    match sent {
        n if n < 0 => Err(io::Error::last_os_error()),
        n if n as usize == line.len() => Ok(()),
        _ => Err(io::Error::new(io::ErrorKind::WriteZero, "line cut short")),
    }
}

/// What came with a read besides the bytes.
#[derive(Debug, Default)]
pub(super) struct Extras {
    /// A descriptor passed with them (a further one is closed).
    pub fd: Option<OwnedFd>,
    /// The sender's pid, where the socket passes credentials.
    pub pid: Option<i32>,
}

/// The guardian's side: receives bytes into `buf` without blocking (0:
/// the other end closed), and what came with them. Bytes of two senders
/// never arrive in one read (the kernel keeps them apart by credentials).
pub(super) fn recv(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Extras)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = Control([0; 128]);
    // SAFETY: a zeroed msghdr is valid (no iovec, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len() as _;
    // SAFETY: msg points at live buffers for the duration of the call.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut extras = Extras::default();
    // SAFETY: the kernel filled `control` up to msg_controllen; the CMSG
    // macros (pointer arithmetic) walk exactly that, each SCM_RIGHTS
    // descriptor is ours now, owned once, and SCM_CREDENTIALS data is a
    // ucred.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<libc::c_int>();
                let bytes = ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                for i in 0..bytes / std::mem::size_of::<libc::c_int>() {
                    let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    // A further one is dropped, and so closed.
                    extras.fd.get_or_insert(fd);
                }
            }
            if (*cmsg).cmsg_level == libc::SOL_SOCKET
                && (*cmsg).cmsg_type == libc::SCM_CREDENTIALS
                && (*cmsg).cmsg_len as usize
                    >= libc::CMSG_LEN(std::mem::size_of::<libc::ucred>() as u32) as usize
            {
                let cred: libc::ucred =
                    std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::ucred>());
                extras.pid = Some(cred.pid);
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n as usize, extras))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_line_and_a_descriptor_cross_together() {
        let (a, b) = UnixStream::pair().unwrap();
        send(a.as_fd(), b"P 1\n", None).unwrap();
        let file = tempfile::tempfile().unwrap();
        send(a.as_fd(), b"K\n", Some(file.as_fd())).unwrap();
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        let mut fd = None;
        while got.len() < 6 {
            let (n, extras) = recv(b.as_raw_fd(), &mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
            fd = fd.or(extras.fd);
        }
        assert_eq!(got, b"P 1\nK\n");
        let fd = fd.expect("the descriptor came with its line");
        assert_ne!(fd.as_raw_fd(), file.as_raw_fd());
        // Nothing more: no wait, an error.
        let again = recv(b.as_raw_fd(), &mut buf).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::WouldBlock);
        drop(a);
        assert_eq!(
            recv(b.as_raw_fd(), &mut buf).unwrap().0,
            0,
            "the end is seen"
        );
    }
}

#!/usr/bin/env python3
"""Runs a command with fd 3 and LISTEN_FDS=1 set up as a socket-activation test needs them,
right or wrong.

Usage: pass_fd.py KIND PATH PID -- COMMAND ARGS...

KIND, what fd 3 is:
  listening  a unix stream socket bound at PATH and listening (what systemd passes)
  connected  a unix stream socket that is connected, not listening (PATH unused)
  tcp        a TCP socket listening on 127.0.0.1 (PATH unused)
  datagram   a unix datagram socket bound at PATH.dgram
  file       the regular file PATH, opened for reading
PID, what LISTEN_PID says:
  own        this process's pid, which COMMAND keeps (exec)
  absent     LISTEN_PID unset
  other      the pid of another process (1)

COMMAND replaces this process (same pid), so nothing is left running here.
"""

import os
import socket
import sys


def main():
    if len(sys.argv) < 6 or sys.argv[4] != "--":
        sys.exit("usage: pass_fd.py KIND PATH PID -- COMMAND ARGS...")
    kind, path, pid, command = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5:]
    keep = []
    if kind == "listening":
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(16)
        fd = listener.fileno()
        keep.append(listener)
    elif kind == "connected":
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fd = ours.fileno()
        # The other end stays open here until exec closes it (it is not inheritable).
        keep.extend([ours, theirs])
    elif kind == "tcp":
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        fd = listener.fileno()
        keep.append(listener)
    elif kind == "datagram":
        datagrams = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        datagrams.bind(path + ".dgram")
        fd = datagrams.fileno()
        keep.append(datagrams)
    elif kind == "file":
        fd = os.open(path, os.O_RDONLY)
    else:
        sys.exit(f"pass_fd.py: unknown KIND {kind!r}")
    if fd != 3:
        os.dup2(fd, 3)
    os.set_inheritable(3, True)
    os.environ["LISTEN_FDS"] = "1"
    if pid == "own":
        os.environ["LISTEN_PID"] = str(os.getpid())
    elif pid == "other":
        os.environ["LISTEN_PID"] = "1"
    elif pid == "absent":
        os.environ.pop("LISTEN_PID", None)
    else:
        sys.exit(f"pass_fd.py: unknown PID {pid!r}")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()

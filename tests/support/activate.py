#!/usr/bin/env python3
"""A minimal socket-activation supervisor, as systemd's .socket + .service units do it.

Usage: activate.py SOCKET_PATH -- COMMAND ARGS...

Binds and listens on the unix stream socket SOCKET_PATH once, then runs COMMAND with that
socket as fd 3 (LISTEN_FDS=1, LISTEN_PID=its pid). The socket stays open here for as long as
the supervisor lives, so a connection made while no COMMAND runs waits in the backlog instead
of being refused.

SIGHUP restarts COMMAND as `systemctl restart` does: SIGTERM to the running one, and a new one
as soon as it has exited (stop, then start). SIGTERM stops COMMAND and then the supervisor.
A COMMAND that exits without being told to also stops the supervisor, with its status.

Reports, one line each on stdout (flushed): `listening`, `started PID`,
`exited PID STATUS` (STATUS: the exit code, or -N when killed by signal N).
"""

import os
import signal
import socket
import sys

SIGNALS = {signal.SIGHUP, signal.SIGTERM}


def say(line):
    # The test reads these lines as they come: never leave one in a buffer.
    print(line, flush=True)


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: activate.py SOCKET_PATH -- COMMAND ARGS...")
    path, command = sys.argv[1], sys.argv[3:]

    def remove():
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    # A stale file from an earlier run would make bind fail with EADDRINUSE.
    remove()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    # A deep backlog: every connection made while COMMAND restarts must fit in it.
    listener.listen(4096)
    say("listening")

    child = None
    restart = False
    stopping = False

    def stop_child():
        try:
            if child is not None:
                os.kill(child, signal.SIGTERM)
        except ProcessLookupError:
            pass  # It exited already: waitpid is about to say so.

    def on_hup(_signum, _frame):
        nonlocal restart
        restart = True
        stop_child()

    def on_term(_signum, _frame):
        nonlocal stopping
        stopping = True
        stop_child()

    signal.signal(signal.SIGHUP, on_hup)
    signal.signal(signal.SIGTERM, on_term)

    while True:
        # Block the signals across fork, so a handler never runs between the fork and `child`
        # being set (it would have no child to signal, and the request would be lost).
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        pid = os.fork()
        if pid == 0:
            # The child. fd 3 is where sd_listen_fds(3) looks; dup2 makes the copy inheritable
            # (no FD_CLOEXEC) by default, and set_inheritable says so whatever fd it lands on.
            if listener.fileno() != 3:
                os.dup2(listener.fileno(), 3)
            os.set_inheritable(3, True)
            # Our stdout is the report channel the test parses: COMMAND writes to stderr.
            os.dup2(2, 1)
            os.environ["LISTEN_FDS"] = "1"
            # The variables are for this very process: exec keeps the pid.
            os.environ["LISTEN_PID"] = str(os.getpid())
            os.environ["LISTEN_FDNAMES"] = "cri-bridge"
            # exec keeps the signal mask: unblock, or COMMAND would never see SIGTERM.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
            try:
                os.execvp(command[0], command)
            except OSError as error:
                print(f"activate.py: cannot run {command[0]}: {error}", file=sys.stderr, flush=True)
            os._exit(127)
        child = pid
        restart = False
        say(f"started {pid}")
        # A stop asked for while the signals were blocked is now delivered and acted on.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)

        # waitpid is retried after each signal handler runs (PEP 475).
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        child = None
        say(f"exited {pid} {code}")
        if stopping:
            remove()
            return 0
        if not restart:
            # Exited on its own: not ours to hide by restarting it.
            remove()
            return code if code > 0 else 1
        # Told to restart: the socket stays open, and a new COMMAND takes it over.


if __name__ == "__main__":
    sys.exit(main())

"""Inside a sandbox: an agent harness's one network route, a TCP port on the sandbox's own
loopback forwarded to the gateway's Unix socket bound into it (envs/sandboxes/gateway_route.py).

    python3 -I gateway_forward.py SOCKET PORT READY_FILE

It first connects to SOCKET once, so that a route the host did not set up fails here, by name,
not as the harness's first refused request. Once listening on 127.0.0.1:PORT (0 picks a free
port) it writes the port to READY_FILE. It ends on SIGTERM, and within a second of its parent
(the harness script) ending.

Each accepted connection gets a connection of its own to SOCKET; bytes flow each way as they
arrive (an SSE stream reaches the harness event by event: no buffering beyond one read), at
most _BUFFER_BYTES held per direction (a slow reader slows its writer, not this process's
memory). A side that stops sending (half-close) has that passed on; an error ends the pair.
One thread and one selector, not a thread per connection: a container's pids limit counts
threads, and the gateway takes any number of connections.
Standard library only: the sandbox's own python3 (any 3.8+) runs it.
"""
import errno
import os
import resource
import selectors
import signal
import socket
import stat
import sys
import time

_BUFFER_BYTES = 256 * 1024
_CHUNK_BYTES = 64 * 1024
_PARENT_CHECK_S = 1.0
# A connection waits this long for room in the gateway's accept queue before it is dropped.
_CONNECT_WAIT_S = 30.0
_CONNECT_RETRY_S = 0.02
_PROBE_TIMEOUT_S = 10.0
# After running out of file descriptors, accepting pauses this long (the listener stays readable).
_ACCEPT_PAUSE_S = 0.1
_BACKLOG = 1024
_BUSY = (errno.EAGAIN, errno.EWOULDBLOCK)
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def say(message):
    sys.stderr.write("gateway_forward: %s\n" % message)
    sys.stderr.flush()


class Flow:
    """One direction of a pair: bytes read from src, not yet written to dst."""

    def __init__(self, src, dst):
        self.src, self.dst = src, dst
        self.buffer = bytearray()
        self.ended = False  # src sent its last byte
        self.passed_on = False  # dst was told (shutdown for writing)


class Pair:
    def __init__(self, client, upstream):
        self.flows = (Flow(client, upstream), Flow(upstream, client))
        self.closed = False  # one select() may still report its sockets after that

    def sockets(self):
        return (self.flows[0].src, self.flows[1].src)

    def interest(self, sock):
        events = 0
        for flow in self.flows:
            if flow.src is sock and not flow.ended and len(flow.buffer) < _BUFFER_BYTES:
                events |= selectors.EVENT_READ
            if flow.dst is sock and flow.buffer:
                events |= selectors.EVENT_WRITE
        return events


def move(flow):
    """Write what flow holds; pass its end on once all is written."""
    if flow.buffer:
        try:
            sent = flow.dst.send(flow.buffer)
        except OSError as error:
            if error.errno not in _BUSY:
                raise
            sent = 0
        del flow.buffer[:sent]
    if flow.ended and not flow.buffer and not flow.passed_on:
        flow.dst.shutdown(socket.SHUT_WR)
        flow.passed_on = True


def pull(flow):
    try:
        data = flow.src.recv(_CHUNK_BYTES)
    except OSError as error:
        if error.errno in _BUSY:
            return
        raise
    if data:
        flow.buffer += data
    else:
        flow.ended = True


class Forwarder:
    def __init__(self, socket_path, listener):
        self.socket_path = socket_path
        self.listener = listener
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ)
        self.registered = {}  # socket -> events it is registered for
        self.waiting = []  # (give_up_at_s, client) whose gateway connection found its queue full
        self.accept_paused_until_s = 0.0

    def serve(self, parent_pid):
        while os.getppid() == parent_pid:
            self.resume_accepting()
            timeout_s = _CONNECT_RETRY_S if self.waiting or self.accept_paused_until_s else _PARENT_CHECK_S
            for key, events in self.selector.select(timeout_s):
                if key.fileobj is self.listener:
                    self.accept()
                else:
                    self.service(key.data, key.fileobj, events)
            if self.waiting:
                waiting, self.waiting = self.waiting, []
                for give_up_at_s, client in waiting:
                    self.connect(client, give_up_at_s)

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError as error:
                if error.errno in _BUSY:
                    return
                if error.errno in _OUT_OF_FDS:
                    say("accept: %s; pausing new connections" % error)
                    self.selector.unregister(self.listener)
                    self.accept_paused_until_s = time.monotonic() + _ACCEPT_PAUSE_S
                    return
                raise
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small SSE events go out at once
            self.connect(client, time.monotonic() + _CONNECT_WAIT_S)

    def resume_accepting(self):
        if self.accept_paused_until_s and time.monotonic() >= self.accept_paused_until_s:
            self.accept_paused_until_s = 0.0
            self.selector.register(self.listener, selectors.EVENT_READ)

    def connect(self, client, give_up_at_s):
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.setblocking(False)
        code = upstream.connect_ex(self.socket_path)
        if code == 0:
            pair = Pair(client, upstream)
            for sock in pair.sockets():
                self.update(pair, sock)
            return
        upstream.close()
        if code in _BUSY and time.monotonic() < give_up_at_s:
            self.waiting.append((give_up_at_s, client))  # the gateway's accept queue is full
            return
        say("cannot connect to %s: %s" % (self.socket_path, os.strerror(code)))
        client.close()

    def service(self, pair, sock, events):
        if pair.closed:
            return
        try:
            for flow in pair.flows:
                if flow.src is sock and events & selectors.EVENT_READ:
                    pull(flow)
                move(flow)  # at once: nothing waits for a later turn of the loop
        except OSError:
            self.close(pair)  # a reset or broken pipe on either side ends both
            return
        if all(flow.passed_on for flow in pair.flows):
            self.close(pair)
            return
        for each in pair.sockets():
            self.update(pair, each)

    def update(self, pair, sock):
        events = pair.interest(sock)
        known = self.registered.get(sock, 0)
        if events == known:
            return
        if not events:
            self.selector.unregister(sock)
            del self.registered[sock]
        elif not known:
            self.selector.register(sock, events, pair)
            self.registered[sock] = events
        else:
            self.selector.modify(sock, events, pair)
            self.registered[sock] = events

    def close(self, pair):
        pair.closed = True
        for sock in pair.sockets():
            if self.registered.pop(sock, 0):
                self.selector.unregister(sock)
            sock.close()


def probe(socket_path):
    """Fail now, by name, when the host's gateway socket cannot be reached."""
    try:
        is_socket = stat.S_ISSOCK(os.stat(socket_path).st_mode)
    except OSError as error:
        raise SystemExit("gateway_forward: no gateway socket at %s (%s): the host listens there before the "
                         "harness starts" % (socket_path, error.strerror))
    if not is_socket:
        raise SystemExit("gateway_forward: %s is not a socket" % socket_path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(_PROBE_TIMEOUT_S)
    try:
        sock.connect(socket_path)
    except OSError as error:
        hint = " (the host must make it connectable: gateway_route.make_connectable)" \
            if error.errno in (errno.EACCES, errno.EPERM) else ""
        raise SystemExit("gateway_forward: cannot connect to %s: %s%s" % (socket_path, error, hint))
    finally:
        sock.close()


def main():
    if len(sys.argv) != 4:
        raise SystemExit("usage: gateway_forward.py SOCKET PORT READY_FILE")
    socket_path, port, ready_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    parent_pid = os.getppid()

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    # Two descriptors per connection: the default soft limit (1024) would cap them near 500.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    probe(socket_path)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(_BACKLOG)
    listener.setblocking(False)
    with open(ready_file + ".part", "w") as handle:
        handle.write("%d\n" % listener.getsockname()[1])
    os.replace(ready_file + ".part", ready_file)  # whole or absent: the script polls for it
    Forwarder(socket_path, listener).serve(parent_pid)


if __name__ == "__main__":
    main()

"""The gateway route: a harness in a sandbox reaches its lease's gateway socket through the
forwarder on the sandbox's loopback, and nothing else; sandbox.ro_binds are readable, not writable.

The forwarder's own behaviour (half-close, back-pressure, ending) is checked on this host; the
route end to end in a bubblewrap jail and, where an engine runs, in one docker container."""
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest

from configs.schema import SandboxConfig
from envs.sandboxes.docker_sandbox import DockerSandbox
from envs.sandboxes.e2b_sandbox import E2BSandbox
from envs.sandboxes.gateway_route import (GATEWAY_SOCKET, JAIL_PORT, ROUTE_FAILED_EXIT, ROUTE_FAILED_MARK, harness_script,
                                make_connectable, route_failed, socket_path_for, unix_path)
from envs.sandboxes.sandbox import ExecResult
from envs.sandboxes.local_sandbox import LocalSandbox

FORWARDER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                         "envs", "sandboxes", "jail", "gateway_forward.py")
CONCURRENT = 64
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


class Handler(BaseHTTPRequestHandler):
    """/sessions/x/v1/models, an SSE stream held after its first event until /release is asked
    for, and /barrier, answered once CONCURRENT requests wait on it together."""
    protocol_version = "HTTP/1.1"

    def address_string(self):
        return "unix"  # a Unix socket's peer has no host part

    def log_message(self, *args):
        return

    def do_GET(self):
        state = self.server.state
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.chunk(b"data: first\n\n")
            released = state["release"].wait(20)
            self.chunk(b"data: %s\n\ndata: [DONE]\n\n" % (b"released" if released else b"never-released"))
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path == "/release":
            state["release"].set()
        elif self.path == "/barrier":
            try:
                state["barrier"].wait()
            except threading.BrokenBarrierError:
                self.answer(500, b"broken")
                return
        self.answer(200, b'{"lease": "%s", "path": "%s"}' % (state["name"].encode(), self.path.encode()))

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def serve_gateway():
    """serve(path, name): an HTTP server on a Unix socket, as the gateway listens."""
    servers = []

    def serve(path, name):
        with unix_path(path) as bindable:
            server = UnixHTTPServer(bindable, Handler)
        server.state = {"name": name, "release": threading.Event(), "barrier": threading.Barrier(CONCURRENT, timeout=30)}
        make_connectable(path)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


CLIENT = textwrap.dedent("""
    import http.client, json, socket, sys, threading, urllib.request
    base = "http://127.0.0.1:%d" % PORT
    def get(path):
        return urllib.request.urlopen(base + path, timeout=60).read().decode()
    def attempt(label, reach):
        try:
            reach()
            print(label, "REACHED")
        except OSError as error:
            print(label, "blocked:", type(error).__name__)
    print("models", get("/sessions/x/v1/models"))
    stream = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    stream.request("GET", "/stream")
    response = stream.getresponse()
    print("first", response.readline().decode().strip())  # before /release: it came alone
    get("/release")
    print("rest", response.read().decode().split())
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(get("/barrier"))) for _ in range(CONCURRENT)]
    [thread.start() for thread in threads]
    [thread.join() for thread in threads]
    print("barrier", sum('"/barrier"' in answer for answer in answers))
    attempt("host-tcp", lambda: socket.create_connection(("127.0.0.1", HOST_PORT), timeout=5).close())
    attempt("external", lambda: socket.create_connection(("192.0.2.1", 80), timeout=5).close())
    def other_lease():
        peer = socket.socket(socket.AF_UNIX)
        peer.settimeout(5)
        peer.connect(OTHER_SOCKET)
    attempt("other-lease", other_lease)
    attempt("write-gateway-dir", lambda: open("/run/swerve-gateway/planted", "w").close())
    sys.exit(5)
""")


def client_command(host_port, other_socket):
    program = f"PORT = {JAIL_PORT}\nCONCURRENT = {CONCURRENT}\nHOST_PORT = {host_port}\n" \
              f"OTHER_SOCKET = {str(other_socket)!r}\n{CLIENT}"
    return f"python3 - <<'EOF'\n{program}\nEOF"


@pytest.fixture
def host_tcp_server():
    """A server on the host's loopback that no sandbox may reach; its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    yield listener.getsockname()[1]
    listener.close()


def check_route(output, name):
    lines = dict(line.split(" ", 1) for line in output.splitlines() if " " in line)
    assert f'"lease": "{name}"' in lines["models"] and "/sessions/x/v1/models" in lines["models"]
    assert lines["first"] == "data: first"
    assert lines["rest"] == "['data:', 'released', 'data:', '[DONE]']"
    assert lines["barrier"] == str(CONCURRENT)
    for label in ("host-tcp", "external", "other-lease", "write-gateway-dir"):
        assert lines[label].startswith("blocked:"), (label, lines[label])


@pytest.mark.slow
@needs_bwrap
def test_a_jailed_harness_reaches_its_own_gateway_and_nothing_else(tmp_path, task_by_id, serve_gateway,
                                                                     host_tcp_server):
    boxes = [LocalSandbox(SandboxConfig(isolation="bwrap", workdir_root=str(tmp_path))) for _ in range(2)]
    try:
        for box in boxes:
            box.start(task_by_id["textkit-001"])
        mine, other = (socket_path_for(box) for box in boxes)
        serve_gateway(mine, "mine")
        serve_gateway(other, "other")
        result = boxes[0].exec(harness_script(client_command(host_tcp_server, other), JAIL_PORT), timeout_s=120)
        assert result.exit_code == 5, result.output  # the command's own status comes back
        check_route(result.output, "mine")
        assert ROUTE_FAILED_MARK not in result.output
        # The other lease's socket was there all along, for its own sandbox only.
        models = f"python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{JAIL_PORT}" \
                 "/sessions/x/v1/models').read().decode())\""
        assert '"lease": "other"' in boxes[1].exec(harness_script(models, JAIL_PORT), timeout_s=60).output
    finally:
        for box in boxes:
            box.close()


@needs_bwrap
def test_ro_binds_are_readable_not_writable_and_a_missing_one_is_named(tmp_path, task_by_id):
    shared = tmp_path / "harness"
    shared.mkdir()
    (shared / "tool.txt").write_text("harness file\n")
    single = tmp_path / "single.txt"
    single.write_text("one file\n")
    box = LocalSandbox(SandboxConfig(isolation="bwrap", ro_binds=[str(shared), str(single)],
                                     workdir_root=str(tmp_path / "leases")))
    (tmp_path / "leases").mkdir()
    try:
        box.start(task_by_id["textkit-001"])
        seen = box.exec(f"cat {shared}/tool.txt {single}; touch {shared}/new; echo more >> {single};"
                        f" echo x > {shared}/tool.txt; ls {shared}")
        assert "harness file\none file\n" in seen.output
        assert seen.output.count("Read-only file system") == 3 and "new" not in seen.output.split()
        assert (shared / "tool.txt").read_text() == "harness file\n" and single.read_text() == "one file\n"
    finally:
        box.close()
    missing = LocalSandbox(SandboxConfig(isolation="bwrap", ro_binds=[str(tmp_path / "absent")]))
    with pytest.raises(ValueError, match=r"sandbox\.ro_binds: .*absent.* does not exist"):
        missing.start(task_by_id["textkit-001"])
    for wrong, why in (("relative/path", "not an absolute path"), ("/tmp", "overlaps /tmp"), ("/", "overlaps")):
        with pytest.raises(ValueError, match=f"sandbox.ro_binds: .*{why}"):
            LocalSandbox(SandboxConfig(isolation="bwrap", ro_binds=[wrong])).start(task_by_id["textkit-001"])


def test_no_route_where_nothing_confines_the_harness(tmp_path, task_by_id):
    box = LocalSandbox(SandboxConfig(isolation="none", workdir_root=str(tmp_path)))
    try:
        box.start(task_by_id["textkit-001"])
        assert box.gateway_dir() is None and socket_path_for(box) is None
    finally:
        box.close()
    with pytest.raises(ValueError, match=r"sandbox\.ro_binds=.*e2b"):
        E2BSandbox(SandboxConfig(backend="e2b", ro_binds=[str(tmp_path)]))


def test_a_route_that_cannot_be_set_up_fails_by_name_without_running_the_command(tmp_path):
    script = harness_script("echo the-harness-ran", 0, socket_path=str(tmp_path / "no.sock"))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == ROUTE_FAILED_EXIT and "the-harness-ran" not in done.stdout
    assert ROUTE_FAILED_MARK in done.stderr and "no gateway socket at" in done.stderr and "no.sock" in done.stderr
    assert route_failed(ExecResult(done.returncode, done.stderr, False, 1.0, False, 60.0))
    assert not route_failed(ExecResult(ROUTE_FAILED_EXIT, "the harness's own exit 86", False, 1.0, False, 60.0))
    assert harness_script("true", JAIL_PORT).count(GATEWAY_SOCKET) == 1


# ---- the forwarder itself, on this host ---------------------------------------------------------

@pytest.fixture
def echo_socket(tmp_path):
    """A Unix socket server that reads to the end of what a client sends, then sends it back."""
    path = tmp_path / "echo.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(64)

    def serve():
        while True:
            try:
                peer, _ = listener.accept()
            except OSError:
                return  # closed at the end of the test
            threading.Thread(target=echo, args=(peer,), daemon=True).start()

    def echo(peer):
        with peer:
            received = bytearray()
            while chunk := peer.recv(65536):
                received += chunk
            if received:  # the forwarder's start-up probe sends nothing
                peer.sendall(received)

    threading.Thread(target=serve, daemon=True).start()
    yield path
    listener.close()


def start_forwarder(socket_path, ready):
    proc = subprocess.Popen([sys.executable, "-I", FORWARDER, str(socket_path), "0", str(ready)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (ready.exists() and ready.read_text().strip()):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
        time.sleep(0.02)
    return proc, int(ready.read_text())


def test_forwarder_passes_half_close_and_more_than_its_buffer_both_ways(tmp_path, echo_socket):
    proc, port = start_forwarder(echo_socket, tmp_path / "ready")
    try:
        payloads = [os.urandom(3 * 1024 * 1024), b"small"]
        for payload in payloads:
            client = socket.create_connection(("127.0.0.1", port), timeout=30)
            client.sendall(payload)
            client.shutdown(socket.SHUT_WR)  # the echo answers only once it sees the end
            received = bytearray()
            while chunk := client.recv(1 << 20):
                received += chunk
            client.close()
            assert bytes(received) == payload
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0  # SIGTERM ends it cleanly


@pytest.mark.slow
def test_forwarder_ends_with_its_parent(tmp_path, echo_socket):
    ready = tmp_path / "ready"
    # Its parent, a shell like harness_script's, leaves once it listens, without stopping it.
    launcher = subprocess.run(["bash", "-c", f'"$@" > /dev/null 2>&1 & while [ ! -s {ready} ]; do sleep 0.02; done;'
                               ' echo $!', "bash", sys.executable, "-I", FORWARDER, str(echo_socket), "0", str(ready)],
                              capture_output=True, text=True, timeout=30)
    pid = int(launcher.stdout)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        assert not _alive(pid)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# ---- docker: one real container ----------------------------------------------------------------

def test_a_container_harness_reaches_its_own_gateway_and_nothing_else(docker_image, tmp_path, task_by_id,
                                                                        serve_gateway, host_tcp_server):
    shared = tmp_path / "harness"
    shared.mkdir()
    (shared / "tool.txt").write_text("harness file\n")
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    box = DockerSandbox(SandboxConfig(backend="docker", docker_image=docker_image, ro_binds=[str(shared)]))
    try:
        box.start(task_by_id["textkit-001"])
        serve_gateway(socket_path_for(box), "mine")
        serve_gateway(other / "gateway.sock", "other")
        result = box.exec(harness_script(client_command(host_tcp_server, other / "gateway.sock"), JAIL_PORT),
                          timeout_s=180)
        assert result.exit_code == 5, result.output
        check_route(result.output, "mine")
        seen = box.exec(f"cat {shared}/tool.txt; touch {shared}/new").output
        assert "harness file" in seen and "Read-only file system" in seen
    finally:
        box.close()
    with pytest.raises(ValueError, match=r"sandbox\.ro_binds: .*does not exist"):
        DockerSandbox(SandboxConfig(backend="docker", ro_binds=[str(tmp_path / "absent")])).start(
            task_by_id["textkit-001"])


def test_a_socket_deeper_than_af_unix_allows_is_bound_and_reached_through_its_folder(tmp_path):
    """A lease under a long sandbox.workdir_root: its socket's path is over sun_path's 108 bytes, and
    binding it directly fails; through unix_path the socket is made in the real folder all the same."""
    deep = tmp_path.joinpath(*["a-long-folder-name"] * 8)
    deep.mkdir(parents=True)
    path = deep / "gateway.sock"
    assert len(str(path)) > 108
    with pytest.raises(OSError, match="too long"):
        socket.socket(socket.AF_UNIX).bind(str(path))
    listener = socket.socket(socket.AF_UNIX)
    with unix_path(path) as bindable:
        listener.bind(bindable)
    listener.listen(1)
    assert path.is_socket()
    with unix_path(path) as reachable, socket.socket(socket.AF_UNIX) as client:
        client.connect(reachable)
        peer, _ = listener.accept()
        client.sendall(b"ping")
        assert peer.recv(4) == b"ping"
    peer.close()
    listener.close()
    short = tmp_path / "s.sock"
    with unix_path(short) as same:
        assert same == str(short)  # a path that fits is used as it is

"""An agent harness's one network route out of its sandbox: its session of the gateway.

Each lease has a host folder of its own (`sandbox.gateway_dir()`) that is bound read-only into
the sandbox at GATEWAY_MOUNT. The host listens with an HTTP server on the Unix socket
`socket_path_for(sandbox)` in it, then calls `make_connectable(path)`; the harness runs through
`harness_script(command, JAIL_PORT)`, which starts envs/sandboxes/jail/gateway_forward.py inside the sandbox
on 127.0.0.1:JAIL_PORT, forwarding each connection to GATEWAY_SOCKET. The harness's base URL
is then `http://127.0.0.1:JAIL_PORT/sessions/<id>/v1`.

Why nothing else is reachable, per backend:
- local with bubblewrap: the jail has a network namespace of its own holding only a loopback
  device (no route anywhere, not even to the host's 127.0.0.1), and of the host's files sees
  only the system folders, the interpreter, sandbox.ro_binds and this one folder: another
  lease's folder is not in it. A Unix socket is reached by path, across network namespaces,
  so the bound socket is the single way out. The folder is bound read-only: the harness can
  connect to the socket but not add files next to it.
- local with isolation none: no route is offered (gateway_dir() is None): the harness would
  share the host's network and files, and could reach anything the host can.
- docker: the container keeps `--network none` (only its loopback) and the folder is a bind
  mount; the daemon must run on this host (a bind names a path on the daemon's machine). The
  container's user is another host uid than the gateway's, hence make_connectable.
- e2b: no route yet (gateway_dir() is None); swerve/Harness-v0 refuses the backend. A sandbox
  is a cloud microVM: no host folder can be bound into it and it cannot reach this host's
  sockets. The way there: the gateway serves each session on a public HTTPS address (a tunnel
  or load balancer in front of it) and checks the session's own bearer key, which the harness
  already sends as OPENAI_API_KEY; the sandbox is created with all outbound traffic denied but
  to that address (`Sandbox.create(network={"deny_out": ["0.0.0.0/0"], "allow_out": [gateway
  host]})`; `allow_internet_access=False` alone is deny-all and would cut the gateway off too),
  and gets the session URL as OPENAI_BASE_URL, no forwarder needed. The per-session key, not the
  network, then keeps one harness out of another's session, which makes the key's secrecy part
  of the isolation, unlike the local and docker routes.

The host's folder sits inside a folder only the host's user can enter (mode 0700), so the
socket's own permissive mode opens it to the sandbox and nobody else.
"""
from __future__ import annotations

import base64
import contextlib
import functools
import os
import posixpath
import shlex
from pathlib import Path
from typing import Iterable, Iterator, List, Optional

from envs.sandboxes.sandbox import ExecResult, RoutedSandbox

# Where every sandbox sees its lease's gateway folder, and the socket the host listens on in it.
GATEWAY_MOUNT = "/run/swerve-gateway"
GATEWAY_SOCKET_NAME = "gateway.sock"
GATEWAY_SOCKET = f"{GATEWAY_MOUNT}/{GATEWAY_SOCKET_NAME}"
# The forwarder's port on the sandbox's own loopback (each sandbox has its own: no clash).
JAIL_PORT = 18080
# harness_script's exit code when the route could not be set up (never the harness's doing),
# with a line starting ROUTE_FAILED_MARK on stderr that says why.
ROUTE_FAILED_EXIT = 86
ROUTE_FAILED_MARK = "swerve-gateway-route:"
# How long the script waits for the forwarder to listen.
FORWARD_READY_S = 15.0
_READY_POLL_S = 0.05
# Folder mode: the sandbox's user may enter it (to reach the socket), not list or change it.
GATEWAY_DIR_MODE = 0o711
_FORWARDER = Path(__file__).resolve().parent / "jail" / "gateway_forward.py"
_LOG_TAIL_BYTES = 2000


def make_gateway_dir(parent: Path) -> Path:
    """The lease's gateway folder inside `parent`, a folder only the host's user enters."""
    if parent.stat().st_mode & 0o077:
        raise ValueError(f"{parent} must be private to its owner (mode 0700): it guards the gateway socket")
    path = parent / "gateway"
    path.mkdir(mode=GATEWAY_DIR_MODE)
    path.chmod(GATEWAY_DIR_MODE)  # mkdir's mode passes through the umask
    return path


def socket_path_for(sandbox: RoutedSandbox) -> Optional[Path]:
    """Host path where the gateway listens for this lease's harness; None where the sandbox
    offers no route (e2b, isolation none: see this module's docstring)."""
    if not callable(getattr(sandbox, "gateway_dir", None)):
        raise TypeError(f"{type(sandbox).__name__} has no gateway_dir(): a wrapper that passes it on to its "
                        "backend is missing (envs/sandboxes/sandbox.py RoutedSandbox)")
    directory = sandbox.gateway_dir()
    return None if directory is None else directory / GATEWAY_SOCKET_NAME


# sockaddr_un's sun_path: a socket's path, its final NUL included, fits in 108 bytes.
UNIX_PATH_MAX = 108


@contextlib.contextmanager
def unix_path(socket_path: Path) -> Iterator[str]:
    """A name for `socket_path` that bind() and connect() take however deep its folder is (a lease
    under a long sandbox.workdir_root, a test's temporary folder): the path itself when it fits,
    else its folder reached through a descriptor held open for the block (/proc/self/fd/N/name).
    The socket file is made in the real folder, so the sandbox sees it at GATEWAY_SOCKET."""
    if len(os.fsencode(socket_path)) < UNIX_PATH_MAX:
        yield str(socket_path)
        return
    folder = os.open(socket_path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{socket_path.name}"
    finally:
        os.close(folder)


def make_connectable(socket_path: Path) -> None:
    """Call once listening: connecting takes write permission on the socket, and a container's
    user is another uid than the host's (its folder keeps everyone else out)."""
    os.chmod(socket_path, 0o666)


def checked_ro_binds(paths: Iterable[str], mounts: Iterable[str], uncovered: Iterable[str]) -> List[str]:
    """sandbox.ro_binds normalised, parents before children. A ValueError for a relative or
    missing path, one that covers or enters a place the sandbox mounts itself (`mounts`), or
    one that covers a host folder holding other leases or the sandbox's scratch (`uncovered`:
    binding all of /tmp would show the sandbox other leases' files)."""
    mounts = [posixpath.normpath(place) for place in mounts]
    uncovered = [posixpath.normpath(place) for place in uncovered]
    checked = []
    for given in paths:
        path = posixpath.normpath(given)
        if not posixpath.isabs(path):
            raise ValueError(f"sandbox.ro_binds: {given!r} is not an absolute path")
        if not os.path.exists(path):
            raise ValueError(f"sandbox.ro_binds: {given!r} does not exist on this host (create it, or drop it "
                             "from sandbox.ro_binds / env.harness.files)")
        inside = [place for place in mounts if place == path or place.startswith(path.rstrip("/") + "/")
                  or path.startswith(place + "/")]
        covered = [place for place in uncovered if place == path or place.startswith(path.rstrip("/") + "/")]
        if inside or covered:
            raise ValueError(f"sandbox.ro_binds: {given!r} overlaps {(inside or covered)[0]}, which the sandbox "
                             "keeps to itself; bind a folder below it instead")
        checked.append(path)
    return sorted(set(checked), key=lambda path: (path.count("/"), path))


def route_failed(result: ExecResult) -> bool:
    """Whether a harness_script run failed to set up the route (swerve's side: an infra error)
    rather than the command exiting ROUTE_FAILED_EXIT itself."""
    return result.exit_code == ROUTE_FAILED_EXIT and ROUTE_FAILED_MARK in result.output


@functools.lru_cache(maxsize=1)
def _forwarder_b64() -> str:
    return base64.b64encode(_FORWARDER.read_bytes()).decode()


def harness_script(command: str, port: int, socket_path: str = GATEWAY_SOCKET) -> str:
    """Bash for sandbox.exec: starts the forwarder (127.0.0.1:port -> socket_path) in the
    background, waits until it listens, runs `bash -c command` with the environment the script
    has, stops the forwarder and exits with the command's status. When the route cannot be set
    up it exits ROUTE_FAILED_EXIT without running the command, a ROUTE_FAILED_MARK line and the
    forwarder's own words on stderr. The forwarder travels inside the script (a container does
    not see the host's files) and lives in a `mktemp -d` folder removed at the end."""
    polls = int(FORWARD_READY_S / _READY_POLL_S)
    return "\n".join([
        f"d=$(mktemp -d /tmp/swerve-route.XXXXXXXX) || {{ echo '{ROUTE_FAILED_MARK} cannot make a folder in /tmp' >&2;"
        f" exit {ROUTE_FAILED_EXIT}; }}",
        "fwd=",
        'stop_route() { if [ -n "$fwd" ]; then kill "$fwd" 2>/dev/null; wait "$fwd" 2>/dev/null; fi; rm -rf "$d"; }',
        f'route_failed() {{ echo "{ROUTE_FAILED_MARK} $1" >&2; tail -c {_LOG_TAIL_BYTES} "$d/forward.log" >&2 2>/dev/null;'
        f' stop_route; exit {ROUTE_FAILED_EXIT}; }}',
        f'printf %s {_forwarder_b64()} | base64 -d > "$d/forward.py" || route_failed "cannot write the forwarder"',
        f'python3 -I "$d/forward.py" {shlex.quote(socket_path)} {int(port)} "$d/ready" 2> "$d/forward.log" &',
        "fwd=$!",
        "polls=0",
        'while [ ! -s "$d/ready" ]; do',
        '  kill -0 "$fwd" 2>/dev/null || route_failed "the forwarder ended before it listened"',
        f'  polls=$((polls + 1)); [ "$polls" -le {polls} ] || route_failed "the forwarder did not listen on'
        f' 127.0.0.1:{int(port)} within {FORWARD_READY_S:g} s"',
        f"  sleep {_READY_POLL_S}",
        "done",
        f"bash -c {shlex.quote(command)}",
        "status=$?",
        # Told, not failed: the command's own status stands (its requests failed already if this mattered).
        f'kill -0 "$fwd" 2>/dev/null || {{ echo "{ROUTE_FAILED_MARK} the forwarder ended while the command ran" >&2;'
        f' tail -c {_LOG_TAIL_BYTES} "$d/forward.log" >&2; }}',
        "stop_route",
        'exit "$status"',
    ]) + "\n"

"""A real headless Chromium, driven over its DevTools protocol: how the dashboard check
(bench/resilience/check_dashboard.py) and the view's test (tests/actors/report/view) see a page as a
user does. The browser listens on loopback only and ends with its process group."""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

from policies.engines.process import free_port

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
START_TIMEOUT_S = 20.0


def browser_path() -> Optional[str]:
    """The headless browser on this machine; None when there is none (`make chromium` installs one)."""
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


class HeadlessBrowser:
    """`with HeadlessBrowser() as browser: page = await browser.page()`."""

    def __init__(self, width: int = 1400, height: int = 1000):
        self.width, self.height = width, height
        self.port = free_port()
        self.process: Optional[subprocess.Popen] = None
        self.profile = ""

    def __enter__(self) -> "HeadlessBrowser":
        path = browser_path()
        if path is None:
            raise RuntimeError(f"no headless browser (none of {', '.join(BROWSERS)}): apt-get install chromium "
                               "(make chromium does)")
        self.profile = tempfile.mkdtemp(prefix="swerve-chromium-")
        # --no-sandbox: Chromium refuses its own sandbox as root; it only loads our loopback pages.
        self.process = subprocess.Popen(
            [path, "--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={self.width},{self.height}",
             f"--remote-debugging-port={self.port}", "--remote-debugging-address=127.0.0.1",
             f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline_s = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/version", timeout=1).read()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline_s:
                    self.__exit__()
                    raise RuntimeError(f"{path} did not open its DevTools port within {START_TIMEOUT_S:.0f} s")
                time.sleep(0.2)

    def __exit__(self, *exc_info) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)

    async def page(self) -> "DevToolsPage":
        """The browser's open tab, connected, at this browser's size."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=10) as response:
            target = next(t for t in json.loads(response.read()) if t["type"] == "page")
        page = await DevToolsPage.connect(target["webSocketDebuggerUrl"])
        await page.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                        deviceScaleFactor=1, mobile=False)
        return page


class DevToolsPage:
    """One tab over the DevTools protocol: `send` any method, `evaluate` a script, `screenshot`."""

    def __init__(self, session, socket):
        self._session, self._socket, self._next_id = session, socket, 0

    @classmethod
    async def connect(cls, ws_url: str) -> "DevToolsPage":
        import aiohttp

        session = aiohttp.ClientSession()
        return cls(session, await session.ws_connect(ws_url, max_msg_size=0))

    async def send(self, method: str, **params) -> dict:
        self._next_id += 1
        message_id = self._next_id
        await self._socket.send_json({"id": message_id, "method": method, "params": params})
        while True:  # events and other replies arrive in between
            reply = await self._socket.receive_json()
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        """The script's value (JSON-able); a script that throws raises here, with the page's message."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise RuntimeError(f"the page's script failed: {details.get('exception', {}).get('description', details)}")
        return result.get("result", {}).get("value")

    async def screenshot(self, path: Path) -> Path:
        shot = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    async def close(self) -> None:
        await self._socket.close()
        await self._session.close()

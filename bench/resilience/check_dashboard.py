"""`make check-dashboard`: a real headless browser shows our roles in Ray's dashboard.

A short `swerve train` runs with its dashboard on (as every local run has) under a token of its
own; headless Chromium, driven over its DevTools protocol, signs in with that token (Ray's
`ray-authentication-token` cookie), opens the dashboard's actors view and waits until every
role name (collector, engine-0, trainer-0, episode-0, sandbox-...) is rendered; the screenshot
goes to runs/<name>/dashboard-actors.png. Exits non-zero, naming what was missing, otherwise.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.browser import HeadlessBrowser, browser_path
from policies.engines.process import free_port

REPO = Path(__file__).resolve().parents[2]
ROLE_NAMES = ("collector", "engine-0", "trainer-0", "episode-0", "sandbox-")
COOKIE = "ray-authentication-token"
RUN_TIMEOUT_S = 240.0
# The actors table shows 10 rows a page: set its "Page Size" field (a React input, so through the
# native setter and an input event) to hold every role on one page, and so in one screenshot.
_SHOW_ALL_ROWS = """(() => {
  const field = [...document.querySelectorAll('input')].find(i => i.closest('.MuiFormControl-root')
      && i.closest('.MuiFormControl-root').innerText.includes('Page Size'));
  if (!field) return false;
  Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set.call(field, '100');
  field.dispatchEvent(new Event('input', {bubbles: true}));
  return true;
})()"""
RENDER_TIMEOUT_S = 120.0
def _start_run(run_dir: Path, port: int, token: str, overrides: list[str]) -> subprocess.Popen:
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "RAY_ADDRESS": ""}
    argv = [sys.executable, "-m", "actors", "train", "--config", str(REPO / "tests" / "smoke.yaml"),
            "ray.dashboard=true", f"ray.dashboard_port={port}", f"run.dir={run_dir.parent}",
            f"run.name={run_dir.name}", "trainer.total_steps=200", "rollout.max_turns=3", *overrides]
    # The run's console goes to a file beside its own log: nothing here reads its wording.
    with (run_dir / "check-dashboard.out").open("w") as out:
        # SIGINT stops the run (below); a shell's background job inherits it ignored (as `make test
        # &` does), so the run gets Python's own handler back (SIG_DFL in the child, before exec).
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_sigint_default)


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _answers(url: str) -> bool:
    """Any HTTP reply counts (the dashboard answers 401 before the browser holds its cookie)."""
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def _wait_for_dashboard(run: subprocess.Popen, run_dir: Path, dashboard: str, deadline_s: float) -> None:
    """Until the run's dashboard answers (its roles are being started then; the browser waits for
    their names, so it starts while the fleet does, not after a first step)."""
    while time.monotonic() < deadline_s:
        _check_running(run, run_dir)
        if _answers(dashboard):
            return
        time.sleep(1.0)
    raise SystemExit(f"no answer from {dashboard} within {RUN_TIMEOUT_S:.0f} s; "
                     f"its log: {run_dir / 'logs' / 'console.log'}\n{_tail(run_dir)}")


def _check_running(run: subprocess.Popen, run_dir: Path) -> None:
    if run.poll() is not None:
        raise SystemExit(f"the run ended (exit code {run.returncode}) before every role was shown; "
                         f"its log: {run_dir / 'logs' / 'console.log'}\n{_tail(run_dir)}")


def _tail(run_dir: Path, chars: int = 3000) -> str:
    log = run_dir / "logs" / "console.log"
    return log.read_text(errors="replace")[-chars:] if log.is_file() else "(no log was written)"


async def _render(browser: HeadlessBrowser, dashboard: str, token: str, screenshot: Path, still_running) -> str:
    page = await browser.page()
    try:
        await page.send("Network.enable")
        await page.send("Network.setCookie", name=COOKIE, value=token, url=dashboard, path="/")
        await page.send("Page.navigate", url=f"{dashboard}/#/actors")
        deadline_s, text = time.monotonic() + RENDER_TIMEOUT_S, ""
        while time.monotonic() < deadline_s:
            still_running()
            await page.evaluate(_SHOW_ALL_ROWS)
            text = await page.evaluate("document.body ? document.body.innerText : ''") or ""
            if all(name in text for name in ROLE_NAMES):
                break
            await asyncio.sleep(2.0)
        await page.screenshot(screenshot)
        return text
    finally:
        await page.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/check-dashboard")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the run (e.g. model.cache_dir=DIR)")
    args = parser.parse_args()
    run_dir = Path(args.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    token, dashboard_port = secrets.token_hex(32), free_port()
    dashboard = f"http://127.0.0.1:{dashboard_port}"  # the run binds its dashboard to loopback
    if browser_path() is None:  # before the run: a missing browser is known at once
        raise SystemExit("no headless browser: apt-get install chromium (make check-dashboard does)")
    run = _start_run(run_dir, dashboard_port, token, args.overrides)
    screenshot = run_dir / "dashboard-actors.png"
    try:
        _wait_for_dashboard(run, run_dir, dashboard, time.monotonic() + RUN_TIMEOUT_S)
        with HeadlessBrowser(width=1600, height=2200) as browser:
            text = asyncio.run(_render(browser, dashboard, token, screenshot, lambda: _check_running(run, run_dir)))
    finally:
        if run.poll() is None:
            # SIGINT: the run's own handlers end it and the Ray it started.
            os.killpg(run.pid, signal.SIGINT)
            try:
                run.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(run.pid, signal.SIGKILL)
    missing = [name for name in ROLE_NAMES if name not in text]
    shown = f"missing: {', '.join(missing)}" if missing else "every role shown"
    print(f"[swerve] dashboard actors view: {screenshot} ({shown})")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())

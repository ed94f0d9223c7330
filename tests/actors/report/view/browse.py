"""A user's walk through a run's page in a real headless Chromium: the overview, the steps, a step's
timeline, a trajectory (its tokens and diff), its group, the eval table and one task's attempts side
by side; what each view shows is read back from the page, and each view is kept as a screenshot."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

from bench.browser import DevToolsPage, HeadlessBrowser

WAIT_S = 20.0
SHOWN = {
    "steps": "[...document.querySelectorAll('tr.step-row')].map(r => r.dataset.chunk)",
    "bars": "[...document.querySelectorAll('#lanes .bar')].map(b => Number(b.dataset.traj))",
    "title": "document.querySelector('h1').innerText",
    "diff": "document.getElementById('diff').innerText",
    "tokens": "[...document.querySelectorAll('#conversation .tok')].map(s => [s.textContent, Number(s.dataset.version), "
              "Number(s.dataset.trained)])",
    "members": "[...document.querySelectorAll('#group .member h2')].map(h => h.innerText)",
    "tasks": "[...document.querySelectorAll('#eval-table tr.task-row')].map(r => r.dataset.task)",
    "columns": "[...document.querySelectorAll('#compare .stage-column')].map(c => c.dataset.stage)",
}


async def _until(page: DevToolsPage, expression: str) -> None:
    deadline_s = time.monotonic() + WAIT_S
    while not await page.evaluate(expression):
        if time.monotonic() > deadline_s:
            raise AssertionError(f"the page never showed {expression!r}; it shows: "
                                 f"{(await page.evaluate('document.body.innerText'))[:2000]}")
        await asyncio.sleep(0.1)


async def _click(page: DevToolsPage, selector: str, then: str) -> None:
    """Click the first element `selector` matches (as a user does: the page's own handler runs) and
    wait until `then` (a selector) is on the page."""
    await _until(page, f"!!document.querySelector({selector!r})")
    await page.evaluate(f"document.querySelector({selector!r}).click()")
    await _until(page, f"!!document.querySelector({then!r})")


async def _walk(page_file: Path, shots: Path) -> dict:
    with HeadlessBrowser(width=1400, height=1000) as browser:
        page = await browser.page()
        try:
            seen: dict = {}
            await page.send("Page.navigate", url=page_file.as_uri())
            await _until(page, "!!document.getElementById('eval-figures')")
            seen["overview"] = await page.evaluate("document.getElementById('main').innerText")
            await page.screenshot(shots / "overview.png")
            await _click(page, "#nav-steps", "tr.step-row")
            seen["steps"] = await page.evaluate(SHOWN["steps"])
            await _click(page, "tr.step-row", "#lanes .bar")
            seen["step"] = await page.evaluate("location.hash.split('/')[2]")
            seen["bars"] = await page.evaluate(SHOWN["bars"])
            await page.screenshot(shots / "step.png")
            await _click(page, "#lanes .bar", "#verdict")
            seen["trajectory"] = await page.evaluate("location.hash")
            for name in ("title", "diff", "tokens"):
                seen[name] = await page.evaluate(SHOWN[name])
            await page.screenshot(shots / "trajectory.png")
            await _click(page, "a[href^='#/group/']", "#group .member")
            seen["members"] = await page.evaluate(SHOWN["members"])
            await page.screenshot(shots / "group.png")
            await _click(page, "#nav-eval", "tr.task-row")
            seen["tasks"] = await page.evaluate(SHOWN["tasks"])
            await page.screenshot(shots / "eval.png")
            await _click(page, "tr.task-row", "#compare .stage-column")
            seen["task"] = await page.evaluate("decodeURIComponent(location.hash.split('/')[2])")
            seen["columns"] = await page.evaluate(SHOWN["columns"])
            await page.screenshot(shots / "task.png")
            return seen
        finally:
            await page.close()


async def _hostile(page_file: Path) -> dict:
    """A trajectory whose messages are markup: the page shows them as text and runs none of it."""
    with HeadlessBrowser() as browser:
        page = await browser.page()
        try:
            await page.send("Page.navigate", url=page_file.as_uri() + "#/traj/step-rl-1/0")
            await _until(page, "!!document.getElementById('conversation')")
            return {"title": await page.evaluate("document.title"),
                    "images": await page.evaluate("document.querySelectorAll('img').length"),
                    "shown": await page.evaluate("document.getElementById('conversation').innerText")}
        finally:
            await page.close()


def walk(page_file: Path, shots: Path) -> dict:
    shots.mkdir(parents=True, exist_ok=True)
    return asyncio.run(_walk(page_file, shots))


def hostile(page_file: Path) -> dict:
    return asyncio.run(_hostile(page_file))

"""The page itself: one HTML file holding its style, its script and the run's data (the index, then
one JSON block per chunk, parsed only when the page first needs it), so it opens offline, from any
folder, with no server. `serve` hands it out on loopback for a browser on another machine's tunnel."""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Sequence

from actors.report import redact
from actors.report.run_dir import write_text_atomic
from actors.report.view.run_data import PageData, page_data
from actors.report.view.tokens import ReplyPieces

PAGE_NAME = "view.html"
ASSETS = Path(__file__).resolve().parent


def write_page(root: Path, stage_order: Sequence[str]) -> Path:
    """runs/<name>/view.html for the run directory `root`, written whole at once (secrets blanked)."""
    page = root / PAGE_NAME
    write_text_atomic(page, render(page_data(root, stage_order, ReplyPieces())))
    return page


def render(data: PageData) -> str:
    blocks = [_json_block("index", data.index), *(_json_block(name, chunk) for name, chunk in data.chunks.items())]
    template = (ASSETS / "page.html").read_text()
    return (template.replace("/*STYLE*/", (ASSETS / "page.css").read_text())
            .replace("/*SCRIPT*/", (ASSETS / "page.js").read_text())
            .replace("<!--TITLE-->", _escape(data.index["run"]))
            .replace("<!--DATA-->", "\n".join(blocks)))


def _json_block(name: str, obj) -> str:
    # Field-wise redaction first (a string under a secret-named key), then "</" escaped so no text of
    # the run can close the block: an attempt's output is the policy's, and the policy may try.
    text = json.dumps(redact.redact(obj), ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    return f'<script type="application/json" id="data-{_escape(name)}">{text}</script>'


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def page_server(page: Path, port: int = 0) -> ThreadingHTTPServer:
    """A server on 127.0.0.1 that answers the page at / (and at its own name) and nothing else:
    the run directory beside it (checkpoints, configs) is not served."""
    body = page.read_bytes()

    class PageHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/", f"/{page.name}"):
                self.send_error(404, f"only the page is served here: /{page.name}")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class's name)
            return None  # one line per request would bury the URL the user needs

    return ThreadingHTTPServer(("127.0.0.1", port), PageHandler)


def page_url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/"

"""`swerve view RUN_DIR [--serve] [--port N]`: the run's trajectories and evals as one web page
(RUN_DIR/view.html, offline, self-contained); with --serve, also on http://127.0.0.1:PORT/ until
Ctrl-C or SIGTERM (for a browser that reaches this machine through an SSH tunnel)."""
from __future__ import annotations

import argparse
import signal
from pathlib import Path

from actors.report.view.page import page_server, page_url, write_page
from actors.stages.stage_cache import STAGES


def _view(args: argparse.Namespace) -> int:
    page = write_page(Path(args.run_dir), STAGES)
    print(f"[swerve] view: {page} (open it in a browser; it needs no network)", flush=True)
    if args.serve:
        server = page_server(page, args.port)
        print(f"[swerve] serving the view on {page_url(server)} (Ctrl-C ends it)", flush=True)
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill`, a supervisor's stop: the same clean end as Ctrl-C
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("[swerve] view server ended", flush=True)
        finally:
            server.server_close()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    view = sub.add_parser("view", help="a run's trajectories and evals as one offline web page (RUN_DIR/view.html)")
    view.add_argument("run_dir", help="the run's folder: runs/NAME (a pipeline's, a training run's or an eval's)")
    view.add_argument("--serve", action="store_true", help="also serve the page on 127.0.0.1 until Ctrl-C")
    view.add_argument("--port", type=int, default=0, help="the port for --serve (0 picks a free one)")
    view.set_defaults(func=_view)

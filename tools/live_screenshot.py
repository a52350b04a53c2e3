"""The screenshot of the live viewer in docs/live.md (docs/img/live.png).

A simulated scan (the 3D Shepp-Logan phantom on a 128 x 128 detector, as
``leveret live simulate`` sends it, 180 views over half a turn) is streamed
in this process into a ``LiveSession`` at 60 frames per second; a headless
Chromium (Playwright) opens the page, rotates the yz slice 25 degrees about
x, adds two axial slices and takes the picture once 150 projections are
shown.

    python tools/live_screenshot.py docs/img/live.png [--chromium /usr/bin/chromium]
"""
from __future__ import annotations

import argparse
import itertools
import tempfile
import time

import numpy as np

import leveret
from leveret.live import LiveReconstructor
from leveret.live.server import LiveServer, LiveSession
from leveret.live.sources import iterable_source
from leveret.phantom import shepp_logan_3d

N, VIEWS, SHOWN, RATE = 128, 180, 150, 60.0


def frames(projections, angles):
    """The scan's first SHOWN frames at RATE, then a quiet detector (the page keeps "receiving")."""
    yield from iterable_source(projections[:SHOWN], angles[:SHOWN], rate=RATE)
    for _ in itertools.count():
        time.sleep(0.1)
        yield None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the PNG to write")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    angles = np.linspace(0, np.pi, VIEWS, endpoint=False)
    geometry = leveret.ParallelGeometry(angles, N, N)
    projections = shepp_logan_3d(radius=0.45 * N).project(geometry).astype(np.float32)
    rec = LiveReconstructor(geometry.default_volume(), geometry, backend="cpu")
    session = LiveSession(rec, frames(projections, angles))
    server = LiveServer(session, port=0)
    url = server.start()
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        browser = p.chromium.launch_persistent_context(
            profile, executable_path=args.chromium, headless=True, viewport={"width": 1280, "height": 800},
            args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        page = browser.new_page()
        page.goto(url)
        page.wait_for_function("window.leveretLive.initialised")
        page.eval_on_selector("#angle-c", "e => { e.value = 25; e.dispatchEvent(new Event('input')); }")
        page.fill("#axial-z", "-20, 12")
        page.click("#axial-apply")
        session.start()
        page.wait_for_function(f"document.getElementById('slice-z1') && "
                               f"document.getElementById('slice-z1').dataset.views === '{SHOWN}' && "
                               f"document.getElementById('slice-yz').dataset.views === '{SHOWN}'",
                               timeout=120000)
        page.screenshot(path=args.out)
        browser.close()
    session.stop()
    server.stop()


if __name__ == "__main__":
    main()

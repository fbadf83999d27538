"""The dashboard in headless Chromium (Debian's, driven by Playwright; no browser download):
a real bandit run with a peer whose payloads are dropped, peer ids that hold HTML, 100 peers."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright  # noqa: E402

from genrl_swarm.dashboard.background import Background  # noqa: E402
from genrl_swarm.dashboard.hub import Hub  # noqa: E402
from genrl_swarm.dashboard.runs import RunWatcher  # noqa: E402
from genrl_swarm.run.events import EVENTS_FILE  # noqa: E402
from test_dashboard_data import tamper_reveal, write_rows  # noqa: E402

pytestmark = pytest.mark.slow  # Chromium

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Without the background-networking flags Chromium's own connections get refused many at a time here.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
EVIL = '<img src=x onerror="window.__pwned=1">'
#: Set to a path to keep the screenshot of the bandit run (docs/dashboard.png is made this way).
SCREENSHOT_ENV = "GENRL_SWARM_DASHBOARD_SCREENSHOT"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is needed (apt-get install chromium; make install does it)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


def open_page(browser: Browser, url: str) -> Page:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_selector("body[data-version]", timeout=20_000)
    assert not errors, errors
    return page


def texts(page: Page | Locator, selector: str) -> list[str]:
    return [t.strip() for t in page.locator(selector).all_text_contents()]


def test_the_page_shows_a_bandit_run_its_curves_leaderboard_and_a_dropped_payload(browser: Browser, bandit_recipe: Any, tmp_path: Path) -> None:
    from genrl_swarm.run.launcher import build_managers, run_managers

    managers, run = build_managers(bandit_recipe("game.max_rounds=6", "game.eval_every=3"))
    tamper_reveal(managers[2].comm, rounds={5})  # peer-2 reveals other bytes than it committed to (last round: quarantine slows the rest)
    run_managers(managers)
    last = {p: json.loads((Path(run.dir) / p / "metrics.jsonl").read_text().splitlines()[-1]) for p in ("peer-0", "peer-1", "peer-2")}
    expected_order = sorted(last, key=lambda p: (-last[p]["reward/cumulative"], -last[p]["wins"], p))

    with Background(Hub(RunWatcher([Path(run.dir)]), interval=0.1, min_push=0.2)) as url:
        page = open_page(browser, url)
        assert texts(page, "#peers-body td[data-col=id]") == ["peer-0", "peer-1", "peer-2"]
        assert set(texts(page, "#peers-body td[data-col=backend]")) == {"InMemory"}  # InMemoryBackend
        chart = page.locator("#chart-reward")
        assert (chart.get_attribute("data-points"), chart.get_attribute("data-series")) == ("6", "4")  # 6 rounds; 3 peers + the swarm mean
        assert page.locator("#chart-eval").get_attribute("data-points") == "6"
        assert texts(page, "#leaderboard-local td.peer-id") == expected_order
        reason = "revealed payload does not match its commitment"
        if page.locator("#faults-more").is_visible():  # the newest dozen are shown at first
            page.click("#faults-more")
        faults = page.locator("#faults-body tr", has_text=reason)
        seen = sorted(tuple(texts(faults.nth(i), "td")[3:6]) for i in range(faults.count()))  # seen by, sender, kind
        # peer-0 and peer-1 each drop its payload in both stages, then quarantine it.
        assert seen == [(o, "peer-2", k) for o in ("peer-0", "peer-1") for k in ("bad payload", "bad payload", "quarantine")]
        assert any(reason in t for t in texts(page, "#peers-body tr[data-peer=peer-2] td[data-col=reasons] li"))
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        if os.environ.get(SCREENSHOT_ENV):
            page.screenshot(path=os.environ[SCREENSHOT_ENV], full_page=True)
        # Zoom by dragging over rounds; a new round then arrives without a reload and keeps the zoom.
        assert chart.get_attribute("data-x-range") == "0,5"
        page.locator("#chart-reward .u-over").scroll_into_view_if_needed()  # the mouse acts inside the viewport only
        box = page.locator("#chart-reward .u-over").bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2, steps=5)
        page.mouse.up()
        zoomed = chart.get_attribute("data-x-range")
        assert zoomed != "0,5" and 0.5 < float(zoomed.split(",")[0]) < float(zoomed.split(",")[1]) < 4.5, zoomed
        page.evaluate("window.__same_page = true")
        write_rows(Path(run.dir) / "peer-0" / "metrics.jsonl", [{**last["peer-0"], "round": 6}])
        expect(chart).to_have_attribute("data-points", "7", timeout=20_000)  # no wait_for_function: the page's CSP forbids eval
        assert page.evaluate("window.__same_page") is True and chart.get_attribute("data-x-range") == zoomed
        page.locator("#chart-reward .u-over").dblclick()
        expect(chart).to_have_attribute("data-x-range", "0,6")
        page.close()
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000


def test_a_peer_id_holding_html_is_shown_as_text_and_runs_nothing(browser: Browser, tmp_path: Path) -> None:
    observer, local_evil = tmp_path / "run" / "peer-0", '<b id="bold">x</b><script>window.__pwned=2</script>'
    rows = [
        {"round": r, "peer": "peer-0", "reward/own": 0.5, f"reward/peer/{EVIL}": 0.25, f"dropped/{EVIL}": 1, "reward/cumulative": r, "wins": 0}
        for r in range(3)
    ]
    write_rows(observer / "metrics.jsonl", rows)
    write_rows(
        observer / EVENTS_FILE,
        [
            {
                "t": 1.0,
                "kind": "drop",
                "round": 1,
                "stage": 0,
                "sender": EVIL,
                "drop": "payload",
                "reason": f"from {EVIL}: <svg onload=window.__pwned=3>",
            }
        ],
    )
    write_rows(
        tmp_path / "run" / "other" / "metrics.jsonl", [{"round": 0, "peer": local_evil, "reward/own": 0.1, "reward/cumulative": 9.0, "wins": 1}]
    )
    with Background(Hub(RunWatcher([tmp_path / "run"]), interval=0.05, min_push=0.05)) as url:
        page = open_page(browser, url)
        ids = texts(page, "#peers-body td[data-col=id]")
        assert EVIL in ids and local_evil in ids
        assert page.locator(f"#peers-body tr[data-peer='{EVIL}'] td[data-col=dropped]").text_content() == "3"
        assert texts(page, "#leaderboard-local td.peer-id")[0] == local_evil
        assert any(f"from {EVIL}: <svg onload=window.__pwned=3>" in t for t in texts(page, "#faults-body td.reason"))
        assert any(local_evil in t for t in texts(page, "#chart-reward .u-legend th"))
        assert page.evaluate("document.querySelectorAll('main img, main svg:not(.u-legend svg), main script, main b, #bold').length") == 0
        assert page.evaluate("window.__pwned") is None


def test_100_peers_are_paged_and_their_curves_downsampled(browser: Browser, tmp_path: Path) -> None:
    for p in range(100):
        write_rows(
            tmp_path / "run" / f"peer-{p:03d}" / "metrics.jsonl",
            [{"round": r, "peer": f"peer-{p:03d}", "reward/own": (r + p) / 400, "reward/cumulative": p / 10, "wins": 0} for r in range(300)],
        )
    with Background(Hub(RunWatcher([tmp_path / "run"]), max_points=100)) as url:
        page = open_page(browser, url)
        assert page.locator("#peer-page").text_content() == "page 1 of 4 · 100 peers"
        assert texts(page, "#peers-body td[data-col=id]") == [f"peer-{p:03d}" for p in range(25)]
        page.click("#peer-next")
        assert texts(page, "#peers-body td[data-col=id]")[0] == "peer-025"
        chart = page.locator("#chart-reward")
        assert chart.get_attribute("data-points") == "100"  # 300 rounds in 100 buckets
        assert chart.get_attribute("data-series") == "9"  # the leaderboard's top 8 and the swarm mean
        assert texts(page, "#leaderboard-local td.peer-id")[:2] == ["peer-099", "peer-098"]
        page.click("#peers-body tr[data-peer=peer-030]")  # picks it on top of the 8 shown
        assert chart.get_attribute("data-series") == "10"
        page.fill("#peer-filter", "peer-04")
        assert len(texts(page, "#peers-body td[data-col=id]")) == 10


def test_charts_without_data_are_hidden_or_say_no_data(browser: Browser, tmp_path: Path) -> None:
    peer = tmp_path / "run" / "peer-0"
    write_rows(peer / EVENTS_FILE, [{"t": 1.0, "kind": "start", "peer": "peer-0", "max_rounds": 3, "stages": 1}])
    with Background(Hub(RunWatcher([tmp_path / "run"]), interval=0.05, min_push=0.05)) as url:
        page = open_page(browser, url)
        expect(page.locator("#reward-empty")).to_be_visible()
        for hidden in ("#chart-reward", "#eval", "#times", "#marl", "#tasks"):
            expect(page.locator(hidden)).to_be_hidden()
        write_rows(peer / "metrics.jsonl", [{"round": r, "peer": "peer-0", "reward/own": r / 2, "reward/cumulative": r, "wins": 0} for r in range(2)])
        expect(page.locator("#chart-reward")).to_have_attribute("data-points", "2", timeout=20_000)
        expect(page.locator("#reward-empty")).to_be_hidden()
        expect(page.locator("#eval")).to_be_hidden()  # an LM run without evaluation: no empty frame
        expect(page.locator("#times")).to_be_hidden()
        page.close()


def test_a_finished_run_is_not_shown_live_and_each_run_says_where_it_is(browser: Browser, tmp_path: Path) -> None:
    old = 1_000_000_000.0  # 2001: long over
    for name, rounds in (("alpha", 3), ("beta", 1)):
        peer = tmp_path / name / "peer-0"
        write_rows(peer / EVENTS_FILE, [{"t": old, "kind": "start", "peer": "peer-0", "max_rounds": 3, "stages": 1}])
        write_rows(
            peer / "metrics.jsonl", [{"round": r, "peer": "peer-0", "reward/own": 0.5, "reward/cumulative": r, "wins": 0} for r in range(rounds)]
        )
        for f in (peer / EVENTS_FILE, peer / "metrics.jsonl"):
            os.utime(f, (old, old))
    with Background(Hub(RunWatcher([tmp_path / "alpha"]), interval=0.05, min_push=0.05)) as url:
        page = open_page(browser, url)
        expect(page.locator("#connection")).to_have_text("finished")
        assert page.locator("#connection").get_attribute("class") == "finished"
        assert texts(page, "#run-states li") == []  # one run: the badge says it
        page.close()
    with Background(Hub(RunWatcher([tmp_path / "alpha", tmp_path / "beta"]), interval=0.05, min_push=0.05)) as url:
        page = open_page(browser, url)
        expect(page.locator("#connection")).to_have_text("stopped")
        lines = texts(page, "#run-states li")
        assert lines[0] == "run alpha: 3 of 3 rounds, finished"
        assert lines[1].startswith("run beta: 1 of 3 rounds, stopped (no write for ") and lines[1].endswith(" h)"), lines
        write_rows(
            tmp_path / "beta" / "peer-0" / "metrics.jsonl", [{"round": 1, "peer": "peer-0", "reward/own": 0.5, "reward/cumulative": 1, "wins": 0}]
        )
        expect(page.locator("#connection")).to_have_text("live", timeout=20_000)  # beta writes again
        expect(page.locator("#run-states li").nth(1)).to_have_text("run beta: 2 of 3 rounds, running")
        page.close()


def test_the_metric_picker_plots_any_logged_key_for_two_runs_apart(browser: Browser, tmp_path: Path) -> None:
    from test_dashboard_metrics import game_row, two_runs

    evil_key = f"zz/{EVIL}"  # a key is a peer's text too
    runs = two_runs(tmp_path)
    write_rows(runs[0] / "peer-0" / "metrics.jsonl", [game_row("peer-0", 4, 4, **{evil_key: 1.0})])
    with Background(Hub(RunWatcher(runs), interval=0.05, min_push=0.05)) as url:
        page = open_page(browser, url)
        expect(page.locator("#metric")).to_be_visible()
        options = texts(page, "#metric-pick option")
        assert {"game/score", "train/loss", "reward/own", evil_key} <= set(options) and "dropped/peer-0" not in options
        chart = page.locator("#chart-metric")
        expect(chart).to_have_attribute("data-key", "game/score", timeout=20_000)  # the first key no other chart shows
        assert page.locator("#metric-pick").input_value() == "game/score"
        assert json.loads(chart.get_attribute("data-lines") or "[]") == ["alpha mean", "alpha/peer-0", "alpha/peer-1", "beta mean", "beta/peer-0"]
        assert (chart.get_attribute("data-points"), chart.get_attribute("data-series")) == ("5", "5")  # rounds 0-4; 3 peers + 2 runs' means
        page.select_option("#metric-pick", "train/loss")
        expect(chart).to_have_attribute("data-key", "train/loss", timeout=20_000)
        write_rows(runs[1] / "peer-0" / "metrics.jsonl", [game_row("peer-0", r, 0) for r in (5, 6)])
        expect(chart).to_have_attribute("data-points", "7", timeout=20_000)  # the picked key follows the run live
        page.select_option("#metric-pick", evil_key)
        expect(chart).to_have_attribute("data-key", evil_key, timeout=20_000)
        assert json.loads(chart.get_attribute("data-lines") or "[]") == ["alpha mean", "alpha/peer-0"]
        assert page.evaluate("window.__pwned") is None and page.evaluate("document.querySelectorAll('main img').length") == 0
        page.close()


def test_two_games_rank_apart_each_run_has_its_bar_and_held_out_accuracy_is_drawn(browser: Browser, tmp_path: Path) -> None:
    from test_dashboard_games import peer

    peer(tmp_path, "bandit", "peer-0", 4, 9.0, "bandit", 8)
    peer(tmp_path, "digits", "peer-0", 2, 0.5, "digits", 2, **{"heldout/accuracy": 0.5})
    write_rows(tmp_path / "digits" / "peer-0" / "metrics.jsonl", [{"round": 0, "peer": "peer-0", "reward/own": 0.1, "reward/cumulative": 0.1, "wins": 0,
                                                                  "heldout/accuracy_before": 0.25, "heldout/accuracy": 0.375}])  # fmt: skip
    with Background(Hub(RunWatcher([tmp_path / "bandit", tmp_path / "digits"]), interval=0.05, min_push=0.05)) as url:
        page = open_page(browser, url)
        expect(page.locator("#leaderboard-local h3.game")).to_have_count(2)
        assert texts(page, "#leaderboard-local h3.game") == ["game: bandit", "game: digits"]
        assert texts(page, "#leaderboard-local tbody td:first-child") == ["1", "1"]  # each first of its own game
        assert texts(page, "#run-states li span") == ["run bandit: 4 of 8 rounds, running", "run digits: 2 of 2 rounds, finished"]
        widths = [page.locator("#run-states li .bar-fill").nth(i).evaluate("e => e.style.width") for i in range(2)]
        assert widths == ["50%", "100%"]  # each run's own rounds
        expect(page.locator("#progress-one")).to_be_hidden()  # no bar mixing two runs' rounds
        expect(page.locator("#heldout")).to_be_visible()
        chart = page.locator("#chart-heldout")
        expect(chart).to_have_attribute("data-points", "3")  # rounds trained 0 (before), 1, 2
        assert chart.get_attribute("data-series") == "2"  # the peer and its run's mean
        page.close()

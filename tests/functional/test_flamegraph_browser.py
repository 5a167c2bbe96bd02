"""The SVG flame graph in a real browser (headless Chromium through Selenium): frames with
hover titles, click to zoom, reset, and search with its matched share."""
import os
import shutil
import time

import pytest

from conftest import Target
from daemon import Daemon


def browser():
    from selenium import webdriver  # python3-selenium, installed by scripts/setup.sh
    opts = webdriver.ChromeOptions()
    for a in ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'):
        opts.add_argument(a)
    return webdriver.Chrome(options=opts)


def test_svg_zoom_and_search_in_chromium():
    assert shutil.which('chromium') and shutil.which('chromedriver'), \
        'chromium and chromium-driver are needed (scripts/setup.sh installs them)'
    from selenium.webdriver.common.by import By
    d = Daemon()
    t = Target('/usr/bin/python3', 'busy.py')
    web = None
    try:
        d.ctl('attach', t.pid, '--rate', '250', check=True)
        time.sleep(3)
        # the folded text and the SVG must count the same samples: none may come in between
        # (under ASan in CI a few were stored between the two, and the shares differed)
        d.ctl('detach', t.pid, check=True)
        before, after = -1, d.rows('SELECT count(*) FROM samples')[0][0]
        while after != before:  # the writer commits once a second
            time.sleep(1.2)
            before, after = after, d.rows('SELECT count(*) FROM samples')[0][0]
        folded = d.ctl('flamegraph', t.pid, '--idle', '--format', 'folded', check=True).stdout
        counts = [(l.rsplit(' ', 1)[0], int(l.rsplit(' ', 1)[1])) for l in folded.splitlines()]
        total = sum(n for _, n in counts)
        spin = sum(n for s, n in counts if 'spin_inner' in s)
        svg = os.path.join(d.dir, 'flame.svg')
        d.ctl('flamegraph', t.pid, '--idle', '-o', svg, check=True)
        os.chmod(d.dir, 0o755)
        web = browser()
        web.get('file://' + svg)
        frames = web.find_elements(By.CSS_SELECTOR, 'g.f')

        def title(g):
            return g.find_element(By.TAG_NAME, 'title').get_attribute('textContent')

        def width(g):
            return float(g.find_element(By.TAG_NAME, 'rect').get_attribute('width'))

        def shown(g):
            return g.value_of_css_property('display') != 'none'

        names = [title(g) for g in frames]
        assert any(n.startswith('spin_inner (') for n in names)
        assert any(n.startswith('sleeper (') for n in names)
        assert all(' samples, ' in n for n in names)  # hover text: count and share
        middle = [g for g in frames if title(g).startswith('middle (')][0]
        sleeper = [g for g in frames if title(g).startswith('sleeper (')][0]
        assert 500 < width(middle) < 700 and shown(sleeper)  # about half the graph
        web.execute_script(
            "arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", middle)
        assert width(middle) == pytest.approx(1180) and not shown(sleeper)
        reset = web.find_element(By.ID, 'reset')
        assert reset.is_displayed()
        reset.click()
        assert width(middle) < 700 and shown(sleeper) and not reset.is_displayed()
        web.find_element(By.ID, 'search').click()
        prompt = web.switch_to.alert
        prompt.send_keys('spin_inner')
        prompt.accept()
        matched = web.find_element(By.ID, 'matched').get_attribute('textContent')
        assert matched.startswith('Matched: ')
        assert float(matched.split()[1].rstrip('%')) == pytest.approx(100.0 * spin / total,
                                                                     abs=0.01)
        hits = [g for g in frames if title(g).startswith('spin_inner (')]
        assert all(g.find_element(By.TAG_NAME, 'rect').get_attribute('fill') == 'rgb(230,0,230)'
                   for g in hits)
    finally:
        if web:
            web.quit()
        t.close()
        d.close()

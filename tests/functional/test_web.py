"""probectl web: the web view, served as the user, in a real browser (headless Chromium through
Selenium) against a real daemon and a real asyncio target.

The page loads from the URL probectl web prints (its token becomes a cookie), with no console
errors; a click path per page: the targets table, a target's live threads, its flame graph,
a query and its grid (and an error). Requests without the token, with another one, from
another origin or for another host name are refused; another user's server shows nothing of
root's process. Screenshots go to the build folder (web-screenshots/) for a person to look at.
"""
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import wait_for

BUILD = os.path.abspath(os.environ.get('PROBED_BUILD', os.path.join(
    os.path.dirname(os.path.abspath(__file__)), '..', '..', 'build')))
SHOTS = os.path.join(BUILD, 'web-screenshots')


class Web:
    """probectl web on a free port, for @daemon, as @user (None: root)."""

    def __init__(self, daemon, user=None, args=(), remote=None):
        """@remote: (host, transport template): probectl -H host web, not --socket."""
        if remote:
            cmd = [daemon.probectl, '-H', remote[0], '--transport', remote[1], 'web',
                   '--port', '0'] + list(args)
        else:
            cmd = [daemon.probectl, 'web', '--port', '0', '--socket', daemon.socket] + list(args)
        if user:
            cmd = ['setpriv', '--reuid=' + user, '--regid=' + user, '--init-groups'] + cmd
        self.err = tempfile.TemporaryFile(mode='w+')
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err,
                                     universal_newlines=True)
        line = self.proc.stdout.readline()
        assert line.startswith('probed web: http://127.0.0.1:'), line
        self.url = line.split()[-1]
        self.base, self.token = self.url.split('/?token=')

    def curl(self, path, *headers):
        """(status, body) of @path; @headers: "Name: value", or curl's own options ("-X")."""
        args = ['curl', '-s', '--max-time', '30', '-w', '\n%{http_code}']
        headers = list(headers)
        while headers:
            h = headers.pop(0)
            args += [h, headers.pop(0)] if h.startswith('-') else ['-H', h]
        out = subprocess.run(args + [self.base + path], stdout=subprocess.PIPE,
                             universal_newlines=True).stdout
        body, _, code = out.rpartition('\n')
        return int(code), body

    def close(self):
        self.proc.terminate()
        rc = self.proc.wait(timeout=10)
        self.err.seek(0)
        err = self.err.read()
        if rc != 0 or 'Sanitizer' in err:
            print(err)  # shown by pytest with the failure
        assert rc == 0 and 'Sanitizer' not in err, rc


def browser():
    from selenium import webdriver  # python3-selenium, installed by scripts/setup.sh
    opts = webdriver.ChromeOptions()
    for a in ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
              '--window-size=1400,900'):
        opts.add_argument(a)
    opts.set_capability('goog:loggingPrefs', {'browser': 'ALL'})
    return webdriver.Chrome(options=opts)


def click(web, css, text=None):
    """Clicks the element @css picks (with @text, if given), found again when the page
    redrew it meanwhile (the targets table is rebuilt every 2 s)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def once():
        try:
            for e in web.find_elements(By.CSS_SELECTOR, css):
                if text is None or e.text == text:
                    e.click()
                    return True
        except StaleElementReferenceException:
            pass
        return None
    wait_for(once, what='%s to click' % css)


def shot(web, name):
    time.sleep(0.8)  # d3-flame-graph's transitions (250 ms) and its labels after them
    os.makedirs(SHOTS, exist_ok=True)
    web.save_screenshot(os.path.join(SHOTS, name + '.png'))


def test_the_pages_in_chromium(daemon, target_factory):
    assert shutil.which('chromium') and shutil.which('chromedriver'), \
        'chromium and chromium-driver are needed (scripts/setup.sh installs them)'
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
    t = target_factory('/usr/bin/python3', 'taskspin.py')
    daemon.ctl('attach', t.pid, '--rate', '200', check=True)
    w, web = Web(daemon), None
    try:
        web = browser()
        web.get(w.url)
        assert 'token' not in web.current_url  # a cookie now, out of the address bar
        # the table is redrawn every 2 s: each look finds the row again
        def cells():
            rows = web.find_elements(By.CSS_SELECTOR, 'tr[data-pid="%d"]' % t.pid)
            return [td.text for td in rows[0].find_elements(By.TAG_NAME, 'td')] if rows else None
        tds = wait_for(cells, what='the target in the table')
        assert 'taskspin.py' in ' '.join(tds) and 'sampling' in tds, tds
        assert tds[3] == os.uname().nodename, tds
        wait_for(lambda: int((cells() or [''] * 8)[7] or 0) > 50, what='samples counted')
        shot(web, 'targets')

        # a target: its threads and their live stacks
        click(web, 'tr[data-pid="%d"] a.pid' % t.pid)
        threads = wait_for(lambda: web.find_elements(By.CSS_SELECTOR, '#target-threads .thread'),
                           what="the target's threads")
        text = web.find_element(By.ID, 'target-threads').text
        assert 'spin_plain' in text and 'MainThread' in text, text
        # locals on demand: spin()'s, in the thread that spins outside any task
        web.find_element(By.ID, 'target-locals').click()
        web.find_element(By.ID, 'target-read').click()
        names = wait_for(lambda: [d.text for d in web.find_elements(
            By.CSS_SELECTOR, '#target-threads dl.locals dt')] or None, what='locals shown')
        assert {'seconds', 'end', 'n'} <= set(names), names
        shot(web, 'target')
        web.find_element(By.ID, 'target-locals').click()

        # the flame graph of the last minute, by task (d3-flame-graph)
        web.find_element(By.CSS_SELECTOR, 'nav button[data-page="flame"]').click()
        web.find_element(By.ID, 'flame-pid').clear()
        web.find_element(By.ID, 'flame-pid').send_keys(str(t.pid))
        Select(web.find_element(By.ID, 'flame-since')).select_by_value('1m')
        web.find_element(By.ID, 'flame-tasks').click()
        web.find_element(By.ID, 'flame-draw').click()
        names = lambda: web.execute_script(
            "return [...document.querySelectorAll('#flame-chart g.frame')]"
            ".map(g => g.getAttribute('name'));")
        frames = wait_for(lambda: names() or None, what='the flame graph drawn')
        assert '<task alpha-task>' in frames and '<task beta-task>' in frames, frames[:20]
        whole = int(web.find_element(By.ID, 'flame-count').get_attribute('data-samples'))
        assert whole > 0
        shot(web, 'flame')
        # click to zoom: the breadcrumb reads the path to the frame clicked
        web.find_element(By.CSS_SELECTOR, '#flame-chart g.frame[name="<task alpha-task>"]').click()
        crumbs = wait_for(lambda: web.find_element(By.ID, 'flame-crumbs').text or None,
                          what='the breadcrumb')
        assert crumbs == 'all › <task alpha-task>', crumbs
        web.find_element(By.ID, 'flame-reset').click()
        # search: the share of the samples in a matching frame
        web.find_element(By.ID, 'flame-search').send_keys('spin_alpha')
        match = wait_for(lambda: web.find_element(By.ID, 'flame-match').text or None,
                         what='the search share')
        n, total = [int(x) for x in match.split()[1:4:2]]
        assert 0 < n < total, match
        # pick a window: drag on the strip over 6 s that ended 1 s before it was drawn
        wait_for(lambda: web.execute_script('return flame.strip && flame.strip.data[0].length'),
                 what='the strip drawn')
        over = web.find_element(By.CSS_SELECTOR, '#flame-strip .u-over')
        x0, x1 = web.execute_script(
            'const u = flame.strip, end = u.scales.x.max;'
            ' return [u.valToPos(end - 7, "x"), u.valToPos(end - 1, "x")];')
        left = -over.size['width'] / 2
        assert 0 <= x0 < x1 <= over.size['width'], (x0, x1, over.size)
        ActionChains(web).move_to_element_with_offset(over, left + x0, 0).click_and_hold() \
            .move_by_offset(x1 - x0, 0).release().perform()
        wait_for(lambda: 'picked' in web.find_element(By.ID, 'flame-pick').text,
                 what='the window picked')
        picked = wait_for(lambda: int(web.find_element(By.ID, 'flame-count').get_attribute(
            'data-samples')) if int(web.find_element(By.ID, 'flame-count').get_attribute(
                'data-samples')) != whole else None, what='the count of the picked window')
        assert picked > 0
        shot(web, 'flame-picked')
        # the diff of two windows: the picked one kept, the whole minute against it
        web.find_element(By.ID, 'flame-keep').click()
        web.find_element(By.ID, 'flame-unpick').click()
        wait_for(lambda: int(web.find_element(By.ID, 'flame-count').get_attribute(
            'data-samples')) > picked, what='the whole minute, more than the 6 s picked')
        web.find_element(By.ID, 'flame-diff').click()
        fills = wait_for(lambda: web.execute_script(
            "const t = [...document.querySelectorAll('#flame-chart g.frame title')]"
            ".map(e => e.textContent); return t.some(x => x.includes('against the baseline'))"
            " ? [...document.querySelectorAll('#flame-chart g.frame rect')]"
            ".map(r => r.getAttribute('fill')) : null;"), what='the diff drawn')
        # (the frames the search matched stay highlighted, #e600e6)
        assert all(f and (f.startswith('rgb(') or f == '#e600e6') for f in fills) and \
            any(f != 'rgb(235,235,235)' for f in fills), [f for f in fills if not f or f[:4] != 'rgb(']
        shot(web, 'flame-diff')
        # icicle, then sandwich: a function's callers and callees
        web.find_element(By.ID, 'flame-diff').click()
        Select(web.find_element(By.ID, 'flame-view')).select_by_value('icicle')
        wait_for(lambda: names() or None, what='the icicle drawn')
        Select(web.find_element(By.ID, 'flame-view')).select_by_value('sandwich')
        link = wait_for(lambda: [a for a in web.find_elements(
            By.CSS_SELECTOR, '#sandwich-table a') if a.text.startswith('spin_beta')],
            what='the function table')[0]
        link.click()
        wait_for(lambda: web.find_element(By.ID, 'sandwich-of').text.startswith('spin_beta'),
                 what='the sandwich of spin_beta')
        callers = web.execute_script(
            "return [...document.querySelectorAll('#sandwich-callers g.frame')]"
            ".map(g => g.getAttribute('name'));")
        assert '<task beta-task>' in callers, callers
        shot(web, 'flame-sandwich')

        # SQL: a query, its grid, and an error shown as probectl query shows it
        web.find_element(By.CSS_SELECTOR, 'nav button[data-page="sql"]').click()
        wait_for(lambda: 'sample_frames' in web.find_element(By.ID, 'sql-tables').text,
                 what='the tables listed')
        box = web.find_element(By.ID, 'sql-text')
        box.clear()
        box.send_keys("SELECT task, count(*) AS n FROM thread_states WHERE pid = %d"
                      " AND task = 'alpha-task' GROUP BY task" % t.pid)
        web.find_element(By.ID, 'sql-run').click()
        cells = wait_for(lambda: web.find_elements(By.CSS_SELECTOR, '#sql-grid tbody td'),
                         what='the result grid')
        assert cells[0].text == 'alpha-task' and int(cells[1].text) > 0, [c.text for c in cells]
        assert web.find_element(By.ID, 'sql-csv').is_displayed()
        shot(web, 'sql')
        severe = [e for e in web.get_log('browser') if e['level'] == 'SEVERE']
        assert severe == [], severe  # no console error on any page so far
        box.clear()
        box.send_keys('SELEC nothing')
        web.find_element(By.ID, 'sql-run').click()
        err = wait_for(lambda: web.find_element(By.ID, 'sql-error').text, what='the error')
        assert 'syntax error' in err, err
        # the one thing the console says now is the query's 400, which the page showed
        severe = [e for e in web.get_log('browser') if e['level'] == 'SEVERE']
        assert all('/v1/query' in e['message'] and '400' in e['message'] for e in severe), severe
    finally:
        if web:
            web.quit()
        w.close()
        daemon.ctl('detach', t.pid)


def test_without_the_token_or_from_elsewhere_refused(daemon):
    w = Web(daemon)
    try:
        bearer = 'Authorization: Bearer ' + w.token
        assert w.curl('/v1/targets')[0] == 403
        assert w.curl('/')[0] == 403
        assert w.curl('/v1/targets', 'Authorization: Bearer ' + w.token[:-1] + 'x')[0] == 403
        assert w.curl('/v1/targets', 'Cookie: probed_token=' + w.token[:-1])[0] == 403
        assert w.curl('/v1/targets', bearer)[0] == 200
        assert w.curl('/app.js', 'Cookie: probed_token=' + w.token)[0] == 200
        # another origin (a page elsewhere calling this one), another host name (DNS rebinding)
        assert w.curl('/v1/targets', bearer, 'Origin: http://evil.example')[0] == 403
        assert w.curl('/v1/targets', bearer, 'Sec-Fetch-Site: cross-site')[0] == 403
        assert w.curl('/v1/targets', bearer, 'Host: evil.example:%s'
                      % w.base.rsplit(':', 1)[1])[0] == 403
        code, body = w.curl('/v1/targets', bearer, 'Origin: ' + w.base)
        assert code == 200 and 'targets' in json.loads(body)
        assert w.curl('/nothing', bearer)[0] == 404
        # a slow call (a query running into the daemon's 10 s limit) holds up nothing else:
        # the page and other calls are answered meanwhile
        slow = subprocess.Popen(['curl', '-s', '--max-time', '60', '-H', bearer, '-X', 'POST',
                                 '--data', json.dumps({'sql': 'WITH RECURSIVE c(x) AS (SELECT 1'
                                                       ' UNION ALL SELECT x + 1 FROM c)'
                                                       ' SELECT count(*) FROM c'}),
                                 w.base + '/v1/query'], stdout=subprocess.PIPE,
                                universal_newlines=True)
        # ... and one whose client gives up before its answer: the answer is dropped, not
        # sent to a connection that is gone (ASan would see the request used after its free)
        gone = subprocess.Popen(['curl', '-s', '--max-time', '1', '-H', bearer, '-X', 'POST',
                                 '--data', json.dumps({'sql': 'WITH RECURSIVE c(x) AS (SELECT 2'
                                                       ' UNION ALL SELECT x + 1 FROM c)'
                                                       ' SELECT count(*) FROM c'}),
                                 w.base + '/v1/query'], stdout=subprocess.PIPE)
        time.sleep(0.5)
        t0 = time.monotonic()
        assert w.curl('/app.js', bearer)[0] == 200 and w.curl('/v1/status', bearer)[0] == 200
        assert time.monotonic() - t0 < 3 and slow.poll() is None
        out = slow.communicate(timeout=60)[0]
        assert 'error' in json.loads(out), out  # stopped by the daemon's limit, and said
        assert gone.wait(timeout=10) != 0  # curl gave up
        time.sleep(0.5)  # the dropped answer's turn on the loop
        assert w.curl('/app.js', bearer)[0] == 200
    finally:
        w.close()


def test_a_flood_of_idle_connections_is_bounded(daemon):
    """Any local user can connect to the port (the token is checked per request): 1,100 idle
    connections took every descriptor of probectl web (1,024 its limit) and a request with the
    token was never answered. Now it holds at most 2 x 128 (past 128 a request is answered
    503, at 256 it takes none until one closes), cuts a connection whose first request has not
    come within 10 s, and answers the token's request once the flood's are cut."""
    import resource
    import socket
    w = Web(daemon)
    conns = []
    try:
        port = int(w.base.rsplit(':', 1)[1])
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
        for _ in range(400):  # the 257th on wait in the backlog, then time out
            try:
                conns.append(socket.create_connection(('127.0.0.1', port), timeout=3))
            except OSError:
                break
        time.sleep(0.5)
        fds = len(os.listdir('/proc/%d/fd' % w.proc.pid))
        assert fds <= 2 * 128 + 16, fds  # (and its own: the listener, the loop, stdio)
        assert 256 <= len(conns) < 400, len(conns)
        wait_for(lambda: w.curl('/v1/status', 'Authorization: Bearer ' + w.token)[0] == 200, 30,
                 "the token's request answered once the idle ones were cut")
    finally:
        for c in conns:
            c.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        w.close()


def test_another_users_server_shows_nothing_of_roots(daemon, target_factory):
    from daemon import ensure_test_user
    user = ensure_test_user()
    os.chmod(daemon.socket, 0o666)
    t = target_factory('/usr/bin/python3', 'taskspin.py')
    daemon.ctl('attach', t.pid, check=True)
    w = Web(daemon, user=user)
    try:
        bearer = 'Authorization: Bearer ' + w.token
        code, body = w.curl('/v1/targets', bearer)
        assert code == 200 and json.loads(body)['targets'] == [], body
        code, body = w.curl('/v1/backtrace?pid=%d' % t.pid, bearer)
        assert code == 403 and 'spin' not in body, (code, body)
        code, body = w.curl('/v1/flamegraph?pid=%d&format=folded' % t.pid, bearer)
        assert 'spin' not in body, (code, body)
    finally:
        w.close()
        daemon.ctl('detach', t.pid)


def test_the_torch_memory_and_cluster_pages(daemon):
    """A real PyTorch job (Debian's python3-torch) traced: its torch page shows the step times,
    the step x module heat maps and the loss tracked; its memory page the RSS over time; the
    cluster page groups it by its stack; the targets page detaches it."""
    from selenium.webdriver.common.by import By
    from test_torch import Job, drained
    job = Job('mlp', 'train', 2, 6)
    w, web = Web(daemon), None
    try:
        daemon.ctl('torch', job.pid, 'on', '--exprs', 'loss@train', check=True)
        job.start()
        job.wait_done()
        drained(daemon, job.pid, job.steps)
        web = browser()
        web.get(w.url)
        click(web, 'tr[data-pid="%d"] a.pid' % job.pid, text='torch')
        # each step's time runs to the next one's start: the last has none
        wait_for(lambda: web.find_element(By.ID, 'torch-steps').get_attribute('data-steps')
                 == str(job.steps - 1), what='the steps charted',
                 explain=lambda: (web.find_element(By.ID, 'torch-steps').get_attribute(
                     'data-steps'), web.find_element(By.ID, 'status').text,
                     daemon.rows('SELECT count(*) FROM torch_step_times')))
        cells = web.find_elements(By.CSS_SELECTOR, '#torch-heat-time td[data-value]')
        assert len(cells) >= job.steps, len(cells)  # a cell per step and module (40 at most)
        modules = [th.text for th in web.find_elements(By.CSS_SELECTOR, '#torch-heat-time tr th')]
        assert {'fc1', 'fc2', 'MLP'} <= set(modules), modules
        assert web.find_elements(By.CSS_SELECTOR, '#torch-heat-memory td[data-value]')
        assert web.find_elements(By.CSS_SELECTOR, '#torch-vars .uplot'), 'no loss chart'
        assert 'loss@train' in web.find_element(By.ID, 'torch-vars').text or \
            'loss' in web.find_element(By.ID, 'torch-vars').text
        shot(web, 'torch')
        # memory: the RSS readings of the last hour
        web.find_element(By.CSS_SELECTOR, 'nav button[data-page="memory"]').click()
        web.find_element(By.ID, 'memory-read').click()
        wait_for(lambda: int(web.find_element(By.ID, 'memory-chart').get_attribute(
            'data-points') or 0) > 0, what='the memory readings charted')
        assert web.find_elements(By.CSS_SELECTOR, '#memory-chart .uplot')
        shot(web, 'memory')
        # cluster: a snapshot, the job in a group of its own with its stack
        web.find_element(By.CSS_SELECTOR, 'nav button[data-page="cluster"]').click()
        web.find_element(By.ID, 'cluster-read').click()
        group = wait_for(lambda: [g for g in web.find_elements(By.CSS_SELECTOR, '.group')
                                  if str(job.pid) in g.get_attribute('data-pids').split(',')],
                         what='the job grouped')[0]
        assert 'torchjob.py' in group.text, group.text
        shot(web, 'cluster')
        severe = [e for e in web.get_log('browser') if e['level'] == 'SEVERE']
        assert severe == [], severe
        # the targets page detaches it
        web.find_element(By.CSS_SELECTOR, 'nav button[data-page="targets"]').click()
        click(web, 'tr[data-pid="%d"] button.detach' % job.pid)
        wait_for(lambda: daemon.api('GET', '/v1/targets/%d' % job.pid)[1].get('state')
                 != 'sampling', what='detached')
    finally:
        if web:
            web.quit()
        w.close()
        job.close()


def test_another_node_through_the_transport(daemon, target_factory, tmp_path):
    """probectl -H HOST web: the page's calls and MCP's go to HOST's daemon through the
    transport (here `probectl proxy` on a link to the test daemon's socket, no local daemon
    asked), many at once through its one connection; an MCP tool that runs a probectl command
    runs it with the same -H."""
    t = target_factory('/usr/bin/python3', 'taskspin.py')
    daemon.ctl('attach', t.pid, check=True)
    wait_for(lambda: daemon.rows('SELECT count(*) FROM memory_usage WHERE pid = %d'
                                 % t.pid)[0][0] > 0, what='a memory reading')
    os.symlink(daemon.socket, str(tmp_path / 'nodeb.sock'))
    env_socket = os.environ.pop('PROBED_SOCKET', None)
    w = Web(daemon, remote=('nodeb', 'PROBED_SOCKET=%s/{host}.sock %s proxy'
                            % (tmp_path, daemon.probectl)))
    try:
        bearer = 'Authorization: Bearer ' + w.token
        calls = [subprocess.Popen(['curl', '-s', '--max-time', '60', '-H', bearer,
                                   w.base + '/v1/targets'], stdout=subprocess.PIPE,
                                  universal_newlines=True) for _ in range(8)]
        for c in calls:
            doc = json.loads(c.communicate(timeout=60)[0])
            assert t.pid in [x['pid'] for x in doc['targets']], doc
        code, body = w.curl('/mcp', bearer, '-X', 'POST', '--data', json.dumps(
            {'jsonrpc': '2.0', 'id': 1, 'method': 'tools/call',
             'params': {'name': 'memory', 'arguments': {'pid': t.pid}}}))
        result = json.loads(body)['result']
        assert code == 200 and not result['isError'], result
        assert str(t.pid) in result['content'][0]['text'], result
    finally:
        w.close()
        if env_socket is not None:
            os.environ['PROBED_SOCKET'] = env_socket
        daemon.ctl('detach', t.pid)

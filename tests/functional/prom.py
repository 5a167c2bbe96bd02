"""The real Prometheus (Debian's), scraping probed's /metrics, for the operations and torch
trace tests."""
import json
import os
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request

import pytest

from conftest import free_port, wait_for


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()



class Prometheus:
    """The real server (Debian's prometheus), scraping @targets every second."""

    def __init__(self, targets):
        if not shutil.which('prometheus'):
            pytest.fail('prometheus is not installed (scripts/setup.sh installs it)')
        self.dir = tempfile.mkdtemp(prefix='probed-prom-')
        self.port = free_port()
        conf = os.path.join(self.dir, 'prometheus.yml')
        with open(conf, 'w') as f:
            f.write('global: {scrape_interval: 1s, evaluation_interval: 1s}\n'
                    'scrape_configs:\n'
                    '  - job_name: probed\n'
                    '    static_configs: [{targets: [%s]}]\n'
                    % ', '.join("'%s'" % t for t in targets))
        self.log = open(os.path.join(self.dir, 'log'), 'w')
        self.proc = subprocess.Popen(
            ['prometheus', '--config.file=' + conf, '--storage.tsdb.path=' + self.dir + '/data',
             '--web.listen-address=127.0.0.1:%d' % self.port], stdout=self.log, stderr=self.log)
        wait_for(self.ready, 60, 'prometheus to be ready')

    def ready(self):
        try:
            return http_get('http://127.0.0.1:%d/-/ready' % self.port)[0] == 200
        except OSError:
            return False

    def query(self, expr):
        """The result vector of an instant query; fails on any error Prometheus reports."""
        url = 'http://127.0.0.1:%d/api/v1/query?%s' % (self.port,
                                                         urllib.parse.urlencode({'query': expr}))
        status, body = http_get(url)
        reply = json.loads(body)
        assert status == 200 and reply['status'] == 'success', (expr, body)
        return reply['data']['result']

    def value(self, expr):
        """The single value of @expr, or None while it has no result."""
        result = self.query(expr)
        return float(result[0]['value'][1]) if result else None

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

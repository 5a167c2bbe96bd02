#!/usr/bin/env python3
"""The slowest functional tests of a run, from the JUnit files pytest writes under
<build>/pytest/ (tests/CMakeLists.txt): where CI's minutes go.

usage: scripts/test-times.py [BUILD_DIR] [N]
"""
import glob
import os
import sys
import xml.etree.ElementTree as ET


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else 'build'
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    rows, suites = [], []
    for path in glob.glob(os.path.join(build, 'pytest', '*.xml')):
        suite = os.path.basename(path)[:-4]
        total = 0.0
        for case in ET.parse(path).iter('testcase'):
            t = float(case.get('time', 0))
            total += t
            rows.append((t, suite, case.get('name')))
        suites.append((total, suite))
    if not rows:
        sys.exit('no JUnit files under %s/pytest: run the functional tests first' % build)
    for total, suite in sorted(suites, reverse=True):
        print('%8.1f s  %s' % (total, suite))
    print()
    for t, suite, name in sorted(rows, reverse=True)[:top]:
        print('%8.1f s  %s::%s' % (t, suite, name))


if __name__ == '__main__':
    main()
